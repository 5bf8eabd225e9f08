//! An exec on a terminal: `POST .../exec/tty`, upgraded to the terminal's connection.

use berth_api::exec::{
    MAX_TTY_MESSAGE, TTY_EXIT, TTY_INPUT, TTY_OUTPUT, TTY_PROTOCOL, TTY_RESIZE, TtyExit, TtyFrame,
};
use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};

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

/// The daemon's side of a terminal: what it shows, and how its command ended.
pub struct TtyReader {
    from: ReadHalf<reqwest::Upgraded>,
    buf: Vec<u8>,
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
                buf: vec![0u8; MAX_TTY_MESSAGE],
            },
            TtyWriter { to },
        ))
    }
}

impl TtyReader {
    /// The next message from the daemon.
    pub async fn next(&mut self) -> TtyMessage {
        let mut head = [0u8; 5];
        if self.from.read_exact(&mut head).await.is_err() {
            return TtyMessage::Closed;
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > MAX_TTY_MESSAGE || self.from.read_exact(&mut self.buf[..len]).await.is_err() {
            return TtyMessage::Closed;
        }
        let bytes = &self.buf[..len];
        match head[0] {
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
