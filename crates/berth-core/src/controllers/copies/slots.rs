//! Whose turn it is: at most COPIES_AT_ONCE copies at once, one at a time per instance, taken
//! round-robin across domains.

use std::collections::{HashMap, HashSet};

use tokio::sync::oneshot;

use crate::ids::{CopyId, DomainId, InstanceId};

/// How many copies run at once. Each one streams a volume through a helper container: a few
/// side by side keep a small instance's copy from waiting behind another key's large ones,
/// without making every copy share the disk with many others.
pub(crate) const COPIES_AT_ONCE: usize = 3;

/// A copy waiting for its turn.
pub(super) struct Waiting {
    pub(super) id: CopyId,
    pub(super) domain: DomainId,
    /// The instances it reads or fills.
    pub(super) instances: Vec<InstanceId>,
    /// Told when it may begin.
    pub(super) begin: oneshot::Sender<()>,
}

/// Which copies have begun, and which wait (in the order asked).
#[derive(Default)]
pub(super) struct Slots {
    /// The copies that have begun and not ended, with their domain and the instances they touch.
    pub(super) begun: HashMap<CopyId, (DomainId, Vec<InstanceId>)>,
    pub(super) waiting: Vec<Waiting>,
    /// The turn at which each domain with a copy begun or waiting last had one begin.
    pub(super) served: HashMap<DomainId, u64>,
    pub(super) turn: u64,
}

impl Slots {
    /// Begins every waiting copy that may begin now, fairly across domains.
    pub(super) fn admit(&mut self) {
        self.waiting.retain(|w| !w.begin.is_closed());
        while self.begun.len() < COPIES_AT_ONCE {
            let Some(next) = self.next() else { break };
            let waiting = self.waiting.remove(next);
            if waiting.begin.send(()).is_err() {
                // Its task ended (shutdown) while it waited.
                continue;
            }
            self.turn += 1;
            self.served.insert(waiting.domain.clone(), self.turn);
            self.begun
                .insert(waiting.id, (waiting.domain, waiting.instances));
        }
        let (begun, waiting) = (&self.begun, &self.waiting);
        self.served.retain(|domain, _| {
            begun.values().any(|(d, _)| d == domain) || waiting.iter().any(|w| w.domain == *domain)
        });
    }

    /// The waiting copy to begin next: of those whose instances no begun copy touches and no
    /// copy asked before them waits for, the first asked of the domain with the fewest copies
    /// begun, then served least recently.
    pub(super) fn next(&self) -> Option<usize> {
        let busy: HashSet<&InstanceId> = self.begun.values().flat_map(|(_, i)| i).collect();
        let mut ahead: HashSet<&InstanceId> = HashSet::new();
        let mut best: Option<(usize, (usize, u64))> = None;
        for (at, w) in self.waiting.iter().enumerate() {
            let free = w
                .instances
                .iter()
                .all(|i| !busy.contains(i) && !ahead.contains(i));
            ahead.extend(&w.instances);
            if !free {
                continue;
            }
            let running = self.begun.values().filter(|(d, _)| *d == w.domain).count();
            let rank = (running, self.served.get(&w.domain).copied().unwrap_or(0));
            if best.is_none_or(|(_, b)| rank < b) {
                best = Some((at, rank));
            }
        }
        best.map(|(at, _)| at)
    }
}
