//! The command line: every subcommand and its arguments, the dispatch to the file that runs
//! it, and how a failure is printed.

use std::process::ExitCode;

use clap::Subcommand;

use super::{
    branching, disk, doctor, exec, instances, lease, logs, page, pins, promote, rollouts, service,
    templates, up, whoami,
};
use crate::repo::PROJECT_FILE;

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
    /// Take a lease on the pool of an instance berth.toml gives `pool = N` (ready instances
    /// made from its template), printed as `berth env` prints it; `--reset`, `--release`.
    Lease(lease::LeaseArgs),
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
    /// Show where the repository's disk goes: by worktree, instance, snapshot and template, what
    /// each would free, and the layers they share.
    Df(disk::DfArgs),
    /// Give back disk: archive the instances of removed worktrees and remove their data, and
    /// remove old archived data, surplus before-restore snapshots and unused templates.
    /// `--dry-run` lists it; berth asks first unless `--yes`.
    Prune(disk::PruneArgs),
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
        Command::Lease(args) => lease::lease(args).await,
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
        Command::Df(args) => disk::df(args).await,
        Command::Prune(args) => disk::prune(args).await,
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
