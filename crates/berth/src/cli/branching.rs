//! `snapshot`, `snapshots`, `restore` and `branch`: copies of instances' volumes (see
//! docs/branching.md), each followed on the domain's event stream with a progress bar. A
//! restore `--from` another worktree is a snapshot of that worktree's instance, then a restore
//! from it.

use std::path::Path;
use std::process::{Command as Process, ExitCode};
use std::time::Duration;

use anyhow::{Context, bail};
use berth_client::DomainId;
use berth_client::{
    BranchFrom, CopyEvent, CopyMethod, CopyState, DomainEvent, SnapshotView, UpCause,
};
use clap::Args;
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::instances::{resolve, say_moved_ports};
use super::{Conn, current_keys, ensure_domain, find_domain, load_project, print_json, ui};
use crate::client::{Client, OrSay};
use crate::repo::{Repo, generation, worktree_key};
use crate::ui::{Cell, ago, bytes};

/// How long a copy and the start after it may take before the command gives up waiting (the
/// copy goes on).
const WAIT: Duration = Duration::from_secs(900);

#[derive(Args, Debug)]
pub struct SnapshotArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the snapshot as JSON.
    #[arg(long)]
    json: bool,
    /// The instance's name in berth.toml (or its full key).
    name: String,
    /// The snapshot's name [default: snapshot-<time>].
    label: Option<String>,
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SnapshotsArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the snapshots as JSON.
    #[arg(long)]
    json: bool,
    /// Only this instance's (a name in berth.toml, or a full key).
    name: Option<String>,
    #[command(subcommand)]
    action: Option<SnapshotsAction>,
}

#[derive(clap::Subcommand, Debug)]
pub enum SnapshotsAction {
    /// Delete a snapshot and its storage (refused while volumes stand on its layers).
    Rm {
        /// The snapshot: its id (`snp:…`) or its name (the newest of that name).
        snapshot: String,
        /// Print what was deleted as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct RestoreArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the instance and the before-restore snapshot as JSON.
    #[arg(long)]
    json: bool,
    /// The instance's name in berth.toml (or its full key).
    name: String,
    /// The snapshot: its id (`snp:…`) or its name (the newest of that name).
    #[arg(required_unless_present = "from", conflicts_with = "from")]
    snapshot: Option<String>,
    /// Where the data comes from instead of a snapshot: the branch of another worktree (as
    /// `git worktree list` shows it; its instance of the same name is snapshotted first), or a
    /// snapshot's id or name.
    #[arg(long)]
    from: Option<String>,
    /// Keep no before-restore snapshot of what the restore replaces: it is deleted once the
    /// restore is done (berth.toml's `[retention] keep-before-restore = 0` does this for every
    /// restore).
    #[arg(long)]
    no_backup: bool,
}

#[derive(Args, Debug)]
pub struct BranchArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the instance as JSON.
    #[arg(long)]
    json: bool,
    /// The instance's name in berth.toml: this worktree's instance of that name is made.
    name: String,
    /// Where its data comes from: the branch of another worktree (as `git worktree list`
    /// shows it), a snapshot id (`snp:…`) or a snapshot's name.
    #[arg(long)]
    from: String,
}

pub(crate) async fn domain(client: &Client, repo: &Repo) -> anyhow::Result<DomainId> {
    match find_domain(client, repo).await? {
        Some(d) => Ok(d.resource_domain_id),
        None => bail!("this repository has no instances yet; run `berth up` first"),
    }
}

/// A snapshot named by id or by name (the newest of that name).
pub(crate) async fn find_snapshot(
    client: &Client,
    domain: &DomainId,
    wanted: &str,
) -> anyhow::Result<SnapshotView> {
    let all = client.api.snapshots(domain, None).await.or_say(client)?;
    all.into_iter()
        .find(|s| s.snapshot_id.as_str() == wanted || s.name == wanted)
        .with_context(|| format!("no snapshot of this repository has the id or name {wanted:?}; see `berth snapshots`"))
}

fn bar(live: bool, what: &str) -> Option<ProgressBar> {
    live.then(|| {
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner:.cyan} {prefix:.bold} [{bar:30}] {bytes}/{total_bytes} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_prefix(what.to_owned());
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    })
}

/// Follows the copy of `kind` for `key` on the domain's stream (opened before the request by
/// the caller) until it ends; answers its last event.
async fn follow_copy(
    events: &mut (
             impl futures_util::Stream<Item = Result<DomainEvent, berth_client::ClientError>> + Unpin
         ),
    client: &Client,
    kind: &str,
    key: &str,
    bar: Option<&ProgressBar>,
) -> anyhow::Result<CopyEvent> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let event = tokio::time::timeout_at(deadline, events.next())
            .await
            .context("the copy did not end in time; it goes on (see `berth snapshots`)")?;
        let Some(event) = event else {
            bail!("the daemon ended the event stream before the copy ended");
        };
        let event = event.or_say(client)?;
        if let DomainEvent::Copy { copy, .. } = event
            && copy.kind.as_str() == kind
            && copy.instance_key == key
        {
            if let Some(bar) = bar {
                if let Some(total) = copy.bytes_total {
                    bar.set_length(total);
                }
                bar.set_position(copy.bytes_done);
            }
            if copy.state != CopyState::Copying {
                return Ok(copy);
            }
        }
    }
}

/// Opens the domain's event stream and waits until it is subscribed (its first event).
async fn subscribe(
    client: &Client,
    domain: &DomainId,
) -> anyhow::Result<
    impl futures_util::Stream<Item = Result<DomainEvent, berth_client::ClientError>> + Unpin,
> {
    let mut events = Box::pin(client.api.events(domain, None));
    if let Some(first) = events.next().await {
        first.or_say(client)?;
    }
    Ok(events)
}

/// How a branch or a restore filled the volumes, for its last line: nothing to say for a copy.
fn layered(copy: &CopyEvent) -> &'static str {
    match copy.method {
        CopyMethod::Overlay => " (on the snapshot's layers: no byte copied)",
        _ => "",
    }
}

fn finish_bar(bar: Option<ProgressBar>, copy: &CopyEvent) -> anyhow::Result<()> {
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    if copy.state == CopyState::Failed {
        bail!(
            "the copy failed: {}",
            copy.message.as_deref().unwrap_or("no reason given")
        );
    }
    Ok(())
}

/// Takes a snapshot named `label` of the instance `key` and follows its copy to its end (with a
/// progress bar titled `bar` when there is one); answers the snapshot as it stands then and the
/// copy's last event.
pub(crate) async fn take_snapshot(
    client: &Client,
    domain: &DomainId,
    key: &str,
    label: &str,
    bar_title: Option<&str>,
) -> anyhow::Result<(SnapshotView, CopyEvent)> {
    let mut events = subscribe(client, domain).await?;
    let made = client
        .api
        .snapshot(domain, key, label)
        .await
        .or_say(client)?;
    let bar = bar_title.and_then(|title| bar(true, title));
    let copy = follow_copy(&mut events, client, "snapshot", key, bar.as_ref()).await?;
    finish_bar(bar, &copy)?;
    let done = client
        .api
        .snapshot_by_id(domain, &made.snapshot_id)
        .await
        .or_say(client)?;
    Ok((done, copy))
}

pub async fn snapshot(args: SnapshotArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect().await?;
    let domain = domain(&client, &repo).await?;
    let instance = resolve(&client, &domain, &repo, std::slice::from_ref(&args.name))
        .await?
        .remove(0);
    let label = args.label.unwrap_or_else(|| {
        format!(
            "snapshot-{}",
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        )
    });
    let (done, copy) = take_snapshot(
        &client,
        &domain,
        &instance.key,
        &label,
        ui.live.then_some(args.name.as_str()),
    )
    .await?;
    if args.json {
        print_json(&serde_json::to_value(&done)?);
    } else {
        let size: i64 = done.volumes.iter().filter_map(|v| v.bytes).sum();
        let interruption = match (copy.method, done.source_paused_ms) {
            (CopyMethod::Overlay, Some(ms)) => {
                format!(
                    "no byte copied; it restarted on new layers ({ms} ms from its stop to running)"
                )
            }
            (CopyMethod::Overlay, None) => "no byte copied: it stands on its layers".to_owned(),
            (_, Some(ms)) => format!("{ms} ms frozen"),
            (_, None) => "not frozen".to_owned(),
        };
        println!(
            "{} snapshot {} of {} ({}): {}, {interruption}",
            ui.ok_mark(),
            done.name,
            args.name,
            done.snapshot_id,
            bytes(size),
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn snapshots(args: SnapshotsArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect().await?;
    let domain = domain(&client, &repo).await?;
    if let Some(SnapshotsAction::Rm { snapshot, json }) = &args.action {
        let found = find_snapshot(&client, &domain, snapshot).await?;
        let deleted = client
            .api
            .delete_snapshot(&domain, &found.snapshot_id)
            .await
            .or_say(&client)?;
        if *json || args.json {
            print_json(&serde_json::json!({
                "deleted": found.snapshot_id.as_str(),
                "name": found.name,
                "removedVolumes": deleted.removed_volumes,
                "kept": deleted.kept,
            }));
        } else if deleted.kept.is_empty() {
            println!(
                "{} deleted snapshot {} of {} ({}) and its storage",
                ui.ok_mark(),
                found.name,
                found.instance_key,
                found.snapshot_id.as_str()
            );
        } else {
            let users: std::collections::BTreeSet<&String> =
                deleted.kept.iter().flat_map(|k| &k.users).collect();
            let users: Vec<&str> = users.into_iter().map(String::as_str).collect();
            println!(
                "{} deleted snapshot {} of {} ({}); {} of its volumes stay, as layers of {}, until \
                 nothing stands on them (then `berth prune` frees them; `berth df` lists them)",
                ui.ok_mark(),
                found.name,
                found.instance_key,
                found.snapshot_id.as_str(),
                deleted.kept.len(),
                users.join(", "),
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let key = match &args.name {
        Some(name) => Some(
            resolve(&client, &domain, &repo, std::slice::from_ref(name))
                .await?
                .remove(0)
                .key,
        ),
        None => None,
    };
    let list = client
        .api
        .snapshots(&domain, key.as_deref())
        .await
        .or_say(&client)?;
    if args.json {
        print_json(&serde_json::to_value(&list)?);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<Cell>> = list
        .iter()
        .map(|s| {
            vec![
                Cell::plain(&s.name),
                Cell::plain(&s.instance_key),
                Cell::state(s.state.as_str()),
                Cell::plain(bytes(s.volumes.iter().filter_map(|v| v.bytes).sum())),
                Cell::plain(ago(Some(s.created_at))),
                Cell::plain(s.snapshot_id.as_str()),
            ]
        })
        .collect();
    ui.table(&["NAME", "INSTANCE", "STATE", "SIZE", "TAKEN", "ID"], &rows);
    Ok(ExitCode::SUCCESS)
}

/// Where a restore takes its data from.
enum RestoreSource {
    /// A snapshot, named by id or name.
    Snapshot(SnapshotView),
    /// The live instance of the same name in the worktree on a branch, by key.
    Instance(String),
}

/// The snapshot named, or, for `--from BRANCH`, the live instance of the same name in the
/// worktree on that branch.
async fn restore_source(
    client: &Client,
    domain: &DomainId,
    repo: &Repo,
    (snapshot, from): (Option<&str>, Option<&str>),
    target: &str,
) -> anyhow::Result<RestoreSource> {
    let wanted = match (snapshot, from) {
        (Some(snapshot), _) => {
            return Ok(RestoreSource::Snapshot(
                find_snapshot(client, domain, snapshot).await?,
            ));
        }
        (None, Some(from)) => from,
        (None, None) => bail!("name a snapshot, or another worktree's branch with --from"),
    };
    let name = crate::repo::name_of_key(target);
    let source = if wanted.starts_with("snp:") {
        None
    } else {
        live_on_branch(client, domain, repo, name, wanted).await?
    };
    match source {
        Some(source) if source == target => {
            bail!("{wanted} is this worktree's branch: {target} cannot be restored from itself")
        }
        Some(source) => Ok(RestoreSource::Instance(source)),
        None => match find_snapshot(client, domain, wanted).await {
            Ok(snapshot) => Ok(RestoreSource::Snapshot(snapshot)),
            Err(_) if !wanted.starts_with("snp:") => bail!(
                "no worktree is on the branch {wanted} (see `git worktree list`), and no snapshot \
                 has that name"
            ),
            Err(e) => Err(e),
        },
    }
}

/// The key of the live instance `name` of the worktree on `branch`; `None` when no worktree
/// is on it, an error naming it when that worktree has none.
async fn live_on_branch(
    client: &Client,
    domain: &DomainId,
    repo: &Repo,
    name: &str,
    branch: &str,
) -> anyhow::Result<Option<String>> {
    let Some(top) = worktree_on_branch(repo, branch)? else {
        return Ok(None);
    };
    let base = crate::repo::instance_key(name, Some(&worktree_key(&top)));
    let live = client.api.instances(domain, false).await.or_say(client)?;
    let source = live
        .iter()
        .filter_map(|i| generation(&i.key, &base).map(|g| (g, i)))
        .max_by_key(|(g, _)| *g)
        .map(|(_, i)| i.key.clone())
        .with_context(|| {
            format!(
                "the worktree on {branch} ({}) has no live {name} instance",
                top.display()
            )
        })?;
    Ok(Some(source))
}

/// What a restore did.
pub(crate) struct RestoreDone {
    /// The daemon's answer: the before-restore snapshot among it.
    pub restored: berth_client::RestoreResponse,
    /// The restore copy's last event.
    pub copy: CopyEvent,
    /// The instance once running or failed after it.
    pub settled: berth_client::Settled,
    /// The snapshot restored from.
    pub from: SnapshotView,
    /// Whether that snapshot was taken of another worktree's instance for this restore.
    pub from_instance: bool,
}

/// Restores the instance `key` from a snapshot (by id or name) or, with `from`, from the live
/// instance of the same name in the worktree on that branch; follows the copies (with progress
/// bars when `bar_title` is given) and waits until the instance is running or failed.
pub(crate) async fn restore_into(
    client: &Client,
    domain: &DomainId,
    repo: &Repo,
    key: &str,
    wanted: (Option<&str>, Option<&str>),
    bar_title: Option<&str>,
) -> anyhow::Result<RestoreDone> {
    let source = restore_source(client, domain, repo, wanted, key).await?;
    let mut events = subscribe(client, domain).await?;
    let restored = match &source {
        RestoreSource::Snapshot(snapshot) => client
            .api
            .restore(domain, key, &snapshot.snapshot_id)
            .await
            .or_say(client)?,
        RestoreSource::Instance(source_key) => {
            // One request: the daemon takes a snapshot of the source, then restores from it.
            let restored = client
                .api
                .restore_from_instance(domain, key, source_key)
                .await
                .or_say(client)?;
            let bar = bar_title.and_then(|_| bar(true, source_key));
            let copy =
                follow_copy(&mut events, client, "snapshot", source_key, bar.as_ref()).await?;
            finish_bar(bar, &copy)?;
            restored
        }
    };
    let bar = bar_title.and_then(|title| bar(true, title));
    let copy = follow_copy(&mut events, client, "restore", key, bar.as_ref()).await?;
    finish_bar(bar, &copy)?;
    let settled = client
        .api
        .wait_for_state(domain, key, &["running", "failed"], WAIT, |_| true)
        .await
        .or_say(client)?;
    let from_instance = matches!(source, RestoreSource::Instance(_));
    let from = match &restored.source {
        Some(s) => client
            .api
            .snapshot_by_id(domain, &s.snapshot_id)
            .await
            .or_say(client)?,
        None => match source {
            RestoreSource::Snapshot(snapshot) => snapshot,
            RestoreSource::Instance(key) => bail!(
                "the daemon did not say which snapshot of {key} it restored from: it is older \
                 than this berth"
            ),
        },
    };
    Ok(RestoreDone {
        restored,
        copy,
        settled,
        from,
        from_instance,
    })
}

pub async fn restore(args: RestoreArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect().await?;
    let domain = domain(&client, &repo).await?;
    let instance = resolve(&client, &domain, &repo, std::slice::from_ref(&args.name))
        .await?
        .remove(0);
    // Read before the restore: a berth.toml that does not check fails the command before it
    // changes anything.
    let keep_none = args.no_backup
        || (repo.project_file().exists()
            && super::conn::load_project(&repo)?
                .retention
                .keep_before_restore
                == Some(0));
    let done = restore_into(
        &client,
        &domain,
        &repo,
        &instance.key,
        (args.snapshot.as_deref(), args.from.as_deref()),
        ui.live.then_some(args.name.as_str()),
    )
    .await?;
    let RestoreDone {
        restored,
        copy,
        settled,
        from,
        from_instance,
    } = done;
    // Asked to keep no before-restore snapshot: once the restore is done (the copy that fills
    // it has ended), it is deleted as `snapshots rm` would, layers others stand on kept.
    let discarded = if keep_none && restored.before_restore.state.as_str() != "failed" {
        Some(
            client
                .api
                .delete_snapshot(&domain, &restored.before_restore.snapshot_id)
                .await
                .or_say(&client)?,
        )
    } else {
        None
    };
    if args.json {
        let before = match discarded {
            Some(_) => serde_json::Value::Null,
            None => serde_json::to_value(&restored.before_restore)?,
        };
        print_json(&serde_json::json!({
            "instance": settled.instance,
            "beforeRestore": before,
            "source": from,
        }));
    } else {
        let what = match &args.from {
            Some(branch) if from_instance => format!(
                "{branch} ({}, kept as the snapshot {} ({}))",
                from.instance_key, from.name, from.snapshot_id
            ),
            _ => from.name.clone(),
        };
        let replaced = match discarded {
            Some(_) => {
                "is not kept (--no-backup, or [retention] keep-before-restore = 0)".to_owned()
            }
            None => format!(
                "is the snapshot {} ({})",
                restored.before_restore.name, restored.before_restore.snapshot_id
            ),
        };
        println!(
            "{} restored {} from {what}{}; what it replaced {replaced}",
            ui.ok_mark(),
            args.name,
            layered(&copy),
        );
    }
    Ok(if settled.instance.state.kind() == "running" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// For `berth up` of a new instance whose berth.toml table says `branch-from`: the key of the
/// live instance it is branched from, or `None` when it starts empty (no `branch-from`, or the
/// worktree named is this one). A branch that no worktree is on is an error naming it.
pub(super) async fn branch_source(
    client: &Client,
    domain: &DomainId,
    repo: &Repo,
    def: &crate::project::InstanceDef,
) -> anyhow::Result<Option<String>> {
    let Some(from) = def.branch_from.as_deref() else {
        return Ok(None);
    };
    if def.scope == crate::project::Scope::Shared {
        return Ok(None);
    }
    let base = if from == "shared" {
        def.name.clone()
    } else {
        let top = worktree_on_branch(repo, from)?.with_context(|| {
            format!(
                "instances.{}.branch-from names the branch {from}, and no worktree is on it \
                 (see `git worktree list`)",
                def.name
            )
        })?;
        if top == repo.top_level {
            return Ok(None);
        }
        crate::repo::instance_key(&def.name, Some(&worktree_key(&top)))
    };
    let live = client.api.instances(domain, false).await.or_say(client)?;
    let source = live
        .iter()
        .filter_map(|i| generation(&i.key, &base).map(|g| (g, i)))
        .max_by_key(|(g, _)| *g)
        .map(|(_, i)| i.key.clone())
        .with_context(|| {
            format!(
                "instances.{}.branch-from is {from}, and there is no live {} there to branch \
                 from; run `berth up` there first",
                def.name, def.name
            )
        })?;
    Ok(Some(source))
}

/// The top level of the worktree `git worktree list` shows on `branch`.
fn worktree_on_branch(repo: &Repo, branch: &str) -> anyhow::Result<Option<std::path::PathBuf>> {
    let out = Process::new("git")
        .arg("-C")
        .arg(&repo.top_level)
        .args(["worktree", "list", "--porcelain"])
        .output()
        .context("could not run git worktree list")?;
    if !out.status.success() {
        bail!(
            "git worktree list failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut path: Option<&str> = None;
    for line in text.lines() {
        if let Some(p) = line.strip_prefix("worktree ") {
            path = Some(p);
        } else if let Some(b) = line.strip_prefix("branch ")
            && (b == branch || b.strip_prefix("refs/heads/") == Some(branch))
            && let Some(p) = path
        {
            return Ok(Some(
                Path::new(p).canonicalize().unwrap_or_else(|_| p.into()),
            ));
        }
    }
    Ok(None)
}

/// Makes this worktree's instance of `def` with the data of `from`: the branch of another
/// worktree (its live instance of that name), a snapshot id or a snapshot's name; follows the
/// copy (with a progress bar when `bar_title` is given) and waits until the new instance is
/// running or failed. Answers its key, where it settled and the copy's last event.
pub(crate) async fn branch_into(
    client: &Client,
    domain: &DomainId,
    repo: &Repo,
    def: &crate::project::InstanceDef,
    from: &str,
    bar_title: Option<&str>,
) -> anyhow::Result<(String, berth_client::Settled, CopyEvent)> {
    let (key, live) = current_keys(client, domain, repo, &[def]).await?.remove(0);
    if live {
        bail!(
            "{} ({key}) exists in this worktree already, and a branch makes a new instance: \
             `berth restore {} --from {}` gives this one that data, keeping what it holds now \
             as a snapshot",
            def.name,
            def.name,
            from
        );
    }
    let from = if from.starts_with("snp:") {
        BranchFrom::Snapshot(find_snapshot(client, domain, from).await?.snapshot_id)
    } else if let Some(source) = live_on_branch(client, domain, repo, &def.name, from).await? {
        BranchFrom::Instance(source)
    } else if let Ok(snapshot) = find_snapshot(client, domain, from).await {
        BranchFrom::Snapshot(snapshot.snapshot_id)
    } else {
        bail!(
            "no worktree is on the branch {} (see `git worktree list`), and no snapshot has that name",
            from
        );
    };
    let spec = def.spec(Some(&repo.worktree_key));
    let mut events = subscribe(client, domain).await?;
    client
        .api
        .branch(domain, &key, &from, &spec, UpCause::Person)
        .await
        .or_say(client)?;
    let bar = bar_title.and_then(|title| bar(true, title));
    let copy = follow_copy(&mut events, client, "branch", &key, bar.as_ref()).await?;
    finish_bar(bar, &copy)?;
    let settled = client
        .api
        .wait_for_state(domain, &key, &["running", "failed"], WAIT, |_| true)
        .await
        .or_say(client)?;
    Ok((key, settled, copy))
}

pub async fn branch(args: BranchArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let repo = Repo::discover()?;
    let project = load_project(&repo)?;
    let def = project.select(std::slice::from_ref(&args.name))?.remove(0);
    let client = args.conn.endpoint().connect().await?;
    let domain = ensure_domain(&client, &repo).await?.resource_domain_id;
    let (key, settled, copy) = branch_into(
        &client,
        &domain,
        &repo,
        def,
        &args.from,
        ui.live.then_some(args.name.as_str()),
    )
    .await?;
    if let Ok(endpoints) = client.api.endpoints(&domain, &key).await {
        say_moved_ports(&key, &endpoints);
    }
    if args.json {
        print_json(&serde_json::to_value(&settled.instance)?);
    } else {
        println!(
            "{} {} ({key}) branched from {}{}: {}",
            ui.ok_mark(),
            args.name,
            args.from,
            layered(&copy),
            ui.state(settled.instance.state.kind())
        );
    }
    Ok(if settled.instance.state.kind() == "running" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
