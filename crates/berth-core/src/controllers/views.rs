//! The view controller: each domain's network views (one per worktree key, holding the key's
//! instances and the domain's shared ones under their aliases, so an alias answers exactly one
//! instance there), and the linked workspaces' containers attached to them, followed through
//! engine events, with which of them run.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::context::{Context, ReconcileError};
use crate::consent::consents;
use crate::ids::DomainId;
use crate::model::{Instance, Workspace};
use crate::names;
use crate::runtime::{ContainerChange, ContainerFacts, LABEL_MANAGED, Labels, RuntimeError};
use crate::store::StoreError;

/// What berth knows of one executor container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExecutorEntry {
    /// The hash of the key whose workspace it serves.
    pub(crate) owner: String,
    /// The workspace it serves (an id of `owner`'s).
    pub(crate) workspace: String,
    /// Whether it runs.
    pub(crate) running: bool,
}

/// The containers a workspace names or selects, sorted by whether they are its executors.
#[derive(Debug, Default)]
pub struct Candidates {
    /// Containers that consent to the workspace and are not berth's: its executors.
    pub executors: Vec<ContainerFacts>,
    /// Containers it names or selects that are not berth's and do not consent to it.
    pub refused: Vec<ContainerFacts>,
    /// Names (or ids) it gives that match no executor.
    pub not_attached: Vec<String>,
}

/// The network views of every domain, and the workspace containers attached to them.
pub(crate) struct ViewController {
    ctx: Arc<Context>,
    /// Workspace executor containers by name: their workspace and whether they run. Kept
    /// current by attaches, engine events and the resync, so idle accounting asks no engine.
    executors: Mutex<HashMap<String, ExecutorEntry>>,
}

impl ViewController {
    /// A controller with no executor known yet.
    pub(crate) fn new(ctx: Arc<Context>) -> Self {
        Self {
            ctx,
            executors: Mutex::new(HashMap::new()),
        }
    }

    /// The (owner, workspace) of every executor container that runs now, from memory.
    pub(crate) fn running_executor_workspaces(&self) -> HashSet<(String, String)> {
        self.executors()
            .values()
            .filter(|e| e.running)
            .map(|e| (e.owner.clone(), e.workspace.clone()))
            .collect()
    }

    /// What a workspace names and selects, read from the engine now: consent is checked on the
    /// containers' own labels every time, never remembered, so a container recreated under a
    /// name is judged by what it carries. An instance of berth's is never an executor.
    pub async fn executor_candidates(&self, workspace: &Workspace) -> Candidates {
        let runtime = &self.ctx.runtime;
        let mut found: BTreeMap<String, ContainerFacts> = BTreeMap::new();
        let mut named: Vec<(String, Option<String>)> = Vec::new();
        for name in &workspace.containers {
            match runtime.inspect_container(name).await {
                Ok(Some(c)) => {
                    named.push((name.clone(), Some(c.id.clone())));
                    found.insert(c.id.clone(), c);
                }
                Ok(None) => named.push((name.clone(), None)),
                Err(e) => {
                    named.push((name.clone(), None));
                    tracing::warn!(workspace = %workspace.id, error = %e, "could not inspect an executor")
                }
            }
        }
        if let Some(label) = &workspace.selector {
            match runtime.list_labelled(label).await {
                Ok(list) => found.extend(list.into_iter().map(|c| (c.id.clone(), c))),
                Err(e) => {
                    tracing::warn!(workspace = %workspace.id, error = %e, "could not list executors")
                }
            }
        }
        let mut out = Candidates::default();
        for c in found.into_values() {
            if c.labels.contains_key(LABEL_MANAGED) {
                continue;
            }
            if consents(&c.labels, &workspace.owner, &workspace.id) {
                out.executors.push(c);
            } else {
                out.refused.push(c);
            }
        }
        out.not_attached = named
            .into_iter()
            .filter(|(_, id)| {
                !id.as_ref()
                    .is_some_and(|id| out.executors.iter().any(|c| &c.id == id))
            })
            .map(|(name, _)| name)
            .collect();
        out
    }

    /// The containers that are a workspace's executors: those it names (that exist) and those
    /// carrying its selector label, that carry its consent label. Never an instance of berth's.
    pub async fn executor_containers(&self, workspace: &Workspace) -> Vec<ContainerFacts> {
        self.executor_candidates(workspace).await.executors
    }

    /// Attaches a linked workspace's executor containers to its view (and detaches them from the
    /// domain's other views); a container it names or selects without consenting is detached
    /// from its view. Returns how many running executors this call attached.
    pub async fn attach_workspace(&self, workspace: &Workspace) -> usize {
        let (Some(domain), Some(key)) = (&workspace.domain_id, &workspace.worktree_key) else {
            return 0;
        };
        let prefix = &self.ctx.config.prefix;
        let view = names::view_network(prefix, domain, key);
        let views_of_domain = format!("{}-wt-", names::domain_network(prefix, domain));
        let labels = network_labels(&self.ctx, &domain.to_string());
        if let Err(e) = self.ctx.runtime.ensure_network(&view, &labels).await {
            tracing::warn!(workspace = %workspace.id, error = %e, "could not make the workspace's network");
            return 0;
        }
        let candidates = self.executor_candidates(workspace).await;
        // Workspaces that share this view may hold a container this one names in vain.
        let sharing: Vec<Workspace> = self
            .linked_workspaces(domain)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter(|w| w.worktree_key.as_deref() == Some(key.as_str()))
            .collect();
        for c in candidates.refused.iter().filter(|c| {
            c.networks.contains_key(&view)
                && !sharing.iter().any(|w| consents(&c.labels, &w.owner, &w.id))
        }) {
            // Attached before consent was required, or by hand: it does not consent.
            if let Err(e) = self.ctx.runtime.disconnect_network(&view, &c.id).await {
                tracing::warn!(container = %c.name, error = %e, "could not detach a container that does not consent");
            }
            self.executors().remove(&c.name);
        }
        let mut attached = 0;
        for c in candidates.executors {
            for other in c
                .networks
                .keys()
                .filter(|n| n.starts_with(&views_of_domain) && **n != view)
            {
                if let Err(e) = self.ctx.runtime.disconnect_network(other, &c.id).await {
                    tracing::warn!(container = %c.name, error = %e, "could not detach an executor");
                }
            }
            if !c.networks.contains_key(&view) {
                match self.ctx.runtime.connect_network(&view, &c.id, &[]).await {
                    Ok(()) => attached += usize::from(c.running),
                    Err(e) => {
                        tracing::warn!(container = %c.name, error = %e, "could not attach an executor");
                        continue;
                    }
                }
            }
            self.executors().insert(
                c.name.clone(),
                ExecutorEntry {
                    owner: workspace.owner.clone(),
                    workspace: workspace.id.clone(),
                    running: c.running,
                },
            );
        }
        attached
    }

    /// Detaches a workspace's executor containers from its view and forgets them.
    pub async fn detach_workspace(&self, workspace: &Workspace) {
        let (Some(domain), Some(key)) = (&workspace.domain_id, &workspace.worktree_key) else {
            return;
        };
        let view = names::view_network(&self.ctx.config.prefix, domain, key);
        for c in self.executor_containers(workspace).await {
            if c.networks.contains_key(&view)
                && let Err(e) = self.ctx.runtime.disconnect_network(&view, &c.id).await
            {
                tracing::warn!(container = %c.name, error = %e, "could not detach an executor");
            }
            self.executors().remove(&c.name);
        }
        self.executors()
            .retain(|_, e| e.workspace != workspace.id || e.owner != workspace.owner);
    }

    /// After a domain's archive: unlinks its workspaces (detaching their executors) and removes
    /// its networks, so nothing of the domain is left on the engine but its volumes.
    pub async fn release_domain(&self, domain: &crate::ids::DomainId) {
        let prefix = self.ctx.config.prefix.clone();
        let instances = self.ctx.store.instances(domain, true);
        let Ok(workspaces) = self.linked_workspaces(domain).await.inspect_err(|e| {
            tracing::error!(error = %e, "could not read the archived domain");
        }) else {
            return;
        };
        let mut networks: std::collections::BTreeSet<String> = instances
            .iter()
            .filter_map(|i| i.spec.worktree_key.as_deref())
            .map(|k| names::view_network(&prefix, domain, k))
            .collect();
        for w in &workspaces {
            self.detach_workspace(w).await;
            if let Some(k) = &w.worktree_key {
                networks.insert(names::view_network(&prefix, domain, k));
            }
            let mut unlinked = w.clone();
            unlinked.domain_id = None;
            unlinked.worktree_key = None;
            if let Err(e) = self
                .ctx
                .store
                .write(move |tx| tx.put_workspace(&unlinked))
                .await
            {
                tracing::error!(workspace = %w.id, error = %e, "could not unlink a workspace");
            }
        }
        networks.insert(names::domain_network(&prefix, domain));
        for network in networks {
            if let Err(e) = self.ctx.runtime.remove_network(&network, &prefix).await {
                tracing::warn!(network = %network, error = %e, "could not remove an archived domain's network");
            }
        }
    }

    /// Removes a worktree key's view of a domain once nothing uses it (no live instance has the
    /// key, no workspace is linked with it): each view is a bridge network from the engine's
    /// small address pool, and worktrees come and go.
    pub async fn prune_view(&self, domain: &crate::ids::DomainId, key: &str) {
        let prefix = self.ctx.config.prefix.clone();
        let instances = self.ctx.store.instances(domain, false);
        let Ok(workspaces) = self.linked_workspaces(domain).await.inspect_err(|e| {
            tracing::error!(error = %e, "could not read the domain's views");
        }) else {
            return;
        };
        let in_use = instances
            .iter()
            .any(|i| i.spec.worktree_key.as_deref() == Some(key))
            || workspaces
                .iter()
                .any(|w| w.worktree_key.as_deref() == Some(key));
        if in_use {
            return;
        }
        let view = names::view_network(&prefix, domain, key);
        for shared in instances.iter().filter(|i| i.spec.worktree_key.is_none()) {
            let name = names::container(&prefix, domain, &shared.key);
            if let Ok(Some(c)) = self.ctx.runtime.inspect_container(&name).await
                && c.networks.contains_key(&view)
                && let Err(e) = self.ctx.runtime.disconnect_network(&view, &c.id).await
            {
                tracing::warn!(network = %view, error = %e, "could not detach a shared instance");
            }
        }
        if let Err(e) = self.ctx.runtime.remove_network(&view, &prefix).await {
            tracing::warn!(network = %view, error = %e, "could not remove an unused view");
        }
    }

    /// Attaches every linked workspace again: catches what missed events would have told.
    pub(crate) async fn reattach_workspaces(&self) {
        let workspaces = match self.ctx.store.read(|tx| tx.all_linked_workspaces()).await {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(error = %e, "could not read the linked workspaces");
                return;
            }
        };
        for w in &workspaces {
            self.attach_workspace(w).await;
        }
    }

    /// A container that is not one of berth's instances changed: follow executors, and attach a
    /// container that starts carrying a linked workspace's selector or name.
    pub(crate) async fn on_container_event(
        &self,
        name: &str,
        labels: &Labels,
        change: ContainerChange,
    ) {
        match change {
            ContainerChange::Destroyed => {
                self.executors().remove(name);
            }
            ContainerChange::Ended => {
                if let Some(entry) = self.executors().get_mut(name) {
                    entry.running = false;
                }
            }
            // A renamed container may now carry a linked workspace's name.
            ContainerChange::Started | ContainerChange::Created | ContainerChange::Renamed => {
                let workspaces = match self.ctx.store.read(|tx| tx.all_linked_workspaces()).await {
                    Ok(w) => w,
                    Err(_) => return,
                };
                // Only the workspace the container consents to may take it: another key's
                // workspace naming or selecting it must not stand in the way.
                let mine = workspaces.into_iter().find(|w| {
                    consents(labels, &w.owner, &w.id)
                        && (w.containers.iter().any(|c| c == name)
                            || w.selector
                                .as_deref()
                                .is_some_and(|sel| selector_matches(sel, labels)))
                });
                match mine {
                    Some(w) => {
                        self.attach_workspace(&w).await;
                    }
                    None => {
                        if let Some(entry) = self.executors().get_mut(name) {
                            entry.running = change == ContainerChange::Started || entry.running;
                        }
                    }
                }
            }
        }
    }

    /// The network an instance's container is created on: its worktree key's view, or the
    /// domain's base network for a shared instance.
    pub(crate) fn primary_network(&self, instance: &Instance) -> String {
        let prefix = &self.ctx.config.prefix;
        match &instance.spec.worktree_key {
            Some(key) => names::view_network(prefix, &instance.domain_id, key),
            None => names::domain_network(prefix, &instance.domain_id),
        }
    }

    pub(crate) async fn ensure_network(
        &self,
        name: &str,
        domain: &DomainId,
    ) -> Result<(), RuntimeError> {
        let labels = network_labels(&self.ctx, domain.as_str());
        self.ctx.runtime.ensure_network(name, &labels).await
    }

    /// The networks an instance's container belongs on, each with the aliases it answers to
    /// there. A worktree instance is on its key's view. A shared instance is on the base network
    /// and on every view of the domain, except a view whose key has its own instance with the
    /// same alias: there that instance answers, and the shared one is not attached at all, so no
    /// alias is ever held by two containers on one network.
    pub(crate) async fn desired_networks(
        &self,
        instance: &Instance,
    ) -> Result<BTreeMap<String, Vec<String>>, StoreError> {
        let prefix = &self.ctx.config.prefix;
        let domain = &instance.domain_id;
        let alias = vec![instance.spec.alias.clone()];
        if let Some(key) = &instance.spec.worktree_key {
            return Ok(BTreeMap::from([(
                names::view_network(prefix, domain, key),
                alias,
            )]));
        }
        let instances = self.ctx.store.instances(domain, false);
        let workspaces = self.linked_workspaces(domain).await?;
        let mut keys: BTreeSet<String> = instances
            .iter()
            .filter_map(|i| i.spec.worktree_key.clone())
            .collect();
        keys.extend(workspaces.into_iter().filter_map(|w| w.worktree_key));
        let mut networks = BTreeMap::from([(names::domain_network(prefix, domain), alias.clone())]);
        for key in keys {
            let shadowed = instances.iter().any(|i| {
                i.spec.worktree_key.as_deref() == Some(key.as_str())
                    && i.spec.alias == instance.spec.alias
            });
            if !shadowed {
                networks.insert(names::view_network(prefix, domain, &key), alias.clone());
            }
        }
        Ok(networks)
    }

    /// Whether a worktree instance's alias is also a shared instance's, which its start
    /// detaches from the key's view first.
    pub(crate) fn shadows_shared(&self, instance: &Instance) -> bool {
        instance.spec.worktree_key.is_some()
            && self
                .ctx
                .store
                .instances(&instance.domain_id, false)
                .iter()
                .any(|i| i.spec.worktree_key.is_none() && i.spec.alias == instance.spec.alias)
    }

    /// Attaches a container to the networks it belongs on, with the right aliases, and detaches
    /// it from the domain's other networks. For a worktree instance, first detaches a shared
    /// instance with the same alias from its view.
    pub(crate) async fn ensure_attachments(
        &self,
        instance: &Instance,
        container: &ContainerFacts,
    ) -> Result<(), ReconcileError> {
        let runtime = &self.ctx.runtime;
        if let Some(key) = &instance.spec.worktree_key {
            self.unshadow(instance, key).await?;
        }
        let desired = self.desired_networks(instance).await?;
        for (network, aliases) in &desired {
            let attached = container.networks.get(network);
            if attached.is_some_and(|have| aliases.iter().all(|a| have.contains(a))) {
                continue;
            }
            self.ensure_network(network, &instance.domain_id).await?;
            if attached.is_some() {
                runtime.disconnect_network(network, &container.id).await?;
            }
            runtime
                .connect_network(network, &container.id, aliases)
                .await?;
        }
        let ours = names::domain_network(&self.ctx.config.prefix, &instance.domain_id);
        for network in container.networks.keys() {
            if network.starts_with(&ours) && !desired.contains_key(network) {
                runtime.disconnect_network(network, &container.id).await?;
            }
        }
        Ok(())
    }

    /// Detaches the shared instance that answers to `instance`'s alias from the view of `key`.
    async fn unshadow(&self, instance: &Instance, key: &str) -> Result<(), ReconcileError> {
        let domain = &instance.domain_id;
        let shared = self
            .ctx
            .store
            .instances(domain, false)
            .into_iter()
            .find(|i| i.spec.worktree_key.is_none() && i.spec.alias == instance.spec.alias);
        let Some(shared) = shared else { return Ok(()) };
        let view = names::view_network(&self.ctx.config.prefix, domain, key);
        if let Some(c) = self
            .ctx
            .runtime
            .inspect_container(&self.ctx.container_name(&shared))
            .await?
            && c.networks.contains_key(&view)
        {
            self.ctx.runtime.disconnect_network(&view, &c.id).await?;
        }
        Ok(())
    }

    /// The workspaces linked to a domain, from the store.
    async fn linked_workspaces(&self, domain: &DomainId) -> Result<Vec<Workspace>, StoreError> {
        let domain = domain.clone();
        self.ctx
            .store
            .read(move |tx| tx.linked_workspaces(&domain))
            .await
    }

    fn executors(&self) -> std::sync::MutexGuard<'_, HashMap<String, ExecutorEntry>> {
        self.executors.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Labels of a network berth makes for a domain.
pub(crate) fn network_labels(ctx: &Context, domain: &str) -> Labels {
    let mut labels = ctx.base_labels();
    labels.insert(crate::runtime::LABEL_DOMAIN.to_owned(), domain.to_owned());
    labels
}

/// Whether `labels` carry the selector `key=value`.
pub(crate) fn selector_matches(selector: &str, labels: &Labels) -> bool {
    selector
        .split_once('=')
        .is_some_and(|(k, v)| labels.get(k).map(String::as_str) == Some(v))
}
