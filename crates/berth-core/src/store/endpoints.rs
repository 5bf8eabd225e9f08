//! The endpoints table, and when an instance was last reached.

use rusqlite::params;

use super::error::StoreError;
use super::instances::{INSTANCE_COLUMNS, instance_from_row};
use super::tx::Tx;
use crate::ids::InstanceId;
use crate::model::Instance;
use crate::time::Timestamp;

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

    /// An instance's endpoints as `(port, host_port)`, by port.
    pub fn endpoints(&self, instance: &InstanceId) -> Result<Vec<(u16, u16)>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT port, host_port FROM endpoints WHERE instance_id = ?1 ORDER BY port",
        )?;
        let rows = stmt.query_map([instance.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
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

    /// Records an endpoint; false when the host port is another instance's already.
    pub fn insert_endpoint(
        &self,
        instance: &InstanceId,
        port: u16,
        host_port: u16,
    ) -> Result<bool, StoreError> {
        match self.conn.execute(
            "INSERT INTO endpoints (instance_id, port, host_port) VALUES (?1, ?2, ?3)",
            params![instance.as_str(), port, host_port],
        ) {
            Ok(_) => Ok(true),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Forgets an instance's endpoints (when it is archived).
    pub fn delete_endpoints(&self, instance: &InstanceId) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM endpoints WHERE instance_id = ?1",
            [instance.as_str()],
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
