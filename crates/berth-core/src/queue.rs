//! The work queue every controller runs on, in the manner of controller-runtime's and kube-rs's.
//!
//! Keys are deduplicated: a key enqueued many times while it waits runs once. At most one
//! reconcile runs per key; a key enqueued while its reconcile runs runs once more afterwards.
//! A fixed pool of workers takes keys in the order they became due, so a resync of 200 instances
//! runs `workers` reconciles at a time, never 200. Time is a delay queue (`enqueue_after`), not a
//! sleeping task per request.
//!
//! Failure is contained. A reconcile that returns an error, or panics, is logged with its key,
//! counted, and retried after a back-off that doubles per consecutive failure; while a key waits
//! out its back-off, plain enqueues (engine events, resyncs, the controllers' own follow-ups)
//! only make sure it runs when the back-off ends, so nothing berth does to itself can turn a
//! failing key into a hot loop. Only [`WorkQueue::enqueue_now`], for a person's request, cuts a
//! back-off short. A key's bookkeeping is dropped as soon as nothing is pending for it.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt::{Debug, Display};
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// What a reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Converged: look again on the next event or resync.
    Done,
    /// Look again after this long (a probe, a deadline, a restart back-off).
    After(Duration),
}

/// How the queue behaves.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// How many reconciles run at once, across all keys.
    pub workers: usize,
    /// The first retry after a failed reconcile; doubles per consecutive failure.
    pub error_backoff: Duration,
    /// The longest retry wait.
    pub error_backoff_max: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            // A reconcile mostly waits on the engine: eight at a time keep a laptop's engine busy
            // (a restart observing 200 instances), and no more than that queue up inside it.
            workers: 8,
            error_backoff: Duration::from_millis(500),
            error_backoff_max: Duration::from_secs(30),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
type ReconcileFn<K, E> = Arc<dyn Fn(K) -> BoxFuture<Result<Action, E>> + Send + Sync>;

/// Counters, for tests, benchmarks and `berth doctor`.
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Reconciles started.
    pub runs: AtomicU64,
    /// Reconciles that returned an error.
    pub errors: AtomicU64,
    /// Reconciles that panicked.
    pub panics: AtomicU64,
}

struct KeyState {
    /// Waiting in `ready`.
    queued: bool,
    /// A reconcile of it runs now.
    active: bool,
    /// Enqueued while active: run once more afterwards.
    again: bool,
    /// When a delayed run is due, if one is.
    due: Option<Instant>,
    /// Until when plain enqueues wait (the error back-off).
    not_before: Option<Instant>,
    /// Consecutive failures.
    failures: u32,
}

impl KeyState {
    fn new() -> Self {
        Self {
            queued: false,
            active: false,
            again: false,
            due: None,
            not_before: None,
            failures: 0,
        }
    }

    fn idle(&self) -> bool {
        !self.queued && !self.active && !self.again && self.due.is_none() && self.failures == 0
    }
}

struct State<K> {
    keys: HashMap<K, KeyState>,
    ready: VecDeque<K>,
    /// Delayed runs by due time; the sequence keeps equal times apart.
    delayed: BTreeSet<(Instant, u64, K)>,
    seq: u64,
}

struct Shared<K, E> {
    state: Mutex<State<K>>,
    /// Wakes a worker: a key became ready.
    work: Notify,
    /// Wakes the timer: an earlier delayed run was added.
    timer: Notify,
    reconcile: ReconcileFn<K, E>,
    config: QueueConfig,
    stats: QueueStats,
    name: &'static str,
}

/// A work queue of keys, run by a fixed pool of workers. Clones share one queue.
pub struct WorkQueue<K, E> {
    shared: Arc<Shared<K, E>>,
}

impl<K, E> Clone for WorkQueue<K, E> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<K, E> WorkQueue<K, E>
where
    K: Clone + Eq + Hash + Ord + Display + Send + Sync + 'static,
    E: Display + Send + 'static,
{
    /// A queue that runs `reconcile` for its keys. Nothing runs until [`WorkQueue::run`].
    pub fn new<F, Fut>(name: &'static str, config: QueueConfig, reconcile: F) -> Self
    where
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let reconcile: ReconcileFn<K, E> = Arc::new(move |k| Box::pin(reconcile(k)));
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    keys: HashMap::new(),
                    ready: VecDeque::new(),
                    delayed: BTreeSet::new(),
                    seq: 0,
                }),
                work: Notify::new(),
                timer: Notify::new(),
                reconcile,
                config,
                stats: QueueStats::default(),
                name,
            }),
        }
    }

    /// Its counters.
    pub fn stats(&self) -> &QueueStats {
        &self.shared.stats
    }

    /// How many keys it holds any bookkeeping for (pending, running, delayed or backing off).
    pub fn tracked_keys(&self) -> usize {
        self.lock().keys.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        // Every critical section is a few map operations that cannot leave the state torn.
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for `key` to be reconciled soon, or, while it backs off after a failure, when its
    /// back-off ends. Never blocks.
    pub fn enqueue(&self, key: &K) {
        self.push(key, false);
    }

    /// Asks for `key` to be reconciled soon even if it is backing off: for a person's request.
    pub fn enqueue_now(&self, key: &K) {
        self.push(key, true);
    }

    fn push(&self, key: &K, urgent: bool) {
        let now = Instant::now();
        let mut st = self.lock();
        let entry = st.keys.entry(key.clone()).or_insert_with(KeyState::new);
        if urgent {
            entry.not_before = None;
            entry.failures = 0;
        }
        if let Some(until) = entry.not_before.filter(|t| *t > now) {
            drop(st);
            self.schedule(key, until);
            return;
        }
        if entry.active {
            entry.again = true;
            return;
        }
        if entry.queued {
            return;
        }
        entry.queued = true;
        st.ready.push_back(key.clone());
        drop(st);
        self.shared.work.notify_one();
    }

    /// Asks for `key` to be reconciled after `after` (earlier requests win).
    pub fn enqueue_after(&self, key: &K, after: Duration) {
        self.schedule(key, Instant::now() + after);
    }

    fn schedule(&self, key: &K, at: Instant) {
        let mut st = self.lock();
        let seq = st.seq;
        let entry = st.keys.entry(key.clone()).or_insert_with(KeyState::new);
        let earlier = match entry.due {
            Some(due) if due <= at => return,
            Some(due) => Some(due),
            None => None,
        };
        entry.due = Some(at);
        if let Some(old) = earlier {
            // The old entry's sequence is unknown here: drop every delayed entry of this key.
            st.delayed.retain(|(t, _, k)| !(k == key && *t == old));
        }
        st.seq += 1;
        st.delayed.insert((at, seq, key.clone()));
        drop(st);
        self.shared.timer.notify_one();
    }

    /// Starts the workers and the timer; they run until `shutdown` is cancelled. A reconcile
    /// under way then finishes; nothing new starts.
    pub fn run(&self, shutdown: CancellationToken) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::with_capacity(self.shared.config.workers + 1);
        let this = self.clone();
        let stop = shutdown.clone();
        tasks.push(tokio::spawn(async move { this.timer(stop).await }));
        for _ in 0..self.shared.config.workers.max(1) {
            let this = self.clone();
            let stop = shutdown.clone();
            tasks.push(tokio::spawn(async move { this.worker(stop).await }));
        }
        tasks
    }

    async fn timer(&self, shutdown: CancellationToken) {
        loop {
            let next = {
                let now = Instant::now();
                let mut st = self.lock();
                let mut due = Vec::new();
                while let Some(first) = st.delayed.first().cloned() {
                    if first.0 > now {
                        break;
                    }
                    st.delayed.pop_first();
                    due.push(first.2);
                }
                for key in &due {
                    if let Some(entry) = st.keys.get_mut(key) {
                        entry.due = None;
                        if entry.not_before.is_some_and(|t| t <= now) {
                            entry.not_before = None;
                        }
                    }
                }
                let next = st.delayed.first().map(|e| e.0);
                drop(st);
                for key in due {
                    self.push(&key, false);
                }
                next
            };
            let wait = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = wait => {}
                () = self.shared.timer.notified() => {}
            }
        }
    }

    async fn worker(&self, shutdown: CancellationToken) {
        loop {
            let key = loop {
                let notified = self.shared.work.notified();
                if let Some(key) = self.take() {
                    break key;
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = notified => {}
                }
            };
            if shutdown.is_cancelled() {
                return;
            }
            self.run_one(key).await;
        }
    }

    /// Takes the next ready key that is not running, marking it running.
    fn take(&self) -> Option<K> {
        let mut st = self.lock();
        let key = st.ready.pop_front()?;
        let entry = st.keys.entry(key.clone()).or_insert_with(KeyState::new);
        entry.queued = false;
        entry.active = true;
        let more = !st.ready.is_empty();
        drop(st);
        if more {
            // Another worker may take the next one.
            self.shared.work.notify_one();
        }
        Some(key)
    }

    async fn run_one(&self, key: K) {
        let shared = &self.shared;
        shared.stats.runs.fetch_add(1, Ordering::Relaxed);
        let outcome = AssertUnwindSafe((shared.reconcile)(key.clone()))
            .catch_unwind()
            .await;
        let failed = match outcome {
            Ok(Ok(action)) => {
                if let Action::After(after) = action {
                    self.enqueue_after(&key, after);
                }
                false
            }
            Ok(Err(e)) => {
                shared.stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(queue = shared.name, key = %key, error = %e, "reconcile failed");
                true
            }
            Err(panic) => {
                shared.stats.panics.fetch_add(1, Ordering::Relaxed);
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_owned());
                tracing::error!(queue = shared.name, key = %key, panic = %what,
                    "reconcile panicked; it will be retried after a back-off");
                true
            }
        };
        let retry = {
            let mut st = self.lock();
            let entry = st.keys.entry(key.clone()).or_insert_with(KeyState::new);
            entry.active = false;
            let retry = if failed {
                entry.failures = entry.failures.saturating_add(1);
                let wait = backoff(
                    shared.config.error_backoff,
                    shared.config.error_backoff_max,
                    entry.failures,
                );
                let until = Instant::now() + wait;
                entry.not_before = Some(until);
                Some(until)
            } else {
                entry.failures = 0;
                entry.not_before = None;
                None
            };
            let again = std::mem::take(&mut entry.again);
            if entry.idle() {
                st.keys.remove(&key);
            }
            (retry, again)
        };
        match retry {
            (Some(until), _) => self.schedule(&key, until),
            (None, true) => self.enqueue(&key),
            (None, false) => {}
        }
    }
}

/// `base` doubled per attempt after the first, at most `max`.
pub fn backoff(base: Duration, max: Duration, attempts: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempts.saturating_sub(1).min(20));
    base.saturating_mul(factor).min(max)
}

/// Runs a task and starts it again if it panics before `shutdown`, logging each time; a task
/// that keeps panicking is restarted at most once a second. A task that returns is done (one
/// that must run for ever loops itself).
pub fn supervise<F, Fut>(
    name: &'static str,
    shutdown: CancellationToken,
    start: F,
) -> tokio::task::JoinHandle<()>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            let task = tokio::spawn(start());
            let abort = task.abort_handle();
            let ended = tokio::select! {
                () = shutdown.cancelled() => {
                    abort.abort();
                    return;
                }
                ended = task => ended,
            };
            match ended {
                Err(e) if e.is_panic() => {
                    tracing::error!(task = name, "a background task panicked; restarting it");
                }
                Ok(()) | Err(_) => return,
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    })
}

impl<K: Debug, E> Debug for WorkQueue<K, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.shared.name)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    fn config(workers: usize) -> QueueConfig {
        QueueConfig {
            workers,
            error_backoff: Duration::from_millis(500),
            error_backoff_max: Duration::from_secs(30),
        }
    }

    #[test]
    fn backoff_doubles_from_its_base_to_its_ceiling() {
        let s = Duration::from_secs;
        assert_eq!(backoff(s(1), s(300), 1), s(1));
        assert_eq!(backoff(s(1), s(300), 2), s(2));
        assert_eq!(backoff(s(1), s(300), 5), s(16));
        assert_eq!(backoff(s(1), s(300), 10), s(300));
        assert_eq!(backoff(s(1), s(300), u32::MAX), s(300));
    }

    /// Waits until `done` holds, giving the queue's tasks the (paused) time they ask for.
    async fn until(mut done: impl FnMut() -> bool) {
        for _ in 0..10_000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the queue never got there");
    }

    #[tokio::test(start_paused = true)]
    async fn a_thousand_enqueues_of_one_key_run_one_reconcile_at_a_time() {
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let (r, m, n) = (running.clone(), most.clone(), runs.clone());
        let queue: WorkQueue<u32, String> = WorkQueue::new("test", config(4), move |_k| {
            let (r, m, n) = (r.clone(), m.clone(), n.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                n.fetch_add(1, Ordering::SeqCst);
                Ok(Action::Done)
            }
        });
        let stop = CancellationToken::new();
        let tasks_before = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        let handles = queue.run(stop.clone());
        for _ in 0..1000 {
            queue.enqueue(&7);
        }
        let alive = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        // The workers and the timer, whatever the number of enqueues.
        assert!(alive <= tasks_before + 4 + 1, "{alive} tasks alive");
        until(|| runs.load(Ordering::SeqCst) >= 1 && queue.tracked_keys() == 0).await;
        assert_eq!(most.load(Ordering::SeqCst), 1);
        // Deduplicated: the first run, and at most one more for what arrived while it ran.
        assert!(runs.load(Ordering::SeqCst) <= 2, "{runs:?} runs");
        stop.cancel();
        for h in handles {
            h.await.unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_reconcile_is_retried_and_its_key_is_not_stuck() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let queue: WorkQueue<u32, String> = WorkQueue::new("test", config(2), move |_k| {
            let c = c.clone();
            async move {
                if c.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("injected");
                }
                Ok(Action::Done)
            }
        });
        let stop = CancellationToken::new();
        queue.run(stop.clone());
        queue.enqueue(&1);
        until(|| calls.load(Ordering::SeqCst) >= 2).await;
        assert_eq!(queue.stats().panics.load(Ordering::SeqCst), 1);
        until(|| queue.tracked_keys() == 0).await;
        // And it runs again on the next enqueue.
        queue.enqueue(&1);
        until(|| calls.load(Ordering::SeqCst) >= 3).await;
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn enqueues_wait_out_a_failing_keys_backoff_but_a_request_does_not() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let queue: WorkQueue<u32, String> = WorkQueue::new("test", config(2), move |_k| {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                Err("the engine failed".to_owned())
            }
        });
        let stop = CancellationToken::new();
        queue.run(stop.clone());
        queue.enqueue(&1);
        until(|| calls.load(Ordering::SeqCst) == 1 && queue.lock().keys[&1].not_before.is_some())
            .await;
        let start = Instant::now();
        // A storm of events caused by the failure itself.
        for _ in 0..100 {
            queue.enqueue(&1);
            tokio::task::yield_now().await;
        }
        until(|| calls.load(Ordering::SeqCst) == 2).await;
        assert!(Instant::now() - start >= Duration::from_millis(500));
        // A person's request goes at once.
        until(|| queue.lock().keys[&1].not_before.is_some() && !queue.lock().keys[&1].active).await;
        let asked = Instant::now();
        queue.enqueue_now(&1);
        until(|| calls.load(Ordering::SeqCst) == 3).await;
        assert!(Instant::now() - asked < Duration::from_millis(500));
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_resync_of_many_keys_runs_at_most_the_worker_count_at_once() {
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let (r, m, n) = (running.clone(), most.clone(), runs.clone());
        let queue: WorkQueue<u32, String> = WorkQueue::new("test", config(3), move |_k| {
            let (r, m, n) = (r.clone(), m.clone(), n.clone());
            async move {
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                r.fetch_sub(1, Ordering::SeqCst);
                n.fetch_add(1, Ordering::SeqCst);
                Ok(Action::Done)
            }
        });
        let stop = CancellationToken::new();
        queue.run(stop.clone());
        for k in 0..200 {
            queue.enqueue(&k);
        }
        until(|| runs.load(Ordering::SeqCst) == 200).await;
        assert_eq!(most.load(Ordering::SeqCst), 3);
        until(|| queue.tracked_keys() == 0).await;
        stop.cancel();
    }

    #[tokio::test(start_paused = true)]
    async fn a_supervised_task_is_restarted_after_a_panic_and_not_after_it_returns() {
        let starts = Arc::new(AtomicUsize::new(0));
        let s = starts.clone();
        let handle = supervise("test", CancellationToken::new(), move || {
            let s = s.clone();
            async move {
                if s.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("injected");
                }
            }
        });
        handle.await.unwrap();
        // Once after the panic, and not again after the second run returned.
        assert_eq!(starts.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn requeue_after_runs_the_key_again_once_at_the_earliest_time() {
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        let queue: WorkQueue<u32, String> = WorkQueue::new("test", config(1), move |_k| {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                Ok(Action::Done)
            }
        });
        let stop = CancellationToken::new();
        queue.run(stop.clone());
        let start = Instant::now();
        queue.enqueue_after(&1, Duration::from_secs(10));
        queue.enqueue_after(&1, Duration::from_secs(2));
        queue.enqueue_after(&1, Duration::from_secs(5));
        until(|| calls.load(Ordering::SeqCst) == 1).await;
        let took = Instant::now() - start;
        assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(3));
        until(|| queue.tracked_keys() == 0).await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        stop.cancel();
    }
}
