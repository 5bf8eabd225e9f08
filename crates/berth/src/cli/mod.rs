//! The commands people run, over the daemon's HTTP API: `up`, `ps`, `stop`, `start`,
//! `archive`, `exec`, `logs`, `link`, `env`, `domains`, `rollouts`, `releases`, `rollback`,
//! `doctor`, `whoami`, `ui` and `service`.
//!
//! Each runs in a git worktree: the repository is the resource domain (created on first use),
//! the worktree gives the worktree key, and `berth.toml` at the worktree's top level says what
//! runs. See docs/cli.md.

pub(crate) mod branching;
mod compose;
mod doctor;
mod endpoints;
pub(crate) mod exec;
pub(crate) mod instances;
mod logs;
mod page;
mod pins;
mod preflight;
mod promote;
mod rollouts;
mod service;
mod templates;
pub(crate) mod up;
mod whoami;
mod writes;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use berth_client::DomainId;
use berth_client::{DomainState, DomainView, InstanceView};
use clap::{Args, Subcommand};
use serde_json::Value;

use crate::client::{Client, DEFAULT_URL, Endpoint, OrSay};
use crate::project::Project;
use crate::repo::{PROJECT_FILE, Repo};
use crate::ui::Ui;

/// Where the daemon is, for every command that talks to it.
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// The daemon's address.
    #[arg(long, env = "BERTH_URL", default_value = DEFAULT_URL)]
    url: String,

    /// The daemon's data directory, where its key file is [default: the user's data directory/berth].
    #[arg(long, env = "BERTH_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

impl Conn {
    pub(crate) fn endpoint(&self) -> Endpoint {
        Endpoint {
            url: self.url.clone(),
            data_dir: self.data_dir.clone(),
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write a berth.toml; `--with postgres,redis` adds those services, `--from compose.yaml`
    /// converts a Compose file's; images pinned from their tags.
    Init(pins::InitArgs),
    /// Add an instance to berth.toml from an image's tag, pinned to what its registry serves.
    Add(pins::AddArgs),
    /// Re-read the tags of berth.toml's images and rewrite their digests, showing what changed.
    Pin(pins::PinArgs),
    /// Start this worktree's instances from berth.toml (all, or the named ones) and wait until
    /// each is running or failed.
    Up(up::UpArgs),
    /// Start instances again after `berth stop` (the same as `berth up`).
    Start(up::UpArgs),
    /// List the repository's instances: name, scope, key, state, since.
    Ps(instances::PsArgs),
    /// Stop instances (a person's stop: they stay stopped until `berth start`).
    Stop(instances::StopArgs),
    /// Archive instances: their containers are removed for good, their volumes kept and measured.
    #[command(visible_alias = "rm")]
    Archive(instances::ArchiveArgs),
    /// Take this worktree's instances down: stop them (`--archive`: archive them); the shared
    /// ones only when named. Compose's `down`.
    Down(instances::DownArgs),
    /// Run a command in an instance; stdin passes through, its exit code becomes berth's.
    Exec(exec::ExecArgs),
    /// Print `export NAME='value'` lines from the instances' connect tables in berth.toml.
    Env(instances::EnvArgs),
    /// Print an instance's output; `-f` keeps following it.
    Logs(logs::LogsArgs),
    /// Link containers to this worktree: they resolve its instances (and the shared ones) by alias.
    Link(logs::LinkArgs),
    /// List your resource domains (a repository is one).
    Domains(instances::DomainsArgs),
    /// List an instance's image rollouts, newest first: generation, mode, status and why.
    Rollouts(rollouts::RolloutsArgs),
    /// List the image releases an instance ran (the ids `berth rollback --release` takes).
    Releases(rollouts::ReleasesArgs),
    /// List the instances whose tag now names another image than the one they run (read from
    /// the registry now; nothing changes until `berth promote`).
    Outdated(promote::OutdatedArgs),
    /// Run the image an instance's tag now names (or the release given), wait for its rollout,
    /// and pin berth.toml to it.
    Promote(promote::PromoteArgs),
    /// Roll an instance back to an image release that ran verified (by default the previous
    /// one), and wait until it runs.
    Rollback(rollouts::RollbackArgs),
    /// Check Docker, the daemon, the service key, berth.toml and its images, and say what to fix.
    Doctor(doctor::DoctorArgs),
    /// Show this key's id, the consent label its workspaces' containers carry, and what the
    /// daemon lets it do.
    Whoami(whoami::WhoamiArgs),
    /// Take a snapshot of an instance's volumes (a running one is frozen for the copy).
    Snapshot(branching::SnapshotArgs),
    /// List the repository's snapshots, newest first.
    Snapshots(branching::SnapshotsArgs),
    /// List the repository's templates (what a new instance with `template = true` starts on),
    /// or delete one with `berth templates rm ID`.
    Templates(templates::TemplatesArgs),
    /// Put a snapshot's contents back into an instance; what it replaces is kept as a snapshot.
    Restore(branching::RestoreArgs),
    /// Make this worktree's instance with another worktree's data (or a snapshot's).
    Branch(branching::BranchArgs),
    /// Open berth's web page in the browser, signed in by a link that works once, for two
    /// minutes (`--print` prints the link instead).
    Ui(page::UiArgs),
    /// Install, remove or check the login service that runs `berth serve` at login and again
    /// when it dies (a systemd user unit; a launchd agent on macOS).
    Service(service::ServiceArgs),
}

/// Runs a command; errors are printed here, and the exit code is returned.
pub async fn run(command: Command) -> ExitCode {
    let result = match command {
        Command::Init(args) => pins::init(args).await,
        Command::Add(args) => pins::add(args).await,
        Command::Pin(args) => pins::pin_command(args).await,
        Command::Up(args) => up::run(args, "up").await,
        Command::Start(args) => up::run(args, "start").await,
        Command::Ps(args) => instances::ps(args).await,
        Command::Stop(args) => instances::stop(args).await,
        Command::Archive(args) => instances::archive(args).await,
        Command::Down(args) => instances::down(args).await,
        Command::Exec(args) => exec::run(args).await,
        Command::Env(args) => instances::env(args).await,
        Command::Domains(args) => instances::domains(args).await,
        Command::Rollouts(args) => rollouts::rollouts(args).await,
        Command::Releases(args) => rollouts::releases(args).await,
        Command::Outdated(args) => promote::outdated(args).await,
        Command::Promote(args) => promote::promote(args).await,
        Command::Rollback(args) => rollouts::rollback(args).await,
        Command::Logs(args) => logs::logs(args).await,
        Command::Link(args) => logs::link(args).await,
        Command::Doctor(args) => doctor::run(args).await,
        Command::Whoami(args) => whoami::run(args).await,
        Command::Snapshot(args) => branching::snapshot(args).await,
        Command::Snapshots(args) => branching::snapshots(args).await,
        Command::Templates(args) => templates::run(args).await,
        Command::Restore(args) => branching::restore(args).await,
        Command::Branch(args) => branching::branch(args).await,
        Command::Ui(args) => page::run(args).await,
        Command::Service(args) => service::run(args).await,
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            report(&e);
            ExitCode::FAILURE
        }
    }
}

/// Prints an error: a project file's problems one per line as they are, anything else after
/// `berth: `.
pub fn report(e: &anyhow::Error) {
    if let Some(problems) = e.downcast_ref::<crate::project::ProjectErrors>() {
        for line in &problems.0 {
            eprintln!("{line}");
        }
        eprintln!(
            "berth: {} has {} problem(s); nothing was sent to the daemon",
            PROJECT_FILE,
            problems.0.len()
        );
    } else {
        eprintln!("berth: {e:#}");
    }
}

/// The project file's path as a person at the current directory would write it.
fn shown_path(file: &Path) -> String {
    let Ok(cwd) = std::env::current_dir().and_then(|d| d.canonicalize()) else {
        return file.display().to_string();
    };
    if let Ok(rel) = file.strip_prefix(&cwd) {
        return rel.display().to_string();
    }
    let dir = file.parent().unwrap_or(Path::new("/"));
    if let Ok(below) = cwd.strip_prefix(dir) {
        let ups = below.components().count();
        if ups <= 3 {
            let mut p = PathBuf::new();
            for _ in 0..ups {
                p.push("..");
            }
            p.push(file.file_name().unwrap_or_default());
            return p.display().to_string();
        }
    }
    file.display().to_string()
}

/// Reads and checks this worktree's berth.toml.
pub(crate) fn load_project(repo: &Repo) -> anyhow::Result<Project> {
    let file = repo.project_file();
    Project::load(&file, &shown_path(&file))
}

/// The repository's domain: the oldest of the caller's domains with the repository's name that
/// is not archived.
pub(crate) async fn find_domain(
    client: &Client,
    repo: &Repo,
) -> anyhow::Result<Option<DomainView>> {
    Ok(client
        .api
        .domains()
        .await
        .or_say(client)?
        .into_iter()
        .find(|d| d.name == repo.domain_name && d.state != DomainState::Archived))
}

/// The repository's domain, created on first use.
pub(crate) async fn ensure_domain(client: &Client, repo: &Repo) -> anyhow::Result<DomainView> {
    if let Some(d) = find_domain(client, repo).await? {
        return Ok(d);
    }
    let created = client
        .api
        .create_domain(&repo.domain_name)
        .await
        .or_say(client)
        .context("could not create the repository's domain")?;
    // Two commands may create one each at the same moment: all of them settle on the oldest,
    // and one that lost the race archives its own (empty) domain.
    let chosen = find_domain(client, repo)
        .await?
        .unwrap_or_else(|| created.clone());
    if chosen.resource_domain_id != created.resource_domain_id {
        let _ = client.api.archive_domain(&created.resource_domain_id).await;
    }
    Ok(chosen)
}

/// The key each of `defs` has now in this worktree (see [`crate::repo::current_key`]), and
/// whether an instance with that key is live.
pub(crate) async fn current_keys(
    client: &Client,
    domain: &DomainId,
    repo: &Repo,
    defs: &[&crate::project::InstanceDef],
) -> anyhow::Result<Vec<(String, bool)>> {
    let keys =
        |list: Vec<InstanceView>| -> Vec<String> { list.into_iter().map(|i| i.key).collect() };
    let live = keys(client.api.instances(domain, false).await.or_say(client)?);
    let archived = keys(client.api.instances(domain, true).await.or_say(client)?);
    Ok(defs
        .iter()
        .map(|def| {
            let base = repo.instance_key(&def.name, def.scope == crate::project::Scope::Shared);
            let key = crate::repo::current_key(
                &base,
                live.iter().map(String::as_str),
                archived.iter().map(String::as_str),
            );
            let is_live = live.contains(&key);
            (key, is_live)
        })
        .collect())
}

/// An instance with the project-file name and scope it was made from, for `--json`.
pub(crate) fn annotated(instance: &InstanceView, repo: &Repo) -> Value {
    let mut out = serde_json::to_value(instance).unwrap_or(Value::Null);
    if let Some(map) = out.as_object_mut() {
        map.insert(
            "name".into(),
            Value::from(crate::repo::name_of_key(&instance.key)),
        );
        map.insert("scope".into(), Value::from(scope_of(instance, repo)));
    }
    out
}

/// `shared`, `worktree` (this one's), or `worktree <key>` (another one's).
pub(crate) fn scope_of(instance: &InstanceView, repo: &Repo) -> String {
    match instance.worktree_key.as_deref() {
        None => "shared".to_owned(),
        Some(k) if k == repo.worktree_key => "worktree".to_owned(),
        Some(k) => format!("worktree {k}"),
    }
}

/// Prints JSON on stdout.
fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// A ui for the command.
fn ui(json: bool) -> Ui {
    Ui::new(json)
}
