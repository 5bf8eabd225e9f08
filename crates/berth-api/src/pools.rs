//! Pools and their leases on the wire: instances made, started and ready-checked ahead of time
//! from a template or a snapshot, handed out one per lease.

use serde::{Deserialize, Serialize};

use crate::ids::{DomainId, PoolLeaseId, SnapshotId};
use crate::instances::{EndpointView, InstanceView};
use crate::time::Timestamp;

/// The pattern of a pool's name: a name a person types, unique in its domain.
pub const POOL_NAME_PATTERN: &str = r"^[a-z][a-z0-9-]{0,30}$";
/// What a malformed pool name is refused with.
pub const POOL_NAME_EXPECTED: &str =
    "must be 1 to 31 lower-case letters, digits or '-', starting with a letter";
/// The most instances a pool keeps waiting.
pub const MAX_POOL_SIZE: i64 = 32;
/// A lease's time to live when the request names none, in seconds.
pub const DEFAULT_LEASE_TTL_SECONDS: i64 = 600;
/// The longest time to live a lease may ask for, in seconds (a day).
pub const MAX_LEASE_TTL_SECONDS: i64 = 86_400;
/// The longest a lease taken on an empty pool waits for an instance, in seconds.
pub const MAX_LEASE_WAIT_SECONDS: i64 = 300;

/// True when `name` is a valid pool name.
pub fn is_pool_name(name: &str) -> bool {
    static NAME: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| crate::decode::pattern(POOL_NAME_PATTERN));
    NAME.is_match(name)
}

/// Where a pool's instances get their data: exactly one of `template` (`true`: the domain's
/// template for the spec, made on first need) and `snapshotId` (a ready snapshot of the
/// domain, each instance an overlay on its layers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PoolSource {
    /// `true`: the spec's template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<bool>,
    /// A ready snapshot of the domain.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = r"^snp:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_id: Option<SnapshotId>,
}

/// Where a pool's instances get their data, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolFrom {
    /// The spec's template in the domain.
    Template,
    /// A ready snapshot of the domain.
    Snapshot(SnapshotId),
}

impl PoolFrom {
    /// On the wire.
    pub fn source(&self) -> PoolSource {
        match self {
            Self::Template => PoolSource {
                template: Some(true),
                snapshot_id: None,
            },
            Self::Snapshot(id) => PoolSource {
                template: None,
                snapshot_id: Some(id.clone()),
            },
        }
    }
}

/// `POST /v1/resource-domains/{id}/pools`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(example = json!({"name": "pg", "spec": crate::schema::example_spec(), "from": {"template": true}, "size": 4})))]
#[serde(rename_all = "camelCase")]
pub struct PoolRequest {
    /// Unique in the domain.
    #[cfg_attr(feature = "openapi", schema(pattern = r"^[a-z][a-z0-9-]{0,30}$"))]
    pub name: String,
    /// A resource-instance spec, as `up` takes it: every instance of the pool runs it.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::SpecSchema))]
    pub spec: serde_json::Value,
    /// Where its instances' data comes from.
    pub from: PoolSource,
    /// How many instances it keeps made, started and ready, waiting for a lease (1 to 32).
    pub size: i64,
}

/// A pool on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PoolView {
    /// Its name, unique in the domain.
    pub name: String,
    /// The domain it belongs to.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^rdm:[0-9a-f-]{36}$"))]
    pub resource_domain_id: DomainId,
    /// `sha256:<hex>` of the spec its instances run.
    pub spec_digest: String,
    /// Where its instances' data comes from.
    pub from: PoolSource,
    /// How many instances it keeps waiting.
    pub size: i64,
    /// Waiting instances that are ready: a lease takes one of them at once.
    pub ready: i64,
    /// Waiting instances still being made or started.
    pub making: i64,
    /// Instances held by leases.
    pub leased: i64,
    /// True once a delete was asked: it makes nothing more, and goes when its instances have.
    pub deleting: bool,
    /// Why its last instance could not be made, when it could not; null otherwise.
    pub message: Option<String>,
    /// When it was made.
    pub created_at: Timestamp,
}

/// A domain's pools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolList {
    /// By name.
    pub items: Vec<PoolView>,
}

/// `POST .../pools/{name}/leases`; every field may be left out (an empty body is one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PoolLeaseRequest {
    /// When the pool has no ready instance: `true` (the default) waits for the next one, up to
    /// `waitSeconds`; `false` answers at once with `ResourcePoolEmptyError` (409).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
    /// The longest to wait on an empty pool, 1 to 300 seconds (default 300); then
    /// `ResourcePoolEmptyError`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_seconds: Option<i64>,
    /// How long the lease lives unless renewed, 1 to 86400 seconds (default 600). A reset or
    /// a renew starts it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<i64>,
}

/// A lease on the wire: the instance it holds and the host endpoints to connect to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PoolLeaseView {
    /// `pls:<uuid>`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = r"^pls:[0-9a-f-]{36}$"))]
    pub lease_id: PoolLeaseId,
    /// The domain of its pool.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^rdm:[0-9a-f-]{36}$"))]
    pub resource_domain_id: DomainId,
    /// The pool it came from.
    pub pool: String,
    /// The instance it holds now (a reset gives it another).
    pub instance: InstanceView,
    /// The instance's host endpoints: they stay the same across resets.
    pub endpoints: Vec<EndpointView>,
    /// Its time to live in seconds.
    pub ttl_seconds: i64,
    /// When it is released unless renewed (or reset) before.
    pub expires_at: Timestamp,
    /// When it was taken.
    pub created_at: Timestamp,
    /// How many times it was reset.
    pub resets: i64,
}

/// A pool's leases the caller's key holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PoolLeaseList {
    /// Oldest first.
    pub items: Vec<PoolLeaseView>,
}
