//! The engine's container lifecycle events, as [`RuntimeEvent`]s, reconnecting forever.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use berth_core::runtime::{ContainerChange, Labels, RuntimeEvent};
use bollard::Docker;
use bollard::models::EventMessage;
use bollard::query_parameters::EventsOptions;
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Room for events the receiver has not read yet; the watcher waits when it is full.
const CHANNEL: usize = 256;
const BACKOFF_MIN: Duration = Duration::from_millis(250);
/// The longest wait between two tries while the engine is away: a ping every few seconds
/// costs nothing, and berth notices the engine's return within this.
const BACKOFF_MAX: Duration = Duration::from_secs(4);
/// A connection that lasted this long was healthy: the next one starts over at the shortest
/// back-off.
const HEALTHY: Duration = Duration::from_secs(5);
/// How far back each subscription asks the engine to replay, so that nothing between the
/// `Resync` and the subscription is lost (a repeated event is harmless).
const REPLAY: Duration = Duration::from_secs(1);
/// How long one ping before a (re)connect may take.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Attributes the engine adds to a container event's labels.
const ENGINE_ATTRIBUTES: [&str; 7] = [
    "name",
    "image",
    "exitCode",
    "signal",
    "execID",
    "execDuration",
    "oldName",
];

/// Watches the engine at `host` (its address, which names it in `Reachable` and
/// `Unreachable`).
pub(crate) fn watch(docker: Docker, host: String, prefix: String) -> mpsc::Receiver<RuntimeEvent> {
    let (tx, rx) = mpsc::channel(CHANNEL);
    tokio::spawn(run(docker, host, prefix, tx));
    rx
}

fn options(since: SystemTime) -> EventsOptions {
    let since = since.duration_since(UNIX_EPOCH).unwrap_or_default();
    EventsOptions {
        since: Some(format!("{}.{:09}", since.as_secs(), since.subsec_nanos())),
        until: None,
        // Every container: berth's own and the workspaces' executors. Core tells its own apart
        // by their labels.
        filters: Some(HashMap::from([(
            "type".to_owned(),
            vec!["container".to_owned()],
        )])),
    }
}

async fn run(docker: Docker, host: String, prefix: String, tx: mpsc::Sender<RuntimeEvent>) {
    let mut backoff = BACKOFF_MIN;
    loop {
        let since = SystemTime::now() - REPLAY;
        let pinged = tokio::select! {
            () = tx.closed() => return,
            pinged = tokio::time::timeout(PING_TIMEOUT, docker.ping()) => match pinged {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("the Docker engine at {host} does not answer: {e}")),
                Err(_) => Err(format!(
                    "the Docker engine at {host} did not answer a ping within {} s",
                    PING_TIMEOUT.as_secs()
                )),
            },
        };
        if pinged.is_ok() {
            let reachable = RuntimeEvent::Reachable {
                engine: host.clone(),
            };
            if tx.send(reachable).await.is_err() || tx.send(RuntimeEvent::Resync).await.is_err() {
                return;
            }
            let connected = Instant::now();
            let mut delivered = false;
            let mut stream = docker.events(Some(options(since)));
            loop {
                tokio::select! {
                    () = tx.closed() => return,
                    item = stream.next() => match item {
                        Some(Ok(message)) => {
                            if let Some(event) = convert(message) {
                                delivered = true;
                                if tx.send(event).await.is_err() {
                                    return;
                                }
                            }
                        }
                        Some(Err(e)) => {
                            tracing::debug!(prefix = %prefix, error = %e, "the event stream failed; reconnecting");
                            break;
                        }
                        None => {
                            tracing::debug!(prefix = %prefix, "the event stream ended; reconnecting");
                            break;
                        }
                    },
                }
            }
            if delivered || connected.elapsed() >= HEALTHY {
                backoff = BACKOFF_MIN;
            }
        } else if let Err(message) = pinged {
            tracing::debug!(prefix = %prefix, wait = ?backoff, "the engine is unreachable; watching again later");
            let away = RuntimeEvent::Unreachable {
                engine: host.clone(),
                message,
            };
            if tx.send(away).await.is_err() {
                return;
            }
        }
        tokio::select! {
            () = tx.closed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// A container event as berth sees it. Exec events (`exec_create: <argv>`, ...) are dropped:
/// their action carries the command line, and probes make many of them. An action's detail
/// after `:` (`health_status: healthy`) is cut off. The engine sends the container's labels
/// mixed with attributes of its own (`name`, `image`, `exitCode`, ...): those are taken out, so
/// a label that has the name of one of them is not reported.
fn convert(message: EventMessage) -> Option<RuntimeEvent> {
    let action = message.action?;
    let action = action
        .split(':')
        .next()
        .unwrap_or_default()
        .trim()
        .to_owned();
    let change = match action.as_str() {
        "create" => ContainerChange::Created,
        "start" => ContainerChange::Started,
        "die" | "stop" | "kill" | "oom" => ContainerChange::Ended,
        "destroy" => ContainerChange::Destroyed,
        "rename" => ContainerChange::Renamed,
        // Exec events carry the command line; the rest (health, pause, attach) change nothing
        // berth follows.
        _ => return None,
    };
    let attributes = message.actor?.attributes.unwrap_or_default();
    let name = attributes.get("name")?.clone();
    let labels: Labels = attributes
        .into_iter()
        .filter(|(key, _)| !ENGINE_ATTRIBUTES.contains(&key.as_str()))
        .collect();
    Some(RuntimeEvent::Container {
        name,
        labels,
        change,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::EventActor;

    fn event(action: &str, attributes: &[(&str, &str)]) -> EventMessage {
        EventMessage {
            action: Some(action.to_owned()),
            actor: Some(EventActor {
                id: Some("abc".to_owned()),
                attributes: Some(
                    attributes
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn container_events_carry_name_labels_and_action() {
        let converted = convert(event(
            "die",
            &[
                ("name", "p-c"),
                ("image", "x"),
                ("exitCode", "3"),
                ("berth.prefix", "p"),
            ],
        ));
        assert_eq!(
            converted,
            Some(RuntimeEvent::Container {
                name: "p-c".to_owned(),
                labels: Labels::from([("berth.prefix".to_owned(), "p".to_owned())]),
                change: ContainerChange::Ended,
            })
        );
    }

    #[test]
    fn exec_and_unfollowed_events_are_left_out_and_the_rest_typed() {
        assert_eq!(
            convert(event("exec_start: sh -c secret", &[("name", "c")])),
            None
        );
        assert_eq!(
            convert(event("health_status: healthy", &[("name", "c")])),
            None
        );
        assert!(matches!(
            convert(event("oom", &[("name", "c")])),
            Some(RuntimeEvent::Container {
                change: ContainerChange::Ended,
                ..
            })
        ));
    }

    #[test]
    fn subscriptions_cover_every_container_and_replay_a_little() {
        let at = UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        let options = options(at);
        assert_eq!(options.since.as_deref(), Some("1700000000.000000005"));
        let filters = options.filters.unwrap();
        assert_eq!(filters["type"], vec!["container".to_owned()]);
        assert!(
            !filters.contains_key("label"),
            "executors carry no berth label"
        );
    }
}
