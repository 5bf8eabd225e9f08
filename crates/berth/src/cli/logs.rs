//! `berth logs NAME [-f]`: an instance's output, and `berth link`: a container of yours reaches
//! this worktree's instances by their aliases.

use std::process::ExitCode;

use anyhow::bail;
use clap::Args;
use serde_json::json;

use super::Conn;
use super::instances::resolve;
use crate::repo::Repo;

#[derive(Args, Debug)]
pub struct LogsArgs {
    #[command(flatten)]
    conn: Conn,
    /// Keep printing what the instance writes, until it stops or you press Ctrl-C.
    #[arg(long, short)]
    follow: bool,
    /// How many of the last lines to print first.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=100_000))]
    tail: u64,
    /// The instance's name in berth.toml.
    name: String,
}

pub fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect()?;
    let Some(domain) = super::find_domain(&client, &repo)? else {
        bail!("this repository has no instances yet: `berth up` starts them");
    };
    let domain = super::domain_id(&domain)?;
    let target = resolve(&client, &domain, &repo, std::slice::from_ref(&args.name))?;
    let key = target[0]["key"].as_str().unwrap_or_default().to_owned();
    let mut out = std::io::stdout().lock();
    client.logs(&domain, &key, args.tail, args.follow, &mut out)?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct LinkArgs {
    #[command(flatten)]
    conn: Conn,
    /// The workspace's id [default: this worktree's key].
    #[arg(long)]
    workspace: Option<String>,
    /// Containers carrying this label (`key=value`) are linked too, including ones started later.
    #[arg(long)]
    selector: Option<String>,
    /// Containers (names or ids) that should reach this worktree's instances by their aliases.
    containers: Vec<String>,
}

pub fn link(args: LinkArgs) -> anyhow::Result<ExitCode> {
    if args.containers.is_empty() && args.selector.is_none() {
        bail!("name at least one container, or a --selector label, to link");
    }
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect()?;
    let domain = super::ensure_domain(&client, &repo)?;
    let domain = super::domain_id(&domain)?;
    let workspace = args.workspace.unwrap_or_else(|| repo.worktree_key.clone());
    let selector = args.selector.map(|label| json!({ "label": label }));
    client.put(
        &format!("/v1/workspaces/{workspace}"),
        json!({"containers": args.containers, "selector": selector}),
    )?;
    let linked = client.put(
        &format!("/v1/resource-domains/{domain}/workspace-links/{workspace}"),
        json!({"worktreeKey": repo.worktree_key}),
    )?;
    println!(
        "linked workspace {workspace} with worktree key {}: {} executor(s) attached",
        repo.worktree_key,
        linked["attachedExecutors"].as_i64().unwrap_or(0)
    );
    Ok(ExitCode::SUCCESS)
}
