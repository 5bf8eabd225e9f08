//! Watching instances change: a bounded, sequenced log of changes per domain, and a live feed.
//!
//! The store publishes here after each commit, from the writer, for every instance whose view
//! changed (a change of `observedAt` alone is not one). Each domain has its own sequence: a
//! change gets the next number of its domain's, so what one domain's ids show moves only with
//! that domain (a caller learns nothing of another key's activity from them). Its id on the wire
//! is `<stream>-<sequence>`, the stream a random name of this domain's log in this daemon run. A
//! domain keeps its last [`LOG_PER_DOMAIN`] changes, so a client that reconnects with the id it
//! saw last resumes without loss while that id is still held; an id of another run or another
//! domain, or one older than the log, cannot be resumed and the client is told to resync. A
//! live subscriber reads from a bounded
//! channel: one that falls behind by [`FEED_CAPACITY`] changes is told it lagged (and resyncs)
//! rather than slowing the writer or anyone else.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::broadcast;

use crate::ids::{DomainId, InstanceId};
pub use berth_api::instances::InstanceChange;

use crate::snapshots::CopyEvent;

/// Changes a domain's log keeps for resuming clients.
pub const LOG_PER_DOMAIN: usize = 1024;
/// Changes a live subscriber may fall behind before it is told to resync.
pub const FEED_CAPACITY: usize = 256;

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

/// A change with its place in its domain's sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Its number in its domain's sequence for this daemon run.
    pub seq: u64,
    /// What changed.
    pub change: Change,
}

/// Where a reconnecting client stands.
#[derive(Debug)]
pub enum Resume {
    /// Every change after its id, in order.
    Missed(Vec<Event>),
    /// Its id is of another run or domain, or older than the log: it must read everything
    /// again.
    Resync,
}

struct DomainLog {
    /// This log's name on the wire, the first part of its event ids: random, so an id of
    /// another domain or an earlier run is never taken for one of this log.
    stream: String,
    /// The last sequence number given in this domain.
    seq: u64,
    events: VecDeque<Event>,
    /// The highest sequence number dropped from `events`: a client that saw less missed it.
    dropped_up_to: u64,
    feed: broadcast::Sender<Event>,
}

impl DomainLog {
    fn new() -> Self {
        Self {
            stream: uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
            seq: 0,
            events: VecDeque::new(),
            dropped_up_to: 0,
            feed: broadcast::channel(FEED_CAPACITY).0,
        }
    }
}

/// Every domain's log and feed, for one daemon run.
pub struct Watch {
    logs: Mutex<HashMap<DomainId, DomainLog>>,
}

impl Default for Watch {
    fn default() -> Self {
        Self::new()
    }
}

impl Watch {
    /// A watch for a new daemon run: every domain's log gets a stream name no earlier run had.
    pub fn new() -> Self {
        Self {
            logs: Mutex::new(HashMap::new()),
        }
    }

    /// The log of `domain`, made when first asked for.
    fn log<'a>(
        logs: &'a mut std::sync::MutexGuard<'_, HashMap<DomainId, DomainLog>>,
        domain: &DomainId,
    ) -> &'a mut DomainLog {
        logs.entry(domain.clone()).or_insert_with(DomainLog::new)
    }

    fn logs(&self) -> std::sync::MutexGuard<'_, HashMap<DomainId, DomainLog>> {
        // Each critical section is a few pushes that leave the log whole.
        self.logs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The wire id of `domain`'s sequence number `seq`: `<stream>-<seq>`.
    pub fn event_id(&self, domain: &DomainId, seq: u64) -> String {
        let mut logs = self.logs();
        format!("{}-{seq}", Self::log(&mut logs, domain).stream)
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
        let log = Self::log(&mut logs, domain);
        log.seq += 1;
        let event = Event {
            seq: log.seq,
            change,
        };
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
    /// change falls between them. Also answers the sequence number the domain is at. An id is
    /// resumed only in the domain whose log named it: another domain's, or another run's, has
    /// another stream and resyncs.
    pub fn subscribe(
        &self,
        domain: &DomainId,
        last_id: Option<&str>,
    ) -> (broadcast::Receiver<Event>, Resume, u64) {
        let mut logs = self.logs();
        let log = Self::log(&mut logs, domain);
        let at = log.seq;
        let feed = log.feed.subscribe();
        let seen = last_id.and_then(|id| {
            let (stream, seq) = id.rsplit_once('-')?;
            (stream == log.stream)
                .then(|| seq.parse::<u64>().ok())
                .flatten()
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
    /// The sequence number the domain was at: with [`Watch::event_id`], the id of a snapshot
    /// taken now.
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
    use crate::model::Instance;

    fn change(n: i64) -> InstanceChange {
        let instance = Instance {
            generation: n,
            observed_generation: 0,
            ..crate::testing::db_instance(&DomainId::new())
        };
        instance.change()
    }

    #[test]
    fn a_client_resumes_after_its_last_id_and_a_stale_or_foreign_one_resyncs() {
        let watch = Watch::new();
        let d = DomainId::new();
        for n in 1..=3 {
            watch.publish(&d, change(n));
        }
        let id = watch.event_id(&d, 1);
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
    fn a_domain_sequence_moves_only_with_its_own_changes() {
        let watch = Watch::new();
        let (x, y) = (DomainId::new(), DomainId::new());
        watch.publish(&y, change(1));
        let (_, _, y_at) = watch.subscribe(&y, None);
        assert_eq!(y_at, 1);
        let (mut y_feed, _, _) = watch.subscribe(&y, None);
        for n in 0..50 {
            watch.publish(&x, change(n));
        }
        let (_, _, x_at) = watch.subscribe(&x, None);
        assert_eq!(x_at, 50, "a domain counts its own changes from 1");
        let (_, _, y_at) = watch.subscribe(&y, None);
        assert_eq!(y_at, 1, "X's changes leave Y where it was");
        assert!(
            matches!(
                y_feed.try_recv(),
                Err(broadcast::error::TryRecvError::Empty)
            ),
            "Y's feed carries nothing of X"
        );
        watch.publish(&y, change(2));
        assert_eq!(
            y_feed.try_recv().unwrap().seq,
            2,
            "Y's next id is the next of Y's"
        );
        // Ids of the two domains share nothing that shows the other's activity.
        let (xs, ys) = (watch.event_id(&x, 50), watch.event_id(&y, 2));
        assert_ne!(
            xs.rsplit_once('-').unwrap().0,
            ys.rsplit_once('-').unwrap().0
        );
    }

    #[test]
    fn resuming_works_per_domain_and_another_domains_id_resyncs() {
        let watch = Watch::new();
        let (x, y) = (DomainId::new(), DomainId::new());
        for n in 1..=3 {
            watch.publish(&x, change(n));
            watch.publish(&y, change(10 + n));
        }
        let generations = |resume: Resume| match resume {
            Resume::Missed(missed) => missed
                .iter()
                .map(|e| (e.seq, e.change.instance().unwrap().generation))
                .collect::<Vec<_>>(),
            Resume::Resync => panic!("resumable"),
        };
        let x1 = watch.event_id(&x, 1);
        let y2 = watch.event_id(&y, 2);
        assert_eq!(
            generations(watch.subscribe(&x, Some(&x1)).1),
            vec![(2, 2), (3, 3)]
        );
        assert_eq!(generations(watch.subscribe(&y, Some(&y2)).1), vec![(3, 13)]);
        // Y's id given to X (and X's to Y) is foreign, though its number is one X holds.
        assert!(matches!(watch.subscribe(&x, Some(&y2)).1, Resume::Resync));
        assert!(matches!(watch.subscribe(&y, Some(&x1)).1, Resume::Resync));
        // An id past where the domain is was never given: resync.
        let x9 = watch.event_id(&x, 9);
        assert!(matches!(watch.subscribe(&x, Some(&x9)).1, Resume::Resync));
        // Another run's watch names the same domain's log otherwise.
        let other = Watch::new();
        other.publish(&x, change(1));
        assert!(matches!(other.subscribe(&x, Some(&x1)).1, Resume::Resync));
        // An id at the domain's head misses nothing.
        let x3 = watch.event_id(&x, 3);
        assert_eq!(generations(watch.subscribe(&x, Some(&x3)).1), vec![]);
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
