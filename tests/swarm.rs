//! The swarm runtime (`berth serve --runtime swarm`) against a real single-node swarm made on
//! the test machine's engine.
//!
//! These tests change the engine's state, so `cargo test` leaves them out (`test = false` in
//! Cargo.toml): `scripts/test` runs them after the single-engine suite, one at a time, with
//! `cargo test --test swarm -- --test-threads=1`. Each makes the swarm (`docker swarm init`)
//! and leaves it on every exit path, panics included (`docker swarm leave --force`), removing
//! the gateway bridge the swarm made when the engine had none before. An engine that is already
//! in a swarm fails them with a sentence saying so: they never touch a swarm they did not make.

use berth_testkit as support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};
use support::second_node::{self, SecondNode};
use support::{Daemon, busybox_image, docker, spec, who_from};

const READY: Duration = Duration::from_secs(90);

/// A swarm made for one test, left when dropped.
struct Swarm {
    had_gateway_bridge: bool,
    prefix: String,
    /// A second engine joined as a worker, when the test asked for one.
    second: Option<SecondNode>,
}

impl Swarm {
    fn init(prefix: &str) -> Swarm {
        Self::make(prefix, "127.0.0.1")
    }

    /// A swarm of two nodes: this engine (the manager, advertising its end of the veth pair)
    /// and a second engine in a network namespace, joined as a worker that pulls the fixtures
    /// through a forwarder to the test registry. Answers the swarm and the worker's node id.
    fn with_second_node(prefix: &str) -> (Swarm, String) {
        let mut swarm = Self::make(prefix, second_node::HOST_ADDR);
        let token = docker(&["swarm", "join-token", "-q", "worker"]);
        let second = swarm.second.as_mut().expect("the second node");
        let id = second.join(token.trim());
        second.forward_loopback(registry_port());
        // The manager hears of the new node's readiness from its agent, not by an event.
        support::wait_until(READY, "the second node is ready", || {
            command_out(&["node", "inspect", &id, "--format", "{{.Status.State}}"]).trim()
                == "ready"
        });
        (swarm, id)
    }

    fn second(&self) -> &SecondNode {
        self.second.as_ref().expect("a swarm with a second node")
    }

    fn make(prefix: &str, advertise: &str) -> Swarm {
        let state = docker(&["info", "--format", "{{.Swarm.LocalNodeState}}"]);
        assert_eq!(
            state.trim(),
            "inactive",
            "the swarm tests make a swarm of their own on this engine and leave it afterwards, \
             but this engine is already in a swarm (state {state:?}); they never touch a swarm \
             they did not make: run them on an engine outside any swarm"
        );
        let had_gateway_bridge = network_exists("docker_gwbridge");
        let mut swarm = Swarm {
            had_gateway_bridge,
            prefix: prefix.to_owned(),
            second: None,
        };
        if advertise != "127.0.0.1" {
            // The veth pair the manager advertises comes with the second node.
            swarm.second = Some(SecondNode::start(prefix));
        }
        docker(&["swarm", "init", "--advertise-addr", advertise]);
        swarm
    }
}

impl Drop for Swarm {
    fn drop(&mut self) {
        // The services first: their tasks' containers go with them, never their volumes.
        let services = command_out(&[
            "service",
            "ls",
            "-q",
            "--filter",
            &format!("label=berth.prefix={}", self.prefix),
        ]);
        for id in services.split_whitespace() {
            let _ = command_out(&["service", "rm", id]);
        }
        // The worker leaves and its engine, namespace and files go, then the manager leaves.
        drop(self.second.take());
        let _ = command_out(&["swarm", "leave", "--force"]);
        if !self.had_gateway_bridge {
            // Its containers' endpoints go as their tasks end.
            support::wait_until(
                Duration::from_secs(60),
                "the gateway bridge is empty",
                || {
                    command_out(&[
                        "network",
                        "inspect",
                        "docker_gwbridge",
                        "--format",
                        "{{len .Containers}}",
                    ])
                    .trim()
                    .parse::<u32>()
                    .map_or(true, |n| n == 0)
                },
            );
            let _ = command_out(&["network", "rm", "docker_gwbridge"]);
        }
        support::remove_docker_objects(&self.prefix);
    }
}

/// A docker command's stdout, whatever its exit status (for cleanup that must go on).
fn command_out(args: &[&str]) -> String {
    std::process::Command::new("docker")
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// The fixture registry's port on loopback, from the pinned busybox reference.
fn registry_port() -> u16 {
    let image = busybox_image();
    image
        .strip_prefix("127.0.0.1:")
        .and_then(|rest| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("the fixtures are pinned as 127.0.0.1:<port>/...: {image}"))
}

fn network_exists(name: &str) -> bool {
    std::process::Command::new("docker")
        .args(["network", "inspect", name])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn service(name: &str) -> Value {
    let text = docker(&["service", "inspect", name]);
    let all: Value = serde_json::from_str(&text).expect("service inspect answers JSON");
    all[0].clone()
}

/// The containers of a service's tasks that run on this engine.
fn running_tasks(service: &str) -> Vec<String> {
    command_out(&[
        "ps",
        "-q",
        "--filter",
        &format!("label=com.docker.swarm.service.name={service}"),
    ])
    .split_whitespace()
    .map(str::to_owned)
    .collect()
}

fn exec(api: &support::Client, domain: &str, key: &str, argv: &[&str]) -> Value {
    api.exec(domain, key, argv, None, 20_000, b"").expect(200)
}

/// The name of the service of the instance `key` made by the daemon with `prefix`.
fn service_of(prefix: &str, key: &str) -> String {
    let names = docker(&[
        "service",
        "ls",
        "--format",
        "{{.Name}}",
        "--filter",
        &format!("label=berth.prefix={prefix}"),
        "--filter",
        &format!("label=berth.key={key}"),
    ]);
    let names: Vec<&str> = names.split_whitespace().collect();
    assert_eq!(names.len(), 1, "one service for {key}: {names:?}");
    names[0].to_owned()
}

#[test]
fn an_instance_runs_as_a_pinned_one_task_service_keeps_its_volume_and_answers_exec() {
    let prefix = support::run_prefix();
    let _swarm = Swarm::init(&prefix);
    let mut daemon = Daemon::start_with(&["--runtime", "swarm"]);
    let api = daemon.client();
    let domain = api.create_domain("swarm");

    let mut s = spec(&busybox_image(), "web");
    s["volumes"] = json!([{"name": "data", "mountPath": "/data"}]);
    api.up(&domain, "web", &s, "use").expect(200);
    api.wait_state(&domain, "web", "running", READY);
    let name = service_of(&daemon.prefix, "web");

    // One replicated service of one task, pinned by digest, on this node, publishing nothing.
    let svc = service(&name);
    assert_eq!(svc["Spec"]["Mode"]["Replicated"]["Replicas"], 1);
    // Nothing had to happen between its making and its start: made with its replica in one
    // step, never updated (an update keeps the spec before it).
    assert!(
        svc["PreviousSpec"].is_null(),
        "the service was updated after its create: {svc}"
    );
    assert_eq!(
        svc["Spec"]["TaskTemplate"]["ContainerSpec"]["Image"],
        busybox_image().as_str(),
        "the service runs the pinned reference, never a tag"
    );
    assert_eq!(svc["Spec"]["TaskTemplate"]["ContainerSpec"]["Init"], true);
    assert_eq!(svc["Spec"]["EndpointSpec"]["Mode"], "dnsrr");
    assert!(
        svc["Endpoint"]["Ports"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "a swarm-published port listens on every interface: berth publishes none ({svc})"
    );
    let node = docker(&["info", "--format", "{{.Swarm.NodeID}}"]);
    assert_eq!(
        svc["Spec"]["TaskTemplate"]["Placement"]["Constraints"],
        json!([format!("node.id=={}", node.trim())])
    );
    assert_eq!(running_tasks(&name).len(), 1);

    // Exec runs in the task's container, with stdin and exit code.
    let out = exec(
        &api,
        &domain,
        "web",
        &["sh", "-c", "echo kept > /data/mark; echo hi"],
    );
    assert_eq!(out["exitCode"], 0, "{out}");
    assert_eq!(out["stdout"], "hi\n");

    // A stop leaves no running task; the volume outlives it and the next start sees the file.
    api.post(
        &format!("/v1/resource-domains/{domain}/instances/web/stop"),
        json!({"by": "swarm-test"}),
    )
    .expect(200);
    api.wait_state(&domain, "web", "stopped", READY);
    assert_eq!(service(&name)["Spec"]["Mode"]["Replicated"]["Replicas"], 0);
    assert!(
        running_tasks(&name).is_empty(),
        "a stopped instance runs no task"
    );

    // A person's stop holds against uses: a person's up starts it again.
    api.up(&domain, "web", &s, "person").expect(200);
    api.wait_state(&domain, "web", "running", READY);
    let out = exec(&api, &domain, "web", &["cat", "/data/mark"]);
    assert_eq!(
        out["stdout"], "kept\n",
        "the volume outlived the stop: {out}"
    );

    // A task whose process ends is replaced by a new one, as berth restarts an exited
    // container: the swarm's own restart policy is none.
    let before = api.instance(&domain, "web");
    let old_task = running_tasks(&name);
    assert_eq!(old_task.len(), 1);
    docker(&["exec", &old_task[0], "killall", "httpd"]);
    let again = api.wait_for(&domain, "web", READY, "running again after the exit", |i| {
        i["state"]["kind"] == "running" && i["state"]["since"] != before["state"]["since"]
    });
    let new_task = running_tasks(&name);
    assert_eq!(new_task.len(), 1, "one task runs: {again}");
    assert_ne!(new_task, old_task, "a new task's container runs");
    let out = exec(&api, &domain, "web", &["cat", "/data/mark"]);
    assert_eq!(out["stdout"], "kept\n");

    // A berth killed and started again adopts the running service: the same task runs on.
    daemon.kill9();
    daemon.start_again();
    let api = daemon.client();
    api.settled(&domain, "web", &["running"], READY);
    assert_eq!(
        running_tasks(&name),
        new_task,
        "the task was adopted, not replaced"
    );

    // Archive removes the service, never the volume.
    api.post_empty(&format!(
        "/v1/resource-domains/{domain}/instances/web/archive"
    ))
    .expect(200);
    api.wait_state(&domain, "web", "archived", READY);
    support::wait_until(READY, "the service is gone", || {
        command_out(&["service", "ls", "-q", "--filter", &format!("name={name}")])
            .trim()
            .is_empty()
    });
    let volumes = command_out(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=berth.prefix={}", daemon.prefix),
    ]);
    assert!(!volumes.trim().is_empty(), "the instance's volume stays");
}

#[test]
fn a_linked_workspace_container_resolves_the_alias_over_the_overlay_network() {
    let prefix = support::run_prefix();
    let _swarm = Swarm::init(&prefix);
    let daemon = Daemon::start_with(&["--runtime", "swarm"]);
    let api = daemon.client();
    let domain = api.create_domain("swarm-ws");

    let mut s = spec(&busybox_image(), "db");
    s["command"] = json!([
        "sh",
        "-c",
        "echo from-swarm > /www/who && exec httpd -f -p 8080 -h /www"
    ]);
    api.up(&domain, "db", &s, "use").expect(200);
    api.wait_state(&domain, "db", "running", READY);

    let me = api.get("/v1/whoami").expect(200);
    let consent = format!(
        "berth.workspace={}/ws",
        me["keyId"].as_str().expect("a key id")
    );
    let executor = format!("{}-executor", daemon.prefix);
    let image = busybox_image();
    docker(&[
        "run", "-d", "--name", &executor, "--label", &consent, &image, "sleep", "3600",
    ]);
    api.raw(
        "PUT",
        "/v1/workspaces/ws",
        Some(
            json!({"containers": [executor], "selector": null})
                .to_string()
                .into_bytes(),
        ),
        &[],
    )
    .expect(200);
    api.raw(
        "PUT",
        &format!("/v1/resource-domains/{domain}/workspace-links/ws"),
        Some(json!({"worktreeKey": "k1"}).to_string().into_bytes()),
        &[],
    )
    .expect(200);
    // The engine's DNS and overlay tell no one when a name starts to resolve.
    support::wait_until(READY, "the executor reaches db", || {
        who_from(&executor, "db").as_deref() == Some("from-swarm")
    });
    let network = docker(&[
        "inspect",
        &executor,
        "--format",
        "{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}",
    ]);
    let driver = docker(&[
        "network",
        "inspect",
        network.split_whitespace().next().expect("a network"),
        "--format",
        "{{.Driver}}",
    ]);
    assert_eq!(
        driver.trim(),
        "overlay",
        "the executor joined an overlay network"
    );
}

#[test]
fn no_instance_port_answers_anywhere_but_loopback() {
    let prefix = support::run_prefix();
    let _swarm = Swarm::init(&prefix);
    let daemon = Daemon::start_with(&["--runtime", "swarm"]);
    let api = daemon.client();
    let domain = api.create_domain("swarm-ports");
    let mut s = spec(&busybox_image(), "web");
    s["ready"] = json!({"kind": "tcp", "port": 8080});
    api.up(&domain, "web", &s, "use").expect(200);
    api.wait_state(&domain, "web", "running", READY);
    let items = api
        .get(&format!(
            "/v1/resource-domains/{domain}/instances/web/endpoints"
        ))
        .expect(200)["items"]
        .clone();
    let endpoint = items
        .as_array()
        .and_then(|all| all.iter().find(|e| e["port"] == 8080))
        .unwrap_or_else(|| panic!("a host endpoint for 8080: {items}"))
        .clone();
    assert_eq!(
        endpoint["host"], "127.0.0.1",
        "the host endpoint is on loopback"
    );
    let port = u16::try_from(endpoint["hostPort"].as_u64().expect("a port")).expect("a port");
    let mut conn = TcpStream::connect(("127.0.0.1", port)).expect("the endpoint answers");
    conn.write_all(b"GET / HTTP/1.0\r\n\r\n")
        .expect("a request");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("an answer");
    assert!(
        answer.starts_with("HTTP/1."),
        "the instance answers through it: {answer}"
    );

    // Nothing of the instance is published by the swarm (its routing mesh listens on every
    // interface), and the endpoint's port does not answer on this machine's other addresses.
    let svc = service(&service_of(&daemon.prefix, "web"));
    assert!(
        svc["Endpoint"]["Ports"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
    for ip in other_addresses() {
        assert!(
            TcpStream::connect_timeout(&(ip, port).into(), Duration::from_secs(2)).is_err(),
            "port {port} answered on {ip}"
        );
    }
}

/// The newest rollout of an instance, once the instance runs the spec with `spec_digest`.
fn newest_rollout(api: &support::Client, domain: &str, key: &str, spec_digest: &Value) -> Value {
    api.wait_for(domain, key, READY, "running the new spec", |i| {
        i["state"]["kind"] == "running" && &i["specDigest"] == spec_digest
    });
    api.get(&format!(
        "/v1/resource-domains/{domain}/instances/{key}/rollouts"
    ))
    .expect(200)["items"][0]
        .clone()
}

#[test]
fn rollouts_are_verified_from_the_tasks_container_and_roll_back_by_generation() {
    let prefix = support::run_prefix();
    let _swarm = Swarm::init(&prefix);
    let daemon = Daemon::start_with(&["--runtime", "swarm"]);
    let api = daemon.client();
    let domain = api.create_domain("swarm-rollouts");
    let (a, b) = (busybox_image(), support::volume_image());

    let up = api.up(&domain, "web", &spec(&a, "web"), "use").expect(200);
    let first = newest_rollout(&api, &domain, "web", &up["specDigest"]);
    assert_eq!(first["status"]["status"], "succeeded", "{first}");
    assert_eq!(first["plan"]["rolloutGeneration"], 1);
    let id = first["plan"]["rolloutId"].as_str().expect("a rollout id");
    let evidence = api
        .get(&format!(
            "/v1/resource-domains/{domain}/instances/web/rollouts/{id}/evidence"
        ))
        .expect(200);
    assert_eq!(evidence["verificationStatus"], "verified", "{evidence}");
    assert_eq!(evidence["evidenceSource"], "local-container-inspect");
    assert_eq!(
        evidence["resolvedDigest"],
        a.rsplit_once('@').expect("a pin").1
    );

    let up_b = api
        .up(&domain, "web", &spec(&b, "web"), "person")
        .expect(200);
    let second = newest_rollout(&api, &domain, "web", &up_b["specDigest"]);
    assert_eq!(second["status"]["status"], "succeeded", "{second}");
    assert_eq!(second["plan"]["rolloutGeneration"], 2);
    let name = service_of(&daemon.prefix, "web");
    assert_eq!(
        service(&name)["Spec"]["TaskTemplate"]["ContainerSpec"]["Image"],
        b.as_str(),
        "the upgrade replaced the service with B's pin"
    );

    // A stale generation is refused; the current one rolls back to A.
    api.post(
        &format!("/v1/resource-domains/{domain}/instances/web/rollback"),
        json!({"idempotencyKey": "stale", "expectedRolloutGeneration": 1}),
    )
    .expect_error(409, "ResourceInstanceRolloutConflictError");
    let back = api
        .post(
            &format!("/v1/resource-domains/{domain}/instances/web/rollback"),
            json!({"idempotencyKey": "back", "expectedRolloutGeneration": 2}),
        )
        .expect(200);
    assert_eq!(back["rolloutGeneration"], 3);
    let third = newest_rollout(&api, &domain, "web", &back["toSpecDigest"]);
    assert_eq!(third["plan"]["mode"], "rollback", "{third}");
    assert_eq!(third["status"]["status"], "rolled-back", "{third}");
    assert_eq!(
        service(&service_of(&daemon.prefix, "web"))["Spec"]["TaskTemplate"]["ContainerSpec"]["Image"],
        a.as_str()
    );
}

#[test]
fn doctor_checks_the_swarm_and_says_what_a_service_cannot_enforce() {
    let prefix = support::run_prefix();
    let before = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["doctor", "--runtime", "swarm", "--json"])
        .env("BERTH_URL", "http://127.0.0.1:9")
        .output()
        .expect("berth doctor runs");
    let checks: Value = serde_json::from_slice(&before.stdout).expect("doctor --json answers JSON");
    let swarm = |checks: &Value| {
        checks
            .as_array()
            .expect("a list of checks")
            .iter()
            .find(|c| c["check"] == "swarm")
            .cloned()
            .expect("a swarm check")
    };
    assert_eq!(swarm(&checks)["ok"], false, "no swarm yet: {checks}");
    assert!(
        swarm(&checks)["fix"]
            .as_str()
            .is_some_and(|f| f.contains("docker swarm init")),
        "{checks}"
    );

    let _swarm = Swarm::init(&prefix);
    let after = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["doctor", "--runtime", "swarm", "--json"])
        .env("BERTH_URL", "http://127.0.0.1:9")
        .output()
        .expect("berth doctor runs");
    let checks: Value = serde_json::from_slice(&after.stdout).expect("doctor --json answers JSON");
    assert_eq!(swarm(&checks)["ok"], true, "{checks}");
    let limits: Vec<&str> = checks
        .as_array()
        .expect("a list of checks")
        .iter()
        .filter(|c| c["check"] == "swarm limit")
        .filter_map(|c| c["detail"].as_str())
        .collect();
    assert!(
        limits.iter().any(|l| l.contains("no-new-privileges")),
        "doctor says the swarm runtime cannot set no-new-privileges: {limits:?}"
    );
}

/// This machine's IPv4 addresses other than loopback.
fn other_addresses() -> Vec<std::net::IpAddr> {
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .expect("ip addr");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let cidr = l.split_whitespace().nth(3)?;
            cidr.split('/').next()?.parse().ok()
        })
        .filter(|ip: &std::net::IpAddr| !ip.is_loopback())
        .collect()
}

/// The swarm node a service's running task is on.
fn task_node(service: &str) -> String {
    command_out(&[
        "service",
        "ps",
        service,
        "--filter",
        "desired-state=running",
        "--format",
        "{{.Node}} {{.CurrentState}}",
        "--no-trunc",
    ])
}

/// The arguments that give a daemon the second node's engine and place `key` there.
fn second_node_args(swarm: &Swarm, node: &str, key: &str) -> Vec<String> {
    vec![
        "--runtime".to_owned(),
        "swarm".to_owned(),
        "--swarm-node-engine".to_owned(),
        format!("{node}={}", swarm.second().host),
        "--swarm-place".to_owned(),
        format!("{key}={node}"),
    ]
}

/// A spec whose httpd answers `/who` with `who`, ready by an exec check (a tcp check connects
/// from berth's machine, which cannot reach a task on another node).
fn who_spec(who: &str) -> Value {
    let mut s = spec(&busybox_image(), "db");
    s["command"] = json!([
        "sh",
        "-c",
        format!("echo {who} > /www/who && exec httpd -f -p 8080 -h /www")
    ]);
    s["ready"] = json!({"kind": "exec", "argv": ["wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8080/who"], "user": null});
    s
}

#[test]
fn an_instance_placed_on_a_second_node_runs_there_and_a_workspace_on_the_first_reaches_it() {
    let prefix = support::run_prefix();
    let (swarm, node2) = Swarm::with_second_node(&prefix);
    let mut args = second_node_args(&swarm, &node2, "db");
    args.extend(["--swarm-place".to_owned(), format!("far={node2}")]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut daemon = Daemon::start_with(&args);
    let api = daemon.client();
    let domain = api.create_domain("swarm-two");

    // `db` is placed on the second node by --swarm-place; `web` on the manager.
    let up = api
        .up(&domain, "db", &who_spec("from-node2"), "use")
        .expect(200);
    api.wait_state(&domain, "db", "running", READY);
    let name = service_of(&daemon.prefix, "db");
    assert_eq!(
        service(&name)["Spec"]["TaskTemplate"]["Placement"]["Constraints"],
        json!([format!("node.id=={node2}")]),
        "the service is pinned to the node berth chose"
    );
    assert!(
        task_node(&name).contains("Running"),
        "the swarm runs its task: {}",
        task_node(&name)
    );
    assert!(
        running_tasks(&name).is_empty(),
        "no task of db runs on the manager's engine"
    );
    let on_node2 = swarm.second().docker(&[
        "ps",
        "-q",
        "--filter",
        &format!("label=com.docker.swarm.service.name={name}"),
    ]);
    assert_eq!(
        on_node2.split_whitespace().count(),
        1,
        "db's task runs on the second node's engine"
    );

    // Exec goes through the second node's engine, into the task there; the volume is there.
    let out = exec(
        &api,
        &domain,
        "db",
        &["sh", "-c", "echo kept > /srv/data/mark; cat /www/who"],
    );
    assert_eq!(out["exitCode"], 0, "{out}");
    assert_eq!(out["stdout"], "from-node2\n");
    let label = format!("label=berth.prefix={}", daemon.prefix);
    let volumes2 = swarm
        .second()
        .docker(&["volume", "ls", "-q", "--filter", &label]);
    assert_eq!(
        volumes2.split_whitespace().count(),
        1,
        "db's volume is on the second node"
    );
    let volumes1 = docker(&["volume", "ls", "-q", "--filter", &label]);
    assert!(
        volumes1.trim().is_empty(),
        "no volume of db on the manager: {volumes1}"
    );

    // Its rollout is verified from the container on the second node, and reported by that
    // node's reporter (the evidence read through its engine) alone.
    let rollout = newest_rollout(&api, &domain, "db", &up["specDigest"]);
    assert_eq!(rollout["status"]["status"], "succeeded", "{rollout}");
    let reporters = rollout["status"]["reporters"]
        .as_array()
        .expect("the rollout's reporters");
    assert_eq!(reporters.len(), 1, "{rollout}");
    assert_eq!(
        reporters[0]["reporterNodeNames"],
        json!([node2]),
        "{rollout}"
    );
    assert!(
        reporters[0]["reporterId"]
            .as_str()
            .is_some_and(|id| id.ends_with(&format!("/{node2}"))),
        "the second node's reporter: {rollout}"
    );
    assert_eq!(reporters[0]["verifiedReplicaCount"], 1, "{rollout}");
    let reports = api
        .get(&format!(
            "/v1/resource-domains/{domain}/instances/db/rollouts/{}/reports",
            rollout["plan"]["rolloutId"].as_str().expect("a rollout id")
        ))
        .expect(200)["items"]
        .clone();
    // The node's reporter holds the replica; the daemon's own report, made as it began to act
    // before the instance was placed, observed none.
    let (node_reports, others): (Vec<&Value>, Vec<&Value>) = reports
        .as_array()
        .expect("the reports")
        .iter()
        .partition(|r| {
            r["reporterId"]
                .as_str()
                .is_some_and(|id| id.ends_with(&format!("/{node2}")))
        });
    assert_eq!(node_reports.len(), 1, "{reports}");
    let envelope = &node_reports[0]["envelope"];
    assert_eq!(envelope["reporterNodeIds"], json!([node2]), "{reports}");
    assert_eq!(
        envelope["reporterSessionId"], reporters[0]["reporterSessionId"],
        "{reports}"
    );
    assert_eq!(node_reports[0]["verifiedReplicaCount"], 1, "{reports}");
    assert!(
        others.iter().all(|r| r["observedReplicaCount"] == 0),
        "{reports}"
    );

    // `web`, placed on the manager, is reported by the manager node's reporter: one reporter
    // per node that runs a task.
    let manager = docker(&["info", "--format", "{{.Swarm.NodeID}}"]);
    let manager = manager.trim();
    let web_up = api
        .up(&domain, "web", &spec(&busybox_image(), "web"), "use")
        .expect(200);
    let web = newest_rollout(&api, &domain, "web", &web_up["specDigest"]);
    assert_eq!(web["status"]["status"], "succeeded", "{web}");
    assert_eq!(
        web["status"]["reporters"][0]["reporterNodeNames"],
        json!([manager]),
        "{web}"
    );
    assert!(
        web["status"]["reporters"][0]["reporterId"]
            .as_str()
            .is_some_and(|id| id.ends_with(&format!("/{manager}"))),
        "the manager node's reporter: {web}"
    );
    assert_ne!(
        web["status"]["reporters"][0]["reporterId"], reporters[0]["reporterId"],
        "two reporters, one per node"
    );

    // A workspace container on the first node reaches db on the second by its alias, over
    // the overlay network.
    let me = api.get("/v1/whoami").expect(200);
    let consent = format!(
        "berth.workspace={}/ws",
        me["keyId"].as_str().expect("a key id")
    );
    let executor = format!("{}-executor", daemon.prefix);
    docker(&[
        "run",
        "-d",
        "--name",
        &executor,
        "--label",
        &consent,
        &busybox_image(),
        "sleep",
        "3600",
    ]);
    api.raw(
        "PUT",
        "/v1/workspaces/ws",
        Some(
            json!({"containers": [executor], "selector": null})
                .to_string()
                .into_bytes(),
        ),
        &[],
    )
    .expect(200);
    api.raw(
        "PUT",
        &format!("/v1/resource-domains/{domain}/workspace-links/ws"),
        Some(json!({"worktreeKey": "k1"}).to_string().into_bytes()),
        &[],
    )
    .expect(200);
    support::wait_until(READY, "the executor on node 1 reaches db on node 2", || {
        who_from(&executor, "db").as_deref() == Some("from-node2")
    });

    // berth killed and started again adopts the task on the second node: the same runs on.
    // (Linking the workspace attached db to the worktree's view, which replaced its task.)
    let task_before = swarm.second().docker(&[
        "ps",
        "-q",
        "--filter",
        &format!("label=com.docker.swarm.service.name={name}"),
    ]);
    assert_eq!(task_before.split_whitespace().count(), 1, "{task_before}");
    daemon.kill9();
    daemon.start_again();
    let api = daemon.client();
    api.settled(&domain, "db", &["running"], READY);
    let task_after = swarm.second().docker(&[
        "ps",
        "-q",
        "--filter",
        &format!("label=com.docker.swarm.service.name={name}"),
    ]);
    assert_eq!(
        task_after, task_before,
        "the task was adopted, not replaced"
    );
    let out = exec(&api, &domain, "db", &["cat", "/srv/data/mark"]);
    assert_eq!(out["stdout"], "kept\n", "{out}");

    // Drained: the swarm ends the task and cannot place it anywhere else (its volume is on
    // that node); berth reports the instance failed, naming the node, and never moves it.
    docker(&["node", "update", "--availability", "drain", &node2]);
    let failed = api.wait_state(&domain, "db", "failed", READY);
    let message = failed["state"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&node2) && message.contains("drain"),
        "the failure names the drained node: {failed}"
    );
    assert_eq!(
        service(&name)["Spec"]["TaskTemplate"]["Placement"]["Constraints"],
        json!([format!("node.id=={node2}")]),
        "the instance stays placed on its volume's node"
    );
    assert!(
        running_tasks(&name).is_empty(),
        "nothing of db started on the manager"
    );
    assert_eq!(
        service(&name)["Spec"]["Mode"]["Replicated"]["Replicas"],
        0,
        "a failed instance's service is held at 0 replicas"
    );

    // The node active again: the swarm starts nothing by itself (berth said failed); a
    // person's start runs db again on the second node, on its volume.
    docker(&["node", "update", "--availability", "active", &node2]);
    api.raw(
        "POST",
        &format!("/v1/resource-domains/{domain}/instances/db/start"),
        Some(b"{}".to_vec()),
        &[],
    )
    .expect(200);
    api.wait_state(&domain, "db", "running", READY);
    assert_eq!(
        service(&name)["Spec"]["TaskTemplate"]["Placement"]["Constraints"],
        json!([format!("node.id=={node2}")])
    );
    let out = exec(&api, &domain, "db", &["cat", "/srv/data/mark"]);
    assert_eq!(out["stdout"], "kept\n", "{out}");

    // A branch into a key placed on the second node is refused by name: berth makes a copy's
    // volumes on the manager's node, and the branch would have started (its exec check
    // passing there) on empty ones of its own.
    let mut far_spec = who_spec("far");
    far_spec["alias"] = json!("far");
    support::block_on(api.api().branch(
        &support::domain_id(&domain),
        "far",
        &berth_client::BranchFrom::Instance("web".to_owned()),
        &far_spec,
        berth_client::UpCause::Person,
    ))
    .expect("a branch");
    let far = api.settled(&domain, "far", &["running", "failed"], READY);
    let message = far["state"]["message"].as_str().unwrap_or_default();
    assert_eq!(far["state"]["kind"], "failed", "{far}");
    assert!(
        message.contains(&node2) && message.contains("volumes of a branch or a restore"),
        "the refusal names the node and why: {far}"
    );
    let far_label = "label=berth.key=far";
    assert!(
        swarm
            .second()
            .docker(&["volume", "ls", "-q", "--filter", far_label])
            .trim()
            .is_empty(),
        "no volume of far was made on the second node"
    );
    let web = api.settled(&domain, "web", &["running", "failed"], READY);
    assert_eq!(web["state"]["kind"], "running", "the source runs on: {web}");
}

#[test]
fn an_instance_whose_nodes_engine_is_killed_is_reported_failed_and_never_moved() {
    let prefix = support::run_prefix();
    let (mut swarm, node2) = Swarm::with_second_node(&prefix);
    let args = second_node_args(&swarm, &node2, "db");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let daemon = Daemon::start_with(&args);
    let api = daemon.client();
    let domain = api.create_domain("swarm-lost");
    api.up(&domain, "db", &who_spec("from-node2"), "use")
        .expect(200);
    api.wait_state(&domain, "db", "running", READY);
    let name = service_of(&daemon.prefix, "db");

    // The node's engine dies at once; the swarm marks the node down when its heartbeats stop,
    // and berth, told by the swarm's node event, reports the instance failed, naming the node.
    swarm
        .second
        .as_mut()
        .expect("the second node")
        .kill_engine();
    let failed = api.wait_state(&domain, "db", "failed", READY);
    let message = failed["state"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&node2) && message.contains("not answering the swarm"),
        "the failure names the lost node: {failed}"
    );
    assert_eq!(
        service(&name)["Spec"]["TaskTemplate"]["Placement"]["Constraints"],
        json!([format!("node.id=={node2}")]),
        "the instance stays placed on its volume's node"
    );
    assert!(
        running_tasks(&name).is_empty(),
        "nothing of db started on the manager"
    );
    assert_eq!(
        service(&name)["Spec"]["Mode"]["Replicated"]["Replicas"],
        0,
        "a failed instance's service is held at 0 replicas, not started when the node is back"
    );
}

/// Waits, on the domain's event stream, until copy-made snapshot `id` is no longer `copying`.
fn snapshot_settled(
    api: &support::Client,
    domain: &str,
    id: &berth_client::SnapshotId,
) -> berth_client::SnapshotView {
    use futures_util::StreamExt;
    let domain_id = support::domain_id(domain);
    let mut events = Box::pin(api.api().events(&domain_id, None));
    loop {
        let now =
            support::block_on(api.api().snapshot_by_id(&domain_id, id)).expect("the snapshot");
        if now.state.as_str() != "copying" {
            return now;
        }
        support::block_on(async {
            tokio::time::timeout(READY, events.next())
                .await
                .expect("an event in time")
        });
    }
}

#[test]
fn on_the_managers_node_a_snapshot_and_a_branch_stand_on_layers_as_on_one_engine() {
    use berth_client::{BranchFrom, UpCause};
    let prefix = support::run_prefix();
    let _swarm = Swarm::init(&prefix);
    let daemon = Daemon::start_with(&["--runtime", "swarm"]);
    let api = daemon.client();
    let domain = api.create_domain("layers");
    let domain_id = support::domain_id(&domain);
    let mut s = spec(&busybox_image(), "files");
    s["volumes"] = json!([{"name": "data", "mountPath": "/data"}]);
    s["worktreeKey"] = json!("a");
    api.up(&domain, "files@a", &s, "use").expect(200);
    api.wait_state(&domain, "files@a", "running", READY);
    let wrote = exec(
        &api,
        &domain,
        "files@a",
        &["sh", "-c", "echo kept > /data/mark"],
    );
    assert_eq!(wrote["exitCode"], 0, "{wrote}");

    // A snapshot of the running instance moves it onto layers on the manager's node: no byte
    // is copied, and it runs again on an overlay volume of its own.
    let taken =
        support::block_on(api.api().snapshot(&domain_id, "files@a", "one")).expect("a snapshot");
    let snapshot = snapshot_settled(&api, &domain, &taken.snapshot_id);
    assert_eq!(snapshot.state.as_str(), "ready", "{snapshot:?}");
    let source = api.settled(&domain, "files@a", &["running", "failed"], READY);
    assert_eq!(source["state"]["kind"], "running", "{source}");
    let source_volume = source["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned();
    let options = support::docker_inspect("volume", &source_volume).unwrap()["Options"].clone();
    assert_eq!(options["type"], "overlay", "{source_volume}: {options}");
    assert_eq!(api.get("/v1/daemon").expect(200)["volumeLayers"], "overlay");

    // A branch from the snapshot stands on its layer; writes stay on their side.
    let mut b = s.clone();
    b["worktreeKey"] = json!("b");
    support::block_on(api.api().branch(
        &domain_id,
        "files@b",
        &BranchFrom::Snapshot(snapshot.snapshot_id.clone()),
        &b,
        UpCause::Person,
    ))
    .expect("a branch");
    let branch = api.settled(&domain, "files@b", &["running", "failed"], READY);
    assert_eq!(branch["state"]["kind"], "running", "{branch}");
    let branch_volume = branch["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned();
    let options = support::docker_inspect("volume", &branch_volume).unwrap()["Options"].clone();
    assert_eq!(options["type"], "overlay", "{branch_volume}: {options}");
    let read = exec(&api, &domain, "files@b", &["cat", "/data/mark"]);
    assert_eq!(read["stdout"], "kept\n", "{read}");
    exec(
        &api,
        &domain,
        "files@b",
        &["sh", "-c", "echo b > /data/mark"],
    );
    let read = exec(&api, &domain, "files@a", &["cat", "/data/mark"]);
    assert_eq!(
        read["stdout"], "kept\n",
        "the source keeps its data: {read}"
    );
}
