//! `berth logs NAME [-f]`: an instance's output, and `berth link`: a container of yours reaches
//! this worktree's instances by their aliases.

use std::process::ExitCode;

use anyhow::{Context, bail};
use berth_client::{ContainerRef, Executor, SelectorRequest, WorkspaceRequest};
use clap::Args;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use super::Conn;
use super::instances::resolve;
use crate::client::OrSay;
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

pub async fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect().await?;
    let Some(domain) = super::find_domain(&client, &repo).await? else {
        bail!("this repository has no instances yet: `berth up` starts them");
    };
    let domain = domain.resource_domain_id;
    let target = resolve(&client, &domain, &repo, std::slice::from_ref(&args.name)).await?;
    let key = &target[0].key;
    let mut stream = std::pin::pin!(
        client
            .api
            .logs(&domain, key, Some(args.tail), args.follow)
            .await
            .or_say(&client)?
    );
    let mut out = tokio::io::stdout();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.or_say(&client).context("the log stream broke off")?;
        out.write_all(&chunk)
            .await
            .context("the log stream broke off")?;
        out.flush().await.context("the log stream broke off")?;
    }
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

pub async fn link(args: LinkArgs) -> anyhow::Result<ExitCode> {
    if !args.print_label && args.containers.is_empty() && args.selector.is_none() {
        bail!("name at least one container, or a --selector label, to link");
    }
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect().await?;
    let workspace = args.workspace.unwrap_or_else(|| repo.worktree_key.clone());
    if args.print_label {
        let me = client.api.whoami().await.or_say(&client)?;
        println!("berth.workspace={}/{workspace}", me.key_id);
        return Ok(ExitCode::SUCCESS);
    }
    let domain = super::ensure_domain(&client, &repo)
        .await?
        .resource_domain_id;
    let request = WorkspaceRequest {
        containers: args.containers.into_iter().map(ContainerRef).collect(),
        selector: args.selector.map(|label| SelectorRequest { label }),
    };
    client
        .api
        .put_workspace(&workspace, &request)
        .await
        .or_say(&client)?;
    client
        .api
        .link(&domain, &workspace, &repo.worktree_key)
        .await
        .or_say(&client)?;
    // The workspace as it stands: a container may have been attached by the registration,
    // before the link call counted.
    let view = client.api.workspace(&workspace).await.or_say(&client)?;
    let attached = view
        .executors
        .iter()
        .filter(|e| matches!(e, Executor::Container { running: true, .. }))
        .count();
    println!(
        "linked workspace {workspace} with worktree key {}: {attached} executor(s) attached",
        repo.worktree_key,
    );
    for item in &view.not_attached {
        eprintln!("berth: {} is not attached: {}", item.container, item.reason);
    }
    Ok(if view.not_attached.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
