//! Resource instances: up, list, stop, archive; their endpoints and volumes; the daemon.

use serde::Serialize;

use crate::types::*;
use crate::{Client, ClientError, domain_path, instance_path};

impl Client {
    // Resource instances.

    /// `POST .../instances/{key}/up`: answers at once with the instance as stored.
    pub async fn up<S: Serialize + ?Sized>(
        &self,
        domain: &DomainId,
        key: &str,
        spec: &S,
        cause: UpCause,
    ) -> Result<InstanceView, ClientError> {
        let request = UpRequest {
            spec: serde_json::to_value(spec).unwrap_or(serde_json::Value::Null),
            cause,
            template: false,
        };
        self.up_request(domain, key, &request).await
    }

    /// `POST .../instances/{key}/preflight`: what an `up` with `request` would do and whether
    /// it would succeed; nothing is written.
    pub async fn preflight(
        &self,
        domain: &DomainId,
        key: &str,
        request: &UpRequest,
    ) -> Result<PreflightReport, ClientError> {
        self.post(
            &instance_path(domain, key, "/preflight"),
            Self::body(request),
        )
        .await
    }

    /// `POST .../instances/{key}/up` with the whole request (`template` among it).
    pub async fn up_request(
        &self,
        domain: &DomainId,
        key: &str,
        request: &UpRequest,
    ) -> Result<InstanceView, ClientError> {
        self.post(&instance_path(domain, key, "/up"), Self::body(request))
            .await
    }

    /// `GET .../instances`: the live instances, or with `archived` only the archived ones.
    pub async fn instances(
        &self,
        domain: &DomainId,
        archived: bool,
    ) -> Result<Vec<InstanceView>, ClientError> {
        let query = if archived { "?archived=true" } else { "" };
        let list: InstanceList = self
            .get(&format!("{}/instances{query}", domain_path(domain)))
            .await?;
        Ok(list.items)
    }

    /// `GET .../instances/{key}`.
    pub async fn instance(
        &self,
        domain: &DomainId,
        key: &str,
    ) -> Result<InstanceView, ClientError> {
        self.get(&instance_path(domain, key, "")).await
    }

    /// `POST .../instances/{key}/stop`: a person's stop, by `by`.
    pub async fn stop(
        &self,
        domain: &DomainId,
        key: &str,
        by: &str,
    ) -> Result<InstanceView, ClientError> {
        self.post(
            &instance_path(domain, key, "/stop"),
            Self::body(&StopRequest { by: by.to_owned() }),
        )
        .await
    }

    /// `POST .../instances/{key}/start`: a person's start, which lifts a person's stop and runs
    /// the instance again with the spec it has.
    pub async fn start(&self, domain: &DomainId, key: &str) -> Result<InstanceView, ClientError> {
        self.post(&instance_path(domain, key, "/start"), None).await
    }

    /// `POST .../instances/{key}/archive`: the container goes, the volumes are kept and measured.
    pub async fn archive(
        &self,
        domain: &DomainId,
        key: &str,
    ) -> Result<ArchiveInstanceResponse, ClientError> {
        self.post(&instance_path(domain, key, "/archive"), None)
            .await
    }

    /// `GET .../instances/{key}/endpoints`.
    pub async fn endpoints(
        &self,
        domain: &DomainId,
        key: &str,
    ) -> Result<Vec<EndpointView>, ClientError> {
        let list: EndpointList = self.get(&instance_path(domain, key, "/endpoints")).await?;
        Ok(list.items)
    }

    /// `GET .../instances/{key}/volumes`: every volume the instance keeps, mounted or not.
    pub async fn volumes(
        &self,
        domain: &DomainId,
        key: &str,
    ) -> Result<Vec<KeptVolume>, ClientError> {
        let list: VolumeList = self.get(&instance_path(domain, key, "/volumes")).await?;
        Ok(list.items)
    }

    /// `GET /v1/daemon`: the daemon's store and the other stores it shares the engine with.
    pub async fn daemon(&self) -> Result<DaemonView, ClientError> {
        self.get("/v1/daemon").await
    }
}
