//! Waiting for an instance and following a domain's events.

use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, BoxStream};
use futures_util::{Stream, StreamExt, TryStreamExt};
use reqwest::Method;

use crate::types::*;
use crate::{Client, ClientError, MAX_WAIT, domain_path, instance_path, seg, sse};

impl Client {
    /// `GET .../instances/{key}/wait?for=...&timeoutMs=...`: answers once the instance's state
    /// kind is one of `kinds` and berth has acted on what it was last asked
    /// (`observedGeneration == generation`), or at `timeout` (at most 300 s) with
    /// `timedOut: true`.
    pub async fn wait(
        &self,
        domain: &DomainId,
        key: &str,
        kinds: &[&str],
        timeout: Duration,
    ) -> Result<WaitAnswer, ClientError> {
        let timeout = timeout.min(MAX_WAIT);
        let kinds: Vec<String> = kinds.iter().map(|k| seg(k)).collect();
        let path = instance_path(
            domain,
            key,
            &format!(
                "/wait?for={}&timeoutMs={}",
                kinds.join(","),
                timeout.as_millis()
            ),
        );
        let req = self
            .request(Method::GET, &path)
            .timeout(timeout + self.timeout);
        self.json(format!("GET {path}"), req).await
    }

    /// Waits until the instance's state kind is one of `kinds`, or `timeout`.
    ///
    /// This is the one place a client waits for an instance. It asks the wait route; on a
    /// daemon without it (`404 RouteNotFoundError`) it polls `GET` instead, every
    /// [`POLL_EVERY`](crate::POLL_EVERY) or as the builder set. `seen` is called with each view of the instance seen while waiting (for
    /// progress); when polling, a state whose kind is in `kinds` ends the wait only when `seen`
    /// returns true for it, which is how a caller tells a state from before its request from
    /// the answer to it (the wait route does that itself with its generations). A view whose
    /// `engine` says the daemon's engine does not answer ends the wait (not timed out) when
    /// `seen` returns true for it: nothing settles until the engine is back, and the caller
    /// reads `engine`.
    pub async fn wait_for_state(
        &self,
        domain: &DomainId,
        key: &str,
        kinds: &[&str],
        timeout: Duration,
        mut seen: impl FnMut(&InstanceView) -> bool,
    ) -> Result<Settled, ClientError> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Ask the route in slices, so that `seen` hears of progress now and then.
        const SLICE: Duration = Duration::from_secs(2);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                // Time is up: one GET below says where the instance stands.
                break;
            }
            match self.wait(domain, key, kinds, left.min(SLICE)).await {
                Ok(w) => {
                    let done = seen(&w.instance);
                    // The daemon's engine is away: nothing settles until it answers, and the
                    // caller may take that as the end (the view carries `engine`).
                    if !w.timed_out || (done && w.instance.engine.is_some()) {
                        return Ok(Settled {
                            instance: w.instance,
                            timed_out: false,
                        });
                    }
                    if left <= SLICE {
                        return Ok(Settled {
                            instance: w.instance,
                            timed_out: true,
                        });
                    }
                }
                // A daemon without the wait route: poll (remove once every daemon has it).
                Err(e) if e.is_route_not_found() => break,
                Err(e) => return Err(e),
            }
        }
        loop {
            let instance = self.instance(domain, key).await?;
            let wanted = kinds.contains(&instance.state.kind());
            if seen(&instance) && wanted {
                return Ok(Settled {
                    instance,
                    timed_out: false,
                });
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(Settled {
                    instance,
                    timed_out: true,
                });
            }
            tokio::time::sleep(self.poll_every).await;
        }
    }

    /// `GET /v1/resource-domains/{id}/events`: every change of the domain's instances, as it
    /// happens. Pass the id of the last event seen to resume; the daemon answers `Resync`
    /// (then every instance) when it cannot. Heartbeats and event kinds this client does not
    /// know are skipped. The stream ends when the daemon ends it; reconnecting is the caller's.
    pub fn events(
        &self,
        domain: &DomainId,
        last_event_id: Option<&str>,
    ) -> impl Stream<Item = Result<DomainEvent, ClientError>> + Send + 'static {
        let path = format!("{}/events", domain_path(domain));
        let mut req = self
            .request(Method::GET, &path)
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let this = self.clone();
        stream::once(async move {
            match this.send(req).await {
                Ok(res) => {
                    let bytes = res.bytes_stream().map_err(move |e| this.transport(&e));
                    decode_events(bytes, path).boxed()
                }
                Err(e) => stream::iter([Err(e)]).boxed(),
            }
        })
        .flatten()
    }
}

/// How [`Client::wait_for_state`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The instance, as last seen.
    pub instance: InstanceView,
    /// True when the timeout came first.
    pub timed_out: bool,
}

/// Turns an event stream's bytes into domain events.
pub fn decode_events<S>(
    bytes: S,
    what: String,
) -> BoxStream<'static, Result<DomainEvent, ClientError>>
where
    S: Stream<Item = Result<Bytes, ClientError>> + Send + 'static,
{
    let parser = sse::SseParser::new();
    bytes
        .scan(parser, move |parser, chunk| {
            let out: Vec<Result<DomainEvent, ClientError>> = match chunk {
                Err(e) => vec![Err(e)],
                Ok(chunk) => match parser.feed(&chunk) {
                    Err(sse::LineTooLong) => vec![Err(ClientError::Decode {
                        what: what.clone(),
                        detail: format!(
                            "a line of the event stream is longer than {} bytes",
                            sse::MAX_LINE_BYTES
                        ),
                    })],
                    Ok(events) => events
                        .into_iter()
                        .filter_map(|e| domain_event(e, &what))
                        .collect(),
                },
            };
            futures_util::future::ready(Some(stream::iter(out)))
        })
        .flatten()
        .boxed()
}

/// The domain event an SSE event is, if this client knows its kind.
fn domain_event(e: sse::SseEvent, what: &str) -> Option<Result<DomainEvent, ClientError>> {
    match e.event.as_str() {
        "instance" => Some(
            serde_json::from_str::<crate::types::InstanceChange>(&e.data)
                .map(|d| DomainEvent::Instance {
                    id: e.id,
                    instance: Box::new(d.instance),
                    generation: d.generation,
                    observed_generation: d.observed_generation,
                })
                .map_err(|err| ClientError::Decode {
                    what: format!("{what} (an instance event)"),
                    detail: err.to_string(),
                }),
        ),
        "resync" => Some(Ok(DomainEvent::Resync { id: e.id })),
        "copy" => Some(
            serde_json::from_str::<crate::types::CopyEvent>(&e.data)
                .map(|copy| DomainEvent::Copy { id: e.id, copy })
                .map_err(|err| ClientError::Decode {
                    what: format!("{what} (a copy event)"),
                    detail: err.to_string(),
                }),
        ),
        _ => None,
    }
}
