//! The daemon itself, the web page's sign-in, resource domains and their worktrees.

use reqwest::Method;

use crate::types::*;
use crate::{Client, ClientError, domain_path, seg};

impl Client {
    // Meta.

    /// `GET /healthz` (needs no key).
    pub async fn healthz(&self) -> Result<Health, ClientError> {
        self.get("/healthz").await
    }

    /// `GET /v1/openapi.json`: the daemon's OpenAPI 3.1 document.
    pub async fn openapi(&self) -> Result<serde_json::Value, ClientError> {
        self.get("/v1/openapi.json").await
    }

    // The web page.

    /// `POST /v1/ui/sign-in-links`: a link to the web page with a code good once, for two
    /// minutes (a service key only).
    pub async fn sign_in_link(&self) -> Result<SignInLink, ClientError> {
        self.post("/v1/ui/sign-in-links", None).await
    }

    /// `POST /v1/ui/sessions`: trades a sign-in link's code for a session token (needs no key;
    /// the code is spent by the first try, good or not).
    pub async fn create_session(&self, code: &str) -> Result<Session, ClientError> {
        let request = SessionRequest {
            code: code.to_owned(),
        };
        self.post("/v1/ui/sessions", Self::body(&request)).await
    }

    /// `DELETE /v1/ui/sessions/current`: signs the calling session out (its token as the key).
    pub async fn sign_out(&self) -> Result<(), ClientError> {
        let req = self
            .request(Method::DELETE, "/v1/ui/sessions/current")
            .timeout(self.timeout);
        self.send(req).await?;
        Ok(())
    }

    // Resource domains.

    /// `POST /v1/resource-domains`.
    pub async fn create_domain(&self, name: &str) -> Result<DomainView, ClientError> {
        let request = CreateDomainRequest {
            name: name.to_owned(),
        };
        self.post("/v1/resource-domains", Self::body(&request))
            .await
    }

    /// `GET /v1/resource-domains`: the caller's domains, oldest first.
    pub async fn domains(&self) -> Result<Vec<DomainView>, ClientError> {
        let list: DomainList = self.get("/v1/resource-domains").await?;
        Ok(list.items)
    }

    /// `GET /v1/resource-domains/{id}`.
    pub async fn domain(&self, domain: &DomainId) -> Result<DomainView, ClientError> {
        self.get(&domain_path(domain)).await
    }

    /// `GET .../summary`: everything the web page shows of the domain in one answer.
    pub async fn summary(&self, domain: &DomainId) -> Result<DomainSummary, ClientError> {
        self.get(&format!("{}/summary", domain_path(domain))).await
    }

    /// `POST .../fence`: the domain admits nothing new; running instances keep running.
    pub async fn fence(&self, domain: &DomainId) -> Result<DomainView, ClientError> {
        self.post(&format!("{}/fence", domain_path(domain)), None)
            .await
    }

    /// `POST .../unfence`.
    pub async fn unfence(&self, domain: &DomainId) -> Result<DomainView, ClientError> {
        self.post(&format!("{}/unfence", domain_path(domain)), None)
            .await
    }

    /// `POST .../archive`: every instance archived, every volume kept.
    pub async fn archive_domain(
        &self,
        domain: &DomainId,
    ) -> Result<ArchiveDomainResponse, ClientError> {
        self.post(&format!("{}/archive", domain_path(domain)), None)
            .await
    }

    /// `PUT .../worktrees/{worktreeKey}`: where a worktree lives and its branch (the CLI's
    /// `up` tells it, so that the daemon notices the worktree end).
    pub async fn put_worktree(
        &self,
        domain: &DomainId,
        worktree_key: &str,
        request: &WorktreeRequest,
    ) -> Result<WorktreeView, ClientError> {
        let path = format!("{}/worktrees/{}", domain_path(domain), seg(worktree_key));
        self.with_body(reqwest::Method::PUT, &path, Self::body(request))
            .await
    }

    /// `GET .../worktrees`: the domain's worktree records, by key.
    pub async fn worktrees(&self, domain: &DomainId) -> Result<Vec<WorktreeView>, ClientError> {
        let list: WorktreeList = self
            .get(&format!("{}/worktrees", domain_path(domain)))
            .await?;
        Ok(list.items)
    }

    /// `GET .../disk`: where the domain's disk goes, measured now.
    pub async fn disk_usage(&self, domain: &DomainId) -> Result<DiskUsage, ClientError> {
        self.get(&format!("{}/disk", domain_path(domain))).await
    }

    /// `POST .../prune`: gives back disk by the retention (or, with `dry_run`, says what it
    /// would).
    pub async fn prune(
        &self,
        domain: &DomainId,
        request: &PruneRequest,
    ) -> Result<PruneReport, ClientError> {
        self.post(
            &format!("{}/prune", domain_path(domain)),
            Self::body(request),
        )
        .await
    }
}
