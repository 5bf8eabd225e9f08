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
    /// Print only the label a container must carry to be linked to the workspace
    /// (`berth.workspace=<keyId>/<workspace>`), for `docker run --label`, and link nothing.
    #[arg(long, conflicts_with_all = ["selector", "containers"])]
    print_label: bool,
    /// Containers (names or ids) that should reach this worktree's instances by their aliases.
    /// Each must have been created with the workspace's label (see --print-label).
    containers: Vec<String>,
}

pub fn link(args: LinkArgs) -> anyhow::Result<ExitCode> {
    if !args.print_label && args.containers.is_empty() && args.selector.is_none() {
        bail!("name at least one container, or a --selector label, to link");
    }
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect()?;
    let workspace = args.workspace.unwrap_or_else(|| repo.worktree_key.clone());
    if args.print_label {
        let me = client.get("/v1/whoami")?;
        let Some(key_id) = me["keyId"].as_str() else {
            bail!("berth did not answer its key id");
        };
        println!("berth.workspace={key_id}/{workspace}");
        return Ok(ExitCode::SUCCESS);
    }
    let domain = super::ensure_domain(&client, &repo)?;
    let domain = super::domain_id(&domain)?;
    let selector = args.selector.map(|label| json!({ "label": label }));
    client.put(
        &format!("/v1/workspaces/{workspace}"),
        json!({"containers": args.containers, "selector": selector}),
    )?;
    client.put(
        &format!("/v1/resource-domains/{domain}/workspace-links/{workspace}"),
        json!({"worktreeKey": repo.worktree_key}),
    )?;
    // The workspace as it stands: a container may have been attached by the registration,
    // before the link call counted.
    let view = client.get(&format!("/v1/workspaces/{workspace}"))?;
    let attached = view["executors"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|e| e["kind"] == "container" && e["running"] == true)
                .count()
        })
        .unwrap_or(0);
    println!(
        "linked workspace {workspace} with worktree key {}: {attached} executor(s) attached",
        repo.worktree_key,
    );
    let not_attached = view["notAttached"].as_array().cloned().unwrap_or_default();
    for item in &not_attached {
        eprintln!(
            "berth: {} is not attached: {}",
            item["container"].as_str().unwrap_or_default(),
            item["reason"].as_str().unwrap_or_default()
        );
    }
    Ok(if not_attached.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
