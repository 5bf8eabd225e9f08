//! `berth logs [NAME...] [-f]`: an instance's output (several, or all of this worktree's,
//! interleaved line by line with each one's name in front, as Compose prints them), and
//! `berth link`: a container of yours reaches this worktree's instances by their aliases.

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
    /// Instance names in berth.toml (or full keys) [default: this worktree's instances and the
    /// shared ones]. With one, its output is printed as it is; with more, each line carries the
    /// instance's name in front.
    #[arg(value_name = "NAME")]
    names: Vec<String>,
}

/// The longest a line of several instances' output is kept waiting for its end: past it, what
/// came is printed as a line of its own.
const LONGEST_LINE: usize = 64 * 1024;

pub async fn logs(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect().await?;
    let Some(domain) = super::find_domain(&client, &repo).await? else {
        bail!("this repository has no instances yet: `berth up` starts them");
    };
    let domain = domain.resource_domain_id;
    let targets = resolve(&client, &domain, &repo, &args.names).await?;
    if targets.is_empty() {
        bail!("this worktree has no live instances: `berth up` starts them");
    }
    if args.names.len() != 1 || targets.len() != 1 {
        return interleaved(&client, &domain, &targets, args.tail, args.follow).await;
    }
    let key = &targets[0].key;
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

/// Several instances' output at once, a line at a time as it comes, each with `NAME | ` in
/// front (the names padded to one width).
async fn interleaved(
    client: &crate::client::Client,
    domain: &berth_client::DomainId,
    targets: &[berth_client::InstanceView],
    tail: u64,
    follow: bool,
) -> anyhow::Result<ExitCode> {
    let names: Vec<String> = targets
        .iter()
        .map(|t| crate::repo::name_of_key(&t.key).to_owned())
        .collect();
    let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let prefixes: Vec<String> = names.iter().map(|n| format!("{n:width$} | ")).collect();
    let mut streams = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let stream = client
            .api
            .logs(domain, &t.key, Some(tail), follow)
            .await
            .or_say(client)?;
        streams.push(stream.map(move |chunk| (i, chunk)).boxed());
    }
    let mut merged = futures_util::stream::select_all(streams);
    let mut partial: Vec<Vec<u8>> = vec![Vec::new(); targets.len()];
    let mut out = tokio::io::stdout();
    while let Some((i, chunk)) = merged.next().await {
        let chunk = chunk.or_say(client).context("the log stream broke off")?;
        partial[i].extend_from_slice(&chunk);
        while let Some(end) = partial[i].iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial[i].drain(..=end).collect();
            write_line(&mut out, &prefixes[i], &line).await?;
        }
        if partial[i].len() > LONGEST_LINE {
            let mut line = std::mem::take(&mut partial[i]);
            line.push(b'\n');
            write_line(&mut out, &prefixes[i], &line).await?;
        }
    }
    for (i, rest) in partial.into_iter().enumerate() {
        if !rest.is_empty() {
            let mut line = rest;
            line.push(b'\n');
            write_line(&mut out, &prefixes[i], &line).await?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn write_line(out: &mut tokio::io::Stdout, prefix: &str, line: &[u8]) -> anyhow::Result<()> {
    out.write_all(prefix.as_bytes())
        .await
        .context("writing the logs")?;
    out.write_all(line).await.context("writing the logs")?;
    out.flush().await.context("writing the logs")
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
