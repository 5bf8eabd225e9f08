//! Snapshots, branches and restores.

use reqwest::Method;
use serde::Serialize;

use crate::types::*;
use crate::{Client, ClientError, domain_path, instance_path, query_value};

impl Client {
    /// `POST .../instances/{key}/snapshots`: answers at once with the snapshot `copying`.
    pub async fn snapshot(
        &self,
        domain: &DomainId,
        key: &str,
        name: &str,
    ) -> Result<SnapshotView, ClientError> {
        self.post(
            &instance_path(domain, key, "/snapshots"),
            Self::body(&SnapshotRequest {
                name: name.to_owned(),
            }),
        )
        .await
    }

    /// `GET .../snapshots`, of one instance key when given: newest first.
    pub async fn snapshots(
        &self,
        domain: &DomainId,
        instance_key: Option<&str>,
    ) -> Result<Vec<SnapshotView>, ClientError> {
        let query = instance_key
            .map(|k| format!("?instanceKey={}", query_value(k)))
            .unwrap_or_default();
        let list: SnapshotList = self
            .get(&format!("{}/snapshots{query}", domain_path(domain)))
            .await?;
        Ok(list.items)
    }

    /// `GET .../snapshots/{snapshotId}`.
    pub async fn snapshot_by_id(
        &self,
        domain: &DomainId,
        id: &SnapshotId,
    ) -> Result<SnapshotView, ClientError> {
        self.get(&format!("{}/snapshots/{id}", domain_path(domain)))
            .await
    }

    /// `DELETE .../snapshots/{snapshotId}`: the snapshot and its storage go, but for the layers
    /// others stand on (answered in `kept`).
    pub async fn delete_snapshot(
        &self,
        domain: &DomainId,
        id: &SnapshotId,
    ) -> Result<SnapshotDeleted, ClientError> {
        let path = format!("{}/snapshots/{id}", domain_path(domain));
        self.with_body(Method::DELETE, &path, None).await
    }

    /// `GET .../templates`: the domain's templates, newest first.
    pub async fn templates(&self, domain: &DomainId) -> Result<Vec<TemplateView>, ClientError> {
        let list: TemplateList = self
            .get(&format!("{}/templates", domain_path(domain)))
            .await?;
        Ok(list.items)
    }

    /// `DELETE .../templates/{templateId}`: the template and its volumes go, unless volumes
    /// stand on it.
    pub async fn delete_template(&self, domain: &DomainId, id: &str) -> Result<(), ClientError> {
        let path = format!("{}/templates/{id}", domain_path(domain));
        let req = self.request(Method::DELETE, &path).timeout(self.timeout);
        self.send(req).await?;
        Ok(())
    }

    /// `POST .../instances/{key}/branch`: a new instance filled from `from`, then run as `up`
    /// would; answers at once.
    pub async fn branch<S: Serialize + ?Sized>(
        &self,
        domain: &DomainId,
        key: &str,
        from: &BranchFrom,
        spec: &S,
        cause: UpCause,
    ) -> Result<InstanceView, ClientError> {
        let from = match from {
            BranchFrom::Instance(k) => BranchSource {
                instance_key: Some(k.clone()),
                snapshot_id: None,
            },
            BranchFrom::Snapshot(s) => BranchSource {
                instance_key: None,
                snapshot_id: Some(s.clone()),
            },
        };
        let request = BranchRequest {
            from,
            spec: Some(serde_json::to_value(spec).unwrap_or(serde_json::Value::Null)),
            worktree_key: None,
            cause,
        };
        self.post(&instance_path(domain, key, "/branch"), Self::body(&request))
            .await
    }

    /// `POST .../instances/{key}/restore`: a snapshot's contents back into the instance; what
    /// they replace is kept as the answer's `beforeRestore` snapshot.
    pub async fn restore(
        &self,
        domain: &DomainId,
        key: &str,
        snapshot_id: &SnapshotId,
    ) -> Result<RestoreResponse, ClientError> {
        self.post(
            &instance_path(domain, key, "/restore"),
            Self::body(&RestoreRequest {
                snapshot_id: Some(snapshot_id.clone()),
                instance_key: None,
            }),
        )
        .await
    }

    /// `POST .../instances/{key}/restore` from another instance of the domain: a snapshot of
    /// `source` is taken first (the answer's `source`, `copying`), and the restore is made from
    /// it once it is ready; what the restore replaces is the answer's `beforeRestore`.
    pub async fn restore_from_instance(
        &self,
        domain: &DomainId,
        key: &str,
        source: &str,
    ) -> Result<RestoreResponse, ClientError> {
        self.post(
            &instance_path(domain, key, "/restore"),
            Self::body(&RestoreRequest {
                snapshot_id: None,
                instance_key: Some(source.to_owned()),
            }),
        )
        .await
    }
}
