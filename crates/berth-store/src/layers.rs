//! The layered_volumes table: every overlay volume berth made, with the layers under it; and
//! the made_volumes table: the plain volumes berth made for instances.

use rusqlite::{OptionalExtension, params};

use crate::{StoreError, Tx};
use berth_domain::runtime::Layer;
use berth_domain::snapshots::LayeredVolume;

impl Tx<'_> {
    /// The overlay volume `volume`, when it is one berth made.
    pub fn layered_volume(&self, volume: &str) -> Result<Option<LayeredVolume>, StoreError> {
        let row = self
            .conn()
            .query_row(
                "SELECT upper, lowers FROM layered_volumes WHERE volume = ?1",
                [volume],
                |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
            )
            .optional()?;
        row.map(|(upper, lowers)| {
            Ok(LayeredVolume {
                volume: volume.to_owned(),
                upper,
                lowers: serde_json::from_str(&lowers)
                    .map_err(|e| StoreError::Corrupt(format!("layers of {volume}: {e}")))?,
            })
        })
        .transpose()
    }

    /// Records overlay volume `layered`.
    pub fn record_layered(&self, layered: &LayeredVolume) -> Result<(), StoreError> {
        let lowers = serde_json::to_string(&layered.lowers)
            .map_err(|e| StoreError::Corrupt(format!("layers of {}: {e}", layered.volume)))?;
        self.conn().execute(
            "INSERT INTO layered_volumes (volume, upper, lowers) VALUES (?1, ?2, ?3)
             ON CONFLICT(volume) DO UPDATE SET upper = excluded.upper, lowers = excluded.lowers",
            params![layered.volume, layered.upper, lowers],
        )?;
        Ok(())
    }

    /// Records the overlay volumes `layered` and switches instance `id` onto its volumes
    /// `volumes` (and every one it keeps, `kept`) named with `tag`: the one write that moves an
    /// instance onto new layers.
    pub fn switch_onto_layers(
        &self,
        id: &berth_domain::ids::InstanceId,
        layered: &[LayeredVolume],
        tag: &str,
        volumes: &[berth_domain::model::InstanceVolume],
        kept: &[berth_domain::model::InstanceVolume],
    ) -> Result<(), StoreError> {
        for volume in layered {
            self.record_layered(volume)?;
        }
        self.set_volume_tag(id, tag, volumes, kept)
    }

    /// Whether berth has made the plain volume `volume` (or found it made) for an instance.
    pub fn volume_made(&self, volume: &str) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .query_row(
                "SELECT 1 FROM made_volumes WHERE volume = ?1",
                [volume],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// Records that the plain volume `volume` is made.
    pub fn record_made(&self, volume: &str) -> Result<(), StoreError> {
        self.conn().execute(
            "INSERT OR IGNORE INTO made_volumes (volume, made_at) VALUES (?1, ?2)",
            params![volume, berth_domain::time::Timestamp::now().millis()],
        )?;
        Ok(())
    }

    /// Forgets overlay volume `volume` (it was removed).
    pub fn forget_layered(&self, volume: &str) -> Result<(), StoreError> {
        self.conn()
            .execute("DELETE FROM layered_volumes WHERE volume = ?1", [volume])?;
        Ok(())
    }

    /// The overlay volumes that stand on a layer held by one of `volumes` (other than those
    /// volumes themselves), by name.
    pub fn layer_users(&self, volumes: &[String]) -> Result<Vec<String>, StoreError> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT volume, lowers FROM layered_volumes ORDER BY volume")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        let mut users = Vec::new();
        for row in rows {
            let (volume, lowers) = row?;
            if volumes.contains(&volume) {
                continue;
            }
            let lowers: Vec<Layer> = serde_json::from_str(&lowers)
                .map_err(|e| StoreError::Corrupt(format!("layers of {volume}: {e}")))?;
            if lowers.iter().any(|l| volumes.contains(&l.volume)) {
                users.push(volume);
            }
        }
        Ok(users)
    }
}
