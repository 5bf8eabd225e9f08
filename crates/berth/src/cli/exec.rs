//! `berth exec NAME -- CMD...`: runs a command in an instance through the raw exec route.
//! Stdin is streamed to it (unless stdin is a terminal), its stdout and stderr are printed, and
//! its exit code becomes berth's; a command killed at its timeout exits 124, as with
//! `timeout(1)`.

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use berth_core::exec::MAX_TIMEOUT_MS;
use clap::Args;
use serde_json::json;

use super::Conn;
use super::instances::resolve;
use crate::repo::Repo;

/// The exit code of a command killed at its timeout, as `timeout(1)` has it.
pub const TIMED_OUT: u8 = 124;

#[derive(Args, Debug)]
pub struct ExecArgs {
    #[command(flatten)]
    conn: Conn,
    /// The user to run as: a name, uid or uid:gid [default: the image's user].
    #[arg(long, short)]
    user: Option<String>,
    /// Kill the command after this long (1s to 6h); berth then exits 124.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Send no stdin, even when stdin is not a terminal.
    #[arg(long, short = 'n')]
    no_stdin: bool,
    /// The instance's name in berth.toml (or its full key, `name@worktree`).
    name: String,
    /// The command and its arguments (after `--` when they start with `-`).
    #[arg(
        required = true,
        value_name = "CMD",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<String>,
}

pub fn run(args: ExecArgs) -> anyhow::Result<ExitCode> {
    let timeout_ms = args.timeout.as_millis();
    if !(1000..=MAX_TIMEOUT_MS as u128).contains(&timeout_ms) {
        bail!("--timeout must be between 1s and 6h");
    }
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect()?;
    let Some(domain) = super::find_domain(&client, &repo)? else {
        bail!("this repository has no instances yet: `berth up` starts them");
    };
    let domain = super::domain_id(&domain)?;
    let target = resolve(&client, &domain, &repo, std::slice::from_ref(&args.name))?;
    let key = target[0]["key"].as_str().unwrap_or_default().to_owned();

    let frame = json!({"argv": args.command, "user": args.user, "timeoutMs": timeout_ms as u64});
    let stdin: Option<Box<dyn Read + Send>> = if args.no_stdin || std::io::stdin().is_terminal() {
        None
    } else {
        Some(Box::new(std::io::stdin()))
    };
    let result = client.exec(&domain, &key, &frame, stdin, args.timeout)?;

    let mut out = std::io::stdout().lock();
    let _ = out.write_all(result["stdout"].as_str().unwrap_or("").as_bytes());
    let _ = out.flush();
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(result["stderr"].as_str().unwrap_or("").as_bytes());
    if result["truncated"] == true {
        let _ = writeln!(
            err,
            "berth: the output was longer than 1 MiB; only its last 1 MiB is shown"
        );
    }
    if result["timedOut"] == true {
        let _ = writeln!(
            err,
            "berth: the command was killed after {} (--timeout)",
            humantime::format_duration(args.timeout)
        );
        return Ok(ExitCode::from(TIMED_OUT));
    }
    let code = result["exitCode"].as_i64().unwrap_or(1);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}
