//! `df` and `prune`: where the repository's disk goes, and giving back what nothing needs any
//! more (see docs/cli.md, "A worktree's data from up to prune").

use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;

use crate::project::{MAX_KEEP_ARCHIVED_DAYS, MAX_KEEP_BEFORE_RESTORE};
use anyhow::bail;
use berth_client::{DiskItem, DiskKind, PruneReason, PruneReport, PruneRequest, WorktreeView};
use clap::Args;

use super::{Conn, print_json, ui};
use crate::client::OrSay;
use crate::repo::Repo;
use crate::ui::{Cell, ago, escape};

#[derive(Args, Debug)]
pub struct DfArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the daemon's answer as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct PruneArgs {
    #[command(flatten)]
    conn: Conn,
    /// List what would be removed and freed, and remove nothing.
    #[arg(long, short = 'n')]
    dry_run: bool,
    /// Prune without asking (for scripts); without it, berth asks on a terminal and refuses
    /// elsewhere.
    #[arg(long, short = 'y')]
    yes: bool,
    /// How many `before-restore` snapshots to keep per instance (berth.toml's `[retention]
    /// keep-before-restore`, else the daemon's `--keep-before-restore`, when left out).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_KEEP_BEFORE_RESTORE)))]
    keep_before_restore: Option<u32>,
    /// How many days to keep an archived instance's volumes (berth.toml's `[retention]
    /// keep-archived-days`, else the daemon's `--keep-archived-days`, when left out; 0: none).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=i64::from(MAX_KEEP_ARCHIVED_DAYS)))]
    keep_archived_days: Option<u32>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn size(n: Option<u64>) -> String {
    n.map_or_else(|| "?".to_owned(), |n| crate::ui::bytes(n as i64))
}

/// How a worktree key reads: its branch (or key), `this` for the worktree berth runs in, and
/// `removed` once it ended.
fn worktree_label(
    key: Option<&str>,
    trees: &BTreeMap<String, WorktreeView>,
    repo: &Repo,
) -> String {
    let Some(key) = key else {
        return "shared".to_owned();
    };
    let tree = trees.get(key);
    let name = tree
        .and_then(|t| t.branch.as_deref())
        .map_or_else(|| key.to_owned(), escape);
    let mut label = name;
    if key == repo.worktree_key {
        label.push_str(" (this)");
    }
    if tree.is_some_and(|t| t.ended_at.is_some()) {
        label.push_str(" (removed)");
    }
    label
}

pub async fn df(args: DfArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect().await?;
    let domain = super::branching::domain(&client, &repo).await?;
    let usage = client.api.disk_usage(&domain).await.or_say(&client)?;
    if args.json {
        print_json(&serde_json::to_value(&usage)?);
        return Ok(ExitCode::SUCCESS);
    }
    let trees: BTreeMap<String, WorktreeView> = client
        .api
        .worktrees(&domain)
        .await
        .or_say(&client)?
        .into_iter()
        .map(|t| (t.worktree_key.clone(), t))
        .collect();
    // By worktree: what its units hold, and what removing them all would free is what `prune`
    // says; here each unit's own.
    let mut by_worktree: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for item in &usage.items {
        let label = worktree_label(item.worktree_key.as_deref(), &trees, &repo);
        let entry = by_worktree.entry(label).or_default();
        entry.0 += 1;
        entry.1 += item.bytes.unwrap_or(0);
    }
    println!(
        "{}: {} in {} unit(s), every layer counted once",
        crate::ui::escape(
            repo.domain_name
                .rsplit_once(' ')
                .map_or(&repo.domain_name, |(n, _)| n)
        ),
        size(usage.total_bytes),
        usage.items.len()
    );
    println!();
    let rows: Vec<Vec<Cell>> = by_worktree
        .iter()
        .map(|(label, (n, bytes))| {
            vec![
                Cell::plain(label),
                Cell::plain(n.to_string()),
                Cell::plain(size(Some(*bytes))),
            ]
        })
        .collect();
    ui.table(&["WORKTREE", "UNITS", "HOLDS"], &rows);
    println!();
    let rows: Vec<Vec<Cell>> = usage
        .items
        .iter()
        .map(|i: &DiskItem| {
            vec![
                Cell::plain(i.kind.as_str()),
                Cell::plain(escape(&i.name)),
                Cell::plain(worktree_label(i.worktree_key.as_deref(), &trees, &repo)),
                Cell::plain(size(i.bytes)),
                Cell::plain(size(i.frees)),
                Cell::plain(ago(i.since)),
            ]
        })
        .collect();
    ui.table(
        &["KIND", "NAME", "WORKTREE", "HOLDS", "FREES", "SINCE"],
        &rows,
    );
    if !usage.shared.is_empty() {
        println!();
        let rows: Vec<Vec<Cell>> = usage
            .shared
            .iter()
            .map(|s| {
                vec![
                    Cell::plain(&s.volume),
                    Cell::plain(size(s.bytes)),
                    Cell::plain(escape(&s.users.join(", "))),
                ]
            })
            .collect();
        ui.table(&["SHARED LAYER", "SIZE", "USED BY"], &rows);
    }
    Ok(ExitCode::SUCCESS)
}

fn reason(r: PruneReason) -> &'static str {
    match r {
        PruneReason::WorktreeEnded => "its worktree was removed",
        PruneReason::ArchivedPastRetention => "archived longer than kept",
        PruneReason::BeforeRestorePastCount => "more before-restore snapshots than kept",
        PruneReason::UnusedTemplate => "nothing stands on it",
        PruneReason::Orphan => "a deleted snapshot's layers, nothing stands on them now",
        PruneReason::Unknown => "unknown",
    }
}

fn print_report(report: &PruneReport, ui: &crate::ui::Ui) {
    if report.actions.is_empty() {
        println!("nothing to prune: every instance, snapshot and template is kept");
        return;
    }
    let rows: Vec<Vec<Cell>> = report
        .actions
        .iter()
        .map(|a| {
            let what = match a.kind {
                DiskKind::Instance => "archive, remove data",
                DiskKind::Archived => "remove data",
                _ => "remove",
            };
            vec![
                Cell::plain(a.kind.as_str()),
                Cell::plain(escape(&a.name)),
                Cell::plain(what),
                Cell::plain(reason(a.reason)),
                Cell::plain(size(a.frees)),
                Cell::plain(escape(&a.kept.join("; "))),
            ]
        })
        .collect();
    ui.table(
        &[
            "KIND",
            "NAME",
            "ACTION",
            "WHY",
            "FREES",
            "KEPT (OTHERS STAND ON IT)",
        ],
        &rows,
    );
}

pub async fn prune(args: PruneArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect().await?;
    let domain = super::branching::domain(&client, &repo).await?;
    // The flags, then berth.toml's `[retention]`, then (left out) the daemon's own.
    let retention = if repo.project_file().exists() {
        super::conn::load_project(&repo)?.retention
    } else {
        Default::default()
    };
    let mut request = PruneRequest {
        dry_run: true,
        keep_before_restore: args.keep_before_restore.or(retention.keep_before_restore),
        keep_archived_days: args.keep_archived_days.or(retention.keep_archived_days),
    };
    if !args.yes {
        let plan = client.api.prune(&domain, &request).await.or_say(&client)?;
        if args.json && args.dry_run {
            print_json(&serde_json::to_value(&plan)?);
            return Ok(ExitCode::SUCCESS);
        }
        if !args.json {
            print_report(&plan, &ui);
        }
        if args.dry_run || plan.actions.is_empty() {
            if !args.json && !plan.actions.is_empty() {
                println!(
                    "would free {} (dry run: nothing was removed)",
                    size(plan.freed_bytes)
                );
            }
            return Ok(ExitCode::SUCCESS);
        }
        if !std::io::stdin().is_terminal() {
            bail!(
                "berth prune removes data, so it asks first, and there is no terminal to ask on: \
                 pass --yes to prune without asking (--dry-run lists what it would remove)"
            );
        }
        eprint!("remove these and free {}? [y/N] ", size(plan.freed_bytes));
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            eprintln!("berth: nothing was removed");
            return Ok(ExitCode::FAILURE);
        }
    }
    request.dry_run = args.dry_run;
    let report = client.api.prune(&domain, &request).await.or_say(&client)?;
    if args.json {
        print_json(&serde_json::to_value(&report)?);
    } else if args.yes {
        print_report(&report, &ui);
    }
    if !args.json && !report.actions.is_empty() {
        let done = if report.dry_run {
            "would free"
        } else {
            "freed"
        };
        println!(
            "{} {done} {} in {} volume(s)",
            ui.ok_mark(),
            size(report.freed_bytes),
            report.removed_volumes.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
