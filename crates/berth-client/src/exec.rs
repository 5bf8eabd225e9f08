//! Exec and logs: the two streaming routes.

use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self};
use futures_util::{Stream, StreamExt, TryStreamExt};
use reqwest::Method;

use crate::types::*;
use crate::{Client, ClientError, instance_path};

impl Client {
    /// `POST .../instances/{key}/exec`: the frame line, then `stdin` streamed as it comes.
    ///
    /// The answer is taken as soon as the daemon gives it, even when the command ended before
    /// reading all of its stdin. The request may take the frame's timeout plus a minute.
    pub async fn exec<S>(
        &self,
        domain: &DomainId,
        key: &str,
        frame: &ExecFrame,
        stdin: S,
    ) -> Result<ExecResult, ClientError>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    {
        let mut head = serde_json::to_vec(frame).map_err(|e| ClientError::Decode {
            what: "the exec frame".to_owned(),
            detail: e.to_string(),
        })?;
        head.push(b'\n');
        let body = stream::once(async move { Ok(Bytes::from(head)) }).chain(stdin);
        let path = instance_path(domain, key, "/exec");
        let req = self
            .request(Method::POST, &path)
            .header("content-type", "application/octet-stream")
            .timeout(
                Duration::from_millis(u64::try_from(frame.timeout_ms).unwrap_or(0))
                    + Duration::from_secs(60),
            )
            .body(reqwest::Body::wrap_stream(body));
        self.json(format!("POST {path}"), req).await
    }

    /// [`Client::exec`] with all of stdin at hand.
    pub async fn exec_bytes(
        &self,
        domain: &DomainId,
        key: &str,
        frame: &ExecFrame,
        stdin: impl Into<Bytes>,
    ) -> Result<ExecResult, ClientError> {
        let stdin: Bytes = stdin.into();
        let chunks = if stdin.is_empty() {
            Vec::new()
        } else {
            vec![Ok(stdin)]
        };
        self.exec(domain, key, frame, stream::iter(chunks)).await
    }

    /// `GET .../instances/{key}/logs`: the last `tail` lines (all when `None`), then with
    /// `follow` what the container writes next, as the bytes come.
    pub async fn logs(
        &self,
        domain: &DomainId,
        key: &str,
        tail: Option<u64>,
        follow: bool,
    ) -> Result<impl Stream<Item = Result<Bytes, ClientError>> + Send + 'static, ClientError> {
        let mut query = format!("?follow={follow}");
        if let Some(tail) = tail {
            query.push_str(&format!("&tail={tail}"));
        }
        // No overall timeout: a followed log lasts as long as the instance runs.
        let req = self.request(
            Method::GET,
            &instance_path(domain, key, &format!("/logs{query}")),
        );
        let res = self.send(req).await?;
        let this = self.clone();
        Ok(res.bytes_stream().map_err(move |e| this.transport(&e)))
    }
}
