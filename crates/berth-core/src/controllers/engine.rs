//! Whether the container engine answers, as the runtime's watch reports it: each engine the
//! runtime drives (one for Docker, one per node for the swarm) is up until its watch says it
//! is away, and up again when it reconnects. Read by the API (the daemon's view, the
//! instances' views, the routes that need the engine) and watched by the event stream.

use std::collections::BTreeMap;

use tokio::sync::watch;

use crate::model::EngineUnreachable;
use crate::time::Timestamp;

/// The engines that do not answer, each with since when and what the last try met.
#[derive(Debug)]
pub(super) struct EngineHealth {
    away: std::sync::Mutex<BTreeMap<String, EngineUnreachable>>,
    /// What [`EngineHealth::unreachable`] answers, for those who wait on its changes.
    now: watch::Sender<Option<EngineUnreachable>>,
}

impl EngineHealth {
    pub(super) fn new() -> Self {
        Self {
            away: std::sync::Mutex::new(BTreeMap::new()),
            now: watch::Sender::new(None),
        }
    }

    /// `engine` did not answer: kept with the time it was first found away, and the last
    /// sentence. Whether it answered before.
    pub(super) fn away(&self, engine: &str, message: String) -> bool {
        let mut away = self.away.lock().unwrap_or_else(|e| e.into_inner());
        let was_up = !away.contains_key(engine);
        let since = away.get(engine).map_or_else(Timestamp::now, |a| a.since);
        away.insert(engine.to_owned(), EngineUnreachable { since, message });
        self.publish(&away);
        was_up
    }

    /// `engine` answers again. Whether it was away.
    pub(super) fn back(&self, engine: &str) -> bool {
        let mut away = self.away.lock().unwrap_or_else(|e| e.into_inner());
        let was_away = away.remove(engine).is_some();
        if was_away {
            self.publish(&away);
        }
        was_away
    }

    /// The earliest of the engines away, with its sentence; `None` while every one answers.
    fn first(away: &BTreeMap<String, EngineUnreachable>) -> Option<EngineUnreachable> {
        away.values().min_by_key(|a| a.since).cloned()
    }

    fn publish(&self, away: &BTreeMap<String, EngineUnreachable>) {
        let first = Self::first(away);
        self.now.send_if_modified(|now| {
            if *now == first {
                return false;
            }
            *now = first;
            true
        });
    }

    /// `None` while the engine answers; since when and why it does not, otherwise.
    pub(super) fn unreachable(&self) -> Option<EngineUnreachable> {
        self.now.borrow().clone()
    }

    /// A receiver that sees each change of [`EngineHealth::unreachable`].
    pub(super) fn changes(&self) -> watch::Receiver<Option<EngineUnreachable>> {
        self.now.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_engine_away_is_kept_with_its_first_time_until_it_is_back() {
        let health = EngineHealth::new();
        let mut changes = health.changes();
        assert_eq!(health.unreachable(), None);
        assert!(health.away("unix:///a", "refused".to_owned()));
        let first = health.unreachable().expect("away");
        assert!(changes.has_changed().unwrap());
        changes.mark_unchanged();
        assert!(!health.away("unix:///a", "refused again".to_owned()));
        let again = health.unreachable().expect("still away");
        assert_eq!(again.since, first.since);
        assert_eq!(again.message, "refused again");
        assert!(health.back("unix:///a"));
        assert_eq!(health.unreachable(), None);
        assert!(changes.has_changed().unwrap());
        assert!(!health.back("unix:///a"));
    }

    #[test]
    fn one_engine_of_several_away_is_the_daemons_engine_away() {
        let health = EngineHealth::new();
        health.away("tcp://node-b:2375", "timed out".to_owned());
        assert!(!health.back("unix:///a"));
        assert_eq!(
            health.unreachable().map(|a| a.message),
            Some("timed out".to_owned())
        );
    }
}
