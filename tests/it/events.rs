//! The domain event stream and the wait route, end to end against a real daemon and engine:
//! events in order, resuming with `Last-Event-ID`, `resync` after a restart and for a reader
//! that stalls, event ids that move only with their own domain, and a wait that answers the
//! change the stream reports.

use berth_testkit as support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::pin::Pin;
use std::time::Duration;

use berth_client::{DomainEvent, InstanceState, InstanceView};
use futures_util::{Stream, StreamExt};
use serde_json::json;
use support::{Daemon, OTHER_KEY, block_on, busybox_image, spec};

type Events = Pin<Box<dyn Stream<Item = Result<DomainEvent, berth_client::ClientError>> + Send>>;

/// The next event, or a panic naming what was awaited after `within`.
async fn next(events: &mut Events, what: &str, within: Duration) -> DomainEvent {
    tokio::time::timeout(within, events.next())
        .await
        .unwrap_or_else(|_| panic!("no event within {within:?} while waiting for {what}"))
        .unwrap_or_else(|| panic!("the stream ended while waiting for {what}"))
        .unwrap_or_else(|e| panic!("the stream failed while waiting for {what}: {e}"))
}

/// Reads instance events of `key` until one whose state kind is `kind`; returns its id and
/// every state kind seen on the way.
async fn until_kind(
    events: &mut Events,
    key: &str,
    kind: &str,
    within: Duration,
) -> (String, InstanceView, Vec<String>) {
    let mut seen = Vec::new();
    loop {
        if let DomainEvent::Instance { id, instance, .. } =
            next(events, &format!("{key} {kind}"), within).await
            && instance.key == key
        {
            let k = instance.state.kind().to_owned();
            if seen.last() != Some(&k) {
                seen.push(k.clone());
            }
            if k == kind {
                return (id, *instance, seen);
            }
        }
    }
}

fn seq(id: &str) -> u64 {
    id.rsplit_once('-')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or_else(|| panic!("an event id <stream>-<sequence>, not {id:?}"))
}

/// The stream part of an event id: the domain's log in this daemon run.
fn stream_of(id: &str) -> &str {
    id.rsplit_once('-')
        .map(|(s, _)| s)
        .unwrap_or_else(|| panic!("an event id <stream>-<sequence>, not {id:?}"))
}

/// The id of a new client's first event: the snapshot, at the sequence the domain is at.
async fn snapshot_id(events: &mut Events) -> String {
    match next(events, "the snapshot", WITHIN).await {
        DomainEvent::Instance { id, .. } => id,
        other => panic!("a new client is sent every instance first: {other:?}"),
    }
}

/// The ids of every event until an instance event of `key` whose state kind is `kind`,
/// that one included; a resync is a failure.
async fn ids_until(events: &mut Events, key: &str, kind: &str) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        match next(events, &format!("{key} {kind}"), WITHIN).await {
            DomainEvent::Instance { id, instance, .. } => {
                ids.push(id);
                if instance.key == key && instance.state.kind() == kind {
                    return ids;
                }
            }
            DomainEvent::Copy { id, .. } => ids.push(id),
            DomainEvent::Resync { id } => panic!("resumable, not resynced: {id}"),
        }
    }
}

/// Asserts that `ids` are numbered one by one from just after `after`, in its stream.
fn assert_consecutive_after(after: &str, ids: &[String]) {
    let seqs: Vec<u64> = ids.iter().map(|id| seq(id)).collect();
    let expected: Vec<u64> = (1..=ids.len() as u64).map(|n| seq(after) + n).collect();
    assert_eq!(seqs, expected, "after {after}: {ids:?}");
    for id in ids {
        assert_eq!(stream_of(id), stream_of(after), "{ids:?}");
    }
}

const WITHIN: Duration = Duration::from_secs(60);

#[test]
fn events_arrive_in_order_for_up_stop_wake_and_archive() {
    let daemon = Daemon::start();
    let client = daemon.client();
    let api = client.api().clone();
    let domain = client.create_domain("events");
    let domain_id = support::domain_id(&domain);
    block_on(async {
        let mut events: Events = Box::pin(api.events(&domain_id, None));
        let s = spec(&busybox_image(), "web");
        api.up(&domain_id, "web", &s, berth_client::UpCause::Person)
            .await
            .unwrap();
        let (up_id, _, seen) = until_kind(&mut events, "web", "running", WITHIN).await;
        assert_eq!(
            seen.first().map(String::as_str),
            Some("not-started"),
            "{seen:?}"
        );
        assert!(seen.contains(&"starting".to_owned()), "{seen:?}");

        api.stop(&domain_id, "web", "ada").await.unwrap();
        let (stop_id, stopped, _) = until_kind(&mut events, "web", "stopped", WITHIN).await;
        assert!(seq(&stop_id) > seq(&up_id));
        assert!(matches!(stopped.state, InstanceState::Stopped { .. }));

        api.up(&domain_id, "web", &s, berth_client::UpCause::Person)
            .await
            .unwrap();
        let (wake_id, _, seen) = until_kind(&mut events, "web", "running", WITHIN).await;
        assert!(seq(&wake_id) > seq(&stop_id));
        assert!(seen.contains(&"starting".to_owned()), "{seen:?}");

        api.archive(&domain_id, "web").await.unwrap();
        let (archive_id, archived, _) = until_kind(&mut events, "web", "archived", WITHIN).await;
        assert!(seq(&archive_id) > seq(&wake_id));
        assert_eq!(archived.desired, berth_client::Desired::Archived);
    });
}

#[test]
fn a_change_of_observed_at_alone_sends_no_event_and_a_new_client_gets_every_instance_first() {
    let daemon = Daemon::start();
    let client = daemon.client();
    let api = client.api().clone();
    let domain = client.create_domain("events");
    client.up_ok(&domain, "web", &spec(&busybox_image(), "web"), "person");
    client.wait_state(&domain, "web", "running", WITHIN);
    block_on(async {
        let mut events: Events = Box::pin(api.events(&support::domain_id(&domain), None));
        let DomainEvent::Instance { instance, .. } =
            next(&mut events, "the snapshot", WITHIN).await
        else {
            panic!("a new client is sent every instance first")
        };
        assert_eq!(instance.key, "web");
        // The daemon's resync looks at every instance and writes observedAt; nothing else
        // changes, so nothing more may come. Waiting for what must not come is bounded.
        let more = tokio::time::timeout(Duration::from_secs(3), events.next()).await;
        assert!(more.is_err(), "an event with nothing changed: {more:?}");
    });
}

#[test]
fn a_dropped_connection_resumes_with_its_last_event_id_without_loss() {
    let daemon = Daemon::start();
    let client = daemon.client();
    let api = client.api().clone();
    let domain = client.create_domain("events");
    let domain_id = support::domain_id(&domain);
    block_on(async {
        let mut events: Events = Box::pin(api.events(&domain_id, None));
        api.up(
            &domain_id,
            "web",
            &spec(&busybox_image(), "web"),
            berth_client::UpCause::Person,
        )
        .await
        .unwrap();
        let (last, _, _) = until_kind(&mut events, "web", "running", WITHIN).await;
        drop(events);

        // While nobody listens: a stop.
        api.stop(&domain_id, "web", "ada").await.unwrap();
        let stopped = api
            .wait(&domain_id, "web", &["stopped"], WITHIN)
            .await
            .unwrap();
        assert!(!stopped.timed_out);

        let mut events: Events = Box::pin(api.events(&domain_id, Some(&last)));
        let first = next(&mut events, "the missed changes", WITHIN).await;
        let DomainEvent::Instance { id, instance, .. } = first else {
            panic!("a resumable id is resumed, not resynced: {first:?}")
        };
        assert!(seq(&id) > seq(&last));
        assert_eq!(
            instance.desired,
            berth_client::Desired::Stopped,
            "the first missed change is the stop"
        );
        let (_, stopped, _) = if instance.state.kind() == "stopped" {
            (id, *instance, vec![])
        } else {
            until_kind(&mut events, "web", "stopped", WITHIN).await
        };
        assert!(matches!(stopped.state, InstanceState::Stopped { .. }));
    });
}

#[test]
fn another_keys_changes_do_not_move_a_domains_event_ids_and_resuming_works_per_domain() {
    let daemon = Daemon::start();
    let (a, b) = (daemon.client_with(Some(OTHER_KEY)), daemon.client());
    let a_domain = a.create_domain("events-a");
    let b_domain = b.create_domain("events-b");
    let s = spec(&busybox_image(), "web");
    b.up_ok(&b_domain, "web", &s, "person");
    b.settled(&b_domain, "web", &["running"], WITHIN);
    // Where B's sequence is: a new client's snapshot carries it.
    let mut b_events: Events = Box::pin(b.api().events(&support::domain_id(&b_domain), None));
    let before = block_on(snapshot_id(&mut b_events));

    // Key A's activity in its own domain: an up that runs, then a stop.
    a.up_ok(&a_domain, "web", &s, "person");
    a.settled(&a_domain, "web", &["running"], WITHIN);
    block_on(a.api().stop(&support::domain_id(&a_domain), "web", "ada")).unwrap();
    a.settled(&a_domain, "web", &["stopped"], WITHIN);
    let a_id = block_on(async {
        let mut events: Events = Box::pin(a.api().events(&support::domain_id(&a_domain), None));
        snapshot_id(&mut events).await
    });
    assert!(seq(&a_id) >= 3, "A's own sequence moved: {a_id}");
    assert_ne!(stream_of(&a_id), stream_of(&before), "ids share nothing");

    // B's sequence did not move: a new client's snapshot is where it was, and B's next change
    // on the open stream is the next number.
    let again = block_on(async {
        let mut events: Events = Box::pin(b.api().events(&support::domain_id(&b_domain), None));
        snapshot_id(&mut events).await
    });
    assert_eq!(again, before, "A's changes moved B's event ids");
    block_on(b.api().stop(&support::domain_id(&b_domain), "web", "ada")).unwrap();
    let stopped = block_on(ids_until(&mut b_events, "web", "stopped"));
    assert_consecutive_after(&before, &stopped);
    let last = stopped.last().unwrap().clone();
    drop(b_events);
    b.settled(&b_domain, "web", &["stopped"], WITHIN);

    // While nobody listens to B, A changes again and B is woken. Resuming with B's last id gets
    // B's missed changes, numbered on from it, with nothing of A's in between.
    a.up_ok(&a_domain, "web", &s, "person");
    b.up_ok(&b_domain, "web", &s, "person");
    a.settled(&a_domain, "web", &["running"], WITHIN);
    b.settled(&b_domain, "web", &["running"], WITHIN);
    let missed = block_on(async {
        let mut events: Events =
            Box::pin(b.api().events(&support::domain_id(&b_domain), Some(&last)));
        ids_until(&mut events, "web", "running").await
    });
    assert_consecutive_after(&last, &missed);

    // An id of A's domain is foreign to B's, whatever its number: B's stream resyncs.
    block_on(async {
        let mut events: Events =
            Box::pin(b.api().events(&support::domain_id(&b_domain), Some(&a_id)));
        let first = next(&mut events, "resync", WITHIN).await;
        assert!(
            matches!(first, DomainEvent::Resync { .. }),
            "another domain's id cannot be resumed: {first:?}"
        );
    });
}

#[test]
fn a_restarted_daemon_answers_an_old_id_with_resync_then_every_instance() {
    let mut daemon = Daemon::start();
    let client = daemon.client();
    let domain = client.create_domain("events");
    let domain_id = support::domain_id(&domain);
    client.up_ok(&domain, "web", &spec(&busybox_image(), "web"), "person");
    let last = block_on(async {
        let mut events: Events = Box::pin(client.api().events(&domain_id, None));
        until_kind(&mut events, "web", "running", WITHIN).await.0
    });
    daemon.restart();
    let client = daemon.client();
    block_on(async {
        let mut events: Events = Box::pin(client.api().events(&domain_id, Some(&last)));
        let first = next(&mut events, "resync", WITHIN).await;
        assert!(
            matches!(first, DomainEvent::Resync { .. }),
            "an id of another run cannot be resumed: {first:?}"
        );
        let DomainEvent::Instance { instance, .. } =
            next(&mut events, "the snapshot", WITHIN).await
        else {
            panic!("every instance follows a resync")
        };
        assert_eq!(instance.key, "web");
    });
}

#[test]
fn a_reader_that_stalls_is_resynced_and_slows_nobody() {
    let daemon = Daemon::start();
    let client = daemon.client();
    let api = client.api().clone();
    let domain = client.create_domain("events");
    let s = spec(&busybox_image(), "web");
    client.up_ok(&domain, "web", &s, "person");
    client.wait_state(&domain, "web", "running", WITHIN);

    // A reader that asks for the stream and then reads nothing, with a small receive buffer so
    // the daemon's send buffer fills soon.
    let address: std::net::SocketAddr = daemon.address().parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&address.into()).unwrap();
    let mut stalled: TcpStream = socket.into();
    write!(
        stalled,
        "GET /v1/resource-domains/{domain}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Authorization: Bearer {}\r\n\r\n",
        support::KEY
    )
    .unwrap();

    // Many changes that never reach the container: each is an event or two, far more than the
    // stalled reader's buffers (the kernel's and the HTTP layer's hold megabytes) and its place
    // in the live feed hold.
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (client, domain, mut s) = (daemon.client(), domain.clone(), s.clone());
            scope.spawn(move || {
                for n in 0..2000 {
                    s["idleStopAfterSeconds"] = json!(100 + t * 10_000 + n);
                    client.up_ok(&domain, "web", &s, "person");
                }
            });
        }
    });
    // Another client is not slowed by the stalled one: an up and its wait complete.
    client.up_ok(&domain, "db", &spec(&busybox_image(), "db"), "person");
    let waited = block_on(api.wait(
        &support::domain_id(&domain),
        "db",
        &["running", "failed"],
        WITHIN,
    ))
    .unwrap();
    assert!(!waited.timed_out);
    assert_eq!(waited.instance.state.kind(), "running");

    // The stalled reader reads now: somewhere past what fit in the buffers, it was resynced.
    stalled
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut text = Vec::new();
    let mut chunk = [0u8; 65536];
    while !String::from_utf8_lossy(&text).contains("event: resync") {
        let n = stalled
            .read(&mut chunk)
            .expect("the stalled reader is resynced or dropped, never left hanging");
        if n == 0 {
            // Dropped: also allowed, and nothing was slowed.
            return;
        }
        text.extend_from_slice(&chunk[..n]);
    }
}

#[test]
fn wait_answers_the_change_the_stream_reports_and_times_out_when_nothing_happens() {
    let daemon = Daemon::start();
    let client = daemon.client();
    let api = client.api().clone();
    let domain = client.create_domain("events");
    let domain_id = support::domain_id(&domain);
    block_on(async {
        let mut events: Events = Box::pin(api.events(&domain_id, None));
        api.up(
            &domain_id,
            "web",
            &spec(&busybox_image(), "web"),
            berth_client::UpCause::Person,
        )
        .await
        .unwrap();
        let waited = api
            .wait(&domain_id, "web", &["running", "failed"], WITHIN)
            .await
            .unwrap();
        assert!(!waited.timed_out);
        assert_eq!(waited.observed_generation, waited.generation);
        let (_, streamed, _) = until_kind(&mut events, "web", "running", WITHIN).await;
        assert_eq!(waited.instance.state, streamed.state, "the same change");

        let nothing = api
            .wait(&domain_id, "web", &["stopped"], Duration::from_millis(1500))
            .await
            .unwrap();
        assert!(nothing.timed_out);
        assert_eq!(nothing.instance.state.kind(), "running");
    });
    // Bad values are refused by name.
    let bad = client.get(&format!(
        "/v1/resource-domains/{domain}/instances/web/wait?for=sleeping&timeoutMs=999999"
    ));
    let body = bad.expect_error(400, "RequestRefusedError");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("query.for") && message.contains("query.timeoutMs"),
        "{message}"
    );
}
