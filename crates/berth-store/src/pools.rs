//! The pools, pool_instances and pool_leases tables.

use rusqlite::{OptionalExtension, Row, params};

use crate::tx::from_json;
use crate::{StoreError, Tx};
use berth_domain::ids::{DomainId, InstanceId, PoolLeaseId, SnapshotId};
use berth_domain::pools::{MemberState, Pool, PoolFrom, PoolLease, PoolMember};
use berth_domain::spec::Spec;
use berth_domain::time::Timestamp;

const POOL_COLUMNS: &str = "domain_id, name, spec, source, size, deleting, message, created_at";
const MEMBER_COLUMNS: &str = "instance_id, domain_id, pool, state, created_at";
const LEASE_COLUMNS: &str =
    "id, domain_id, pool, key, instance_id, ttl_ms, expires_at, created_at, resets";

fn bad() -> rusqlite::Error {
    rusqlite::Error::InvalidQuery
}

fn pool_from_row(row: &Row<'_>) -> rusqlite::Result<Pool> {
    let domain: String = row.get(0)?;
    let spec: String = row.get(2)?;
    let source: String = row.get(3)?;
    let from = match source.as_str() {
        "template" => PoolFrom::Template,
        other => PoolFrom::Snapshot(SnapshotId::parse(other).ok_or_else(bad)?),
    };
    Ok(Pool {
        domain_id: DomainId::parse(&domain).ok_or_else(bad)?,
        name: row.get(1)?,
        spec: from_json::<Spec>(&spec)?,
        from,
        size: row.get(4)?,
        deleting: row.get::<_, i64>(5)? != 0,
        message: row.get(6)?,
        created_at: Timestamp::from_millis(row.get(7)?),
    })
}

fn member_from_row(row: &Row<'_>) -> rusqlite::Result<PoolMember> {
    let id: String = row.get(0)?;
    let domain: String = row.get(1)?;
    let state: String = row.get(3)?;
    Ok(PoolMember {
        instance_id: InstanceId::parse(&id).ok_or_else(bad)?,
        domain_id: DomainId::parse(&domain).ok_or_else(bad)?,
        pool: row.get(2)?,
        state: MemberState::parse(&state).ok_or_else(bad)?,
        created_at: Timestamp::from_millis(row.get(4)?),
    })
}

fn lease_from_row(row: &Row<'_>) -> rusqlite::Result<PoolLease> {
    let id: String = row.get(0)?;
    let domain: String = row.get(1)?;
    let instance: String = row.get(4)?;
    Ok(PoolLease {
        id: PoolLeaseId::parse(&id).ok_or_else(bad)?,
        domain_id: DomainId::parse(&domain).ok_or_else(bad)?,
        pool: row.get(2)?,
        key: row.get(3)?,
        instance_id: InstanceId::parse(&instance).ok_or_else(bad)?,
        ttl_ms: row.get(5)?,
        expires_at: Timestamp::from_millis(row.get(6)?),
        created_at: Timestamp::from_millis(row.get(7)?),
        resets: row.get(8)?,
    })
}

impl Tx<'_> {
    /// Pool `name` of `domain`.
    pub fn pool(&self, domain: &DomainId, name: &str) -> Result<Option<Pool>, StoreError> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {POOL_COLUMNS} FROM pools WHERE domain_id = ?1 AND name = ?2"),
                params![domain.as_str(), name],
                pool_from_row,
            )
            .optional()?)
    }

    /// A domain's pools by name; every domain's with `None`.
    pub fn pools(&self, domain: Option<&DomainId>) -> Result<Vec<Pool>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {POOL_COLUMNS} FROM pools WHERE ?1 IS NULL OR domain_id = ?1
             ORDER BY domain_id, name"
        ))?;
        let rows = stmt.query_map([domain.map(DomainId::as_str)], pool_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Stores a new pool; false when the domain has one of that name.
    pub fn insert_pool(&self, pool: &Pool) -> Result<bool, StoreError> {
        let source = match &pool.from {
            PoolFrom::Template => "template".to_owned(),
            PoolFrom::Snapshot(id) => id.to_string(),
        };
        let inserted = self.conn.execute(
            "INSERT INTO pools (domain_id, name, spec, source, size, deleting, message, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, 0, NULL, ?6)
             ON CONFLICT (domain_id, name) DO NOTHING",
            params![
                pool.domain_id.as_str(),
                pool.name,
                pool.spec.canonical_json(),
                source,
                pool.size,
                pool.created_at.millis()
            ],
        )?;
        Ok(inserted == 1)
    }

    /// Marks a pool deleted: it makes nothing more.
    pub fn set_pool_deleting(&self, domain: &DomainId, name: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE pools SET deleting = 1 WHERE domain_id = ?1 AND name = ?2",
            params![domain.as_str(), name],
        )?;
        Ok(())
    }

    /// Records why a pool's last instance could not be made (`None`: it could).
    pub fn set_pool_message(
        &self,
        domain: &DomainId,
        name: &str,
        message: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE pools SET message = ?3 WHERE domain_id = ?1 AND name = ?2",
            params![domain.as_str(), name, message],
        )?;
        Ok(())
    }

    /// Forgets a deleted pool whose instances are all gone.
    pub fn delete_pool(&self, domain: &DomainId, name: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM pools WHERE domain_id = ?1 AND name = ?2",
            params![domain.as_str(), name],
        )?;
        Ok(())
    }

    /// Records a pool's new instance.
    pub fn insert_pool_member(&self, m: &PoolMember) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO pool_instances (instance_id, domain_id, pool, state, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                m.instance_id.as_str(),
                m.domain_id.as_str(),
                m.pool,
                m.state.as_str(),
                m.created_at.millis()
            ],
        )?;
        Ok(())
    }

    /// Records instance `id` (made in this transaction) as pool `pool`'s, waiting; false,
    /// writing nothing, when the domain has no such pool or it is being deleted.
    pub fn record_pool_member(
        &self,
        id: &InstanceId,
        domain: &DomainId,
        pool: &str,
    ) -> Result<bool, StoreError> {
        if self.pool(domain, pool)?.is_none_or(|p| p.deleting) {
            return Ok(false);
        }
        self.insert_pool_member(&PoolMember {
            instance_id: id.clone(),
            domain_id: domain.clone(),
            pool: pool.to_owned(),
            state: MemberState::Waiting,
            created_at: Timestamp::now(),
        })?;
        Ok(true)
    }

    /// Moves a pool's instance to `state`.
    pub fn set_member_state(&self, id: &InstanceId, state: MemberState) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE pool_instances SET state = ?2 WHERE instance_id = ?1",
            params![id.as_str(), state.as_str()],
        )?;
        Ok(())
    }

    /// A pool's instances (`None`: every pool's of every domain) in one of `states` (every
    /// state when empty), oldest first.
    pub fn pool_members(
        &self,
        pool: Option<(&DomainId, &str)>,
        states: &[MemberState],
    ) -> Result<Vec<PoolMember>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {MEMBER_COLUMNS} FROM pool_instances
             WHERE ?1 IS NULL OR (domain_id = ?1 AND pool = ?2)
             ORDER BY created_at, instance_id"
        ))?;
        let rows = stmt.query_map(
            params![pool.map(|p| p.0.as_str()), pool.map(|p| p.1)],
            member_from_row,
        )?;
        let all: Vec<PoolMember> = rows.collect::<Result<_, _>>()?;
        Ok(all
            .into_iter()
            .filter(|m| states.is_empty() || states.contains(&m.state))
            .collect())
    }

    /// The pool instance `id` is, if it is one.
    pub fn pool_member(&self, id: &InstanceId) -> Result<Option<PoolMember>, StoreError> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {MEMBER_COLUMNS} FROM pool_instances WHERE instance_id = ?1"),
                [id.as_str()],
                member_from_row,
            )
            .optional()?)
    }

    /// Every instance a pool has made that is not leased: berth's own, not a person's.
    pub fn unleased_pool_instances(&self) -> Result<Vec<InstanceId>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT instance_id FROM pool_instances WHERE state <> 'leased'")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        let mut ids = Vec::new();
        for row in rows {
            ids.push(InstanceId::parse(&row?).ok_or_else(bad)?);
        }
        Ok(ids)
    }

    /// Lease `id`.
    pub fn pool_lease(&self, id: &PoolLeaseId) -> Result<Option<PoolLease>, StoreError> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {LEASE_COLUMNS} FROM pool_leases WHERE id = ?1"),
                [id.as_str()],
                lease_from_row,
            )
            .optional()?)
    }

    /// A pool's leases (`None`: every lease), oldest first.
    pub fn pool_leases(
        &self,
        pool: Option<(&DomainId, &str)>,
    ) -> Result<Vec<PoolLease>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {LEASE_COLUMNS} FROM pool_leases
             WHERE ?1 IS NULL OR (domain_id = ?1 AND pool = ?2)
             ORDER BY created_at, id"
        ))?;
        let rows = stmt.query_map(
            params![pool.map(|p| p.0.as_str()), pool.map(|p| p.1)],
            lease_from_row,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Stores a new lease, or what changed of one (its instance, expiry and resets).
    pub fn save_pool_lease(&self, l: &PoolLease) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO pool_leases (id, domain_id, pool, key, instance_id, ttl_ms, expires_at,
                 created_at, resets)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (id) DO UPDATE SET instance_id = excluded.instance_id,
                 expires_at = excluded.expires_at, resets = excluded.resets",
            params![
                l.id.as_str(),
                l.domain_id.as_str(),
                l.pool,
                l.key,
                l.instance_id.as_str(),
                l.ttl_ms,
                l.expires_at.millis(),
                l.created_at.millis(),
                l.resets
            ],
        )?;
        Ok(())
    }

    /// Forgets a lease (released).
    pub fn delete_pool_lease(&self, id: &PoolLeaseId) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM pool_leases WHERE id = ?1", [id.as_str()])?;
        Ok(())
    }

    /// Gives `to` the host endpoints `from` has (the same host ports), in place of its own:
    /// a lease's reset keeps its endpoints across instances. The listeners follow once the
    /// transaction commits.
    pub fn move_endpoints(&self, from: &InstanceId, to: &InstanceId) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM endpoints WHERE instance_id = ?1",
            [to.as_str()],
        )?;
        self.conn.execute(
            "UPDATE endpoints SET instance_id = ?2 WHERE instance_id = ?1",
            params![from.as_str(), to.as_str()],
        )?;
        Ok(())
    }

    /// Forgets a plain volume berth made for an instance, once removed with its instance.
    pub fn forget_made_volume(&self, volume: &str) -> Result<(), StoreError> {
        self.conn
            .execute("DELETE FROM made_volumes WHERE volume = ?1", [volume])?;
        Ok(())
    }
}
