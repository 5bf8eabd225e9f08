//! `berth exec -it NAME -- CMD...`: the command on a terminal of the instance's, with this
//! terminal in raw mode (every key goes to the command, Ctrl-C included) and its size followed
//! (SIGWINCH). The terminal is put back as it was however the command ends.

use std::io::{Read, Write};
use std::process::ExitCode;

use berth_client::{DomainId, TtyFrame, TtyMessage};
use rustix::termios::{OptionalActions, Termios, tcgetattr, tcgetwinsize, tcsetattr};
use tokio::signal::unix::{SignalKind, signal};

use crate::client::{Client, OrSay};

/// This terminal's attributes, restored when dropped.
struct Raw {
    before: Termios,
}

impl Raw {
    fn enter() -> anyhow::Result<Raw> {
        let stdin = std::io::stdin();
        let before = tcgetattr(&stdin)
            .map_err(|e| anyhow::anyhow!("could not read the terminal's settings: {e}"))?;
        let mut raw = before.clone();
        raw.make_raw();
        tcsetattr(&stdin, OptionalActions::Now, &raw)
            .map_err(|e| anyhow::anyhow!("could not put the terminal in raw mode: {e}"))?;
        Ok(Raw { before })
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, &self.before);
    }
}

/// This terminal's columns and rows (80x24 when it cannot say).
fn size() -> (u16, u16) {
    match tcgetwinsize(std::io::stdout()) {
        Ok(w) if w.ws_col > 0 && w.ws_row > 0 => (w.ws_col.min(1000), w.ws_row.min(1000)),
        _ => (80, 24),
    }
}

pub(super) async fn run(
    client: &Client,
    domain: &DomainId,
    key: &str,
    argv: Vec<String>,
    user: Option<String>,
) -> anyhow::Result<ExitCode> {
    let (cols, rows) = size();
    let frame = TtyFrame {
        argv,
        user,
        cols,
        rows,
    };
    let (mut reader, mut writer) = client
        .api
        .exec_tty(domain, key, &frame)
        .await
        .or_say(client)?;
    let raw = Raw::enter()?;
    let mut resized = signal(SignalKind::window_change())?;
    // Keystrokes, read by a thread of their own: a blocked read never holds the runtime.
    let (keys_tx, mut keys) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if keys_tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut out = std::io::stdout();
    let code = loop {
        tokio::select! {
            message = reader.next() => match message {
                TtyMessage::Output(bytes) => {
                    let _ = out.write_all(&bytes);
                    let _ = out.flush();
                }
                TtyMessage::Exit(code) => break code,
                TtyMessage::Closed => break None,
            },
            Some(bytes) = keys.recv() => {
                if writer.input(&bytes).await.is_err() {
                    break None;
                }
            }
            Some(()) = resized.recv() => {
                let (cols, rows) = size();
                let _ = writer.resize(cols, rows).await;
            }
        }
    };
    drop(raw);
    Ok(match code {
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => {
            eprintln!(
                "berth: the terminal's connection closed before the command said how it ended"
            );
            ExitCode::FAILURE
        }
    })
}
