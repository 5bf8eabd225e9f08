//! The store's handle: opening the database (migrations, the integrity check, the store's
//! identity), the writer thread every write goes through, the readers, and the reads.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::{StoreError, classify_open_error};
use crate::migrations::{MIGRATIONS, quick_check};
use crate::tx::{Observation, Tx, to_json};
use crate::view::{View, load_view, refresh};
use berth_domain::evidence::ImageEvidence;
use berth_domain::ids::{DomainId, InstanceId};
use berth_domain::model::{Desired, Domain, Instance, InstanceVolume, ReleaseEnd};
use berth_domain::ownership::StoreIdentity;
use berth_domain::rollouts::Report;
use berth_domain::rollouts::Reporter;
use berth_domain::runtime::RegistryManifest;
use berth_domain::time::Timestamp;
use berth_domain::watch::Watch;
use berth_domain::worktrees::Worktree;

/// What a lookup of one instance by its domain and key found, the domain's owner checked.
#[derive(Debug, PartialEq, Eq)]
pub enum Found<T> {
    /// No such domain.
    NoDomain,
    /// The domain is another owner's.
    NotOwner,
    /// The domain has no instance of that key.
    NoInstance,
    /// The instance.
    Instance(T),
}

/// How many writes may wait for the writer before a caller waits to hand one over.
const WRITE_QUEUE: usize = 1024;
/// Read connections kept open for reads that the in-memory view does not answer.
const READERS: usize = 2;

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

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

    pub(crate) fn init(mut conn: Connection, path: Option<PathBuf>) -> Result<Self, StoreError> {
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
        let id = view.id_by_key(domain, key)?;
        view.instances.get(id).cloned()
    }

    /// One instance's id and revision by its domain and key, the domain's owner checked, in
    /// one read of memory: the revision is new whenever the instance is written (its view may
    /// then differ), the same while it is not.
    pub fn instance_revision(
        &self,
        owner: &str,
        domain: &DomainId,
        key: &str,
    ) -> Found<(InstanceId, u64)> {
        let view = self.view();
        match view.domains.get(domain) {
            None => return Found::NoDomain,
            Some(d) if d.owner != owner => return Found::NotOwner,
            Some(_) => {}
        }
        view.id_by_key(domain, key)
            .and_then(|id| Some((id.clone(), *view.revisions.get(id)?)))
            .map_or(Found::NoInstance, Found::Instance)
    }

    /// One instance by its domain and key with its revision, read together, from memory.
    pub fn instance_at(&self, domain: &DomainId, key: &str) -> Option<(Instance, u64)> {
        let view = self.view();
        let id = view.id_by_key(domain, key)?;
        Some((view.instances.get(id)?.clone(), *view.revisions.get(id)?))
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

    /// One worktree key's record, from memory.
    pub fn worktree(&self, domain: &DomainId, key: &str) -> Option<Worktree> {
        self.view().worktrees.get(domain)?.get(key).cloned()
    }

    /// The record of the worktree an instance belongs to, from memory; `None` for a shared
    /// instance and a key no CLI told of.
    pub fn worktree_of(&self, id: &InstanceId) -> Option<Worktree> {
        let view = self.view();
        let instance = view.instances.get(id)?;
        let key = instance.spec.worktree_key.as_ref()?;
        view.worktrees.get(&instance.domain_id)?.get(key).cloned()
    }

    /// A domain's worktree records by key, from memory.
    pub fn worktrees(&self, domain: &DomainId) -> Vec<Worktree> {
        let mut worktrees: Vec<Worktree> = self
            .view()
            .worktrees
            .get(domain)
            .map(|w| w.values().cloned().collect())
            .unwrap_or_default();
        worktrees.sort_by(|a, b| a.key.cmp(&b.key));
        worktrees
    }

    /// Every worktree record the daemon watches that has not ended, across domains.
    pub fn watched_worktrees(&self) -> Vec<Worktree> {
        self.view()
            .worktrees
            .values()
            .flat_map(|w| w.values())
            .filter(|w| w.watched && w.ended_at.is_none())
            .cloned()
            .collect()
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
    /// [`Runtime::place`]: berth_domain::runtime::Runtime::place
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

    /// Records the observation of an instance a copy holds, with the volumes the store has when
    /// it is written rather than those the reconcile read: the copy may have switched them in
    /// between (it does not hold the instance's lock), and the volumes read before would undo
    /// the switch.
    pub async fn record_held_observation(&self, obs: &Observation) -> Result<(), StoreError> {
        self.observe(obs, true).await
    }

    /// Records what the reconciler observed, leaving every desired field as it is.
    pub async fn record_observation(&self, obs: &Observation) -> Result<(), StoreError> {
        self.observe(obs, false).await
    }

    /// Records `obs` and reports its state on the instance's rollout; with `stored_volumes`,
    /// with the volumes the store has, read in the same transaction.
    async fn observe(&self, obs: &Observation, stored_volumes: bool) -> Result<(), StoreError> {
        let mut obs = obs.clone();
        let reporter = self.reporter.clone();
        self.write(move |tx| {
            if stored_volumes && let Some(now) = tx.instance_by_id(&obs.id)? {
                obs.volumes = now.volumes;
            }
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
