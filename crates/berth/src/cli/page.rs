//! `berth ui`: opens the daemon's web page, signed in by a single-use link.

use std::process::{ExitCode, Stdio};

use clap::Args;

use super::Conn;
use crate::client::OrSay;

#[derive(Args, Debug)]
pub struct UiArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the link instead of opening a browser (it works once, for two minutes).
    #[arg(long)]
    print: bool,
}

/// The programs tried, in order, to open a link: `$BROWSER` first when it is set.
fn openers() -> Vec<String> {
    let mut list = Vec::new();
    if let Ok(browser) = std::env::var("BROWSER")
        && !browser.trim().is_empty()
    {
        list.push(browser);
    }
    if cfg!(target_os = "macos") {
        list.push("open".into());
    } else {
        list.extend(["xdg-open".into(), "gio".into()]);
    }
    list
}

pub async fn run(args: UiArgs) -> anyhow::Result<ExitCode> {
    let client = args.conn.endpoint().connect().await?;
    let link = client.api.sign_in_link().await.or_say(&client)?;
    if args.print {
        println!("{}", link.url);
        return Ok(ExitCode::SUCCESS);
    }
    for opener in openers() {
        let mut command = std::process::Command::new(&opener);
        if opener == "gio" {
            command.arg("open");
        }
        // The link goes to the opener as an argument of its own process, never to a log.
        let status = command
            .arg(&link.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if status.is_ok_and(|s| s.success()) {
            eprintln!("berth: opened the web page in the browser (the link works once)");
            return Ok(ExitCode::SUCCESS);
        }
    }
    eprintln!(
        "berth: found no browser to open (set BROWSER); open this link yourself, once, within two minutes:"
    );
    println!("{}", link.url);
    Ok(ExitCode::SUCCESS)
}
