//! Image rollouts: every change of an instance's image (its first `up`, an upgrade, a rollback)
//! is a rollout, numbered per instance from 1. A request writes the rollout (its plan) in the
//! same transaction as the change; the reconciler records what it observes of it (its status
//! and its runtime evidence). See `docs/images.md` for the mapping onto one engine and the
//! status transitions.

use std::time::Duration;

use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use utoipa::ToSchema;

use crate::evidence::{ImageEvidence, MismatchReason, VerificationStatus};
use crate::ids::InstanceId;
use crate::image::PinnedImage;
use crate::model::{Instance, InstanceState};
use crate::runtime::RegistryManifest;
use crate::store::{Reporter, StoreError, Tx};
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

/// Why a rollout was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutMode {
    /// A person's change (an `up` with cause `person`).
    Promotion,
    /// An `up` with cause `use` (a launch or a wake).
    Automatic,
    /// A rollback.
    Rollback,
}

impl RolloutMode {
    fn as_str(self) -> &'static str {
        match self {
            Self::Promotion => "promotion",
            Self::Automatic => "automatic",
            Self::Rollback => "rollback",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "promotion" => Some(Self::Promotion),
            "automatic" => Some(Self::Automatic),
            "rollback" => Some(Self::Rollback),
            _ => None,
        }
    }
}

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RolloutStatus {
    /// Written by the request; the reconciler has not acted on it yet.
    Pending,
    /// A promotion or automatic rollout the reconciler acts on: it makes the image ready
    /// (pulls it by digest), creates and starts the container, until the evidence's verdict.
    Deploying,
    /// The container runs the verified image, and is not ready yet.
    Verifying,
    /// A promotion or automatic rollout whose container is verified and ready.
    Succeeded,
    /// The image could not be run, the container failed or exits before it is ready, or a
    /// newer rollout superseded this one before it succeeded.
    Failed,
    /// The container runs, or the registry or the engine holds, something other than the
    /// pinned image.
    Mismatched,
    /// `deploying`, for a rollback.
    RollingBack,
    /// A rollback whose container is verified and ready.
    RolledBack,
}

impl RolloutStatus {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Deploying => "deploying",
            Self::Verifying => "verifying",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Mismatched => "mismatched",
            Self::RollingBack => "rolling-back",
            Self::RolledBack => "rolled-back",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Deploying,
            Self::Verifying,
            Self::Succeeded,
            Self::Failed,
            Self::Mismatched,
            Self::RollingBack,
            Self::RolledBack,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }

    /// `succeeded` and `rolled-back` never change again.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::RolledBack)
    }

    /// Not yet at a verdict: `pending`, `deploying`, `rolling-back` or `verifying`.
    pub fn in_progress(self) -> bool {
        matches!(
            self,
            Self::Pending | Self::Deploying | Self::RollingBack | Self::Verifying
        )
    }

    /// Its wire name.
    pub fn name(self) -> &'static str {
        self.as_str()
    }
}

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
    fn says_something(&self) -> bool {
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

const ROLLOUT_COLUMNS: &str = "id, instance_id, generation, mode, rollback_of, release_id, image,
    spec_digest, created_at, status, mismatch_reason, observed, healthy, verified, failed,
    reporter_session, report_sequence, reported_at, evidence, updated_at, instance_generation,
    reported_reason";

fn corrupt(what: &str) -> rusqlite::Error {
    rusqlite::Error::InvalidColumnType(0, what.to_owned(), rusqlite::types::Type::Text)
}

fn reason_of(text: Option<String>, column: &str) -> rusqlite::Result<Option<MismatchReason>> {
    text.map(|r| serde_json::from_value(serde_json::Value::String(r)).map_err(|_| corrupt(column)))
        .transpose()
}

fn rollout_from_row(row: &Row<'_>) -> rusqlite::Result<Rollout> {
    let mode: String = row.get(3)?;
    let status: String = row.get(9)?;
    let evidence: Option<String> = row.get(18)?;
    Ok(Rollout {
        id: row.get(0)?,
        instance_id: InstanceId::parse(&row.get::<_, String>(1)?)
            .ok_or_else(|| corrupt("instance_id"))?,
        generation: row.get(2)?,
        mode: RolloutMode::parse(&mode).ok_or_else(|| corrupt("mode"))?,
        rollback_of: row.get(4)?,
        release_id: row.get(5)?,
        image: row.get(6)?,
        spec_digest: row.get(7)?,
        created_at: Timestamp::from_millis(row.get(8)?),
        status: RolloutStatus::parse(&status).ok_or_else(|| corrupt("status"))?,
        mismatch_reason: reason_of(row.get(10)?, "mismatch_reason")?,
        observed: row.get(11)?,
        healthy: row.get(12)?,
        verified: row.get(13)?,
        failed: row.get(14)?,
        reporter_session: row.get(15)?,
        report_sequence: row.get(16)?,
        reported_at: row.get::<_, Option<i64>>(17)?.map(Timestamp::from_millis),
        evidence: evidence
            .map(|e| serde_json::from_str(&e).map_err(|_| corrupt("evidence")))
            .transpose()?,
        updated_at: Timestamp::from_millis(row.get(19)?),
        instance_generation: row.get(20)?,
        reported_reason: reason_of(row.get(21)?, "reported_reason")?,
    })
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

fn release_from_row(row: &Row<'_>) -> rusqlite::Result<ImageRelease> {
    let tags: String = row.get(5)?;
    Ok(ImageRelease {
        id: row.get(0)?,
        registry_host: row.get(1)?,
        repository: row.get(2)?,
        root_digest: row.get(3)?,
        media_type: row.get(4)?,
        tags: serde_json::from_str(&tags).map_err(|_| corrupt("tags"))?,
        first_observed_at: Timestamp::from_millis(row.get(6)?),
        last_observed_at: Timestamp::from_millis(row.get(7)?),
        observation_count: row.get(8)?,
        accepted_at: row.get::<_, Option<i64>>(9)?.map(Timestamp::from_millis),
        platform_manifest_digest: row.get(10)?,
        platform_config_digest: row.get(11)?,
    })
}

const RELEASE_COLUMNS: &str = "id, registry_host, repository, root_digest, media_type, tags,
    first_observed_at, last_observed_at, observation_count, accepted_at,
    platform_manifest_digest, platform_config_digest";

fn same_image(a: &str, b: &str) -> bool {
    match (PinnedImage::parse(a), PinnedImage::parse(b)) {
        (Ok(a), Ok(b)) => a.repo_digest() == b.repo_digest(),
        _ => a == b,
    }
}

impl Tx<'_> {
    /// An instance's rollouts, newest first.
    pub fn rollouts(&self, id: &InstanceId) -> Result<Vec<Rollout>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE instance_id = ?1 ORDER BY generation DESC"
        ))?;
        let rows = stmt.query_map([id.as_str()], rollout_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// An instance's newest rollout.
    pub fn current_rollout(&self, id: &InstanceId) -> Result<Option<Rollout>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE instance_id = ?1
             ORDER BY generation DESC LIMIT 1"
        ))?;
        Ok(stmt.query_row([id.as_str()], rollout_from_row).optional()?)
    }

    /// The generation of what is desired of an instance, as this transaction has it.
    fn desired_generation(&self, id: &InstanceId) -> Result<i64, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT generation FROM instances WHERE id = ?1",
                [id.as_str()],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0))
    }

    /// Writes a rollout of `after`'s image when it differs from `before`'s (always for a
    /// rollback); the rollout it supersedes, if still in progress, ends `failed`
    /// (`stale-rollout-report`). An up of the same image that asks again (another spec, or a
    /// failed instance retried) sets a `failed` or `mismatched` newest rollout back to
    /// `pending`: its next report decides.
    pub fn record_rollout(
        &self,
        before: Option<&Instance>,
        after: &Instance,
        mode: RolloutMode,
    ) -> Result<Option<Rollout>, StoreError> {
        let current = self.current_rollout(&after.id)?;
        let changed = match (before, &current) {
            (None, _) | (_, None) => true,
            (Some(b), Some(_)) => !same_image(b.spec.image.as_str(), after.spec.image.as_str()),
        };
        let generation = self.desired_generation(&after.id)?;
        let now = Timestamp::now();
        if !changed && mode != RolloutMode::Rollback {
            let asks_again = before.is_some_and(|b| {
                b.spec_digest != after.spec_digest
                    || (matches!(b.state, InstanceState::Failed { .. })
                        && matches!(after.state, InstanceState::NotStarted))
            });
            if let Some(current) = current
                && asks_again
                && matches!(
                    current.status,
                    RolloutStatus::Failed | RolloutStatus::Mismatched
                )
            {
                self.conn.execute(
                    "UPDATE rollouts SET status = 'pending', mismatch_reason = NULL, observed = 0,
                        healthy = 0, verified = 0, failed = 0, instance_generation = ?2,
                        updated_at = ?3
                     WHERE id = ?1",
                    params![current.id, generation, now.millis()],
                )?;
            }
            return Ok(None);
        }
        if let Some(current) = &current
            && current.status.in_progress()
        {
            self.conn.execute(
                "UPDATE rollouts SET status = 'failed', mismatch_reason = 'stale-rollout-report',
                    updated_at = ?2 WHERE id = ?1",
                params![current.id, now.millis()],
            )?;
        }
        let rollout = Rollout {
            id: format!("rol:{}", uuid::Uuid::new_v4().hyphenated()),
            instance_id: after.id.clone(),
            generation: current.as_ref().map_or(1, |c| c.generation + 1),
            mode,
            rollback_of: (mode == RolloutMode::Rollback)
                .then(|| current.as_ref().map(|c| c.id.clone()))
                .flatten(),
            release_id: release_id(&after.id, &after.spec.image),
            image: after.spec.image.as_str().to_owned(),
            spec_digest: after.spec_digest.clone(),
            created_at: now,
            status: RolloutStatus::Pending,
            mismatch_reason: None,
            observed: 0,
            healthy: 0,
            verified: 0,
            failed: 0,
            reporter_session: None,
            report_sequence: 0,
            reported_at: None,
            reported_reason: None,
            evidence: None,
            updated_at: now,
            instance_generation: generation,
        };
        self.conn.execute(
            "INSERT INTO rollouts (id, instance_id, generation, mode, rollback_of, release_id,
                image, spec_digest, created_at, status, updated_at, instance_generation)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'pending', ?9, ?10)",
            params![
                rollout.id,
                rollout.instance_id.as_str(),
                rollout.generation,
                rollout.mode.as_str(),
                rollout.rollback_of,
                rollout.release_id,
                rollout.image,
                rollout.spec_digest,
                now.millis(),
                generation,
            ],
        )?;
        Ok(Some(rollout))
    }

    /// Records what the reconciler observed of an instance, having read the desired state of
    /// `generation`, as the reporter's report on the instance's newest rollout (see
    /// [`Rollout::after`] for what each report changes). A report from a reconcile that read a
    /// desired state older than the newest rollout's is stale: it changes no rollout's verdict,
    /// and is recorded on the rollout it was about, as `stale-rollout-report`, unless that one
    /// has finished.
    pub fn report(
        &self,
        id: &InstanceId,
        generation: i64,
        report: Report<'_>,
        reporter: &Reporter,
    ) -> Result<(), StoreError> {
        if !report.says_something() {
            return Ok(());
        }
        let Some(newest) = self.current_rollout(id)? else {
            return Ok(());
        };
        let now = Timestamp::now().millis();
        if generation < newest.instance_generation {
            let about = self
                .rollouts(id)?
                .into_iter()
                .find(|r| r.instance_generation <= generation);
            if let Some(about) = about
                && !about.status.is_final()
            {
                tracing::debug!(instance = %id, rollout = %about.id, newest = %newest.id,
                    "a stale report on a superseded rollout");
                self.conn.execute(
                    "UPDATE rollouts SET reported_reason = 'stale-rollout-report',
                        reporter_session = ?2, report_sequence = report_sequence + 1,
                        reported_at = ?3
                     WHERE id = ?1",
                    params![about.id, reporter.session_id, now],
                )?;
                let counts = [about.observed, about.healthy, about.verified, about.failed];
                let stale = Some(MismatchReason::StaleRolloutReport);
                self.record_rollout_report(&about.id, id, reporter, counts, stale, now)?;
            }
            return Ok(());
        }
        let stored = match report {
            Report::State(InstanceState::Running { .. }) => self.evidence(id)?,
            _ => None,
        };
        let Some(next) = newest.after(report, stored.as_ref()) else {
            return Ok(());
        };
        self.conn.execute(
            "UPDATE rollouts SET status = ?2, mismatch_reason = ?3, observed = ?4, healthy = ?5,
                verified = ?6, failed = ?7, reporter_session = ?8,
                report_sequence = report_sequence + 1, reported_at = ?9, reported_reason = ?3,
                evidence = coalesce(?10, evidence), updated_at = ?9
             WHERE id = ?1",
            params![
                newest.id,
                next.status.as_str(),
                next.reason.map(MismatchReason::as_str),
                next.observed,
                next.healthy,
                next.verified,
                next.failed,
                reporter.session_id,
                now,
                next.evidence
                    .map(serde_json::to_string)
                    .transpose()
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            ],
        )?;
        let counts = [next.observed, next.healthy, next.verified, next.failed];
        self.record_rollout_report(&newest.id, id, reporter, counts, next.reason, now)
    }

    /// Records a report as the latest of its reporter and session on the rollout: the
    /// reporter of the instance's placement when the runtime gave one (the node whose engine
    /// the evidence was read through: reporter `<reporter id>/<placement>`, session
    /// `<session id>/<placement>`), else the daemon's own.
    fn record_rollout_report(
        &self,
        rollout: &str,
        instance: &InstanceId,
        reporter: &Reporter,
        [observed, healthy, verified, failed]: [i64; 4],
        reason: Option<MismatchReason>,
        now: i64,
    ) -> Result<(), StoreError> {
        let (reporter_id, session, node) = match self.placement(instance)? {
            Some(placed) => (
                format!("{}/{placed}", reporter.id),
                format!("{}/{placed}", reporter.session_id),
                placed,
            ),
            None => (
                reporter.id.clone(),
                reporter.session_id.clone(),
                String::new(),
            ),
        };
        // This reporter's reports of earlier sessions are superseded by this one.
        self.conn.execute(
            "UPDATE rollout_reports SET mismatch_reason = 'stale-rollout-report'
             WHERE rollout_id = ?1 AND reporter_id = ?2 AND reporter_session_id != ?3",
            params![rollout, reporter_id, session],
        )?;
        self.conn.execute(
            "INSERT INTO rollout_reports (rollout_id, reporter_id, reporter_session_id,
                node_name, report_sequence, reported_at, observed, healthy, verified, failed,
                mismatch_reason)
             VALUES (?1, ?2, ?3, ?4, 1, ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT (rollout_id, reporter_id, reporter_session_id) DO UPDATE SET
                report_sequence = report_sequence + 1, reported_at = ?5, observed = ?6,
                healthy = ?7, verified = ?8, failed = ?9, mismatch_reason = ?10",
            params![
                rollout,
                reporter_id,
                session,
                node,
                now,
                observed,
                healthy,
                verified,
                failed,
                reason.map(MismatchReason::as_str),
            ],
        )?;
        Ok(())
    }

    /// Every reporter's latest report on the rollout, one per reporter and session, oldest
    /// first.
    pub fn rollout_reports(&self, rollout: &str) -> Result<Vec<RolloutReport>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT reporter_id, reporter_session_id, node_name, report_sequence, reported_at,
                observed, healthy, verified, failed, mismatch_reason
             FROM rollout_reports WHERE rollout_id = ?1 ORDER BY reported_at, reporter_id",
        )?;
        let rows = stmt.query_map([rollout], |row| {
            Ok(RolloutReport {
                reporter_id: row.get(0)?,
                reporter_session_id: row.get(1)?,
                node_name: row.get(2)?,
                report_sequence: row.get(3)?,
                reported_at: Timestamp::from_millis(row.get(4)?),
                observed: row.get(5)?,
                healthy: row.get(6)?,
                verified: row.get(7)?,
                failed: row.get(8)?,
                mismatch_reason: reason_of(row.get(9)?, "mismatch_reason")?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records that berth observed the instance's image in the registry (through the engine):
    /// the release is written, or its tags, last observation and count move. `manifest` is what
    /// the registry holds under the digest, when it was read this time.
    pub fn observe_release(
        &self,
        instance: &Instance,
        manifest: Option<&RegistryManifest>,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let image = &instance.spec.image;
        let id = release_id(&instance.id, image);
        let existing = self.image_release(&instance.id, &id)?;
        let media_type = manifest
            .and_then(|m| m.media_type.as_deref())
            .filter(|m| MEDIA_TYPES.contains(m));
        let platform = manifest.and_then(|m| m.platform_manifest_digest.as_deref());
        let config = manifest.and_then(|m| m.platform_config_digest.as_deref());
        match existing {
            None => {
                let tags: Vec<&str> = image.tag().into_iter().collect();
                self.conn.execute(
                    "INSERT INTO image_releases (instance_id, id, registry_host, repository,
                        root_digest, media_type, tags, first_observed_at, last_observed_at,
                        observation_count, platform_manifest_digest, platform_config_digest)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, 1, ?9, ?10)",
                    params![
                        instance.id.as_str(),
                        id,
                        registry_host(image),
                        registry_repository(image),
                        image.digest().as_str(),
                        media_type,
                        serde_json::to_string(&tags)
                            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                        at.millis(),
                        platform,
                        config,
                    ],
                )?;
            }
            Some(mut release) => {
                if let Some(tag) = image.tag()
                    && !release.tags.iter().any(|t| t == tag)
                {
                    release.tags.push(tag.to_owned());
                }
                self.conn.execute(
                    "UPDATE image_releases SET tags = ?3, media_type = coalesce(?4, media_type),
                        last_observed_at = max(last_observed_at, ?5),
                        observation_count = observation_count + 1,
                        platform_manifest_digest = coalesce(?6, platform_manifest_digest),
                        platform_config_digest = coalesce(?7, platform_config_digest)
                     WHERE instance_id = ?1 AND id = ?2",
                    params![
                        instance.id.as_str(),
                        id,
                        serde_json::to_string(&release.tags)
                            .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                        media_type,
                        at.millis(),
                        platform,
                        config,
                    ],
                )?;
            }
        }
        Ok(())
    }

    /// Marks the instance's image release accepted: a container of it ran verified. Observes
    /// it first when berth never did (a container adopted after a restart).
    pub fn accept_release(&self, instance: &Instance, at: Timestamp) -> Result<(), StoreError> {
        let id = release_id(&instance.id, &instance.spec.image);
        if self.image_release(&instance.id, &id)?.is_none() {
            self.observe_release(instance, None, at)?;
        }
        self.conn.execute(
            "UPDATE image_releases SET accepted_at = ?3
             WHERE instance_id = ?1 AND id = ?2 AND accepted_at IS NULL",
            params![instance.id.as_str(), id, at.millis()],
        )?;
        Ok(())
    }

    /// One image release of an instance.
    pub fn image_release(
        &self,
        instance: &InstanceId,
        id: &str,
    ) -> Result<Option<ImageRelease>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {RELEASE_COLUMNS} FROM image_releases WHERE instance_id = ?1 AND id = ?2"
        ))?;
        Ok(stmt
            .query_row(params![instance.as_str(), id], release_from_row)
            .optional()?)
    }

    /// An instance's image releases, most recently observed first.
    pub fn image_releases(&self, instance: &InstanceId) -> Result<Vec<ImageRelease>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {RELEASE_COLUMNS} FROM image_releases WHERE instance_id = ?1
             ORDER BY last_observed_at DESC, first_observed_at DESC, id"
        ))?;
        let rows = stmt.query_map([instance.as_str()], release_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

// ---- the wire ----

/// Where a rollout is to run: on one engine, this daemon's one node, one container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetScope {
    /// This daemon's cluster id (its reporter id).
    pub target_cluster_ids: Vec<String>,
    /// This host's name.
    pub target_node_names: Vec<String>,
    /// 1.
    pub replicas_per_node: i64,
    /// 1.
    pub required_replica_count: i64,
}

/// A rollout's immutable desired state (`IImmutableImageDeploymentPlan`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePlan {
    /// Always `immutable-digest`.
    pub policy: String,
    /// The rollout's id.
    pub rollout_id: String,
    /// Its number among the instance's rollouts, from 1.
    pub rollout_generation: i64,
    /// The image release it deploys.
    pub release_id: String,
    /// The registry host.
    pub registry_host: String,
    /// The repository inside it.
    pub repository: String,
    /// The pinned digest.
    pub requested_digest: String,
    /// `registryHost/repository@requestedDigest`.
    pub digest_pinned_image_reference: String,
    /// The root descriptor's media type (see docs/images.md).
    pub manifest_media_type: String,
    /// When the request wrote it, in milliseconds since the epoch.
    pub created_at: i64,
    /// `promotion`, `automatic` or `rollback`.
    pub mode: RolloutMode,
    /// The rollout a rollback replaces; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollback_of_rollout_id: Option<String>,
    /// Where it runs.
    pub target_scope: TargetScope,
}

/// One reporter's latest report on a rollout (`IImageRolloutReporterStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReporterStatus {
    /// The daemon's stable reporter id.
    pub reporter_id: String,
    /// The daemon start that reported.
    pub reporter_session_id: String,
    /// The daemon's cluster id.
    pub cluster_id: String,
    /// This host's name.
    pub reporter_node_names: Vec<String>,
    /// The rollout.
    pub rollout_id: String,
    /// Its generation.
    pub rollout_generation: i64,
    /// How many reports were recorded for it.
    pub report_sequence: i64,
    /// When the last one was.
    pub reported_at: i64,
    /// 1.
    pub required_replica_count: i64,
    /// Containers observed.
    pub observed_replica_count: i64,
    /// Containers ready.
    pub healthy_replica_count: i64,
    /// Containers verified.
    pub verified_replica_count: i64,
    /// Containers failed.
    pub failed_replica_count: i64,
    /// Why it is not succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<MismatchReason>,
}

/// One reporter's latest report on a rollout in one of its sessions, as stored
/// ([`Tx::rollout_reports`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutReport {
    /// The daemon's reporter id, or `<that id>/<placement>` for an instance the runtime placed
    /// (the node whose engine its evidence was read through).
    pub reporter_id: String,
    /// The daemon start that reported (with the placement, for a placed node's reporter).
    pub reporter_session_id: String,
    /// The placement (the node) it reported for; empty for the daemon's own host.
    pub node_name: String,
    /// How many reports of this reporter and session were recorded.
    pub report_sequence: i64,
    /// When the last one was.
    pub reported_at: Timestamp,
    /// Containers observed.
    pub observed: i64,
    /// Containers ready.
    pub healthy: i64,
    /// Containers verified.
    pub verified: i64,
    /// Containers failed.
    pub failed: i64,
    /// The reason it gave.
    pub mismatch_reason: Option<MismatchReason>,
}

/// What a reporter can do (`ICoreflowRuntimeCapabilities`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReporterCapabilities {
    /// 1: it verifies digest-pinned images.
    pub immutable_image_deployment_version: i64,
}

/// A report's envelope (`IImmutableRolloutReportEnvelope`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutReportEnvelope {
    /// The rollout it reports on.
    pub rollout_id: String,
    /// Its generation.
    pub rollout_generation: i64,
    /// The reporter's session.
    pub reporter_session_id: String,
    /// How many reports of this reporter and session were recorded on the rollout.
    pub report_sequence: i64,
    /// What the reporter can do.
    pub reporter_capabilities: ReporterCapabilities,
    /// The node it reported for: the swarm node's id, or this host's name on one engine.
    pub reporter_node_ids: Vec<String>,
    /// The same node, by the name berth has for it.
    pub reporter_node_names: Vec<String>,
}

/// One stored report on a rollout (`GET .../rollouts/{rolloutId}/reports`): the latest of its
/// reporter and session, in its envelope, with what it observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutReportView {
    /// The reporter.
    pub reporter_id: String,
    /// When the last report of this reporter and session was recorded.
    pub reported_at: i64,
    /// The envelope.
    pub envelope: RolloutReportEnvelope,
    /// Containers observed.
    pub observed_replica_count: i64,
    /// Containers ready.
    pub healthy_replica_count: i64,
    /// Containers verified.
    pub verified_replica_count: i64,
    /// Containers failed.
    pub failed_replica_count: i64,
    /// The reason it gave; `stale-rollout-report` for a session a newer one of the same
    /// reporter superseded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<MismatchReason>,
}

impl RolloutReport {
    /// The report as the API shows it, on `rollout`.
    pub fn view(&self, rollout: &Rollout, site: &Site) -> RolloutReportView {
        let node = if self.node_name.is_empty() {
            site.node_name.clone()
        } else {
            self.node_name.clone()
        };
        RolloutReportView {
            reporter_id: self.reporter_id.clone(),
            reported_at: self.reported_at.millis(),
            envelope: RolloutReportEnvelope {
                rollout_id: rollout.id.clone(),
                rollout_generation: rollout.generation,
                reporter_session_id: self.reporter_session_id.clone(),
                report_sequence: self.report_sequence,
                reporter_capabilities: ReporterCapabilities {
                    immutable_image_deployment_version: 1,
                },
                reporter_node_ids: vec![node.clone()],
                reporter_node_names: vec![node],
            },
            observed_replica_count: self.observed,
            healthy_replica_count: self.healthy,
            verified_replica_count: self.verified,
            failed_replica_count: self.failed,
            mismatch_reason: self.mismatch_reason,
        }
    }
}

/// A rollout's aggregate status (`IImageRolloutStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatusView {
    /// The rollout.
    pub rollout_id: String,
    /// Its generation.
    pub rollout_generation: i64,
    /// The digest it pins.
    pub expected_digest: String,
    /// Where it stands.
    pub status: RolloutStatus,
    /// 1.
    pub required_replica_count: i64,
    /// Containers observed.
    pub observed_replica_count: i64,
    /// Containers ready.
    pub healthy_replica_count: i64,
    /// Containers verified.
    pub verified_replica_count: i64,
    /// Containers failed.
    pub failed_replica_count: i64,
    /// Why it is not succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<MismatchReason>,
    /// When it last changed.
    pub updated_at: i64,
    /// The daemon's latest report, once there is one.
    pub reporters: Vec<ReporterStatus>,
}

/// `GET .../rollouts/{rolloutId}`: the plan and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RolloutView {
    /// The rollout's desired state.
    pub plan: ImagePlan,
    /// Its status.
    pub status: RolloutStatusView,
}

/// A rollout's runtime evidence (`IRuntimeImageEvidence`): which fields are present depends on
/// `verificationStatus` (see docs/images.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeEvidence {
    /// `pending`, `verified`, `missing` or `mismatched`.
    pub verification_status: VerificationStatus,
    /// The rollout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<String>,
    /// Its generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_generation: Option<i64>,
    /// The digest the rollout pins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_digest: Option<String>,
    /// The instance's image reference, as its spec writes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_image_reference: Option<String>,
    /// The reference the container was created from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_image_reference: Option<String>,
    /// The digest that reference pins.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_reported_digest: Option<String>,
    /// The image id the container runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_image_id: Option<String>,
    /// The container's configured image reference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_config_image_reference: Option<String>,
    /// The digest the running image's repo digest for the repository names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved_digest: Option<String>,
    /// For a pin of an index: the manifest it lists for the engine's platform, read from the
    /// registry by digest, when its config is the image the container runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform_manifest_digest: Option<String>,
    /// The running image's `RepoDigests`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repo_digests: Option<Vec<String>>,
    /// `local-container-inspect` once berth inspected the container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_source: Option<String>,
    /// Why it is not verified; only for `missing` and `mismatched`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch_reason: Option<MismatchReason>,
    /// When it was gathered (for `pending`: when the rollout last changed).
    pub observed_at: i64,
}

/// The contract's name for an image release (`IImageRelease`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ImageReleaseView {
    /// `irl:<32 hex>`, stable for the instance and image.
    pub id: String,
    /// Its data.
    pub data: ImageReleaseData,
}

/// An image release's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageReleaseData {
    /// The instance (`rin:<uuid>`).
    pub service_id: String,
    /// `registryHost/repository`.
    pub image_id: String,
    /// The registry host.
    pub registry_host: String,
    /// The repository.
    pub repository: String,
    /// The registry's root descriptor digest: the pinned digest.
    pub registry_root_digest: String,
    /// `registryHost/repository@registryRootDigest`.
    pub digest_pinned_image_reference: String,
    /// The root descriptor's media type.
    pub manifest_media_type: String,
    /// The tags the spec wrote beside the digest.
    pub observed_tags: Vec<String>,
    /// When berth first observed it.
    pub first_observed_at: i64,
    /// When it last did.
    pub last_observed_at: i64,
    /// How many times.
    pub observation_count: i64,
    /// When a container of it first ran verified; absent until then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<i64>,
    /// When the newest rollout to it was written; absent if none was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_promoted_at: Option<i64>,
    /// How many rollouts deployed it; absent if none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion_count: Option<i64>,
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

    fn scope(&self) -> TargetScope {
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

impl Rollout {
    /// Its plan; `media_type` is its release's, when known.
    pub fn plan(&self, site: &Site, media_type: Option<&str>) -> ImagePlan {
        let image = PinnedImage::parse(&self.image).ok();
        ImagePlan {
            policy: "immutable-digest".to_owned(),
            rollout_id: self.id.clone(),
            rollout_generation: self.generation,
            release_id: self.release_id.clone(),
            registry_host: image.as_ref().map(registry_host).unwrap_or_default(),
            repository: image.as_ref().map(registry_repository).unwrap_or_default(),
            requested_digest: image
                .as_ref()
                .map(|i| i.digest().to_string())
                .unwrap_or_default(),
            digest_pinned_image_reference: image
                .as_ref()
                .map(digest_pinned_reference)
                .unwrap_or_default(),
            manifest_media_type: media_type.unwrap_or(UNKNOWN_MEDIA_TYPE_FALLBACK).to_owned(),
            created_at: self.created_at.millis(),
            mode: self.mode,
            rollback_of_rollout_id: self.rollback_of.clone(),
            target_scope: site.scope(),
        }
    }

    fn expected_digest(&self) -> String {
        PinnedImage::parse(&self.image)
            .map(|i| i.digest().to_string())
            .unwrap_or_default()
    }

    /// Its status: the aggregate, and the latest report of each reporter and session
    /// ([`Tx::rollout_reports`]), now.
    pub fn status(&self, site: &Site, reports: &[RolloutReport]) -> RolloutStatusView {
        self.status_at(site, reports, Timestamp::now())
    }

    /// Its status at `now`. The reporters are the newest session's report of each reporter
    /// (a reporter's older sessions were marked `stale-rollout-report` when a newer one
    /// reported, and are not aggregated); the daemon's own report, made before the runtime
    /// placed the instance, gives way to the placed node's reporter. A rollout still in
    /// progress whose required replica no reporter has observed [`Site::report_deadline`]
    /// after it was made is `failed` (`required-replica-missing`); a later report of the
    /// replica still counts.
    pub fn status_at(
        &self,
        site: &Site,
        reports: &[RolloutReport],
        now: Timestamp,
    ) -> RolloutStatusView {
        let mut view = self.status_of_row(site);
        let placed_prefix = format!("{}/", site.reporter.id);
        let placed = reports
            .iter()
            .any(|r| r.reporter_id.starts_with(&placed_prefix));
        let current: Vec<&RolloutReport> = reports
            .iter()
            .filter(|r| !(placed && r.reporter_id == site.reporter.id))
            .filter(|r| {
                !reports.iter().any(|other| {
                    other.reporter_id == r.reporter_id
                        && other.reporter_session_id != r.reporter_session_id
                        && other.reported_at > r.reported_at
                })
            })
            .collect();
        if !current.is_empty() {
            view.reporters = current
                .into_iter()
                .map(|r| ReporterStatus {
                    reporter_id: r.reporter_id.clone(),
                    reporter_session_id: r.reporter_session_id.clone(),
                    cluster_id: site.reporter.id.clone(),
                    reporter_node_names: vec![if r.node_name.is_empty() {
                        site.node_name.clone()
                    } else {
                        r.node_name.clone()
                    }],
                    rollout_id: self.id.clone(),
                    rollout_generation: self.generation,
                    report_sequence: r.report_sequence,
                    reported_at: r.reported_at.millis(),
                    required_replica_count: 1,
                    observed_replica_count: r.observed,
                    healthy_replica_count: r.healthy,
                    verified_replica_count: r.verified,
                    failed_replica_count: r.failed,
                    mismatch_reason: r.mismatch_reason,
                })
                .collect();
        }
        if self.status.in_progress()
            && self.observed == 0
            && now.since(self.created_at) >= site.report_deadline
        {
            view.status = RolloutStatus::Failed;
            view.mismatch_reason = Some(MismatchReason::RequiredReplicaMissing);
        }
        view
    }

    /// Its status as its row has it, with the daemon's one report once there is one (a
    /// rollout reported before reports were kept per reporter).
    fn status_of_row(&self, site: &Site) -> RolloutStatusView {
        let reporters = match (&self.reporter_session, self.reported_at) {
            (Some(session), Some(at)) => vec![ReporterStatus {
                reporter_id: site.reporter.id.clone(),
                reporter_session_id: session.clone(),
                cluster_id: site.reporter.id.clone(),
                reporter_node_names: vec![site.node_name.clone()],
                rollout_id: self.id.clone(),
                rollout_generation: self.generation,
                report_sequence: self.report_sequence,
                reported_at: at.millis(),
                required_replica_count: 1,
                observed_replica_count: self.observed,
                healthy_replica_count: self.healthy,
                verified_replica_count: self.verified,
                failed_replica_count: self.failed,
                mismatch_reason: self.reported_reason(),
            }],
            _ => Vec::new(),
        };
        RolloutStatusView {
            rollout_id: self.id.clone(),
            rollout_generation: self.generation,
            expected_digest: self.expected_digest(),
            status: self.status,
            required_replica_count: 1,
            observed_replica_count: self.observed,
            healthy_replica_count: self.healthy,
            verified_replica_count: self.verified,
            failed_replica_count: self.failed,
            mismatch_reason: self.mismatch_reason,
            updated_at: self.updated_at.millis(),
            reporters,
        }
    }

    /// The reason the reporter gave in its last report; a superseded rollout's
    /// `stale-rollout-report` is the aggregate's, and the reporter's only when a report of it
    /// came after the newer rollout.
    fn reported_reason(&self) -> Option<MismatchReason> {
        self.reported_reason
    }

    /// The in-progress status of its mode: `rolling-back` for a rollback, else `deploying`.
    fn acting_status(&self) -> RolloutStatus {
        if self.mode == RolloutMode::Rollback {
            RolloutStatus::RollingBack
        } else {
            RolloutStatus::Deploying
        }
    }

    /// Its status and counts after `report` of the newest rollout's own generation, or `None`
    /// when the report changes nothing. `stored` is the instance's stored image evidence, for a
    /// `running` report. The transitions are the table in docs/images.md:
    ///
    /// - acting: `pending` → `deploying` (`rolling-back` for a rollback);
    /// - verified evidence of its image: an unfinished rollout → `verifying` (observed and
    ///   verified 1), except that one `failed` with `replica-unhealthy` (a crash loop) stays so;
    /// - missing or mismatched evidence of its image: an unfinished rollout → `failed` or
    ///   `mismatched` with the evidence's reason;
    /// - running, with stored evidence verified for its image: `pending`, `deploying`,
    ///   `rolling-back`, `verifying`, or `failed` with `replica-unhealthy` → `succeeded`
    ///   (`rolled-back` for a rollback), every count 1 and failed 0;
    /// - failed: `pending`, `deploying`, `rolling-back` or `verifying` → `failed`
    ///   (`replica-failed`);
    /// - exited before ready: `pending`, `deploying`, `rolling-back` or `verifying` → `failed`
    ///   (`replica-unhealthy`).
    ///
    /// `succeeded` and `rolled-back` never change.
    pub fn after<'a>(
        &self,
        report: Report<'a>,
        stored: Option<&'a ImageEvidence>,
    ) -> Option<Reported<'a>> {
        if self.status.is_final() {
            return None;
        }
        let unhealthy = self.status == RolloutStatus::Failed
            && self.mismatch_reason == Some(MismatchReason::ReplicaUnhealthy);
        let keep = |status, reason| Reported {
            status,
            reason,
            observed: self.observed,
            healthy: self.healthy,
            verified: self.verified,
            failed: self.failed,
            evidence: None,
        };
        match report {
            Report::Acting => {
                (self.status == RolloutStatus::Pending).then(|| keep(self.acting_status(), None))
            }
            Report::Evidence(e) => {
                if !same_image(&self.image, &e.pinned_reference) {
                    return None;
                }
                let inspected = i64::from(e.container_id.is_some());
                let reported = match e.verification_status {
                    VerificationStatus::Pending => return None,
                    VerificationStatus::Verified if unhealthy => Reported {
                        observed: 1,
                        verified: 1,
                        ..keep(self.status, self.mismatch_reason)
                    },
                    VerificationStatus::Verified => Reported {
                        observed: 1,
                        healthy: 0,
                        verified: 1,
                        failed: 0,
                        ..keep(RolloutStatus::Verifying, None)
                    },
                    VerificationStatus::Missing => Reported {
                        observed: inspected,
                        healthy: 0,
                        verified: 0,
                        failed: 1,
                        ..keep(RolloutStatus::Failed, e.mismatch_reason)
                    },
                    VerificationStatus::Mismatched => Reported {
                        observed: inspected,
                        healthy: 0,
                        verified: 0,
                        failed: 1,
                        ..keep(RolloutStatus::Mismatched, e.mismatch_reason)
                    },
                };
                Some(Reported {
                    evidence: Some(e),
                    ..reported
                })
            }
            Report::State(InstanceState::Running { .. }) => {
                let stored = stored
                    .filter(|e| e.is_verified() && same_image(&self.image, &e.pinned_reference))?;
                if !(self.status.in_progress() || unhealthy) {
                    return None;
                }
                let status = if self.mode == RolloutMode::Rollback {
                    RolloutStatus::RolledBack
                } else {
                    RolloutStatus::Succeeded
                };
                Some(Reported {
                    observed: 1,
                    healthy: 1,
                    verified: 1,
                    failed: 0,
                    evidence: self.evidence.is_none().then_some(stored),
                    ..keep(status, None)
                })
            }
            Report::State(InstanceState::Failed { .. }) => {
                self.status.in_progress().then(|| Reported {
                    healthy: 0,
                    failed: 1,
                    ..keep(RolloutStatus::Failed, Some(MismatchReason::ReplicaFailed))
                })
            }
            Report::State(InstanceState::Exited { .. }) => {
                self.status.in_progress().then(|| Reported {
                    healthy: 0,
                    failed: 1,
                    ..keep(
                        RolloutStatus::Failed,
                        Some(MismatchReason::ReplicaUnhealthy),
                    )
                })
            }
            Report::State(_) => None,
        }
    }

    /// The runtime evidence of its last report, or `pending` before the first. `release` is
    /// its image release, for the platform manifest of an index.
    pub fn runtime_evidence(&self, release: Option<&ImageRelease>) -> RuntimeEvidence {
        let base = RuntimeEvidence {
            verification_status: VerificationStatus::Pending,
            rollout_id: Some(self.id.clone()),
            rollout_generation: Some(self.generation),
            expected_digest: Some(self.expected_digest()).filter(|d| !d.is_empty()),
            service_image_reference: Some(self.image.clone()),
            task_image_reference: None,
            task_reported_digest: None,
            container_image_id: None,
            container_config_image_reference: None,
            resolved_digest: None,
            platform_manifest_digest: None,
            repo_digests: None,
            evidence_source: None,
            mismatch_reason: None,
            observed_at: self.updated_at.millis(),
        };
        let Some(e) = &self.evidence else {
            return base;
        };
        let configured = e.container_configured_image.clone();
        let task_digest = configured
            .as_deref()
            .and_then(|c| c.rsplit_once('@'))
            .and_then(|(_, d)| crate::image::Digest::normalize(d))
            .map(|d| d.to_string());
        let resolved = e.expected_repo_digest.as_ref().and_then(|expected| {
            let (name, _) = expected.rsplit_once('@')?;
            e.image_repo_digests
                .iter()
                .filter_map(|r| r.rsplit_once('@'))
                .find(|(n, _)| *n == name)
                .map(|(_, d)| d.to_owned())
        });
        let inspected = e.container_id.is_some();
        let verified = e.is_verified();
        // The platform manifest berth read from the index, when its config is the very image
        // the container runs.
        let platform = release.and_then(|r| {
            let config = r.platform_config_digest.as_deref()?;
            (e.container_image_id.as_deref() == Some(config))
                .then(|| r.platform_manifest_digest.clone())
                .flatten()
        });
        RuntimeEvidence {
            platform_manifest_digest: platform,
            verification_status: e.verification_status,
            task_image_reference: configured.clone(),
            task_reported_digest: task_digest,
            container_image_id: e.container_image_id.clone(),
            container_config_image_reference: configured,
            resolved_digest: resolved,
            repo_digests: (inspected || !e.image_repo_digests.is_empty())
                .then(|| e.image_repo_digests.clone()),
            evidence_source: inspected.then(|| "local-container-inspect".to_owned()),
            mismatch_reason: if verified { None } else { e.mismatch_reason },
            observed_at: e.observed_at.unwrap_or(self.updated_at).millis(),
            ..base
        }
    }
}

impl ImageRelease {
    /// Its wire form; `rollouts` are the instance's, to count its promotions.
    pub fn view(&self, instance: &InstanceId, rollouts: &[Rollout]) -> ImageReleaseView {
        let to_it: Vec<&Rollout> = rollouts
            .iter()
            .filter(|r| r.release_id == self.id)
            .collect();
        ImageReleaseView {
            id: self.id.clone(),
            data: ImageReleaseData {
                service_id: instance.to_string(),
                image_id: format!("{}/{}", self.registry_host, self.repository),
                registry_host: self.registry_host.clone(),
                repository: self.repository.clone(),
                registry_root_digest: self.root_digest.clone(),
                digest_pinned_image_reference: format!(
                    "{}/{}@{}",
                    self.registry_host, self.repository, self.root_digest
                ),
                manifest_media_type: self
                    .media_type
                    .clone()
                    .unwrap_or_else(|| UNKNOWN_MEDIA_TYPE_FALLBACK.to_owned()),
                observed_tags: self.tags.clone(),
                first_observed_at: self.first_observed_at.millis(),
                last_observed_at: self.last_observed_at.millis(),
                observation_count: self.observation_count,
                accepted_at: self.accepted_at.map(Timestamp::millis),
                last_promoted_at: to_it.iter().map(|r| r.created_at.millis()).max(),
                promotion_count: (!to_it.is_empty()).then_some(to_it.len() as i64),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn image() -> String {
        format!("127.0.0.1:5000/fixtures/busybox@sha256:{HEX}")
    }

    fn rollout(
        status: RolloutStatus,
        reason: Option<MismatchReason>,
        mode: RolloutMode,
    ) -> Rollout {
        let at = Timestamp::from_millis(1_700_000_000_000);
        Rollout {
            id: "rol:1".into(),
            instance_id: InstanceId::new(),
            generation: 1,
            mode,
            rollback_of: (mode == RolloutMode::Rollback).then(|| "rol:0".into()),
            release_id: "irl:1".into(),
            image: image(),
            spec_digest: "sha256:spec".into(),
            created_at: at,
            status,
            mismatch_reason: reason,
            observed: 0,
            healthy: 0,
            verified: 0,
            failed: 0,
            reporter_session: None,
            report_sequence: 0,
            reported_at: None,
            reported_reason: None,
            evidence: None,
            updated_at: at,
            instance_generation: 1,
        }
    }

    fn evidence(status: VerificationStatus, reason: Option<MismatchReason>) -> ImageEvidence {
        ImageEvidence {
            container_id: Some("c1".into()),
            container_image_id: Some(format!("sha256:{HEX}")),
            image_repo_digests: vec![image()],
            observed_at: Some(Timestamp::from_millis(1_700_000_000_001)),
            verification_status: status,
            mismatch_reason: reason,
            ..ImageEvidence::pending("sha256:spec", &image())
        }
    }

    /// The rollout as [`Tx::report`] leaves it after `report`.
    fn apply(r: &Rollout, report: Report<'_>, stored: Option<&ImageEvidence>) -> Option<Rollout> {
        let next = r.after(report, stored)?;
        Some(Rollout {
            status: next.status,
            mismatch_reason: next.reason,
            observed: next.observed,
            healthy: next.healthy,
            verified: next.verified,
            failed: next.failed,
            reporter_session: Some("brs:1".into()),
            report_sequence: r.report_sequence + 1,
            reported_at: Some(Timestamp::from_millis(1_700_000_000_002)),
            reported_reason: next.reason,
            evidence: next.evidence.cloned().or_else(|| r.evidence.clone()),
            ..r.clone()
        })
    }

    fn site() -> Site {
        Site {
            reporter: Reporter {
                id: "brp:1".into(),
                session_id: "brs:1".into(),
            },
            node_name: "node".into(),
            report_deadline: REPORT_DEADLINE,
        }
    }

    /// The contract's `validateImageRolloutStatus`, over berth's own type.
    fn validate(s: &RolloutStatusView) -> Vec<&'static str> {
        let mut errors = Vec::new();
        let safe = |n: i64| (0..=(1 << 53) - 1).contains(&n);
        let counts = |r: [i64; 5]| r.iter().all(|c| safe(*c));
        if !counts([
            s.required_replica_count,
            s.observed_replica_count,
            s.healthy_replica_count,
            s.verified_replica_count,
            s.failed_replica_count,
        ]) {
            errors.push("rollout replica counts must be non-negative safe integers");
        }
        for r in &s.reporters {
            if !counts([
                r.required_replica_count,
                r.observed_replica_count,
                r.healthy_replica_count,
                r.verified_replica_count,
                r.failed_replica_count,
            ]) {
                errors.push("reporter replica counts must be non-negative safe integers");
            }
            if r.rollout_id != s.rollout_id || r.rollout_generation != s.rollout_generation {
                errors.push("reporter rollout identity does not match aggregate rollout identity");
            }
            if r.observed_replica_count > r.required_replica_count
                || r.healthy_replica_count > r.observed_replica_count
                || r.verified_replica_count > r.observed_replica_count
            {
                errors.push("reporter replica counts are contradictory");
            }
        }
        if matches!(
            s.status,
            RolloutStatus::Succeeded | RolloutStatus::RolledBack
        ) {
            let req = s.required_replica_count;
            if req < 1
                || s.observed_replica_count != req
                || s.healthy_replica_count != req
                || s.verified_replica_count != req
                || s.failed_replica_count != 0
            {
                errors.push("successful rollout status requires every replica to be observed, healthy and verified");
            }
            if s.mismatch_reason.is_some() || s.reporters.is_empty() {
                errors
                    .push("successful rollout status requires reporters without mismatch reasons");
            }
            for r in &s.reporters {
                if r.observed_replica_count != r.required_replica_count
                    || r.healthy_replica_count != r.required_replica_count
                    || r.verified_replica_count != r.required_replica_count
                    || r.failed_replica_count != 0
                    || r.mismatch_reason.is_some()
                {
                    errors.push("successful rollout requires every reporter replica to be healthy and verified");
                }
            }
            let sum = |f: fn(&ReporterStatus) -> i64| s.reporters.iter().map(f).sum::<i64>();
            if sum(|r| r.required_replica_count) != s.required_replica_count
                || sum(|r| r.observed_replica_count) != s.observed_replica_count
                || sum(|r| r.healthy_replica_count) != s.healthy_replica_count
                || sum(|r| r.verified_replica_count) != s.verified_replica_count
                || sum(|r| r.failed_replica_count) != s.failed_replica_count
            {
                errors.push(
                    "successful rollout aggregate must exactly match successful reporter evidence",
                );
            }
        }
        errors
    }

    fn running() -> InstanceState {
        InstanceState::Running {
            since: Timestamp::from_millis(1),
        }
    }

    fn failed() -> InstanceState {
        InstanceState::Failed {
            at: Timestamp::from_millis(1),
            message: "no".into(),
        }
    }

    fn exited() -> InstanceState {
        InstanceState::Exited {
            at: Timestamp::from_millis(1),
            exit_code: Some(3),
        }
    }

    #[test]
    fn a_rollout_goes_through_the_documented_table() {
        use MismatchReason::*;
        use RolloutStatus::*;
        let verified = evidence(VerificationStatus::Verified, None);
        let missing = evidence(VerificationStatus::Missing, Some(PullFailed));
        let mismatched = evidence(
            VerificationStatus::Mismatched,
            Some(RegistryDigestInconsistent),
        );
        let step = |r: &Rollout, report: Report<'_>| {
            apply(r, report, Some(&verified)).map(|n| (n.status, n.mismatch_reason))
        };
        let promotion = |s, reason| rollout(s, reason, RolloutMode::Promotion);
        let rollback = |s, reason| rollout(s, reason, RolloutMode::Rollback);

        assert_eq!(
            step(&promotion(Pending, None), Report::Acting),
            Some((Deploying, None))
        );
        assert_eq!(
            step(&rollback(Pending, None), Report::Acting),
            Some((RollingBack, None))
        );
        assert_eq!(step(&promotion(Deploying, None), Report::Acting), None);
        for from in [
            Pending,
            Deploying,
            RollingBack,
            Verifying,
            Failed,
            Mismatched,
        ] {
            let r = promotion(from, None);
            assert_eq!(
                step(&r, Report::Evidence(&verified)),
                Some((Verifying, None))
            );
            assert_eq!(
                step(&r, Report::Evidence(&missing)),
                Some((Failed, Some(PullFailed)))
            );
            assert_eq!(
                step(&r, Report::Evidence(&mismatched)),
                Some((Mismatched, Some(RegistryDigestInconsistent)))
            );
        }
        for from in [Pending, Deploying, Verifying] {
            assert_eq!(
                step(&promotion(from, None), Report::State(&running())),
                Some((Succeeded, None))
            );
            assert_eq!(
                step(&rollback(from, None), Report::State(&running())),
                Some((RolledBack, None))
            );
            assert_eq!(
                step(&promotion(from, None), Report::State(&failed())),
                Some((Failed, Some(ReplicaFailed)))
            );
            assert_eq!(
                step(&promotion(from, None), Report::State(&exited())),
                Some((Failed, Some(ReplicaUnhealthy)))
            );
        }
        // A crash loop stays unhealthy while its restarts verify, until it is ready.
        let unhealthy = promotion(Failed, Some(ReplicaUnhealthy));
        assert_eq!(
            step(&unhealthy, Report::Evidence(&verified)),
            Some((Failed, Some(ReplicaUnhealthy)))
        );
        assert_eq!(step(&unhealthy, Report::State(&exited())), None);
        assert_eq!(
            step(&unhealthy, Report::State(&running())),
            Some((Succeeded, None))
        );
        // A verdict reached by evidence is not overwritten by the instance's failure it causes.
        assert_eq!(
            step(
                &promotion(Failed, Some(PullFailed)),
                Report::State(&failed())
            ),
            None
        );
        // Running without verified evidence of the rollout's image proves nothing.
        assert_eq!(
            apply(&promotion(Verifying, None), Report::State(&running()), None).map(|r| r.status),
            None
        );
        // Evidence of another image is not about the rollout.
        let mut other = evidence(VerificationStatus::Verified, None);
        other.pinned_reference = format!("127.0.0.1:5000/fixtures/echo@sha256:{HEX}");
        assert_eq!(
            step(&promotion(Deploying, None), Report::Evidence(&other)),
            None
        );
        // Finished rollouts never change.
        for done in [promotion(Succeeded, None), rollback(RolledBack, None)] {
            for report in [
                Report::Acting,
                Report::Evidence(&missing),
                Report::State(&failed()),
                Report::State(&exited()),
            ] {
                assert_eq!(step(&done, report), None);
            }
        }
    }

    #[test]
    fn every_status_a_report_leads_to_holds_the_contracts_validation() {
        use MismatchReason::*;
        use RolloutStatus::*;
        let verified = evidence(VerificationStatus::Verified, None);
        let evidences = [
            verified.clone(),
            evidence(VerificationStatus::Missing, Some(PullFailed)),
            evidence(VerificationStatus::Missing, Some(RequestedDigestMissing)),
            evidence(
                VerificationStatus::Mismatched,
                Some(ContainerRepodigestMismatch),
            ),
            evidence(
                VerificationStatus::Mismatched,
                Some(RegistryDigestInconsistent),
            ),
        ];
        let states = [running(), failed(), exited()];
        let mut seen = std::collections::BTreeSet::new();
        for mode in [
            RolloutMode::Promotion,
            RolloutMode::Automatic,
            RolloutMode::Rollback,
        ] {
            let mut frontier = vec![rollout(Pending, None, mode)];
            // Every sequence of up to four reports from `pending`.
            for _ in 0..4 {
                let mut next = Vec::new();
                for r in &frontier {
                    let mut reports = vec![Report::Acting];
                    reports.extend(evidences.iter().map(Report::Evidence));
                    reports.extend(states.iter().map(Report::State));
                    for report in reports {
                        if let Some(after) = apply(r, report, Some(&verified)) {
                            let view = after.status_at(&site(), &[], after.created_at);
                            assert_eq!(validate(&view), Vec::<&str>::new(), "{view:?}");
                            seen.insert(after.status.as_str());
                            next.push(after);
                        }
                    }
                }
                frontier = next;
            }
        }
        let expected: std::collections::BTreeSet<&str> = [
            "deploying",
            "rolling-back",
            "verifying",
            "succeeded",
            "rolled-back",
            "failed",
            "mismatched",
        ]
        .into();
        assert_eq!(seen, expected);
        // The pending status before any report, and a superseded one, hold it too.
        let pending = rollout(Pending, None, RolloutMode::Promotion);
        assert!(validate(&pending.status_at(&site(), &[], pending.created_at)).is_empty());
        let superseded = rollout(Failed, Some(StaleRolloutReport), RolloutMode::Promotion);
        assert!(validate(&superseded.status_at(&site(), &[], superseded.created_at)).is_empty());
    }

    fn report_of(reporter: &str, session: &str, node: &str, at: i64) -> RolloutReport {
        RolloutReport {
            reporter_id: reporter.into(),
            reporter_session_id: session.into(),
            node_name: node.into(),
            report_sequence: 2,
            reported_at: Timestamp::from_millis(at),
            observed: 1,
            healthy: 1,
            verified: 1,
            failed: 0,
            mismatch_reason: None,
        }
    }

    #[test]
    fn the_newest_session_of_each_reporter_is_aggregated_and_a_placed_node_reports_the_replica() {
        let mut r = rollout(RolloutStatus::Succeeded, None, RolloutMode::Promotion);
        (r.observed, r.healthy, r.verified) = (1, 1, 1);
        let at = r.created_at.millis();
        let mut acting = report_of("brp:1", "brs:old", "", at + 1);
        (acting.observed, acting.healthy, acting.verified) = (0, 0, 0);
        let mut old = report_of("brp:1/node-b", "brs:old", "node-b", at + 2);
        old.mismatch_reason = Some(MismatchReason::StaleRolloutReport);
        let reports = [
            acting,
            old,
            report_of("brp:1/node-b", "brs:new", "node-b", at + 3),
        ];
        let view = r.status_at(&site(), &reports, r.created_at);
        assert_eq!(validate(&view), Vec::<&str>::new(), "{view:?}");
        let listed: Vec<(&str, &str, &[String])> = view
            .reporters
            .iter()
            .map(|p| {
                (
                    p.reporter_id.as_str(),
                    p.reporter_session_id.as_str(),
                    &p.reporter_node_names[..],
                )
            })
            .collect();
        let node_b = ["node-b".to_owned()];
        assert_eq!(listed, [("brp:1/node-b", "brs:new", &node_b[..])]);
        assert_eq!(view.reporters[0].mismatch_reason, None);

        // On one engine (no placement), the daemon's own report, named by the host.
        let own = [report_of("brp:1", "brs:new", "", at + 3)];
        let view = r.status_at(&site(), &own, r.created_at);
        assert_eq!(validate(&view), Vec::<&str>::new(), "{view:?}");
        assert_eq!(view.reporters[0].reporter_id, "brp:1");
        assert_eq!(view.reporters[0].reporter_node_names, ["node".to_owned()]);
    }

    #[test]
    fn a_rollout_whose_replica_no_reporter_observed_by_the_deadline_is_required_replica_missing() {
        let deploying = rollout(RolloutStatus::Deploying, None, RolloutMode::Promotion);
        let site = site();
        let before = Timestamp::from_millis(
            deploying.created_at.millis() + site.report_deadline.as_millis() as i64 - 1,
        );
        let at = Timestamp::from_millis(
            deploying.created_at.millis() + site.report_deadline.as_millis() as i64,
        );
        let view = deploying.status_at(&site, &[], before);
        assert_eq!(view.status, RolloutStatus::Deploying);
        assert_eq!(view.mismatch_reason, None);
        let view = deploying.status_at(&site, &[], at);
        assert_eq!(view.status, RolloutStatus::Failed);
        assert_eq!(
            view.mismatch_reason,
            Some(MismatchReason::RequiredReplicaMissing)
        );
        assert_eq!(validate(&view), Vec::<&str>::new(), "{view:?}");
        // A replica observed (verifying) and a finished rollout are left as they are.
        let mut verifying = rollout(RolloutStatus::Verifying, None, RolloutMode::Promotion);
        (verifying.observed, verifying.verified) = (1, 1);
        assert_eq!(
            verifying.status_at(&site, &[], at).status,
            RolloutStatus::Verifying
        );
        let done = rollout(RolloutStatus::Succeeded, None, RolloutMode::Promotion);
        assert_eq!(
            done.status_at(&site, &[], at).status,
            RolloutStatus::Succeeded
        );
    }
}
