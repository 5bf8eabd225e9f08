//! The in-memory view of domains and instances the writer keeps current, and how each commit
//! refreshes it.

use std::collections::HashMap;
use std::sync::RwLock;

use rusqlite::Connection;

use crate::StoreError;
use crate::instances::{INSTANCE_COLUMNS, domain_from_row, instance_from_row};
use crate::tx::{Touched, Tx};
use crate::worktrees::{WORKTREE_COLUMNS, worktree_from_row};
use berth_domain::ids::{DomainId, InstanceId};
use berth_domain::model::{Domain, Instance};
use berth_domain::watch::Watch;
use berth_domain::worktrees::Worktree;

/// Domains and instances as last committed, answered without SQLite. The writer updates it
/// after each commit, before it answers the write, so a caller reads its own writes.
#[derive(Default)]
pub(super) struct View {
    pub(super) domains: HashMap<DomainId, Domain>,
    pub(super) instances: HashMap<InstanceId, Instance>,
    /// Instance ids by domain, then key: looked up with borrowed text, nothing copied.
    pub(super) by_key: HashMap<DomainId, HashMap<String, InstanceId>>,
    /// Each instance's revision: a number of this run, new whenever its row is put again (an
    /// `observedAt` alone too), which a cache of anything made from the row is keyed by.
    pub(super) revisions: HashMap<InstanceId, u64>,
    /// The last revision given.
    last_revision: u64,
    /// Worktree records, by domain, then key.
    pub(super) worktrees: HashMap<DomainId, HashMap<String, Worktree>>,
}

impl View {
    /// The id of `domain`'s instance `key`.
    pub(super) fn id_by_key(&self, domain: &DomainId, key: &str) -> Option<&InstanceId> {
        self.by_key.get(domain)?.get(key)
    }

    pub(super) fn put_instance(&mut self, instance: Instance) {
        self.by_key
            .entry(instance.domain_id.clone())
            .or_default()
            .insert(instance.key.clone(), instance.id.clone());
        self.last_revision += 1;
        self.revisions
            .insert(instance.id.clone(), self.last_revision);
        self.instances.insert(instance.id.clone(), instance);
    }
}

pub(super) fn load_view(conn: &Connection) -> Result<View, StoreError> {
    let mut view = View::default();
    let mut stmt = conn.prepare("SELECT id, name, owner, state, created_at FROM domains")?;
    for domain in stmt.query_map([], domain_from_row)? {
        let domain = domain?;
        view.domains
            .insert(domain.resource_domain_id.clone(), domain);
    }
    let mut stmt = conn.prepare(&format!("SELECT {INSTANCE_COLUMNS} FROM instances"))?;
    for instance in stmt.query_map([], instance_from_row)? {
        view.put_instance(instance?);
    }
    let mut stmt = conn.prepare(&format!("SELECT {WORKTREE_COLUMNS} FROM worktrees"))?;
    for worktree in stmt.query_map([], worktree_from_row)? {
        let worktree = worktree?;
        view.worktrees
            .entry(worktree.domain_id.clone())
            .or_default()
            .insert(worktree.key.clone(), worktree);
    }
    Ok(view)
}

/// Reads the rows a committed transaction touched into the view, and publishes every instance
/// whose view changed (apart from `observedAt`). A row that cannot be read back is logged and
/// left as it was: the next write of it tries again.
pub(super) fn refresh(conn: &Connection, view: &RwLock<View>, watch: &Watch, touched: Touched) {
    if touched.domains.is_empty() && touched.instances.is_empty() && touched.worktrees.is_empty() {
        return;
    }
    let tx = Tx::new(conn);
    let worktrees: Vec<(DomainId, String, Option<Worktree>)> = touched
        .worktrees
        .into_iter()
        .map(|(domain, key)| {
            let found = tx.worktree(&domain, &key).ok().flatten();
            (domain, key, found)
        })
        .collect();
    let domains: Vec<Domain> = touched
        .domains
        .iter()
        .filter_map(|id| tx.domain(id).ok().flatten())
        .collect();
    let instances: Vec<Instance> = touched
        .instances
        .iter()
        .filter_map(|id| match tx.instance_by_id(id) {
            Ok(found) => found,
            Err(e) => {
                tracing::error!(instance = %id, error = %e, "the store could not read back an instance");
                None
            }
        })
        .collect();
    let mut view = view.write().unwrap_or_else(|e| e.into_inner());
    // Before the instances: a view published below carries its worktree's record.
    for (domain, key, found) in worktrees {
        let of_domain = view.worktrees.entry(domain).or_default();
        match found {
            Some(worktree) => of_domain.insert(key, worktree),
            None => of_domain.remove(&key),
        };
    }
    for domain in domains {
        view.domains
            .insert(domain.resource_domain_id.clone(), domain);
    }
    for instance in instances {
        let changed = view.instances.get(&instance.id).is_none_or(|old| {
            let mut old = old.clone();
            old.observed_at = instance.observed_at;
            old != instance
        });
        if changed {
            // Published as the API shows it: with its worktree's record.
            let mut change = instance.change();
            change.instance.worktree = instance
                .spec
                .worktree_key
                .as_ref()
                .and_then(|key| view.worktrees.get(&instance.domain_id)?.get(key))
                .map(|w| Box::new(w.view()));
            watch.publish(&instance.domain_id, change);
        }
        view.put_instance(instance);
    }
}
