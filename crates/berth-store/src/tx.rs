//! A transaction's typed queries, and the observation the reconciler writes.

use std::cell::RefCell;

use rusqlite::{Connection, OptionalExtension, params};

use crate::{LastFailure, StoreError};
use berth_domain::ids::{DomainId, InstanceId};
use berth_domain::model::{Instance, InstanceState, InstanceVolume};
use berth_domain::time::Timestamp;

/// What the reconciler writes after looking at an instance.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The instance.
    pub id: InstanceId,
    /// What it saw.
    pub state: InstanceState,
    /// When.
    pub observed_at: Timestamp,
    /// When the container last started.
    pub started_at: Option<Timestamp>,
    /// The volumes it mounts.
    pub volumes: Vec<InstanceVolume>,
    /// Restarts since it last ran steadily.
    pub restart_count: u32,
    /// The generation of what was desired when the reconcile read the instance: the one this
    /// observation acted on.
    pub generation: i64,
}

impl Observation {
    /// The observation an instance already carries, to change field by field.
    pub fn of(instance: &Instance) -> Self {
        Self {
            id: instance.id.clone(),
            state: instance.state.clone(),
            observed_at: instance.observed_at,
            started_at: instance.started_at,
            volumes: instance.volumes.clone(),
            restart_count: instance.restart_count,
            generation: instance.generation,
        }
    }
}

/// Volumes as stored: with their mount paths, which the wire form leaves out.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct StoredVolume {
    name: String,
    docker_name: String,
    mount_path: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub(super) struct StoredVolumes(Vec<StoredVolume>);

impl StoredVolumes {
    pub(super) fn into_volumes(self) -> Vec<InstanceVolume> {
        self.0
            .into_iter()
            .map(|v| InstanceVolume {
                name: v.name,
                docker_name: v.docker_name,
                mount_path: v.mount_path,
            })
            .collect()
    }
}

impl From<&[InstanceVolume]> for StoredVolumes {
    fn from(volumes: &[InstanceVolume]) -> Self {
        Self(
            volumes
                .iter()
                .map(|v| StoredVolume {
                    name: v.name.clone(),
                    docker_name: v.docker_name.clone(),
                    mount_path: v.mount_path.clone(),
                })
                .collect(),
        )
    }
}

pub(super) fn to_json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

pub(super) fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> rusqlite::Result<T> {
    serde_json::from_str(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// What a transaction changed of the rows the view holds.
#[derive(Default)]
pub(super) struct Touched {
    pub(super) domains: Vec<DomainId>,
    pub(super) instances: Vec<InstanceId>,
    /// Worktree records, by domain and key.
    pub(super) worktrees: Vec<(DomainId, String)>,
}

/// Typed queries inside a transaction (or a read).
pub struct Tx<'a> {
    pub(crate) conn: &'a Connection,
    pub(super) touched: RefCell<Touched>,
}

impl<'a> Tx<'a> {
    pub(super) fn new(conn: &'a Connection) -> Self {
        Self {
            conn,
            touched: RefCell::new(Touched::default()),
        }
    }

    pub(super) fn touch_domain(&self, id: &DomainId) {
        self.touched.borrow_mut().domains.push(id.clone());
    }

    /// The transaction's connection, for the tables other modules keep.
    pub(crate) fn conn(&self) -> &Connection {
        self.conn
    }

    pub(crate) fn touch_instance(&self, id: &InstanceId) {
        self.touched.borrow_mut().instances.push(id.clone());
    }

    /// Records the volumes an instance mounts.
    pub fn record_volumes(
        &self,
        id: &InstanceId,
        volumes: &[InstanceVolume],
    ) -> Result<(), StoreError> {
        let json = to_json(&StoredVolumes::from(volumes))?;
        self.conn.execute(
            "UPDATE instances SET volumes = ?2 WHERE id = ?1",
            params![id.as_str(), json],
        )?;
        self.keep_volumes(id, volumes)?;
        self.touch_instance(id);
        Ok(())
    }

    /// Where the runtime placed the instance, if it did.
    pub fn placement(&self, id: &InstanceId) -> Result<Option<String>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT placement FROM instance_placements WHERE instance_id = ?1",
                params![id.as_str()],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Records the instance's placement unless one is recorded; answers the one that holds.
    pub fn record_placement(&self, id: &InstanceId, placement: &str) -> Result<String, StoreError> {
        self.conn.execute(
            "INSERT OR IGNORE INTO instance_placements (instance_id, placement) VALUES (?1, ?2)",
            params![id.as_str(), placement],
        )?;
        Ok(self.placement(id)?.unwrap_or_else(|| placement.to_owned()))
    }

    /// Records what the reconciler observed, leaving every desired field as it is.
    pub fn record_observation(&self, obs: &Observation) -> Result<(), StoreError> {
        let volumes = to_json(&StoredVolumes::from(&obs.volumes[..]))?;
        self.conn.execute(
            "UPDATE instances SET state = ?2, observed_at = ?3, started_at = ?4, volumes = ?5,
                restart_count = ?6, observed_generation = max(observed_generation, ?7)
             WHERE id = ?1",
            params![
                obs.id.as_str(),
                to_json(&obs.state)?,
                obs.observed_at.millis(),
                obs.started_at.map(Timestamp::millis),
                volumes,
                obs.restart_count,
                obs.generation,
            ],
        )?;
        self.keep_volumes(&obs.id, &obs.volumes)?;
        // Only a running instance is frozen: any other state it is seen in ends a freeze.
        if !matches!(obs.state, InstanceState::Running { .. }) {
            self.conn.execute(
                "UPDATE instances SET frozen_at = NULL WHERE id = ?1 AND frozen_at IS NOT NULL",
                [obs.id.as_str()],
            )?;
        }
        // A failure is kept past the recovery that replaces it in `state`.
        if let InstanceState::Failed { at, message } = &obs.state {
            self.conn.execute(
                "UPDATE instances SET last_failure_message = ?2, last_failure_at = ?3 WHERE id = ?1",
                params![obs.id.as_str(), message, at.millis()],
            )?;
        }
        self.touch_instance(&obs.id);
        Ok(())
    }

    /// An instance's last failure (its message and when), kept after it recovers; `None` when
    /// it never failed.
    pub fn last_failure(&self, id: &InstanceId) -> Result<Option<LastFailure>, StoreError> {
        let row: Option<(Option<String>, Option<i64>)> = self
            .conn
            .query_row(
                "SELECT last_failure_message, last_failure_at FROM instances WHERE id = ?1",
                [id.as_str()],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        Ok(match row {
            Some((Some(message), Some(at))) => Some(LastFailure {
                message,
                at: Timestamp::from_millis(at),
            }),
            _ => None,
        })
    }
}
