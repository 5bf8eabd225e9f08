//! An exec on a terminal (`berth exec -it`): `POST .../instances/{key}/exec/tty` with
//! `Connection: Upgrade` and `Upgrade: berth-tty`, its body the terminal's frame (argv, user,
//! size). The command is started first, so a refusal is an ordinary error answer; then `101`,
//! and the connection carries messages both ways (see `berth_api::exec`): keystrokes and
//! resizes in, the terminal's output out, and last how the command ended. Nothing about the run
//! (argv, keystrokes, output) is logged or stored.

use axum::Extension;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use berth_api::exec::{
    MAX_FRAME_BYTES, MAX_TTY_MESSAGE, TTY_EXIT, TTY_INPUT, TTY_OUTPUT, TTY_PROTOCOL, TTY_RESIZE,
    TtyExit, TtyFrame, decode_tty_frame,
};
use berth_core::runtime::TtySession;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{InstancePath, Params};

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new().routes(routes!(exec_tty))
}

/// Runs a command on a terminal in a running instance (one idleness stopped is woken first, as
/// for an exec). Send `Connection: Upgrade` and `Upgrade: berth-tty`, and the frame as the
/// body; on `101` the connection carries the terminal both ways: each message is a kind byte,
/// a 4-byte big-endian length and that many bytes (at most 64 KiB). From the client, kind 0 is
/// keystrokes and kind 1 a resize (columns then rows, 2 bytes each, big-endian); from the
/// daemon, kind 0 is the terminal's output and kind 2, last, `{"exitCode": n|null}`. The
/// command's end closes the connection; the client's closing ends the command (it is killed
/// in its container, as an exec's is).
#[utoipa::path(post, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/exec/tty", tag = "resource-instances",
    params(InstancePath, ("Upgrade" = String, Header, description = "berth-tty")),
    request_body(content = TtyFrame, description = "The command and the terminal's size."),
    responses((status = 101, description = "The connection is the terminal's from here on"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 500, body = ErrorBody)))]
async fn exec_tty(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    mut request: Request,
) -> Result<Response, ApiError> {
    let (domain, key) = path.parts()?;
    let asks_upgrade = request
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(TTY_PROTOCOL));
    let on_upgrade = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>();
    let (Some(on_upgrade), true) = (on_upgrade, asks_upgrade) else {
        return Err(ApiError::refused(format!(
            "header.upgrade must be {TTY_PROTOCOL}, with Connection: Upgrade: this route turns \
             the connection into a terminal's"
        )));
    };
    let body = axum::body::to_bytes(request.into_body(), MAX_FRAME_BYTES)
        .await
        .map_err(|_| {
            ApiError::refused(format!(
                "body must be JSON of at most {MAX_FRAME_BYTES} bytes"
            ))
        })?;
    let frame = decode_tty_frame(&body).map_err(|p| ApiError::refused(p.joined()))?;
    let session = app
        .berth
        .exec_tty(
            &caller.owner,
            &domain,
            key,
            frame.argv,
            frame.user,
            (frame.cols, frame.rows),
        )
        .await?;
    let shutdown = app.shutdown.clone();
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        relay(TokioIo::new(upgraded), session, shutdown).await;
    });
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    response
        .headers_mut()
        .insert(header::UPGRADE, HeaderValue::from_static(TTY_PROTOCOL));
    Ok(response)
}

/// Moves the terminal both ways until the command ends, then says how it ended and closes; or
/// until the client goes or berth stops, which ends the command.
async fn relay<C>(connection: C, session: TtySession, shutdown: CancellationToken)
where
    C: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut from_client, mut to_client) = tokio::io::split(connection);
    let TtySession {
        mut output,
        mut input,
        resize,
        exit,
    } = session;
    let inbound = async move {
        let mut head = [0u8; 5];
        let mut payload = vec![0u8; MAX_TTY_MESSAGE];
        while from_client.read_exact(&mut head).await.is_ok() {
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            if len > MAX_TTY_MESSAGE || from_client.read_exact(&mut payload[..len]).await.is_err() {
                break;
            }
            let keys = head[0] == TTY_INPUT;
            if keys
                && (input.write_all(&payload[..len]).await.is_err() || input.flush().await.is_err())
            {
                break;
            }
            if head[0] == TTY_RESIZE && len == 4 {
                let cols = u16::from_be_bytes([payload[0], payload[1]]);
                let rows = u16::from_be_bytes([payload[2], payload[3]]);
                let _ = resize.try_send((cols, rows));
            }
        }
        // The client is gone: the command's input ends, and so does the relay (the command,
        // dropped before it ended, is killed in its container, as an exec's is).
        let _ = input.shutdown().await;
    };
    let outbound = async move {
        let mut buf = vec![0u8; MAX_TTY_MESSAGE];
        loop {
            let n = match output.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if send(&mut to_client, TTY_OUTPUT, &buf[..n]).await.is_err() {
                return;
            }
        }
        let ended = TtyExit {
            exit_code: exit.await,
        };
        let json = serde_json::to_vec(&ended).unwrap_or_default();
        let _ = send(&mut to_client, TTY_EXIT, &json).await;
        let _ = to_client.shutdown().await;
    };
    tokio::select! {
        () = outbound => {}
        () = inbound => {}
        () = shutdown.cancelled() => {}
    }
}

async fn send<W: AsyncWrite + Unpin>(to: &mut W, kind: u8, bytes: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes();
    to.write_all(&[kind, len[0], len[1], len[2], len[3]])
        .await?;
    to.write_all(bytes).await?;
    to.flush().await
}
