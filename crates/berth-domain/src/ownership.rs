//! Whose an engine object is. Every object berth creates carries its store's id
//! ([`LABEL_STORE`]), so two daemons on one engine with the same prefix (a test daemon beside
//! a person's, two users on a shared engine) never touch each other's objects: a daemon stops,
//! removes, adopts or attaches only objects of its own store.
//!
//! Objects made before the label existed carry none: they are this store's only when their
//! instance is one of its instances, which only the store can say, so the caller decides
//! [`Ownership::Unlabelled`].

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::runtime::{LABEL_INSTANCE, LABEL_MANAGED, LABEL_PREFIX, Labels};

/// The label naming the store whose daemon made an object.
pub const LABEL_STORE: &str = "berth.store";
/// The data directory of that store, on the containers its daemon makes: what a person passes
/// as `--data-dir` to manage them.
pub const LABEL_STORE_DIR: &str = "berth.store-dir";

/// A store's identity: an id written once when the store is made, and where it lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreIdentity {
    /// `bst:<uuid>`, stable for the store's life.
    pub id: String,
    /// The data directory holding the store's file; `None` for a store in memory.
    pub data_dir: Option<String>,
}

impl StoreIdentity {
    /// A new identity, for a store made now.
    pub fn new_id() -> String {
        format!("bst:{}", uuid::Uuid::new_v4().simple())
    }
}

/// Whose a berth object of this prefix is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// It carries this store's id.
    Ours,
    /// It carries no store id: made by a berth older than the label. It is this store's only
    /// when its instance is.
    Unlabelled,
    /// It carries another store's id.
    Other(String),
}

/// Whose an object with `labels` is, or `None` when it is not a berth object of `prefix`.
pub fn ownership(labels: &Labels, prefix: &str, store: &str) -> Option<Ownership> {
    if labels.get(LABEL_MANAGED).map(String::as_str) != Some("1")
        || labels.get(LABEL_PREFIX).map(String::as_str) != Some(prefix)
    {
        return None;
    }
    Some(match labels.get(LABEL_STORE) {
        Some(id) if id == store => Ownership::Ours,
        Some(id) => Ownership::Other(id.clone()),
        None => Ownership::Unlabelled,
    })
}

/// What one other store has on this engine under this prefix.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OtherStore {
    /// Its id, or `None` for containers without a store label whose instance this store does
    /// not know (made by an older berth, of some other store).
    pub store: Option<String>,
    /// How many of its containers were seen at the last look.
    pub containers: usize,
    /// Its data directory, when its containers say.
    pub data_dir: Option<String>,
}

/// The other stores' objects seen at each resync, each store logged once per daemon run.
#[derive(Debug, Default)]
pub struct OtherStores {
    inner: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    current: Vec<OtherStore>,
    logged: std::collections::BTreeSet<Option<String>>,
}

impl OtherStores {
    /// Records what the last look found (containers of other stores, by their labels) and
    /// answers the stores not seen before in this run, for the caller to log once.
    pub fn record<'a>(
        &self,
        found: impl IntoIterator<Item = (Option<&'a str>, &'a Labels)>,
    ) -> Vec<OtherStore> {
        let mut by_store: BTreeMap<Option<String>, OtherStore> = BTreeMap::new();
        for (store, labels) in found {
            let entry = by_store
                .entry(store.map(str::to_owned))
                .or_insert_with(|| OtherStore {
                    store: store.map(str::to_owned),
                    ..OtherStore::default()
                });
            entry.containers += 1;
            if entry.data_dir.is_none() {
                entry.data_dir = labels.get(LABEL_STORE_DIR).cloned();
            }
        }
        let mut seen = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        seen.current = by_store.into_values().collect();
        let fresh: Vec<OtherStore> = seen
            .current
            .iter()
            .filter(|o| !seen.logged.contains(&o.store))
            .cloned()
            .collect();
        for o in &fresh {
            seen.logged.insert(o.store.clone());
        }
        fresh
    }

    /// What the last look found.
    pub fn current(&self) -> Vec<OtherStore> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .current
            .clone()
    }
}

/// Whether an unlabelled object's instance id (its [`LABEL_INSTANCE`]) passes `known`.
pub fn unlabelled_is_ours(labels: &Labels, known: impl Fn(&str) -> bool) -> bool {
    labels.get(LABEL_INSTANCE).is_some_and(|id| known(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn an_object_is_ours_only_with_our_store_and_prefix() {
        let base = [(LABEL_MANAGED, "1"), (LABEL_PREFIX, "p")];
        let mut ours = base.to_vec();
        ours.push((LABEL_STORE, "bst:a"));
        let mut theirs = base.to_vec();
        theirs.push((LABEL_STORE, "bst:b"));
        assert_eq!(
            ownership(&labels(&ours), "p", "bst:a"),
            Some(Ownership::Ours)
        );
        assert_eq!(
            ownership(&labels(&theirs), "p", "bst:a"),
            Some(Ownership::Other("bst:b".into()))
        );
        assert_eq!(
            ownership(&labels(&base), "p", "bst:a"),
            Some(Ownership::Unlabelled)
        );
        assert_eq!(ownership(&labels(&ours), "q", "bst:a"), None);
        assert_eq!(
            ownership(&labels(&[(LABEL_PREFIX, "p")]), "p", "bst:a"),
            None
        );
    }

    #[test]
    fn each_other_store_is_reported_once_per_run_and_counted_every_time() {
        let seen = OtherStores::default();
        let a = labels(&[(LABEL_STORE_DIR, "/a")]);
        let none = Labels::new();
        let fresh = seen.record([(Some("bst:b"), &a), (Some("bst:b"), &none)]);
        assert_eq!(fresh.len(), 1);
        assert_eq!(fresh[0].containers, 2);
        assert_eq!(fresh[0].data_dir.as_deref(), Some("/a"));
        let again = seen.record([(Some("bst:b"), &a), (None, &none)]);
        assert_eq!(again.len(), 1, "only the unlabelled group is new");
        assert_eq!(again[0].store, None);
        assert_eq!(seen.current().len(), 2);
        assert_eq!(seen.current()[0].store, None);
        assert_eq!(seen.current()[0].containers, 1);
        assert!(seen.record([]).is_empty());
        assert!(seen.current().is_empty());
    }
}
