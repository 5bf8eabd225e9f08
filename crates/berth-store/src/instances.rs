//! The domains and instances tables.

use rusqlite::{OptionalExtension, Row, params};

use crate::error::StoreError;
use crate::tx::{StoredVolumes, Tx, from_json, to_json};
use berth_domain::ids::{DomainId, InstanceId};
use berth_domain::model::{
    Desired, Domain, DomainState, Instance, InstanceState, InstanceVolume, ReleaseEnd, StopReason,
};
use berth_domain::spec::Spec;
use berth_domain::time::Timestamp;

pub(super) const INSTANCE_COLUMNS: &str =
    "id, domain_id, key, spec, spec_digest, desired, stop_reason, state,
    observed_at, started_at, last_reached_at, volumes, restart_count, generation,
    observed_generation, volume_tag, kept_volumes, template, frozen_at";

pub(super) fn domain_from_row(row: &Row<'_>) -> rusqlite::Result<Domain> {
    let id: String = row.get(0)?;
    let state: String = row.get(3)?;
    Ok(Domain {
        resource_domain_id: DomainId::parse(&id).ok_or(rusqlite::Error::InvalidQuery)?,
        name: row.get(1)?,
        owner: row.get(2)?,
        state: DomainState::parse(&state).ok_or(rusqlite::Error::InvalidQuery)?,
        created_at: Timestamp::from_millis(row.get(4)?),
    })
}

pub(super) fn instance_from_row(row: &Row<'_>) -> rusqlite::Result<Instance> {
    let id: String = row.get(0)?;
    let domain_id: String = row.get(1)?;
    let spec: String = row.get(3)?;
    let desired: String = row.get(5)?;
    let stop_reason: Option<String> = row.get(6)?;
    let state: String = row.get(7)?;
    let volumes: String = row.get(11)?;
    let volumes: StoredVolumes = from_json(&volumes)?;
    let kept: String = row.get(16)?;
    let kept: StoredVolumes = from_json(&kept)?;
    Ok(Instance {
        id: InstanceId::parse(&id).ok_or(rusqlite::Error::InvalidQuery)?,
        domain_id: DomainId::parse(&domain_id).ok_or(rusqlite::Error::InvalidQuery)?,
        key: row.get(2)?,
        spec: from_json::<Spec>(&spec)?,
        spec_digest: row.get(4)?,
        desired: Desired::parse(&desired).ok_or(rusqlite::Error::InvalidQuery)?,
        stop_reason: stop_reason
            .as_deref()
            .map(from_json::<StopReason>)
            .transpose()?,
        state: from_json::<InstanceState>(&state)?,
        observed_at: Timestamp::from_millis(row.get(8)?),
        started_at: row.get::<_, Option<i64>>(9)?.map(Timestamp::from_millis),
        last_reached_at: row.get::<_, Option<i64>>(10)?.map(Timestamp::from_millis),
        frozen_at: row.get::<_, Option<i64>>(18)?.map(Timestamp::from_millis),
        volumes: volumes.into_volumes(),
        kept: kept.into_volumes(),
        restart_count: row.get(12)?,
        generation: row.get(13)?,
        observed_generation: row.get(14)?,
        volume_tag: row.get(15)?,
        template: row.get(17)?,
    })
}

impl Tx<'_> {
    /// Stores a new domain.
    pub fn insert_domain(&self, domain: &Domain) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO domains (id, name, owner, state, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                domain.resource_domain_id.as_str(),
                domain.name,
                domain.owner,
                domain.state.as_str(),
                domain.created_at.millis()
            ],
        )?;
        self.touch_domain(&domain.resource_domain_id);
        Ok(())
    }

    /// One domain by id.
    pub fn domain(&self, id: &DomainId) -> Result<Option<Domain>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, name, owner, state, created_at FROM domains WHERE id = ?1",
                [id.as_str()],
                domain_from_row,
            )
            .optional()?)
    }

    /// Every domain `owner` created, oldest first.
    pub fn domains_of(&self, owner: &str) -> Result<Vec<Domain>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, name, owner, state, created_at FROM domains WHERE owner = ?1
             ORDER BY created_at, id",
        )?;
        let rows = stmt.query_map([owner], domain_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Sets a domain's state.
    pub fn set_domain_state(&self, id: &DomainId, state: DomainState) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE domains SET state = ?2 WHERE id = ?1",
            params![id.as_str(), state.as_str()],
        )?;
        self.touch_domain(id);
        Ok(())
    }

    /// One instance by its domain and key.
    pub fn instance(&self, domain: &DomainId, key: &str) -> Result<Option<Instance>, StoreError> {
        let sql =
            format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE domain_id = ?1 AND key = ?2");
        Ok(self
            .conn
            .query_row(&sql, params![domain.as_str(), key], instance_from_row)
            .optional()?)
    }

    /// One instance by id.
    pub fn instance_by_id(&self, id: &InstanceId) -> Result<Option<Instance>, StoreError> {
        let sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE id = ?1");
        Ok(self
            .conn
            .query_row(&sql, [id.as_str()], instance_from_row)
            .optional()?)
    }

    /// A domain's instances: the archived ones, or every other one; by key.
    pub fn instances(
        &self,
        domain: &DomainId,
        archived: bool,
    ) -> Result<Vec<Instance>, StoreError> {
        let op = if archived { "=" } else { "!=" };
        let sql = format!(
            "SELECT {INSTANCE_COLUMNS} FROM instances WHERE domain_id = ?1 AND desired {op} 'archived'
             ORDER BY key"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([domain.as_str()], instance_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The ids of every instance that is not archived, across all domains.
    pub fn live_instance_ids(&self) -> Result<Vec<InstanceId>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id FROM instances WHERE desired != 'archived' ORDER BY id")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        rows.map(|r| {
            let id = r?;
            InstanceId::parse(&id).ok_or_else(|| StoreError::Corrupt(format!("instance id {id}")))
        })
        .collect()
    }

    /// Archives every instance of an archived domain that is not archived yet: a domain archive
    /// that a crash cut short is finished here (its containers go on their next reconcile).
    /// Returns the domains it finished.
    pub fn finish_domain_archives(&self) -> Result<Vec<DomainId>, StoreError> {
        let rows: Vec<(InstanceId, DomainId)> = {
            let mut stmt = self.conn.prepare_cached(
                "SELECT i.id, i.domain_id FROM instances i JOIN domains d ON d.id = i.domain_id
                 WHERE d.state = 'archived' AND i.desired != 'archived'",
            )?;
            let rows =
                stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
            rows.filter_map(|r| {
                r.ok()
                    .and_then(|(i, d)| Some((InstanceId::parse(&i)?, DomainId::parse(&d)?)))
            })
            .collect()
        };
        let now = Timestamp::now();
        let mut domains = Vec::new();
        for (id, domain) in rows {
            self.archive_desired(&id, now)?;
            if !domains.contains(&domain) {
                domains.push(domain);
            }
        }
        Ok(domains)
    }

    /// Writes an instance desired `archived` (no stop reason) and ends its current release.
    pub fn archive_desired(&self, id: &InstanceId, at: Timestamp) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE instances SET desired = 'archived', stop_reason = NULL,
                generation = generation + 1 WHERE id = ?1",
            params![id.as_str()],
        )?;
        self.touch_instance(id);
        self.end_release(id, ReleaseEnd::Archived, at)
    }

    /// The key of the live instance other than `key` that answers to `alias` for `worktree_key`.
    pub fn alias_holder(
        &self,
        domain: &DomainId,
        alias: &str,
        worktree_key: Option<&str>,
        key: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT key FROM instances WHERE domain_id = ?1 AND alias = ?2
                   AND coalesce(worktree_key, '') = coalesce(?3, '') AND key != ?4
                   AND desired != 'archived'",
                params![domain.as_str(), alias, worktree_key, key],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Marks instance `id` as one whose volumes start on a template.
    pub fn set_template(&self, id: &InstanceId) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE instances SET template = 1 WHERE id = ?1",
            [id.as_str()],
        )?;
        self.touch_instance(id);
        Ok(())
    }

    /// Stores a new instance.
    pub fn insert_instance(&self, i: &Instance) -> Result<(), StoreError> {
        let volumes = to_json(&StoredVolumes::from(&i.volumes[..]))?;
        self.conn.execute(
            "INSERT INTO instances (id, domain_id, key, alias, worktree_key, spec, spec_digest,
                desired, stop_reason, state, observed_at, started_at, last_reached_at, volumes,
                restart_count, created_at, generation, observed_generation, volume_tag, template)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                ?18, ?19, ?20)",
            params![
                i.id.as_str(),
                i.domain_id.as_str(),
                i.key,
                i.spec.alias,
                i.spec.worktree_key,
                i.spec.canonical_json(),
                i.spec_digest,
                i.desired.as_str(),
                i.stop_reason.as_ref().map(to_json).transpose()?,
                to_json(&i.state)?,
                i.observed_at.millis(),
                i.started_at.map(Timestamp::millis),
                i.last_reached_at.map(Timestamp::millis),
                volumes,
                i.restart_count,
                Timestamp::now().millis(),
                i.generation,
                i.observed_generation,
                i.volume_tag,
                i.template,
            ],
        )?;
        self.keep_volumes(&i.id, &i.kept)?;
        self.keep_volumes(&i.id, &i.volumes)?;
        self.touch_instance(&i.id);
        Ok(())
    }

    /// Adds `volumes` to what the instance keeps, each name's entry replaced by the volume
    /// now holding that name's data; the others stay.
    pub fn keep_volumes(
        &self,
        id: &InstanceId,
        volumes: &[InstanceVolume],
    ) -> Result<(), StoreError> {
        let Some(kept): Option<String> = self
            .conn
            .query_row(
                "SELECT kept_volumes FROM instances WHERE id = ?1",
                [id.as_str()],
                |r| r.get(0),
            )
            .optional()?
        else {
            return Ok(());
        };
        let mut kept = from_json::<StoredVolumes>(&kept)?.into_volumes();
        let before = kept.clone();
        for v in volumes {
            match kept.iter_mut().find(|k| k.name == v.name) {
                Some(k) => *k = v.clone(),
                None => kept.push(v.clone()),
            }
        }
        if kept != before {
            self.conn.execute(
                "UPDATE instances SET kept_volumes = ?2 WHERE id = ?1",
                params![id.as_str(), to_json(&StoredVolumes::from(&kept[..]))?],
            )?;
        }
        Ok(())
    }

    /// Forgets the volumes `names` an archived instance kept (prune removed them), from what
    /// it mounts and what it keeps; an instance that is not archived is left as it is.
    pub fn forget_archived_volumes(
        &self,
        id: &InstanceId,
        names: &[String],
    ) -> Result<(), StoreError> {
        let row: Option<(String, String, String)> = self
            .conn
            .query_row(
                "SELECT desired, volumes, kept_volumes FROM instances WHERE id = ?1",
                [id.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()?;
        let Some((desired, volumes, kept)) = row else {
            return Ok(());
        };
        if desired != "archived" {
            return Ok(());
        }
        let keep = |json: &str| -> Result<String, StoreError> {
            let left: Vec<InstanceVolume> = from_json::<StoredVolumes>(json)?
                .into_volumes()
                .into_iter()
                .filter(|v| !names.contains(&v.docker_name))
                .collect();
            to_json(&StoredVolumes::from(&left[..]))
        };
        self.conn.execute(
            "UPDATE instances SET volumes = ?2, kept_volumes = ?3 WHERE id = ?1",
            params![id.as_str(), keep(&volumes)?, keep(&kept)?],
        )?;
        self.touch_instance(id);
        Ok(())
    }

    /// Switches an instance to the volumes a restore or branch filled: their tag, the volumes
    /// it mounts, and every volume it keeps (those and the ones no spec mounts now); what it
    /// kept before is in the before-restore snapshot.
    pub fn set_volume_tag(
        &self,
        id: &InstanceId,
        tag: &str,
        volumes: &[InstanceVolume],
        kept: &[InstanceVolume],
    ) -> Result<(), StoreError> {
        let mut all = kept.to_vec();
        for v in volumes {
            if !all.iter().any(|k| k.name == v.name) {
                all.push(v.clone());
            }
        }
        self.conn.execute(
            "UPDATE instances SET volume_tag = ?2, volumes = ?3, kept_volumes = ?4 WHERE id = ?1",
            params![
                id.as_str(),
                tag,
                to_json(&StoredVolumes::from(volumes))?,
                to_json(&StoredVolumes::from(&all[..]))?
            ],
        )?;
        self.touch_instance(id);
        Ok(())
    }

    /// Saves what was asked of an instance (spec, desired, stop reason) and, for a new spec,
    /// the volumes and state it implies.
    pub fn save_desired(&self, i: &Instance) -> Result<(), StoreError> {
        let volumes = to_json(&StoredVolumes::from(&i.volumes[..]))?;
        self.conn.execute(
            "UPDATE instances SET alias = ?2, worktree_key = ?3, spec = ?4, spec_digest = ?5,
                desired = ?6, stop_reason = ?7, state = ?8, volumes = ?9,
                generation = generation + 1 WHERE id = ?1",
            params![
                i.id.as_str(),
                i.spec.alias,
                i.spec.worktree_key,
                i.spec.canonical_json(),
                i.spec_digest,
                i.desired.as_str(),
                i.stop_reason.as_ref().map(to_json).transpose()?,
                to_json(&i.state)?,
                volumes,
            ],
        )?;
        self.keep_volumes(&i.id, &i.volumes)?;
        self.touch_instance(&i.id);
        Ok(())
    }
}
