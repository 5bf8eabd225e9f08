//! Workspaces: a developer's environments that reach instances. Their executors are containers
//! (named, or matched by a label selector) and leases that host tools keep renewing. A workspace
//! links to one domain with one worktree key; its containers then join that key's network view
//! and resolve the aliases of the key's instances and of the domain's shared ones.
//!
//! Workspace ids are per key: key A's `ide-1` and key B's `ide-1` are two workspaces, and
//! nothing B is answered says whether A has one. A host container is an executor only with its
//! owner's consent: the label `berth.workspace=<keyId>/<workspaceId>`, set by whoever created
//! it, naming the key's public id and the workspace. Naming a container, or selecting it by a
//! label, is not enough; a container consents to one workspace, so it is in one view at most.

use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use serde_json::Value;

use crate::decode::{Problems, pattern};
use crate::error::Error;
use crate::ids::DomainId;
use crate::model::{
    DomainState, Executor, Lease, LeaseView, LinkView, NotAttachedView, SelectorView, Workspace,
    WorkspaceView,
};
use crate::runtime::Labels;
use crate::service::Berth;
use crate::spec::{WORKTREE_KEY_EXPECTED, is_worktree_key};
use crate::time::Timestamp;

/// What a malformed workspace id is refused with.
pub const WORKSPACE_ID_EXPECTED: &str =
    "must be 1 to 128 letters, digits, '.', '_', ':', '@' or '-', starting with a letter or digit";
/// The most containers one workspace names.
pub const MAX_CONTAINERS: usize = 64;
/// The longest lease.
pub const MAX_LEASE_SECONDS: i64 = 86_400;

/// The label by which a container consents to be one workspace's executor:
/// `berth.workspace=<keyId>/<workspaceId>`.
pub const LABEL_WORKSPACE: &str = "berth.workspace";

/// A key's public id: the first 12 hex digits of sha256 over a string that only this use
/// makes, of the key's hash. It names the key in consent labels and is no secret: it does
/// not reveal the key, nor the hash that owns the key's domains.
pub fn key_id(owner: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("berth key id v1\n{owner}").as_bytes());
    hex::encode(&digest[..6])
}

/// The value of [`LABEL_WORKSPACE`] that consents to `owner`'s workspace `id`.
pub fn consent_value(owner: &str, id: &str) -> String {
    format!("{}/{id}", key_id(owner))
}

/// The whole consent label, `berth.workspace=<keyId>/<id>`, as `docker run --label` takes it.
pub fn consent_label(owner: &str, id: &str) -> String {
    format!("{LABEL_WORKSPACE}={}", consent_value(owner, id))
}

/// Whether a container with `labels` consents to be an executor of `owner`'s workspace `id`.
pub fn consents(labels: &Labels, owner: &str, id: &str) -> bool {
    labels.get(LABEL_WORKSPACE).map(String::as_str) == Some(consent_value(owner, id).as_str())
}

static WORKSPACE_ID: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"));
static CONTAINER_REF: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"));
static LABEL: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}=[^\x00-\x1f\x7f]{0,256}$"));

/// True when `id` is a valid workspace id.
pub fn is_workspace_id(id: &str) -> bool {
    WORKSPACE_ID.is_match(id)
}

/// A decoded `PUT /v1/workspaces/{id}` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceRequest {
    /// Container names or ids.
    pub containers: Vec<String>,
    /// A label `k=v`.
    pub selector: Option<String>,
}

/// Decodes a workspace registration.
pub fn decode_workspace(value: &Value, p: &mut Problems) -> Option<WorkspaceRequest> {
    let mut fields = p.object(value, "body")?;
    let containers = fields.required(p, "containers").and_then(|v| {
        let items = p.array(v, "body.containers")?;
        if items.len() > MAX_CONTAINERS {
            p.push(
                "body.containers",
                &format!("must have at most {MAX_CONTAINERS} items"),
            );
            return None;
        }
        let names: Vec<Option<String>> = items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                p.matching(
                    item,
                    &format!("body.containers[{i}]"),
                    &CONTAINER_REF,
                    "must be a container name or id (letters, digits, '_', '.', '-')",
                )
            })
            .collect();
        names.into_iter().collect::<Option<Vec<_>>>()
    });
    let selector = fields.required(p, "selector").and_then(|v| match v {
        Value::Null => Some(None),
        v => {
            let mut sel = p.object(v, "body.selector")?;
            let label = sel.required(p, "label").and_then(|l| {
                p.matching(
                    l,
                    "body.selector.label",
                    &LABEL,
                    "must be a label `key=value` (a key of letters, digits, '.', '_', '/', '-'; a value of printable characters)",
                )
            });
            sel.finish(p);
            label.map(Some)
        }
    });
    fields.finish(p);
    Some(WorkspaceRequest {
        containers: containers?,
        selector: selector?,
    })
}

/// Decodes a lease request: `{"ttlSeconds": 1..86400}`.
pub fn decode_lease(value: &Value, p: &mut Problems) -> Option<Duration> {
    let mut fields = p.object(value, "body")?;
    let ttl = fields
        .required(p, "ttlSeconds")
        .and_then(|v| p.integer(v, "body.ttlSeconds", 1, MAX_LEASE_SECONDS));
    fields.finish(p);
    Some(Duration::from_secs(ttl? as u64))
}

/// Decodes a link request: `{"worktreeKey": ...}`.
pub fn decode_link(value: &Value, p: &mut Problems) -> Option<String> {
    let mut fields = p.object(value, "body")?;
    let key = fields.required(p, "worktreeKey").and_then(|v| {
        let s = p.string(v, "body.worktreeKey")?;
        if is_worktree_key(s) {
            Some(s.to_owned())
        } else {
            p.push("body.worktreeKey", WORKTREE_KEY_EXPECTED);
            None
        }
    });
    fields.finish(p);
    key
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode<T>(f: fn(&Value, &mut Problems) -> Option<T>, v: Value) -> Result<T, String> {
        let mut p = Problems::default();
        let out = f(&v, &mut p);
        p.finish(out).map_err(|p| p.joined())
    }

    #[test]
    fn workspace_bodies_are_decoded_strictly() {
        let ok = decode(decode_workspace, json!({"containers": ["dev-1", "0123abcd"], "selector": {"label": "com.example.ws=a b"}})).unwrap();
        assert_eq!(ok.selector.as_deref(), Some("com.example.ws=a b"));
        for (body, expected) in [
            (
                json!({"containers": ["bad name"], "selector": null}),
                "body.containers[0] must be a container name",
            ),
            (
                json!({"containers": [], "selector": {"label": "novalue"}}),
                "body.selector.label must be a label",
            ),
            (
                json!({"containers": [], "selector": {"label": "=x"}}),
                "body.selector.label must be a label",
            ),
            (
                json!({"containers": [], "selector": {"label": "k=v", "x": 1}}),
                "body.selector.x is not an allowed key",
            ),
            (json!({"containers": []}), "body.selector is missing"),
            (
                json!({"containers": (0..65).map(|i| format!("c{i}")).collect::<Vec<_>>(), "selector": null}),
                "at most 64",
            ),
        ] {
            let err = decode(decode_workspace, body).unwrap_err();
            assert!(
                err.contains(expected),
                "{err:?} should contain {expected:?}"
            );
        }
    }

    #[test]
    fn lease_ttls_and_link_keys_are_bounded() {
        assert_eq!(
            decode(decode_lease, json!({"ttlSeconds": 30})).unwrap(),
            Duration::from_secs(30)
        );
        for bad in [
            json!({"ttlSeconds": 0}),
            json!({"ttlSeconds": 86401}),
            json!({"ttlSeconds": "5"}),
        ] {
            assert!(
                decode(decode_lease, bad)
                    .unwrap_err()
                    .contains("body.ttlSeconds must be an integer between 1 and 86400")
            );
        }
        assert_eq!(
            decode(decode_link, json!({"worktreeKey": "feature:x"})).unwrap(),
            "feature:x"
        );
        assert!(
            decode(decode_link, json!({"worktreeKey": "-x"}))
                .unwrap_err()
                .contains("body.worktreeKey must be 1 to 128")
        );
        assert!(is_workspace_id("ws_1.a:b@c-d") && !is_workspace_id("") && !is_workspace_id("a/b"));
    }

    #[test]
    fn consent_names_one_key_and_one_workspace() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let id = key_id(&a);
        assert_eq!(id.len(), 12);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(
            !a.contains(&id),
            "the public id is not a piece of the key's hash"
        );
        assert_ne!(id, key_id(&b));
        assert_eq!(
            consent_label(&a, "ide-1"),
            format!("berth.workspace={id}/ide-1")
        );
        let labels = |v: &str| Labels::from([(LABEL_WORKSPACE.to_owned(), v.to_owned())]);
        assert!(consents(&labels(&format!("{id}/ide-1")), &a, "ide-1"));
        for other in [
            format!("{}/ide-1", key_id(&b)),
            format!("{id}/ide-2"),
            format!("{id}/ide-1 "),
            "ide-1".to_owned(),
            String::new(),
        ] {
            assert!(!consents(&labels(&other), &a, "ide-1"), "{other:?}");
        }
        assert!(!consents(&Labels::new(), &a, "ide-1"));
    }
}
