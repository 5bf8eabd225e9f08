//! A rollout's status from what its reporter observed: the state machine, and the plans and
//! views answered from it.

use super::*;
use crate::evidence::{ImageEvidence, MismatchReason, VerificationStatus};
use crate::ids::InstanceId;
use crate::image::PinnedImage;
use crate::model::InstanceState;
use crate::time::Timestamp;

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
                    VerificationStatus::Pending | VerificationStatus::Unknown => return None,
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
