//! `berth up` and `berth start`: send each instance's spec with cause `person`, then wait until
//! each is running or failed, with a spinner per instance on a terminal and plain lines
//! otherwise, and print a table at the end.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use berth_client::{DomainId, InstanceState, InstanceView, UpCause};
use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

use super::endpoints::{endpoints_json, endpoints_text};
use super::instances::{endpoint_tuples, say_moved_ports};
use super::{Conn, annotated, current_keys, ensure_domain, load_project, print_json, scope_of, ui};
use crate::client::{Client, OrSay};
use crate::project::InstanceDef;
use crate::repo::Repo;
use crate::ui::{Cell, Ui, ago, millis, state_detail, state_kind, state_time};

#[derive(Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    conn: Conn,
    /// How long to wait for the instances to be running (or failed).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Print the instances as JSON at the end.
    #[arg(long)]
    json: bool,
    /// Ask the daemon what the up would do and whether it would succeed, and do nothing.
    #[arg(long)]
    dry_run: bool,
    /// Return once the daemon has each instance's spec, without waiting for it to run
    /// (Compose's `up -d`); `berth ps` shows where each got to.
    #[arg(short = 'd', long, conflicts_with = "wait")]
    detach: bool,
    /// Wait until each instance is running or failed: what `berth up` does anyway (Compose's
    /// `--wait`).
    #[arg(long)]
    wait: bool,
    /// InstanceView names from berth.toml [default: all of them].
    #[arg(value_name = "NAME")]
    names: Vec<String>,
}

/// How an instance's wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Waiting,
    Running,
    Failed(String),
}

struct Tracked<'a> {
    def: &'a InstanceDef,
    key: String,
    /// Milliseconds since the epoch just before `up` was sent: a state from before then is the
    /// old one, not the answer to this `up`.
    sent_at: u128,
    /// The `up` changed nothing the daemon acts on (the same spec, already meant to run), so
    /// a `running` state from before it still counts.
    steady: bool,
    instance: Option<InstanceView>,
    outcome: Outcome,
    shown: String,
    bar: Option<ProgressBar>,
    /// Its host endpoints once it has settled: `(container port, host, host port)`.
    endpoints: Vec<(u16, String, u16)>,
}

fn now_millis() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// Whether the instance has settled since `sent_at` (or, when `steady`, is running at all).
pub(crate) fn settle(instance: &InstanceView, sent_at: u128, steady: bool) -> Outcome {
    if let Some(away) = &instance.engine {
        return Outcome::Failed(format!(
            "{}; its spec is recorded, and it starts then",
            crate::ui::engine_away(away)
        ));
    }
    let fresh = state_time(instance)
        .and_then(millis)
        .is_some_and(|t| t >= sent_at);
    match &instance.state {
        InstanceState::Running { .. } if fresh || steady => Outcome::Running,
        InstanceState::Failed { message, .. } if fresh => {
            Outcome::Failed(crate::ui::escape(message))
        }
        InstanceState::Exited { exit_code, .. } if fresh => Outcome::Failed(match exit_code {
            Some(code) => format!(
                "its process exited with {code} before it was ready; berth keeps restarting it with a back-off"
            ),
            None => {
                "its process exited before it was ready; berth keeps restarting it with a back-off"
                    .to_owned()
            }
        }),
        InstanceState::Archived { .. } => Outcome::Failed("it is archived".to_owned()),
        _ => Outcome::Waiting,
    }
}

/// The state kinds an `up` waits for.
pub(crate) const SETTLED: [&str; 4] = ["running", "failed", "exited", "archived"];

/// What the instance is doing, for the progress line. A state from before the `up` is one the
/// daemon has not moved on from yet.
fn doing(instance: &InstanceView, sent_at: u128) -> String {
    let stale = state_time(instance)
        .and_then(millis)
        .is_some_and(|t| t < sent_at);
    if stale && state_kind(instance) != "starting" {
        return "starting".to_owned();
    }
    match state_kind(instance) {
        "not-started" => "waiting for its image and volumes".to_owned(),
        "starting" => "starting: waiting for its ready check".to_owned(),
        _ => state_detail(instance),
    }
}

pub async fn run(args: UpArgs, verb: &str) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let repo = Repo::discover()?;
    let project = load_project(&repo)?;
    let selected = project.select(&args.names)?;
    let client = args.conn.endpoint().connect().await?;
    if args.dry_run {
        return dry_run(&ui, &client, &repo, &selected, args.json).await;
    }
    let domain = ensure_domain(&client, &repo).await?.resource_domain_id;

    let multi = ui
        .live
        .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
    let style = ProgressStyle::with_template("{spinner:.cyan} {prefix:.bold} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .tick_strings(&["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏", " "]);
    let width = selected.iter().map(|d| d.name.len()).max().unwrap_or(0);

    // An archived key stays archived: an instance archived before comes up under the next
    // generation's key.
    let keys = current_keys(&client, &domain, &repo, &selected).await?;

    let mut tracked: Vec<Tracked> = Vec::new();
    for (def, (key, _)) in selected.into_iter().zip(keys) {
        let bar = multi.as_ref().map(|m| {
            let bar = m.add(ProgressBar::new_spinner());
            bar.set_style(style.clone());
            bar.set_prefix(format!("{:width$}", def.name));
            bar.set_message("sending its spec");
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        let mut t = Tracked {
            def,
            key: key.clone(),
            sent_at: now_millis(),
            steady: false,
            instance: None,
            outcome: Outcome::Waiting,
            shown: String::new(),
            bar,
            endpoints: Vec::new(),
        };
        let message = |line: String| {
            if let Some(bar) = &t.bar {
                bar.set_message(line);
            }
        };
        match send_up(&client, &domain, &repo, t.def, &key, message).await {
            Ok(sent) => {
                t.sent_at = sent.sent_at;
                t.steady = sent.steady;
                let outcome = settle(&sent.instance, t.sent_at, t.steady);
                t.instance = Some(sent.instance);
                match outcome {
                    Outcome::Running => finish(&ui, &mut t, Outcome::Running),
                    _ => progress(&mut t),
                }
            }
            Err(e) => finish(&ui, &mut t, Outcome::Failed(format!("{e:#}"))),
        }
        tracked.push(t);
    }

    // Every waiting instance at once, each through the client's one wait; none with `-d`.
    let deadline = Instant::now() + args.timeout;
    let waits = tracked
        .iter_mut()
        .filter(|t| t.outcome == Outcome::Waiting && !args.detach)
        .map(|t| wait(&client, &domain, &ui, t, deadline, args.timeout));
    futures_util::future::join_all(waits).await;
    if args.detach {
        for t in tracked.iter_mut().filter(|t| t.outcome == Outcome::Waiting) {
            if let Some(bar) = t.bar.take() {
                bar.finish_and_clear();
            }
        }
    }
    // The finished lines stay on the screen, above the table.
    drop(multi);

    for t in tracked.iter_mut().filter(|t| t.instance.is_some()) {
        let endpoints = client
            .api
            .endpoints(&domain, &t.key)
            .await
            .unwrap_or_default();
        say_moved_ports(&t.key, &endpoints);
        t.endpoints = endpoint_tuples(endpoints);
    }

    if args.json {
        print_json(&Value::Array(
            tracked
                .iter()
                .map(|t| {
                    let mut v = t
                        .instance
                        .as_ref()
                        .map_or(Value::Null, |i| annotated(i, &repo));
                    if let Some(map) = v.as_object_mut() {
                        map.insert("endpoints".into(), endpoints_json(&t.endpoints));
                    }
                    v
                })
                .collect(),
        ));
    } else {
        table(&ui, &repo, &tracked);
    }
    left_by_scope_change(&client, &domain, &repo, &tracked).await;
    let failed: Vec<&Tracked> = tracked
        .iter()
        .filter(|t| matches!(t.outcome, Outcome::Failed(_)))
        .collect();
    for t in &failed {
        if let Outcome::Failed(msg) = &t.outcome {
            eprintln!("berth: {} ({}) failed to {verb}: {msg}", t.def.name, t.key);
            if t.instance.is_some() {
                last_lines(&client, &domain, t).await;
            }
        }
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// What the daemon answered to an instance's `up`.
pub(crate) struct Sent {
    /// The instance as the `up` left it.
    pub instance: InstanceView,
    /// Milliseconds since the epoch just before the `up` was sent (see [`settle`]).
    pub sent_at: u128,
    /// The `up` changed nothing the daemon acts on (see [`settle`]).
    pub steady: bool,
}

/// Sends `def`'s spec for this worktree under `key` with cause `person`: a new instance whose
/// table says `branch-from` is branched from that worktree's (`message` hears of it), any other
/// is an `up`.
pub(crate) async fn send_up(
    client: &Client,
    domain: &DomainId,
    repo: &Repo,
    def: &InstanceDef,
    key: &str,
    message: impl Fn(String),
) -> anyhow::Result<Sent> {
    let spec = def.spec_json(Some(&repo.worktree_key));
    let before = match client.api.instance(domain, key).await {
        Ok(b) => Some(b),
        Err(e) if e.is("ResourceInstanceNotFoundError") => None,
        Err(e) => return Err(client.explain(e)),
    };
    // A new instance whose table says `branch-from` starts with that worktree's data.
    let source = if before.is_none() {
        super::branching::branch_source(client, domain, repo, def).await?
    } else {
        None
    };
    let sent_at = now_millis();
    let sent = match &source {
        Some(from) => {
            message(format!("branching from {from}"));
            client
                .api
                .branch(
                    domain,
                    key,
                    &berth_client::BranchFrom::Instance(from.clone()),
                    &spec,
                    UpCause::Person,
                )
                .await
        }
        None => {
            let request = berth_client::UpRequest {
                spec,
                cause: UpCause::Person,
                template: def.template,
            };
            client.api.up_request(domain, key, &request).await
        }
    };
    let after = sent.or_say(client)?;
    // The same spec on an instance already meant to run changes nothing: if it runs (now, or
    // once a start under way ends), it is there.
    let steady = before.as_ref().is_some_and(|b| {
        b.spec_digest == after.spec_digest && b.desired == berth_client::Desired::Running
    });
    Ok(Sent {
        instance: after,
        sent_at,
        steady,
    })
}

/// Names the instances a change of scope in berth.toml left running: this worktree's
/// instance of a name that is shared now, or the shared one of a name that is per worktree now.
/// Nothing is archived without being asked.
async fn left_by_scope_change(
    client: &Client,
    domain: &DomainId,
    repo: &Repo,
    tracked: &[Tracked<'_>],
) {
    let Ok(live) = client.api.instances(domain, false).await else {
        return;
    };
    for t in tracked {
        let shared_now = t.def.scope == crate::project::Scope::Shared;
        let other = repo.instance_key(&t.def.name, !shared_now);
        let Some(left) = live
            .iter()
            .filter(|i| crate::repo::generation(&i.key, &other).is_some())
            .max_by_key(|i| crate::repo::generation(&i.key, &other))
        else {
            continue;
        };
        let (now, before) = if shared_now {
            ("shared", "this worktree's")
        } else {
            ("per worktree", "the shared")
        };
        eprintln!(
            "berth: {name} is {now} in berth.toml now; {before} {name} from before ({key}) still \
             runs{others}: `berth archive {key}` archives it (its volumes are kept)",
            name = t.def.name,
            key = left.key,
            others = if shared_now {
                ""
            } else {
                ", and other worktrees may use it"
            },
        );
    }
}

/// How many of a failed instance's last lines `up` prints, and the most of them it reads.
const LAST_LINES: u64 = 10;
const LAST_BYTES: usize = 16 * 1024;

/// A failed instance's last lines of output, indented, and where to read the rest; nothing when
/// it wrote nothing (or the daemon cannot say).
async fn last_lines(client: &Client, domain: &DomainId, t: &Tracked<'_>) {
    let Ok(stream) = client
        .api
        .logs(domain, &t.key, Some(LAST_LINES), false)
        .await
    else {
        return;
    };
    let mut stream = std::pin::pin!(stream);
    let mut text = Vec::new();
    while let Some(Ok(chunk)) = futures_util::StreamExt::next(&mut stream).await {
        text.extend_from_slice(&chunk);
        if text.len() > LAST_BYTES {
            break;
        }
    }
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if !lines.is_empty() {
        eprintln!("  its last lines:");
        for line in lines.iter().rev().take(LAST_LINES as usize).rev() {
            eprintln!("  | {}", crate::ui::escape(line));
        }
    }
    eprintln!("  all of its output: berth logs {}", t.def.name);
}

/// Waits until `t` settles, fails, or `deadline`, showing its progress as it goes.
async fn wait(
    client: &Client,
    domain: &DomainId,
    ui: &Ui,
    t: &mut Tracked<'_>,
    deadline: Instant,
    timeout: Duration,
) {
    let (sent_at, steady, key) = (t.sent_at, t.steady, t.key.clone());
    let left = deadline.saturating_duration_since(Instant::now());
    let waited = client
        .api
        .wait_for_state(domain, &key, &SETTLED, left, |seen| {
            t.instance = Some(seen.clone());
            let outcome = settle(seen, sent_at, steady);
            if outcome == Outcome::Waiting {
                progress(t);
            }
            outcome != Outcome::Waiting
        })
        .await;
    match waited {
        Ok(settled) if settled.timed_out => {
            let msg = format!(
                "still {} after {} (--timeout); `berth ps` shows how it goes on",
                state_kind(&settled.instance),
                humantime::format_duration(timeout)
            );
            t.instance = Some(settled.instance);
            finish(ui, t, Outcome::Failed(msg));
        }
        Ok(settled) => {
            // The wait route answers only once berth acted on the `up`: its state counts
            // whenever it began.
            let outcome = match settle(&settled.instance, sent_at, steady) {
                Outcome::Waiting => settle(&settled.instance, 0, true),
                done => done,
            };
            t.instance = Some(settled.instance);
            finish(ui, t, outcome);
        }
        Err(e) if e.is("ResourceInstanceNotFoundError") => finish(
            ui,
            t,
            Outcome::Failed("it is gone from the daemon".to_owned()),
        ),
        Err(e) => {
            let e = client.explain(e);
            finish(ui, t, Outcome::Failed(format!("{e:#}")));
        }
    }
}

/// Shows what a waiting instance is doing: the spinner's message, or a plain line on stderr
/// when it changes.
fn progress(t: &mut Tracked) {
    let Some(instance) = &t.instance else {
        return;
    };
    let line = doing(instance, t.sent_at);
    if line == t.shown {
        return;
    }
    match &t.bar {
        Some(bar) => bar.set_message(line.clone()),
        None => eprintln!("{}: {line}", t.def.name),
    }
    t.shown = line;
}

fn finish(ui: &Ui, t: &mut Tracked, outcome: Outcome) {
    let line = match &outcome {
        Outcome::Running => format!("{} running", ui.ok_mark()),
        Outcome::Failed(msg) => format!("{} failed: {msg}", ui.fail_mark()),
        Outcome::Waiting => String::new(),
    };
    match &t.bar {
        Some(bar) => {
            bar.set_style(
                ProgressStyle::with_template("  {prefix:.bold} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.finish_with_message(line);
        }
        None => {
            let plain = match &outcome {
                Outcome::Running => "running".to_owned(),
                Outcome::Failed(msg) => format!("failed: {msg}"),
                Outcome::Waiting => String::new(),
            };
            eprintln!("{}: {plain}", t.def.name);
        }
    }
    t.outcome = outcome;
}

/// `berth up --dry-run`: each instance's preflight, one line each; fails when any up would.
async fn dry_run(
    ui: &Ui,
    client: &Client,
    repo: &Repo,
    selected: &[&InstanceDef],
    json: bool,
) -> anyhow::Result<ExitCode> {
    let Some(all) = super::preflight::preflight_all(client, repo, selected).await? else {
        let line = format!(
            "the domain {} does not exist yet: berth up would create it and every instance in it              (run berth up once to check the rest)",
            repo.domain_name
        );
        if json {
            print_json(
                &serde_json::json!({"domain": repo.domain_name, "exists": false, "message": line}),
            );
        } else {
            println!("{line}");
        }
        return Ok(ExitCode::SUCCESS);
    };
    if json {
        print_json(&Value::Array(all.iter().map(|p| p.json()).collect()));
    } else {
        let width = all.iter().map(|p| p.name.len()).max().unwrap_or(0);
        for p in &all {
            let mark = if p.ok() { ui.ok_mark() } else { ui.fail_mark() };
            println!("{mark} {:width$}  {}", p.name, p.summary());
        }
    }
    Ok(if all.iter().all(|p| p.ok()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn table(ui: &Ui, repo: &Repo, tracked: &[Tracked]) {
    let rows: Vec<Vec<Cell>> = tracked
        .iter()
        .map(|t| {
            let kind = t.instance.as_ref().map_or("unknown", state_kind);
            vec![
                Cell::plain(&t.def.name),
                Cell::plain(match &t.instance {
                    None => t.def.scope.as_str().to_owned(),
                    Some(i) => scope_of(i, repo),
                }),
                Cell::plain(&t.key),
                Cell::state(kind),
                Cell::plain(ago(t.instance.as_ref().and_then(state_time))),
                Cell::plain(endpoints_text(&t.endpoints)),
            ]
        })
        .collect();
    ui.table(
        &["NAME", "SCOPE", "KEY", "STATE", "SINCE", "ENDPOINTS"],
        &rows,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_state_newer_than_the_up_counts() {
        let at = |ms: u64| {
            humantime::format_rfc3339_millis(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
                .to_string()
        };
        let instance = |state: serde_json::Value| -> InstanceView {
            serde_json::from_value(json!({
                "resourceInstanceId": "rin:x", "key": "db", "alias": "db", "worktreeKey": null,
                "specDigest": "sha256:a", "desired": "running", "stopReason": null,
                "state": state, "observedAt": at(0), "startedAt": null, "lastReachedAt": null,
                "volumes": []
            }))
            .unwrap()
        };
        let running = |ms| instance(json!({"kind": "running", "since": at(ms)}));
        let failed = |ms| instance(json!({"kind": "failed", "at": at(ms), "message": "no image"}));
        assert_eq!(settle(&running(2_000), 1_000, false), Outcome::Running);
        assert_eq!(settle(&running(500), 1_000, false), Outcome::Waiting);
        assert_eq!(settle(&running(500), 1_000, true), Outcome::Running);
        assert_eq!(settle(&failed(999), 1_000, true), Outcome::Waiting);
        assert_eq!(
            settle(&failed(1_000), 1_000, false),
            Outcome::Failed("no image".into())
        );
        assert_eq!(
            settle(
                &instance(json!({"kind": "starting", "since": at(5_000)})),
                1_000,
                true
            ),
            Outcome::Waiting
        );
    }
}
