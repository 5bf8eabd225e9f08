//! Workspaces, their leases and links: the requests.

use std::time::Duration;

use super::Berth;
use crate::error::Error;
use crate::ids::DomainId;
use crate::model::{
    DomainState, Executor, Lease, LeaseView, LinkView, NotAttachedView, SelectorView, Workspace,
    WorkspaceView,
};
use crate::time::Timestamp;
use crate::workspaces::*;

impl Berth {
    async fn owned_workspace(&self, owner: &str, id: &str) -> Result<Workspace, Error> {
        let (owner, wanted) = (owner.to_owned(), id.to_owned());
        self.store()
            .read(move |tx| tx.workspace(&owner, &wanted))
            .await?
            .ok_or_else(|| Error::WorkspaceNotFound(id.to_owned()))
    }

    /// Registers (or re-registers) a workspace's executors; its link is kept.
    pub async fn put_workspace(
        &self,
        owner: &str,
        id: &str,
        request: WorkspaceRequest,
    ) -> Result<WorkspaceView, Error> {
        let (owner, id) = (owner.to_owned(), id.to_owned());
        let workspace = self
            .store()
            .write(move |tx| {
                // Ids are per key: another key's workspace of this id is another workspace.
                let existing = tx.workspace(&owner, &id)?;
                let workspace = Workspace {
                    id,
                    owner,
                    containers: request.containers,
                    selector: request.selector,
                    domain_id: existing.as_ref().and_then(|w| w.domain_id.clone()),
                    worktree_key: existing.and_then(|w| w.worktree_key),
                };
                tx.put_workspace(&workspace)?;
                Ok::<_, Error>(workspace)
            })
            .await?;
        if let Some(reconciler) = self.reconciler() {
            reconciler.attach_workspace(&workspace).await;
        }
        self.workspace_view(workspace).await
    }

    /// One workspace.
    pub async fn workspace(&self, owner: &str, id: &str) -> Result<WorkspaceView, Error> {
        let workspace = self.owned_workspace(owner, id).await?;
        self.workspace_view(workspace).await
    }

    /// Every workspace of the caller.
    pub async fn workspaces(&self, owner: &str) -> Result<Vec<WorkspaceView>, Error> {
        let owner = owner.to_owned();
        let all = self
            .store()
            .read(move |tx| tx.workspaces_of(&owner))
            .await?;
        let mut views = Vec::with_capacity(all.len());
        for w in all {
            views.push(self.workspace_view(w).await?);
        }
        Ok(views)
    }

    /// Forgets a workspace: detaches its executors and removes its link and leases.
    pub async fn delete_workspace(&self, owner: &str, id: &str) -> Result<(), Error> {
        let workspace = self.owned_workspace(owner, id).await?;
        if let Some(reconciler) = self.reconciler() {
            reconciler.detach_workspace(&workspace).await;
        }
        let (owner, id) = (owner.to_owned(), id.to_owned());
        self.store()
            .write(move |tx| tx.delete_workspace(&owner, &id))
            .await?;
        if let (Some(reconciler), Some(domain), Some(key)) = (
            self.reconciler(),
            &workspace.domain_id,
            &workspace.worktree_key,
        ) {
            reconciler.prune_view(domain, key).await;
        }
        Ok(())
    }

    /// A new lease on a workspace, live for `ttl` unless renewed.
    pub async fn create_lease(
        &self,
        owner: &str,
        id: &str,
        ttl: Duration,
    ) -> Result<LeaseView, Error> {
        self.owned_workspace(owner, id).await?;
        let lease = Lease {
            id: format!("lse:{}", uuid::Uuid::new_v4().hyphenated()),
            owner: owner.to_owned(),
            workspace_id: id.to_owned(),
            ttl,
            expires_at: Timestamp::now().plus(ttl),
        };
        let stored = lease.clone();
        self.store().write(move |tx| tx.put_lease(&stored)).await?;
        Ok(LeaseView {
            lease_id: lease.id,
            expires_at: lease.expires_at,
        })
    }

    /// Renews a lease by its TTL from now.
    pub async fn renew_lease(
        &self,
        owner: &str,
        id: &str,
        lease_id: &str,
    ) -> Result<LeaseView, Error> {
        self.owned_workspace(owner, id).await?;
        let (owner, id, lease_id) = (owner.to_owned(), id.to_owned(), lease_id.to_owned());
        let lease = self
            .store()
            .write(move |tx| {
                let mut lease = tx
                    .leases(&owner, &id)?
                    .into_iter()
                    .find(|l| l.id == lease_id)
                    .ok_or(Error::LeaseNotFound(lease_id))?;
                lease.expires_at = Timestamp::now().plus(lease.ttl);
                tx.put_lease(&lease)?;
                Ok::<_, Error>(lease)
            })
            .await?;
        Ok(LeaseView {
            lease_id: lease.id,
            expires_at: lease.expires_at,
        })
    }

    /// Ends a lease.
    pub async fn delete_lease(&self, owner: &str, id: &str, lease_id: &str) -> Result<(), Error> {
        self.owned_workspace(owner, id).await?;
        let (who, workspace, lease) = (owner.to_owned(), id.to_owned(), lease_id.to_owned());
        if !self
            .store()
            .write(move |tx| tx.delete_lease(&who, &workspace, &lease))
            .await?
        {
            return Err(Error::LeaseNotFound(lease_id.to_owned()));
        }
        Ok(())
    }

    /// Links a workspace to a domain with a worktree key; its containers join that key's view.
    pub async fn link(
        &self,
        owner: &str,
        domain_id: &DomainId,
        workspace_id: &str,
        worktree_key: String,
    ) -> Result<LinkView, Error> {
        let domain = self.domain(owner, domain_id)?;
        let workspace = self.owned_workspace(owner, workspace_id).await?;
        if let Some(other) = workspace.domain_id.as_ref().filter(|d| *d != domain_id) {
            return Err(Error::WorkspaceLinkedElsewhere {
                workspace: workspace_id.to_owned(),
                domain: other.to_string(),
            });
        }
        if domain.state != DomainState::Active {
            return Err(Error::DomainNotActive {
                id: domain_id.to_string(),
                state: domain.state,
            });
        }
        let reconciler = self.require_runtime()?.clone();
        let (who, linked, domain, key) = (
            owner.to_owned(),
            workspace_id.to_owned(),
            domain_id.clone(),
            worktree_key.clone(),
        );
        let (before, after) = self
            .store()
            .write(move |tx| {
                let (workspace_id, domain_id) = (&linked, &domain);
                let mut w = tx
                    .workspace(&who, workspace_id)?
                    .ok_or_else(|| Error::WorkspaceNotFound(workspace_id.to_owned()))?;
                if let Some(other) = w.domain_id.as_ref().filter(|d| *d != domain_id) {
                    // Linked elsewhere by a concurrent call since the check above.
                    return Err(Error::WorkspaceLinkedElsewhere {
                        workspace: workspace_id.to_owned(),
                        domain: other.to_string(),
                    });
                }
                // The domain's state is read again here, so a fence that lands meanwhile holds.
                let state = tx.domain(domain_id)?.map(|d| d.state);
                if let Some(state) = state.filter(|s| *s != DomainState::Active) {
                    return Err(Error::DomainNotActive {
                        id: domain_id.to_string(),
                        state,
                    });
                }
                let before = w.clone();
                w.domain_id = Some(domain_id.clone());
                w.worktree_key = Some(key);
                tx.put_workspace(&w)?;
                Ok((before, w))
            })
            .await?;
        if before.worktree_key.is_some() && before.worktree_key != after.worktree_key {
            reconciler.detach_workspace(&before).await;
            if let (Some(domain), Some(old)) = (&before.domain_id, &before.worktree_key) {
                reconciler.prune_view(domain, old).await;
            }
        }
        let attached = reconciler.attach_workspace(&after).await;
        let (who, leased) = (owner.to_owned(), workspace_id.to_owned());
        let leases = self
            .store()
            .read(move |tx| tx.leases(&who, &leased))
            .await?
            .into_iter()
            .filter(|l| l.expires_at > Timestamp::now())
            .count();
        reconciler.enqueue_domain(domain_id);
        tracing::info!(workspace = workspace_id, domain = %domain_id, "workspace linked");
        Ok(LinkView {
            workspace_id: workspace_id.to_owned(),
            worktree_key,
            attached_executors: (attached + leases) as i64,
        })
    }

    async fn workspace_view(&self, w: Workspace) -> Result<WorkspaceView, Error> {
        let now = Timestamp::now();
        let consent = consent_label(&w.owner, &w.id);
        let (mut executors, not_attached) = match self.reconciler() {
            Some(reconciler) => {
                let found = reconciler.executor_candidates(&w).await;
                let executors: Vec<Executor> = found
                    .executors
                    .into_iter()
                    .map(|c| Executor::Container {
                        id: c.id,
                        name: c.name,
                        running: c.running,
                    })
                    .collect();
                // One reason whatever the cause, so the answer says nothing of a container
                // that is not the caller's: not whether it exists, nor whose it is.
                let not_attached = found
                    .not_attached
                    .into_iter()
                    .map(|name| NotAttachedView {
                        reason: format!(
                            "no container {name} carrying the label {consent} exists (an instance of berth's is never an executor); create it with --label {consent}"
                        ),
                        container: name,
                    })
                    .collect();
                (executors, not_attached)
            }
            None => (Vec::new(), Vec::new()),
        };
        let (owner, id) = (w.owner.clone(), w.id.clone());
        let leases = self.store().read(move |tx| tx.leases(&owner, &id)).await?;
        executors.extend(leases.into_iter().filter(|l| l.expires_at > now).map(|l| {
            Executor::Lease {
                lease_id: l.id,
                expires_at: l.expires_at,
            }
        }));
        Ok(WorkspaceView {
            workspace_id: w.id,
            containers: w.containers,
            selector: w.selector.map(|label| SelectorView { label }),
            resource_domain_id: w.domain_id,
            worktree_key: w.worktree_key,
            executors,
            consent_label: consent,
            not_attached,
        })
    }
}
