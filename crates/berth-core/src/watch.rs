//! Watching instances change: a bounded, sequenced log of changes per domain, and a live feed.
//!
//! The store publishes here after each commit, from the writer, for every instance whose view
//! changed (a change of `observedAt` alone is not one). Each change gets the next number of this
//! daemon run's sequence; its id on the wire is `<run>-<sequence>`. A domain keeps its last
//! [`LOG_PER_DOMAIN`] changes, so a client that reconnects with the id it saw last resumes
//! without loss while that id is still held; an id of another run, or one older than the log,
//! cannot be resumed and the client is told to resync. A live subscriber reads from a bounded
//! channel: one that falls behind by [`FEED_CAPACITY`] changes is told it lagged (and resyncs)
//! rather than slowing the writer or anyone else.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::broadcast;

use crate::ids::{DomainId, InstanceId};
use crate::model::{Instance, InstanceView};
use crate::snapshots::CopyEvent;

/// Changes a domain's log keeps for resuming clients.
pub const LOG_PER_DOMAIN: usize = 1024;
/// Changes a live subscriber may fall behind before it is told to resync.
pub const FEED_CAPACITY: usize = 256;

/// One change of one instance, as the event stream and the wait route carry it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceChange {
    /// Exactly the view `GET` answers.
    pub instance: InstanceView,
    /// Bumped by every accepted change of what is desired.
    pub generation: i64,
    /// The generation the last finished reconcile acted on.
    pub observed_generation: i64,
}

impl InstanceChange {
    /// The change an instance is, as stored.
    pub fn of(instance: &Instance) -> Self {
        Self {
            instance: instance.view(),
            generation: instance.generation,
            observed_generation: instance.observed_generation,
        }
    }
}

/// What an event of a domain's stream says.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// An instance changed.
    Instance(InstanceChange),
    /// A copy (snapshot, branch, restore) moved on.
    Copy(CopyEvent),
}

impl Change {
    /// The instance change, when it is one.
    pub fn instance(&self) -> Option<&InstanceChange> {
        match self {
            Self::Instance(change) => Some(change),
            Self::Copy(_) => None,
        }
    }
}

/// A change with its place in this run's sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Its number in this daemon run's sequence.
    pub seq: u64,
    /// What changed.
    pub change: Change,
}

/// Where a reconnecting client stands.
#[derive(Debug)]
pub enum Resume {
    /// Every change after its id, in order.
    Missed(Vec<Event>),
    /// Its id is of another run or older than the log: it must read everything again.
    Resync,
}

struct DomainLog {
    events: VecDeque<Event>,
    /// The highest sequence number dropped from `events`: a client that saw less missed it.
    dropped_up_to: u64,
    feed: broadcast::Sender<Event>,
}

impl DomainLog {
    fn new() -> Self {
        Self {
            events: VecDeque::new(),
            dropped_up_to: 0,
            feed: broadcast::channel(FEED_CAPACITY).0,
        }
    }
}

struct Logs {
    seq: u64,
    domains: HashMap<DomainId, DomainLog>,
}

/// Every domain's log and feed, for one daemon run.
pub struct Watch {
    run: String,
    logs: Mutex<Logs>,
}

impl Default for Watch {
    fn default() -> Self {
        Self::new()
    }
}

impl Watch {
    /// A watch for a new daemon run, with a run id no earlier run had.
    pub fn new() -> Self {
        Self {
            run: uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
            logs: Mutex::new(Logs {
                seq: 0,
                domains: HashMap::new(),
            }),
        }
    }

    fn logs(&self) -> std::sync::MutexGuard<'_, Logs> {
        // Each critical section is a few pushes that leave the log whole.
        self.logs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This run's id, the first part of every event id.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// The wire id of sequence number `seq`.
    pub fn event_id(&self, seq: u64) -> String {
        format!("{}-{seq}", self.run)
    }

    /// Records a change and hands it to the domain's live subscribers. Never blocks.
    pub fn publish(&self, domain: &DomainId, change: InstanceChange) {
        self.publish_change(domain, Change::Instance(change));
    }

    /// Records a copy's progress and hands it to the domain's live subscribers. Never blocks.
    pub fn publish_copy(&self, domain: &DomainId, copy: CopyEvent) {
        self.publish_change(domain, Change::Copy(copy));
    }

    fn publish_change(&self, domain: &DomainId, change: Change) {
        let mut logs = self.logs();
        logs.seq += 1;
        let event = Event {
            seq: logs.seq,
            change,
        };
        let log = logs
            .domains
            .entry(domain.clone())
            .or_insert_with(DomainLog::new);
        log.events.push_back(event.clone());
        while log.events.len() > LOG_PER_DOMAIN {
            if let Some(old) = log.events.pop_front() {
                log.dropped_up_to = old.seq;
            }
        }
        // No subscriber is not an error: the change is in the log.
        let _ = log.feed.send(event);
    }

    /// Subscribes to a domain's live changes, and says where a client that last saw `last_id`
    /// stands (`None`: a new client, which reads everything). Both are taken together, so no
    /// change falls between them. Also answers the sequence number the domain is at.
    pub fn subscribe(
        &self,
        domain: &DomainId,
        last_id: Option<&str>,
    ) -> (broadcast::Receiver<Event>, Resume, u64) {
        let mut logs = self.logs();
        let at = logs.seq;
        let log = logs
            .domains
            .entry(domain.clone())
            .or_insert_with(DomainLog::new);
        let feed = log.feed.subscribe();
        let seen = last_id.and_then(|id| {
            let (run, seq) = id.rsplit_once('-')?;
            (run == self.run).then(|| seq.parse::<u64>().ok()).flatten()
        });
        let resume = match seen {
            Some(seen) if seen >= log.dropped_up_to && seen <= at => Resume::Missed(
                log.events
                    .iter()
                    .filter(|e| e.seq > seen)
                    .cloned()
                    .collect(),
            ),
            _ => Resume::Resync,
        };
        (feed, resume, at)
    }
}

/// The state kinds a wait may ask for.
pub const STATE_KINDS: &[&str] = &[
    "not-started",
    "starting",
    "running",
    "stopped",
    "exited",
    "failed",
    "archived",
];

/// The longest a wait may ask to wait.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// Whether `change` is settled in one of `kinds`: its state is one of them, and the reconciler
/// has acted on the latest generation of what was asked.
pub fn settled(change: &InstanceChange, kinds: &[String]) -> bool {
    change.observed_generation >= change.generation
        && kinds.iter().any(|k| k == change.instance.state.kind())
}

/// What a domain's event stream starts with.
pub struct Subscription {
    /// The live feed, from the moment of subscribing.
    pub feed: broadcast::Receiver<Event>,
    /// Where the client stands.
    pub resume: Resume,
    /// The sequence number the domain was at: the id of a snapshot taken now.
    pub at: u64,
}

impl Watch {
    /// Waits for the next change of instance `id` on `feed`, or until `deadline`. `true` when
    /// something may have changed (a change of it, or changes were missed), `false` at the
    /// deadline or when the feed ends.
    pub async fn next_change(
        feed: &mut broadcast::Receiver<Event>,
        id: &InstanceId,
        deadline: tokio::time::Instant,
    ) -> bool {
        loop {
            match tokio::time::timeout_at(deadline, feed.recv()).await {
                Err(_) | Ok(Err(broadcast::error::RecvError::Closed)) => return false,
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => return true,
                Ok(Ok(event))
                    if event
                        .change
                        .instance()
                        .is_some_and(|c| c.instance.resource_instance_id == *id) =>
                {
                    return true;
                }
                Ok(Ok(_)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Desired, InstanceState};
    use crate::time::Timestamp;

    fn change(n: i64) -> InstanceChange {
        let spec = serde_json::from_value(serde_json::json!({
            "alias": "db", "worktreeKey": null,
            "image": format!("r/x@sha256:{}", "a".repeat(64)),
            "command": null, "env": {}, "volumes": [],
            "limits": {"cpuMillicores": 100, "memoryBytes": 67108864},
            "ready": {"kind": "tcp", "port": 80}, "idleStopAfterSeconds": 60
        }))
        .unwrap();
        let instance = Instance {
            id: crate::ids::InstanceId::new(),
            domain_id: DomainId::new(),
            key: "db".into(),
            spec,
            spec_digest: "sha256:x".into(),
            desired: Desired::Running,
            stop_reason: None,
            state: InstanceState::NotStarted,
            observed_at: Timestamp::now(),
            started_at: None,
            last_reached_at: None,
            volumes: vec![],
            kept: vec![],
            restart_count: 0,
            generation: n,
            observed_generation: 0,
            volume_tag: None,
        };
        InstanceChange::of(&instance)
    }

    #[test]
    fn a_client_resumes_after_its_last_id_and_a_stale_or_foreign_one_resyncs() {
        let watch = Watch::new();
        let d = DomainId::new();
        for n in 1..=3 {
            watch.publish(&d, change(n));
        }
        let id = watch.event_id(1);
        let Resume::Missed(missed) = watch.subscribe(&d, Some(&id)).1 else {
            panic!("resumable")
        };
        assert_eq!(
            missed
                .iter()
                .map(|e| e.change.instance().unwrap().generation)
                .collect::<Vec<_>>(),
            vec![2, 3]
        );
        assert!(matches!(
            watch.subscribe(&d, Some("0123456789ab-1")).1,
            Resume::Resync
        ));
        assert!(matches!(watch.subscribe(&d, None).1, Resume::Resync));
        for n in 0..LOG_PER_DOMAIN as i64 {
            watch.publish(&d, change(n));
        }
        assert!(matches!(watch.subscribe(&d, Some(&id)).1, Resume::Resync));
    }

    #[test]
    fn a_subscriber_that_falls_behind_is_told_so_and_the_publisher_never_waits() {
        let watch = Watch::new();
        let d = DomainId::new();
        let (mut feed, _, _) = watch.subscribe(&d, None);
        for n in 0..(FEED_CAPACITY as i64 + 10) {
            watch.publish(&d, change(n));
        }
        assert!(matches!(
            feed.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
    }
}
