//! Which endpoint connections are taken: only while enough descriptors stay free for the API and
//! the engine.
//!
//! A relayed connection holds [`PER_CONNECTION`] descriptors (the client's socket, the
//! container's, and a pipe of two ends for each direction) and a thread. Once the process runs
//! out of descriptors, `accept` on the API's listener fails and no new connection to the engine
//! can be made: the API stops answering and every engine call fails, which a burst of endpoint
//! connections (a test suite's pool) must not cause. So the endpoints keep a count of what their
//! connections and listeners hold, and take a connection only while that count stays within the
//! process's soft `RLIMIT_NOFILE` less [`RESERVE`]. A connection over it is closed at once; the
//! first refusal of a burst is logged, then one line a minute while it lasts, and the count of
//! refusals when connections are taken again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one relayed connection holds: two sockets and two pipes.
pub(crate) const PER_CONNECTION: usize = 6;
/// Descriptors kept for everything but endpoint connections: the API's connections, the
/// engine's, the store's files, execs and followed logs.
pub(crate) const RESERVE: usize = 256;
/// While a burst of refusals lasts, it is logged again at most this often.
const BURST_LOG_EVERY: Duration = Duration::from_secs(60);

/// The endpoints' share of the process's descriptors, shared by every endpoint.
#[derive(Debug)]
pub(crate) struct Admission {
    /// The process's soft limit when this was made (`None`: unlimited or unknown).
    limit: Option<usize>,
    /// What endpoint connections and listeners may hold together.
    budget: usize,
    /// What they hold now.
    held: AtomicUsize,
    /// The burst of refusals under way, if any.
    burst: Mutex<Option<Burst>>,
}

#[derive(Debug)]
struct Burst {
    /// Connections refused since the burst began.
    refused: u64,
    /// When it was last logged.
    logged: Instant,
}

impl Admission {
    /// A share of the process's soft `RLIMIT_NOFILE` as it is now (the daemon raised it to the
    /// hard limit at start).
    pub(crate) fn of_this_process() -> Self {
        Self::with_limit(soft_descriptor_limit())
    }

    /// A share of `limit` descriptors (`None`: no limit).
    pub(crate) fn with_limit(limit: Option<usize>) -> Self {
        Self {
            limit,
            budget: limit.map_or(usize::MAX, |l| l.saturating_sub(RESERVE)),
            held: AtomicUsize::new(0),
            burst: Mutex::new(None),
        }
    }

    /// Takes a connection when its descriptors fit: the ticket gives them back when dropped.
    /// `None` when they do not (the caller closes the connection at once); the refusal is
    /// logged once per burst.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Ticket> {
        self.take(PER_CONNECTION)
            .map(|()| {
                self.end_burst();
                Ticket {
                    admission: self.clone(),
                    descriptors: PER_CONNECTION,
                }
            })
            .or_else(|| {
                self.refused();
                None
            })
    }

    /// Counts a listener's descriptor for as long as the ticket lives. A listener is never
    /// refused (it exists already); it only leaves less for connections.
    pub(crate) fn listener(self: &Arc<Self>) -> Ticket {
        self.held.fetch_add(1, Ordering::AcqRel);
        Ticket {
            admission: self.clone(),
            descriptors: 1,
        }
    }

    /// What endpoints hold now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    fn take(&self, n: usize) -> Option<()> {
        let mut held = self.held.load(Ordering::Acquire);
        loop {
            let after = held.checked_add(n).filter(|after| *after <= self.budget)?;
            match self
                .held
                .compare_exchange_weak(held, after, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Some(()),
                Err(now) => held = now,
            }
        }
    }

    fn refused(&self) {
        let mut burst = self.burst.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let (log, refused) = match burst.as_mut() {
            None => {
                *burst = Some(Burst {
                    refused: 1,
                    logged: now,
                });
                (true, 1)
            }
            Some(b) => {
                b.refused += 1;
                let again = now.duration_since(b.logged) >= BURST_LOG_EVERY;
                if again {
                    b.logged = now;
                }
                (again, b.refused)
            }
        };
        drop(burst);
        if log {
            let held = self.held.load(Ordering::Acquire);
            tracing::warn!(
                refused,
                connections = held / PER_CONNECTION,
                held_descriptors = held,
                limit = self.limit.unwrap_or(usize::MAX),
                reserve = RESERVE,
                "endpoint connections are refused and closed: they would leave fewer than the \
                 reserve of descriptors for the API and the engine (this is logged once per \
                 burst)"
            );
        }
    }

    fn end_burst(&self) {
        let mut burst = self.burst.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ended) = burst.take() {
            drop(burst);
            tracing::info!(
                refused = ended.refused,
                "endpoint connections are taken again; the burst refused this many"
            );
        }
    }
}

impl Default for Admission {
    fn default() -> Self {
        Self::of_this_process()
    }
}

/// Descriptors an endpoint holds, given back when dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    admission: Arc<Admission>,
    descriptors: usize,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission
            .held
            .fetch_sub(self.descriptors, Ordering::AcqRel);
    }
}

/// The process's soft `RLIMIT_NOFILE`; `None` when unlimited or unreadable.
fn soft_descriptor_limit() -> Option<usize> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    usize::try_from(limit.current?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_taken_while_the_reserve_stays_free_and_again_once_one_ends() {
        let admission = Arc::new(Admission::with_limit(Some(1024)));
        let listener = admission.listener();
        let mut open = Vec::new();
        while let Some(ticket) = admission.admit() {
            open.push(ticket);
        }
        // (1024 - 256 - 1 listener) / 6 connections fit, and no more.
        assert_eq!(open.len(), (1024 - RESERVE - 1) / PER_CONNECTION);
        assert!(admission.held() <= 1024 - RESERVE);
        assert!(admission.admit().is_none());
        assert!(admission.burst.lock().unwrap().as_ref().unwrap().refused == 2);
        open.pop();
        let again = admission
            .admit()
            .expect("a freed connection's share is taken again");
        assert!(admission.burst.lock().unwrap().is_none());
        drop((again, open, listener));
        assert_eq!(admission.held(), 0);
    }

    #[test]
    fn a_limit_below_the_reserve_takes_no_connection_and_no_limit_takes_them_all() {
        let tight = Arc::new(Admission::with_limit(Some(200)));
        assert!(tight.admit().is_none());
        let open = Arc::new(Admission::with_limit(None));
        let tickets: Vec<_> = (0..10_000).filter_map(|_| open.admit()).collect();
        assert_eq!(tickets.len(), 10_000);
    }
}
