//! `berth doctor`: checks what berth needs, one line each, and says what to fix.

use std::process::{Command, ExitCode, Output, Stdio};
use std::time::Duration;

use berth_core::image::PinnedImage;
use clap::Args;
use serde_json::{Value, json};

use super::{Conn, load_project, print_json, ui};
use crate::client::Client;
use crate::repo::Repo;

#[derive(Args, Debug)]
pub struct DoctorArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the checks as JSON.
    #[arg(long)]
    json: bool,
    /// The runtime the daemon serves with (as `berth serve --runtime`): with `swarm`, also
    /// check that the engine is a swarm manager and say what a swarm service cannot enforce.
    #[arg(long, env = "BERTH_RUNTIME", value_enum, default_value = "docker")]
    runtime: crate::serve::RuntimeKind,
}

struct Check {
    name: String,
    ok: bool,
    detail: String,
    fix: Option<String>,
}

impl Check {
    fn ok(name: &str, detail: impl Into<String>) -> Check {
        Check {
            name: name.to_owned(),
            ok: true,
            detail: detail.into(),
            fix: None,
        }
    }

    fn fail(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name: name.to_owned(),
            ok: false,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// How long one of doctor's own steps (a `docker` command) may take before it is named as
/// stalled.
const STEP: Duration = Duration::from_secs(30);

/// Why a bounded `docker` command gave no output.
enum Ran {
    /// It could not be started.
    Missing(std::io::Error),
    /// It did not end within [`STEP`]; it was killed. The sentence names it.
    Stalled(String),
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ran::Missing(e) => write!(f, "could not run the docker CLI: {e}"),
            Ran::Stalled(step) => f.write_str(step),
        }
    }
}

/// `docker args...`, given at most [`STEP`]: an engine that stalls does not stall doctor.
fn docker_bounded(args: &[&str]) -> Result<Output, Ran> {
    let child = Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Ran::Missing)?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(STEP) {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(Ran::Missing(e)),
        Err(_) => {
            if let Ok(pid) = i32::try_from(pid) {
                // SAFETY: a signal to the child this function started, which has not been
                // waited for (its waiting thread still runs).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            Err(Ran::Stalled(format!(
                "`docker {}` did not answer within {} s",
                args.join(" "),
                STEP.as_secs()
            )))
        }
    }
}

fn docker() -> Check {
    match docker_bounded(&["info", "--format", "{{.ServerVersion}}"]) {
        Ok(out) if out.status.success() => Check::ok(
            "docker",
            format!(
                "the Docker engine answers (version {})",
                first_line(&out.stdout)
            ),
        ),
        Ok(out) => Check::fail(
            "docker",
            format!("`docker info` failed: {}", first_line(&out.stderr)),
            "start Docker (or point DOCKER_HOST at it) and make sure you may use it (the docker group)",
        ),
        Err(e @ Ran::Missing(_)) => Check::fail(
            "docker",
            e.to_string(),
            "install Docker and put `docker` on PATH",
        ),
        Err(e @ Ran::Stalled(_)) => Check::fail(
            "docker",
            e.to_string(),
            "the engine (or what DOCKER_HOST points at) takes requests but does not answer: restart it",
        ),
    }
}

/// The engine's swarm state, and what the swarm runtime cannot enforce, as lines of their own.
fn swarm() -> Vec<Check> {
    let state = match docker_bounded(&[
        "info",
        "--format",
        "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}",
    ]) {
        Ok(out) if out.status.success() => first_line(&out.stdout),
        Ok(out) => first_line(&out.stderr),
        Err(e) => e.to_string(),
    };
    let mut checks = vec![if state == "active true" {
        Check::ok("swarm", "the engine is a swarm manager")
    } else {
        Check::fail(
            "swarm",
            format!("the swarm runtime needs a swarm manager; the engine says \"{state}\""),
            "run `docker swarm init` (docs/swarm.md), or serve with --runtime docker",
        )
    }];
    checks.extend(
        berth_swarm::SwarmRuntime::limitations()
            .iter()
            .map(|limit| Check::ok("swarm limit", format!("on the swarm runtime: {limit}"))),
    );
    checks
}

async fn image_check(image: &str) -> Check {
    let name = "image";
    let pinned = match PinnedImage::parse(image) {
        Ok(p) => p,
        Err(e) => {
            return Check::fail(
                name,
                format!("{image} {e}"),
                "pin the image by digest in berth.toml",
            );
        }
    };
    let local = match docker_bounded(&[
        "image",
        "inspect",
        "--format",
        "{{.Id}}",
        &pinned.repo_digest(),
    ]) {
        Ok(out) => out.status.success(),
        Err(e @ Ran::Stalled(_)) => {
            return Check::fail(
                name,
                e.to_string(),
                "the engine takes requests but does not answer: restart it",
            );
        }
        Err(Ran::Missing(_)) => false,
    };
    if local {
        return Check::ok(name, format!("{image} is on this machine"));
    }
    let Some(registry) = pinned
        .registry()
        .filter(|r| !matches!(*r, "docker.io" | "index.docker.io" | "registry-1.docker.io"))
    else {
        return Check::ok(
            name,
            format!(
                "{image} is not on this machine; berth pulls it from Docker Hub on first use (not checked here)"
            ),
        );
    };
    let url = format!("http://{registry}/v2/");
    let answer = match reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
    {
        Err(e) => Err(e.to_string()),
        Ok(c) => c.get(&url).send().await.map_err(|e| {
            let mut cause: &dyn std::error::Error = &e;
            while let Some(next) = cause.source() {
                cause = next;
            }
            cause.to_string()
        }),
    };
    match answer {
        Ok(res) => Check::ok(
            name,
            format!(
                "{image} is not on this machine; its registry answers at {url} ({}), so berth can pull it",
                res.status()
            ),
        ),
        Err(e) => Check::fail(
            name,
            format!(
                "{image} is not on this machine and its registry does not answer at {url} ({e})"
            ),
            format!(
                "start the registry {registry}, or pull the image yourself: docker pull {image}"
            ),
        ),
    }
}

/// Whether other berth stores have containers under the daemon's prefix: not a fault (the
/// daemon leaves them alone), but a person should know whose they are.
/// The daemon's own engine, as the daemon finds it (the `docker` line is the engine this
/// shell's `docker` reaches, which may be another).
fn daemon_engine(daemon: &berth_client::DaemonView) -> Check {
    match &daemon.engine {
        None => Check::ok(
            "engine",
            "not asked: the daemon runs no container runtime, or is older than this berth",
        ),
        Some(engine) => match &engine.unreachable {
            None => Check::ok(
                "engine",
                format!("the daemon's container engine ({}) answers", engine.runtime),
            ),
            Some(away) => Check::fail(
                "engine",
                crate::ui::engine_away(away),
                "start Docker (or fix what DOCKER_HOST pointed the daemon at when it started); \
                 the daemon reconnects and converges by itself",
            ),
        },
    }
}

fn engine_sharing(daemon: &berth_client::DaemonView) -> Check {
    let prefix = daemon.prefix.as_deref().unwrap_or("berth");
    if daemon.other_stores.is_empty() {
        return Check::ok(
            "store",
            format!(
                "the daemon's store {} is the only one with containers under the prefix {prefix}",
                daemon.store_id
            ),
        );
    }
    let others: Vec<String> = daemon
        .other_stores
        .iter()
        .map(|o| {
            let whose = match (&o.store_id, &o.data_dir) {
                (Some(id), Some(dir)) => format!("store {id} (data directory {dir})"),
                (Some(id), None) => format!("store {id}"),
                (None, _) => "an older berth without store labels".to_owned(),
            };
            format!("{} container(s) of {whose}", o.containers)
        })
        .collect();
    Check::ok(
        "store",
        format!(
            "the engine also holds {} under the prefix {prefix}; this daemon (store {}) leaves \
             them alone. To manage them, run berth with that --data-dir; to keep the two apart, \
             give one of them another --prefix",
            others.join(", "),
            daemon.store_id
        ),
    )
}

/// What holds the daemon's volumes, so that no prune takes them: every volume with its holder.
fn holders(daemon: &berth_client::DaemonView) -> Check {
    let Some(holders) = &daemon.holders else {
        return Check::ok(
            "holders",
            "not looked at yet: the daemon gives every volume a holder at its first resync",
        );
    };
    const SHOWN: usize = 20;
    let mut lines: Vec<String> = holders
        .held
        .iter()
        .take(SHOWN)
        .map(|h| format!("  {} holds {}", h.holder, h.volume))
        .collect();
    if holders.held.len() > SHOWN {
        lines.push(format!(
            "  and {} more (berth doctor --json, or docker ps -a --filter label=berth.holds)",
            holders.held.len() - SHOWN
        ));
    }
    let summary = format!(
        "{} volume(s) held, each by a container created and never started: docker volume \
         prune and docker volume rm leave them",
        holders.held.len()
    );
    let detail = std::iter::once(summary)
        .chain(lines)
        .collect::<Vec<_>>()
        .join("\n");
    if holders.unheld.is_empty() {
        return Check::ok("holders", detail);
    }
    let unheld: Vec<String> = holders
        .unheld
        .iter()
        .map(|u| format!("  {} is not held: {}", u.volume, u.reason))
        .collect();
    Check::fail(
        "holders",
        format!("{detail}\n{}", unheld.join("\n")),
        "see the daemon's log; a prune may take the volumes that are not held",
    )
}

/// The repository's instances whose data was removed outside berth (a `docker volume rm`, a
/// prune of a volume no holder kept): failed, with the volume named.
fn lost_data(instances: &[berth_client::InstanceView]) -> Check {
    let lost: Vec<String> = instances
        .iter()
        .filter_map(|i| match &i.state {
            berth_client::InstanceState::Failed { message, .. }
                if message.contains("removed outside berth") =>
            {
                Some(format!("  {}: {message}", i.key))
            }
            _ => None,
        })
        .collect();
    if lost.is_empty() {
        return Check::ok(
            "data",
            "every volume of this repository's instances is on the engine",
        );
    }
    Check::fail(
        "data",
        format!(
            "{} instance(s) lost data removed outside berth:\n{}",
            lost.len(),
            lost.join("\n")
        ),
        "restore a snapshot into each (berth restore NAME SNAPSHOT), or archive it and bring it up under another key",
    )
}

/// The repository's instances whose worktree was removed (`git worktree remove`, or its
/// directory deleted): stopped by berth, kept until `berth prune` archives them.
fn ended_worktrees(instances: &[berth_client::InstanceView]) -> Check {
    let ended: Vec<String> = instances
        .iter()
        .filter_map(|i| {
            let worktree = i.worktree.as_ref()?;
            worktree.ended_at?;
            Some(format!(
                "  {}: its worktree {} ({}) was removed",
                i.key,
                crate::ui::escape(&worktree.path),
                crate::ui::escape(worktree.branch.as_deref().unwrap_or("detached head"))
            ))
        })
        .collect();
    if ended.is_empty() {
        return Check::ok(
            "worktrees",
            "every worktree this repository's instances belong to is there",
        );
    }
    Check::fail(
        "worktrees",
        format!(
            "{} instance(s) belong to a removed worktree (berth stopped them):
{}",
            ended.len(),
            ended.join("\n")
        ),
        "berth prune archives them and frees their disk (berth prune --dry-run lists what it would free)",
    )
}

/// The repository's host endpoints whose port another program holds: nothing reaches the
/// instance there until it lets go.
async fn held_endpoints(
    client: &Client,
    domain: &berth_client::DomainId,
    instances: &[berth_client::InstanceView],
) -> Check {
    let mut held = Vec::new();
    for i in instances {
        let Ok(endpoints) = client.api.endpoints(domain, &i.key).await else {
            continue;
        };
        held.extend(
            endpoints
                .iter()
                .filter_map(|e| e.unavailable.as_deref())
                .map(|why| format!("  {}: {why}", i.key)),
        );
    }
    if held.is_empty() {
        return Check::ok(
            "endpoints",
            "berth listens on every host endpoint of this repository's instances",
        );
    }
    Check::fail(
        "endpoints",
        format!(
            "{} host endpoint(s) are held by another program:\n{}",
            held.len(),
            held.join("\n")
        ),
        "stop the program that holds the port (berth takes it back as soon as it is free), or archive the instance and up it again for another port",
    )
}

/// How branches and restores from a snapshot fill their volumes on the daemon's engine.
fn volume_layers(daemon: &berth_client::DaemonView) -> Check {
    let said = match daemon.volume_layers {
        Some(berth_client::CopyMethod::Overlay) => {
            "the engine mounts overlay volumes: a branch or restore from a snapshot stands on \
             its layers, made at once whatever the size of the data"
        }
        Some(berth_client::CopyMethod::Copy) => {
            "branches and restores copy every byte: the engine does not mount overlay volumes, \
             or the daemon runs with --volume-layers off"
        }
        _ => {
            "not asked yet: the daemon asks the engine whether it mounts overlay volumes at the \
             first branch or restore from a snapshot"
        }
    };
    Check::ok("layers", said.to_owned())
}

/// The repository's templates and the disk they hold; `None` when there is nothing to say
/// (no domain yet, and no instance asks for a template).
async fn templates(client: &Client, repo: &Repo, asked: bool) -> Option<Check> {
    let domain = match super::find_domain(client, repo).await {
        Ok(Some(d)) => d.resource_domain_id,
        Ok(None) if asked => {
            return Some(Check::ok(
                "templates",
                "none yet: an instance with template = true makes its template at its first start",
            ));
        }
        Ok(None) => return None,
        Err(e) => {
            return Some(Check::fail(
                "templates",
                format!("{e:#}"),
                "see the daemon's log",
            ));
        }
    };
    let list = match client.api.templates(&domain).await {
        Ok(list) => list,
        Err(e) => {
            let e = client.explain(e);
            return Some(Check::fail(
                "templates",
                format!("{e:#}"),
                "see the daemon's log",
            ));
        }
    };
    if list.is_empty() && !asked {
        return None;
    }
    let disk: i64 = list
        .iter()
        .flat_map(|t| t.volumes.iter().filter_map(|v| v.bytes))
        .sum();
    let users: usize = list.iter().map(|t| t.users.len()).sum();
    Some(Check::ok(
        "templates",
        if list.is_empty() {
            "none yet: an instance with template = true makes its template at its first start"
                .to_owned()
        } else {
            format!(
                "{} template(s) hold {} of disk; {users} instance volume(s) stand on them \
                 (`berth templates` lists them, `berth templates rm ID` deletes an unused one)",
                list.len(),
                crate::ui::bytes(disk)
            )
        },
    ))
}

/// Whether the login service (`berth service install`) is installed and running. Not having
/// one is no failure (the daemon may run by hand); one installed and stopped is.
fn login_service() -> Check {
    let name = "service";
    match super::service::State::read() {
        Err(e) => Check::ok(name, format!("not checked: {e:#}")),
        Ok(state) if state.installed && state.running == Ok(false) => Check::fail(
            name,
            state.sentence(),
            if cfg!(target_os = "macos") {
                "run `berth service install` again; its output is in ~/Library/Logs/berth.log"
            } else {
                "run `systemctl --user start berth`; `journalctl --user -u berth` says why it stopped"
            },
        ),
        Ok(state) => Check::ok(name, state.sentence()),
    }
}

/// Each berth.toml instance's preflight: whether `berth up` would succeed for it, and what it
/// would do.
async fn preflights(client: &Client, repo: &Repo, project: &crate::project::Project) -> Vec<Check> {
    let defs: Vec<&crate::project::InstanceDef> = project.instances.iter().collect();
    match super::preflight::preflight_all(client, repo, &defs).await {
        Ok(None) => vec![Check::ok(
            "preflight",
            "no domain yet: `berth up` makes it (`berth up --dry-run` checks again after)",
        )],
        Ok(Some(all)) => all
            .iter()
            .map(|p| {
                let name = format!("preflight {}", p.name);
                if p.ok() {
                    Check::ok(&name, p.summary())
                } else {
                    Check::fail(
                        &name,
                        p.summary(),
                        "correct berth.toml or the engine as the line says; `berth up --dry-run --json` shows the whole report",
                    )
                }
            })
            .collect(),
        Err(e) => vec![Check::fail(
            "preflight",
            format!("{e:#}"),
            "see the daemon's log",
        )],
    }
}

pub async fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let mut checks = vec![docker()];
    if args.runtime == crate::serve::RuntimeKind::Swarm {
        checks.extend(swarm());
    }

    let endpoint = args.conn.endpoint();
    let daemon_up = match endpoint.health().await {
        Ok(()) => {
            checks.push(Check::ok(
                "daemon",
                format!("berth answers at {}", endpoint.base()),
            ));
            true
        }
        Err(e) => {
            checks.push(Check::fail(
                "daemon",
                format!("{e:#}"),
                "run `berth serve` (in a checkout of berth: `cargo run --release -- serve`), or point --url or BERTH_URL at the daemon",
            ));
            false
        }
    };
    checks.push(login_service());
    let mut client = None;
    if daemon_up {
        let connected = endpoint.connect().await;
        let domains = match &connected {
            Ok(c) => c.api.domains().await.map_err(|e| c.explain(e)),
            Err(e) => Err(anyhow::anyhow!("{e:#}")),
        };
        if let Ok(c) = &connected
            && let Ok(daemon) = c.api.daemon().await
        {
            checks.push(daemon_engine(&daemon));
            checks.push(engine_sharing(&daemon));
            checks.push(volume_layers(&daemon));
            checks.push(holders(&daemon));
        }
        // What the key may do: everything, unless the daemon's grants file limits it.
        let may = match &connected {
            Ok(c) => match c.api.whoami().await {
                Ok(me) if me.restricted => {
                    let names: Vec<&str> = me.capabilities.iter().map(|c| c.as_str()).collect();
                    format!(
                        "; the grants file limits it to {}{}",
                        if names.is_empty() {
                            "nothing".to_owned()
                        } else {
                            names.join(", ")
                        },
                        if me.service_deployment_grants.is_empty() {
                            ""
                        } else {
                            " and per-domain grants (berth whoami)"
                        }
                    )
                }
                _ => String::new(),
            },
            Err(_) => String::new(),
        };
        match domains {
            Ok(domains) => checks.push(Check::ok("key", format!("the daemon accepts the service key ({} domain(s)){may}", domains.len()))),
            Err(e) => checks.push(Check::fail(
                "key",
                format!("{e:#}"),
                "use the key file of the daemon you run (--data-dir or BERTH_DATA_DIR) or set BERTH_SERVICE_KEYS",
            )),
        }
        client = connected.ok();
    } else {
        checks.push(Check::fail(
            "key",
            "not checked: the daemon does not answer",
            "start the daemon first",
        ));
    }

    match Repo::discover() {
        Err(e) => checks.push(Check::fail(
            "berth.toml",
            format!("{e:#}"),
            "run berth doctor inside the repository",
        )),
        Ok(repo) => match load_project(&repo) {
            Ok(project) => {
                checks.push(Check::ok(
                    "berth.toml",
                    format!(
                        "{} defines {} instance(s)",
                        project.path.display(),
                        project.instances.len()
                    ),
                ));
                let mut images: Vec<&str> =
                    project.instances.iter().map(|i| i.image.as_str()).collect();
                images.sort_unstable();
                images.dedup();
                for image in images {
                    checks.push(image_check(image).await);
                }
                if let Some(client) = &client {
                    checks.extend(preflights(client, &repo, &project).await);
                    let asked = project.instances.iter().any(|i| i.template);
                    checks.extend(templates(client, &repo, asked).await);
                    // The repository's live instances, read once for the checks on them.
                    if let Ok(Some(domain)) = super::find_domain(client, &repo).await
                        && let Ok(instances) = client
                            .api
                            .instances(&domain.resource_domain_id, false)
                            .await
                    {
                        checks.push(lost_data(&instances));
                        checks.push(ended_worktrees(&instances));
                        checks.push(
                            held_endpoints(client, &domain.resource_domain_id, &instances).await,
                        );
                    }
                }
            }
            Err(e) => {
                let detail = match e.downcast_ref::<crate::project::ProjectErrors>() {
                    Some(p) => p.0.join("\n"),
                    None => format!("{e:#}"),
                };
                checks.push(Check::fail(
                    "berth.toml",
                    detail,
                    "correct berth.toml as the lines above say (docs/cli.md has its reference)",
                ));
            }
        },
    }

    let failed = checks.iter().filter(|c| !c.ok).count();
    if args.json {
        print_json(&Value::Array(
            checks
                .iter()
                .map(|c| json!({"check": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix}))
                .collect(),
        ));
    } else {
        for c in &checks {
            let mark = if c.ok { ui.ok_mark() } else { ui.fail_mark() };
            let pad = if ui.color {
                ""
            } else if c.ok {
                "  "
            } else {
                ""
            };
            let mut lines = c.detail.lines();
            println!("{mark}{pad} {}: {}", c.name, lines.next().unwrap_or(""));
            for more in lines {
                println!("       {more}");
            }
            if let Some(fix) = &c.fix {
                println!("       fix: {fix}");
            }
        }
        if failed > 0 {
            println!("{failed} check(s) failed");
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
