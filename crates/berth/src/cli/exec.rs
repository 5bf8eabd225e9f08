//! `berth exec NAME -- CMD...`: runs a command in an instance through the raw exec route.
//! Stdin is streamed to it (unless stdin is a terminal), its stdout and stderr are printed, and
//! its exit code becomes berth's; a command killed at its timeout exits 124, as with
//! `timeout(1)`.

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use berth_client::ExecFrame;
use berth_core::exec::MAX_TIMEOUT_MS;
use bytes::Bytes;
use clap::Args;
use futures_util::Stream;

use super::Conn;
use super::instances::resolve;
use crate::client::OrSay;
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
    /// Keep stdin open (with -t: the command's terminal takes every key).
    #[arg(long, short = 'i')]
    interactive: bool,
    /// Run the command on a terminal of the instance's, this terminal in raw mode (as `docker
    /// exec -it`); needs stdin to be a terminal. --timeout does not apply.
    #[arg(long, short = 't')]
    tty: bool,
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

pub async fn run(args: ExecArgs) -> anyhow::Result<ExitCode> {
    let timeout_ms = args.timeout.as_millis();
    if !(1000..=MAX_TIMEOUT_MS as u128).contains(&timeout_ms) {
        bail!("--timeout must be between 1s and 6h");
    }
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect().await?;
    let Some(domain) = super::find_domain(&client, &repo).await? else {
        bail!("this repository has no instances yet: `berth up` starts them");
    };
    let domain = domain.resource_domain_id;
    let target = resolve(&client, &domain, &repo, std::slice::from_ref(&args.name)).await?;
    let key = target[0].key.clone();
    if args.tty {
        if !std::io::stdin().is_terminal() {
            bail!("-t needs stdin to be a terminal; without -t, stdin is sent to the command");
        }
        return super::tty::run(&client, &domain, &key, args.command, args.user).await;
    }

    let frame = ExecFrame {
        argv: args.command,
        user: args.user,
        timeout_ms: i64::try_from(timeout_ms).unwrap_or(MAX_TIMEOUT_MS),
    };
    let send_stdin = !args.no_stdin && !std::io::stdin().is_terminal();
    let result = client
        .api
        .exec(&domain, &key, &frame, stdin_stream(send_stdin))
        .await
        .or_say(&client)?;

    let mut out = std::io::stdout().lock();
    let _ = out.write_all(result.stdout.as_bytes());
    let _ = out.flush();
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(result.stderr.as_bytes());
    if result.truncated {
        let _ = writeln!(
            err,
            "berth: the output was longer than 1 MiB; only its last 1 MiB is shown"
        );
    }
    if result.timed_out {
        let _ = writeln!(
            err,
            "berth: the command was killed after {} (--timeout)",
            humantime::format_duration(args.timeout)
        );
        return Ok(ExitCode::from(TIMED_OUT));
    }
    let code = result.exit_code.unwrap_or(1);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// This process's stdin as a stream (empty when `send` is false), read by a thread of its own:
/// a read blocked on a terminal or a pipe never holds up the runtime or the process's exit,
/// and the answer is taken as soon as the daemon gives it, whatever stdin is left unsent.
fn stdin_stream(send: bool) -> impl Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(8);
    if send {
        std::thread::spawn(move || {
            let mut stdin = std::io::stdin();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let item = match stdin.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => Ok(Bytes::copy_from_slice(&buf[..n])),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => Err(e),
                };
                let failed = item.is_err();
                if tx.blocking_send(item).is_err() || failed {
                    return;
                }
            }
        });
    }
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
}
