//! The web page's answers on the wire: its session, a domain's summary and its volume usage.

use serde::{Deserialize, Serialize};

use crate::domains::DomainView;
use crate::evidence::VerificationStatus;
use crate::instances::{EndpointView, InstanceView};
use crate::snapshots::BranchOrigin;
use crate::time::Timestamp;
use crate::workspaces::WorkspaceView;

/// A web page's session. Its `Debug` leaves the token out.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// Send it as `Authorization: Bearer <token>`: it acts as the service key that asked for the
    /// sign-in link, for that key's domains only.
    pub token: String,
    /// When it stops working.
    pub expires_at: Timestamp,
}

/// Everything the web page shows of a domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct DomainSummary {
    /// The domain.
    pub domain: DomainView,
    /// Its instances that are not archived, by key.
    pub instances: Vec<InstanceSummary>,
    /// The caller's workspaces linked to it.
    pub workspaces: Vec<WorkspaceView>,
}

/// One instance, with what the list view shows of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct InstanceSummary {
    /// Exactly the view `GET .../instances/{key}` answers.
    pub instance: InstanceView,
    /// Bumped by every accepted change of what is desired.
    pub generation: i64,
    /// The generation the last finished reconcile acted on.
    pub observed_generation: i64,
    /// Restarts since it last ran steadily.
    pub restart_count: u32,
    /// The image it runs and what proves it.
    pub image: ImageSummary,
    /// Its host endpoints (empty until it first started, or when berth runs no runtime).
    pub endpoints: Vec<EndpointView>,
    /// A connect string for each host endpoint, in the same order (the http crate's `connect_string`).
    pub connect: Vec<ConnectString>,
    /// Its last failure, kept after it recovers; null when it never failed.
    pub last_failure: Option<LastFailure>,
    /// Where its volumes were branched from; null for an instance no branch made.
    pub branched_from: Option<BranchOrigin>,
}

/// How to reach a host endpoint from a client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ConnectString {
    /// The port in the container.
    pub port: u16,
    /// `postgres://USER:PASSWORD@127.0.0.1:PORT/DATABASE` for a 5432, `redis://...` for a
    /// 6379 and so on, `host:port` otherwise. The user and database come from the spec's env
    /// (`POSTGRES_USER`, `POSTGRES_DB`, ..., else the postgres image's defaults); what neither
    /// says is an upper-case placeholder, and a password is always the placeholder `PASSWORD`,
    /// never its value: this is what a screen shows.
    pub url: String,
    /// The same string with the password's value from the spec's env, for a Copy button to put
    /// on the clipboard, never on a screen. Only for a key that may exec in the domain (which
    /// could read the container's environment anyway), and only where `url` has the placeholder
    /// and the env says the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full: Option<String>,
}

/// An instance's image, in short.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ImageSummary {
    /// The spec's image reference.
    pub reference: String,
    /// The digest it pins; null when the reference is malformed.
    pub digest: Option<String>,
    /// `pending`, `verified`, `missing` or `mismatched`.
    pub verification_status: VerificationStatus,
    /// Why it is not verified; null when verified or pending.
    pub message: Option<String>,
}

/// A domain's volume sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VolumeUsage {
    /// When the engine measured them (they are reused for 10 seconds).
    pub measured_at: Timestamp,
    /// Each instance that is not archived, by key, with its volumes.
    pub instances: Vec<InstanceVolumeUsage>,
}

/// One instance's volumes and their sizes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct InstanceVolumeUsage {
    /// The instance's key.
    pub key: String,
    /// Its volumes.
    pub volumes: Vec<VolumeSize>,
}

/// A volume's size, as the engine reports it (`docker system df -v`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct VolumeSize {
    /// The volume's name in the instance.
    pub name: String,
    /// The engine volume.
    pub docker_name: String,
    /// Its size in bytes; null when the engine did not measure it (no runtime, not made yet,
    /// or the engine refused its disk-usage report).
    pub bytes: Option<u64>,
}

/// An instance's last failure, kept after it recovers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LastFailure {
    /// What went wrong, as the failed state said it.
    pub message: String,
    /// When it failed.
    pub at: Timestamp,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// `POST /v1/ui/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionRequest {
    /// The code from a sign-in link's fragment.
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 128))]
    pub code: String,
}
