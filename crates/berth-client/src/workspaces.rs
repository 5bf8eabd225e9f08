//! Workspaces, their leases and links.

use reqwest::Method;

use crate::types::*;
use crate::{Client, ClientError, domain_path, seg, workspace_path};

impl Client {
    /// `GET /v1/whoami`: the key's id and the consent label a workspace's containers carry.
    pub async fn whoami(&self) -> Result<Whoami, ClientError> {
        self.get("/v1/whoami").await
    }

    /// `PUT /v1/workspaces/{id}`: registers its executors (idempotent; its link is kept).
    pub async fn put_workspace(
        &self,
        workspace: &str,
        request: &WorkspaceRequest,
    ) -> Result<WorkspaceView, ClientError> {
        self.with_body(Method::PUT, &workspace_path(workspace), Self::body(request))
            .await
    }

    /// `GET /v1/workspaces/{id}`, with its live executors.
    pub async fn workspace(&self, workspace: &str) -> Result<WorkspaceView, ClientError> {
        self.get(&workspace_path(workspace)).await
    }

    /// `GET /v1/workspaces`: the caller's.
    pub async fn workspaces(&self) -> Result<Vec<WorkspaceView>, ClientError> {
        let list: WorkspaceList = self.get("/v1/workspaces").await?;
        Ok(list.items)
    }

    /// `DELETE /v1/workspaces/{id}`: detaches its executors, removes its link and leases.
    pub async fn delete_workspace(&self, workspace: &str) -> Result<(), ClientError> {
        let _: serde_json::Value = self
            .with_body(Method::DELETE, &workspace_path(workspace), None)
            .await?;
        Ok(())
    }

    /// `POST /v1/workspaces/{id}/leases` for `ttl_seconds` (1 to 86400).
    pub async fn create_lease(
        &self,
        workspace: &str,
        ttl_seconds: u64,
    ) -> Result<LeaseView, ClientError> {
        self.post(
            &format!("{}/leases", workspace_path(workspace)),
            Self::body(&LeaseRequest { ttl_seconds }),
        )
        .await
    }

    /// `POST /v1/workspaces/{id}/leases/{leaseId}/renew`.
    pub async fn renew_lease(
        &self,
        workspace: &str,
        lease: &str,
    ) -> Result<LeaseView, ClientError> {
        self.post(
            &format!("{}/leases/{}/renew", workspace_path(workspace), seg(lease)),
            None,
        )
        .await
    }

    /// `DELETE /v1/workspaces/{id}/leases/{leaseId}`.
    pub async fn delete_lease(&self, workspace: &str, lease: &str) -> Result<(), ClientError> {
        let _: serde_json::Value = self
            .with_body(
                Method::DELETE,
                &format!("{}/leases/{}", workspace_path(workspace), seg(lease)),
                None,
            )
            .await?;
        Ok(())
    }

    /// `PUT /v1/resource-domains/{id}/workspace-links/{workspaceId}`.
    pub async fn link(
        &self,
        domain: &DomainId,
        workspace: &str,
        worktree_key: &str,
    ) -> Result<LinkView, ClientError> {
        self.with_body(
            Method::PUT,
            &format!("{}/workspace-links/{}", domain_path(domain), seg(workspace)),
            Self::body(&LinkRequest {
                worktree_key: worktree_key.to_owned(),
            }),
        )
        .await
    }
}
