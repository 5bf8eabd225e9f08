//! Watching a domain: its instances' changes as Server-Sent Events, and a wait for one
//! instance to settle.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::{Extension, Json};
use berth_core::snapshots::CopyEvent;
use berth_core::watch::{Change, Event, InstanceChange, MAX_WAIT, Resume, STATE_KINDS};
use futures_util::stream::{self, Stream, StreamExt};
use serde::Serialize;
use tokio::sync::broadcast;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{DomainPath, FromQuery, InstancePath, Params, QueryParams};
use berth_api::instances::WaitAnswer;
use berth_core::decode::Problems;

/// How often an idle stream carries a comment, so proxies and clients keep it open.
const HEARTBEAT: Duration = Duration::from_secs(15);
/// The longest `Last-Event-ID` read; a longer one is not one of berth's.
const MAX_EVENT_ID: usize = 64;

pub(crate) fn router() -> OpenApiRouter<App> {
    OpenApiRouter::new()
        .routes(routes!(domain_events))
        .routes(routes!(wait_instance))
}

/// One Server-Sent Event of the domain stream, as a client parses it: `data` is the JSON text
/// `{"instance", "generation", "observedGeneration"}` for an `instance` event (the wait
/// route's answer without `timedOut`), a copy's progress (`CopyEvent`: `copyId`, `kind`,
/// `state`, `instanceKey`, `snapshotId`, `bytesDone`, `bytesTotal`, `message`) for a `copy`
/// event, `{}` for a `resync`.
#[derive(Debug, Serialize, ToSchema)]
pub struct DomainStreamEvent {
    /// `instance`, `copy` or `resync`.
    #[schema(pattern = "^(instance|copy|resync)$")]
    pub event: String,
    /// `<stream>-<sequence>`: the domain's stream in this daemon run and its own sequence (it
    /// moves only with this domain's changes). Send it back as `Last-Event-ID` to resume after
    /// it.
    #[schema(pattern = "^[0-9a-f]+-[0-9]+$")]
    pub id: String,
    /// The event's JSON text.
    #[schema(content_media_type = "application/json")]
    pub data: String,
}

/// A domain's instances as they change. Each change of an instance is one event `instance`
/// (id `<stream>-<sequence>`, data `{"instance", "generation", "observedGeneration"}`); a change
/// of `observedAt` alone is none. Each step of a copy (snapshot, branch, restore) is one event
/// `copy` with its bytes done and total and its state. The sequence is the domain's own: it moves
/// by one per event of this domain and never with another domain's changes. A new client first
/// gets every instance of the domain. A client that reconnects with the `Last-Event-ID` it saw
/// resumes without loss while berth still holds that id; one from an earlier run of the daemon,
/// from another domain, or too old, gets `event: resync` and then every instance again, as does
/// a client that falls too far behind. Comments keep an idle stream open.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/events", tag = "resource-instances",
    params(DomainPath, ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event seen, to resume after it")),
    responses((status = 200, description = "Server-Sent Events", content_type = "text/event-stream", body = DomainStreamEvent),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn domain_events(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<DomainPath>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let domain = path.id()?;
    // An id that is not text, or is too long to be berth's, is an id berth cannot resume from.
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() <= MAX_EVENT_ID)
        .map(str::to_owned);
    let (subscription, snapshot) = app
        .berth
        .subscribe(&caller.owner, &domain, last.as_deref())?;
    let watch = app.berth.watch().clone();
    let first: Vec<SseEvent> = match subscription.resume {
        Resume::Missed(missed) => missed
            .iter()
            .map(|e| change_event(&watch.event_id(&domain, e.seq), &e.change))
            .collect(),
        Resume::Resync => {
            let id = watch.event_id(&domain, subscription.at);
            let mut events = Vec::with_capacity(snapshot.len() + 1);
            if last.is_some() {
                events.push(resync_event(&id));
            }
            events.extend(snapshot.iter().map(|c| instance_event(&id, c)));
            events
        }
    };
    let state = Live {
        engine: app.berth.engine_changes(),
        feed: subscription.feed,
        app: app.clone(),
        owner: caller.owner.clone(),
        domain,
        watch,
        after: subscription.at,
    };
    let live = stream::unfold(state, |mut state| async move {
        let batch = state.next().await?;
        Some((stream::iter(batch), state))
    })
    .flatten();
    let stream = stream::iter(first)
        .chain(live)
        .map(Ok)
        // The stream ends when berth begins to stop.
        .take_until(app.shutdown.clone().cancelled_owned());
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(HEARTBEAT).text("")))
}

/// What a live stream reads from.
struct Live {
    feed: broadcast::Receiver<Event>,
    /// The engine's health: each change sends every instance again, with or without `engine`.
    engine: Option<tokio::sync::watch::Receiver<Option<berth_core::model::EngineUnreachable>>>,
    app: App,
    owner: std::sync::Arc<str>,
    domain: berth_core::DomainId,
    watch: std::sync::Arc<berth_core::watch::Watch>,
    /// The last sequence number of this domain sent: what a snapshot or a replay covered is not
    /// sent again.
    after: u64,
}

impl Live {
    /// The next events to send, or `None` when the stream ends.
    async fn next(&mut self) -> Option<Vec<SseEvent>> {
        loop {
            let received = match &mut self.engine {
                Some(engine) => tokio::select! {
                    received = self.feed.recv() => received,
                    changed = engine.changed() => {
                        if changed.is_err() {
                            self.engine = None;
                            continue;
                        }
                        return Some(self.every_instance());
                    }
                },
                None => self.feed.recv().await,
            };
            match received {
                Ok(event) if event.seq <= self.after => {}
                Ok(event) => {
                    self.after = event.seq;
                    let id = self.watch.event_id(&self.domain, event.seq);
                    // While the engine is away, each view says so.
                    if let (Change::Instance(c), Some(away)) =
                        (&event.change, self.app.berth.engine_unreachable())
                    {
                        let mut c = c.clone();
                        c.instance.engine = Some(away);
                        return Some(vec![instance_event(&id, &c)]);
                    }
                    return Some(vec![change_event(&id, &event.change)]);
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // This client fell behind: it gets everything again rather than slowing
                    // anyone down.
                    let (subscription, snapshot) =
                        match self.app.berth.subscribe(&self.owner, &self.domain, None) {
                            Ok(found) => found,
                            Err(_) => return None,
                        };
                    self.feed = subscription.feed;
                    self.after = subscription.at;
                    let id = self.watch.event_id(&self.domain, subscription.at);
                    let mut events = vec![resync_event(&id)];
                    events.extend(snapshot.iter().map(|c| instance_event(&id, c)));
                    return Some(events);
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl Live {
    /// Every instance of the domain as it is now, each an `instance` event under the last id
    /// sent: after the engine went away or came back, so that each view says which.
    fn every_instance(&self) -> Vec<SseEvent> {
        let id = self.watch.event_id(&self.domain, self.after);
        match self.app.berth.subscribe(&self.owner, &self.domain, None) {
            Ok((_, all)) => all.iter().map(|c| instance_event(&id, c)).collect(),
            Err(_) => Vec::new(),
        }
    }
}

fn change_event(id: &str, change: &Change) -> SseEvent {
    match change {
        Change::Instance(change) => instance_event(id, change),
        Change::Copy(copy) => copy_event(id, copy),
    }
}

fn copy_event(id: &str, copy: &CopyEvent) -> SseEvent {
    let data = serde_json::to_string(copy).unwrap_or_else(|_| "{}".to_owned());
    SseEvent::default().event("copy").id(id).data(data)
}

fn instance_event(id: &str, change: &InstanceChange) -> SseEvent {
    let data = serde_json::to_string(change).unwrap_or_else(|_| "{}".to_owned());
    SseEvent::default().event("instance").id(id).data(data)
}

fn resync_event(id: &str) -> SseEvent {
    SseEvent::default().event("resync").id(id).data("{}")
}

/// `GET .../instances/{key}/wait?for=&timeoutMs=`.
#[derive(Debug, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WaitQuery {
    /// State kinds to wait for, comma-separated (`running,failed`).
    #[param(rename = "for", value_type = String, pattern = "^(not-started|starting|running|stopped|exited|failed|archived)(,(not-started|starting|running|stopped|exited|failed|archived))*$")]
    pub kinds: Vec<String>,
    /// How long to wait, 0 to 300000 ms (default 30000).
    #[param(rename = "timeoutMs", value_type = Option<u64>, minimum = 0, maximum = 300_000)]
    pub timeout: Duration,
}

impl FromQuery for WaitQuery {
    const NAMES: &'static [&'static str] = &["for", "timeoutMs"];

    fn from_query(value: &dyn Fn(&str) -> Option<String>, p: &mut Problems) -> Option<Self> {
        const KINDS: &str = "must be state kinds separated by commas (not-started, starting, \
                             running, stopped, exited, failed, archived)";
        let kinds = match value("for") {
            None => {
                p.push("query.for", KINDS);
                None
            }
            Some(text) => {
                let kinds: Vec<String> = text.split(',').map(str::to_owned).collect();
                if kinds.iter().all(|k| STATE_KINDS.contains(&k.as_str())) {
                    Some(kinds)
                } else {
                    p.push("query.for", KINDS);
                    None
                }
            }
        };
        let timeout = match value("timeoutMs") {
            None => Some(Duration::from_secs(30)),
            Some(text) => match text
                .parse::<u64>()
                .ok()
                .map(Duration::from_millis)
                .filter(|d| *d <= MAX_WAIT)
            {
                Some(d) => Some(d),
                None => {
                    p.push("query.timeoutMs", "must be an integer between 0 and 300000");
                    None
                }
            },
        };
        Some(WaitQuery {
            kinds: kinds?,
            timeout: timeout?,
        })
    }
}

/// Waits until the instance's state is one of `for` and the reconciler has acted on the latest
/// change asked of it (`observedGeneration` equals `generation`), or until `timeoutMs`; answers
/// at once when it already is.
#[utoipa::path(get, path = "/v1/resource-domains/{resourceDomainId}/instances/{key}/wait", tag = "resource-instances",
    params(InstancePath, WaitQuery),
    responses((status = 200, body = WaitAnswer),
        (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn wait_instance(
    State(app): State<App>,
    Extension(caller): Extension<Caller>,
    Params(path): Params<InstancePath>,
    QueryParams(WaitQuery { kinds, timeout }): QueryParams<WaitQuery>,
) -> Result<Json<WaitAnswer>, ApiError> {
    let (domain, key) = path.parts()?;
    let waited = app
        .berth
        .wait_for(&caller.owner, &domain, key, &kinds, timeout);
    let (change, timed_out) = tokio::select! {
        waited = waited => waited?,
        // berth is stopping: answer what there is now.
        () = app.shutdown.cancelled() => {
            app.berth.wait_for(&caller.owner, &domain, key, &kinds, Duration::ZERO).await?
        }
    };
    Ok(Json(WaitAnswer {
        instance: change.instance,
        generation: change.generation,
        observed_generation: change.observed_generation,
        timed_out,
    }))
}
