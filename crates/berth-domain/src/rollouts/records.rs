//! Rollout and image-release records, the reports a rollout takes, and the registry reference
//! helpers they are built with.

pub use super::wire::*;
pub use berth_api::rollouts::*;

use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::evidence::{ImageEvidence, MismatchReason, VerificationStatus};
use crate::ids::InstanceId;
use crate::image::PinnedImage;
use crate::model::InstanceState;
use crate::time::Timestamp;

/// What berth answers for a manifest media type it could not read from the registry.
pub const UNKNOWN_MEDIA_TYPE_FALLBACK: &str = "application/vnd.oci.image.manifest.v1+json";

/// The media types a registry root descriptor may have.
pub const MEDIA_TYPES: [&str; 4] = [
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// What the reconciler reports of an instance, to be recorded on its newest rollout
/// ([`Tx::report`]).
#[derive(Debug, Clone, Copy)]
pub enum Report<'a> {
    /// It begins to act on the desired state it read: make the image ready, create and start
    /// a container.
    Acting,
    /// The image evidence it gathered (or the image failure it met).
    Evidence(&'a ImageEvidence),
    /// The instance state it recorded.
    State(&'a InstanceState),
}

impl Report<'_> {
    /// Whether the report can change a rollout: a pending evidence, or a state other than
    /// running, failed or exited, says nothing of one.
    pub fn says_something(&self) -> bool {
        match self {
            Self::Acting => true,
            Self::Evidence(e) => e.verification_status != VerificationStatus::Pending,
            Self::State(state) => matches!(
                state,
                InstanceState::Running { .. }
                    | InstanceState::Failed { .. }
                    | InstanceState::Exited { .. }
            ),
        }
    }
}

/// A rollout's status and counts after a report ([`Rollout::after`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Reported<'a> {
    /// Where it stands.
    pub status: RolloutStatus,
    /// Why, when it is not succeeding.
    pub reason: Option<MismatchReason>,
    /// Containers observed.
    pub observed: i64,
    /// Containers ready.
    pub healthy: i64,
    /// Containers verified.
    pub verified: i64,
    /// Containers failed.
    pub failed: i64,
    /// The evidence to keep with it, when the report brought one.
    pub evidence: Option<&'a ImageEvidence>,
}

/// A rollout as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    /// `rol:<uuid>`.
    pub id: String,
    /// The instance it changes.
    pub instance_id: InstanceId,
    /// Its number among the instance's rollouts, from 1, never reused.
    pub generation: i64,
    /// Why it was made.
    pub mode: RolloutMode,
    /// The rollout a rollback replaces.
    pub rollback_of: Option<String>,
    /// The image release it deploys.
    pub release_id: String,
    /// The pinned reference, as the spec writes it.
    pub image: String,
    /// The spec that asked for it.
    pub spec_digest: String,
    /// When the request wrote it.
    pub created_at: Timestamp,
    /// Where it stands.
    pub status: RolloutStatus,
    /// Why it is not (yet) succeeded, when a reason is known.
    pub mismatch_reason: Option<MismatchReason>,
    /// Containers observed for it (0 or 1).
    pub observed: i64,
    /// Containers observed ready (0 or 1).
    pub healthy: i64,
    /// Containers whose image evidence is verified (0 or 1).
    pub verified: i64,
    /// Containers that failed (0 or 1).
    pub failed: i64,
    /// The reporter session of the last report; none before the first.
    pub reporter_session: Option<String>,
    /// How many reports were recorded.
    pub report_sequence: i64,
    /// When the last report was recorded.
    pub reported_at: Option<Timestamp>,
    /// The reason the reporter gave in its last report (`stale-rollout-report` for a report
    /// that came after a newer rollout).
    pub reported_reason: Option<MismatchReason>,
    /// The image evidence of the last report.
    pub evidence: Option<ImageEvidence>,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// The generation of the instance's desired state that wrote it (or asked for it again):
    /// a report from a reconcile that read an older one is stale.
    pub instance_generation: i64,
}

/// The registry host the contract names for a reference: Docker Hub when it names none.
pub fn registry_host(image: &PinnedImage) -> String {
    image.registry().unwrap_or("docker.io").to_owned()
}

/// The repository path inside the registry, as the registry names it.
pub fn registry_repository(image: &PinnedImage) -> String {
    match image.registry() {
        None if !image.repository().contains('/') => format!("library/{}", image.repository()),
        _ => image.repository().to_owned(),
    }
}

/// `registryHost/repository@digest`.
pub fn digest_pinned_reference(image: &PinnedImage) -> String {
    format!(
        "{}/{}@{}",
        registry_host(image),
        registry_repository(image),
        image.digest()
    )
}

/// The image release id of a pinned image for an instance: stable, derived from both.
pub fn release_id(instance: &InstanceId, image: &PinnedImage) -> String {
    let mut hash = Sha256::new();
    hash.update(instance.as_str().as_bytes());
    hash.update(b"\n");
    hash.update(digest_pinned_reference(image).as_bytes());
    format!("irl:{}", &hex::encode(hash.finalize())[..32])
}

/// An image release as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageRelease {
    /// `irl:<32 hex>`.
    pub id: String,
    /// The registry host.
    pub registry_host: String,
    /// The repository.
    pub repository: String,
    /// The digest of the registry's root descriptor.
    pub root_digest: String,
    /// The root descriptor's media type, when the registry was asked.
    pub media_type: Option<String>,
    /// The tags the release was seen under, in the order first seen.
    pub tags: Vec<String>,
    /// When berth first observed it.
    pub first_observed_at: Timestamp,
    /// When berth last observed it.
    pub last_observed_at: Timestamp,
    /// How often berth observed it.
    pub observation_count: i64,
    /// When a container of it first ran verified.
    pub accepted_at: Option<Timestamp>,
    /// For an index: the manifest it lists for the engine's platform, as berth read it.
    pub platform_manifest_digest: Option<String>,
    /// That manifest's config digest (the image id of the platform's image).
    pub platform_config_digest: Option<String>,
}

/// The one reporter of a berth daemon: it observes every rollout of its instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// Stable for the store's life: written once, at its first open.
    pub id: String,
    /// New with every open of the store, that is with every start of the daemon.
    pub session_id: String,
}

/// How long after a rollout is made its required replica may go unobserved by every
/// reporter before the rollout is answered `failed` with `required-replica-missing`: longer
/// than the default pull timeout (10 minutes) and a ready timeout together.
pub const REPORT_DEADLINE: Duration = Duration::from_secs(15 * 60);

/// What berth's answers about rollouts need to know of the daemon.
#[derive(Debug, Clone)]
pub struct Site {
    /// The reporter.
    pub reporter: Reporter,
    /// This host's name.
    pub node_name: String,
    /// See [`REPORT_DEADLINE`].
    pub report_deadline: Duration,
}

impl Site {
    /// The site of this daemon.
    pub fn new(reporter: Reporter) -> Self {
        Self {
            reporter,
            node_name: node_name(),
            report_deadline: REPORT_DEADLINE,
        }
    }

    pub(super) fn scope(&self) -> TargetScope {
        TargetScope {
            target_cluster_ids: vec![self.reporter.id.clone()],
            target_node_names: vec![self.node_name.clone()],
            replicas_per_node: 1,
            required_replica_count: 1,
        }
    }
}

/// This host's name, as the kernel has it.
pub fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Whether two references name the same image (by repository and digest).
pub fn same_image(a: &str, b: &str) -> bool {
    match (PinnedImage::parse(a), PinnedImage::parse(b)) {
        (Ok(a), Ok(b)) => a.repo_digest() == b.repo_digest(),
        _ => a == b,
    }
}
