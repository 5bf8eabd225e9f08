//! The SQLite store: what was asked (domains, instances' specs and desired states) and what was
//! last observed. One file in the data directory, WAL, versioned migrations; every change that
//! touches more than one row runs in one transaction.
//!
//! Requests write desired fields ([`Tx::save_desired`]); the reconciler writes observed fields
//! ([`Store::record_observation`]). Neither overwrites the other's columns, so a request that
//! lands while a reconcile is under way is never lost.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::evidence::ImageEvidence;
use crate::ids::{DomainId, InstanceId};
use crate::model::{
    Desired, Domain, DomainState, Instance, InstanceState, InstanceVolume, Lease, Release,
    ReleaseEnd, StopReason, Workspace,
};
use crate::spec::Spec;
use crate::time::Timestamp;

/// A store failure: the database could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite reported an error.
    #[error("the store failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored row could not be read back.
    #[error("the store holds a row it cannot read: {0}")]
    Corrupt(String),
    /// The database file failed its integrity check at open.
    #[error(
        "the database {path} is damaged ({detail}): stop berth, move the file aside (with its -wal \
         and -shm files) or restore it from a backup, then start berth again, which makes an \
         empty store if none is there"
    )]
    Damaged {
        /// The database file.
        path: String,
        /// What SQLite reported, its first problem only.
        detail: String,
    },
    /// The database file or its directory cannot be written.
    #[error(
        "the database {path} cannot be written (the file or its directory is read-only): give the \
         user berth runs as write access to both (e.g. `chmod u+w`), or choose another --data-dir"
    )]
    ReadOnly {
        /// The database file.
        path: String,
    },
}

const MIGRATIONS: &[&str] = &[
    // 1: domains and instances.
    "CREATE TABLE domains (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        owner TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX domains_by_owner ON domains(owner, created_at);
    CREATE TABLE instances (
        id TEXT PRIMARY KEY,
        domain_id TEXT NOT NULL REFERENCES domains(id),
        key TEXT NOT NULL,
        alias TEXT NOT NULL,
        worktree_key TEXT,
        spec TEXT NOT NULL,
        spec_digest TEXT NOT NULL,
        desired TEXT NOT NULL,
        stop_reason TEXT,
        state TEXT NOT NULL,
        observed_at INTEGER NOT NULL,
        started_at INTEGER,
        last_reached_at INTEGER,
        volumes TEXT NOT NULL,
        restart_count INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        UNIQUE (domain_id, key)
    );
    -- At most one live instance answers to an alias for one worktree key of a domain.
    CREATE UNIQUE INDEX instances_alias ON instances(domain_id, alias, coalesce(worktree_key, ''))
        WHERE desired != 'archived';",
    // 2: workspaces, their links and leases.
    "CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        containers TEXT NOT NULL,
        selector TEXT,
        domain_id TEXT REFERENCES domains(id),
        worktree_key TEXT,
        created_at INTEGER NOT NULL
    );
    CREATE INDEX workspaces_by_domain ON workspaces(domain_id, worktree_key);
    CREATE TABLE leases (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        ttl_ms INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    );
    CREATE INDEX leases_by_workspace ON leases(workspace_id, expires_at);",
    // 3: host endpoints: one loopback port per service port of an instance, kept for its life.
    "CREATE TABLE endpoints (
        instance_id TEXT NOT NULL REFERENCES instances(id),
        port INTEGER NOT NULL,
        host_port INTEGER NOT NULL UNIQUE,
        PRIMARY KEY (instance_id, port)
    );",
    // 4: image evidence, release history and rollback idempotency keys.
    "CREATE TABLE image_evidence (
        instance_id TEXT PRIMARY KEY REFERENCES instances(id),
        evidence TEXT NOT NULL
    );
    CREATE TABLE releases (
        instance_id TEXT NOT NULL REFERENCES instances(id),
        seq INTEGER NOT NULL,
        spec_digest TEXT NOT NULL,
        spec TEXT NOT NULL,
        image TEXT NOT NULL,
        image_digest TEXT NOT NULL,
        first_started_at INTEGER NOT NULL,
        last_started_at INTEGER NOT NULL,
        ended TEXT,
        ended_at INTEGER,
        PRIMARY KEY (instance_id, seq)
    );
    CREATE TABLE rollbacks (
        instance_id TEXT NOT NULL REFERENCES instances(id),
        idempotency_key TEXT NOT NULL,
        expected_spec_digest TEXT NOT NULL,
        result TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (instance_id, idempotency_key)
    );",
];

/// Runs `PRAGMA quick_check` (every page and index, without comparing index contents to their
/// tables: fast enough for every start) and refuses a store that fails it.
fn quick_check(conn: &Connection, path: &str) -> Result<(), StoreError> {
    let mut problems = Vec::new();
    let result = conn.prepare("PRAGMA quick_check").and_then(|mut stmt| {
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        for row in rows {
            problems.push(row?);
        }
        Ok(())
    });
    if let Err(e) = result {
        return Err(classify_open_error(path, e));
    }
    match problems.first() {
        Some(first) if first == "ok" && problems.len() == 1 => Ok(()),
        Some(first) => Err(StoreError::Damaged {
            path: path.to_owned(),
            detail: format!("quick_check: {first}"),
        }),
        None => Err(StoreError::Damaged {
            path: path.to_owned(),
            detail: "quick_check said nothing".to_owned(),
        }),
    }
}

/// What an error while opening a store means: damage, a refused write, or something else.
fn classify_open_error(path: &str, e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode;
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Damaged {
            path: path.to_owned(),
            detail: e.to_string(),
        },
        Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => {
            StoreError::ReadOnly {
                path: path.to_owned(),
            }
        }
        _ => StoreError::Sqlite(e),
    }
}

/// The store. Cheap to share behind an `Arc`; calls are short and serialised on one connection.
pub struct Store {
    conn: Mutex<Connection>,
}

impl Store {
    /// Opens (creating if needed) the database file at `path` and brings its schema up to date.
    ///
    /// A file that is damaged (`PRAGMA quick_check` finds a problem, or SQLite cannot read it as a
    /// database) is refused with [`StoreError::Damaged`], and one that cannot be written with
    /// [`StoreError::ReadOnly`]: a store that would answer every request with an error is never
    /// opened.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let shown = path.display().to_string();
        let damaged = |e: rusqlite::Error| classify_open_error(&shown, e);
        let conn = Connection::open(path).map_err(damaged)?;
        if conn.is_readonly(rusqlite::MAIN_DB).map_err(damaged)? {
            return Err(StoreError::ReadOnly { path: shown });
        }
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(damaged)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(damaged)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(damaged)?;
        quick_check(&conn, &shown)?;
        // Prove that a write goes through (a file or directory may refuse writes in ways the open
        // does not see): rewrite the schema version with the value it has.
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(damaged)?;
        conn.pragma_update(None, "user_version", version)
            .map_err(damaged)?;
        Self::init(conn).map_err(|e| match e {
            StoreError::Sqlite(e) => classify_open_error(&shown, e),
            other => other,
        })
    }

    /// Moves everything in the write-ahead log into the database file and empties the log, so
    /// that a stopped daemon leaves one self-contained file. Called at a clean shutdown.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        self.lock()
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }

    /// An empty store in memory, for tests.
    pub fn in_memory() -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(mut conn: Connection) -> Result<Self, StoreError> {
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let version: usize = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version < MIGRATIONS.len() {
            let tx = conn.transaction()?;
            for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
                tx.execute_batch(sql)?;
                tx.pragma_update(None, "user_version", i + 1)?;
            }
            tx.commit()?;
        }
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock cannot leave SQLite half-written: every change is one
        // statement or one transaction. So a poisoned lock is still safe to use.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` in one transaction: committed when it returns `Ok`, rolled back otherwise.
    pub fn write<T, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(StoreError::from)?;
        let out = f(&Tx(&tx))?;
        tx.commit().map_err(StoreError::from)?;
        Ok(out)
    }

    /// Reads through the same typed queries, outside any write.
    pub fn read<T>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let conn = self.lock();
        f(&Tx(&conn))
    }

    /// Records the volumes an instance mounts, ahead of making them: a crash between making one
    /// and recording the rest of an observation then leaves no volume berth made unlisted.
    pub fn record_volumes(
        &self,
        id: &InstanceId,
        volumes: &[InstanceVolume],
    ) -> Result<(), StoreError> {
        let volumes = serde_json::to_string(&StoredVolumes::from(volumes))
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.lock().execute(
            "UPDATE instances SET volumes = ?2 WHERE id = ?1",
            params![id.as_str(), volumes],
        )?;
        Ok(())
    }

    /// Records what the reconciler observed, leaving every desired field as it is.
    pub fn record_observation(&self, obs: &Observation) -> Result<(), StoreError> {
        let volumes = serde_json::to_string(&StoredVolumes::from(&obs.volumes[..]))
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.lock().execute(
            "UPDATE instances SET state = ?2, observed_at = ?3, started_at = ?4, volumes = ?5,
                restart_count = ?6 WHERE id = ?1",
            params![
                obs.id.as_str(),
                to_json(&obs.state)?,
                obs.observed_at.millis(),
                obs.started_at.map(Timestamp::millis),
                volumes,
                obs.restart_count,
            ],
        )?;
        Ok(())
    }
}

impl Store {
    /// Records the image evidence the reconciler gathered for an instance, replacing the last.
    pub fn record_evidence(
        &self,
        id: &InstanceId,
        evidence: &ImageEvidence,
    ) -> Result<(), StoreError> {
        self.lock().execute(
            "INSERT INTO image_evidence (instance_id, evidence) VALUES (?1, ?2)
             ON CONFLICT(instance_id) DO UPDATE SET evidence = ?2",
            params![id.as_str(), to_json(evidence)?],
        )?;
        Ok(())
    }

    /// Records that berth started (or adopted) a verified container of the instance's current
    /// spec at `at`: the current release's last start moves, or, for another spec, the current
    /// release ends `replaced` and a new one begins.
    pub fn record_release_start(
        &self,
        instance: &Instance,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        self.write(|tx| {
            let id = instance.id.as_str();
            let newest = tx.releases(&instance.id)?.into_iter().next();
            if let Some(current) = &newest
                && current.ended.is_none()
                && current.spec_digest == instance.spec_digest
            {
                tx.0.execute(
                    "UPDATE releases SET last_started_at = max(last_started_at, ?3)
                     WHERE instance_id = ?1 AND seq = ?2",
                    params![id, current.seq, at.millis()],
                )?;
                return Ok(());
            }
            tx.end_release(&instance.id, ReleaseEnd::Replaced, at)?;
            tx.0.execute(
                "INSERT INTO releases (instance_id, seq, spec_digest, spec, image, image_digest,
                    first_started_at, last_started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
                params![
                    id,
                    newest.map_or(1, |r| r.seq + 1),
                    instance.spec_digest,
                    instance.spec.canonical_json(),
                    instance.spec.image.as_str(),
                    instance.spec.image.digest().as_str(),
                    at.millis(),
                ],
            )?;
            Ok(())
        })
    }
}

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
        }
    }
}

/// Volumes as stored: with their mount paths, which the wire form leaves out.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredVolume {
    name: String,
    docker_name: String,
    mount_path: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
struct StoredVolumes(Vec<StoredVolume>);

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

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> rusqlite::Result<T> {
    serde_json::from_str(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// Typed queries inside a transaction (or a read).
pub struct Tx<'a>(&'a Connection);

const INSTANCE_COLUMNS: &str = "id, domain_id, key, spec, spec_digest, desired, stop_reason, state,
    observed_at, started_at, last_reached_at, volumes, restart_count";

fn domain_from_row(row: &Row<'_>) -> rusqlite::Result<Domain> {
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

fn instance_from_row(row: &Row<'_>) -> rusqlite::Result<Instance> {
    let id: String = row.get(0)?;
    let domain_id: String = row.get(1)?;
    let spec: String = row.get(3)?;
    let desired: String = row.get(5)?;
    let stop_reason: Option<String> = row.get(6)?;
    let state: String = row.get(7)?;
    let volumes: String = row.get(11)?;
    let volumes: StoredVolumes = from_json(&volumes)?;
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
        volumes: volumes
            .0
            .into_iter()
            .map(|v| InstanceVolume {
                name: v.name,
                docker_name: v.docker_name,
                mount_path: v.mount_path,
            })
            .collect(),
        restart_count: row.get(12)?,
    })
}

impl Tx<'_> {
    /// Stores a new domain.
    pub fn insert_domain(&self, domain: &Domain) -> Result<(), StoreError> {
        self.0.execute(
            "INSERT INTO domains (id, name, owner, state, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                domain.resource_domain_id.as_str(),
                domain.name,
                domain.owner,
                domain.state.as_str(),
                domain.created_at.millis()
            ],
        )?;
        Ok(())
    }

    /// One domain by id.
    pub fn domain(&self, id: &DomainId) -> Result<Option<Domain>, StoreError> {
        Ok(self
            .0
            .query_row(
                "SELECT id, name, owner, state, created_at FROM domains WHERE id = ?1",
                [id.as_str()],
                domain_from_row,
            )
            .optional()?)
    }

    /// Every domain `owner` created, oldest first.
    pub fn domains_of(&self, owner: &str) -> Result<Vec<Domain>, StoreError> {
        let mut stmt = self.0.prepare_cached(
            "SELECT id, name, owner, state, created_at FROM domains WHERE owner = ?1
             ORDER BY created_at, id",
        )?;
        let rows = stmt.query_map([owner], domain_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Sets a domain's state.
    pub fn set_domain_state(&self, id: &DomainId, state: DomainState) -> Result<(), StoreError> {
        self.0.execute(
            "UPDATE domains SET state = ?2 WHERE id = ?1",
            params![id.as_str(), state.as_str()],
        )?;
        Ok(())
    }

    /// One instance by its domain and key.
    pub fn instance(&self, domain: &DomainId, key: &str) -> Result<Option<Instance>, StoreError> {
        let sql =
            format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE domain_id = ?1 AND key = ?2");
        Ok(self
            .0
            .query_row(&sql, params![domain.as_str(), key], instance_from_row)
            .optional()?)
    }

    /// One instance by id.
    pub fn instance_by_id(&self, id: &InstanceId) -> Result<Option<Instance>, StoreError> {
        let sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE id = ?1");
        Ok(self
            .0
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
        let mut stmt = self.0.prepare_cached(&sql)?;
        let rows = stmt.query_map([domain.as_str()], instance_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The ids of every instance that is not archived, across all domains.
    pub fn live_instance_ids(&self) -> Result<Vec<InstanceId>, StoreError> {
        let mut stmt = self
            .0
            .prepare_cached("SELECT id FROM instances WHERE desired != 'archived' ORDER BY id")?;
        let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
        rows.map(|r| {
            let id = r?;
            InstanceId::parse(&id).ok_or_else(|| StoreError::Corrupt(format!("instance id {id}")))
        })
        .collect()
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
            .0
            .query_row(
                "SELECT key FROM instances WHERE domain_id = ?1 AND alias = ?2
                   AND coalesce(worktree_key, '') = coalesce(?3, '') AND key != ?4
                   AND desired != 'archived'",
                params![domain.as_str(), alias, worktree_key, key],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Stores a new instance.
    pub fn insert_instance(&self, i: &Instance) -> Result<(), StoreError> {
        let volumes = to_json(&StoredVolumes::from(&i.volumes[..]))?;
        self.0.execute(
            "INSERT INTO instances (id, domain_id, key, alias, worktree_key, spec, spec_digest,
                desired, stop_reason, state, observed_at, started_at, last_reached_at, volumes,
                restart_count, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
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
            ],
        )?;
        Ok(())
    }

    /// Saves what was asked of an instance (spec, desired, stop reason) and, for a new spec,
    /// the volumes and state it implies.
    pub fn save_desired(&self, i: &Instance) -> Result<(), StoreError> {
        let volumes = to_json(&StoredVolumes::from(&i.volumes[..]))?;
        self.0.execute(
            "UPDATE instances SET alias = ?2, worktree_key = ?3, spec = ?4, spec_digest = ?5,
                desired = ?6, stop_reason = ?7, state = ?8, volumes = ?9 WHERE id = ?1",
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
        Ok(())
    }
}

fn release_from_row(row: &Row<'_>) -> rusqlite::Result<Release> {
    let ended: Option<String> = row.get(7)?;
    Ok(Release {
        seq: row.get(0)?,
        spec_digest: row.get(1)?,
        spec_json: row.get(2)?,
        image: row.get(3)?,
        image_digest: row.get(4)?,
        first_started_at: Timestamp::from_millis(row.get(5)?),
        last_started_at: Timestamp::from_millis(row.get(6)?),
        ended: ended
            .map(|e| ReleaseEnd::parse(&e).ok_or(rusqlite::Error::InvalidQuery))
            .transpose()?,
        ended_at: row.get::<_, Option<i64>>(8)?.map(Timestamp::from_millis),
    })
}

impl Tx<'_> {
    /// The image evidence last gathered for an instance.
    pub fn evidence(&self, id: &InstanceId) -> Result<Option<ImageEvidence>, StoreError> {
        let text: Option<String> = self
            .0
            .query_row(
                "SELECT evidence FROM image_evidence WHERE instance_id = ?1",
                [id.as_str()],
                |r| r.get(0),
            )
            .optional()?;
        text.map(|t| serde_json::from_str(&t).map_err(|e| StoreError::Corrupt(e.to_string())))
            .transpose()
    }

    /// An instance's releases, newest first.
    pub fn releases(&self, id: &InstanceId) -> Result<Vec<Release>, StoreError> {
        let mut stmt = self.0.prepare_cached(
            "SELECT seq, spec_digest, spec, image, image_digest, first_started_at,
                last_started_at, ended, ended_at
             FROM releases WHERE instance_id = ?1 ORDER BY seq DESC",
        )?;
        let rows = stmt.query_map([id.as_str()], release_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Ends the instance's current release, if there is one.
    pub fn end_release(
        &self,
        id: &InstanceId,
        end: ReleaseEnd,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        self.0.execute(
            "UPDATE releases SET ended = ?2, ended_at = ?3 WHERE instance_id = ?1 AND ended IS NULL",
            params![id.as_str(), end.as_str(), at.millis()],
        )?;
        Ok(())
    }

    /// The rollback asked with this idempotency key: its expected spec digest and its answer.
    pub fn rollback(
        &self,
        id: &InstanceId,
        idempotency_key: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        Ok(self
            .0
            .query_row(
                "SELECT expected_spec_digest, result FROM rollbacks
                 WHERE instance_id = ?1 AND idempotency_key = ?2",
                params![id.as_str(), idempotency_key],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
    }

    /// Keeps a rollback's answer under its idempotency key.
    pub fn insert_rollback(
        &self,
        id: &InstanceId,
        idempotency_key: &str,
        expected_spec_digest: &str,
        result: &str,
    ) -> Result<(), StoreError> {
        self.0.execute(
            "INSERT INTO rollbacks (instance_id, idempotency_key, expected_spec_digest, result,
                created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                id.as_str(),
                idempotency_key,
                expected_spec_digest,
                result,
                Timestamp::now().millis()
            ],
        )?;
        Ok(())
    }
}

fn workspace_from_row(row: &Row<'_>) -> rusqlite::Result<Workspace> {
    let containers: String = row.get(2)?;
    let domain: Option<String> = row.get(4)?;
    Ok(Workspace {
        id: row.get(0)?,
        owner: row.get(1)?,
        containers: from_json(&containers)?,
        selector: row.get(3)?,
        domain_id: domain
            .map(|d| DomainId::parse(&d).ok_or(rusqlite::Error::InvalidQuery))
            .transpose()?,
        worktree_key: row.get(5)?,
    })
}

const WORKSPACE_COLUMNS: &str = "id, owner, containers, selector, domain_id, worktree_key";

impl Tx<'_> {
    /// One workspace by id.
    pub fn workspace(&self, id: &str) -> Result<Option<Workspace>, StoreError> {
        let sql = format!("SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE id = ?1");
        Ok(self
            .0
            .query_row(&sql, [id], workspace_from_row)
            .optional()?)
    }

    /// Every workspace `owner` registered, by id.
    pub fn workspaces_of(&self, owner: &str) -> Result<Vec<Workspace>, StoreError> {
        let sql =
            format!("SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE owner = ?1 ORDER BY id");
        let mut stmt = self.0.prepare_cached(&sql)?;
        let rows = stmt.query_map([owner], workspace_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every workspace linked to a domain.
    pub fn linked_workspaces(&self, domain: &DomainId) -> Result<Vec<Workspace>, StoreError> {
        let sql =
            format!("SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE domain_id = ?1 ORDER BY id");
        let mut stmt = self.0.prepare_cached(&sql)?;
        let rows = stmt.query_map([domain.as_str()], workspace_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every linked workspace, across domains.
    pub fn all_linked_workspaces(&self) -> Result<Vec<Workspace>, StoreError> {
        let sql = format!(
            "SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE domain_id IS NOT NULL ORDER BY id"
        );
        let mut stmt = self.0.prepare_cached(&sql)?;
        let rows = stmt.query_map([], workspace_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Creates or replaces a workspace's registration (its link is kept).
    pub fn put_workspace(&self, w: &Workspace) -> Result<(), StoreError> {
        self.0.execute(
            "INSERT INTO workspaces (id, owner, containers, selector, domain_id, worktree_key, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT(id) DO UPDATE SET containers = ?3, selector = ?4, domain_id = ?5, worktree_key = ?6",
            params![
                w.id,
                w.owner,
                to_json(&w.containers)?,
                w.selector,
                w.domain_id.as_ref().map(DomainId::as_str),
                w.worktree_key,
                Timestamp::now().millis(),
            ],
        )?;
        Ok(())
    }

    /// Deletes a workspace and its leases.
    pub fn delete_workspace(&self, id: &str) -> Result<(), StoreError> {
        self.0
            .execute("DELETE FROM leases WHERE workspace_id = ?1", [id])?;
        self.0
            .execute("DELETE FROM workspaces WHERE id = ?1", [id])?;
        Ok(())
    }

    /// A workspace's leases, soonest to expire first.
    pub fn leases(&self, workspace: &str) -> Result<Vec<Lease>, StoreError> {
        let mut stmt = self.0.prepare_cached(
            "SELECT id, workspace_id, ttl_ms, expires_at FROM leases WHERE workspace_id = ?1
             ORDER BY expires_at, id",
        )?;
        let rows = stmt.query_map([workspace], |r| {
            Ok(Lease {
                id: r.get(0)?,
                workspace_id: r.get(1)?,
                ttl: std::time::Duration::from_millis(r.get::<_, i64>(2)?.max(0) as u64),
                expires_at: Timestamp::from_millis(r.get(3)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Creates or renews a lease.
    pub fn put_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.0.execute(
            "INSERT INTO leases (id, workspace_id, ttl_ms, expires_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(id) DO UPDATE SET expires_at = ?4",
            params![
                lease.id,
                lease.workspace_id,
                lease.ttl.as_millis() as i64,
                lease.expires_at.millis()
            ],
        )?;
        Ok(())
    }

    /// Deletes a lease; false when there was none.
    pub fn delete_lease(&self, workspace: &str, id: &str) -> Result<bool, StoreError> {
        Ok(self.0.execute(
            "DELETE FROM leases WHERE workspace_id = ?1 AND id = ?2",
            [workspace, id],
        )? > 0)
    }

    /// Forgets leases that expired before `now`.
    pub fn delete_expired_leases(&self, now: Timestamp) -> Result<usize, StoreError> {
        Ok(self
            .0
            .execute("DELETE FROM leases WHERE expires_at <= ?1", [now.millis()])?)
    }

    /// Records that an instance was reached at `at`.
    pub fn set_last_reached(&self, id: &InstanceId, at: Timestamp) -> Result<(), StoreError> {
        self.0.execute(
            "UPDATE instances SET last_reached_at = ?2 WHERE id = ?1",
            params![id.as_str(), at.millis()],
        )?;
        Ok(())
    }

    /// An instance's endpoints as `(port, host_port)`, by port.
    pub fn endpoints(&self, instance: &InstanceId) -> Result<Vec<(u16, u16)>, StoreError> {
        let mut stmt = self.0.prepare_cached(
            "SELECT port, host_port FROM endpoints WHERE instance_id = ?1 ORDER BY port",
        )?;
        let rows = stmt.query_map([instance.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every endpoint of every instance that is not archived.
    pub fn live_endpoints(&self) -> Result<Vec<(InstanceId, u16, u16)>, StoreError> {
        let mut stmt = self.0.prepare_cached(
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
        match self.0.execute(
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
        self.0.execute(
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
        let mut stmt = self.0.prepare_cached(&sql)?;
        let rows = stmt.query_map([], instance_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn domain(owner: &str) -> Domain {
        Domain {
            resource_domain_id: DomainId::new(),
            name: "project".into(),
            state: DomainState::Active,
            created_at: Timestamp::now(),
            owner: owner.into(),
        }
    }

    #[test]
    fn domains_round_trip_and_are_listed_per_owner() {
        let store = Store::in_memory().unwrap();
        let mine = domain("a");
        store.write(|tx| tx.insert_domain(&mine)).unwrap();
        store.write(|tx| tx.insert_domain(&domain("b"))).unwrap();
        let listed = store.read(|tx| tx.domains_of("a")).unwrap();
        assert_eq!(listed, vec![mine.clone()]);
        store
            .write(|tx| tx.set_domain_state(&mine.resource_domain_id, DomainState::Fenced))
            .unwrap();
        let read = store
            .read(|tx| tx.domain(&mine.resource_domain_id))
            .unwrap()
            .unwrap();
        assert_eq!(read.state, DomainState::Fenced);
    }

    #[test]
    fn a_failed_write_changes_nothing() {
        let store = Store::in_memory().unwrap();
        let d = domain("a");
        let result: Result<(), StoreError> = store.write(|tx| {
            tx.insert_domain(&d)?;
            Err(StoreError::Corrupt("refused".into()))
        });
        assert!(result.is_err());
        assert!(store.read(|tx| tx.domains_of("a")).unwrap().is_empty());
    }

    #[test]
    fn the_schema_survives_reopening_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("berth.db");
        let d = domain("a");
        Store::open(&path)
            .unwrap()
            .write(|tx| tx.insert_domain(&d))
            .unwrap();
        let again = Store::open(&path).unwrap();
        assert_eq!(again.read(|tx| tx.domains_of("a")).unwrap(), vec![d]);
    }
}
