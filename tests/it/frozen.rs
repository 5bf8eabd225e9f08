//! Frozen idle: an instance unreached for `idleFreezeAfterSeconds` is frozen (the cgroup
//! freezer, `docker pause`), its view says so, and a connection through its host endpoint or an
//! exec thaws it; a frozen instance stays frozen across a daemon killed with SIGKILL, and the
//! next daemon thaws it on a connection.

use berth_testkit as support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Client, Daemon, echo_image, spec};

const READY: Duration = Duration::from_secs(60);

fn freezing_spec(freeze: u64) -> Value {
    let mut s = spec(&echo_image(), "echo");
    s["ready"] = json!({"kind": "tcp", "port": 7000});
    s["idleStopAfterSeconds"] = json!(3600);
    s["idleFreezeAfterSeconds"] = json!(freeze);
    s
}

fn host_port(api: &Client, domain: &str, key: &str, port: u16) -> u16 {
    let items = api
        .get(&format!(
            "/v1/resource-domains/{domain}/instances/{key}/endpoints"
        ))
        .expect(200)["items"]
        .clone();
    let e = items
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["port"] == port)
        .unwrap_or_else(|| panic!("no endpoint for {port}: {items}"))
        .clone();
    e["hostPort"].as_u64().unwrap() as u16
}

/// Whether the engine has the instance's container paused.
fn paused(prefix: &str) -> bool {
    let name = support::containers_named(prefix)
        .into_iter()
        .next()
        .expect("the instance's container");
    let inspected = support::docker_inspect("container", &name).expect("the container");
    inspected["State"]["Paused"] == true
}

fn wait_frozen(api: &Client, domain: &str, frozen: bool) -> Value {
    let what = if frozen { "frozen" } else { "thawed" };
    api.wait_for(domain, "echo", READY, what, |i| {
        i["frozen"].is_object() == frozen && i["state"]["kind"] == "running"
    })
}

/// Bytes through the endpoint come back.
fn echoes(port: u16) -> bool {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut back = [0u8; 4];
    s.write_all(b"ping").is_ok() && s.read_exact(&mut back).is_ok() && &back == b"ping"
}

#[test]
fn an_idle_instance_is_frozen_and_a_connection_thaws_it() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(&domain, "echo", &freezing_spec(3), "use")
        .expect(200);
    api.wait_state(&domain, "echo", "running", READY);
    let port = host_port(&api, &domain, "echo", 7000);

    let frozen = wait_frozen(&api, &domain, true);
    assert_eq!(frozen["desired"], "running", "{frozen}");
    assert!(frozen["frozen"]["since"].is_string(), "{frozen}");
    assert!(paused(&daemon.prefix), "the engine has it paused");

    assert!(
        echoes(port),
        "a connection to a frozen instance is answered"
    );
    assert!(!paused(&daemon.prefix), "the connection thawed it");
    let thawed = api.instance(&domain, "echo");
    assert!(thawed.get("frozen").is_none(), "{thawed}");
    assert_eq!(thawed["state"]["kind"], "running");

    // Unreached again, it freezes again; an exec thaws it too.
    wait_frozen(&api, &domain, true);
    let result = api
        .exec(&domain, "echo", &["echo", "awake"], None, 60_000, b"")
        .expect(200);
    assert_eq!(result["stdout"], "awake\n", "{result}");
    assert!(api.instance(&domain, "echo").get("frozen").is_none());
}

#[test]
fn a_frozen_instance_survives_a_daemon_killed_and_the_next_daemon_thaws_it_on_a_connection() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(&domain, "echo", &freezing_spec(3), "use")
        .expect(200);
    api.wait_state(&domain, "echo", "running", READY);
    let port = host_port(&api, &domain, "echo", 7000);
    wait_frozen(&api, &domain, true);

    daemon.kill9();
    assert!(paused(&daemon.prefix), "the engine keeps it paused");
    daemon.start_again();
    let api = daemon.client();
    let after = api.settled(&domain, "echo", &["running"], READY);
    assert!(after["frozen"].is_object(), "still frozen: {after}");
    assert!(paused(&daemon.prefix));

    assert!(echoes(port), "the next daemon's endpoint thaws it");
    assert!(!paused(&daemon.prefix));
    assert!(api.instance(&domain, "echo").get("frozen").is_none());
}

#[test]
fn a_frozen_instance_a_person_stops_is_thawed_and_stopped() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(&domain, "echo", &freezing_spec(3), "use")
        .expect(200);
    api.wait_state(&domain, "echo", "running", READY);
    wait_frozen(&api, &domain, true);
    api.post(
        &format!("/v1/resource-domains/{domain}/instances/echo/stop"),
        json!({"by": "Ada"}),
    )
    .expect(200);
    let stopped = api.settled(&domain, "echo", &["stopped"], READY);
    assert!(stopped.get("frozen").is_none(), "{stopped}");
    let name = support::containers_named(&daemon.prefix)
        .into_iter()
        .next()
        .expect("the instance's container");
    let inspected = support::docker_inspect("container", &name).unwrap();
    assert_eq!(inspected["State"]["Running"], false, "{inspected}");
    assert_eq!(inspected["State"]["Paused"], false, "{inspected}");
}
