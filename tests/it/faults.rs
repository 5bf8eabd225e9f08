//! Faults: the daemon killed with SIGKILL at random points of a stream of operations, an
//! instance that crashes as soon as it starts, and engine objects changed behind berth's back.
//! After each, berth converges to what the store says, keeps every volume, never makes a second
//! container for an instance, and never adopts what it did not make.

use berth_testkit as support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use berth_client::{ClientError, UpCause, WorkspaceRequest};
use berth_core::{DomainId, names};
use serde_json::{Value, json};
use support::{
    Answer, Daemon, block_on, busybox_image, containers_labelled, docker, docker_inspect, spec,
    volume_image,
};

const READY: Duration = Duration::from_secs(60);

/// A tiny seeded generator (xorshift64*), so a failing run can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True with probability `percent` / 100.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

fn seed() -> u64 {
    std::env::var("BERTH_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        })
}

fn id_of(instance: &Value) -> String {
    instance["resourceInstanceId"]
        .as_str()
        .expect("an instance id")
        .to_owned()
}

/// Volumes whose name starts with `prefix`.
fn volumes_named(prefix: &str) -> BTreeSet<String> {
    docker(&["volume", "ls", "--format", "{{.Name}}"])
        .lines()
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .map(str::to_owned)
        .collect()
}

/// CPU time (user + system) a process has used, from /proc, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc stat");
    // The command name is in parentheses and may hold spaces: count fields after it.
    let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Desired {
    Running,
    Stopped,
    Archived,
}

impl Desired {
    fn as_str(self) -> &'static str {
        match self {
            Desired::Running => "running",
            Desired::Stopped => "stopped",
            Desired::Archived => "archived",
        }
    }
}

/// What the test asked of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wanted {
    desired: Desired,
    /// The spec generation: the value of its `GEN` variable.
    generation: u32,
    /// The last stop was a person's, which a `use` up leaves standing.
    person_stop: bool,
}

/// Keys `k0` and `k1` run the image with a `VOLUME`, which gets a volume of its own.
fn spec_of(key: &str, generation: u32) -> Value {
    let image = if ["k0", "k1"].contains(&key) {
        volume_image()
    } else {
        busybox_image()
    };
    let mut s = spec(&image, key);
    s["env"] = json!({"GEN": generation.to_string()});
    s
}

#[derive(Debug, Clone)]
enum Op {
    Up {
        key: usize,
        person: bool,
        change: bool,
    },
    Stop {
        key: usize,
    },
    Archive {
        key: usize,
    },
    Link {
        worktree: &'static str,
    },
}

fn pick(rng: &mut Rng, keys: usize) -> Op {
    let key = rng.below(keys as u64) as usize;
    match rng.below(100) {
        0..=29 => Op::Up {
            key,
            person: true,
            change: true,
        },
        30..=44 => Op::Up {
            key,
            person: false,
            change: rng.chance(30),
        },
        45..=49 => Op::Up {
            key,
            person: true,
            change: false,
        },
        50..=74 => Op::Stop { key },
        75..=76 => Op::Archive { key },
        _ => Op::Link {
            worktree: if rng.chance(50) { "main" } else { "feature" },
        },
    }
}

/// Sends `SIGKILL` to `pid` after `after`, from another thread.
fn kill_later(pid: u32, after: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        // Fault timing, not a wait for berth: the kill lands at a random point of a request.
        std::thread::sleep(after);
        let _ = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status();
    })
}

/// A typed call's answer, or `Err(())` when the daemon did not answer (it was killed).
fn answered<T: serde::Serialize>(result: Result<T, ClientError>) -> Result<Answer, ()> {
    match result {
        Err(ClientError::Unreachable { .. } | ClientError::Transport { .. }) => Err(()),
        result => Ok(Answer::of(result)),
    }
}

/// Runs one operation through the typed client. `Ok(answer)` when the daemon answered,
/// `Err(())` when it died first.
fn run(
    base: &str,
    domain: &str,
    keys: &[String],
    wanted: &[Wanted],
    op: &Op,
) -> Result<Answer, ()> {
    // A client of its own for each request, as a caller after a kill would have.
    let api = berth_client::Client::builder(base)
        .key(support::KEY)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("a berth client");
    let domain = support::domain_id(domain);
    block_on(async {
        match op {
            Op::Up {
                key,
                person,
                change,
            } => {
                let generation = wanted[*key].generation + u32::from(*change);
                let cause = if *person {
                    UpCause::Person
                } else {
                    UpCause::Use
                };
                let spec = spec_of(&keys[*key], generation);
                answered(api.up(&domain, &keys[*key], &spec, cause).await)
            }
            Op::Stop { key } => answered(api.stop(&domain, &keys[*key], "chaos").await),
            Op::Archive { key } => answered(api.archive(&domain, &keys[*key]).await),
            Op::Link { worktree } => answered(api.link(&domain, "ws", worktree).await),
        }
    })
}

/// What `op` leaves `before` as, when it succeeds.
fn after(before: Wanted, op: &Op) -> Wanted {
    let mut w = before;
    if w.desired == Desired::Archived {
        return w;
    }
    match op {
        Op::Up { person, change, .. } => {
            w.generation += u32::from(*change);
            if *person || !w.person_stop {
                w.desired = Desired::Running;
                w.person_stop = false;
            }
        }
        Op::Stop { .. } => {
            w.desired = Desired::Stopped;
            w.person_stop = true;
        }
        Op::Archive { .. } => w.desired = Desired::Archived,
        Op::Link { .. } => {}
    }
    w
}

fn key_of(op: &Op) -> Option<usize> {
    match op {
        Op::Up { key, .. } | Op::Stop { key } | Op::Archive { key } => Some(*key),
        Op::Link { .. } => None,
    }
}

#[test]
fn a_daemon_killed_at_random_points_of_a_hundred_operations_converges_and_loses_nothing() {
    let seed = seed();
    eprintln!("faults: seed {seed} (BERTH_FAULT_SEED={seed} replays the same operations)");
    let mut rng = Rng::new(seed);
    let mut daemon = Daemon::start();
    let mut api = daemon.client();
    let domain = api.create_domain("chaos");
    let keys: Vec<String> = (0..5).map(|i| format!("k{i}")).collect();
    let mut wanted = vec![
        Wanted {
            desired: Desired::Running,
            generation: 0,
            person_stop: false,
        };
        keys.len()
    ];
    // Every key runs once first, so each of its volumes exists before the faults begin.
    // Digests seen for each key's generations, to tell which side of a cut-off `up` the store is.
    let mut digests: BTreeMap<(usize, u32), String> = BTreeMap::new();
    for (k, key) in keys.iter().enumerate() {
        let up = api.up(&domain, key, &spec_of(key, 0), "use").expect(200);
        digests.insert((k, 0), up["specDigest"].as_str().unwrap().to_owned());
    }
    for key in &keys {
        api.wait_state(&domain, key, "running", READY);
    }
    let workspace = WorkspaceRequest {
        containers: vec![],
        selector: None,
    };
    api.call(|c| c.put_workspace("ws", &workspace))
        .expect("a workspace");
    let mut seen_volumes = volumes_named(&daemon.prefix);
    let (mut kills, mut cut_off) = (0, 0);
    let started = Instant::now();

    for step in 0..100 {
        let op = pick(&mut rng, keys.len());
        let kill_during = rng.chance(10);
        let killer =
            kill_during.then(|| kill_later(daemon.pid(), Duration::from_millis(rng.below(40))));
        let outcome = run(&daemon.base, &domain, &keys, &wanted, &op);
        if let Some(killer) = killer {
            killer.join().expect("the killer thread");
        }
        let key = key_of(&op);
        let expected = key.map(|k| after(wanted[k], &op));
        match (&outcome, key) {
            (Ok(answer), Some(k)) => {
                let before = wanted[k];
                if before.desired == Desired::Archived && !matches!(op, Op::Archive { .. }) {
                    assert_eq!(answer.status, 409, "step {step} {op:?}: {:?}", answer.body);
                    assert_eq!(answer.body["_tag"], "ResourceInstanceArchivedError");
                } else {
                    assert_eq!(answer.status, 200, "step {step} {op:?}: {:?}", answer.body);
                    let next = expected.expect("a key's op");
                    let instance = match op {
                        Op::Archive { .. } => &answer.body["instance"],
                        _ => &answer.body,
                    };
                    assert_eq!(
                        instance["desired"],
                        next.desired.as_str(),
                        "step {step} {op:?}"
                    );
                    if let Op::Up { .. } = op {
                        digests.insert(
                            (k, next.generation),
                            instance["specDigest"].as_str().unwrap().to_owned(),
                        );
                    }
                    wanted[k] = next;
                }
            }
            (Ok(answer), None) => {
                assert_eq!(answer.status, 200, "step {step} {op:?}: {:?}", answer.body);
            }
            (Err(()), _) => {}
        }
        let kill_after = !kill_during && rng.chance(8);
        // Fault timing, not a wait for berth: a random pause before the next step or the kill,
        // so kills land at every point of berth's work (the seed replays them).
        if kill_after {
            std::thread::sleep(Duration::from_millis(rng.below(400)));
        } else if !kill_during {
            std::thread::sleep(Duration::from_millis(rng.below(150)));
        }
        if kill_during || kill_after {
            daemon.kill9();
            kills += 1;
            seen_volumes.extend(volumes_named(&daemon.prefix));
            daemon.start_again();
            api = daemon.client();
            // A request the kill cut off either happened whole or not at all.
            cut_off += usize::from(outcome.is_err());
            if let (Err(()), Some(k)) = (&outcome, key) {
                let stored = api.instance(&domain, &keys[k]);
                let (before, next) = (wanted[k], expected.expect("a key's op"));
                let matches = |w: Wanted| {
                    stored["desired"] == w.desired.as_str()
                        && digests
                            .get(&(k, w.generation))
                            .is_none_or(|d| stored["specDigest"] == d.as_str())
                };
                wanted[k] = if matches(before) {
                    before
                } else {
                    assert!(
                        matches(next),
                        "step {step} {op:?} was cut off and left {stored} (before {before:?}, after {next:?})"
                    );
                    next
                };
                digests
                    .entry((k, wanted[k].generation))
                    .or_insert_with(|| stored["specDigest"].as_str().unwrap().to_owned());
            }
        } else if outcome.is_err() {
            panic!("step {step} {op:?}: the daemon stopped answering without being killed");
        }
    }
    eprintln!(
        "faults: 100 operations, {kills} kills ({cut_off} in the middle of a request) in {:?}; wanted {wanted:?}",
        started.elapsed()
    );

    // Everything converges to what was asked.
    let mut ids = BTreeMap::new();
    for (k, key) in keys.iter().enumerate() {
        let w = wanted[k];
        let instance = api.wait_for(&domain, key, READY, w.desired.as_str(), |i| {
            if i["desired"] != w.desired.as_str() {
                return false;
            }
            let containers = containers_labelled(i["resourceInstanceId"].as_str().unwrap());
            match w.desired {
                Desired::Running => {
                    i["state"]["kind"] == "running"
                        && containers.len() == 1
                        && docker_inspect("container", &containers[0]).is_some_and(|c| {
                            c["State"]["Running"] == true
                                && c["Config"]["Labels"]["berth.spec-digest"] == i["specDigest"]
                                && c["Config"]["Env"]
                                    .as_array()
                                    .unwrap()
                                    .contains(&json!(format!("GEN={}", w.generation)))
                        })
                }
                Desired::Stopped => {
                    i["state"]["kind"] == "stopped"
                        && containers.len() <= 1
                        && containers.iter().all(|c| {
                            docker_inspect("container", c)
                                .is_some_and(|c| c["State"]["Running"] == false)
                        })
                }
                Desired::Archived => i["state"]["kind"] == "archived" && containers.is_empty(),
            }
        });
        if let Some(d) = digests.get(&(k, w.generation)) {
            assert_eq!(
                instance["specDigest"],
                d.as_str(),
                "{key} runs its last spec"
            );
        }
        ids.insert(id_of(&instance), (key.clone(), w.desired));
    }

    // No container berth does not know, and none twice.
    let mut per_instance: BTreeMap<String, usize> = BTreeMap::new();
    for name in support::containers_named(&format!("{}-", daemon.prefix)) {
        let c = docker_inspect("container", &name).expect("a container");
        let id = c["Config"]["Labels"]["berth.instance"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} is under berth's prefix without its labels"))
            .to_owned();
        let (key, desired) = ids
            .get(&id)
            .unwrap_or_else(|| panic!("{name} belongs to an instance berth does not know"));
        assert_ne!(
            *desired,
            Desired::Archived,
            "{key} is archived but {name} is left"
        );
        *per_instance.entry(id).or_default() += 1;
    }
    assert!(per_instance.values().all(|n| *n == 1), "{per_instance:?}");

    // No volume lost: every one that ever existed still does, and so does every one listed.
    let volumes = volumes_named(&daemon.prefix);
    let lost: Vec<&String> = seen_volumes.difference(&volumes).collect();
    assert!(lost.is_empty(), "volumes lost: {lost:?}");
    let did = support::domain_id(&domain);
    for archived in [false, true] {
        let listed = api.answer(|c| c.instances(&did, archived)).expect(200);
        for instance in listed.as_array().unwrap() {
            let recorded: BTreeSet<String> = instance["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["dockerName"].as_str().unwrap().to_owned())
                .collect();
            for name in &recorded {
                assert!(
                    volumes.contains(name),
                    "{name} of {} is gone",
                    instance["key"]
                );
            }
            // And berth still lists every volume it made for the instance.
            let made: BTreeSet<String> = docker(&[
                "volume",
                "ls",
                "--filter",
                &format!("label=berth.instance={}", id_of(instance)),
                "--format",
                "{{.Name}}",
            ])
            .lines()
            .map(str::to_owned)
            .collect();
            assert!(
                made.is_subset(&recorded),
                "{} lists {recorded:?} but berth made {made:?}",
                instance["key"]
            );
        }
    }

    // A domain archive leaves no container and removes the domain's network and the view of
    // the key the workspace is linked with, even a second network of one name that a kill in
    // the middle of its create left behind. (The views of keys the workspace was linked with
    // before stay: berth does not record them.)
    let link = api.answer(|c| c.workspace("ws")).expect(200)["worktreeKey"].clone();
    api.call(|c| c.archive_domain(&did))
        .expect("a domain archive");
    let networks: Vec<String> = docker(&["network", "ls", "--format", "{{.Name}}"])
        .lines()
        .filter(|n| n.starts_with(&format!("{}-", daemon.prefix)))
        .map(str::to_owned)
        .collect();
    let id = DomainId::parse(&domain).unwrap();
    let removed: Vec<String> = std::iter::once(names::domain_network(&daemon.prefix, &id))
        .chain(
            link.as_str()
                .map(|key| names::view_network(&daemon.prefix, &id, key)),
        )
        .collect();
    for name in &removed {
        assert!(!networks.contains(name), "{name} is left: {networks:?}");
    }
    let distinct: BTreeSet<&String> = networks.iter().collect();
    assert_eq!(
        distinct.len(),
        networks.len(),
        "two networks of one name: {networks:?}"
    );
    assert!(support::containers_named(&format!("{}-", daemon.prefix)).is_empty());
    let after = volumes_named(&daemon.prefix);
    assert!(volumes.is_subset(&after), "the archive kept every volume");
}

#[test]
fn an_instance_that_crashes_at_once_backs_off_and_does_not_load_the_machine() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("crash");
    let mut s = spec(&busybox_image(), "crash");
    s["command"] = json!(["sh", "-c", "exit 1"]);
    // The engine's start events for this daemon's containers, read as they happen (the engine
    // replays only its last few hundred events, which a busy machine overruns in seconds), from
    // the moment the watch is made (`--since` that moment: none is missed while the
    // subscription starts).
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    let mut events = Command::new("docker")
        .args([
            "events",
            "--since",
            &format!("{}.{:09}", since.as_secs(), since.subsec_nanos()),
            "--filter",
            &format!("label=berth.prefix={}", daemon.prefix),
            "--filter",
            "event=start",
            "--format",
            "{{.TimeNano}}",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("docker events");
    let stdout = events.stdout.take().expect("its output");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u128>::new()));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(t) = line.trim().parse() {
                    seen.lock().unwrap().push(t);
                }
            }
        })
    };
    let starts = || seen.lock().unwrap().clone();
    let instance = api.up(&domain, "crash", &s, "use").expect(200);

    // The window opens at the first start, whatever the pull and a busy machine took before it.
    support::wait_until(READY, "the container's first start", || {
        !starts().is_empty()
    });
    let cpu_before = cpu_ticks(daemon.pid());
    let window = Duration::from_secs(8);
    // Not a wait for berth: the fixed span the daemon's CPU and the engine's starts are
    // measured over. That berth restarts the container at all is checked on the engine's
    // events below.
    std::thread::sleep(window + Duration::from_millis(500));
    let cpu_used = cpu_ticks(daemon.pid()) - cpu_before;
    let first = starts()[0];
    let in_window = starts()
        .iter()
        .filter(|t| **t - first <= window.as_nanos())
        .count();
    // On a busy engine the restarts can come later, but they come.
    support::wait_until(Duration::from_secs(30), "three starts", || {
        starts().len() >= 3
    });
    let _ = events.kill();
    let _ = events.wait();
    reader.join().expect("the event reader");
    let times = starts();
    let gaps: Vec<f64> = times
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1e9)
        .collect();
    let now = api.instance(&domain, "crash");
    eprintln!(
        "crash loop: {in_window} starts in the first {window:?}, gaps {gaps:.2?} s, {cpu_used} CPU ticks"
    );
    // 1 s doubling: starts at about 0, 1, 3 and 7 s.
    assert!(
        in_window <= 5,
        "it backs off: {in_window} starts in {window:?}"
    );
    assert!(
        times.len() >= 3,
        "it is started again after it exits: {times:?}"
    );
    for (i, gap) in gaps.iter().enumerate() {
        let back_off = f64::from(1u32 << i.min(8));
        assert!(
            *gap >= back_off * 0.8,
            "restart {} came {gap:.2} s after the one before, under its back-off of {back_off} s",
            i + 1
        );
    }
    // Clock ticks are hundredths of a second: under a fifth of one core over the window.
    assert!(
        cpu_used < 170,
        "the daemon used {cpu_used} ticks of CPU in {window:?}"
    );
    assert!(
        ["exited", "starting"].contains(&now["state"]["kind"].as_str().unwrap()),
        "{now}"
    );
    assert_eq!(containers_labelled(&id_of(&instance)).len(), 1);
}

#[test]
fn a_container_removed_behind_berths_back_is_made_again_with_its_volumes() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(&domain, "web", &spec(&busybox_image(), "web"), "use")
        .expect(200);
    let running = api.wait_state(&domain, "web", "running", READY);
    let name = containers_labelled(&id_of(&running)).remove(0);
    let old_id = docker(&["inspect", "--format", "{{.Id}}", &name]);
    docker(&["exec", &name, "sh", "-c", "echo kept > /srv/data/file"]);

    docker(&["rm", "-f", &name]);
    api.wait_for(&domain, "web", READY, "running on a new container", |i| {
        i["state"]["kind"] == "running"
            && docker_inspect("container", &name)
                .is_some_and(|c| c["Id"] != old_id.as_str() && c["State"]["Running"] == true)
    });
    assert_eq!(containers_labelled(&id_of(&running)), vec![name.clone()]);
    assert_eq!(docker(&["exec", &name, "cat", "/srv/data/file"]), "kept");
}

#[test]
fn an_instance_network_removed_behind_berths_back_is_made_again() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let s = spec(&busybox_image(), "web");
    api.up(&domain, "web", &s, "use").expect(200);
    let running = api.wait_state(&domain, "web", "running", READY);
    let container = containers_labelled(&id_of(&running)).remove(0);
    let network = names::domain_network(&daemon.prefix, &DomainId::parse(&domain).unwrap());
    let attached = |container: &str| {
        docker_inspect("container", container).is_some_and(|c| {
            c["NetworkSettings"]["Networks"][&network]["Aliases"]
                .as_array()
                .is_some_and(|a| a.contains(&json!("web")))
        })
    };
    assert!(attached(&container));

    // Taken away from a running container: the next look puts it back.
    docker(&["network", "disconnect", "--force", &network, &container]);
    docker(&["network", "rm", &network]);
    api.up(&domain, "web", &s, "use").expect(200);
    // The instance stays running throughout, so berth has no change to report: this is the
    // engine's state.
    support::wait_until(READY, "the network made again", || {
        docker_inspect("network", &network).is_some() && attached(&container)
    });

    // Removed while the container is stopped (as `docker network prune` does): the container
    // still names the old network and cannot start on its own, so berth makes it again.
    let started = api.instance(&domain, "web")["startedAt"].clone();
    let old_id = docker(&["inspect", "--format", "{{.Id}}", &container]);
    docker(&["stop", "--time", "1", &container]);
    docker(&["network", "rm", &network]);
    let back = api.wait_for(&domain, "web", READY, "running again", |i| {
        i["state"]["kind"] == "running" && i["startedAt"] != started
    });
    assert!(docker_inspect("network", &network).is_some());
    assert!(attached(&container));
    assert_ne!(
        docker(&["inspect", "--format", "{{.Id}}", &container]),
        old_id,
        "the container was made again"
    );
    assert_eq!(containers_labelled(&id_of(&back)), vec![container]);
}

#[test]
fn a_volume_made_by_hand_under_berths_name_fails_the_instance_and_is_never_adopted() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let volume = names::spec_volume(
        &daemon.prefix,
        &DomainId::parse(&domain).unwrap(),
        "web",
        "data",
    );
    let stranger = "rin:00000000-0000-4000-8000-000000000000";
    docker(&[
        "volume",
        "create",
        "--label",
        "berth.managed=1",
        "--label",
        &format!("berth.prefix={}", daemon.prefix),
        "--label",
        &format!("berth.instance={stranger}"),
        &volume,
    ]);

    let s = spec(&busybox_image(), "web");
    let instance = api.up(&domain, "web", &s, "use").expect(200);
    let failed = api.wait_state(&domain, "web", "failed", READY);
    let message = failed["state"]["message"].as_str().unwrap();
    assert!(
        message.contains(&volume),
        "the message names the volume: {message}"
    );
    assert!(containers_labelled(&id_of(&instance)).is_empty());
    // Asked again, it fails again, and the volume keeps its owner. The up asks for a new try
    // (a new generation), so the wait route answers only once berth has made it.
    api.up(&domain, "web", &s, "person").expect(200);
    api.settled(&domain, "web", &["failed"], READY);
    let v = docker_inspect("volume", &volume).expect("the volume is still there");
    assert_eq!(v["Labels"]["berth.instance"], stranger);
    assert!(containers_labelled(&id_of(&instance)).is_empty());
}

#[test]
fn volumes_made_just_before_a_crash_are_still_listed_after_an_archive() {
    let seed = seed();
    eprintln!("faults: seed {seed}");
    let mut rng = Rng::new(seed);
    let mut daemon = Daemon::start();
    let domain = daemon.client().create_domain("crash-volumes");
    for round in 0..6 {
        let key = format!("v{round}");
        // The image's VOLUME gets a volume berth learns of only when it looks at the image.
        let up = daemon
            .client()
            .up(&domain, &key, &spec(&volume_image(), &key), "use")
            .expect(200);
        // Fault timing, not a wait for berth: the kill lands at a random point of the up.
        std::thread::sleep(Duration::from_millis(5 + rng.below(150)));
        daemon.kill9();
        daemon.start_again();
        let api = daemon.client();
        let did = support::domain_id(&domain);
        let archived = api.answer(|c| c.archive(&did, &key)).expect(200);
        let recorded: BTreeSet<String> = archived["instance"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["dockerName"].as_str().unwrap().to_owned())
            .collect();
        let made: BTreeSet<String> = docker(&[
            "volume",
            "ls",
            "--filter",
            &format!("label=berth.instance={}", id_of(&up)),
            "--format",
            "{{.Name}}",
        ])
        .lines()
        .map(str::to_owned)
        .collect();
        eprintln!(
            "round {round}: made {} volumes, archived with {}",
            made.len(),
            recorded.len()
        );
        assert!(
            made.is_subset(&recorded),
            "round {round}: berth made {made:?} but the archived instance lists {recorded:?}"
        );
        assert!(containers_labelled(&id_of(&up)).is_empty());
    }
    // The domain's networks go with it, even a second one of a name a kill left behind.
    let did = support::domain_id(&domain);
    daemon
        .client()
        .call(|c| c.archive_domain(&did))
        .expect("a domain archive");
    let networks: Vec<String> = docker(&["network", "ls", "--format", "{{.Name}}"])
        .lines()
        .filter(|n| n.starts_with(&format!("{}-", daemon.prefix)))
        .map(str::to_owned)
        .collect();
    assert!(networks.is_empty(), "networks left: {networks:?}");
}

#[test]
fn while_the_engine_is_unreachable_requests_answer_from_the_store_and_berth_converges_after() {
    let gate = support::EngineGate::new();
    let host = gate.host();
    let daemon = Daemon::start_with_env(&[("DOCKER_HOST", host.as_str())]);
    let api = daemon.client();
    let domain = api.create_domain("outage");
    api.up(&domain, "before", &spec(&busybox_image(), "before"), "use")
        .expect(200);
    api.wait_state(&domain, "before", "running", Duration::from_secs(60));

    gate.set_up(false);
    // The API answers from the store while the engine is away, and takes new desired state.
    assert_eq!(api.instance(&domain, "before")["state"]["kind"], "running");
    let other = api.create_domain("during");
    let other = support::domain_id(&other);
    api.call(|c| c.domain(&other)).expect("the domain");
    let during = api
        .up(&domain, "during", &spec(&busybox_image(), "during"), "use")
        .expect(200);
    assert_eq!(during["desired"], "running");
    // berth has tried the new instance once its reconcile has failed for want of the engine.
    let id = id_of(&during);
    support::wait_until(READY, "a reconcile of the new instance failing", || {
        daemon
            .log_text()
            .lines()
            .any(|l| l.contains("reconcile failed") && l.contains(&id))
    });
    assert_ne!(api.instance(&domain, "during")["state"]["kind"], "running");

    // Back: the reconciler reconnects with back-off and converges.
    gate.set_up(true);
    api.wait_state(&domain, "during", "running", Duration::from_secs(90));
    assert_eq!(api.instance(&domain, "before")["state"]["kind"], "running");
}

/// The engine's container events for one daemon's prefix, read as they happen from the moment
/// the watch is made (`--since` that moment, so none is missed while the subscription starts).
pub(super) struct EngineEvents {
    child: std::process::Child,
    seen: std::sync::Arc<(std::sync::Mutex<Vec<String>>, std::sync::Condvar)>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl EngineEvents {
    pub(super) fn watch(prefix: &str) -> EngineEvents {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("a clock after 1970");
        let mut child = Command::new("docker")
            .args([
                "events",
                "--since",
                &format!("{}.{:09}", since.as_secs(), since.subsec_nanos()),
                "--filter",
                "type=container",
                "--filter",
                &format!("label=berth.prefix={prefix}"),
                "--format",
                "{{.Action}}",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("docker events");
        let stdout = child.stdout.take().expect("its output");
        let seen =
            std::sync::Arc::new((std::sync::Mutex::new(Vec::new()), std::sync::Condvar::new()));
        let reader = {
            let seen = seen.clone();
            std::thread::spawn(move || {
                use std::io::BufRead;
                for line in std::io::BufReader::new(stdout)
                    .lines()
                    .map_while(Result::ok)
                {
                    let (events, arrived) = &*seen;
                    events.lock().unwrap().push(line.trim().to_owned());
                    arrived.notify_all();
                }
            })
        };
        EngineEvents {
            child,
            seen,
            reader: Some(reader),
        }
    }

    /// Every event so far, in order (`create`, `start`, `die`, `destroy`, ...).
    fn all(&self) -> Vec<String> {
        self.seen.0.lock().unwrap().clone()
    }

    /// How many events so far are one of `actions`.
    pub(super) fn count(&self, actions: &[&str]) -> usize {
        self.all()
            .iter()
            .filter(|a| actions.contains(&a.as_str()))
            .count()
    }

    /// Waits up to `bound` for any event after the first `after`; returns the new ones.
    pub(super) fn wait_past(&self, after: usize, bound: Duration) -> Vec<String> {
        let (events, arrived) = &*self.seen;
        let guard = events.lock().unwrap();
        let (guard, _) = arrived
            .wait_timeout_while(guard, bound, |e| e.len() <= after)
            .unwrap();
        guard[after.min(guard.len())..].to_vec()
    }
}

impl Drop for EngineEvents {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// What the engine tries for a spec it cannot run: every action that marks an attempt to make or
/// start its container.
const ATTEMPTS: &[&str] = &["create", "start", "die", "destroy"];

/// Ups `mount_path` as the spec's volume on busybox, which the engine can never run, and checks
/// that the instance ends `failed` with the engine's reason, after a bounded number of tries and
/// none after, and that an up with a good spec then runs it.
fn a_spec_the_engine_refuses_fails_after_bounded_tries(mount_path: &str, reason: &str) {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("refused");
    let events = EngineEvents::watch(&daemon.prefix);
    let mut bad = spec(&busybox_image(), "web");
    bad["volumes"] = json!([{"name": "data", "mountPath": mount_path}]);
    let up = api.up(&domain, "web", &bad, "use");
    assert_eq!(up.status, 200, "the decoder takes the spec: {}", up.body);

    // Bounded all along: a refusal's own engine event never brings the next try early.
    let bounded = |events: &EngineEvents| {
        for action in ATTEMPTS {
            let n = events.count(&[action]);
            assert!(
                n <= 6,
                "{n} {action} events for one refused spec: {:?}",
                events.all()
            );
        }
    };
    // Checked at every change berth reports until the instance fails.
    let failed = api.wait_for(&domain, "web", READY, "failed", |instance| {
        bounded(&events);
        instance["state"]["kind"] == "failed"
    });
    let message = failed["state"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(reason),
        "the message carries the engine's reason ({reason}): {message}"
    );
    // Failed stays failed: no try comes after it.
    let before = events.all();
    let late = events.wait_past(before.len(), Duration::from_secs(5));
    assert!(
        late.iter().all(|a| !ATTEMPTS.contains(&a.as_str())),
        "the engine was asked again after the instance failed: {late:?} (before: {before:?})"
    );
    assert_eq!(api.instance(&domain, "web")["state"]["kind"], "failed");
    bounded(&events);

    // Asked again with a spec the engine can run, it runs.
    api.up(&domain, "web", &spec(&busybox_image(), "web"), "person")
        .expect(200);
    let running = api.wait_state(&domain, "web", "running", READY);
    let name = containers_labelled(&id_of(&running)).remove(0);
    let mounts = docker_inspect("container", &name).expect("its container")["Mounts"].clone();
    assert!(
        mounts
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["Destination"] == "/srv/data"),
        "{mounts}"
    );
}

#[test]
fn a_volume_mounted_over_a_file_of_the_image_fails_the_instance_and_is_not_retried() {
    a_spec_the_engine_refuses_fails_after_bounded_tries("/bin/busybox", "not directory");
}

#[test]
fn a_mount_path_longer_than_the_kernel_takes_fails_the_instance_and_is_not_retried() {
    // The decoder bounds each segment's characters, not the path's length: 5,000 characters
    // are taken, and the engine refuses them.
    let path = format!("/{}", "a".repeat(4_999));
    assert_eq!(path.len(), 5_000);
    a_spec_the_engine_refuses_fails_after_bounded_tries(&path, "too long");
}

/// A daemon with a domain of three running instances is stopped, its store written to the shape
/// a kill -9 in the middle of that domain's archive leaves (with the instances written archived
/// or not), and started again: the archive is finished.
fn a_domain_archive_cut_short_is_finished(instances_written: bool) {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("half-archived");
    let keys = ["a", "b", "c"];
    for key in keys {
        api.up(&domain, key, &spec(&busybox_image(), key), "use")
            .expect(200);
    }
    let mut ids = Vec::new();
    for key in keys {
        let running = api.wait_state(&domain, key, "running", READY);
        assert_eq!(containers_labelled(&id_of(&running)).len(), 1);
        ids.push(id_of(&running));
    }
    let volumes = volumes_named(&daemon.prefix);
    assert_eq!(volumes.len(), keys.len(), "{volumes:?}");

    // The daemon is stopped (its containers keep running) and its store written as the kill
    // left it: the domain archived, its containers up.
    daemon.stop();
    {
        let db = rusqlite::Connection::open(daemon.data_dir.join("berth.db")).expect("the store");
        let changed = db
            .execute(
                "UPDATE domains SET state = 'archived' WHERE id = ?1",
                [&domain],
            )
            .expect("the domain written archived");
        assert_eq!(changed, 1);
        if instances_written {
            db.execute(
                "UPDATE instances SET desired = 'archived' WHERE domain_id = ?1",
                [&domain],
            )
            .expect("the instances written archived");
        }
        let running: i64 = db
            .query_row(
                "SELECT count(*) FROM instances WHERE domain_id = ?1 AND desired = 'running'",
                [&domain],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(running, if instances_written { 0 } else { 3 });
    }
    for id in &ids {
        assert_eq!(
            containers_labelled(id).len(),
            1,
            "{id} still has its container"
        );
    }

    daemon.start_again();
    let api = daemon.client();
    let did = support::domain_id(&domain);
    assert_eq!(
        api.call(|c| c.domain(&did)).expect("the domain").state,
        berth_client::DomainState::Archived
    );
    for key in keys {
        api.wait_for(&domain, key, READY, "archived with no container", |i| {
            i["desired"] == "archived"
                && i["state"]["kind"] == "archived"
                && containers_labelled(&id_of(i)).is_empty()
        });
    }
    let live = api.call(|c| c.instances(&did, false)).expect("a list");
    assert_eq!(live, vec![], "no live instance is left");
    assert!(support::containers_named(&format!("{}-", daemon.prefix)).is_empty());
    let kept = volumes_named(&daemon.prefix);
    assert_eq!(kept, volumes, "every volume is kept");
    if !instances_written {
        // The resync that finishes the archive releases the domain as the archive would have:
        // its network goes.
        let network = names::domain_network(&daemon.prefix, &DomainId::parse(&domain).unwrap());
        support::wait_until(READY, "the archived domain's network going", || {
            docker_inspect("network", &network).is_none()
        });
    }
}

/// Before a domain archive was one transaction, a kill -9 between writing the domain archived
/// and archiving its instances one by one left them desired running with containers up.
#[test]
fn a_domain_archive_cut_short_by_a_crash_is_finished_at_the_next_start() {
    a_domain_archive_cut_short_is_finished(false);
}

/// A kill -9 after the archive's transaction, before the containers were removed.
#[test]
fn a_domain_archive_cut_short_after_its_transaction_is_finished_at_the_next_start() {
    a_domain_archive_cut_short_is_finished(true);
}
