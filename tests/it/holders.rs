//! Volumes no prune can take, end to end on the real engine with the busybox fixture: every
//! volume berth keeps (an instance on layers after a snapshot, a branch on the snapshot's
//! layers, a template's base and the instance on it, an archived instance's volume and a volume
//! a spec change dropped) is held by a container created and never started, so `docker volume
//! prune` takes none and `docker volume rm` of a lower or an upper layer is refused; every
//! marker is read back after a stop and an `up`. A holder removed by hand is made again at once,
//! and a daemon killed while a snapshot changes the holders converges with every volume held.

use berth_testkit as support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Client, Daemon, block_on, docker};

use super::faults::EngineEvents;
use super::kept_volumes::{
    self, read, settled_running as running, snapshot_ready, up_running, wait_ready, write,
};

const READY: Duration = Duration::from_secs(120);

/// A busybox instance of worktree `worktree` mounting `volumes` (name, mount path).
fn files_spec(worktree: &str, volumes: &[(&str, &str)]) -> Value {
    let mut spec = kept_volumes::files_spec(volumes);
    spec["worktreeKey"] = json!(worktree);
    spec
}

fn data(worktree: &str) -> Value {
    files_spec(worktree, &[("data", "/srv/data")])
}

/// Every volume labelled with the daemon's prefix.
fn volumes(prefix: &str) -> BTreeSet<String> {
    docker(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=berth.prefix={prefix}"),
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

/// The volumes an instance's labels name.
fn volumes_of(instance: &Value) -> BTreeSet<String> {
    docker(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!(
            "label=berth.instance={}",
            instance["resourceInstanceId"].as_str().unwrap()
        ),
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

/// Each of `volumes` has its holder: a container that never ran, mounting it.
fn assert_held(volumes: &BTreeSet<String>) {
    for volume in volumes {
        let holder = format!("{volume}.held");
        let state = support::docker_inspect("container", &holder)
            .unwrap_or_else(|| panic!("{volume} has no holder {holder}"));
        assert_eq!(state["State"]["Status"], "created", "{holder}: {state}");
        assert_eq!(state["Config"]["Labels"]["berth.holds"], json!(volume));
        let mounts = state["Mounts"].as_array().unwrap();
        assert!(
            mounts.iter().any(|m| m["Name"] == json!(volume)),
            "{holder}: {mounts:?}"
        );
    }
}

fn rm_refused(volume: &str) {
    let out = Command::new("docker")
        .args(["volume", "rm", volume])
        .output()
        .expect("docker runs");
    assert!(!out.status.success(), "docker volume rm {volume} succeeded");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("in use"), "{volume}: {said}");
}

/// Waits (up to a minute for each event) until the engine reports a container of `events`'
/// prefix created.
fn created(events: &EngineEvents) {
    let mut seen = 0;
    while events.count(&["create"]) == 0 {
        let new = events.wait_past(seen, Duration::from_secs(60));
        assert!(
            !new.is_empty(),
            "no container was made again within a minute"
        );
        seen += new.len();
    }
}

#[test]
fn no_prune_takes_a_volume_berth_keeps_and_the_engine_refuses_to_remove_a_layer() {
    use berth_client::{BranchFrom, UpCause};
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("holders");
    let domain_id = support::domain_id(&domain);

    // On layers after a snapshot: what it wrote before is in the snapshot's storage (the
    // lower), what it wrote since in its upper layer.
    up_running(&api, &domain, "files@main", &data("main"));
    write(&api, &domain, "files@main", "/srv/data/one", "before");
    let base = snapshot_ready(&api, &domain, "files@main", "base").snapshot_id;
    let main = running(&api, &domain, "files@main");
    write(&api, &domain, "files@main", "/srv/data/two", "after");
    let mounted = main["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned();
    let upper = format!("{mounted}.up");
    let main_volumes = volumes_of(&main);
    assert_eq!(main_volumes.len(), 3, "{main_volumes:?}");
    let lower = main_volumes
        .iter()
        .find(|v| **v != mounted && **v != upper)
        .unwrap()
        .clone();

    // A branch on the snapshot's layers.
    block_on(api.api().branch(
        &domain_id,
        "files@fix",
        &BranchFrom::Snapshot(base.clone()),
        &data("fix"),
        UpCause::Person,
    ))
    .expect("a branch");
    running(&api, &domain, "files@fix");
    write(&api, &domain, "files@fix", "/srv/data/three", "branch");

    // A template's base and the instance standing on it.
    let request = berth_client::UpRequest {
        spec: data("tpl"),
        cause: berth_client::UpCause::Person,
        template: true,
    };
    let did = support::domain_id(&domain);
    api.call(|c| c.up_request(&did, "files@tpl", &request))
        .expect("an up with a template");
    running(&api, &domain, "files@tpl");
    write(&api, &domain, "files@tpl", "/srv/data/four", "template");

    // An archived instance's volume.
    let old = up_running(&api, &domain, "files@old", &data("old"));
    let archived = old["volumes"][0]["dockerName"].as_str().unwrap().to_owned();
    write(&api, &domain, "files@old", "/srv/data/five", "archived");
    block_on(api.api().archive(&domain_id, "files@old")).expect("an archive");

    // A volume a spec change dropped.
    let both = files_spec("drop", &[("data", "/srv/data"), ("logs", "/srv/logs")]);
    up_running(&api, &domain, "files@drop", &both);
    write(&api, &domain, "files@drop", "/srv/logs/six", "dropped");
    up_running(&api, &domain, "files@drop", &data("drop"));

    let before = volumes(&daemon.prefix);
    assert!(
        before.contains(&lower) && before.contains(&upper),
        "{before:?}"
    );
    assert_held(&before);
    let pruned = docker(&[
        "volume",
        "prune",
        "-f",
        "--filter",
        &format!("label=berth.prefix={}", daemon.prefix),
    ]);
    assert_eq!(volumes(&daemon.prefix), before, "the prune took: {pruned}");
    rm_refused(&lower);
    rm_refused(&upper);

    // Every marker, after a stop and an up.
    for (key, spec) in [
        ("files@main", data("main")),
        ("files@fix", data("fix")),
        ("files@tpl", data("tpl")),
    ] {
        block_on(api.api().stop(&domain_id, key, "tester")).expect("a stop");
        api.settled(&domain, key, &["stopped"], READY);
        up_running(&api, &domain, key, &spec);
    }
    assert_eq!(read(&api, &domain, "files@main", "/srv/data/one"), "before");
    assert_eq!(read(&api, &domain, "files@main", "/srv/data/two"), "after");
    assert_eq!(read(&api, &domain, "files@fix", "/srv/data/one"), "before");
    assert_eq!(
        read(&api, &domain, "files@fix", "/srv/data/three"),
        "branch"
    );
    assert_eq!(
        read(&api, &domain, "files@tpl", "/srv/data/four"),
        "template"
    );
    // An archived instance never comes back: its volume is read as it is on the engine.
    let reader = format!("{}-reader", daemon.prefix);
    let five = docker(&[
        "run",
        "--rm",
        "--name",
        &reader,
        "--network",
        "none",
        "-v",
        &format!("{archived}:/v:ro"),
        &support::busybox_image(),
        "cat",
        "/v/five",
    ]);
    assert_eq!(five, "archived");
    up_running(&api, &domain, "files@drop", &both);
    assert_eq!(
        read(&api, &domain, "files@drop", "/srv/logs/six"),
        "dropped"
    );

    // A holder removed by hand is made again at once, and the volume is held again.
    let events = EngineEvents::watch(&daemon.prefix);
    docker(&["rm", "-f", &format!("{upper}.held")]);
    created(&events);
    assert_held(&BTreeSet::from([upper.clone()]));
    rm_refused(&upper);

    // The daemon says what holds its volumes.
    let daemon_view = block_on(api.api().daemon()).expect("the daemon view");
    let holders = daemon_view.holders.expect("the holders after a resync");
    let held: BTreeSet<String> = holders.held.iter().map(|h| h.volume.clone()).collect();
    assert!(held.is_superset(&before), "{held:?} {before:?}");
    assert!(holders.unheld.is_empty(), "{:?}", holders.unheld);
}

#[test]
fn a_daemon_killed_while_a_snapshot_changes_the_holders_converges_with_every_volume_held() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("holders-kill");
    let domain_id = support::domain_id(&domain);
    up_running(&api, &domain, "files@main", &data("main"));
    write(&api, &domain, "files@main", "/srv/data/one", "before");
    // Killed the moment the snapshot is accepted: the source is stopping, its layers and their
    // holders being made, or it moved already.
    let taken = block_on(api.api().snapshot(&domain_id, "files@main", "base")).expect("a snapshot");
    daemon.kill9();

    daemon.start_again();
    let api = daemon.client();
    wait_ready(&api, &domain, &taken.snapshot_id);
    running(&api, &domain, "files@main");
    assert_eq!(read(&api, &domain, "files@main", "/srv/data/one"), "before");
    let all = volumes(&daemon.prefix);
    assert_eq!(all.len(), 3, "{all:?}");
    assert_held(&all);
    docker(&[
        "volume",
        "prune",
        "-f",
        "--filter",
        &format!("label=berth.prefix={}", daemon.prefix),
    ]);
    assert_eq!(volumes(&daemon.prefix), all);
}

#[test]
fn a_volume_removed_while_its_holder_was_gone_fails_its_instance_with_the_true_sentence() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("holders-lost");
    let domain_id = support::domain_id(&domain);
    up_running(&api, &domain, "files@main", &data("main"));
    snapshot_ready(&api, &domain, "files@main", "base");
    let main = running(&api, &domain, "files@main");
    let upper = format!("{}.up", main["volumes"][0]["dockerName"].as_str().unwrap());

    // With the daemon away, a person removes the holder and then the upper layer.
    daemon.stop();
    docker(&["rm", "-f", &format!("{upper}.held")]);
    docker(&["volume", "rm", &upper]);
    daemon.start_again();
    let api = daemon.client();

    let failed = api.settled(&domain, "files@main", &["failed"], READY);
    let message = failed["state"]["message"].as_str().unwrap();
    assert!(
        message.contains(&upper) && message.contains("removed outside berth"),
        "{message}"
    );
    // An up does not start it on an empty layer: the same sentence.
    up_running_fails(&api, &domain, &upper);
    // Nothing else of it was touched: its snapshot is still there.
    let snapshots = block_on(api.api().snapshots(&domain_id, None)).expect("snapshots");
    assert_eq!(snapshots.len(), 1, "{snapshots:?}");
}

fn up_running_fails(api: &Client, domain: &str, upper: &str) {
    api.up(domain, "files@main", &data("main"), "person")
        .expect(200);
    let again = api.settled(domain, "files@main", &["running", "failed"], READY);
    assert_eq!(again["state"]["kind"], "failed", "{again}");
    assert!(
        again["state"]["message"].as_str().unwrap().contains(upper),
        "{again}"
    );
}
