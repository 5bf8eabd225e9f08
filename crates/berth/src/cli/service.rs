//! `berth service install | uninstall | status`: the daemon as a login service, so it starts
//! at login and again when it dies: a systemd user unit on Linux
//! (`$XDG_CONFIG_HOME/systemd/user/berth.service`), a launchd agent on macOS
//! (`~/Library/LaunchAgents/dev.berth.daemon.plist`). The files are rendered by
//! `crate::autostart`; this module writes them and asks systemctl or launchctl.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};

use crate::autostart::{AGENT_LABEL, Daemon, UNIT_NAME, carried_env};

#[derive(Args, Debug)]
pub struct ServiceArgs {
    #[command(subcommand)]
    command: ServiceCommand,
}

#[derive(Subcommand, Debug)]
enum ServiceCommand {
    /// Write the login service that runs `berth serve` (with the flags after `--` and the
    /// BERTH_* and DOCKER_* variables of this shell), then enable and start it.
    Install(InstallArgs),
    /// Stop and disable the login service and remove its file.
    Uninstall,
    /// Say whether the login service is installed and running.
    Status,
}

#[derive(Args, Debug)]
struct InstallArgs {
    /// Write the file only: do not enable or start it (systemctl --user / launchctl).
    #[arg(long)]
    no_start: bool,
    /// Flags for `berth serve` (`berth service install -- --listen 127.0.0.1:2400`).
    #[arg(last = true, value_name = "SERVE FLAGS")]
    serve_args: Vec<String>,
}

/// `berth serve`'s flags, parsed here only to refuse bad ones before anything is written.
#[derive(Parser, Debug)]
#[command(name = "berth serve")]
struct ServeFlags {
    #[command(flatten)]
    _args: crate::serve::ServeArgs,
}

fn macos() -> bool {
    cfg!(target_os = "macos")
}

/// Where the service file goes: the user's config directory (`XDG_CONFIG_HOME` when set) on
/// Linux, `~/Library/LaunchAgents` on macOS.
pub fn service_file() -> anyhow::Result<PathBuf> {
    if macos() {
        let home = dirs::home_dir().context("no home directory to put a launchd agent in")?;
        return Ok(home
            .join("Library/LaunchAgents")
            .join(format!("{AGENT_LABEL}.plist")));
    }
    let config = match std::env::var_os("XDG_CONFIG_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => dirs::config_dir().context("no config directory (set XDG_CONFIG_HOME)")?,
    };
    Ok(config.join("systemd/user").join(UNIT_NAME))
}

/// Runs a service manager's command: Ok with its output, or Err with why, in one line.
fn manager(program: &str, args: &[&str]) -> Result<String, String> {
    match Command::new(program).args(args).output() {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        Ok(out) => {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.trim();
            Err(format!(
                "`{program} {}` failed: {}",
                args.join(" "),
                if said.is_empty() {
                    String::from_utf8_lossy(&out.stdout).trim().to_owned()
                } else {
                    said.replace('\n', "; ")
                }
            ))
        }
        Err(e) => Err(format!("could not run {program}: {e}")),
    }
}

fn systemctl(args: &[&str]) -> Result<String, String> {
    let mut all = vec!["--user"];
    all.extend_from_slice(args);
    manager("systemctl", &all)
}

fn launchctl_target() -> String {
    let uid = rustix::process::getuid().as_raw();
    format!("gui/{uid}")
}

pub async fn run(args: ServiceArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ServiceCommand::Install(a) => install(a),
        ServiceCommand::Uninstall => uninstall(),
        ServiceCommand::Status => status(),
    }
}

fn install(args: InstallArgs) -> anyhow::Result<ExitCode> {
    let mut argv = vec!["berth serve".to_owned()];
    argv.extend(args.serve_args.iter().cloned());
    if let Err(e) = ServeFlags::try_parse_from(&argv) {
        bail!(
            "the flags for `berth serve` are refused, nothing was written:\n{}",
            e.render().to_string().trim_end()
        );
    }
    let binary = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .context("could not find this berth binary's path")?;
    let daemon = Daemon {
        binary,
        serve_args: args.serve_args,
        env: carried_env(std::env::vars()),
    };
    let path = service_file()?;
    let text = if macos() {
        let logs = dirs::home_dir()
            .context("no home directory")?
            .join("Library/Logs/berth.log");
        daemon.launchd_plist(&logs)
    } else {
        daemon.systemd_unit()
    };
    let dir = path.parent().context("the service file has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("could not create {}", dir.display()))?;
    // One rename: a service manager never reads half a file.
    let temp = path.with_extension("berth-new");
    std::fs::write(&temp, &text).with_context(|| format!("could not write {}", temp.display()))?;
    std::fs::rename(&temp, &path).with_context(|| format!("could not write {}", path.display()))?;
    println!("wrote {}", path.display());
    if !daemon.env.is_empty() {
        let names: Vec<&str> = daemon.env.iter().map(|(k, _)| k.as_str()).collect();
        println!("  with {}", names.join(", "));
    }
    if args.no_start {
        println!(
            "not started (--no-start): {}",
            if macos() {
                format!(
                    "`launchctl bootstrap {} {}`",
                    launchctl_target(),
                    path.display()
                )
            } else {
                "`systemctl --user daemon-reload && systemctl --user enable --now berth`".to_owned()
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let started = if macos() {
        let target = launchctl_target();
        // A loaded agent is booted out first, so the new file is the one that runs.
        let _ = manager(
            "launchctl",
            &["bootout", &format!("{target}/{AGENT_LABEL}")],
        );
        manager(
            "launchctl",
            &["bootstrap", &target, &path.display().to_string()],
        )
    } else {
        systemctl(&["daemon-reload"])
            .and_then(|_| systemctl(&["enable", UNIT_NAME]))
            .and_then(|_| systemctl(&["restart", UNIT_NAME]))
    };
    match started {
        Ok(_) => {
            println!("started: berth serve runs now, at every login, and again if it dies");
            Ok(ExitCode::SUCCESS)
        }
        Err(why) => bail!(
            "wrote {} but could not start it: {why}{}",
            path.display(),
            if macos() {
                ""
            } else if why.contains("Failed to connect to bus") {
                " (there is no systemd user instance here: in a login session that has one, run \
                 `systemctl --user enable --now berth`)"
            } else {
                " (`systemctl --user status berth` says more)"
            }
        ),
    }
}

fn uninstall() -> anyhow::Result<ExitCode> {
    let path = service_file()?;
    let stopped = if macos() {
        manager(
            "launchctl",
            &["bootout", &format!("{}/{AGENT_LABEL}", launchctl_target())],
        )
    } else {
        systemctl(&["disable", "--now", UNIT_NAME])
    };
    match std::fs::remove_file(&path) {
        Ok(()) => println!("removed {}", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("no login service at {}: nothing to remove", path.display());
        }
        Err(e) => bail!("could not remove {}: {e}", path.display()),
    }
    if !macos() {
        let _ = systemctl(&["daemon-reload"]);
    }
    if let Err(why) = stopped {
        // Nothing was loaded, or there is no service manager to ask: the file is gone either way.
        println!("the service manager was not asked to stop it: {why}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether the login service is installed, and whether it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub file: PathBuf,
    pub installed: bool,
    /// `Ok(true)`: running; `Ok(false)`: not running; `Err`: the service manager did not say.
    pub running: Result<bool, String>,
}

impl State {
    pub fn read() -> anyhow::Result<State> {
        let file = service_file()?;
        let installed = file.is_file();
        let running = if macos() {
            match manager(
                "launchctl",
                &["print", &format!("{}/{AGENT_LABEL}", launchctl_target())],
            ) {
                Ok(out) => Ok(out.contains("state = running")),
                Err(_) if !installed => Ok(false),
                Err(why) => Err(why),
            }
        } else {
            match Command::new("systemctl")
                .args(["--user", "is-active", UNIT_NAME])
                .output()
            {
                // is-active prints the state on stdout whatever it is; no user instance to
                // ask prints nothing there.
                Ok(out) => match String::from_utf8_lossy(&out.stdout).trim() {
                    "active" | "reloading" | "activating" => Ok(true),
                    "" => Err(format!(
                        "systemctl --user could not say ({}): there is no systemd user instance here",
                        String::from_utf8_lossy(&out.stderr).trim()
                    )),
                    _ => Ok(false),
                },
                Err(e) => Err(format!("could not run systemctl: {e}")),
            }
        };
        Ok(State {
            file,
            installed,
            running,
        })
    }

    /// One sentence: installed or not, where, and running or not.
    pub fn sentence(&self) -> String {
        let running = match &self.running {
            Ok(true) => "running".to_owned(),
            Ok(false) => "not running".to_owned(),
            Err(why) => format!("not known to run ({why})"),
        };
        if self.installed {
            format!(
                "the login service is installed ({}) and {running}",
                self.file.display()
            )
        } else {
            format!(
                "no login service is installed ({} does not exist): `berth service install` starts the daemon at login",
                self.file.display()
            )
        }
    }
}

fn status() -> anyhow::Result<ExitCode> {
    let state = State::read()?;
    println!("{}", state.sentence());
    Ok(ExitCode::SUCCESS)
}
