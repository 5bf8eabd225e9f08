//! An exec on a terminal: `POST .../exec/tty`, upgraded to the terminal's connection.

use berth_api::exec::{
    MAX_TTY_MESSAGE, TTY_EXIT, TTY_INPUT, TTY_OUTPUT, TTY_PROTOCOL, TTY_RESIZE, TtyExit, TtyFrame,
};
use reqwest::Method;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};

use crate::types::DomainId;
use crate::{ApiError, Client, ClientError, instance_path};

/// What the terminal's connection carries from the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TtyMessage {
    /// What the terminal shows.
    Output(Vec<u8>),
    /// How the command ended; the connection closes after it.
    Exit(Option<i64>),
    /// The connection closed without saying how the command ended.
    Closed,
}

/// A message's kind byte and 4-byte length.
const HEAD: usize = 5;

/// The daemon's side of a terminal: what it shows, and how its command ended.
pub struct TtyReader {
    from: ReadHalf<reqwest::Upgraded>,
    /// Bytes received and not yet handed out: at most one message's head and payload.
    pending: Vec<u8>,
    /// Where each read lands before it joins `pending`.
    scratch: Vec<u8>,
}

/// The client's side of a terminal: keystrokes and resizes.
pub struct TtyWriter {
    to: WriteHalf<reqwest::Upgraded>,
}

impl Client {
    /// `POST .../instances/{key}/exec/tty`: starts `frame`'s command on a terminal of its size
    /// and answers the terminal's connection; a refusal (not running, the engine away, ...)
    /// is the daemon's error.
    pub async fn exec_tty(
        &self,
        domain: &DomainId,
        key: &str,
        frame: &TtyFrame,
    ) -> Result<(TtyReader, TtyWriter), ClientError> {
        let path = instance_path(domain, key, "/exec/tty");
        let body = serde_json::to_vec(frame).map_err(|e| ClientError::Decode {
            what: "the terminal's frame".to_owned(),
            detail: e.to_string(),
        })?;
        let res = self
            .request(Method::POST, &path)
            .header("connection", "upgrade")
            .header("upgrade", TTY_PROTOCOL)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| self.transport(&e))?;
        let status = res.status();
        if status != reqwest::StatusCode::SWITCHING_PROTOCOLS {
            let text = res.text().await.map_err(|e| self.transport(&e))?;
            return Err(ApiError::from_answer(status.as_u16(), &text).into());
        }
        let upgraded = res.upgrade().await.map_err(|e| self.transport(&e))?;
        let (from, to) = tokio::io::split(upgraded);
        Ok((
            TtyReader {
                from,
                pending: Vec::with_capacity(HEAD + MAX_TTY_MESSAGE),
                scratch: vec![0u8; HEAD + MAX_TTY_MESSAGE],
            },
            TtyWriter { to },
        ))
    }
}

impl TtyReader {
    /// The next message from the daemon.
    ///
    /// Cancel-safe, as a `tokio::select!` beside keystrokes needs: what a dropped call had
    /// read stays in the reader for the next, so no message is cut (a cut one would leave the
    /// rest of the stream read from the middle of a message).
    pub async fn next(&mut self) -> TtyMessage {
        next_message(&mut self.from, &mut self.pending, &mut self.scratch).await
    }
}

/// The next whole message from `from`, kept in `pending` across cancelled calls. Never holds
/// more than one message's head and payload: each read asks for at most what the message
/// still lacks.
async fn next_message<R: AsyncRead + Unpin>(
    from: &mut R,
    pending: &mut Vec<u8>,
    scratch: &mut [u8],
) -> TtyMessage {
    loop {
        let wanted = match pending.get(..HEAD) {
            Some(head) => {
                let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
                if len > MAX_TTY_MESSAGE {
                    return TtyMessage::Closed;
                }
                HEAD + len
            }
            None => HEAD,
        };
        if pending.len() >= wanted {
            let message = decode(pending[0], &pending[HEAD..wanted]);
            pending.drain(..wanted);
            return message;
        }
        let room = (wanted - pending.len()).min(scratch.len());
        // `read` is cancel-safe: a call dropped while it waits has read nothing.
        match from.read(&mut scratch[..room]).await {
            Ok(0) | Err(_) => return TtyMessage::Closed,
            Ok(n) => pending.extend_from_slice(&scratch[..n]),
        }
    }
}

fn decode(kind: u8, bytes: &[u8]) -> TtyMessage {
    match kind {
        TTY_OUTPUT => TtyMessage::Output(bytes.to_vec()),
        TTY_EXIT => TtyMessage::Exit(
            serde_json::from_slice::<TtyExit>(bytes)
                .ok()
                .and_then(|e| e.exit_code),
        ),
        // A kind this client does not know: nothing to show.
        _ => TtyMessage::Output(Vec::new()),
    }
}

impl TtyWriter {
    /// Keystrokes, as typed.
    pub async fn input(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        for chunk in bytes.chunks(MAX_TTY_MESSAGE) {
            self.send(TTY_INPUT, chunk).await?;
        }
        Ok(())
    }

    /// The terminal's new size.
    pub async fn resize(&mut self, cols: u16, rows: u16) -> std::io::Result<()> {
        let [c0, c1] = cols.to_be_bytes();
        let [r0, r1] = rows.to_be_bytes();
        self.send(TTY_RESIZE, &[c0, c1, r0, r1]).await
    }

    async fn send(&mut self, kind: u8, bytes: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes();
        self.to
            .write_all(&[kind, len[0], len[1], len[2], len[3]])
            .await?;
        self.to.write_all(bytes).await?;
        self.to.flush().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;

    use super::*;

    fn message(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut bytes = vec![kind];
        bytes.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        bytes.extend_from_slice(payload);
        bytes
    }

    /// A call dropped while a message has only partly arrived (as `select!` drops it when a key
    /// is typed) loses nothing: the next call answers the whole message, then the next one.
    #[tokio::test]
    async fn a_read_cancelled_mid_message_loses_nothing() {
        let (mut daemon, mut client) = tokio::io::duplex(64);
        let (mut pending, mut scratch) = (Vec::new(), vec![0u8; HEAD + MAX_TTY_MESSAGE]);
        let output = message(TTY_OUTPUT, b"hello, terminal");
        // The head and part of the payload, then a call that is dropped while it waits.
        daemon.write_all(&output[..8]).await.unwrap();
        let cut = tokio::time::timeout(
            Duration::from_millis(50),
            next_message(&mut client, &mut pending, &mut scratch),
        )
        .await;
        assert!(
            cut.is_err(),
            "a message that has not all arrived is not answered"
        );
        daemon.write_all(&output[8..]).await.unwrap();
        daemon
            .write_all(&message(TTY_EXIT, br#"{"exitCode":7}"#))
            .await
            .unwrap();
        assert_eq!(
            next_message(&mut client, &mut pending, &mut scratch).await,
            TtyMessage::Output(b"hello, terminal".to_vec())
        );
        assert_eq!(
            next_message(&mut client, &mut pending, &mut scratch).await,
            TtyMessage::Exit(Some(7))
        );
        drop(daemon);
        assert_eq!(
            next_message(&mut client, &mut pending, &mut scratch).await,
            TtyMessage::Closed
        );
    }

    /// A length past the protocol's largest message closes the terminal, reading no further.
    #[tokio::test]
    async fn a_message_longer_than_the_protocol_allows_closes_it() {
        let (mut daemon, mut client) = tokio::io::duplex(64);
        let (mut pending, mut scratch) = (Vec::new(), vec![0u8; HEAD + MAX_TTY_MESSAGE]);
        let mut head = vec![TTY_OUTPUT];
        head.extend_from_slice(&(MAX_TTY_MESSAGE as u32 + 1).to_be_bytes());
        daemon.write_all(&head).await.unwrap();
        assert_eq!(
            next_message(&mut client, &mut pending, &mut scratch).await,
            TtyMessage::Closed
        );
    }
}
