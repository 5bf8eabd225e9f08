//! The rollouts and image releases tables.

use rusqlite::{OptionalExtension, Row, params};

use crate::{StoreError, Tx};
use berth_domain::evidence::MismatchReason;
use berth_domain::ids::InstanceId;
use berth_domain::image::PinnedImage;
use berth_domain::model::{Instance, InstanceState};
use berth_domain::rollouts::*;
use berth_domain::runtime::{RegistryManifest, TagObservation};
use berth_domain::time::Timestamp;

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
        self.observe_image(&instance.id, &instance.spec.image, manifest, at)
    }

    /// Records what the registry serves now under the tag of the instance's image: the release
    /// of that digest (observed, not accepted, when it is new) is written, or its tags, last
    /// observation and count move. It changes nothing that runs. Answers the release's id.
    pub fn observe_tag(
        &self,
        instance: &Instance,
        observed: &TagObservation,
        at: Timestamp,
    ) -> Result<String, StoreError> {
        let image = instance.spec.image.with_digest(&observed.digest);
        let manifest = RegistryManifest {
            media_type: observed.media_type.clone(),
            ..RegistryManifest::default()
        };
        self.observe_image(&instance.id, &image, Some(&manifest), at)?;
        Ok(release_id(&instance.id, &image))
    }

    fn observe_image(
        &self,
        instance: &InstanceId,
        image: &PinnedImage,
        manifest: Option<&RegistryManifest>,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let id = release_id(instance, image);
        let existing = self.image_release(instance, &id)?;
        let media_type = manifest
            .and_then(|m| m.media_type.as_deref())
            .filter(|m| MEDIA_TYPES.contains(m));
        let platform = manifest.and_then(|m| m.platform_manifest_digest.as_deref());
        let config = manifest.and_then(|m| m.platform_config_digest.as_deref());
        let tags_json = |tags: &[&str]| {
            serde_json::to_string(tags).map_err(|e| StoreError::Corrupt(e.to_string()))
        };
        match existing {
            None => {
                let tags: Vec<&str> = image.tag().into_iter().collect();
                self.conn.execute(
                    "INSERT INTO image_releases (instance_id, id, registry_host, repository,
                        root_digest, media_type, tags, first_observed_at, last_observed_at,
                        observation_count, platform_manifest_digest, platform_config_digest)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, 1, ?9, ?10)",
                    params![
                        instance.as_str(),
                        id,
                        registry_host(image),
                        registry_repository(image),
                        image.digest().as_str(),
                        media_type,
                        tags_json(&tags)?,
                        at.millis(),
                        platform,
                        config,
                    ],
                )?;
            }
            Some(release) => {
                let mut tags: Vec<&str> = release.tags.iter().map(String::as_str).collect();
                if let Some(tag) = image.tag()
                    && !tags.contains(&tag)
                {
                    tags.push(tag);
                }
                self.conn.execute(
                    "UPDATE image_releases SET tags = ?3, media_type = coalesce(?4, media_type),
                        last_observed_at = max(last_observed_at, ?5),
                        observation_count = observation_count + 1,
                        platform_manifest_digest = coalesce(?6, platform_manifest_digest),
                        platform_config_digest = coalesce(?7, platform_config_digest)
                     WHERE instance_id = ?1 AND id = ?2",
                    params![
                        instance.as_str(),
                        id,
                        tags_json(&tags)?,
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

    /// Marks an image release accepted by a promotion: the person chose to run it.
    pub fn accept_release_id(
        &self,
        instance: &InstanceId,
        release: &str,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE image_releases SET accepted_at = ?3
             WHERE instance_id = ?1 AND id = ?2 AND accepted_at IS NULL",
            params![instance.as_str(), release, at.millis()],
        )?;
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
