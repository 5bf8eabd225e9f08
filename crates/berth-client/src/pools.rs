//! Pools and their leases.

use std::time::Duration;

use reqwest::Method;

use crate::types::*;
use crate::{Client, ClientError, domain_path, seg};

impl Client {
    /// `POST .../pools`: the pool, its instances made in the background.
    pub async fn create_pool(
        &self,
        domain: &DomainId,
        request: &PoolRequest,
    ) -> Result<PoolView, ClientError> {
        self.post(
            &format!("{}/pools", domain_path(domain)),
            Self::body(request),
        )
        .await
    }

    /// `GET .../pools`: by name.
    pub async fn pools(&self, domain: &DomainId) -> Result<Vec<PoolView>, ClientError> {
        let list: PoolList = self.get(&format!("{}/pools", domain_path(domain))).await?;
        Ok(list.items)
    }

    /// `GET .../pools/{name}`.
    pub async fn pool(&self, domain: &DomainId, name: &str) -> Result<PoolView, ClientError> {
        self.get(&format!("{}/pools/{}", domain_path(domain), seg(name)))
            .await
    }

    /// `DELETE .../pools/{name}`: answers once its instances are gone (or two minutes on).
    pub async fn delete_pool(&self, domain: &DomainId, name: &str) -> Result<(), ClientError> {
        let path = format!("{}/pools/{}", domain_path(domain), seg(name));
        let req = self
            .request(Method::DELETE, &path)
            .timeout(self.timeout.max(Duration::from_secs(150)));
        self.send(req).await?;
        Ok(())
    }

    /// `POST .../pools/{name}/leases`: a ready instance of the pool and its host endpoints,
    /// held by this client's key. The request waits as `request` says, and this call with it.
    pub async fn take_pool_lease(
        &self,
        domain: &DomainId,
        pool: &str,
        request: &PoolLeaseRequest,
    ) -> Result<PoolLeaseView, ClientError> {
        let path = format!("{}/pools/{}/leases", domain_path(domain), seg(pool));
        self.lease_call(&path, request).await
    }

    /// `GET .../pools/{name}/leases`: the leases this client's key holds on the pool.
    pub async fn pool_leases(
        &self,
        domain: &DomainId,
        pool: &str,
    ) -> Result<Vec<PoolLeaseView>, ClientError> {
        let list: PoolLeaseList = self
            .get(&format!(
                "{}/pools/{}/leases",
                domain_path(domain),
                seg(pool)
            ))
            .await?;
        Ok(list.items)
    }

    /// `POST .../leases/{leaseId}/reset`: a fresh instance behind the same endpoints.
    pub async fn reset_pool_lease(
        &self,
        domain: &DomainId,
        lease: &PoolLeaseId,
        request: &PoolLeaseRequest,
    ) -> Result<PoolLeaseView, ClientError> {
        let path = format!("{}/leases/{lease}/reset", domain_path(domain));
        self.lease_call(&path, request).await
    }

    /// `POST .../leases/{leaseId}/renew`: its time to live starts again.
    pub async fn renew_pool_lease(
        &self,
        domain: &DomainId,
        lease: &PoolLeaseId,
    ) -> Result<PoolLeaseView, ClientError> {
        self.post(
            &format!("{}/leases/{lease}/renew", domain_path(domain)),
            None,
        )
        .await
    }

    /// `DELETE .../leases/{leaseId}`: answers once its instance and volumes are gone.
    pub async fn release_pool_lease(
        &self,
        domain: &DomainId,
        lease: &PoolLeaseId,
    ) -> Result<(), ClientError> {
        let path = format!("{}/leases/{lease}", domain_path(domain));
        let req = self
            .request(Method::DELETE, &path)
            .timeout(self.timeout.max(Duration::from_secs(90)));
        self.send(req).await?;
        Ok(())
    }

    async fn lease_call(
        &self,
        path: &str,
        request: &PoolLeaseRequest,
    ) -> Result<PoolLeaseView, ClientError> {
        let waits = if request.wait == Some(false) {
            0
        } else {
            request
                .wait_seconds
                .unwrap_or(berth_api::pools::MAX_LEASE_WAIT_SECONDS)
                .unsigned_abs()
        };
        let body = serde_json::to_string(request).unwrap_or_else(|_| "{}".to_owned());
        let req = self
            .request(Method::POST, path)
            .timeout(self.timeout + Duration::from_secs(waits))
            .header("content-type", "application/json")
            .body(body);
        self.json(format!("POST {path}"), req).await
    }
}
