//! The kept_layers table: what is left of a snapshot deleted while other volumes stood on its
//! layers.

use rusqlite::{Row, params};

use crate::tx::{from_json, to_json};
use crate::{StoreError, Tx};
use berth_domain::ids::{DomainId, SnapshotId};
use berth_domain::snapshots::KeptLayers;
use berth_domain::time::Timestamp;

fn kept_from_row(row: &Row<'_>) -> rusqlite::Result<KeptLayers> {
    let id: String = row.get(0)?;
    let domain: String = row.get(1)?;
    let volumes: String = row.get(5)?;
    Ok(KeptLayers {
        snapshot_id: SnapshotId::parse(&id).ok_or(rusqlite::Error::InvalidQuery)?,
        domain_id: DomainId::parse(&domain).ok_or(rusqlite::Error::InvalidQuery)?,
        name: row.get(2)?,
        instance_key: row.get(3)?,
        deleted_at: Timestamp::from_millis(row.get(4)?),
        volumes: from_json(&volumes)?,
    })
}

impl Tx<'_> {
    /// Records the layers a deleted snapshot leaves (see [`KeptLayers`]).
    pub fn keep_layers(&self, kept: &KeptLayers) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT OR REPLACE INTO kept_layers
                (snapshot_id, domain_id, name, instance_key, deleted_at, volumes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                kept.snapshot_id.as_str(),
                kept.domain_id.as_str(),
                kept.name,
                kept.instance_key,
                kept.deleted_at.millis(),
                to_json(&kept.volumes)?,
            ],
        )?;
        Ok(())
    }

    /// A domain's kept layers, oldest first.
    pub fn kept_layers(&self, domain: &DomainId) -> Result<Vec<KeptLayers>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT snapshot_id, domain_id, name, instance_key, deleted_at, volumes
             FROM kept_layers WHERE domain_id = ?1 ORDER BY deleted_at, snapshot_id",
        )?;
        let rows = stmt.query_map([domain.as_str()], kept_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Forgets a deleted snapshot's kept layers, once a prune removed them.
    pub fn forget_kept_layers(&self, id: &SnapshotId) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM kept_layers WHERE snapshot_id = ?1",
            [id.as_str()],
        )?;
        Ok(())
    }
}
