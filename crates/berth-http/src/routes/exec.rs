//! The raw exec route: one JSON line (the frame), then the command's stdin, raw, to the end of
//! the body. Stdin is streamed into the process as it arrives. No header, query or log line
//! carries the argv or stdin, and nothing about the run is stored.

use std::io;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::{Extension, Json};
use berth_core::exec::{ExecResult, MAX_FRAME_BYTES, decode_frame};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::io::StreamReader;
use tokio_util::sync::CancellationToken;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{InstancePath, Params};

pub(crate) fn router() -> OpenApiRouter<App> {
    // Stdin may be any size: it is streamed, never held whole.
    OpenApiRouter::new()
        .routes(routes!(exec_instance))
        .layer(DefaultBodyLimit::disable())
}

/// Runs a command in a running instance. The body is one JSON line, the frame
/// `{"argv": [...], "user": string|null, "timeoutMs": 1000..21600000}` of at most 64 KiB, then
/// the command's stdin, raw, to the end of the body.
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/exec", tag = "resource-instances",
    params(InstancePath),
    request_body(content = String, content_type = "application/octet-stream",
        description = "One JSON line (the exec frame), then the command's stdin to the end of the body."),
    responses((status = 200, body = ExecResult), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn exec_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    body: Body,
) -> Result<Json<ExecResult>, ApiError> {
    let (domain, key) = path.parts()?;
    // Cancelled when berth stops, when the body breaks off (the client went away while stdin
    // streamed), or when this handler is dropped (hyper saw the connection close): each kills
    // the command in its container at once.
    let cancel = app.shutdown.child_token();
    let _cancel_on_drop = cancel.clone().drop_guard();
    let stream = linger_body(body, cancel.clone(), app.shutdown.clone());
    let mut reader = BufReader::with_capacity(MAX_FRAME_BYTES + 1, StreamReader::new(stream));
    let line = read_frame(&mut reader).await?;
    let frame = decode_frame(&line).map_err(|p| ApiError::refused(p.joined()))?;
    let result = app
        .berth
        .exec(&caller.owner, &domain, key, frame, Box::pin(reader), cancel)
        .await?;
    Ok(Json(result))
}

/// How long the rest of a body is read and dropped once the command has answered.
const LINGER: Duration = Duration::from_secs(60);

/// The body as a stream of stdin, read by a task of its own. A body that breaks off cancels
/// `broken`. Once the command has answered, what the client still sends is read and dropped
/// (for at most [`LINGER`], or until berth stops): a connection closed with unread bytes in it
/// is reset, and a reset can reach the client before the answer does, so a command that ends
/// before reading all its stdin would lose its answer.
fn linger_body(
    body: Body,
    broken: CancellationToken,
    shutdown: CancellationToken,
) -> impl Stream<Item = io::Result<Bytes>> + Send + Unpin + 'static {
    let (tx, mut rx) = mpsc::channel::<io::Result<Bytes>>(4);
    tokio::spawn(async move {
        let mut chunks = body.into_data_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| {
                broken.cancel();
                io::Error::other(e)
            });
            let failed = chunk.is_err();
            if tx.send(chunk).await.is_err() {
                break;
            }
            if failed {
                return;
            }
        }
        drop(tx);
        let drain = async { while let Some(Ok(_)) = chunks.next().await {} };
        tokio::select! {
            _ = tokio::time::timeout(LINGER, drain) => {}
            _ = shutdown.cancelled() => {}
        }
    });
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Reads the frame line, without its newline, refusing one longer than `MAX_FRAME_BYTES`.
async fn read_frame<R: AsyncBufRead + Unpin>(reader: &mut R) -> Result<Vec<u8>, ApiError> {
    let too_long = || {
        ApiError::refused(format!(
            "frame must be one JSON line of at most {MAX_FRAME_BYTES} bytes, then stdin"
        ))
    };
    let mut line = Vec::new();
    loop {
        let buf = reader
            .fill_buf()
            .await
            .map_err(|_| ApiError::refused("body could not be read"))?;
        if buf.is_empty() {
            return Err(ApiError::refused(
                "frame must end with a newline: the body is one JSON line, then stdin",
            ));
        }
        if let Some(i) = buf.iter().position(|&b| b == b'\n') {
            if line.len() + i > MAX_FRAME_BYTES {
                return Err(too_long());
            }
            line.extend_from_slice(&buf[..i]);
            reader.consume(i + 1);
            return Ok(line);
        }
        if line.len() + buf.len() > MAX_FRAME_BYTES {
            return Err(too_long());
        }
        let n = buf.len();
        line.extend_from_slice(buf);
        reader.consume(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frame_of(body: &[u8]) -> Result<Vec<u8>, String> {
        let mut reader = BufReader::with_capacity(7, body);
        read_frame(&mut reader).await.map_err(|e| format!("{e:?}"))
    }

    #[tokio::test]
    async fn the_frame_is_the_first_line_and_the_rest_is_left_for_stdin() {
        let body = b"{\"a\":1}\nstdin\nmore";
        let mut reader = BufReader::with_capacity(3, &body[..]);
        assert_eq!(read_frame(&mut reader).await.unwrap(), b"{\"a\":1}");
        let mut rest = Vec::new();
        tokio::io::AsyncReadExt::read_to_end(&mut reader, &mut rest)
            .await
            .unwrap();
        assert_eq!(rest, b"stdin\nmore");
    }

    #[tokio::test]
    async fn a_frame_without_newline_or_over_the_limit_is_refused() {
        assert!(
            frame_of(b"{}")
                .await
                .unwrap_err()
                .contains("must end with a newline")
        );
        let long = vec![b'x'; MAX_FRAME_BYTES + 1];
        assert!(
            frame_of(&long)
                .await
                .unwrap_err()
                .contains("at most 65536 bytes")
        );
        let mut exact = vec![b'x'; MAX_FRAME_BYTES];
        exact.push(b'\n');
        assert_eq!(frame_of(&exact).await.unwrap().len(), MAX_FRAME_BYTES);
    }
}
