//! `berth ui`: opens the daemon's web page, signed in by a single-use link, on this
//! repository's project when it has one.

use std::process::{ExitCode, Stdio};

use clap::Args;

use berth_client::DomainId;

use super::Conn;
use crate::client::OrSay;
use crate::repo::Repo;

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

/// The repository's domain when this runs in a repository with a berth.toml whose domain
/// exists: the page to open after signing in. Anywhere else, the page opens on the list.
async fn this_project(client: &crate::client::Client) -> anyhow::Result<Option<DomainId>> {
    let Ok(repo) = Repo::discover() else {
        return Ok(None);
    };
    if !repo.project_file().is_file() {
        return Ok(None);
    }
    Ok(super::find_domain(client, &repo)
        .await?
        .map(|d| d.resource_domain_id))
}

/// The sign-in link, sent on to the project's page (`#code=CODE&open=d/ID`: the page trades
/// the code, then shows `#/d/ID`) when there is one.
fn link_to(url: &str, project: Option<&DomainId>) -> String {
    match project {
        Some(id) => format!("{url}&open=d/{}", id.as_str()),
        None => url.to_owned(),
    }
}

pub async fn run(args: UiArgs) -> anyhow::Result<ExitCode> {
    let client = args.conn.endpoint().connect().await?;
    let project = this_project(&client).await?;
    let link = client.api.sign_in_link().await.or_say(&client)?;
    let url = link_to(&link.url, project.as_ref());
    if args.print {
        println!("{url}");
        return Ok(ExitCode::SUCCESS);
    }
    for opener in openers() {
        let mut command = std::process::Command::new(&opener);
        if opener == "gio" {
            command.arg("open");
        }
        // The link goes to the opener as an argument of its own process, never to a log.
        let status = command
            .arg(&url)
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
    println!("{url}");
    Ok(ExitCode::SUCCESS)
}
