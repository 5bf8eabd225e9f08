//! A command on a terminal in a running container (`exec -it`): the engine allocates the
//! pseudo-terminal, its output is one stream, keystrokes go to its input as they come, and its
//! size follows the caller's. Nothing of the command (argv, input, output) is logged.

use berth_core::runtime::{RuntimeError, TtyRequest, TtySession};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::error;

/// Resizes not yet applied; a newer one replaces what waits.
const RESIZES: usize = 8;
/// How long after its output ends a terminal's command may take to be recorded as ended.
const EXIT_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

pub(crate) async fn start(
    docker: &Docker,
    container: &str,
    request: TtyRequest,
) -> Result<TtySession, RuntimeError> {
    let what = format!("a terminal in container {container}");
    let secrets: Vec<&str> = request.argv.iter().map(String::as_str).collect();
    let options = CreateExecOptions::<String> {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(true),
        cmd: Some(request.argv.clone()),
        user: request.user.clone().filter(|u| !u.is_empty()),
        env: Some(vec!["TERM=xterm-256color".to_owned()]),
        ..Default::default()
    };
    let created = docker
        .create_exec(container, options)
        .await
        .map_err(|e| error::map_redacted(e, &format!("container {container}"), &secrets))?;
    let exec_id = created.id;
    let start = StartExecOptions {
        detach: false,
        tty: true,
        output_capacity: None,
    };
    let (mut output, input) = match docker.start_exec(&exec_id, Some(start)).await {
        Ok(StartExecResults::Attached { output, input }) => (output, input),
        Ok(StartExecResults::Detached) => {
            return Err(RuntimeError::Engine(format!(
                "the engine started {what} detached, without its terminal"
            )));
        }
        Err(e) => return Err(error::map_redacted(e, &what, &secrets)),
    };
    let (cols, rows) = request.size;
    resize(docker, &exec_id, cols, rows).await;

    // The output, as bytes, through a pipe the caller reads.
    let (mut write, read) = tokio::io::duplex(64 * 1024);
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
    let output_id = exec_id.clone();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        while let Some(frame) = output.next().await {
            let frame = match frame {
                Ok(frame) => frame,
                Err(e) => {
                    tracing::warn!(exec = %output_id, error = %e,
                        "a terminal's output stream from the engine failed");
                    break;
                }
            };
            let bytes = match frame {
                LogOutput::StdOut { message }
                | LogOutput::StdErr { message }
                | LogOutput::Console { message } => message,
                LogOutput::StdIn { .. } => continue,
            };
            if write.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = write.shutdown().await;
        let _ = ended_tx.send(());
    });

    let (resize_tx, mut resize_rx) = mpsc::channel::<(u16, u16)>(RESIZES);
    let resizer = docker.clone();
    let id = exec_id.clone();
    tokio::spawn(async move {
        while let Some((cols, rows)) = resize_rx.recv().await {
            resize(&resizer, &id, cols, rows).await;
        }
    });

    let inspector = docker.clone();
    // Dropped before the command ended (its caller went away, berth is stopping): killed in
    // its container, as an exec is.
    let guard = KillUnlessEnded {
        docker: docker.clone(),
        exec_id: exec_id.clone(),
        armed: true,
    };
    let exit = Box::pin(async move {
        let mut guard = guard;
        let _ = ended_rx.await;
        // The engine may close the terminal's stream a moment before it records the exit:
        // its code is waited for, briefly. The output also ends when the engine's stream
        // fails under a command that still runs: that one is killed with the guard, not left
        // running for nobody.
        let ended = tokio::time::timeout(
            EXIT_SETTLE,
            crate::exec::wait_exit(&inspector, &exec_id, "a terminal's command"),
        )
        .await;
        match ended {
            Ok(Ok(code)) => {
                guard.disarm();
                code
            }
            Ok(Err(_)) | Err(_) => None,
        }
    });
    Ok(TtySession {
        output: Box::pin(read),
        input,
        resize: resize_tx,
        exit,
    })
}

/// Kills the command when dropped armed.
struct KillUnlessEnded {
    docker: Docker,
    exec_id: String,
    armed: bool,
}

impl KillUnlessEnded {
    /// The command ended by itself: nothing to kill.
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for KillUnlessEnded {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (docker, exec_id) = (self.docker.clone(), std::mem::take(&mut self.exec_id));
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Err(e) = crate::exec::kill(&docker, &exec_id).await {
                    tracing::warn!(exec = %exec_id, error = %e, "could not kill an abandoned terminal's command");
                }
            });
        }
    }
}

/// The terminal's size; a failure (the command ended meanwhile) changes nothing.
async fn resize(docker: &Docker, exec_id: &str, cols: u16, rows: u16) {
    if cols == 0 || rows == 0 {
        return;
    }
    let options = ResizeExecOptions {
        height: rows,
        width: cols,
    };
    if let Err(e) = docker.resize_exec(exec_id, options).await {
        tracing::debug!(exec = %exec_id, error = %e, "a terminal could not be resized");
    }
}
