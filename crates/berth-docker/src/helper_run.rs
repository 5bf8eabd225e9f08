//! A command run to its end in one of berth's helper containers (a copy's `cp -a`, an upper
//! layer's script and its listing): not on a terminal, stdout and stderr together, at most the
//! last bytes the caller asks for kept, then its exit code from an exec inspect.

use std::time::Duration;

use berth_core::runtime::RuntimeError;
use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::StreamExt;

use crate::error;

/// How a helper's command ended: its exit code (`127` when the engine found no such command)
/// and the last of what it printed.
pub(crate) struct Ran {
    pub code: Option<i64>,
    pub said: String,
}

/// Makes an exec of `argv` in helper container `id` (its stdout and stderr attached, its stdin
/// too with `stdin`) and starts it attached, not on a terminal: its id, and the engine's answer
/// to the start, which the caller reads (a command the image lacks is refused there).
pub(crate) async fn start(
    docker: &Docker,
    id: &str,
    argv: Vec<String>,
    stdin: bool,
    what: &str,
) -> Result<(String, Result<StartExecResults, bollard::errors::Error>), RuntimeError> {
    let created = docker
        .create_exec(
            id,
            CreateExecOptions::<String> {
                cmd: Some(argv),
                attach_stdin: Some(stdin),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| error::map(e, what))?;
    let options = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: None,
    };
    let started = docker.start_exec(&created.id, Some(options)).await;
    Ok((created.id, started))
}

/// Runs `argv` in helper container `id` to its end, reading its output for at most `timeout`
/// and keeping only its last `keep` bytes (a peer's output is never held whole).
pub(crate) async fn run_to_end(
    docker: &Docker,
    id: &str,
    argv: Vec<String>,
    keep: usize,
    timeout: Duration,
    what: &str,
) -> Result<Ran, RuntimeError> {
    let client = docker.clone().with_timeout(timeout);
    let (exec_id, started) = start(&client, id, argv, false, what).await?;
    let mut said: Vec<u8> = Vec::new();
    match started {
        Ok(StartExecResults::Attached { mut output, .. }) => {
            while let Some(frame) = output.next().await {
                let frame = frame.map_err(|e| error::map(e, what))?;
                said.extend_from_slice(&frame.into_bytes());
                if said.len() > keep.saturating_mul(2).max(4096) {
                    said.drain(..said.len() - keep);
                }
            }
        }
        Ok(StartExecResults::Detached) => {}
        Err(e) => {
            let message = error::message(&e);
            if no_such_command(&message) {
                return Ok(Ran {
                    code: Some(127),
                    said: message,
                });
            }
            return Err(error::map(e, what));
        }
    }
    if said.len() > keep {
        said.drain(..said.len() - keep);
    }
    let code = crate::exec::wait_exit(docker, &exec_id, what).await?;
    Ok(Ran {
        code,
        said: String::from_utf8_lossy(&said).into_owned(),
    })
}

/// Whether what the engine said (a refused start, or an exec's own output) is that a command does
/// not exist.
pub(crate) fn no_such_command(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("executable file not found")
        || m.contains("no such file or directory")
        || m.contains("not found in $path")
}
