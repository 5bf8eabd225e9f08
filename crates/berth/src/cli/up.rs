//! `berth up` and `berth start`: send each instance's spec with cause `person`, then wait until
//! each is running or failed, with a spinner per instance on a terminal and plain lines
//! otherwise, and print a table at the end.

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;

use super::{
    Conn, annotated, current_keys, domain_id, ensure_domain, load_project, print_json, scope_of, ui,
};
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
    /// Instance names from berth.toml [default: all of them].
    #[arg(value_name = "NAME")]
    names: Vec<String>,
}

/// How an instance's wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
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
    instance: Value,
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
fn settle(instance: &Value, sent_at: u128, steady: bool) -> Outcome {
    let fresh = state_time(instance)
        .and_then(millis)
        .is_some_and(|t| t >= sent_at);
    match state_kind(instance) {
        "running" if fresh || steady => Outcome::Running,
        "failed" if fresh => Outcome::Failed(crate::ui::escape(
            instance["state"]["message"].as_str().unwrap_or(""),
        )),
        "exited" if fresh => Outcome::Failed(match instance["state"]["exitCode"].as_i64() {
            Some(code) => format!(
                "its process exited with {code} before it was ready; berth keeps restarting it with a back-off (see `docker logs` of its container)"
            ),
            None => {
                "its process exited before it was ready; berth keeps restarting it with a back-off"
                    .to_owned()
            }
        }),
        "archived" => Outcome::Failed("it is archived".to_owned()),
        _ => Outcome::Waiting,
    }
}

/// What the instance is doing, for the progress line. A state from before the `up` is one the
/// daemon has not moved on from yet.
fn doing(instance: &Value, sent_at: u128) -> String {
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

pub fn run(args: UpArgs, verb: &str) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let repo = Repo::discover()?;
    let project = load_project(&repo)?;
    let selected = project.select(&args.names)?;
    let client = args.conn.endpoint().connect()?;
    let domain = domain_id(&ensure_domain(&client, &repo)?)?;

    let multi = ui
        .live
        .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
    let style = ProgressStyle::with_template("{spinner:.cyan} {prefix:.bold} {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .tick_strings(&["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏", " "]);
    let width = selected.iter().map(|d| d.name.len()).max().unwrap_or(0);

    // An archived key stays archived: an instance archived before comes up under the next
    // generation's key.
    let keys = current_keys(&client, &domain, &repo, &selected)?;

    let mut tracked: Vec<Tracked> = Vec::new();
    for (def, (key, _)) in selected.into_iter().zip(keys) {
        let spec = def.spec(Some(&repo.worktree_key));
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
            instance: Value::Null,
            outcome: Outcome::Waiting,
            shown: String::new(),
            bar,
            endpoints: Vec::new(),
        };
        let before = match client.instance(&domain, &key) {
            Ok(b) => b,
            Err(e) => {
                finish(&ui, &mut t, Outcome::Failed(format!("{e:#}")));
                tracked.push(t);
                continue;
            }
        };
        t.sent_at = now_millis();
        match client.up(&domain, &key, &spec, "person") {
            Ok(after) => {
                // The same spec on an instance already meant to run changes nothing: if it
                // runs (now, or once a start under way ends), it is there.
                t.steady = before.as_ref().is_some_and(|b| {
                    b["specDigest"] == after["specDigest"] && b["desired"] == "running"
                });
                t.instance = after;
                match settle(&t.instance, t.sent_at, t.steady) {
                    Outcome::Running => finish(&ui, &mut t, Outcome::Running),
                    _ => progress(&mut t),
                }
            }
            Err(e) => finish(&ui, &mut t, Outcome::Failed(format!("{e:#}"))),
        }
        tracked.push(t);
    }

    let deadline = Instant::now() + args.timeout;
    while tracked.iter().any(|t| t.outcome == Outcome::Waiting) {
        std::thread::sleep(Duration::from_millis(250));
        for t in tracked.iter_mut().filter(|t| t.outcome == Outcome::Waiting) {
            match client.instance(&domain, &t.key) {
                Ok(Some(now)) => {
                    t.instance = now;
                    match settle(&t.instance, t.sent_at, t.steady) {
                        Outcome::Waiting => progress(t),
                        done => finish(&ui, t, done),
                    }
                }
                Ok(None) => finish(
                    &ui,
                    t,
                    Outcome::Failed("it is gone from the daemon".to_owned()),
                ),
                Err(e) => finish(&ui, t, Outcome::Failed(format!("{e:#}"))),
            }
        }
        if Instant::now() > deadline {
            let timeout = humantime::format_duration(args.timeout);
            for t in tracked.iter_mut().filter(|t| t.outcome == Outcome::Waiting) {
                let msg = format!(
                    "still {} after {timeout} (--timeout); `berth ps` shows how it goes on",
                    state_kind(&t.instance)
                );
                finish(&ui, t, Outcome::Failed(msg));
            }
        }
    }
    // The finished lines stay on the screen, above the table.
    drop(multi);

    for t in tracked.iter_mut().filter(|t| !t.instance.is_null()) {
        t.endpoints = client.endpoints(&domain, &t.key).unwrap_or_default();
    }

    if args.json {
        print_json(&Value::Array(
            tracked
                .iter()
                .map(|t| {
                    let mut v = annotated(&t.instance, &repo);
                    if let Some(map) = v.as_object_mut() {
                        let eps: Vec<Value> = t
                            .endpoints
                            .iter()
                            .map(|(port, host, host_port)| {
                                serde_json::json!({"port": port, "host": host, "hostPort": host_port})
                            })
                            .collect();
                        map.insert("endpoints".into(), Value::Array(eps));
                    }
                    v
                })
                .collect(),
        ));
    } else {
        table(&ui, &repo, &tracked);
    }
    let failed: Vec<&Tracked> = tracked
        .iter()
        .filter(|t| matches!(t.outcome, Outcome::Failed(_)))
        .collect();
    for t in &failed {
        if let Outcome::Failed(msg) = &t.outcome {
            eprintln!("berth: {} ({}) failed to {verb}: {msg}", t.def.name, t.key);
        }
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Shows what a waiting instance is doing: the spinner's message, or a plain line on stderr
/// when it changes.
fn progress(t: &mut Tracked) {
    let line = doing(&t.instance, t.sent_at);
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

fn table(ui: &Ui, repo: &Repo, tracked: &[Tracked]) {
    let rows: Vec<Vec<Cell>> = tracked
        .iter()
        .map(|t| {
            let endpoints = if t.endpoints.is_empty() {
                "-".to_owned()
            } else {
                t.endpoints
                    .iter()
                    .map(|(port, host, host_port)| format!("{host}:{host_port}->{port}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let kind = if t.instance.is_null() {
                "unknown"
            } else {
                state_kind(&t.instance)
            };
            vec![
                Cell::plain(&t.def.name),
                Cell::plain(if t.instance.is_null() {
                    t.def.scope.as_str().to_owned()
                } else {
                    scope_of(&t.instance, repo)
                }),
                Cell::plain(&t.key),
                Cell::state(kind),
                Cell::plain(ago(state_time(&t.instance))),
                Cell::plain(endpoints),
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
        let running = |ms| json!({"state": {"kind": "running", "since": at(ms)}});
        let failed = |ms| json!({"state": {"kind": "failed", "at": at(ms), "message": "no image"}});
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
                &json!({"state": {"kind": "starting", "since": at(5_000)}}),
                1_000,
                true
            ),
            Outcome::Waiting
        );
    }
}
