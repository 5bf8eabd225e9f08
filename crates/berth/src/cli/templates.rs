//! `templates` and `templates rm`: the bases a new instance with `template = true` starts on
//! (see docs/branching.md).

use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::{Conn, print_json, ui};
use crate::client::OrSay;
use crate::repo::Repo;
use crate::ui::{Cell, ago, bytes};

#[derive(Args, Debug)]
pub struct TemplatesArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the templates as JSON.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    action: Option<TemplatesAction>,
}

#[derive(Subcommand, Debug)]
pub enum TemplatesAction {
    /// Delete a template and its volumes (refused while instances stand on it; the next
    /// instance that needs it makes it again).
    Rm {
        /// The template's id (12 hexadecimal digits, as `berth templates` lists it).
        id: String,
    },
}

pub async fn run(args: TemplatesArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect().await?;
    let domain = super::branching::domain(&client, &repo).await?;
    if let Some(TemplatesAction::Rm { id }) = &args.action {
        client
            .api
            .delete_template(&domain, id)
            .await
            .or_say(&client)?;
        if args.json {
            print_json(&serde_json::json!({"deleted": id}));
        } else {
            println!("{} deleted template {id} and its volumes", ui.ok_mark());
        }
        return Ok(ExitCode::SUCCESS);
    }
    let list = client.api.templates(&domain).await.or_say(&client)?;
    if args.json {
        print_json(&serde_json::to_value(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    if list.is_empty() {
        println!(
            "no templates yet: an instance with `template = true` in berth.toml makes one on its first start"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<Cell>> = list
        .iter()
        .map(|t| {
            vec![
                Cell::plain(&t.template_id),
                Cell::plain(short_image(&t.image)),
                Cell::state(t.state.as_str()),
                Cell::plain(bytes(t.volumes.iter().filter_map(|v| v.bytes).sum())),
                Cell::plain(t.users.len().to_string()),
                Cell::plain(
                    t.build_ms
                        .map_or_else(String::new, |ms| format!("{:.1} s", ms as f64 / 1000.0)),
                ),
                Cell::plain(ago(Some(t.created_at))),
            ]
        })
        .collect();
    ui.table(
        &["ID", "IMAGE", "STATE", "SIZE", "USERS", "SAVES", "MADE"],
        &rows,
    );
    Ok(ExitCode::SUCCESS)
}

/// The image without its digest's tail: `postgres:16@sha256:0123456789ab…`.
fn short_image(image: &str) -> String {
    match image.split_once("@sha256:") {
        Some((name, digest)) => format!("{name}@sha256:{}…", &digest[..digest.len().min(12)]),
        None => image.to_owned(),
    }
}
