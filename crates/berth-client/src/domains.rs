//! The daemon itself, the web page's sign-in and resource domains.

use crate::types::*;
use crate::{Client, ClientError, domain_path};

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
}
