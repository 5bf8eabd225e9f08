//! A minimal HTTP client for the two engine calls bollard's typed API cannot make against
//! API 1.41: `GET /system/df` (bollard parses only the newer answer shape, so on Docker 20.10
//! every field comes back empty) and `POST /networks/create` with `CheckDuplicate` (which
//! bollard's request type no longer carries, and without which Docker before API 1.44 creates
//! a second network of the same name).
//!
//! One request per connection, on the same endpoint bollard uses: a Unix socket or plain TCP.
//! An engine reached over TLS or SSH has no raw client; the callers then fall back.

use std::path::PathBuf;
use std::time::Duration;

use berth_core::runtime::RuntimeError;
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

#[derive(Debug, Clone)]
enum Endpoint {
    Unix(PathBuf),
    Tcp(String),
}

/// Sends single requests to the engine, under the negotiated API version.
#[derive(Debug, Clone)]
pub(crate) struct RawClient {
    endpoint: Endpoint,
    version: String,
}

/// The engine's answer: its status and whole body.
pub(crate) struct RawResponse {
    pub status: StatusCode,
    pub body: Bytes,
}

impl RawResponse {
    /// The engine's `message` for a refusal, or the body as text.
    pub fn message(&self) -> String {
        #[derive(serde::Deserialize)]
        struct Message {
            message: String,
        }
        serde_json::from_slice::<Message>(&self.body)
            .map(|m| m.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&self.body).trim().to_owned())
    }
}

impl RawClient {
    /// A client for `host` as `DOCKER_HOST` spells it, or `None` for a transport it does not
    /// speak (TLS, SSH, named pipes).
    pub fn for_host(host: &str, version: &str) -> Option<Self> {
        let endpoint = if let Some(path) = host.strip_prefix("unix://") {
            Endpoint::Unix(PathBuf::from(path))
        } else if let Some(rest) = host
            .strip_prefix("tcp://")
            .or_else(|| host.strip_prefix("http://"))
        {
            if std::env::var_os("DOCKER_TLS_VERIFY").is_some() {
                return None;
            }
            let authority = rest.split('/').next().unwrap_or_default();
            if authority.is_empty() {
                return None;
            }
            Endpoint::Tcp(authority.to_owned())
        } else {
            return None;
        };
        Some(Self {
            endpoint,
            version: version.to_owned(),
        })
    }

    /// Sends `method path_and_query` (without the version prefix) with an optional JSON body,
    /// and reads the whole answer, all within `timeout`.
    pub async fn request(
        &self,
        method: Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<RawResponse, RuntimeError> {
        let uri = format!("/v{}{}", self.version, path_and_query);
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, "docker")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| RuntimeError::Engine(format!("could not build a request: {e}")))?;
        let exchange = async {
            match &self.endpoint {
                Endpoint::Unix(path) => send(UnixStream::connect(path).await?, request).await,
                Endpoint::Tcp(authority) => {
                    send(TcpStream::connect(authority.as_str()).await?, request).await
                }
            }
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(e)) => Err(RuntimeError::Unavailable(format!(
                "the Docker engine's connection failed: {e}"
            ))),
            Err(_) => Err(RuntimeError::Unavailable(format!(
                "the Docker engine did not answer within {}",
                crate::error::human(timeout)
            ))),
        }
    }
}

/// Aborts the connection task when the exchange ends or is abandoned.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn send<S>(io: S, request: Request<Full<Bytes>>) -> std::io::Result<RawResponse>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(std::io::Error::other)?;
    let _driver = AbortOnDrop(tokio::spawn(async move {
        let _ = connection.await;
    }));
    let response = sender
        .send_request(request)
        .await
        .map_err(std::io::Error::other)?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(std::io::Error::other)?
        .to_bytes();
    Ok(RawResponse { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speaks_unix_and_plain_tcp_only() {
        assert!(matches!(
            RawClient::for_host("unix:///var/run/docker.sock", "1.41").map(|c| c.endpoint),
            Some(Endpoint::Unix(p)) if p == std::path::Path::new("/var/run/docker.sock")
        ));
        if std::env::var_os("DOCKER_TLS_VERIFY").is_none() {
            assert!(matches!(
                RawClient::for_host("tcp://127.0.0.1:2375", "1.41").map(|c| c.endpoint),
                Some(Endpoint::Tcp(a)) if a == "127.0.0.1:2375"
            ));
        }
        assert!(RawClient::for_host("ssh://user@host", "1.41").is_none());
        assert!(RawClient::for_host("https://host:2376", "1.41").is_none());
    }
}
