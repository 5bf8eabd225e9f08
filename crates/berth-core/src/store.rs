//! The SQLite store: what was asked (domains, instances' specs and desired states) and what was
//! last observed. One file in the data directory, WAL, versioned migrations; every change that
//! touches more than one row runs in one transaction.
//!
//! Requests write desired fields ([`Tx::save_desired`]); the reconciler writes observed fields
//! ([`Store::record_observation`]). Neither overwrites the other's columns, so a request that
//! lands while a reconcile is under way is never lost.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::evidence::ImageEvidence;
use crate::ids::{DomainId, InstanceId};
use crate::model::{
    Desired, Domain, DomainState, Instance, InstanceState, InstanceVolume, Lease, Release,
    ReleaseEnd, StopReason, Workspace,
};
use crate::ownership::StoreIdentity;
use crate::rollouts::Report;
use crate::runtime::RegistryManifest;
use crate::spec::Spec;
use crate::time::Timestamp;
use crate::watch::{InstanceChange, Watch};

/// A store failure: the database could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite reported an error.
    #[error("the store failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored row could not be read back.
    #[error("the store holds a row it cannot read: {0}")]
    Corrupt(String),
    /// The store's writer has stopped (the daemon is shutting down).
    #[error("the store is closed")]
    Closed,
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
    // 5: workspace ids are per key: a workspace is (owner, id), and so are its leases' references.
    // Existing rows keep their owner; leases take their workspace's.
    "CREATE TABLE workspaces_v5 (
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        containers TEXT NOT NULL,
        selector TEXT,
        domain_id TEXT REFERENCES domains(id),
        worktree_key TEXT,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (owner, id)
    );
    INSERT INTO workspaces_v5 (owner, id, containers, selector, domain_id, worktree_key, created_at)
        SELECT owner, id, containers, selector, domain_id, worktree_key, created_at FROM workspaces;
    CREATE TABLE leases_v5 (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        workspace_id TEXT NOT NULL,
        ttl_ms INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        FOREIGN KEY (owner, workspace_id) REFERENCES workspaces_v5(owner, id) ON DELETE CASCADE
    );
    INSERT INTO leases_v5 (id, owner, workspace_id, ttl_ms, expires_at)
        SELECT l.id, w.owner, l.workspace_id, l.ttl_ms, l.expires_at
        FROM leases l JOIN workspaces w ON w.id = l.workspace_id;
    DROP TABLE leases;
    DROP TABLE workspaces;
    ALTER TABLE workspaces_v5 RENAME TO workspaces;
    ALTER TABLE leases_v5 RENAME TO leases;
    CREATE INDEX workspaces_by_domain ON workspaces(domain_id, worktree_key);
    CREATE INDEX leases_by_workspace ON leases(owner, workspace_id, expires_at);",
    // 6: generations: what is desired is numbered, and so is what the reconciler last acted on.
    // An existing instance starts at generation 1, observed if it was ever observed running.
    "ALTER TABLE instances ADD COLUMN generation INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE instances ADD COLUMN observed_generation INTEGER NOT NULL DEFAULT 0;
    UPDATE instances SET observed_generation = 1 WHERE state NOT LIKE '%not-started%';",
    // 7: image rollouts (one per change of an instance's image, numbered per instance), the
    // image releases berth observed, and this daemon's stable reporter identity.
    "CREATE TABLE rollouts (
        id TEXT PRIMARY KEY,
        instance_id TEXT NOT NULL REFERENCES instances(id),
        generation INTEGER NOT NULL,
        mode TEXT NOT NULL,
        rollback_of TEXT,
        release_id TEXT NOT NULL,
        image TEXT NOT NULL,
        spec_digest TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        status TEXT NOT NULL,
        mismatch_reason TEXT,
        observed INTEGER NOT NULL DEFAULT 0,
        healthy INTEGER NOT NULL DEFAULT 0,
        verified INTEGER NOT NULL DEFAULT 0,
        failed INTEGER NOT NULL DEFAULT 0,
        reporter_session TEXT,
        report_sequence INTEGER NOT NULL DEFAULT 0,
        reported_at INTEGER,
        evidence TEXT,
        updated_at INTEGER NOT NULL,
        UNIQUE (instance_id, generation)
    );
    CREATE TABLE image_releases (
        instance_id TEXT NOT NULL REFERENCES instances(id),
        id TEXT NOT NULL,
        registry_host TEXT NOT NULL,
        repository TEXT NOT NULL,
        root_digest TEXT NOT NULL,
        media_type TEXT,
        tags TEXT NOT NULL,
        first_observed_at INTEGER NOT NULL,
        last_observed_at INTEGER NOT NULL,
        observation_count INTEGER NOT NULL,
        accepted_at INTEGER,
        PRIMARY KEY (instance_id, id)
    );
    CREATE TABLE reporter (
        id TEXT PRIMARY KEY
    );",
    // 8: a rollout remembers the generation of the desired state that wrote it (a report from
    // a reconcile of an older one is stale) and the reason of the reporter's last report; an
    // image release of an index, the manifest it lists for the engine's platform.
    "ALTER TABLE rollouts ADD COLUMN instance_generation INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE rollouts ADD COLUMN reported_reason TEXT;
    ALTER TABLE image_releases ADD COLUMN platform_manifest_digest TEXT;
    ALTER TABLE image_releases ADD COLUMN platform_config_digest TEXT;",
    // 9: snapshots of instance volumes and the copy operations (snapshot, branch, restore),
    // each recorded as intent before it starts; an instance a branch or a restore filled mounts
    // volumes whose names carry the copy's tag.
    "ALTER TABLE instances ADD COLUMN volume_tag TEXT;
    CREATE TABLE snapshots (
        id TEXT PRIMARY KEY,
        domain_id TEXT NOT NULL REFERENCES domains(id),
        instance_id TEXT NOT NULL REFERENCES instances(id),
        instance_key TEXT NOT NULL,
        name TEXT NOT NULL,
        spec_digest TEXT NOT NULL,
        image TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        state TEXT NOT NULL,
        message TEXT,
        volumes TEXT NOT NULL,
        source_paused_ms INTEGER
    );
    CREATE INDEX snapshots_by_domain ON snapshots(domain_id, created_at);
    CREATE TABLE copies (
        id TEXT PRIMARY KEY,
        domain_id TEXT NOT NULL REFERENCES domains(id),
        kind TEXT NOT NULL,
        source_instance_id TEXT,
        target_instance_id TEXT,
        snapshot_id TEXT,
        backup_snapshot_id TEXT,
        tag TEXT,
        state TEXT NOT NULL,
        message TEXT,
        bytes_done INTEGER NOT NULL DEFAULT 0,
        bytes_total INTEGER,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE INDEX copies_by_state ON copies(state);",
    // 10: an instance keeps its last failure's message and time after it recovers.
    "ALTER TABLE instances ADD COLUMN last_failure_message TEXT;
    ALTER TABLE instances ADD COLUMN last_failure_at INTEGER;",
    // 11: where the runtime placed an instance (the swarm runtime's node): an opaque value the
    // runtime chose once, handed back to it on every later call for the instance.
    //     Also each reporter's latest report on a rollout, one row per reporter and session (a
    //     reporter per placement: the node whose engine the evidence was read through).
    "CREATE TABLE instance_placements (
        instance_id TEXT PRIMARY KEY REFERENCES instances(id),
        placement TEXT NOT NULL
    );
    CREATE TABLE rollout_reports (
        rollout_id TEXT NOT NULL REFERENCES rollouts(id),
        reporter_id TEXT NOT NULL,
        reporter_session_id TEXT NOT NULL,
        node_name TEXT NOT NULL,
        report_sequence INTEGER NOT NULL,
        reported_at INTEGER NOT NULL,
        observed INTEGER NOT NULL,
        healthy INTEGER NOT NULL,
        verified INTEGER NOT NULL,
        failed INTEGER NOT NULL,
        mismatch_reason TEXT,
        PRIMARY KEY (rollout_id, reporter_id, reporter_session_id)
    );",
    // 12: the store's identity, written once when the store is made (or first opened by a
    // berth that labels its objects with it): every engine object its daemon makes carries it.
    "CREATE TABLE store_identity (id TEXT PRIMARY KEY);",
    // 13: every volume an instance has had, by name: what it mounts and what spec changes
    // dropped, so a name that comes back mounts the same data and snapshots, restores,
    // branches and archive reach it.
    "ALTER TABLE instances ADD COLUMN kept_volumes TEXT NOT NULL DEFAULT '[]';
    UPDATE instances SET kept_volumes = volumes;",
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

/// How many writes may wait for the writer before a caller waits to hand one over.
const WRITE_QUEUE: usize = 1024;
/// Read connections kept open for reads that the in-memory view does not answer.
const READERS: usize = 2;

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// Domains and instances as last committed, answered without SQLite. The writer updates it
/// after each commit, before it answers the write, so a caller reads its own writes.
#[derive(Default)]
struct View {
    domains: HashMap<DomainId, Domain>,
    instances: HashMap<InstanceId, Instance>,
    by_key: HashMap<(DomainId, String), InstanceId>,
}

impl View {
    fn put_instance(&mut self, instance: Instance) {
        self.by_key.insert(
            (instance.domain_id.clone(), instance.key.clone()),
            instance.id.clone(),
        );
        self.instances.insert(instance.id.clone(), instance);
    }
}

/// What a transaction changed of the rows the view holds.
#[derive(Default)]
struct Touched {
    domains: Vec<DomainId>,
    instances: Vec<InstanceId>,
}

/// The store. One thread owns the write connection and takes writes over a bounded channel,
/// answering each on a oneshot; domains and instances are read from an in-memory view the
/// writer keeps current; every other read runs on a pooled read connection (WAL) on tokio's
/// blocking threads. No call blocks a runtime worker on SQLite.
pub struct Store {
    jobs: Jobs,
    view: Arc<RwLock<View>>,
    /// Where each commit's instance changes are published.
    watch: Arc<Watch>,
    /// `None` for a store in memory: its reads run where its writes do, on the only copy.
    readers: Option<Arc<Readers>>,
    /// Who reports rollouts from this store's daemon: a stable id, and a session id new with
    /// every open.
    reporter: Reporter,
    /// The store's id and data directory, which label every engine object its daemon makes.
    identity: StoreIdentity,
}

/// The one reporter of a berth daemon: it observes every rollout of its instances.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// Stable for the store's life: written once, at its first open.
    pub id: String,
    /// New with every open of the store, that is with every start of the daemon.
    pub session_id: String,
}

/// Where writes run.
enum Jobs {
    /// On the writer thread.
    Writer(tokio::sync::mpsc::Sender<Job>),
    /// On the caller's thread: only for a store in memory, in tests, where a job handed to
    /// another thread would let a paused test clock jump while the runtime waits for it.
    Inline(Mutex<Connection>),
}

struct Readers {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
}

impl Readers {
    fn take(&self) -> Result<Connection, StoreError> {
        if let Some(conn) = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(conn);
        }
        let conn = Connection::open_with_flags(
            &self.path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(conn)
    }

    fn give_back(&self, conn: Connection) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < READERS {
            idle.push(conn);
        }
    }
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
        Self::init(conn, Some(path.to_owned())).map_err(|e| match e {
            StoreError::Sqlite(e) => classify_open_error(&shown, e),
            other => other,
        })
    }

    /// Moves everything in the write-ahead log into the database file and empties the log, so
    /// that a stopped daemon leaves one self-contained file. Called at a clean shutdown.
    pub async fn checkpoint(&self) -> Result<(), StoreError> {
        self.submit(|conn| {
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                .map_err(StoreError::from)
        })
        .await?
    }

    /// An empty store in memory, for tests.
    pub fn in_memory() -> Result<Self, StoreError> {
        Self::init(Connection::open_in_memory()?, None)
    }

    fn init(mut conn: Connection, path: Option<PathBuf>) -> Result<Self, StoreError> {
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
        let view = Arc::new(RwLock::new(load_view(&conn)?));
        let watch = Arc::new(Watch::new());
        let reporter_id: Option<String> = conn
            .query_row("SELECT id FROM reporter LIMIT 1", [], |r| r.get(0))
            .optional()?;
        let reporter_id = match reporter_id {
            Some(id) => id,
            None => {
                let id = format!("brp:{}", uuid::Uuid::new_v4().hyphenated());
                conn.execute("INSERT INTO reporter (id) VALUES (?1)", [&id])?;
                id
            }
        };
        let reporter = Reporter {
            id: reporter_id,
            session_id: format!("brs:{}", uuid::Uuid::new_v4().hyphenated()),
        };
        let store_id: Option<String> = conn
            .query_row("SELECT id FROM store_identity LIMIT 1", [], |r| r.get(0))
            .optional()?;
        let store_id = match store_id {
            Some(id) => id,
            None => {
                let id = StoreIdentity::new_id();
                conn.execute("INSERT INTO store_identity (id) VALUES (?1)", [&id])?;
                id
            }
        };
        let identity = StoreIdentity {
            id: store_id,
            data_dir: path
                .as_ref()
                .and_then(|p| p.parent())
                .map(|d| d.display().to_string()),
        };
        if path.is_none() {
            return Ok(Self {
                jobs: Jobs::Inline(Mutex::new(conn)),
                view,
                watch,
                readers: None,
                reporter,
                identity,
            });
        }
        let (jobs, mut rx) = tokio::sync::mpsc::channel::<Job>(WRITE_QUEUE);
        std::thread::Builder::new()
            .name("berth-store".to_owned())
            .spawn(move || {
                while let Some(job) = rx.blocking_recv() {
                    // A job that panics drops its answer (its caller gets `Closed`); the
                    // connection is still good: an unfinished transaction rolls back on drop.
                    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn)));
                }
            })
            .map_err(|e| StoreError::Corrupt(format!("could not start the store's writer: {e}")))?;
        Ok(Self {
            jobs: Jobs::Writer(jobs),
            view,
            watch,
            readers: path.map(|path| {
                Arc::new(Readers {
                    path,
                    idle: Mutex::new(Vec::new()),
                })
            }),
            reporter,
            identity,
        })
    }

    async fn submit<T: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T, StoreError> {
        let jobs = match &self.jobs {
            Jobs::Writer(jobs) => jobs,
            Jobs::Inline(conn) => {
                let mut conn = conn.lock().unwrap_or_else(|e| e.into_inner());
                return std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn)))
                    .map_err(|_| StoreError::Closed);
            }
        };
        let (answer, answered) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let _ = answer.send(job(conn));
        });
        jobs.send(job).await.map_err(|_| StoreError::Closed)?;
        answered.await.map_err(|_| StoreError::Closed)
    }

    /// Runs `f` in one transaction on the writer: committed when it returns `Ok`, rolled back
    /// otherwise.
    pub async fn write<T, E>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<StoreError> + Send + 'static,
    {
        let (view, watch) = (self.view.clone(), self.watch.clone());
        self.submit(move |conn| {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(StoreError::from)?;
            let typed = Tx::new(&tx);
            let out = f(&typed)?;
            let touched = typed.touched.take();
            tx.commit().map_err(StoreError::from)?;
            refresh(conn, &view, &watch, touched);
            Ok(out)
        })
        .await
        .map_err(E::from)?
    }

    /// Runs `f` on a read connection, off the runtime's threads, in one read transaction.
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Tx<'_>) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let Some(readers) = self.readers.clone() else {
            return self.submit(move |conn| f(&Tx::new(conn))).await?;
        };
        tokio::task::spawn_blocking(move || {
            let mut conn = readers.take()?;
            let out = {
                let tx = conn.transaction()?;
                let out = f(&Tx::new(&tx));
                tx.finish()?;
                out
            };
            readers.give_back(conn);
            out
        })
        .await
        .map_err(|_| StoreError::Closed)?
    }

    /// The daemon's rollout reporter: its stable id and this start's session id.
    pub fn reporter(&self) -> &Reporter {
        &self.reporter
    }

    /// The store's id and data directory.
    pub fn identity(&self) -> &StoreIdentity {
        &self.identity
    }

    /// Where instance changes are published as they commit.
    pub fn watch(&self) -> &Arc<Watch> {
        &self.watch
    }

    fn view(&self) -> std::sync::RwLockReadGuard<'_, View> {
        // The view is replaced row by row under the write lock; a panic cannot tear a row.
        self.view.read().unwrap_or_else(|e| e.into_inner())
    }

    /// One domain by id, from memory.
    pub fn domain(&self, id: &DomainId) -> Option<Domain> {
        self.view().domains.get(id).cloned()
    }

    /// Every domain `owner` created, oldest first, from memory.
    pub fn domains_of(&self, owner: &str) -> Vec<Domain> {
        let mut domains: Vec<Domain> = self
            .view()
            .domains
            .values()
            .filter(|d| d.owner == owner)
            .cloned()
            .collect();
        domains.sort_by(|a, b| {
            (a.created_at, a.resource_domain_id.as_str())
                .cmp(&(b.created_at, b.resource_domain_id.as_str()))
        });
        domains
    }

    /// One instance by its domain and key, from memory.
    pub fn instance(&self, domain: &DomainId, key: &str) -> Option<Instance> {
        let view = self.view();
        let id = view.by_key.get(&(domain.clone(), key.to_owned()))?;
        view.instances.get(id).cloned()
    }

    /// One instance by id, from memory.
    pub fn instance_by_id(&self, id: &InstanceId) -> Option<Instance> {
        self.view().instances.get(id).cloned()
    }

    /// A domain's instances, the archived ones or every other one, by key; from memory.
    pub fn instances(&self, domain: &DomainId, archived: bool) -> Vec<Instance> {
        let mut instances: Vec<Instance> = self
            .view()
            .instances
            .values()
            .filter(|i| i.domain_id == *domain && (i.desired == Desired::Archived) == archived)
            .cloned()
            .collect();
        instances.sort_by(|a, b| a.key.cmp(&b.key));
        instances
    }

    /// The ids of every instance that is not archived, across all domains, from memory.
    pub fn live_instance_ids(&self) -> Vec<InstanceId> {
        let mut ids: Vec<InstanceId> = self
            .view()
            .instances
            .values()
            .filter(|i| i.desired != Desired::Archived)
            .map(|i| i.id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Every instance of every domain that is asked to run, from memory.
    pub fn running_instances(&self) -> Vec<Instance> {
        let mut instances: Vec<Instance> = self
            .view()
            .instances
            .values()
            .filter(|i| i.desired == Desired::Running)
            .cloned()
            .collect();
        instances.sort_by(|a, b| a.id.cmp(&b.id));
        instances
    }

    /// Records the volumes an instance mounts, ahead of making them: a crash between making one
    /// and recording the rest of an observation then leaves no volume berth made unlisted.
    pub async fn record_volumes(
        &self,
        id: &InstanceId,
        volumes: &[InstanceVolume],
    ) -> Result<(), StoreError> {
        let (id, volumes) = (id.clone(), volumes.to_vec());
        self.write(move |tx| tx.record_volumes(&id, &volumes)).await
    }

    /// Where the runtime placed the instance, when it gave a placement ([`Runtime::place`]).
    ///
    /// [`Runtime::place`]: crate::runtime::Runtime::place
    pub async fn placement(&self, id: &InstanceId) -> Result<Option<String>, StoreError> {
        let id = id.clone();
        self.read(move |tx| tx.placement(&id)).await
    }

    /// Records the instance's placement, once: a placement already recorded stays (moving an
    /// instance is never a second placement). Answers the placement that holds.
    pub async fn record_placement(
        &self,
        id: &InstanceId,
        placement: &str,
    ) -> Result<String, StoreError> {
        let (id, placement) = (id.clone(), placement.to_owned());
        self.write(move |tx| tx.record_placement(&id, &placement))
            .await
    }

    /// Records what the reconciler observed, leaving every desired field as it is.
    pub async fn record_observation(&self, obs: &Observation) -> Result<(), StoreError> {
        let obs = obs.clone();
        let reporter = self.reporter.clone();
        self.write(move |tx| {
            tx.record_observation(&obs)?;
            tx.report(
                &obs.id,
                obs.generation,
                Report::State(&obs.state),
                &reporter,
            )
        })
        .await
    }

    /// Records the image evidence the reconciler gathered for an instance, replacing the last,
    /// as a report on its newest rollout; `generation` is that of the desired state the
    /// reconcile read.
    pub async fn record_evidence(
        &self,
        id: &InstanceId,
        generation: i64,
        evidence: &ImageEvidence,
    ) -> Result<(), StoreError> {
        let (id, text, evidence) = (id.clone(), to_json(evidence)?, evidence.clone());
        let reporter = self.reporter.clone();
        self.write(move |tx| {
            tx.conn.execute(
                "INSERT INTO image_evidence (instance_id, evidence) VALUES (?1, ?2)
                 ON CONFLICT(instance_id) DO UPDATE SET evidence = ?2",
                params![id.as_str(), text],
            )?;
            tx.report(&id, generation, Report::Evidence(&evidence), &reporter)
        })
        .await
    }

    /// Records that the reconciler begins to act on the desired state of `generation` (make
    /// the image ready, create and start a container): a report on the newest rollout.
    pub async fn report_acting(&self, id: &InstanceId, generation: i64) -> Result<(), StoreError> {
        let (id, reporter) = (id.clone(), self.reporter.clone());
        self.write(move |tx| tx.report(&id, generation, Report::Acting, &reporter))
            .await
    }

    /// Records that berth observed the instance's image in its registry, with what the
    /// registry holds under its digest when that was read.
    pub async fn observe_release(
        &self,
        instance: &Instance,
        manifest: Option<RegistryManifest>,
    ) -> Result<(), StoreError> {
        let instance = instance.clone();
        self.write(move |tx| tx.observe_release(&instance, manifest.as_ref(), Timestamp::now()))
            .await
    }

    /// Records that berth started (or adopted) a verified container of the instance's current
    /// spec at `at`: the current release's last start moves, or, for another spec, the current
    /// release ends `replaced` and a new one begins.
    pub async fn record_release_start(
        &self,
        instance: &Instance,
        at: Timestamp,
    ) -> Result<(), StoreError> {
        let instance = instance.clone();
        self.write(move |tx| {
            tx.accept_release(&instance, at)?;
            let id = instance.id.as_str();
            let newest = tx.releases(&instance.id)?.into_iter().next();
            if let Some(current) = &newest
                && current.ended.is_none()
                && current.spec_digest == instance.spec_digest
            {
                tx.conn.execute(
                    "UPDATE releases SET last_started_at = max(last_started_at, ?3)
                     WHERE instance_id = ?1 AND seq = ?2",
                    params![id, current.seq, at.millis()],
                )?;
                return Ok(());
            }
            tx.end_release(&instance.id, ReleaseEnd::Replaced, at)?;
            tx.conn.execute(
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
        .await
    }
}

fn load_view(conn: &Connection) -> Result<View, StoreError> {
    let mut view = View::default();
    let mut stmt = conn.prepare("SELECT id, name, owner, state, created_at FROM domains")?;
    for domain in stmt.query_map([], domain_from_row)? {
        let domain = domain?;
        view.domains
            .insert(domain.resource_domain_id.clone(), domain);
    }
    let mut stmt = conn.prepare(&format!("SELECT {INSTANCE_COLUMNS} FROM instances"))?;
    for instance in stmt.query_map([], instance_from_row)? {
        view.put_instance(instance?);
    }
    Ok(view)
}

/// Reads the rows a committed transaction touched into the view, and publishes every instance
/// whose view changed (apart from `observedAt`). A row that cannot be read back is logged and
/// left as it was: the next write of it tries again.
fn refresh(conn: &Connection, view: &RwLock<View>, watch: &Watch, touched: Touched) {
    if touched.domains.is_empty() && touched.instances.is_empty() {
        return;
    }
    let tx = Tx::new(conn);
    let domains: Vec<Domain> = touched
        .domains
        .iter()
        .filter_map(|id| tx.domain(id).ok().flatten())
        .collect();
    let instances: Vec<Instance> = touched
        .instances
        .iter()
        .filter_map(|id| match tx.instance_by_id(id) {
            Ok(found) => found,
            Err(e) => {
                tracing::error!(instance = %id, error = %e, "the store could not read back an instance");
                None
            }
        })
        .collect();
    let mut view = view.write().unwrap_or_else(|e| e.into_inner());
    for domain in domains {
        view.domains
            .insert(domain.resource_domain_id.clone(), domain);
    }
    for instance in instances {
        let changed = view.instances.get(&instance.id).is_none_or(|old| {
            let mut old = old.clone();
            old.observed_at = instance.observed_at;
            old != instance
        });
        if changed {
            watch.publish(&instance.domain_id, InstanceChange::of(&instance));
        }
        view.put_instance(instance);
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
struct StoredVolume {
    name: String,
    docker_name: String,
    mount_path: String,
}

#[derive(serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
struct StoredVolumes(Vec<StoredVolume>);

impl StoredVolumes {
    fn into_volumes(self) -> Vec<InstanceVolume> {
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

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> rusqlite::Result<T> {
    serde_json::from_str(text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// Typed queries inside a transaction (or a read).
pub struct Tx<'a> {
    pub(crate) conn: &'a Connection,
    touched: RefCell<Touched>,
}

impl<'a> Tx<'a> {
    fn new(conn: &'a Connection) -> Self {
        Self {
            conn,
            touched: RefCell::new(Touched::default()),
        }
    }

    fn touch_domain(&self, id: &DomainId) {
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

/// An instance's last failure, kept after it recovers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct LastFailure {
    /// What went wrong, as the failed state said it.
    pub message: String,
    /// When it failed.
    pub at: Timestamp,
}

const INSTANCE_COLUMNS: &str = "id, domain_id, key, spec, spec_digest, desired, stop_reason, state,
    observed_at, started_at, last_reached_at, volumes, restart_count, generation,
    observed_generation, volume_tag, kept_volumes";

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
        volumes: volumes.into_volumes(),
        kept: kept.into_volumes(),
        restart_count: row.get(12)?,
        generation: row.get(13)?,
        observed_generation: row.get(14)?,
        volume_tag: row.get(15)?,
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

    /// Stores a new instance.
    pub fn insert_instance(&self, i: &Instance) -> Result<(), StoreError> {
        let volumes = to_json(&StoredVolumes::from(&i.volumes[..]))?;
        self.conn.execute(
            "INSERT INTO instances (id, domain_id, key, alias, worktree_key, spec, spec_digest,
                desired, stop_reason, state, observed_at, started_at, last_reached_at, volumes,
                restart_count, created_at, generation, observed_generation, volume_tag)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                ?18, ?19)",
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
            .conn
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
        let mut stmt = self.conn.prepare_cached(
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
        self.conn.execute(
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
            .conn
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
        self.conn.execute(
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
    /// One of `owner`'s workspaces by id: ids are per key.
    pub fn workspace(&self, owner: &str, id: &str) -> Result<Option<Workspace>, StoreError> {
        let sql =
            format!("SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE owner = ?1 AND id = ?2");
        Ok(self
            .conn
            .query_row(&sql, [owner, id], workspace_from_row)
            .optional()?)
    }

    /// Every workspace `owner` registered, by id.
    pub fn workspaces_of(&self, owner: &str) -> Result<Vec<Workspace>, StoreError> {
        let sql =
            format!("SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE owner = ?1 ORDER BY id");
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([owner], workspace_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every workspace linked to a domain.
    pub fn linked_workspaces(&self, domain: &DomainId) -> Result<Vec<Workspace>, StoreError> {
        let sql = format!(
            "SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE domain_id = ?1 ORDER BY id, owner"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([domain.as_str()], workspace_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Every linked workspace, across domains.
    pub fn all_linked_workspaces(&self) -> Result<Vec<Workspace>, StoreError> {
        let sql = format!(
            "SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE domain_id IS NOT NULL ORDER BY id, owner"
        );
        let mut stmt = self.conn.prepare_cached(&sql)?;
        let rows = stmt.query_map([], workspace_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Creates or replaces a workspace's registration (its link is kept).
    pub fn put_workspace(&self, w: &Workspace) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO workspaces (id, owner, containers, selector, domain_id, worktree_key, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT(owner, id) DO UPDATE SET containers = ?3, selector = ?4, domain_id = ?5, worktree_key = ?6",
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

    /// Deletes one of `owner`'s workspaces and its leases.
    pub fn delete_workspace(&self, owner: &str, id: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "DELETE FROM leases WHERE owner = ?1 AND workspace_id = ?2",
            [owner, id],
        )?;
        self.conn.execute(
            "DELETE FROM workspaces WHERE owner = ?1 AND id = ?2",
            [owner, id],
        )?;
        Ok(())
    }

    /// The leases of one of `owner`'s workspaces, soonest to expire first.
    pub fn leases(&self, owner: &str, workspace: &str) -> Result<Vec<Lease>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, owner, workspace_id, ttl_ms, expires_at FROM leases
             WHERE owner = ?1 AND workspace_id = ?2 ORDER BY expires_at, id",
        )?;
        let rows = stmt.query_map([owner, workspace], |r| {
            Ok(Lease {
                id: r.get(0)?,
                owner: r.get(1)?,
                workspace_id: r.get(2)?,
                ttl: std::time::Duration::from_millis(r.get::<_, i64>(3)?.max(0) as u64),
                expires_at: Timestamp::from_millis(r.get(4)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Creates or renews a lease.
    pub fn put_lease(&self, lease: &Lease) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO leases (id, owner, workspace_id, ttl_ms, expires_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT(id) DO UPDATE SET expires_at = ?5",
            params![
                lease.id,
                lease.owner,
                lease.workspace_id,
                lease.ttl.as_millis() as i64,
                lease.expires_at.millis()
            ],
        )?;
        Ok(())
    }

    /// Deletes a lease of one of `owner`'s workspaces; false when there was none.
    pub fn delete_lease(&self, owner: &str, workspace: &str, id: &str) -> Result<bool, StoreError> {
        Ok(self.conn.execute(
            "DELETE FROM leases WHERE owner = ?1 AND workspace_id = ?2 AND id = ?3",
            [owner, workspace, id],
        )? > 0)
    }

    /// Forgets leases that expired before `now`.
    pub fn delete_expired_leases(&self, now: Timestamp) -> Result<usize, StoreError> {
        Ok(self
            .conn
            .execute("DELETE FROM leases WHERE expires_at <= ?1", [now.millis()])?)
    }

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

    #[tokio::test]
    async fn domains_round_trip_and_are_listed_per_owner() {
        let store = Store::in_memory().unwrap();
        let mine = domain("a");
        let stored = mine.clone();
        store
            .write(move |tx| tx.insert_domain(&stored))
            .await
            .unwrap();
        store
            .write(|tx| tx.insert_domain(&domain("b")))
            .await
            .unwrap();
        assert_eq!(store.domains_of("a"), vec![mine.clone()]);
        let id = mine.resource_domain_id.clone();
        store
            .write(move |tx| tx.set_domain_state(&id, DomainState::Fenced))
            .await
            .unwrap();
        // The in-memory view answers what was committed, as SQLite does.
        let read = store.domain(&mine.resource_domain_id).unwrap();
        assert_eq!(read.state, DomainState::Fenced);
        let id = mine.resource_domain_id.clone();
        let from_sqlite = store.read(move |tx| tx.domain(&id)).await.unwrap();
        assert_eq!(from_sqlite, Some(read));
    }

    #[tokio::test]
    async fn a_failed_write_changes_nothing() {
        let store = Store::in_memory().unwrap();
        let d = domain("a");
        let result: Result<(), StoreError> = store
            .write(move |tx| {
                tx.insert_domain(&d)?;
                Err(StoreError::Corrupt("refused".into()))
            })
            .await;
        assert!(result.is_err());
        assert!(store.domains_of("a").is_empty());
        assert!(
            store
                .read(|tx| tx.domains_of("a"))
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_change_is_published_and_one_of_observed_at_alone_is_not() {
        let store = Store::in_memory().unwrap();
        let d = domain("a");
        let domain_id = d.resource_domain_id.clone();
        store.write(move |tx| tx.insert_domain(&d)).await.unwrap();
        let spec: Spec = serde_json::from_value(serde_json::json!({
            "alias": "db", "worktreeKey": null,
            "image": format!("r/x@sha256:{}", "a".repeat(64)),
            "command": null, "env": {}, "volumes": [],
            "limits": {"cpuMillicores": 100, "memoryBytes": 67108864},
            "ready": {"kind": "tcp", "port": 80}, "idleStopAfterSeconds": 60
        }))
        .unwrap();
        let instance = Instance {
            id: InstanceId::new(),
            domain_id: domain_id.clone(),
            key: "db".into(),
            spec_digest: spec.digest().to_string(),
            spec,
            desired: Desired::Running,
            stop_reason: None,
            state: InstanceState::NotStarted,
            observed_at: Timestamp::from_millis(1),
            started_at: None,
            last_reached_at: None,
            volumes: vec![],
            kept: vec![],
            restart_count: 0,
            generation: 1,
            observed_generation: 1,
            volume_tag: None,
        };
        let stored = instance.clone();
        store
            .write(move |tx| tx.insert_instance(&stored))
            .await
            .unwrap();
        let (mut feed, _, _) = store.watch().subscribe(&domain_id, None);

        let mut obs = Observation::of(&instance);
        obs.observed_at = Timestamp::from_millis(2);
        let only_time = obs.clone();
        store
            .write(move |tx| tx.record_observation(&only_time))
            .await
            .unwrap();
        assert!(feed.try_recv().is_err(), "observedAt alone is no change");

        obs.state = InstanceState::Starting {
            since: Timestamp::from_millis(3),
        };
        store
            .write(move |tx| tx.record_observation(&obs))
            .await
            .unwrap();
        let event = feed.try_recv().expect("a change of state is published");
        let change = event.change.instance().unwrap();
        assert_eq!(change.instance.state.kind(), "starting");
        assert_eq!(change.observed_generation, 1);

        // A failure is kept, with its time, after the instance recovers; a later one replaces it.
        async fn last(store: &Store, id: &InstanceId) -> Option<LastFailure> {
            let id = id.clone();
            store.read(move |tx| tx.last_failure(&id)).await.unwrap()
        }
        let id = instance.id.clone();
        assert_eq!(last(&store, &id).await, None, "never failed");
        for (at, state) in [
            (
                4,
                InstanceState::Failed {
                    at: Timestamp::from_millis(4),
                    message: "the first".into(),
                },
            ),
            (
                5,
                InstanceState::Running {
                    since: Timestamp::from_millis(5),
                },
            ),
        ] {
            let mut obs = Observation::of(&instance);
            obs.observed_at = Timestamp::from_millis(at);
            obs.state = state;
            store
                .write(move |tx| tx.record_observation(&obs))
                .await
                .unwrap();
        }
        assert_eq!(
            last(&store, &id).await,
            Some(LastFailure {
                message: "the first".into(),
                at: Timestamp::from_millis(4),
            })
        );
        let mut obs = Observation::of(&instance);
        obs.state = InstanceState::Failed {
            at: Timestamp::from_millis(6),
            message: "the second".into(),
        };
        store
            .write(move |tx| tx.record_observation(&obs))
            .await
            .unwrap();
        assert_eq!(last(&store, &id).await.unwrap().message, "the second");
    }

    #[tokio::test]
    async fn a_write_that_panics_leaves_the_store_working() {
        let store = Store::in_memory().unwrap();
        let result: Result<(), StoreError> = store
            .write(|tx| {
                tx.insert_domain(&domain("a"))?;
                panic!("a bug in a write");
            })
            .await;
        assert!(matches!(result, Err(StoreError::Closed)));
        assert!(store.domains_of("a").is_empty());
        store
            .write(|tx| tx.insert_domain(&domain("a")))
            .await
            .unwrap();
        assert_eq!(store.domains_of("a").len(), 1);
    }

    #[tokio::test]
    async fn workspaces_are_per_key_and_migration_5_keeps_their_owners() {
        let conn = Connection::open_in_memory().unwrap();
        for sql in &MIGRATIONS[..4] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 4).unwrap();
        conn.execute_batch(
            "INSERT INTO workspaces (id, owner, containers, selector, created_at)
                 VALUES ('ide-1', 'a', '[\"dev\"]', NULL, 1);
             INSERT INTO leases (id, workspace_id, ttl_ms, expires_at)
                 VALUES ('lse:1', 'ide-1', 1000, 2);",
        )
        .unwrap();
        let store = Store::init(conn, None).unwrap();
        let kept = store
            .read(|tx| tx.workspace("a", "ide-1"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(kept.containers, vec!["dev".to_owned()]);
        let leases = |owner: &'static str| store.read(move |tx| tx.leases(owner, "ide-1"));
        assert_eq!(leases("a").await.unwrap().len(), 1);
        assert!(
            store
                .read(|tx| tx.workspace("b", "ide-1"))
                .await
                .unwrap()
                .is_none()
        );
        let theirs = Workspace {
            owner: "b".into(),
            containers: vec![],
            ..kept.clone()
        };
        store
            .write(move |tx| tx.put_workspace(&theirs))
            .await
            .unwrap();
        assert_eq!(
            store.read(|tx| tx.workspace("a", "ide-1")).await.unwrap(),
            Some(kept)
        );
        assert!(leases("b").await.unwrap().is_empty());
        store
            .write(|tx| tx.delete_workspace("b", "ide-1"))
            .await
            .unwrap();
        assert_eq!(leases("a").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn the_schema_and_the_view_survive_reopening_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("berth.db");
        let d = domain("a");
        let stored = d.clone();
        Store::open(&path)
            .unwrap()
            .write(move |tx| tx.insert_domain(&stored))
            .await
            .unwrap();
        let again = Store::open(&path).unwrap();
        assert_eq!(again.domains_of("a"), vec![d.clone()]);
        assert_eq!(again.read(|tx| tx.domains_of("a")).await.unwrap(), vec![d]);
    }
}
