//! The endpoints table, the host ports archived instances had (for their keys' next
//! generations), when an instance was last reached, and since when it is frozen.

use rusqlite::params;

use crate::error::StoreError;
use crate::instances::{INSTANCE_COLUMNS, instance_from_row};
use crate::tx::Tx;
use berth_domain::ids::{DomainId, InstanceId};
use berth_domain::model::{DomainState, Instance};
use berth_domain::names;
use berth_domain::time::Timestamp;

/// An endpoint as stored: a container port, the host port berth listens on for it, and the
/// host port its key's lineage had before when that one was taken by something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredEndpoint {
    pub port: u16,
    pub host_port: u16,
    pub wanted_host_port: Option<u16>,
}

impl Tx<'_> {
    /// Records that an instance was reached at `at`.
    pub fn set_last_reached(&self, id: &InstanceId, at: Timestamp) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE instances SET last_reached_at = ?2 WHERE id = ?1",
            params![id.as_str(), at.millis()],
        )?;
        self.touch_instance(id);
        Ok(())
    }

    /// Records that an instance's container is frozen since `since`, or (`None`) that it is not.
    pub fn set_frozen(&self, id: &InstanceId, since: Option<Timestamp>) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE instances SET frozen_at = ?2 WHERE id = ?1",
            params![id.as_str(), since.map(Timestamp::millis)],
        )?;
        self.touch_instance(id);
        Ok(())
    }

    /// An instance's endpoints, by port.
    pub fn endpoints(&self, instance: &InstanceId) -> Result<Vec<StoredEndpoint>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT port, host_port, wanted_host_port FROM endpoints WHERE instance_id = ?1
             ORDER BY port",
        )?;
        let rows = stmt.query_map([instance.as_str()], |r| {
            Ok(StoredEndpoint {
                port: r.get(0)?,
                host_port: r.get(1)?,
                wanted_host_port: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The host port the lineage of `key` in `domain` last had for container port `port`
    /// (an archived generation's), if it is not some live endpoint's now.
    pub fn released_host_port(
        &self,
        domain: &DomainId,
        key: &str,
        port: u16,
    ) -> Result<Option<u16>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT host_port FROM released_endpoints
             WHERE domain_id = ?1 AND lineage = ?2 AND port = ?3",
        )?;
        let mut rows = stmt.query(params![domain.as_str(), names::key_lineage(key), port])?;
        Ok(match rows.next()? {
            Some(row) => Some(row.get(0)?),
            None => None,
        })
    }

    /// Whether a host port is remembered for a lineage other than `key`'s, or is a live
    /// endpoint's: a port the kernel picks for a new endpoint is passed over when it is.
    pub fn host_port_spoken_for(
        &self,
        domain: &DomainId,
        key: &str,
        host_port: u16,
    ) -> Result<bool, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM endpoints WHERE host_port = ?3)
                 OR EXISTS (SELECT 1 FROM released_endpoints WHERE host_port = ?3
                            AND NOT (domain_id = ?1 AND lineage = ?2))",
        )?;
        Ok(stmt.query_row(
            params![domain.as_str(), names::key_lineage(key), host_port],
            |r| r.get(0),
        )?)
    }

    /// Every endpoint of every instance that is not archived.
    pub fn live_endpoints(&self) -> Result<Vec<(InstanceId, u16, u16)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT e.instance_id, e.port, e.host_port FROM endpoints e JOIN instances i ON i.id = e.instance_id
             WHERE i.desired != 'archived' ORDER BY e.host_port",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?)))?;
        rows.map(|r| {
            let (id, port, host_port) = r?;
            let id = InstanceId::parse(&id)
                .ok_or_else(|| StoreError::Corrupt(format!("instance id {id}")))?;
            Ok((id, port, host_port))
        })
        .collect()
    }

    /// Records an endpoint (with the port its lineage had, when that one was taken), and
    /// forgets what its lineage remembered for the port; false when the host port is another
    /// instance's already.
    pub fn insert_endpoint(
        &self,
        instance: &Instance,
        endpoint: &StoredEndpoint,
    ) -> Result<bool, StoreError> {
        match self.conn.execute(
            "INSERT INTO endpoints (instance_id, port, host_port, wanted_host_port)
             VALUES (?1, ?2, ?3, ?4)",
            params![
                instance.id.as_str(),
                endpoint.port,
                endpoint.host_port,
                endpoint.wanted_host_port
            ],
        ) {
            Ok(_) => {
                self.conn.execute(
                    "DELETE FROM released_endpoints
                     WHERE domain_id = ?1 AND lineage = ?2 AND port = ?3",
                    params![
                        instance.domain_id.as_str(),
                        names::key_lineage(&instance.key),
                        endpoint.port
                    ],
                )?;
                Ok(true)
            }
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Forgets an archived instance's endpoints, remembering their host ports for the next
    /// instance of its key's lineage; in an archived domain, which gets no new instance,
    /// nothing of its ports is remembered.
    pub fn release_endpoints(&self, instance: &InstanceId) -> Result<(), StoreError> {
        let Some(found) = self.instance_by_id(instance)? else {
            return Ok(());
        };
        let domain_archived = self
            .domain(&found.domain_id)?
            .is_none_or(|d| d.state == DomainState::Archived);
        let remembered = if domain_archived {
            self.forget_released_endpoints(&found.domain_id)?;
            Vec::new()
        } else {
            self.endpoints(instance)?
        };
        for endpoint in remembered {
            self.conn.execute(
                "INSERT INTO released_endpoints (domain_id, lineage, port, host_port)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (domain_id, lineage, port) DO UPDATE SET host_port = excluded.host_port",
                params![
                    found.domain_id.as_str(),
                    names::key_lineage(&found.key),
                    endpoint.port,
                    endpoint.host_port
                ],
            )?;
        }
        self.conn.execute(
            "DELETE FROM endpoints WHERE instance_id = ?1",
            [instance.as_str()],
        )?;
        Ok(())
    }

    /// Forgets the host ports a domain's archived instances had (the domain is archived).
    pub fn forget_released_endpoints(&self, domain: &DomainId) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM released_endpoints WHERE domain_id = ?1",
            [domain.as_str()],
        )?;
        Ok(())
    }

    /// Every instance of every domain that is asked to run.
    pub fn running_instances(&self) -> Result<Vec<Instance>, StoreError> {
        let sql = format!(
            "SELECT {INSTANCE_COLUMNS} FROM instances WHERE desired = 'running' ORDER BY id"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([], instance_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
