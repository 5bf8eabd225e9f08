//! The reconciler's decisions, against an in-memory runtime. (The Docker driver itself is tested
//! against the real engine in berth-docker and in the end-to-end tests.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use berth_core::controllers::{Next, ReconcileConfig, Reconciler};
use berth_core::evidence::{MismatchReason, VerificationStatus};
use berth_core::image::PinnedImage;
use berth_core::model::{InstanceState, InstanceView, ReleaseEnd};
use berth_core::rollouts::{RolloutStatus, RolloutView};
use berth_core::runtime::*;
use berth_core::spec::Ready;
use berth_core::store::Store;
use berth_core::{Berth, InstanceId, UpCause};
use serde_json::json;
use tokio::sync::{Notify, mpsc};

#[derive(Default)]
struct World {
    /// Where [`Runtime::place`] places a new instance (a runtime with more than one place).
    placement: Option<String>,
    /// How many times an instance was placed.
    placed: u32,
    containers: BTreeMap<String, ContainerFacts>,
    volumes: BTreeMap<String, Labels>,
    networks: BTreeMap<String, Labels>,
    image_failure: Option<ImageFailure>,
    image_volumes: Vec<String>,
    /// Local images by id, with their normalised RepoDigests.
    images: BTreeMap<String, Vec<String>>,
    ready: bool,
    calls: Vec<String>,
    /// What a container's followed output gives, when a test feeds it.
    output: Option<mpsc::UnboundedReceiver<bytes::Bytes>>,
    /// The next this many inspects panic, as a bug in a reconcile would.
    panics: u32,
    /// Every start fails, as the engine does for a mount path that is a file in the image.
    start_error: Option<String>,
    /// Every start fails with this, as a runtime answers when the instance's place cannot run
    /// it until a person acts (a swarm node drained).
    start_foreign: Option<String>,
    /// Every create fails, as an engine that checks mounts at create (Docker 20.10) does.
    create_error: Option<String>,
    /// A container made to be started next is started as it is made, as the swarm runtime
    /// makes a service with its replica.
    start_on_create: bool,
    /// Inspects under way now, and the most seen at once.
    inspecting: u32,
    most_inspecting: u32,
    /// The next image made ready waits here: `entered` is told, then it waits for `release`,
    /// as a pull from a slow registry would.
    pull_gate: Option<(Arc<Notify>, Arc<Notify>)>,
    /// What each volume holds, as far as copies go.
    contents: BTreeMap<String, String>,
    /// Containers paused now.
    paused: Vec<String>,
    /// Pauses happen but inspects do not say so, as the swarm runtime's service facts.
    hide_pauses: bool,
    /// Every copy fails with this.
    copy_error: Option<String>,
    /// Copies wait for a permit on this, when set.
    copy_gate: Option<Arc<tokio::sync::Semaphore>>,
    /// When set, only copies from these volumes wait on `copy_gate`.
    gated: Option<std::collections::BTreeSet<String>>,
    /// The volume each copy read, in the order the copies reached the runtime (before the gate).
    entered: Vec<String>,
    /// Copies in the runtime now, and the most seen at once.
    copying: u32,
    most_copying: u32,
}

#[derive(Clone, Default)]
struct Fake(Arc<Mutex<World>>);

impl Fake {
    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.0.lock().unwrap()
    }
}

#[async_trait]
impl Runtime for Fake {
    fn kind(&self) -> &'static str {
        "fake"
    }
    async fn place(&self, _labels: &Labels) -> Result<Option<String>, RuntimeError> {
        let mut world = self.world();
        world.placed += 1;
        Ok(world.placement.clone())
    }
    async fn ensure_image(&self, image: &PinnedImage) -> Result<ImageFacts, RuntimeError> {
        let gate = self.world().pull_gate.take();
        if let Some((entered, release)) = gate {
            entered.notify_one();
            release.notified().await;
        }
        let w = self.world();
        if let Some(failure) = w.image_failure {
            return Err(RuntimeError::Image {
                failure,
                message: format!("no {}", image.digest()),
            });
        }
        let mut w = w;
        w.images.insert(IMAGE_ID.into(), vec![image.repo_digest()]);
        Ok(ImageFacts {
            image_id: IMAGE_ID.into(),
            repo_digests: vec![image.repo_digest()],
            volumes: w.image_volumes.clone(),
            exposed_tcp_ports: vec![],
        })
    }
    async fn image_facts_by_id(&self, image_id: &str) -> Result<Option<ImageFacts>, RuntimeError> {
        Ok(self
            .world()
            .images
            .get(image_id)
            .map(|repo_digests| ImageFacts {
                image_id: image_id.into(),
                repo_digests: repo_digests.clone(),
                ..Default::default()
            }))
    }
    async fn ensure_network(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
        self.world()
            .networks
            .entry(name.into())
            .or_insert_with(|| labels.clone());
        Ok(())
    }
    async fn ensure_volume(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
        let mut w = self.world();
        match w.volumes.get(name) {
            // As the engine's driver does: every label asked for must be there; others may be.
            Some(existing) if labels.iter().any(|(k, v)| existing.get(k) != Some(v)) => Err(
                RuntimeError::Foreign(format!("volume {name} is not berth's")),
            ),
            Some(_) => Ok(()),
            None => {
                w.volumes.insert(name.into(), labels.clone());
                Ok(())
            }
        }
    }
    async fn connect_network(
        &self,
        network: &str,
        container: &str,
        aliases: &[String],
    ) -> Result<(), RuntimeError> {
        let mut w = self.world();
        w.calls.push(format!("connect {container} {network}"));
        let c = w
            .containers
            .get_mut(container)
            .ok_or_else(|| RuntimeError::NotFound(container.into()))?;
        c.networks
            .entry(network.into())
            .or_insert_with(|| aliases.to_vec());
        Ok(())
    }
    async fn remove_network(&self, name: &str, _: &str) -> Result<(), RuntimeError> {
        self.world().networks.remove(name);
        Ok(())
    }
    async fn disconnect_network(&self, network: &str, container: &str) -> Result<(), RuntimeError> {
        let mut w = self.world();
        w.calls.push(format!("disconnect {container} {network}"));
        if let Some(c) = w.containers.get_mut(container) {
            c.networks.remove(network);
        }
        Ok(())
    }
    async fn list_labelled(&self, label: &str) -> Result<Vec<ContainerFacts>, RuntimeError> {
        let (k, v) = label.split_once('=').unwrap();
        Ok(self
            .world()
            .containers
            .values()
            .filter(|c| c.labels.get(k).map(String::as_str) == Some(v))
            .cloned()
            .collect())
    }
    async fn inspect_container(&self, name: &str) -> Result<Option<ContainerFacts>, RuntimeError> {
        {
            let mut w = self.world();
            if w.panics > 0 {
                w.panics -= 1;
                drop(w);
                panic!("an injected bug");
            }
            w.inspecting += 1;
            w.most_inspecting = w.most_inspecting.max(w.inspecting);
        }
        // Let other reconciles run in between, as a real engine call would.
        tokio::task::yield_now().await;
        let mut w = self.world();
        w.inspecting -= 1;
        Ok(w.containers.get(name).cloned())
    }
    async fn create_container(&self, plan: &ContainerPlan) -> Result<String, RuntimeError> {
        let mut w = self.world();
        if w.containers.contains_key(&plan.name) {
            return Err(RuntimeError::Conflict(plan.name.clone()));
        }
        w.calls.push(format!("create {}", plan.name));
        if let Some(e) = &w.create_error {
            return Err(RuntimeError::Engine(e.clone()));
        }
        let networks = BTreeMap::from([(plan.network.clone(), plan.aliases.clone())]);
        w.containers.insert(
            plan.name.clone(),
            ContainerFacts {
                id: plan.name.clone(),
                name: plan.name.clone(),
                labels: plan.labels.clone(),
                networks,
                image_id: IMAGE_ID.into(),
                config_image: plan.image.clone(),
                ..Default::default()
            },
        );
        Ok(plan.name.clone())
    }
    async fn create_container_to_start(
        &self,
        plan: &ContainerPlan,
    ) -> Result<String, RuntimeError> {
        self.world().calls.push(format!("to start {}", plan.name));
        let id = self.create_container(plan).await?;
        let mut w = self.world();
        if w.start_on_create
            && let Some(c) = w.containers.get_mut(&id)
        {
            c.running = true;
            c.started_at = Some("2026-11-29T10:00:00Z".into());
            c.addresses = c
                .networks
                .keys()
                .map(|n| (n.clone(), std::net::IpAddr::from([172, 18, 0, 2])))
                .collect();
        }
        Ok(id)
    }
    async fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        let mut w = self.world();
        w.calls.push(format!("start {id}"));
        if let Some(e) = &w.start_error {
            return Err(RuntimeError::Engine(e.clone()));
        }
        if let Some(e) = &w.start_foreign {
            return Err(RuntimeError::Foreign(e.clone()));
        }
        let c = w
            .containers
            .get_mut(id)
            .ok_or_else(|| RuntimeError::NotFound(id.into()))?;
        c.running = true;
        c.started_at = Some("2026-11-29T10:00:00Z".into());
        // As Docker does: a running container has an address on each of its networks.
        c.addresses = c
            .networks
            .keys()
            .map(|n| (n.clone(), std::net::IpAddr::from([172, 18, 0, 2])))
            .collect();
        Ok(())
    }
    async fn stop_container(&self, id: &str, _: Duration) -> Result<(), RuntimeError> {
        let mut w = self.world();
        w.calls.push(format!("stop {id}"));
        if w.containers.get(id).is_some_and(|c| c.paused) {
            w.calls.push(format!("stop of a paused {id}"));
        }
        if let Some(c) = w.containers.get_mut(id) {
            c.running = false;
            c.finished_at = Some("2026-11-29T10:00:05Z".into());
        }
        Ok(())
    }
    async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        let mut w = self.world();
        w.calls.push(format!("remove {id}"));
        w.containers.remove(id);
        Ok(())
    }
    async fn probe(
        &self,
        _: &ContainerFacts,
        _: &str,
        _: &Ready,
        _: Duration,
    ) -> Result<bool, RuntimeError> {
        Ok(self.world().ready)
    }
    async fn list_containers(&self, _: &str) -> Result<Vec<ContainerFacts>, RuntimeError> {
        Ok(self.world().containers.values().cloned().collect())
    }
    async fn volume_bytes(
        &self,
        names: &[String],
    ) -> Result<BTreeMap<String, Option<u64>>, RuntimeError> {
        Ok(names.iter().map(|n| (n.clone(), Some(42))).collect())
    }
    async fn exec(
        &self,
        _: &str,
        _: ExecRequest,
        _: ExecStdin,
    ) -> Result<ExecOutcome, RuntimeError> {
        Err(RuntimeError::Engine("no exec in the fake".into()))
    }
    fn logs(&self, _: &str, _: Option<u64>, _: bool) -> LogStream {
        match self.world().output.take() {
            Some(rx) => Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|chunk| (Ok(chunk), rx))
            })),
            None => Box::pin(futures_util::stream::empty()),
        }
    }
    fn watch(&self, _: &str) -> mpsc::Receiver<RuntimeEvent> {
        mpsc::channel(1).1
    }
    async fn pause_container(&self, id: &str) -> Result<(), RuntimeError> {
        let mut w = self.world();
        w.calls.push(format!("pause {id}"));
        w.paused.push(id.to_owned());
        let shown = !w.hide_pauses;
        if let Some(c) = w.containers.values_mut().find(|c| c.id == id) {
            c.paused = c.running && shown;
        }
        Ok(())
    }
    async fn unpause_container(&self, id: &str) -> Result<(), RuntimeError> {
        let mut w = self.world();
        w.calls.push(format!("unpause {id}"));
        w.paused.retain(|p| p != id);
        if let Some(c) = w.containers.values_mut().find(|c| c.id == id) {
            c.paused = false;
        }
        Ok(())
    }
    async fn volume_labels(&self, name: &str) -> Result<Option<Labels>, RuntimeError> {
        Ok(self.world().volumes.get(name).cloned())
    }
    async fn create_volume(&self, name: &str, labels: &Labels) -> Result<(), RuntimeError> {
        let mut w = self.world();
        if w.volumes.contains_key(name) {
            return Err(RuntimeError::Conflict(format!("{name} exists")));
        }
        w.volumes.insert(name.to_owned(), labels.clone());
        Ok(())
    }
    async fn remove_volume(
        &self,
        name: &str,
        label: &str,
        value: &str,
    ) -> Result<(), RuntimeError> {
        let mut w = self.world();
        match w.volumes.get(name) {
            None => Ok(()),
            Some(l) if l.get(label).map(String::as_str) == Some(value) => {
                w.volumes.remove(name);
                w.contents.remove(name);
                w.calls.push(format!("remove volume {name}"));
                Ok(())
            }
            Some(_) => Err(RuntimeError::Foreign(name.to_owned())),
        }
    }
    async fn copy_volume(
        &self,
        plan: &CopyPlan,
        progress: &(dyn Fn(u64) + Send + Sync),
    ) -> Result<Copied, RuntimeError> {
        let gate = {
            let mut w = self.world();
            w.entered.push(plan.from.clone());
            w.copying += 1;
            w.most_copying = w.most_copying.max(w.copying);
            let gated = w.gated.as_ref().is_none_or(|g| g.contains(&plan.from));
            w.copy_gate.clone().filter(|_| gated)
        };
        if let Some(gate) = gate {
            gate.acquire().await.unwrap().forget();
        }
        // As the engine's runtime does: the container to freeze is paused only while the bytes
        // move, and thawed whatever happens.
        if let Some(id) = &plan.freeze {
            self.pause_container(id).await?;
        }
        let copied = {
            let mut w = self.world();
            w.calls.push(format!("copy {} -> {}", plan.from, plan.to));
            match w.copy_error.clone() {
                Some(e) => Err(RuntimeError::Engine(e)),
                None => {
                    let data = w.contents.get(&plan.from).cloned().unwrap_or_default();
                    let bytes = data.len() as u64;
                    w.contents.insert(plan.to.clone(), data);
                    Ok(bytes)
                }
            }
        };
        if let Some(id) = &plan.freeze {
            self.unpause_container(id).await?;
        }
        self.world().copying -= 1;
        let bytes = copied?;
        progress(bytes);
        Ok(Copied {
            bytes,
            frozen: plan
                .freeze
                .as_ref()
                .map(|_| std::time::Duration::from_millis(1)),
        })
    }
}

const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const IMAGE_ID: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const OTHER_IMAGE_ID: &str =
    "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn spec() -> serde_json::Value {
    json!({
        "alias": "db", "worktreeKey": null,
        "image": format!("127.0.0.1:5000/fixtures/busybox@sha256:{HEX}"),
        "command": null, "env": {},
        "volumes": [{"name": "data", "mountPath": "/data"}],
        "limits": {"cpuMillicores": 100, "memoryBytes": 67108864},
        "ready": {"kind": "tcp", "port": 80},
        "idleStopAfterSeconds": 60
    })
}

struct Setup {
    fake: Fake,
    /// The store both share, for what a test reads of it directly.
    store: Arc<Store>,
    berth: Berth,
    reconciler: Reconciler,
    domain: berth_core::DomainId,
}

async fn setup() -> Setup {
    let fake = Fake::default();
    let store = Arc::new(Store::in_memory().unwrap());
    let reconciler = Reconciler::new(
        store.clone(),
        Arc::new(fake.clone()),
        ReconcileConfig {
            restart_backoff: Duration::from_secs(1),
            ..ReconcileConfig::default()
        },
    );
    let berth = Berth::new(store.clone(), Some(reconciler.clone()), "fake");
    let domain = berth
        .create_domain("owner", "p".into())
        .await
        .unwrap()
        .resource_domain_id;
    Setup {
        fake,
        store,
        berth,
        reconciler,
        domain,
    }
}

impl Setup {
    /// An `up` of `key` by the owner in the test's domain: the instance as stored.
    async fn up(&self, key: &str, spec: &serde_json::Value, cause: UpCause) -> InstanceView {
        self.berth
            .up("owner", &self.domain, key, spec, cause)
            .await
            .unwrap()
    }

    /// [`Setup::up`], answering the instance's id.
    async fn up_id(&self, key: &str, spec: &serde_json::Value, cause: UpCause) -> InstanceId {
        self.up(key, spec, cause).await.resource_instance_id
    }

    /// The instance `key` as the owner reads it.
    fn get(&self, key: &str) -> InstanceView {
        self.berth.get("owner", &self.domain, key).unwrap()
    }

    /// The releases of `key`, newest first.
    async fn releases(&self, key: &str) -> Vec<berth_core::model::ReleaseView> {
        self.berth
            .releases("owner", &self.domain, key)
            .await
            .unwrap()
    }

    /// A snapshot of `key` named `name`, as taken (its copy under way).
    async fn snapshot(&self, key: &str, name: &str) -> berth_core::snapshots::SnapshotView {
        self.berth
            .snapshot("owner", &self.domain, key, name.into())
            .await
            .unwrap()
    }

    /// The snapshot `id` as the owner reads it.
    async fn get_snapshot(
        &self,
        id: &berth_core::ids::SnapshotId,
    ) -> berth_core::snapshots::SnapshotView {
        self.berth
            .get_snapshot("owner", &self.domain, id)
            .await
            .unwrap()
    }

    /// A restore of `key` from snapshot `id`: the instance and the snapshot of what it replaces.
    async fn restore(
        &self,
        key: &str,
        id: &berth_core::ids::SnapshotId,
    ) -> (InstanceView, berth_core::snapshots::SnapshotView) {
        self.berth
            .restore("owner", &self.domain, key, id)
            .await
            .unwrap()
    }

    /// The image evidence of `key`.
    async fn evidence(&self, key: &str) -> berth_core::evidence::ImageEvidence {
        self.berth
            .image_evidence("owner", &self.domain, key)
            .await
            .unwrap()
    }
}

/// A setup whose runtime answers every ready check at once.
async fn ready_setup() -> Setup {
    let s = setup().await;
    s.fake.world().ready = true;
    s
}

/// A ready setup with `db` (the standard spec) up by `use` and converged: its id.
async fn running_db() -> (Setup, InstanceId) {
    let s = ready_setup().await;
    let id = s.up_id("db", &spec(), UpCause::Use).await;
    converge(&s, &id).await;
    (s, id)
}

fn state(s: &Setup, key: &str) -> InstanceState {
    s.get(key).state
}

async fn converge(s: &Setup, id: &InstanceId) -> Next {
    let mut last = Next::Done;
    for _ in 0..10 {
        last = s.reconciler.reconcile(id).await.unwrap();
        if last == Next::Done || matches!(last, Next::After(d) if d >= Duration::from_millis(100)) {
            break;
        }
    }
    last
}

#[tokio::test]
async fn a_new_instance_is_created_started_and_running_once_ready() {
    let s = ready_setup().await;
    let view = s.up("db", &spec(), UpCause::Use).await;
    assert_eq!(view.state, InstanceState::NotStarted);
    let next = converge(&s, &view.resource_instance_id).await;
    assert_eq!(next, Next::Done);
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
    let w = s.fake.world();
    assert_eq!(w.containers.len(), 1);
    assert_eq!(w.volumes.len(), 1);
    assert_eq!(w.networks.len(), 1);
    assert_eq!(
        w.calls.iter().filter(|c| c.starts_with("create")).count(),
        1
    );
    assert!(
        !w.calls.iter().any(|c| c.starts_with("connect")),
        "created on its one network: {:?}",
        w.calls
    );
}

/// A container nothing has to happen to between its making and its start is made with
/// `create_container_to_start`; a runtime that starts it then still has its start recorded and
/// its evidence proved, as any start's. A worktree instance that shadows a shared one (its
/// start detaches the shared one from the view first) is made the ordinary way.
#[tokio::test]
async fn a_container_started_as_it_is_made_is_recorded_and_proved_as_any_start() {
    let s = setup().await;
    {
        let mut w = s.fake.world();
        w.ready = true;
        w.start_on_create = true;
    }
    let view = s.up("db", &spec(), UpCause::Use).await;
    assert_eq!(converge(&s, &view.resource_instance_id).await, Next::Done);
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
    let instance = s.store.instance(&s.domain, "db").unwrap();
    assert!(
        instance.started_at.is_some(),
        "the start is recorded: {instance:?}"
    );
    {
        let w = s.fake.world();
        let made: Vec<_> = w
            .calls
            .iter()
            .filter(|c| c.starts_with("to start") || c.starts_with("create"))
            .collect();
        assert_eq!(
            made.len(),
            2,
            "made once, told its start follows: {:?}",
            w.calls
        );
        assert!(made[0].starts_with("to start"), "{:?}", w.calls);
    }
    let releases = s.releases("db").await;
    assert_eq!(releases.len(), 1, "its start is a verified release");

    // A worktree instance under the shared one's alias: the ordinary create, then the start.
    s.fake.world().calls.clear();
    let mut worktree = spec();
    worktree["worktreeKey"] = serde_json::json!("feature");
    let view = s.up("db@feature", &worktree, UpCause::Use).await;
    converge(&s, &view.resource_instance_id).await;
    assert!(matches!(
        state(&s, "db@feature"),
        InstanceState::Running { .. }
    ));
    let w = s.fake.world();
    assert!(
        !w.calls.iter().any(|c| c.starts_with("to start")),
        "{:?}",
        w.calls
    );
    assert!(
        w.calls.iter().any(|c| c.starts_with("start ")),
        "{:?}",
        w.calls
    );
}

/// `GET`'s serialized view is exactly the view's JSON, and follows every write of the
/// instance (an `observedAt` alone too), never answering an older one.
#[tokio::test]
async fn the_serialized_view_is_the_views_json_at_every_revision() {
    let s = ready_setup().await;
    let json = |s: &Setup| {
        let bytes = s.berth.get_json("owner", &s.domain, "db").unwrap();
        let view = s.get("db");
        assert_eq!(
            bytes.as_ref(),
            serde_json::to_vec(&view).unwrap().as_slice(),
            "the serialized view is the view's JSON"
        );
        bytes
    };
    let view = s.up("db", &spec(), UpCause::Use).await;
    let first = json(&s);
    assert_eq!(
        json(&s),
        first,
        "an unchanged instance answers the same bytes"
    );
    converge(&s, &view.resource_instance_id).await;
    let running = json(&s);
    assert_ne!(running, first, "a write is seen at once");
    let parsed: serde_json::Value = serde_json::from_slice(&running).unwrap();
    assert_eq!(parsed["state"]["kind"], "running");
    assert!(
        s.berth.get_json("other", &s.domain, "db").is_err(),
        "another owner is refused as by get"
    );
    assert!(s.berth.get_json("owner", &s.domain, "nope").is_err());
}

#[tokio::test]
async fn a_shared_instance_joins_every_view_its_alias_is_not_shadowed_in() {
    let s = ready_setup().await;
    let shared = s.up_id("db", &spec(), UpCause::Use).await;
    let mut k1 = spec();
    k1["worktreeKey"] = json!("k1");
    let k1_id = s.up_id("db@k1", &k1, UpCause::Use).await;
    let mut mail = spec();
    mail["alias"] = json!("mail");
    mail["worktreeKey"] = json!("k2");
    s.up("mail@k2", &mail, UpCause::Use).await;
    converge(&s, &k1_id).await;
    converge(&s, &shared).await;
    let w = s.fake.world();
    let shared_c = w
        .containers
        .values()
        .find(|c| c.labels["berth.key"] == "db")
        .unwrap();
    let nets: Vec<&String> = shared_c.networks.keys().collect();
    assert_eq!(
        nets.len(),
        2,
        "the base network and k2's view, not k1's: {nets:?}"
    );
    assert!(
        shared_c
            .networks
            .values()
            .all(|a| a == &vec!["db".to_owned()])
    );
    let k1_c = w
        .containers
        .values()
        .find(|c| c.labels["berth.key"] == "db@k1")
        .unwrap();
    assert_eq!(k1_c.networks.len(), 1);
    assert!(
        k1_c.networks
            .keys()
            .all(|n| !shared_c.networks.contains_key(n)),
        "no network holds two db"
    );
}

#[tokio::test]
async fn an_unready_instance_keeps_starting_and_is_probed_again_soon() {
    let s = setup().await;
    let view = s.up("db", &spec(), UpCause::Use).await;
    let id = view.resource_instance_id;
    s.reconciler.reconcile(&id).await.unwrap();
    let next = s.reconciler.reconcile(&id).await.unwrap();
    assert!(
        matches!(next, Next::After(d) if d <= Duration::from_millis(500)),
        "{next:?}"
    );
    assert!(matches!(state(&s, "db"), InstanceState::Starting { .. }));
}

#[tokio::test]
async fn an_image_that_cannot_be_had_fails_the_instance_and_creates_nothing() {
    let s = setup().await;
    s.fake.world().image_failure = Some(ImageFailure::RequestedDigestMissing);
    let view = s.up("db", &spec(), UpCause::Use).await;
    assert_eq!(converge(&s, &view.resource_instance_id).await, Next::Done);
    match state(&s, "db") {
        InstanceState::Failed { message, .. } => assert!(message.contains("sha256:0123")),
        other => panic!("{other:?}"),
    }
    let w = s.fake.world();
    assert!(w.containers.is_empty() && w.volumes.is_empty() && w.networks.is_empty());
}

#[tokio::test]
async fn an_exit_is_recorded_and_restarted_after_back_off() {
    let (s, id) = running_db().await;
    {
        let mut w = s.fake.world();
        let c = w.containers.values_mut().next().unwrap();
        c.running = false;
        c.exit_code = Some(3);
        c.finished_at = Some("2026-11-29T10:00:01Z".into());
    }
    let next = s.reconciler.reconcile(&id).await.unwrap();
    assert!(matches!(
        state(&s, "db"),
        InstanceState::Exited {
            exit_code: Some(3),
            ..
        }
    ));
    assert_eq!(next, Next::After(Duration::from_secs(1)));
}

#[tokio::test]
async fn a_changed_spec_replaces_the_container_and_keeps_volumes() {
    let (s, id) = running_db().await;
    let mut changed = spec();
    changed["env"] = json!({"A": "b"});
    s.up("db", &changed, UpCause::Use).await;
    converge(&s, &id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
    let w = s.fake.world();
    assert_eq!(
        w.calls.iter().filter(|c| c.starts_with("remove")).count(),
        1
    );
    assert_eq!(
        w.calls.iter().filter(|c| c.starts_with("create")).count(),
        2
    );
    assert_eq!(w.volumes.len(), 1, "the same volume");
}

#[tokio::test]
async fn a_foreign_volume_fails_the_instance_rather_than_being_adopted() {
    let s = setup().await;
    let id = s.up_id("db", &spec(), UpCause::Use).await;
    let name = s.get("db").volumes[0].docker_name.clone();
    s.fake.world().volumes.insert(name, Labels::new());
    converge(&s, &id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Failed { .. }));
    assert!(s.fake.world().containers.is_empty());
}

#[tokio::test]
async fn a_person_stop_stops_the_container_and_a_use_up_leaves_it_stopped() {
    let (s, id) = running_db().await;
    s.berth
        .stop("owner", &s.domain, "db", "Ada".into())
        .await
        .unwrap();
    converge(&s, &id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Stopped { .. }));
    assert!(!s.fake.world().containers.values().next().unwrap().running);
    let view = s.up("db", &spec(), UpCause::Use).await;
    assert_eq!(view.desired, berth_core::model::Desired::Stopped);
    converge(&s, &id).await;
    assert!(!s.fake.world().containers.values().next().unwrap().running);
    s.up("db", &spec(), UpCause::Person).await;
    converge(&s, &id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
}

#[tokio::test]
async fn archive_removes_the_container_keeps_volumes_and_frees_the_alias() {
    let (s, _) = running_db().await;
    let (view, volumes) = s.berth.archive("owner", &s.domain, "db").await.unwrap();
    assert!(matches!(view.state, InstanceState::Archived { .. }));
    assert_eq!(volumes.len(), 1);
    assert_eq!(volumes[0].bytes, Some(42));
    assert!(s.fake.world().containers.is_empty());
    assert_eq!(s.fake.world().volumes.len(), 1);
    s.berth
        .up("owner", &s.domain, "db2", &spec(), UpCause::Use)
        .await
        .expect("the alias is free again");
}

#[tokio::test]
async fn a_started_instance_is_verified_and_its_release_recorded() {
    let s = ready_setup().await;
    let pending = s.up("db", &spec(), UpCause::Use).await;
    let evidence = s.evidence("db").await;
    assert_eq!(evidence.verification_status, VerificationStatus::Pending);
    assert!(!evidence.is_verified());
    converge(&s, &pending.resource_instance_id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
    let evidence = s.evidence("db").await;
    assert!(evidence.is_verified(), "{evidence:?}");
    assert_eq!(evidence.container_image_id.as_deref(), Some(IMAGE_ID));
    assert_eq!(evidence.spec_digest, pending.spec_digest);
    let releases = s.releases("db").await;
    assert_eq!(releases.len(), 1);
    assert_eq!(releases[0].spec_digest, pending.spec_digest);
    assert_eq!(releases[0].image_digest, format!("sha256:{HEX}"));
    assert_eq!(releases[0].ended, None);
}

#[tokio::test]
async fn a_container_swapped_for_another_image_is_stopped_and_fails() {
    let (s, id) = running_db().await;
    {
        // The same name and labels, another image, created and not yet started.
        let mut w = s.fake.world();
        let other = format!("127.0.0.1:5000/fixtures/echo@sha256:{}", "e".repeat(64));
        w.images.insert(OTHER_IMAGE_ID.into(), vec![other.clone()]);
        let c = w.containers.values_mut().next().unwrap();
        c.running = false;
        c.started_at = None;
        c.finished_at = None;
        c.image_id = OTHER_IMAGE_ID.into();
        c.config_image = other;
    }
    converge(&s, &id).await;
    match state(&s, "db") {
        InstanceState::Failed { message, .. } => {
            assert!(
                message.contains("container-repodigest-mismatch"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(!s.fake.world().containers.values().next().unwrap().running);
    let evidence = s.evidence("db").await;
    assert_eq!(evidence.verification_status, VerificationStatus::Mismatched);
    assert_eq!(
        evidence.mismatch_reason,
        Some(MismatchReason::ContainerRepodigestMismatch)
    );
    // A running impostor is caught on the next look too.
    {
        let mut w = s.fake.world();
        let c = w.containers.values_mut().next().unwrap();
        c.running = true;
    }
    s.up("db", &spec(), UpCause::Person).await;
    converge(&s, &id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Failed { .. }));
    assert!(!s.fake.world().containers.values().next().unwrap().running);
}

#[tokio::test]
async fn an_image_that_cannot_be_pulled_leaves_evidence_naming_why() {
    let s = setup().await;
    s.fake.world().image_failure = Some(ImageFailure::PullFailed);
    let id = s.up_id("db", &spec(), UpCause::Use).await;
    converge(&s, &id).await;
    let evidence = s.evidence("db").await;
    assert_eq!(evidence.verification_status, VerificationStatus::Missing);
    assert_eq!(evidence.mismatch_reason, Some(MismatchReason::PullFailed));
    assert!(s.releases("db").await.is_empty());
}

#[tokio::test]
async fn a_rollback_runs_the_previous_release_and_is_idempotent() {
    let s = ready_setup().await;
    let first = s.up("db", &spec(), UpCause::Use).await;
    let id = first.resource_instance_id.clone();
    let err = s
        .berth
        .rollback("owner", &s.domain, "db", "k0", spec_ask(&first.spec_digest))
        .await
        .unwrap_err();
    assert!(
        matches!(err, berth_core::Error::NoPreviousRelease { .. }),
        "{err:?}"
    );
    converge(&s, &id).await;
    let mut changed = spec();
    changed["env"] = json!({"A": "b"});
    let second = s.up("db", &changed, UpCause::Use).await;
    converge(&s, &id).await;
    let releases = s.releases("db").await;
    assert_eq!(releases.len(), 2);
    assert_eq!(releases[0].spec_digest, second.spec_digest);
    assert_eq!(releases[0].ended, None);
    assert_eq!(releases[1].spec_digest, first.spec_digest);
    assert_eq!(releases[1].ended, Some(ReleaseEnd::Replaced));

    match s
        .berth
        .rollback("owner", &s.domain, "db", "k1", spec_ask(&first.spec_digest))
        .await
        .unwrap_err()
    {
        berth_core::Error::ReleaseConflict { current, .. } => {
            assert_eq!(current, second.spec_digest)
        }
        other => panic!("{other:?}"),
    }
    let rolled = s
        .berth
        .rollback(
            "owner",
            &s.domain,
            "db",
            "k1",
            spec_ask(&second.spec_digest),
        )
        .await
        .unwrap();
    assert_eq!(rolled.from_spec_digest, second.spec_digest);
    assert_eq!(rolled.to_spec_digest, first.spec_digest);
    assert_eq!(rolled.instance.spec_digest, first.spec_digest);
    let again = s
        .berth
        .rollback(
            "owner",
            &s.domain,
            "db",
            "k1",
            spec_ask(&second.spec_digest),
        )
        .await
        .unwrap();
    assert_eq!(again, rolled, "a replayed key answers the same result");
    let reused = s
        .berth
        .rollback("owner", &s.domain, "db", "k1", spec_ask(&first.spec_digest))
        .await
        .unwrap_err();
    assert!(
        matches!(reused, berth_core::Error::IdempotencyKeyReused { .. }),
        "{reused:?}"
    );
    converge(&s, &id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
    let releases = s.releases("db").await;
    let digests: Vec<&str> = releases.iter().map(|r| r.spec_digest.as_str()).collect();
    assert_eq!(
        digests,
        vec![
            first.spec_digest.as_str(),
            second.spec_digest.as_str(),
            first.spec_digest.as_str()
        ]
    );
    assert_eq!(
        s.fake.world().volumes.len(),
        1,
        "the same volume throughout"
    );
    s.berth.archive("owner", &s.domain, "db").await.unwrap();
    let releases = s.releases("db").await;
    assert_eq!(releases[0].ended, Some(ReleaseEnd::Archived));
}

/// Time stands still here unless every task waits on a timer, so a probe that comes while the
/// test only yields can come from nothing but the container's output.
#[tokio::test(start_paused = true)]
async fn output_from_a_starting_container_probes_it_at_once() {
    let s = setup().await;
    s.reconciler.start();
    let (output, rx) = mpsc::unbounded_channel();
    s.fake.world().output = Some(rx);
    s.up("db", &spec(), UpCause::Person).await;
    assert_eq!(output_probe(&s, &output).await, Ok(()));
}

/// An exec ready check costs the engine an exec: output does not add one, the back-off decides.
#[tokio::test(start_paused = true)]
async fn output_does_not_hurry_an_exec_ready_check() {
    let s = setup().await;
    s.reconciler.start();
    let (output, rx) = mpsc::unbounded_channel();
    s.fake.world().output = Some(rx);
    let mut exec = spec();
    exec["ready"] = json!({"kind": "exec", "argv": ["pg_isready"], "user": null});
    s.up("db", &exec, UpCause::Person).await;
    assert!(output_probe(&s, &output).await.is_err());
    // The back-off's next probe still comes.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
}

/// Lets the instance start and be probed (not ready) for a while, then makes it ready and has
/// the container write a line; Ok if it is running before the clock moves on.
async fn output_probe(
    s: &Setup,
    output: &mpsc::UnboundedSender<bytes::Bytes>,
) -> Result<(), InstanceState> {
    // Started, and probed with back-off for a while (the clock moves on between probes).
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(matches!(state(s, "db"), InstanceState::Starting { .. }));

    // The server comes up and says so.
    s.fake.world().ready = true;
    output
        .send(bytes::Bytes::from_static(b"ready to accept connections\n"))
        .unwrap();
    let start = tokio::time::Instant::now();
    for _ in 0..1000 {
        if matches!(state(s, "db"), InstanceState::Running { .. }) {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(start.elapsed(), Duration::ZERO, "the clock stood still");
    match state(s, "db") {
        InstanceState::Running { .. } => Ok(()),
        other => Err(other),
    }
}

/// Waits, on the paused clock, until `done` holds for the instance `db`.
async fn until_state(s: &Setup, done: impl Fn(&InstanceState) -> bool) -> InstanceState {
    for _ in 0..100_000 {
        let state = state(s, "db");
        if done(&state) {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("db never got there: {:?}", state(s, "db"));
}

#[tokio::test(start_paused = true)]
async fn a_reconcile_that_panics_is_retried_and_the_instance_still_converges() {
    let s = setup().await;
    s.reconciler.start();
    {
        let mut w = s.fake.world();
        w.ready = true;
        w.panics = 2;
    }
    s.up("db", &spec(), UpCause::Person).await;
    until_state(&s, |st| matches!(st, InstanceState::Running { .. })).await;
    assert_eq!(
        s.reconciler
            .queue_stats()
            .panics
            .load(std::sync::atomic::Ordering::SeqCst),
        2
    );
}

#[tokio::test(start_paused = true)]
async fn a_thousand_enqueues_of_one_instance_never_reconcile_it_twice_at_once() {
    let s = setup().await;
    s.reconciler.start();
    s.fake.world().ready = true;
    let view = s.up("db", &spec(), UpCause::Person).await;
    let tasks = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    for _ in 0..1000 {
        s.reconciler.enqueue(&view.resource_instance_id);
    }
    let after = tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks();
    assert!(
        after <= tasks,
        "{after} tasks alive after 1000 enqueues, {tasks} before"
    );
    until_state(&s, |st| matches!(st, InstanceState::Running { .. })).await;
    for _ in 0..1000 {
        s.reconciler.enqueue(&view.resource_instance_id);
        tokio::task::yield_now().await;
    }
    assert_eq!(s.fake.world().most_inspecting, 1);
}

#[tokio::test(start_paused = true)]
async fn a_container_the_engine_will_not_create_ends_failed_with_its_reason_after_a_few_tries() {
    let s = setup().await;
    s.reconciler.start();
    s.fake.world().create_error = Some("source /bin/busybox is not directory".to_owned());
    s.up("db", &spec(), UpCause::Person).await;
    let failed = until_state(&s, |st| matches!(st, InstanceState::Failed { .. })).await;
    let InstanceState::Failed { message, .. } = failed else {
        unreachable!()
    };
    assert!(message.contains("is not directory"), "{message}");
    let creates = || {
        s.fake
            .world()
            .calls
            .iter()
            .filter(|c| c.starts_with("create "))
            .count()
    };
    assert_eq!(creates(), 5, "tried a bounded number of times");
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(creates(), 5, "failed stays failed");
    s.fake.world().create_error = None;
    s.fake.world().ready = true;
    s.up("db", &spec(), UpCause::Person).await;
    until_state(&s, |st| matches!(st, InstanceState::Running { .. })).await;
}

#[tokio::test(start_paused = true)]
async fn a_container_that_never_starts_ends_failed_with_the_engines_reason_after_a_few_tries() {
    let s = setup().await;
    s.reconciler.start();
    s.fake.world().start_error = Some("error mounting \"/data\": not a directory".to_owned());
    s.up("db", &spec(), UpCause::Person).await;
    let started = tokio::time::Instant::now();
    // Engine events about the failed starts arrive in a storm: none of them skips the back-off.
    let id = s.get("db").resource_instance_id;
    let storm = {
        let reconciler = s.reconciler.clone();
        tokio::spawn(async move {
            loop {
                reconciler.enqueue(&id);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let failed = until_state(&s, |st| matches!(st, InstanceState::Failed { .. })).await;
    storm.abort();
    let InstanceState::Failed { message, .. } = failed else {
        unreachable!()
    };
    assert!(message.contains("not a directory"), "{message}");
    let starts = s
        .fake
        .world()
        .calls
        .iter()
        .filter(|c| c.starts_with("start "))
        .count();
    assert_eq!(starts, 5, "tried a bounded number of times");
    // The back-off between tries held: 0.5 + 1 + 2 + 4 s.
    assert!(started.elapsed() >= Duration::from_millis(7_500));

    // It stays failed, whatever events come, until a person asks again.
    for _ in 0..100 {
        s.reconciler.enqueue(&s.get("db").resource_instance_id);
    }
    tokio::time::sleep(Duration::from_secs(60)).await;
    let again = s
        .fake
        .world()
        .calls
        .iter()
        .filter(|c| c.starts_with("start "))
        .count();
    assert_eq!(again, 5);
    s.fake.world().start_error = None;
    s.fake.world().ready = true;
    s.up("db", &spec(), UpCause::Person).await;
    until_state(&s, |st| matches!(st, InstanceState::Running { .. })).await;
}

#[tokio::test]
async fn a_change_that_never_reaches_the_container_keeps_it() {
    let s = ready_setup().await;
    let view = s.up("db", &spec(), UpCause::Person).await;
    converge(&s, &view.resource_instance_id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
    let before = s
        .fake
        .world()
        .containers
        .values()
        .next()
        .unwrap()
        .id
        .clone();
    let mut changed = spec();
    changed["idleStopAfterSeconds"] = json!(3600);
    changed["ready"] = json!({"kind": "exec", "argv": ["true"], "user": null});
    let view = s.up("db", &changed, UpCause::Person).await;
    assert!(
        matches!(view.state, InstanceState::Running { .. }),
        "{:?}",
        view.state
    );
    converge(&s, &view.resource_instance_id).await;
    {
        let w = s.fake.world();
        assert_eq!(w.containers.values().next().unwrap().id, before);
        assert!(
            !w.calls.iter().any(|c| c.starts_with("remove ")),
            "{:?}",
            w.calls
        );
    }

    // One that does reach it replaces it, and is starting (not running) until the new one is
    // ready.
    let mut env = changed.clone();
    env["env"] = json!({"A": "1"});
    let view = s.up("db", &env, UpCause::Person).await;
    assert!(
        matches!(view.state, InstanceState::Starting { .. }),
        "{:?}",
        view.state
    );
    converge(&s, &view.resource_instance_id).await;
    assert!(
        s.fake
            .world()
            .calls
            .iter()
            .any(|c| c.starts_with("remove "))
    );
}

fn spec_ask(digest: &str) -> berth_core::service::RollbackAsk {
    berth_core::service::RollbackAsk::Spec {
        expected_spec_digest: digest.to_owned(),
    }
}

#[tokio::test]
async fn a_resync_observes_every_instance_running_as_planned_from_one_list() {
    let s = ready_setup().await;
    let view = s.up("db", &spec(), UpCause::Person).await;
    converge(&s, &view.resource_instance_id).await;
    let before = s.get("db");
    assert!(matches!(before.state, InstanceState::Running { .. }));
    // Times are whole milliseconds: let the clock move past this one (nothing here waits on
    // berth, which is driven by hand).
    tokio::time::sleep(Duration::from_millis(5)).await;
    s.reconciler.resync().await;
    let after = s.get("db");
    assert!(after.observed_at > before.observed_at, "observed again");
    assert_eq!(after.state, before.state, "and nothing else written");

    // A container that does not carry the plan the instance would get now is not observed so.
    let mut changed = spec();
    changed["env"] = json!({"A": "1"});
    s.up("db", &changed, UpCause::Person).await;
    let pending = s.get("db");
    s.reconciler.resync().await;
    let again = s.get("db");
    assert_eq!(again.observed_at, pending.observed_at);
}

fn rollouts_of(s: &Setup) -> Vec<RolloutView> {
    futures_util::FutureExt::now_or_never(s.berth.rollouts("owner", &s.domain, "db"))
        .expect("a store in memory answers at once")
        .unwrap()
}

#[tokio::test]
async fn a_report_from_a_reconcile_of_a_superseded_rollout_is_a_stale_rollout_report() {
    let s = ready_setup().await;
    let (entered, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    s.fake.world().pull_gate = Some((entered.clone(), release.clone()));
    let a = spec();
    let id = s.up_id("db", &a, UpCause::Person).await;

    // A reconcile of the first rollout's desired state pulls (slowly) ...
    let slow = {
        let (reconciler, id) = (s.reconciler.clone(), id.clone());
        tokio::spawn(async move { reconciler.reconcile(&id).await })
    };
    entered.notified().await;
    let first = rollouts_of(&s).remove(0);
    assert_eq!(first.status.status, RolloutStatus::Deploying);
    assert!(first.status.reporters[0].mismatch_reason.is_none());

    // ... while another image is asked for, and then the first image again.
    let mut b = spec();
    b["image"] = json!(format!(
        "127.0.0.1:5000/fixtures/busybox@sha256:{}",
        "ab".repeat(32)
    ));
    for next in [&b, &a] {
        s.up("db", next, UpCause::Person).await;
    }
    let all = rollouts_of(&s);
    let statuses: Vec<RolloutStatus> = all.iter().map(|r| r.status.status).collect();
    assert_eq!(
        statuses,
        [
            RolloutStatus::Pending,
            RolloutStatus::Failed,
            RolloutStatus::Failed
        ],
        "superseded before they finished"
    );
    for superseded in &all[1..] {
        assert_eq!(
            superseded.status.mismatch_reason,
            Some(MismatchReason::StaleRolloutReport)
        );
    }

    // The slow reconcile goes on: it makes a verified container of the first desired state,
    // which runs the image the newest rollout pins too. Its reports are stale: they land on the
    // first rollout, as stale-rollout-report, and never on the newest.
    release.notify_one();
    slow.await.unwrap().unwrap();
    let all = rollouts_of(&s);
    let (newest, first_again) = (&all[0], &all[2]);
    assert_eq!(newest.status.status, RolloutStatus::Pending, "{newest:?}");
    assert!(newest.status.reporters.is_empty(), "{newest:?}");
    assert_eq!(first_again.status.status, RolloutStatus::Failed);
    let reporter = &first_again.status.reporters[0];
    assert_eq!(
        reporter.mismatch_reason,
        Some(MismatchReason::StaleRolloutReport),
        "{first_again:?}"
    );
    assert!(reporter.report_sequence > first.status.reporters[0].report_sequence);
    assert_eq!(
        first_again.status.mismatch_reason,
        Some(MismatchReason::StaleRolloutReport)
    );

    // A reconcile of the newest desired state reports on the newest rollout, which succeeds.
    converge(&s, &id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
    let all = rollouts_of(&s);
    assert_eq!(
        all[0].status.status,
        RolloutStatus::Succeeded,
        "{:?}",
        all[0]
    );
    assert_eq!(all[0].status.reporters[0].mismatch_reason, None);
    assert_eq!(all[0].status.healthy_replica_count, 1);
    assert_eq!(all[2].status.status, RolloutStatus::Failed);
}

async fn copy_settled(
    feed: &mut tokio::sync::broadcast::Receiver<berth_core::watch::Event>,
) -> berth_core::snapshots::CopyEvent {
    use berth_core::snapshots::CopyState;
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), feed.recv())
            .await
            .expect("a copy event in time")
            .unwrap();
        if let berth_core::watch::Change::Copy(copy) = event.change
            && copy.state != CopyState::Copying
        {
            return copy;
        }
    }
}

fn branch_spec() -> serde_json::Value {
    let mut spec = spec();
    spec["worktreeKey"] = json!("fix");
    spec
}

async fn running_source(s: &Setup) -> (InstanceId, String) {
    s.fake.world().ready = true;
    let id = s.up_id("db", &spec(), UpCause::Use).await;
    converge(s, &id).await;
    assert!(matches!(state(s, "db"), InstanceState::Running { .. }));
    let volume = s.get("db").volumes[0].docker_name.clone();
    s.fake
        .world()
        .contents
        .insert(volume.clone(), "rows".into());
    (id, volume)
}

#[tokio::test]
async fn a_branch_holds_its_instance_until_the_copy_is_done_and_freezes_the_source_for_it() {
    use berth_core::snapshots::{BranchFrom, CopyState};
    let s = setup().await;
    let (_, source_volume) = running_source(&s).await;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    s.fake.world().copy_gate = Some(gate.clone());
    let (mut feed, _, _) = s.berth.watch().subscribe(&s.domain, None);
    let view = s
        .berth
        .branch(
            "owner",
            &s.domain,
            "db-fix",
            BranchFrom::Instance("db".into()),
            &branch_spec(),
            UpCause::Person,
        )
        .await
        .unwrap();
    let target = view.volumes[0].docker_name.clone();
    assert_ne!(target, source_volume);
    // While the copy goes on, the branch is not created, whatever asks for it.
    assert_eq!(converge(&s, &view.resource_instance_id).await, Next::Done);
    assert_eq!(state(&s, "db-fix"), InstanceState::NotStarted);
    assert_eq!(s.fake.world().containers.len(), 1);
    gate.add_permits(1);
    let done = copy_settled(&mut feed).await;
    assert_eq!(done.state, CopyState::Done);
    {
        let w = s.fake.world();
        assert_eq!(w.contents.get(&target).map(String::as_str), Some("rows"));
        let pause = w.calls.iter().position(|c| c.starts_with("pause")).unwrap();
        let copy = w.calls.iter().position(|c| c.starts_with("copy")).unwrap();
        let unpause = w
            .calls
            .iter()
            .rposition(|c| c.starts_with("unpause"))
            .unwrap();
        assert!(pause < copy && copy < unpause, "{:?}", w.calls);
        assert!(w.paused.is_empty());
    }
    converge(&s, &view.resource_instance_id).await;
    assert!(matches!(state(&s, "db-fix"), InstanceState::Running { .. }));
    assert!(
        matches!(state(&s, "db"), InstanceState::Running { .. }),
        "the source's reported state never left running"
    );
    // A branch onto a key that exists is refused, and writes nothing.
    let again = s
        .berth
        .branch(
            "owner",
            &s.domain,
            "db-fix",
            BranchFrom::Instance("db".into()),
            &branch_spec(),
            UpCause::Person,
        )
        .await;
    assert!(matches!(again, Err(berth_core::Error::InstanceExists(_))));
}

#[tokio::test]
async fn a_failed_copy_removes_what_it_wrote_and_fails_the_branch() {
    use berth_core::snapshots::{BranchFrom, CopyState};
    let s = setup().await;
    running_source(&s).await;
    s.fake.world().copy_error = Some("disk full".into());
    let (mut feed, _, _) = s.berth.watch().subscribe(&s.domain, None);
    let view = s
        .berth
        .branch(
            "owner",
            &s.domain,
            "db-fix",
            BranchFrom::Instance("db".into()),
            &branch_spec(),
            UpCause::Person,
        )
        .await
        .unwrap();
    let failed = copy_settled(&mut feed).await;
    assert_eq!(failed.state, CopyState::Failed);
    assert!(failed.message.unwrap().contains("disk full"));
    let w = s.fake.world();
    assert!(!w.volumes.contains_key(&view.volumes[0].docker_name));
    assert!(w.paused.is_empty());
    drop(w);
    assert!(matches!(state(&s, "db-fix"), InstanceState::Failed { .. }));
}

#[tokio::test]
async fn a_restore_keeps_the_replaced_volumes_as_a_snapshot_and_mounts_the_copied_ones() {
    use berth_core::snapshots::{CopyState, SnapshotState};
    let s = setup().await;
    let (id, volume) = running_source(&s).await;
    let (mut feed, _, _) = s.berth.watch().subscribe(&s.domain, None);
    let snapshot = s.snapshot("db", "before-migration").await;
    assert_eq!(snapshot.state, SnapshotState::Copying);
    assert_eq!(copy_settled(&mut feed).await.state, CopyState::Done);
    let ready = s.get_snapshot(&snapshot.snapshot_id).await;
    assert_eq!(ready.state, SnapshotState::Ready);
    assert!(ready.source_paused_ms.is_some());
    s.fake
        .world()
        .contents
        .insert(volume.clone(), "migrated".into());
    let (instance, backup) = s.restore("db", &snapshot.snapshot_id).await;
    assert!(matches!(instance.state, InstanceState::Starting { .. }));
    assert!(backup.name.starts_with("before-restore-"));
    assert_eq!(copy_settled(&mut feed).await.state, CopyState::Done);
    let now = s.get("db");
    let mounted = now.volumes[0].docker_name.clone();
    assert_ne!(mounted, volume);
    {
        let w = s.fake.world();
        assert_eq!(w.contents.get(&mounted).map(String::as_str), Some("rows"));
        assert_eq!(
            w.contents.get(&volume).map(String::as_str),
            Some("migrated")
        );
    }
    let backup = s.get_snapshot(&backup.snapshot_id).await;
    assert_eq!(backup.state, SnapshotState::Ready);
    converge(&s, &id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
    // Deleting the before-restore snapshot removes the replaced volume, which no instance mounts.
    s.berth
        .delete_snapshot("owner", &s.domain, &backup.snapshot_id)
        .await
        .unwrap();
    assert!(!s.fake.world().volumes.contains_key(&volume));
    assert!(s.fake.world().volumes.contains_key(&mounted));
}

#[tokio::test]
async fn a_restore_from_another_instance_snapshots_it_first_then_restores_and_keeps_the_old_data() {
    use berth_core::service::RestoreFrom;
    use berth_core::snapshots::{CopyKind, CopyState, SnapshotState};
    let s = setup().await;
    let (source_id, _) = running_source(&s).await;
    let target = s
        .berth
        .up("owner", &s.domain, "db-fix", &branch_spec(), UpCause::Use)
        .await
        .unwrap()
        .resource_instance_id;
    converge(&s, &target).await;
    let before = s.berth.get("owner", &s.domain, "db-fix").unwrap().volumes[0]
        .docker_name
        .clone();
    s.fake
        .world()
        .contents
        .insert(before.clone(), "mine".into());

    // An instance is not restored from itself; the refusal writes nothing.
    let refused = s
        .berth
        .restore_from(
            "owner",
            &s.domain,
            "db-fix",
            RestoreFrom::Instance("db-fix".into()),
        )
        .await;
    assert!(
        matches!(refused, Err(berth_core::error::Error::RequestRefused(_))),
        "{refused:?}"
    );
    assert!(
        s.berth
            .snapshots("owner", &s.domain, None)
            .await
            .unwrap()
            .is_empty()
    );

    let (mut feed, _, _) = s.berth.watch().subscribe(&s.domain, None);
    let (_, backup, source) = s
        .berth
        .restore_from(
            "owner",
            &s.domain,
            "db-fix",
            RestoreFrom::Instance("db".into()),
        )
        .await
        .unwrap();
    assert_eq!(source.instance_key, "db");
    assert!(source.name.starts_with("for-restore-"), "{}", source.name);
    assert!(backup.name.starts_with("before-restore-"));
    // The snapshot of the source is done first, then the restore that reads it.
    let first = copy_settled(&mut feed).await;
    assert_eq!(
        (first.kind, first.state),
        (CopyKind::Snapshot, CopyState::Done)
    );
    let second = copy_settled(&mut feed).await;
    assert_eq!(
        (second.kind, second.state),
        (CopyKind::Restore, CopyState::Done)
    );
    converge(&s, &target).await;
    converge(&s, &source_id).await;
    let mounted = s.berth.get("owner", &s.domain, "db-fix").unwrap().volumes[0]
        .docker_name
        .clone();
    assert_ne!(mounted, before);
    {
        let w = s.fake.world();
        assert_eq!(w.contents.get(&mounted).map(String::as_str), Some("rows"));
        assert_eq!(w.contents.get(&before).map(String::as_str), Some("mine"));
    }
    for id in [&source.snapshot_id, &backup.snapshot_id] {
        let got = s.get_snapshot(id).await;
        assert_eq!(got.state, SnapshotState::Ready, "{got:?}");
    }
    assert!(matches!(state(&s, "db-fix"), InstanceState::Running { .. }));
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
}

#[tokio::test]
async fn a_placed_instance_is_reported_by_its_nodes_reporter_and_placed_once() {
    let s = ready_setup().await;
    s.fake.world().placement = Some("node-b".into());
    let id = s.up_id("db", &spec(), UpCause::Person).await;
    converge(&s, &id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
    let rollout = rollouts_of(&s).remove(0);
    assert_eq!(
        rollout.status.status,
        RolloutStatus::Succeeded,
        "{rollout:?}"
    );
    let reporters = &rollout.status.reporters;
    assert_eq!(reporters.len(), 1, "{reporters:?}");
    assert!(
        reporters[0].reporter_id.ends_with("/node-b"),
        "{reporters:?}"
    );
    assert_eq!(reporters[0].reporter_node_names, ["node-b".to_owned()]);
    assert_eq!(reporters[0].verified_replica_count, 1);
    let reports = s
        .berth
        .rollout_reports("owner", &s.domain, "db", &rollout.plan.rollout_id)
        .await
        .unwrap();
    // The node's reporter holds the replica; the daemon's own report, made as it began to act
    // before the runtime placed the instance, observed none and is not aggregated.
    let (node, others): (Vec<_>, Vec<_>) = reports
        .iter()
        .partition(|r| r.reporter_id.ends_with("/node-b"));
    assert_eq!(node.len(), 1, "{reports:?}");
    assert_eq!(node[0].envelope.reporter_node_ids, ["node-b".to_owned()]);
    assert_eq!(
        node[0].envelope.reporter_session_id,
        reporters[0].reporter_session_id
    );
    assert!(node[0].envelope.reporter_session_id.ends_with("/node-b"));
    assert!(
        others.iter().all(|r| r.observed_replica_count == 0),
        "{reports:?}"
    );
    // Later reconciles hand the stored placement back, never ask again.
    s.fake.world().placement = Some("node-c".into());
    s.reconciler.resync().await;
    converge(&s, &id).await;
    assert_eq!(s.fake.world().placed, 1);
    assert_eq!(
        rollouts_of(&s)[0].status.reporters[0].reporter_node_names,
        ["node-b".to_owned()]
    );
}

#[tokio::test]
async fn a_reporters_newer_session_supersedes_its_earlier_one_which_is_stale() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.db");
    let fake = Fake::default();
    fake.world().placement = Some("node-b".into());
    let daemon = |store: Arc<Store>| {
        let reconciler = Reconciler::new(
            store.clone(),
            Arc::new(fake.clone()),
            ReconcileConfig::default(),
        );
        (
            Berth::new(store, Some(reconciler.clone()), "fake"),
            reconciler,
        )
    };

    // The first daemon starts the instance; it is not ready yet, so its rollout is verifying.
    let first = Arc::new(Store::open(&path).unwrap());
    let first_session = first.reporter().session_id.clone();
    let (berth, reconciler) = daemon(first.clone());
    let domain = berth
        .create_domain("owner", "p".into())
        .await
        .unwrap()
        .resource_domain_id;
    let id = berth
        .up("owner", &domain, "db", &spec(), UpCause::Person)
        .await
        .unwrap()
        .resource_instance_id;
    for _ in 0..3 {
        reconciler.reconcile(&id).await.unwrap();
    }
    let rollout = berth
        .rollouts("owner", &domain, "db")
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        rollout.status.status,
        RolloutStatus::Verifying,
        "{rollout:?}"
    );
    assert_eq!(
        rollout.status.reporters[0].reporter_session_id,
        format!("{first_session}/node-b")
    );
    reconciler.shutdown(Duration::from_secs(1)).await;
    drop((berth, reconciler, first));

    // A second daemon on the same store (a new session) sees it ready: its node's reporter of
    // the new session reports, and the earlier session's report is stale and not aggregated.
    fake.world().ready = true;
    let second = Arc::new(Store::open(&path).unwrap());
    let second_session = second.reporter().session_id.clone();
    assert_ne!(second_session, first_session);
    let (berth, reconciler) = daemon(second);
    let mut last = Next::Done;
    for _ in 0..10 {
        last = reconciler.reconcile(&id).await.unwrap();
        if matches!(
            berth.get("owner", &domain, "db").unwrap().state,
            InstanceState::Running { .. }
        ) {
            break;
        }
    }
    let rollout = berth
        .rollouts("owner", &domain, "db")
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        rollout.status.status,
        RolloutStatus::Succeeded,
        "{rollout:?} {last:?}"
    );
    let sessions: Vec<&str> = rollout
        .status
        .reporters
        .iter()
        .map(|r| r.reporter_session_id.as_str())
        .collect();
    assert_eq!(sessions, [format!("{second_session}/node-b")]);
    let reports = berth
        .rollout_reports("owner", &domain, "db", &rollout.plan.rollout_id)
        .await
        .unwrap();
    let earlier = reports
        .iter()
        .find(|r| r.envelope.reporter_session_id == format!("{first_session}/node-b"))
        .expect("the earlier session's report is kept");
    assert_eq!(
        earlier.mismatch_reason,
        Some(MismatchReason::StaleRolloutReport)
    );
    reconciler.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_start_the_runtime_says_only_a_person_can_unblock_fails_at_once_with_its_sentence() {
    let s = setup().await;
    let why = "service db is placed on swarm node n2 (host2), which is drain";
    s.fake.world().start_foreign = Some(why.to_owned());
    let id = s.up_id("db", &spec(), UpCause::Person).await;
    converge(&s, &id).await;
    let InstanceState::Failed { message, .. } = state(&s, "db") else {
        panic!("not failed: {:?}", state(&s, "db"));
    };
    assert_eq!(message, why);
    let starts = s
        .fake
        .world()
        .calls
        .iter()
        .filter(|c| c.starts_with("start "))
        .count();
    assert_eq!(starts, 1, "no retry");
    let rollout = rollouts_of(&s).remove(0);
    assert_eq!(rollout.status.status, RolloutStatus::Failed);
    assert_eq!(
        rollout.status.mismatch_reason,
        Some(MismatchReason::ReplicaFailed)
    );
}

/// A second berth over the same engine and prefix, with a store of its own.
fn second_berth(s: &Setup) -> Reconciler {
    Reconciler::new(
        Arc::new(Store::in_memory().unwrap()),
        Arc::new(s.fake.clone()),
        ReconcileConfig::default(),
    )
}

fn calls_touching(s: &Setup, id: &str) -> Vec<String> {
    s.fake
        .world()
        .calls
        .iter()
        .filter(|c| c.contains(id) && (c.starts_with("stop") || c.starts_with("remove")))
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_second_store_on_the_same_prefix_leaves_the_first_ones_containers_alone() {
    let s = ready_setup().await;
    let view = s.up("db", &spec(), UpCause::Person).await;
    let id = view.resource_instance_id.clone();
    converge(&s, &id).await;
    let container = s.fake.world().containers.values().next().cloned().unwrap();
    assert_eq!(
        container.labels.get("berth.store"),
        Some(&s.berth.daemon().store_id),
        "the container carries its store's id"
    );
    s.fake.world().calls.clear();

    let other = second_berth(&s);
    other.resync().await;
    // What the resync would have queued for an instance it does not know.
    assert_eq!(other.reconcile(&id).await.unwrap(), Next::Done);
    assert!(
        calls_touching(&s, &container.id).is_empty(),
        "the other store's daemon neither stopped nor removed it: {:?}",
        s.fake.world().calls
    );
    let seen = other.other_stores();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].store.as_deref(),
        Some(s.berth.daemon().store_id.as_str())
    );
    assert_eq!(seen[0].containers, 1);
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
}

#[tokio::test]
async fn a_container_without_a_store_label_is_adopted_only_by_the_store_that_knows_its_instance() {
    let s = ready_setup().await;
    let view = s.up("db", &spec(), UpCause::Person).await;
    let id = view.resource_instance_id.clone();
    converge(&s, &id).await;
    // As a berth older than the store label made it.
    let container_id = {
        let mut w = s.fake.world();
        let c = w.containers.values_mut().next().unwrap();
        c.labels.remove("berth.store");
        c.id.clone()
    };
    s.fake.world().calls.clear();

    let other = second_berth(&s);
    other.resync().await;
    other.reconcile(&id).await.unwrap();
    assert!(
        calls_touching(&s, &container_id).is_empty(),
        "left alone by a store that does not know it"
    );
    assert_eq!(other.other_stores()[0].store, None);

    // Its own store adopts it: no replacement, still running.
    converge(&s, &id).await;
    assert!(
        calls_touching(&s, &container_id).is_empty(),
        "adopted, not replaced"
    );
    assert!(
        s.fake
            .world()
            .containers
            .values()
            .any(|c| c.id == container_id)
    );
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
}

#[tokio::test]
async fn a_container_of_this_store_whose_instance_it_does_not_know_is_removed() {
    let s = setup().await;
    let unknown = InstanceId::new();
    let labels: Labels = [
        ("berth.managed", "1"),
        ("berth.prefix", "berth"),
        ("berth.instance", unknown.as_str()),
        ("berth.store", s.berth.daemon().store_id.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    s.fake.world().containers.insert(
        "berth-orphan".into(),
        ContainerFacts {
            id: "berth-orphan".into(),
            name: "berth-orphan".into(),
            labels,
            ..ContainerFacts::default()
        },
    );
    s.reconciler.reconcile(&unknown).await.unwrap();
    assert!(!s.fake.world().containers.contains_key("berth-orphan"));
}

fn spec_with_volumes(names: &[&str]) -> serde_json::Value {
    let mut spec = spec();
    spec["volumes"] = json!(
        names
            .iter()
            .map(|n| json!({"name": n, "mountPath": format!("/{n}")}))
            .collect::<Vec<_>>()
    );
    spec
}

async fn up_and_converge(s: &Setup, names: &[&str]) -> berth_core::model::InstanceView {
    let view = s.up("db", &spec_with_volumes(names), UpCause::Person).await;
    converge(s, &view.resource_instance_id).await;
    s.get("db")
}

fn mounted(view: &berth_core::model::InstanceView, name: &str) -> String {
    view.volumes
        .iter()
        .find(|v| v.name == name)
        .map(|v| v.docker_name.clone())
        .unwrap_or_else(|| panic!("{name} is mounted"))
}

async fn snapshot_and_restore(s: &Setup) {
    use berth_core::snapshots::CopyState;
    let (mut feed, _, _) = s.berth.watch().subscribe(&s.domain, None);
    let snapshot = s.snapshot("db", "kept").await;
    assert_eq!(copy_settled(&mut feed).await.state, CopyState::Done);
    s.restore("db", &snapshot.snapshot_id).await;
    assert_eq!(copy_settled(&mut feed).await.state, CopyState::Done);
}

#[tokio::test]
async fn a_volume_a_spec_change_dropped_keeps_its_data_through_a_restore_and_comes_back() {
    let s = ready_setup().await;
    let both = up_and_converge(&s, &["data", "logs"]).await;
    let (data, logs) = (mounted(&both, "data"), mounted(&both, "logs"));
    s.fake.world().contents.insert(data.clone(), "rows".into());
    s.fake.world().contents.insert(logs.clone(), "lines".into());

    let one = up_and_converge(&s, &["data"]).await;
    assert_eq!(one.volumes.len(), 1, "the view lists what it mounts");
    let kept = s.berth.volumes("owner", &s.domain, "db").await.unwrap();
    assert_eq!(
        kept.iter()
            .map(|v| (v.name.as_str(), v.mounted))
            .collect::<Vec<_>>(),
        [("data", true), ("logs", false)]
    );

    snapshot_and_restore(&s).await;
    let back = up_and_converge(&s, &["data", "logs"]).await;
    let w = s.fake.world();
    assert_eq!(
        w.contents.get(&mounted(&back, "data")).map(String::as_str),
        Some("rows")
    );
    assert_eq!(
        w.contents.get(&mounted(&back, "logs")).map(String::as_str),
        Some("lines"),
        "logs came back with its data"
    );
}

#[tokio::test]
async fn a_renamed_volume_comes_back_with_its_data_after_a_restore() {
    let s = ready_setup().await;
    let first = up_and_converge(&s, &["data"]).await;
    s.fake
        .world()
        .contents
        .insert(mounted(&first, "data"), "rows".into());
    let renamed = up_and_converge(&s, &["data2"]).await;
    assert_ne!(mounted(&renamed, "data2"), mounted(&first, "data"));
    snapshot_and_restore(&s).await;
    let back = up_and_converge(&s, &["data"]).await;
    assert_eq!(
        s.fake
            .world()
            .contents
            .get(&mounted(&back, "data"))
            .map(String::as_str),
        Some("rows")
    );
    // And the archive lists both, with their bytes.
    let (_, volumes) = s.berth.archive("owner", &s.domain, "db").await.unwrap();
    let mut names: Vec<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["data", "data2"]);
    assert!(volumes.iter().all(|v| v.bytes.is_some()));
}

/// A domain of another owner, as another API key has.
async fn domain_of(s: &Setup, owner: &str) -> berth_core::DomainId {
    s.berth
        .create_domain(owner, "p".into())
        .await
        .unwrap()
        .resource_domain_id
}

/// An instance running in `domain`, its one volume holding a few bytes.
struct Held {
    id: InstanceId,
    volume: String,
    container: String,
}

async fn running_in(s: &Setup, owner: &str, domain: &berth_core::DomainId, key: &str) -> Held {
    s.fake.world().ready = true;
    let mut spec = spec();
    spec["alias"] = json!(key);
    let id = s
        .berth
        .up(owner, domain, key, &spec, UpCause::Use)
        .await
        .unwrap()
        .resource_instance_id;
    converge(s, &id).await;
    let view = s.berth.get(owner, domain, key).unwrap();
    assert!(matches!(view.state, InstanceState::Running { .. }));
    let volume = view.volumes[0].docker_name.clone();
    let mut w = s.fake.world();
    w.contents.insert(volume.clone(), format!("rows of {key}"));
    let container = w
        .containers
        .values()
        .find(|c| c.labels.get("berth.instance").map(String::as_str) == Some(id.as_str()))
        .unwrap()
        .id
        .clone();
    Held {
        id,
        volume,
        container,
    }
}

/// Waits (without a clock: it lets berth's tasks run) until the fake is in the state asked.
async fn until(s: &Setup, what: impl Fn(&World) -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !what(&s.fake.world()) {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the fake reached the state in time");
}

/// Only copies from `volumes` wait on a gate with no permits yet.
fn gate_copies_from(s: &Setup, volumes: &[&Held]) -> Arc<tokio::sync::Semaphore> {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let mut w = s.fake.world();
    w.copy_gate = Some(gate.clone());
    w.gated = Some(volumes.iter().map(|h| h.volume.clone()).collect());
    gate
}

async fn pending_copies(s: &Setup) -> Vec<berth_core::snapshots::CopyOp> {
    s.store.read(|tx| tx.pending_copies()).await.unwrap()
}

/// Another owner's domain with three instances whose snapshots are held: the copy slots are
/// full, with `extra` more of its snapshots queued behind them.
async fn busy_domain(s: &Setup, extra: usize) -> (Vec<Held>, Arc<tokio::sync::Semaphore>) {
    let busy = domain_of(s, "busy").await;
    let keys = ["a", "b", "c", "d", "e"];
    let mut large = Vec::new();
    for key in &keys[..3 + extra] {
        large.push(running_in(s, "busy", &busy, key).await);
    }
    let gate = gate_copies_from(s, &large.iter().collect::<Vec<_>>());
    for key in &keys[..3 + extra] {
        s.berth
            .snapshot("busy", &busy, key, "large".into())
            .await
            .unwrap();
    }
    until(s, |w| w.entered.len() == 3).await;
    (large, gate)
}

#[tokio::test]
async fn a_held_copy_of_one_instance_leaves_another_domains_copy_free_to_run_and_finish() {
    use berth_core::snapshots::{CopyState, SnapshotState};
    let s = setup().await;
    let x = running_in(&s, "owner", &s.domain, "db").await;
    let other = domain_of(&s, "other").await;
    let y = running_in(&s, "other", &other, "cache").await;
    let gate = gate_copies_from(&s, &[&x]);
    let (mut feed_x, _, _) = s.berth.watch().subscribe(&s.domain, None);
    let (mut feed_y, _, _) = s.berth.watch().subscribe(&other, None);
    let held = s.snapshot("db", "held").await;
    until(&s, |w| w.entered.contains(&x.volume)).await;
    let free = s
        .berth
        .snapshot("other", &other, "cache", "free".into())
        .await
        .unwrap();
    let done = copy_settled(&mut feed_y).await;
    assert_eq!(done.state, CopyState::Done);
    assert_eq!(done.snapshot_id, Some(free.snapshot_id));
    let still = s.get_snapshot(&held.snapshot_id).await;
    assert_eq!(
        still.state,
        SnapshotState::Copying,
        "x's copy is still held"
    );
    assert_eq!(s.fake.world().most_copying, 2, "they ran side by side");
    assert_eq!(s.fake.world().entered, [x.volume.clone(), y.volume.clone()]);
    gate.add_permits(1);
    let done = copy_settled(&mut feed_x).await;
    assert_eq!(done.state, CopyState::Done);
    assert_eq!(done.snapshot_id, Some(held.snapshot_id));
    assert!(s.fake.world().paused.is_empty());
}

#[tokio::test]
async fn a_restore_in_a_quiet_domain_begins_as_soon_as_a_slot_frees_before_a_busy_domains_queue() {
    use berth_core::snapshots::{CopyKind, CopyState};
    let s = setup().await;
    let small = running_in(&s, "owner", &s.domain, "db").await;
    let (mut feed, _, _) = s.berth.watch().subscribe(&s.domain, None);
    let snapshot = s.snapshot("db", "small").await;
    assert_eq!(copy_settled(&mut feed).await.state, CopyState::Done);
    s.fake.world().entered.clear();
    // The busy domain fills the three slots and queues two more.
    let (large, gate) = busy_domain(&s, 2).await;
    let (instance, _) = s.restore("db", &snapshot.snapshot_id).await;
    assert!(
        matches!(instance.state, InstanceState::Running { .. }),
        "it waits for its turn: {:?}",
        instance.state
    );
    let restore = pending_copies(&s)
        .await
        .into_iter()
        .find(|c| c.kind == CopyKind::Restore)
        .unwrap();
    assert!(!s.reconciler.copy_begun(&restore.id));
    // One of the busy domain's copies ends: the restore takes its slot, before the two the
    // busy domain queued first.
    gate.add_permits(1);
    let done = copy_settled(&mut feed).await;
    assert_eq!(
        (done.kind, done.state),
        (CopyKind::Restore, CopyState::Done)
    );
    {
        let w = s.fake.world();
        let is_large = |v: &String| large.iter().any(|h| h.volume == *v);
        assert!(w.entered[..3].iter().all(is_large), "{:?}", w.entered);
        assert!(
            !is_large(&w.entered[3]),
            "the restore began fourth: {:?}",
            w.entered
        );
        assert!(
            w.entered.len() <= 5,
            "at most one more of the busy domain's since"
        );
        assert!(w.most_copying <= 3, "never more than the bound at once");
    }
    converge(&s, &small.id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
}

#[tokio::test]
async fn a_restore_waiting_for_its_turn_leaves_its_instance_running_until_its_copy_begins() {
    use berth_core::snapshots::{CopyKind, CopyState};
    let s = setup().await;
    let small = running_in(&s, "owner", &s.domain, "db").await;
    let (mut feed, _, _) = s.berth.watch().subscribe(&s.domain, None);
    let snapshot = s.snapshot("db", "small").await;
    assert_eq!(copy_settled(&mut feed).await.state, CopyState::Done);
    s.fake.world().entered.clear();
    let (large, gate) = busy_domain(&s, 0).await;
    s.fake.world().calls.clear();
    let stop = format!("stop {}", small.container);
    s.restore("db", &snapshot.snapshot_id).await;
    // Whatever looks at it meanwhile, it runs on.
    converge(&s, &small.id).await;
    s.reconciler.resync().await;
    converge(&s, &small.id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
    {
        let w = s.fake.world();
        assert!(w.containers[&small.container].running);
        assert!(!w.calls.contains(&stop), "{:?}", w.calls);
    }
    gate.add_permits(1);
    let done = copy_settled(&mut feed).await;
    assert_eq!(
        (done.kind, done.state),
        (CopyKind::Restore, CopyState::Done)
    );
    {
        let w = s.fake.world();
        let stopped = w.calls.iter().position(|c| *c == stop).expect("stopped");
        let copied = w
            .calls
            .iter()
            .position(|c| {
                c.starts_with("copy ")
                    && !large
                        .iter()
                        .any(|h| c.starts_with(&format!("copy {} ", h.volume)))
            })
            .expect("the restore's copy");
        assert!(stopped < copied, "{:?}", w.calls);
    }
    converge(&s, &small.id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
}

#[tokio::test]
async fn copies_of_one_instance_never_overlap_and_run_in_the_order_asked() {
    use berth_core::snapshots::{BranchFrom, CopyKind, CopyState};
    let s = setup().await;
    let x = running_in(&s, "owner", &s.domain, "db").await;
    let gate = gate_copies_from(&s, &[&x]);
    let (mut feed, _, _) = s.berth.watch().subscribe(&s.domain, None);
    let first = s.snapshot("db", "one").await;
    until(&s, |w| w.entered.len() == 1).await;
    let second = s.snapshot("db", "two").await;
    let mut spec = branch_spec();
    spec["alias"] = json!("db");
    s.berth
        .branch(
            "owner",
            &s.domain,
            "db-fix",
            BranchFrom::Instance("db".into()),
            &spec,
            UpCause::Person,
        )
        .await
        .unwrap();
    let pending = pending_copies(&s).await;
    assert_eq!(pending.len(), 3);
    for copy in &pending {
        assert_eq!(
            s.reconciler.copy_begun(&copy.id),
            copy.snapshot.as_ref() == Some(&first.snapshot_id),
            "only the first holds the instance"
        );
    }
    let mut settled = Vec::new();
    for _ in 0..3 {
        gate.add_permits(1);
        let done = copy_settled(&mut feed).await;
        assert_eq!(done.state, CopyState::Done);
        settled.push((done.kind, done.snapshot_id));
    }
    assert_eq!(
        settled,
        [
            (CopyKind::Snapshot, Some(first.snapshot_id)),
            (CopyKind::Snapshot, Some(second.snapshot_id)),
            (CopyKind::Branch, None),
        ]
    );
    let w = s.fake.world();
    assert_eq!(w.most_copying, 1, "never two at once");
    assert_eq!(
        w.entered,
        [x.volume.clone(), x.volume.clone(), x.volume.clone()]
    );
}

#[tokio::test]
async fn a_snapshot_whose_storage_was_removed_outside_berth_fails_and_refuses_a_restore() {
    use berth_core::snapshots::{CopyState, SnapshotState};
    let s = setup().await;
    running_source(&s).await;
    let (mut feed, _, _) = s.berth.watch().subscribe(&s.domain, None);
    let first = s.snapshot("db", "one").await;
    assert_eq!(copy_settled(&mut feed).await.state, CopyState::Done);
    let second = s.snapshot("db", "two").await;
    assert_eq!(copy_settled(&mut feed).await.state, CopyState::Done);
    // Someone runs `docker volume rm` on each snapshot's storage.
    let storage = |id| {
        let s = &s;
        async move { s.get_snapshot(id).await.volumes.len() }
    };
    assert_eq!(storage(&first.snapshot_id).await, 1);
    let gone: Vec<String> = s
        .fake
        .world()
        .volumes
        .keys()
        .filter(|v| v.contains("-snp-"))
        .cloned()
        .collect();
    assert_eq!(gone.len(), 2);
    let first_storage = gone
        .iter()
        .find(|v| v.contains(&first.snapshot_id.hex()[..16]))
        .unwrap()
        .clone();
    s.fake.world().volumes.remove(&first_storage);

    // The periodic resync notices the first.
    s.reconciler.resync().await;
    let failed = s.get_snapshot(&first.snapshot_id).await;
    assert_eq!(failed.state, SnapshotState::Failed);
    assert!(
        failed
            .message
            .as_deref()
            .unwrap()
            .starts_with("its storage is gone")
    );
    let refused = s
        .berth
        .restore("owner", &s.domain, "db", &first.snapshot_id)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("its storage is gone"), "{refused}");

    // A restore notices the second before it reads it, and is refused with the same sentence.
    let other = gone.iter().find(|v| **v != first_storage).unwrap().clone();
    s.fake.world().volumes.remove(&other);
    let refused = s
        .berth
        .restore("owner", &s.domain, "db", &second.snapshot_id)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("its storage is gone"), "{refused}");
    assert!(
        matches!(state(&s, "db"), InstanceState::Running { .. }),
        "nothing was stopped"
    );
}

#[tokio::test]
async fn an_instance_whose_volume_was_removed_outside_berth_fails_naming_it_and_a_new_volume_is_not_lost()
 {
    let s = setup().await;
    let (id, volume) = running_source(&s).await;
    let up_both = |cause| {
        let spec = spec_with_volumes(&["data", "more"]);
        let s = &s;
        async move { s.berth.up("owner", &s.domain, "db", &spec, cause).await }
    };
    // A spec change that adds a volume: listed before it is made, which is no loss.
    up_both(UpCause::Use).await.unwrap();
    converge(&s, &id).await;
    assert!(
        matches!(state(&s, "db"), InstanceState::Running { .. }),
        "{:?}",
        state(&s, "db")
    );
    // Someone removes the first volume (its holder gone too): the resync fails the instance
    // with a sentence naming it, and a later up does not make it again empty.
    s.fake.world().volumes.remove(&volume);
    s.reconciler.resync().await;
    let InstanceState::Failed { message, .. } = state(&s, "db") else {
        panic!("not failed: {:?}", state(&s, "db"));
    };
    assert!(message.contains(&volume), "{message}");
    assert!(message.contains("removed outside berth"), "{message}");
    up_both(UpCause::Person).await.unwrap();
    converge(&s, &id).await;
    assert!(matches!(state(&s, "db"), InstanceState::Failed { .. }));
    assert!(!s.fake.world().volumes.contains_key(&volume));
}

fn freezing_spec() -> serde_json::Value {
    let mut spec = spec();
    spec["idleFreezeAfterSeconds"] = json!(30);
    spec["idleStopAfterSeconds"] = json!(120);
    spec
}

async fn running_frozen_candidate(s: &Setup) -> InstanceId {
    s.fake.world().ready = true;
    let view = s
        .berth
        .up("owner", &s.domain, "db", &freezing_spec(), UpCause::Use)
        .await
        .unwrap();
    assert_eq!(converge(s, &view.resource_instance_id).await, Next::Done);
    assert!(matches!(state(s, "db"), InstanceState::Running { .. }));
    view.resource_instance_id
}

fn paused(s: &Setup) -> bool {
    s.fake.world().containers.values().any(|c| c.paused)
}

/// An instance unreached for `idleFreezeAfterSeconds` is frozen (its view says so, its state
/// stays running), and stopped later, after `idleStopAfterSeconds`, as before: thawed first,
/// never stopped while paused.
#[tokio::test]
async fn an_idle_instance_is_frozen_then_stopped_thawed_first() {
    let s = setup().await;
    let id = running_frozen_candidate(&s).await;
    let now = berth_core::time::Timestamp::now();
    s.reconciler
        .idle_tick(now.plus(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(!paused(&s), "not yet idle for 30 s");
    s.reconciler
        .idle_tick(now.plus(Duration::from_secs(31)))
        .await
        .unwrap();
    assert!(paused(&s), "frozen once idle for 30 s");
    let view = s.berth.get("owner", &s.domain, "db").unwrap();
    assert!(view.frozen.is_some(), "the view says frozen");
    assert!(matches!(view.state, InstanceState::Running { .. }));
    // A reconcile (a resync) leaves a frozen instance frozen: it is neither probed nor failed.
    s.fake.world().ready = false;
    assert_eq!(converge(&s, &id).await, Next::Done);
    assert!(paused(&s));
    assert!(matches!(state(&s, "db"), InstanceState::Running { .. }));
    s.reconciler
        .idle_tick(now.plus(Duration::from_secs(121)))
        .await
        .unwrap();
    converge(&s, &id).await;
    let view = s.berth.get("owner", &s.domain, "db").unwrap();
    assert!(matches!(view.state, InstanceState::Stopped { .. }));
    assert!(view.frozen.is_none());
    let w = s.fake.world();
    assert!(!w.containers.values().any(|c| c.paused || c.running));
    assert!(
        !w.calls.iter().any(|c| c.starts_with("stop of a paused")),
        "{:?}",
        w.calls
    );
}

/// A daemon that restarts (or was killed between a pause and its record) finds a frozen
/// instance from the engine's paused state: frozen, not failed, not probed again.
#[tokio::test]
async fn a_paused_container_is_found_frozen_not_failed() {
    let s = setup().await;
    let id = running_frozen_candidate(&s).await;
    let container = s
        .fake
        .world()
        .containers
        .values()
        .next()
        .unwrap()
        .id
        .clone();
    s.fake.pause_container(&container).await.unwrap();
    s.fake.world().ready = false;
    s.fake.world().calls.clear();
    assert_eq!(converge(&s, &id).await, Next::Done);
    let view = s.berth.get("owner", &s.domain, "db").unwrap();
    assert!(view.frozen.is_some(), "found frozen");
    assert!(matches!(view.state, InstanceState::Running { .. }));
    let w = s.fake.world();
    assert!(
        !w.calls
            .iter()
            .any(|c| c.starts_with("stop") || c.starts_with("start") || c.starts_with("unpause")),
        "{:?}",
        w.calls
    );
}

/// A thaw (a connection, an exec, an up) unpauses it and restarts its idle clocks: the next
/// tick does not freeze it again at once. An up of a frozen instance thaws it.
#[tokio::test]
async fn a_thaw_unpauses_and_restarts_the_idle_clock() {
    let s = setup().await;
    let id = running_frozen_candidate(&s).await;
    assert!(s.reconciler.freeze(&id).await.unwrap());
    assert!(paused(&s));
    assert!(s.reconciler.thaw(&id).await.unwrap());
    assert!(!paused(&s));
    let view = s.berth.get("owner", &s.domain, "db").unwrap();
    assert!(view.frozen.is_none());
    assert!(view.last_reached_at.is_some());
    s.reconciler
        .idle_tick(berth_core::time::Timestamp::now().plus(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(!paused(&s), "the thaw counts as reach");
    assert!(!s.reconciler.thaw(&id).await.unwrap(), "nothing to thaw");

    assert!(s.reconciler.freeze(&id).await.unwrap());
    let view = s
        .berth
        .up("owner", &s.domain, "db", &freezing_spec(), UpCause::Use)
        .await
        .unwrap();
    assert!(view.frozen.is_none(), "an up thaws it");
    assert!(!paused(&s));
}

/// A frozen instance whose desired state changes is not left frozen: a person's stop thaws it
/// before the stop, and a change that replaces its container thaws it before the replacement.
#[tokio::test]
async fn a_frozen_instance_whose_desire_changes_is_thawed_first() {
    let s = setup().await;
    let id = running_frozen_candidate(&s).await;
    assert!(s.reconciler.freeze(&id).await.unwrap());
    let mut changed = freezing_spec();
    changed["env"] = json!({"CHANGED": "1"});
    s.berth
        .up("owner", &s.domain, "db", &changed, UpCause::Person)
        .await
        .unwrap();
    converge(&s, &id).await;
    assert!(!paused(&s));
    assert!(s.reconciler.freeze(&id).await.unwrap());
    s.berth
        .stop("owner", &s.domain, "db", "someone".into())
        .await
        .unwrap();
    converge(&s, &id).await;
    let view = s.berth.get("owner", &s.domain, "db").unwrap();
    assert!(matches!(view.state, InstanceState::Stopped { .. }));
    assert!(view.frozen.is_none());
    assert!(
        !s.reconciler.freeze(&id).await.unwrap(),
        "a stopped instance is not frozen"
    );
    let w = s.fake.world();
    assert!(
        !w.calls.iter().any(|c| c.starts_with("stop of a paused")),
        "{:?}",
        w.calls
    );
}

/// A runtime whose facts do not say that a container is paused gets no freeze: the pause is
/// undone at once, and no freeze is tried again in the run.
#[tokio::test]
async fn a_runtime_that_does_not_report_pauses_gets_no_freeze() {
    let s = setup().await;
    let id = running_frozen_candidate(&s).await;
    s.fake.world().hide_pauses = true;
    assert!(!s.reconciler.freeze(&id).await.unwrap());
    {
        let w = s.fake.world();
        assert!(w.paused.is_empty(), "the pause was undone: {:?}", w.calls);
    }
    s.fake.world().calls.clear();
    assert!(!s.reconciler.freeze(&id).await.unwrap());
    assert!(s.fake.world().calls.is_empty(), "not tried again");
    assert!(
        s.berth
            .get("owner", &s.domain, "db")
            .unwrap()
            .frozen
            .is_none()
    );
}
