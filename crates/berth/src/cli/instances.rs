//! `ps`, `stop`, `archive`, `env` and `domains`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use berth_client::DomainId;
use berth_client::{DomainState, EndpointView, InstanceView};
use berth_core::decode::NAME_REFUSES;
use clap::Args;
use serde_json::{Value, json};

use super::endpoints::{endpoints_json, endpoints_text};
use super::{Conn, annotated, current_keys, find_domain, load_project, print_json, scope_of, ui};
use crate::client::{Client, OrSay};
use crate::repo::{Repo, generation, name_of_key};
use crate::ui::{Cell, ago, bytes, state_detail, state_kind, state_time};

#[derive(Args, Debug)]
pub struct PsArgs {
    #[command(flatten)]
    conn: Conn,
    /// List the archived instances instead of the live ones.
    #[arg(long)]
    archived: bool,
    /// Print the instances as JSON (the API's instances, with `name` and `scope` added).
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
pub struct StopArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the stopped instances as JSON.
    #[arg(long)]
    json: bool,
    /// InstanceView names from berth.toml (or full keys, `name@worktree`) [default: this worktree's
    /// instances and the shared ones].
    #[arg(value_name = "NAME")]
    names: Vec<String>,
}

/// `berth down`: Compose's verb for taking a project's services away.
#[derive(Args, Debug)]
pub struct DownArgs {
    #[command(flatten)]
    conn: Conn,
    /// Archive them instead of stopping them: their containers removed for good, their volumes
    /// kept (what `docker compose down` does to containers; no volume goes, unlike its `-v`).
    #[arg(long)]
    archive: bool,
    /// Print what was stopped (or archived) as JSON.
    #[arg(long)]
    json: bool,
    /// Instance names from berth.toml (or full keys) [default: this worktree's own instances;
    /// the shared ones, which other worktrees use, only when named].
    #[arg(value_name = "NAME")]
    names: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ArchiveArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the archived instances and their kept volumes as JSON.
    #[arg(long)]
    json: bool,
    /// InstanceView names from berth.toml (or full keys, `name@worktree`).
    #[arg(required = true, value_name = "NAME")]
    names: Vec<String>,
}

#[derive(Args, Debug)]
pub struct EnvArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the variables as one JSON object.
    #[arg(long)]
    json: bool,
    /// InstanceView names from berth.toml [default: all of them].
    #[arg(value_name = "NAME")]
    names: Vec<String>,
}

#[derive(Args, Debug)]
pub struct DomainsArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the domains as JSON.
    #[arg(long)]
    json: bool,
}

/// The repository, a client, and the repository's domain id if it has one yet.
async fn open(conn: &Conn) -> anyhow::Result<(Repo, Client, Option<DomainId>)> {
    let repo = Repo::discover()?;
    let client = conn.endpoint().connect().await?;
    let domain = find_domain(&client, &repo)
        .await?
        .map(|d| d.resource_domain_id);
    Ok((repo, client, domain))
}

/// Endpoints as `(container port, host, host port)`, as the project file's connect tables
/// take them.
pub(crate) fn endpoint_tuples(endpoints: Vec<EndpointView>) -> Vec<(u16, String, u16)> {
    endpoints
        .into_iter()
        .filter(|e| e.unavailable.is_none())
        .map(|e| (e.port, e.host, e.host_port))
        .collect()
}

/// The endpoints nothing listens on now (another program holds the port), each as a note:
/// `127.0.0.1:PORT->port is held by another program`.
fn unavailable_notes(endpoints: &[EndpointView]) -> Vec<String> {
    endpoints
        .iter()
        .filter(|e| e.unavailable.is_some())
        .map(|e| {
            format!(
                "{}:{}->{} is held by another program",
                e.host, e.host_port, e.port
            )
        })
        .collect()
}

/// Says, on stderr, each endpoint that did not get the host port its name had before (an
/// archived generation's): something else held it.
pub(super) fn say_moved_ports(key: &str, endpoints: &[EndpointView]) {
    let name = name_of_key(key);
    for e in endpoints {
        if let Some(before) = e.previous_host_port {
            eprintln!(
                "berth: {name} ({key}): host port {before}, which {name} had before, is taken; \
                 {} is now on {}",
                e.port, e.host_port
            );
        }
    }
}

/// The live instances `names` mean in this worktree: for each name, this worktree's instance of
/// that name, else the shared one; a name with `@` is a full key. No names: this worktree's
/// instances and the shared ones.
pub(crate) async fn resolve(
    client: &Client,
    domain: &DomainId,
    repo: &Repo,
    names: &[String],
) -> anyhow::Result<Vec<InstanceView>> {
    let live = client.api.instances(domain, false).await.or_say(client)?;
    if names.is_empty() {
        return Ok(live
            .into_iter()
            .filter(|i| {
                i.worktree_key.is_none()
                    || i.worktree_key.as_deref() == Some(repo.worktree_key.as_str())
            })
            .collect());
    }
    let mut out: Vec<InstanceView> = Vec::new();
    for name in names {
        let bases = if name.contains('@') {
            vec![name.clone()]
        } else {
            vec![
                repo.instance_key(name, false),
                repo.instance_key(name, true),
            ]
        };
        // An exact key first; then, for each base key, its newest live generation.
        let newest = |base: &String| {
            live.iter()
                .filter_map(|i| generation(key_of(i), base).map(|g| (g, i)))
                .max_by_key(|(g, _)| *g)
                .map(|(_, i)| i)
        };
        let exact = live.iter().find(|i| key_of(i) == name.as_str());
        // A name this worktree's instance and a shared one both answer to (a scope changed in
        // berth.toml leaves the other one running): which one is meant is not guessed.
        if bases.len() == 2
            && let (Some(own), Some(shared)) = (newest(&bases[0]), newest(&bases[1]))
        {
            bail!(
                "{name} names two live instances: this worktree's ({}) and the shared one ({}), \
                 left from before a change of its scope; give the full key of the one you mean \
                 (`berth archive {}` archives the one berth.toml no longer asks for)",
                own.key,
                shared.key,
                if repo_scope_is_shared(repo, name) {
                    &own.key
                } else {
                    &shared.key
                },
            );
        }
        let found = exact.or_else(|| bases.iter().find_map(newest));
        match found {
            Some(i) => {
                if !out.iter().any(|o| o.key == i.key) {
                    out.push(i.clone());
                }
            }
            None => {
                let archived = client.api.instances(domain, true).await.or_say(client)?;
                if let Some(gone) = archived.iter().find(|i| i.key == name.as_str()) {
                    bail!(
                        "the instance {} is archived: `berth ps --archived` lists the archived \
                         ones",
                        gone.key
                    );
                }
                match bases
                    .iter()
                    .find_map(|base| newest_archived(base, &archived))
                {
                    Some(gone) => bail!("{}", archived_note(name, &gone)),
                    None => bail!(
                        "no live instance {name:?} in this repository (looked for the key{} {}): \
                         `berth ps` lists them",
                        if bases.len() > 1 { "s" } else { "" },
                        bases.join(" and ")
                    ),
                }
            }
        }
    }
    Ok(out)
}

/// The newest archived generation of `base` among `archived`: its key, and the key the next
/// `berth up` makes.
pub(super) fn newest_archived(base: &str, archived: &[InstanceView]) -> Option<(String, String)> {
    let newest = archived
        .iter()
        .filter_map(|i| generation(&i.key, base))
        .max()?;
    let key = |g: u32| {
        if g <= 1 {
            base.to_owned()
        } else {
            format!("{base}.{g}")
        }
    };
    Some((key(newest), key(newest + 1)))
}

/// What to say of `name` when its newest instance is archived: which key that is, and which
/// key `berth up` makes next.
pub(super) fn archived_note(name: &str, (archived, next): &(String, String)) -> String {
    format!(
        "{name} has no live instance here: its last one, {archived}, is archived (`berth ps \
         --archived` lists it); `berth up {name}` starts a new one as {next}, on the same host \
         ports"
    )
}

fn key_of(instance: &InstanceView) -> &str {
    &instance.key
}

pub async fn ps(args: PsArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let (repo, client, domain) = open(&args.conn).await?;
    let mut items = match &domain {
        Some(d) => client
            .api
            .instances(d, args.archived)
            .await
            .or_say(&client)?,
        None => Vec::new(),
    };
    items.sort_by(|a, b| {
        (name_of_key(key_of(a)), a.worktree_key.as_deref(), key_of(a)).cmp(&(
            name_of_key(key_of(b)),
            b.worktree_key.as_deref(),
            key_of(b),
        ))
    });
    // Each live instance's host endpoints, as `berth up` shows them (an archived one has none),
    // and those whose port another program holds.
    let views: Vec<Vec<EndpointView>> = match (&domain, args.archived) {
        (Some(d), false) => {
            futures_util::future::join_all(items.iter().map(|i| client.api.endpoints(d, &i.key)))
                .await
                .into_iter()
                .map(Result::unwrap_or_default)
                .collect()
        }
        _ => vec![Vec::new(); items.len()],
    };
    let held: Vec<Vec<String>> = views.iter().map(|v| unavailable_notes(v)).collect();
    // The daemon's engine away: said once, above everything (the states are the last seen).
    if !args.json
        && let Ok(daemon) = client.api.daemon().await
        && let Some(away) = daemon.engine.and_then(|e| e.unreachable)
    {
        eprintln!("berth: {}", crate::ui::engine_away(&away));
    }
    let endpoints: Vec<Vec<(u16, String, u16)>> = views.into_iter().map(endpoint_tuples).collect();
    if args.json {
        print_json(&Value::Array(
            items
                .iter()
                .zip(endpoints.iter().zip(&held))
                .map(|(i, (eps, held))| {
                    let mut v = annotated(i, &repo);
                    if let Some(map) = v.as_object_mut()
                        && !args.archived
                    {
                        map.insert("endpoints".into(), endpoints_json(eps));
                        if !held.is_empty() {
                            map.insert("endpointsUnavailable".into(), json!(held));
                        }
                    }
                    v
                })
                .collect(),
        ));
        return Ok(ExitCode::SUCCESS);
    }
    if items.is_empty() {
        eprintln!(
            "berth: {}",
            nothing_listed(&client, domain.as_ref(), args.archived).await?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<Cell>> = items
        .iter()
        .zip(endpoints.iter().zip(&held))
        .map(|(i, (eps, held))| {
            let ended = crate::ui::worktree_note(i);
            let note = crate::ui::engine_note(i)
                .into_iter()
                .chain(crate::ui::frozen_note(i))
                // An ended worktree's note says who stopped it, and why.
                .chain(std::iter::once(if ended.is_some() {
                    String::new()
                } else {
                    detail_note(i)
                }))
                .chain(ended)
                .chain(held.iter().cloned())
                .filter(|n| !n.is_empty())
                .collect::<Vec<_>>()
                .join("; ");
            vec![
                Cell::plain(name_of_key(key_of(i))),
                Cell::plain(scope_of(i, &repo)),
                Cell::plain(key_of(i)),
                Cell::state(state_kind(i)),
                Cell::plain(ago(state_time(i))),
                Cell::plain(endpoints_text(eps)),
                Cell::plain(note),
            ]
        })
        .collect();
    ui.table(
        &[
            "NAME",
            "SCOPE",
            "KEY",
            "STATE",
            "SINCE",
            "ENDPOINTS",
            "NOTE",
        ],
        &rows,
    );
    Ok(ExitCode::SUCCESS)
}

/// What `berth ps` says when it has no row: that the repository has none yet, or, when only
/// archived instances are left, how many and where they are listed.
async fn nothing_listed(
    client: &Client,
    domain: Option<&DomainId>,
    archived: bool,
) -> anyhow::Result<String> {
    if archived {
        return Ok("this repository has no archived instances".to_owned());
    }
    let gone = match domain {
        Some(d) => client.api.instances(d, true).await.or_say(client)?.len(),
        None => 0,
    };
    Ok(match gone {
        0 => "this repository has no instances yet: `berth up` starts them".to_owned(),
        1 => "this repository has no live instances; 1 is archived (`berth ps --archived` \
              lists it): `berth up` starts new ones"
            .to_owned(),
        n => format!(
            "this repository has no live instances; {n} are archived (`berth ps --archived` \
             lists them): `berth up` starts new ones"
        ),
    })
}

/// What the state carries besides its kind: who stopped it, why it failed.
fn detail_note(instance: &InstanceView) -> String {
    let detail = state_detail(instance);
    let kind = state_kind(instance);
    match detail.strip_prefix(kind) {
        Some(rest) => rest.trim_start_matches([':', ' ']).to_owned(),
        None => detail,
    }
}

/// Who stops: `$USER`, else git's `user.name`, as a name the daemon takes (at most 200
/// characters, none of those a name refuses).
fn who() -> String {
    let name = |text: &str| -> String {
        text.chars()
            .filter(|&c| !NAME_REFUSES.iter().any(|(refused, _)| refused(c)))
            .collect::<String>()
            .trim()
            .chars()
            .take(200)
            .collect()
    };
    if let Ok(user) = std::env::var("USER")
        && !name(&user).is_empty()
    {
        return name(&user);
    }
    let out = std::process::Command::new("git")
        .args(["config", "user.name"])
        .output();
    match out {
        Ok(o) if o.status.success() && !name(&String::from_utf8_lossy(&o.stdout)).is_empty() => {
            name(&String::from_utf8_lossy(&o.stdout))
        }
        _ => "berth".to_owned(),
    }
}

pub async fn stop(args: StopArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let (repo, client, domain) = open(&args.conn).await?;
    let Some(domain) = domain else {
        bail!("this repository has no instances yet: `berth up` starts them");
    };
    let targets = resolve(&client, &domain, &repo, &args.names).await?;
    stop_targets(&ui, &repo, &client, &domain, targets, args.json).await
}

/// `berth down`: this worktree's own instances (or the named ones) stopped, or archived with
/// `--archive`.
pub async fn down(args: DownArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let (repo, client, domain) = open(&args.conn).await?;
    let Some(domain) = domain else {
        eprintln!("berth: nothing to take down: this repository has no instances yet");
        return Ok(ExitCode::SUCCESS);
    };
    let mut targets = resolve(&client, &domain, &repo, &args.names).await?;
    if args.names.is_empty() {
        // Shared instances serve every worktree: only named ones go down.
        targets.retain(|i| i.worktree_key.is_some());
    }
    if args.archive {
        return archive_targets(&ui, &repo, &client, &domain, &targets, args.json).await;
    }
    stop_targets(&ui, &repo, &client, &domain, targets, args.json).await
}

/// Stops `targets` and waits until each is stopped; exits non-zero when one is not.
async fn stop_targets(
    ui: &crate::ui::Ui,
    repo: &Repo,
    client: &Client,
    domain: &DomainId,
    targets: Vec<InstanceView>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if targets.is_empty() {
        eprintln!("berth: nothing to stop: this worktree has no live instances");
        return Ok(ExitCode::SUCCESS);
    }
    let by = who();
    for t in &targets {
        client
            .api
            .stop(domain, key_of(t), &by)
            .await
            .or_say(client)?;
    }
    // The daemon stops them in the background; wait until each is.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut stopped = Vec::new();
    let mut not_stopped = 0;
    for t in &targets {
        let key = key_of(t);
        let left = deadline.saturating_duration_since(Instant::now());
        let now = client
            .api
            .wait_for_state(domain, key, &["stopped", "archived"], left, |_| true)
            .await
            .or_say(client)?
            .instance;
        let is_stopped = matches!(state_kind(&now), "stopped" | "archived");
        if !is_stopped {
            not_stopped += 1;
        }
        if !json {
            let mark = if is_stopped {
                ui.ok_mark()
            } else {
                ui.fail_mark()
            };
            let detail = match &now.engine {
                Some(away) => format!(
                    "not stopped: {}; the stop is recorded, and berth stops it then",
                    crate::ui::engine_away(away)
                ),
                None => state_detail(&now),
            };
            println!("{mark} {} ({key}): {detail}", name_of_key(key));
        }
        stopped.push(annotated(&now, repo));
    }
    if json {
        print_json(&Value::Array(stopped));
    }
    if not_stopped > 0 {
        eprintln!("berth: {not_stopped} instance(s) did not stop (see each line above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn archive(args: ArchiveArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let (repo, client, domain) = open(&args.conn).await?;
    let Some(domain) = domain else {
        bail!("this repository has no instances yet: nothing to archive");
    };
    let targets = resolve(&client, &domain, &repo, &args.names).await?;
    archive_targets(&ui, &repo, &client, &domain, &targets, args.json).await
}

/// Archives `targets`, printing each one's kept volumes.
async fn archive_targets(
    ui: &crate::ui::Ui,
    repo: &Repo,
    client: &Client,
    domain: &DomainId,
    targets: &[InstanceView],
    json: bool,
) -> anyhow::Result<ExitCode> {
    if targets.is_empty() {
        eprintln!("berth: nothing to archive: this worktree has no live instances");
        return Ok(ExitCode::SUCCESS);
    }
    let mut answers = Vec::new();
    for t in targets {
        let key = key_of(t);
        let answer = client.api.archive(domain, key).await.or_say(client)?;
        if !json {
            println!(
                "{} archived {} ({key}); its volumes are kept:",
                ui.ok_mark(),
                name_of_key(key)
            );
            if answer.volumes.is_empty() {
                println!("  (none)");
            }
            for v in &answer.volumes {
                let size = v
                    .bytes
                    .map(bytes)
                    .unwrap_or_else(|| "size unknown".to_owned());
                println!("  {}  {}  {size}", v.name, v.docker_name);
            }
        }
        answers.push(json!({
            "name": name_of_key(key),
            "instance": annotated(&answer.instance, repo),
            "volumes": answer.volumes,
        }));
    }
    if json {
        print_json(&Value::Array(answers));
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether berth.toml asks for `name` as a shared instance (`false` when it cannot say).
fn repo_scope_is_shared(repo: &Repo, name: &str) -> bool {
    load_project(repo).is_ok_and(|p| {
        p.instances
            .iter()
            .any(|d| d.name == name && d.scope == crate::project::Scope::Shared)
    })
}

/// A value in single quotes for a POSIX shell.
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// The variables the connect tables of `selected` (in berth.toml) give, from their live
/// instances' host endpoints in this worktree: what `berth env` prints. An instance that is not
/// up, or whose host port another program holds, is an error naming it.
pub(crate) async fn connect_env(
    client: &Client,
    repo: &Repo,
    selected: &[&crate::project::InstanceDef],
) -> anyhow::Result<Vec<(String, String)>> {
    let mut vars: Vec<(String, String)> = Vec::new();
    if selected.is_empty() {
        return Ok(vars);
    }
    let Some(domain) = find_domain(client, repo).await? else {
        bail!(
            "this repository has no instances yet: `berth up` starts them and gives them their host endpoints"
        );
    };
    let domain = domain.resource_domain_id;
    let keys = current_keys(client, &domain, repo, selected).await?;
    for (def, (key, live)) in selected.iter().zip(keys) {
        if !live {
            let archived = client.api.instances(&domain, true).await.or_say(client)?;
            let base = repo.instance_key(&def.name, def.scope == crate::project::Scope::Shared);
            if let Some(gone) = newest_archived(&base, &archived) {
                bail!("{}", archived_note(&def.name, &gone));
            }
            bail!(
                "{} is not up in this worktree (it will be {key}): `berth up {}` starts it \
                 and gives it its host endpoints",
                def.name,
                def.name
            );
        }
        let views = client.api.endpoints(&domain, &key).await.or_say(client)?;
        // A port another program holds reaches something else: named, never exported.
        if let Some(held) = views.iter().find_map(|e| e.unavailable.as_deref()) {
            bail!("{} ({key}): {held}", def.name);
        }
        let endpoints = endpoint_tuples(views);
        vars.extend(def.connect_values(&endpoints).map_err(anyhow::Error::msg)?);
    }
    Ok(vars)
}

pub async fn env(args: EnvArgs) -> anyhow::Result<ExitCode> {
    let repo = Repo::discover()?;
    let project = load_project(&repo)?;
    let selected: Vec<_> = project
        .select(&args.names)?
        .into_iter()
        .filter(|d| !d.connect.is_empty())
        .collect();
    let vars = if selected.is_empty() {
        Vec::new()
    } else {
        let client = args.conn.endpoint().connect().await?;
        connect_env(&client, &repo, &selected).await?
    };
    if args.json {
        let map: serde_json::Map<String, Value> =
            vars.into_iter().map(|(k, v)| (k, Value::from(v))).collect();
        print_json(&Value::Object(map));
        return Ok(ExitCode::SUCCESS);
    }
    if vars.is_empty() {
        eprintln!(
            "berth: no instance has a connect table: add [instances.NAME.connect] to berth.toml"
        );
    }
    for (name, value) in vars {
        println!("export {name}={}", shell_quote(&value));
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn domains(args: DomainsArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let client = args.conn.endpoint().connect().await?;
    let items = client.api.domains().await.or_say(&client)?;
    if args.json {
        print_json(&serde_json::to_value(&items)?);
        return Ok(ExitCode::SUCCESS);
    }
    if items.is_empty() {
        eprintln!("berth: no domains yet: `berth up` in a repository makes its domain");
        return Ok(ExitCode::SUCCESS);
    }
    let here = Repo::discover().ok().map(|r| r.domain_name);
    let rows: Vec<Vec<Cell>> = items
        .iter()
        .map(|d| {
            let name = d.name.as_str();
            let mark = if here.as_deref() == Some(name) && d.state != DomainState::Archived {
                "*"
            } else {
                ""
            };
            let state = serde_json::to_value(d.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            vec![
                Cell::plain(mark),
                Cell::plain(d.resource_domain_id.as_str()),
                Cell::plain(name),
                Cell::state(state),
                Cell::plain(ago(Some(d.created_at))),
            ]
        })
        .collect();
    ui.table(&["", "DOMAIN", "NAME", "STATE", "CREATED"], &rows);
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn values_are_quoted_for_the_shell() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
