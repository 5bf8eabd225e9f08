//! Pool records: a pool keeps `size` instances of one spec made from a template or a snapshot,
//! started and ready, waiting for a lease; a lease holds one of them for the service key that
//! took it until it is released, by that key or by its time to live running out.
//!
//! A pool's instances are ordinary berth instances (reconciled, held, idle-checked and given
//! host endpoints as any other), recorded as the pool's in a table of their own: the web page
//! and `GET .../instances` show a waiting one only as part of its pool, and a leased one as an
//! instance.

use crate::ids::{DomainId, InstanceId, PoolLeaseId};
use crate::spec::Spec;
use crate::time::Timestamp;
pub use berth_api::pools::{
    DEFAULT_LEASE_TTL_SECONDS, MAX_LEASE_TTL_SECONDS, MAX_LEASE_WAIT_SECONDS, MAX_POOL_SIZE,
    POOL_NAME_EXPECTED, PoolFrom, PoolLeaseList, PoolLeaseRequest, PoolLeaseView, PoolList,
    PoolRequest, PoolSource, PoolView, is_pool_name,
};

/// A pool as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pool {
    pub domain_id: DomainId,
    pub name: String,
    /// The spec every instance of the pool runs.
    pub spec: Spec,
    pub from: PoolFrom,
    pub size: i64,
    /// Set by a delete: nothing more is made, and the pool goes once its instances have.
    pub deleting: bool,
    /// Why its last instance could not be made.
    pub message: Option<String>,
    pub created_at: Timestamp,
}

/// Where one of a pool's instances stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Made (or being made) and not leased.
    Waiting,
    /// A lease holds it.
    Leased,
    /// Its lease ended, or its pool went: its container and volumes are to be removed.
    Released,
    /// Its container and volumes are gone; the archived instance is its record.
    Removed,
}

impl MemberState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Leased => "leased",
            Self::Released => "released",
            Self::Removed => "removed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "waiting" => Some(Self::Waiting),
            "leased" => Some(Self::Leased),
            "released" => Some(Self::Released),
            "removed" => Some(Self::Removed),
            _ => None,
        }
    }
}

/// One of a pool's instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolMember {
    pub instance_id: InstanceId,
    pub domain_id: DomainId,
    pub pool: String,
    pub state: MemberState,
    pub created_at: Timestamp,
}

/// A lease as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolLease {
    pub id: PoolLeaseId,
    pub domain_id: DomainId,
    pub pool: String,
    /// Hex sha256 of the service key that took it: only that key renews, resets or releases it.
    pub key: String,
    /// The instance it holds now.
    pub instance_id: InstanceId,
    pub ttl_ms: i64,
    pub expires_at: Timestamp,
    pub created_at: Timestamp,
    pub resets: i64,
}

impl PoolLease {
    /// Its expiry `ttl_ms` from `now`.
    pub fn renewed(&self, now: Timestamp) -> Timestamp {
        Timestamp::from_millis(now.millis().saturating_add(self.ttl_ms))
    }
}

/// The key of a pool's new instance: the pool's name and a random suffix, so that no two of
/// its instances (nor their host ports' lineages) are ever the same.
pub fn member_key(pool: &str) -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("pool-{pool}-{}", &suffix[..12])
}
