//! `whoami`: the key's public id, the consent label its workspaces' containers carry, and what
//! the key may do (the daemon's grants file; a key it does not name may do everything).

use std::process::ExitCode;

use clap::Args;

use super::{Conn, print_json};
use crate::client::OrSay;

#[derive(Args, Debug)]
pub struct WhoamiArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: WhoamiArgs) -> anyhow::Result<ExitCode> {
    let client = args.conn.endpoint().connect().await?;
    let me = client.api.whoami().await.or_say(&client)?;
    if args.json {
        print_json(&serde_json::to_value(&me)?);
        return Ok(ExitCode::SUCCESS);
    }
    let names = |caps: &[berth_client::Capability]| {
        caps.iter()
            .map(|c| c.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("key id         {} (from {})", me.key_id, client.key_source);
    println!("consent label  {}", me.consent_label_template);
    if me.restricted {
        let everywhere = if me.capabilities.is_empty() {
            "nothing but this".to_owned()
        } else {
            names(&me.capabilities)
        };
        println!("may            {everywhere} (the daemon's grants file limits this key)");
        for grant in &me.service_deployment_grants {
            println!(
                "  in {:<10}  {}",
                grant.service_id,
                names(&grant.capabilities)
            );
        }
    } else {
        println!("may            everything (the daemon's grants file does not name this key)");
    }
    Ok(ExitCode::SUCCESS)
}
