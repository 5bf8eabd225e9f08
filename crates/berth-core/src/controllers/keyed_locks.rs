//! One async lock per key, made on first use and let go once nobody holds or waits for it: what
//! the instance controller (one reconcile of an instance at a time) and the freezer (one freeze
//! or thaw of an instance at a time) each keep per instance.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::Mutex as AsyncMutex;

/// Locks by key.
pub(crate) struct KeyedLocks<K> {
    locks: Mutex<HashMap<K, Arc<AsyncMutex<()>>>>,
}

impl<K: Eq + Hash + Clone> KeyedLocks<K> {
    pub(crate) fn new() -> Self {
        Self {
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `f` holding the lock of `key`, then lets the lock's entry go if nobody else waits.
    pub(crate) async fn with_lock<T>(&self, key: &K, f: impl AsyncFnOnce() -> T) -> T {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks.entry(key.clone()).or_default().clone()
        };
        let out = {
            let _held = lock.lock().await;
            f().await
        };
        drop(lock);
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        if locks.get(key).is_some_and(|l| Arc::strong_count(l) == 1) {
            locks.remove(key);
        }
        out
    }
}
