//! Resource instances on the real Docker engine: up, ready checks, spec changes with volumes
//! kept, failures, stop and wake, restarts, crashes of the daemon, hardening, archive.

use berth_testkit as support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    Daemon, busybox_image, container_of, containers_of, docker, docker_inspect, domain_id, refused,
    spec, volume_image,
};

const READY: Duration = Duration::from_secs(60);

fn volume_names(instance: &Value) -> Vec<String> {
    instance["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["dockerName"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn an_instance_with_a_tcp_ready_check_runs_and_a_repeated_up_changes_nothing() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let s = spec(&busybox_image(), "web");
    let first = api.up(&domain, "web", &s, "use").expect(200);
    assert_eq!(first["desired"], "running");
    assert!(
        first["resourceInstanceId"]
            .as_str()
            .unwrap()
            .starts_with("rin:")
    );
    assert!(first["specDigest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(first["alias"], "web");
    assert_eq!(first["worktreeKey"], Value::Null);
    assert_eq!(first["stopReason"], Value::Null);
    assert_eq!(first["lastReachedAt"], Value::Null);
    let fields: Vec<&String> = first.as_object().unwrap().keys().collect();
    assert_eq!(
        fields.len(),
        12,
        "exactly the contract's fields: {fields:?}"
    );

    let running = api.wait_state(&domain, "web", "running", READY);
    assert!(running["startedAt"].is_string());
    assert!(running["state"]["since"].is_string());

    // Key order in the request does not change the digest; the same spec is idempotent.
    let reordered: Value = serde_json::from_str(&support::reorder_keys(&s)).unwrap();
    let again = api.up(&domain, "web", &reordered, "use").expect(200);
    assert_eq!(again["resourceInstanceId"], first["resourceInstanceId"]);
    assert_eq!(again["specDigest"], first["specDigest"]);
    assert_eq!(again["state"]["kind"], "running");
    assert_eq!(containers_of(&running).len(), 1);
}

#[test]
fn an_instance_with_an_exec_ready_check_runs() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let mut s = spec(&busybox_image(), "web");
    s["ready"] = json!({"kind": "exec", "argv": ["sh", "-c", "test -f /tmp/ready"], "user": "app"});
    s["command"] = json!([
        "sh",
        "-c",
        "sleep 1; touch /tmp/ready; exec httpd -f -p 8080 -h /www"
    ]);
    api.up(&domain, "web", &s, "person").expect(200);
    let starting = api.wait_state(&domain, "web", "starting", READY);
    assert_eq!(starting["state"]["kind"], "starting");
    api.wait_state(&domain, "web", "running", READY);
}

#[test]
fn a_spec_change_replaces_the_container_and_keeps_every_volume() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let mut s = spec(&volume_image(), "web");
    let first = api.up(&domain, "web", &s, "use").expect(200);
    let running = api.wait_state(&domain, "web", "running", READY);
    let volumes = running["volumes"].as_array().unwrap().clone();
    let names: Vec<&str> = volumes
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        vec!["data", "image-data"],
        "the image's VOLUME /data gets its own named volume"
    );
    for v in &volumes {
        let docker_name = v["dockerName"].as_str().unwrap();
        let inspected = docker_inspect("volume", docker_name).expect("the volume exists");
        assert_eq!(inspected["Labels"]["berth.managed"], "1");
        assert_eq!(
            inspected["Labels"]["berth.instance"],
            first["resourceInstanceId"]
        );
    }
    let old = container_of(&running);
    let old_id = docker(&["inspect", "--format", "{{.Id}}", &old]);
    docker(&[
        "exec",
        &old,
        "sh",
        "-c",
        "echo kept > /srv/data/file && echo also > /data/file",
    ]);

    s["env"]["GREETING"] = json!("changed");
    let changed = api.up(&domain, "web", &s, "use").expect(200);
    assert_eq!(changed["resourceInstanceId"], first["resourceInstanceId"]);
    assert_ne!(changed["specDigest"], first["specDigest"]);
    let running = api.wait_for(&domain, "web", READY, "running on a new container", |i| {
        i["state"]["kind"] == "running" && containers_of(i).len() == 1 && {
            let name = container_of(i);
            docker(&["inspect", "--format", "{{.Id}}", &name]) != old_id
        }
    });
    let name = container_of(&running);
    let env = docker(&["inspect", "--format", "{{json .Config.Env}}", &name]);
    assert!(env.contains("GREETING=changed"), "{env}");
    assert_eq!(docker(&["exec", &name, "cat", "/srv/data/file"]), "kept");
    assert_eq!(docker(&["exec", &name, "cat", "/data/file"]), "also");
    assert_eq!(running["volumes"], json!(volumes));
}

#[test]
fn a_tag_only_image_is_refused_and_nothing_is_written() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let s = spec("busybox:latest", "web");
    let err = api
        .up(&domain, "web", &s, "use")
        .expect_error(400, "ResourceInstanceSpecRefusedError");
    assert_eq!(err["refusals"][0]["field"], "spec");
    assert!(
        err["refusals"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("spec.image must be an image pinned by digest")
    );
    let mut forbidden = spec(&busybox_image(), "web");
    forbidden["privileged"] = json!(true);
    forbidden["binds"] = json!(["/:/host"]);
    let err = api
        .up(&domain, "web", &forbidden, "use")
        .expect_error(400, "ResourceInstanceSpecRefusedError");
    assert_eq!(
        err["refusals"],
        json!([
            {"field": "binds", "reason": "an instance mounts named volumes only, never a host path or the Docker socket"},
            {"field": "privileged", "reason": "berth never runs an instance privileged"}
        ])
    );
    let did = domain_id(&domain);
    refused(
        api.call(|c| c.instance(&did, "web")),
        404,
        "ResourceInstanceNotFoundError",
    );
    assert!(support::containers_named(&daemon.prefix).is_empty());
}

#[test]
fn a_digest_the_registry_lacks_fails_with_a_readable_message_and_creates_nothing() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let registry = support::fixture("BERTH_TEST_REGISTRY");
    let missing = format!(
        "{registry}/berth-fixtures/busybox@sha256:{}",
        "ab".repeat(32)
    );
    api.up(&domain, "web", &spec(&missing, "web"), "use")
        .expect(200);
    let failed = api.wait_state(&domain, "web", "failed", READY);
    let message = failed["state"]["message"].as_str().unwrap();
    assert!(message.contains("sha256:abab"), "{message}");
    assert!(message.to_lowercase().contains("registry"), "{message}");
    assert!(support::containers_named(&daemon.prefix).is_empty());
    for name in volume_names(&failed) {
        assert!(
            docker_inspect("volume", &name).is_none(),
            "no volume {name} for a failed pull"
        );
    }
}

#[test]
fn conflicts_answer_their_errors() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let image = busybox_image();
    api.up(&domain, "web", &spec(&image, "web"), "use")
        .expect(200);
    // The same alias for the same worktree key.
    api.up(&domain, "web2", &spec(&image, "web"), "use")
        .expect_error(409, "ResourceInstanceAliasTakenError");
    // The same alias for another worktree key is fine.
    let mut scoped = spec(&image, "web");
    scoped["worktreeKey"] = json!("feature-x");
    api.up(&domain, "web-x", &scoped, "use").expect(200);
    // Unknown key.
    let did = domain_id(&domain);
    refused(
        api.call(|c| c.instance(&did, "nope")),
        404,
        "ResourceInstanceNotFoundError",
    );
    refused(
        api.call(|c| c.stop(&did, "nope", "Ada")),
        404,
        "ResourceInstanceNotFoundError",
    );
    // A fenced domain admits no new instance.
    api.call(|c| c.fence(&did)).expect("a fence");
    let err = api
        .up(&domain, "other", &spec(&image, "other"), "use")
        .expect_error(409, "ResourceDomainNotActiveError");
    assert_eq!(err["state"], "fenced");
    api.call(|c| c.unfence(&did)).expect("an unfence");
    // An archived key stays archived.
    api.call(|c| c.archive(&did, "web-x")).expect("an archive");
    api.up(&domain, "web-x", &scoped, "person")
        .expect_error(409, "ResourceInstanceArchivedError");
    refused(
        api.call(|c| c.stop(&did, "web-x", "Ada")),
        409,
        "ResourceInstanceArchivedError",
    );
    // Its alias is free again.
    api.up(&domain, "web-y", &scoped, "use").expect(200);
}

#[test]
fn a_person_stop_survives_a_use_up_and_yields_to_a_person_up() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let s = spec(&busybox_image(), "web");
    api.up(&domain, "web", &s, "use").expect(200);
    let running = api.wait_state(&domain, "web", "running", READY);
    let name = container_of(&running);

    let did = domain_id(&domain);
    let stopping = api.answer(|c| c.stop(&did, "web", "Ada")).expect(200);
    assert_eq!(stopping["desired"], "stopped");
    assert_eq!(
        stopping["stopReason"],
        json!({"kind": "person", "by": "Ada"})
    );
    let stopped = api.wait_state(&domain, "web", "stopped", READY);
    assert_eq!(
        stopped["state"]["reason"],
        json!({"kind": "person", "by": "Ada"})
    );
    assert_eq!(
        docker(&["inspect", "--format", "{{.State.Running}}", &name]),
        "false"
    );

    let after_use = api.up(&domain, "web", &s, "use").expect(200);
    assert_eq!(after_use["desired"], "stopped");
    assert_eq!(after_use["state"]["kind"], "stopped");
    // Once berth has acted on that up, the instance is still stopped.
    api.settled(&domain, "web", &["stopped"], READY);

    let after_person = api.up(&domain, "web", &s, "person").expect(200);
    assert_eq!(after_person["desired"], "running");
    assert_eq!(after_person["stopReason"], Value::Null);
    api.wait_state(&domain, "web", "running", READY);
}

#[test]
fn a_container_killed_or_removed_from_outside_comes_back_with_its_volumes() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(&domain, "web", &spec(&busybox_image(), "web"), "use")
        .expect(200);
    let running = api.wait_state(&domain, "web", "running", READY);
    let name = container_of(&running);
    docker(&["exec", &name, "sh", "-c", "echo survived > /srv/data/file"]);
    let started = running["startedAt"].as_str().unwrap().to_owned();

    docker(&["kill", &name]);
    let exited = api.wait_state(&domain, "web", "exited", READY);
    assert!(exited["state"]["at"].is_string());
    assert_eq!(exited["state"]["exitCode"], 137);
    let back = api.wait_for(&domain, "web", READY, "running again", |i| {
        i["state"]["kind"] == "running" && i["startedAt"].as_str() != Some(started.as_str())
    });
    assert_eq!(container_of(&back), name);

    docker(&["rm", "-f", &name]);
    // Running since a later start: until berth has seen the removal, the instance still says
    // `running` from before, and a container made again may exist but not have started yet.
    let back_since = back["startedAt"].as_str().unwrap().to_owned();
    let recreated = api.wait_for(&domain, "web", READY, "recreated", |i| {
        i["state"]["kind"] == "running"
            && i["startedAt"].as_str() != Some(back_since.as_str())
            && containers_of(i).len() == 1
            && docker_inspect("container", &name).is_some()
    });
    assert_eq!(
        docker(&["exec", &container_of(&recreated), "cat", "/srv/data/file"]),
        "survived"
    );
}

#[test]
fn a_daemon_killed_in_the_middle_of_an_up_or_a_stop_converges_after_restart() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let s = spec(&volume_image(), "web");
    let up = api.up(&domain, "web", &s, "use").expect(200);
    // Fault timing, not a wait for berth: the kill lands while the up is being carried out.
    std::thread::sleep(Duration::from_millis(150));
    daemon.kill9();
    daemon.start_again();
    let api = daemon.client();
    let running = api.wait_state(&domain, "web", "running", READY);
    assert_eq!(running["resourceInstanceId"], up["resourceInstanceId"]);
    let name = container_of(&running);
    docker(&["exec", &name, "sh", "-c", "echo kept > /srv/data/file"]);

    let did = domain_id(&domain);
    api.call(|c| c.stop(&did, "web", "Ada")).expect("a stop");
    // Fault timing, not a wait for berth: the kill lands while the stop is being carried out.
    std::thread::sleep(Duration::from_millis(50));
    daemon.kill9();
    daemon.start_again();
    let api = daemon.client();
    let stopped = api.wait_state(&domain, "web", "stopped", READY);
    assert_eq!(
        docker(&[
            "inspect",
            "--format",
            "{{.State.Running}}",
            &container_of(&stopped)
        ]),
        "false"
    );

    api.up(&domain, "web", &s, "person").expect(200);
    let running = api.wait_state(&domain, "web", "running", READY);
    assert_eq!(container_of(&running), name, "one container, the same one");
    assert_eq!(docker(&["exec", &name, "cat", "/srv/data/file"]), "kept");
    for volume in volume_names(&running) {
        assert!(docker_inspect("volume", &volume).is_some(), "{volume} kept");
    }
}

#[test]
fn an_instance_container_is_hardened_and_labelled() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let instance = api
        .up(&domain, "web", &spec(&busybox_image(), "web"), "use")
        .expect(200);
    let running = api.wait_state(&domain, "web", "running", READY);
    let c = docker_inspect("container", &container_of(&running)).unwrap();
    let host = &c["HostConfig"];
    assert_eq!(host["Privileged"], false);
    assert!(
        host["CapAdd"].is_null() || host["CapAdd"] == json!([]),
        "{}",
        host["CapAdd"]
    );
    assert!(
        host["SecurityOpt"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o.as_str().unwrap().starts_with("no-new-privileges"))
    );
    assert_eq!(host["Init"], true);
    assert_eq!(host["NanoCpus"], 250_000_000);
    assert_eq!(host["Memory"], 67_108_864);
    assert!(host["Binds"].is_null() || host["Binds"] == json!([]));
    assert_eq!(host["PidMode"], "");
    assert_eq!(host["IpcMode"], "private");
    for mount in c["Mounts"].as_array().unwrap() {
        assert_eq!(mount["Type"], "volume", "only named volumes: {mount}");
    }
    let networks: Vec<&String> = c["NetworkSettings"]["Networks"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(networks.len(), 1);
    assert!(
        networks[0].starts_with(&daemon.prefix),
        "only berth's network: {networks:?}"
    );
    let aliases = &c["NetworkSettings"]["Networks"][networks[0]]["Aliases"];
    assert!(
        aliases.as_array().unwrap().contains(&json!("web")),
        "{aliases}"
    );
    let labels = &c["Config"]["Labels"];
    assert_eq!(labels["berth.managed"], "1");
    assert_eq!(labels["berth.prefix"], daemon.prefix.as_str());
    assert_eq!(labels["berth.domain"], domain.as_str());
    assert_eq!(labels["berth.instance"], instance["resourceInstanceId"]);
    assert_eq!(labels["berth.key"], "web");
    assert_eq!(labels["berth.spec-digest"], instance["specDigest"]);
    // The store's identity, on the container and on the network and volumes made for it.
    let store = api.answer(|c| c.daemon()).expect(200)["storeId"].clone();
    assert!(store.as_str().unwrap().starts_with("bst:"), "{store}");
    assert_eq!(labels["berth.store"], store);
    assert_eq!(
        labels["berth.store-dir"],
        daemon.data_dir.display().to_string().as_str()
    );
    let network = docker_inspect("network", networks[0]).expect("the network");
    assert_eq!(network["Labels"]["berth.store"], store);
    for mount in c["Mounts"].as_array().unwrap() {
        let volume = docker_inspect("volume", mount["Name"].as_str().unwrap()).expect("a volume");
        assert_eq!(volume["Labels"]["berth.store"], store);
    }
}

#[test]
fn archive_keeps_and_measures_volumes_and_a_domain_archive_archives_everything() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let image = volume_image();
    api.up(&domain, "a", &spec(&image, "a"), "use").expect(200);
    api.up(&domain, "b", &spec(&image, "b"), "use").expect(200);
    let a = api.wait_state(&domain, "a", "running", READY);
    api.wait_state(&domain, "b", "running", READY);
    docker(&[
        "exec",
        &container_of(&a),
        "sh",
        "-c",
        "head -c 1048576 /dev/zero > /srv/data/blob",
    ]);

    let did = domain_id(&domain);
    let archived = api.answer(|c| c.archive(&did, "a")).expect(200);
    assert_eq!(archived["instance"]["desired"], "archived");
    assert_eq!(archived["instance"]["state"]["kind"], "archived");
    let volumes = archived["volumes"].as_array().unwrap();
    assert_eq!(volumes.len(), 2);
    let data = volumes.iter().find(|v| v["name"] == "data").unwrap();
    assert_eq!(data["instanceKey"], "a");
    assert!(data["bytes"].as_i64().unwrap() >= 1_048_576, "{data}");
    assert!(containers_of(&a).is_empty(), "the container is removed");
    for v in volumes {
        assert!(
            docker_inspect("volume", v["dockerName"].as_str().unwrap()).is_some(),
            "kept: {v}"
        );
    }
    let listed = api.call(|c| c.instances(&did, true)).expect("a list");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        api.call(|c| c.instances(&did, false))
            .expect("a list")
            .len(),
        1
    );

    let started = Instant::now();
    let domain_archive = api.answer(|c| c.archive_domain(&did)).expect(200);
    assert!(started.elapsed() < Duration::from_secs(60));
    let kept = domain_archive["volumes"].as_array().unwrap();
    assert_eq!(kept.len(), 4, "every volume of both instances: {kept:?}");
    for v in kept {
        assert!(
            docker_inspect("volume", v["dockerName"].as_str().unwrap()).is_some(),
            "kept: {v}"
        );
    }
    assert_eq!(
        api.call(|c| c.domain(&did)).expect("the domain").state,
        berth_client::DomainState::Archived
    );
    assert_eq!(
        api.call(|c| c.instances(&did, false)).expect("a list"),
        vec![]
    );
    assert_eq!(
        api.call(|c| c.instances(&did, true)).expect("a list").len(),
        2
    );
    let err = api
        .up(&domain, "c", &spec(&image, "c"), "use")
        .expect_error(409, "ResourceDomainNotActiveError");
    assert_eq!(err["state"], "archived");
    assert!(support::containers_named(&daemon.prefix).is_empty());
}

#[test]
fn logs_answer_the_last_lines_and_follow_what_comes_next() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let mut s = spec(&busybox_image(), "web");
    s["command"] = json!([
        "sh",
        "-c",
        "echo first-line; (i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.3; done) & exec httpd -f -p 8080 -h /www"
    ]);
    api.up(&domain, "web", &s, "use").expect(200);
    api.wait_state(&domain, "web", "running", READY);
    let path = format!("/v1/resource-domains/{domain}/instances/web/logs");
    let all = api.raw("GET", &format!("{path}?tail=1000"), None, &[]);
    assert_eq!(all.status, 200);
    assert!(
        all.body.as_str().unwrap().contains("first-line"),
        "{:?}",
        all.body
    );

    // Follow: new lines arrive on an open response.
    let url = format!("{}{path}?tail=0&follow=true", daemon.base);
    let mut res = reqwest::blocking::Client::new()
        .get(url)
        .bearer_auth(support::KEY)
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen.contains("tick-") {
        assert!(Instant::now() < deadline, "no followed line: {seen:?}");
        let mut buf = [0u8; 256];
        let n = std::io::Read::read(&mut res, &mut buf).unwrap();
        assert!(n > 0, "the stream ended early");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(
        !seen.contains("first-line"),
        "tail=0 sends none of the old lines: {seen:?}"
    );
    drop(res);

    api.get(&format!("{path}?tail=lots"))
        .expect_error(400, "RequestRefusedError");
    let did = domain_id(&domain);
    refused(
        api.call(|c| c.logs(&did, "nope", None, false)).map(|_| ()),
        404,
        "ResourceInstanceNotFoundError",
    );
}

#[test]
fn a_changed_spec_is_starting_until_a_container_of_it_is_ready() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let mut s = spec(&busybox_image(), "web");
    api.up(&domain, "web", &s, "use").expect(200);
    let running = api.wait_state(&domain, "web", "running", READY);
    let old_id = docker(&["inspect", "--format", "{{.Id}}", &container_of(&running)]);

    s["env"]["GREETING"] = json!("changed");
    let changed = api.up(&domain, "web", &s, "use").expect(200);
    assert_ne!(changed["specDigest"], running["specDigest"]);
    assert_eq!(
        changed["state"]["kind"], "starting",
        "the old container still serves: the new spec is not running yet: {changed}"
    );
    // Whenever berth says running for the new spec, the container is the new spec's. Every
    // change berth reports comes on the domain's event stream (the first event is the instance
    // as it is now), so no state between the up and running goes unseen.
    let mut seen = Vec::new();
    let running = support::block_on(async {
        use futures_util::StreamExt;
        let mut events = std::pin::pin!(api.api().events(&support::domain_id(&domain), None));
        loop {
            let event = tokio::time::timeout(READY, events.next())
                .await
                .unwrap_or_else(|_| panic!("never running again: {seen:?}"))
                .expect("the event stream runs")
                .expect("an event");
            let berth_client::DomainEvent::Instance { instance, .. } = event else {
                continue;
            };
            if instance.key != "web" {
                continue;
            }
            let i = serde_json::to_value(&instance).unwrap();
            let kind = i["state"]["kind"].as_str().unwrap_or_default().to_owned();
            if seen.last() != Some(&kind) {
                seen.push(kind.clone());
            }
            if kind == "running" {
                break i;
            }
            assert!(
                ["starting", "not-started"].contains(&kind.as_str()),
                "{seen:?}: {i}"
            );
        }
    });
    assert_eq!(running["specDigest"], changed["specDigest"]);
    let name = container_of(&running);
    let container = docker_inspect("container", &name).expect("its container");
    assert_ne!(
        container["Id"],
        old_id.as_str(),
        "the container was replaced"
    );
    assert_eq!(container["State"]["Running"], true);
    assert_eq!(
        container["Config"]["Labels"]["berth.spec-digest"],
        changed["specDigest"]
    );
    let env = container["Config"]["Env"].to_string();
    assert!(env.contains("GREETING=changed"), "{env}");
}

/// Ups `change(spec)` on a running instance and checks that berth took the new spec (its
/// evidence is for it, verified) on the very container that ran before, never restarted.
fn a_change_that_never_reaches_the_container_keeps_it(change: impl Fn(&mut Value)) {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let mut s = spec(&busybox_image(), "web");
    api.up(&domain, "web", &s, "use").expect(200);
    let running = api.wait_state(&domain, "web", "running", READY);
    let before = docker_inspect("container", &container_of(&running)).expect("its container");

    change(&mut s);
    let changed = api.up(&domain, "web", &s, "use").expect(200);
    assert_ne!(changed["specDigest"], running["specDigest"]);
    assert_eq!(changed["state"]["kind"], "running", "{changed}");
    // The wait route answers once berth has acted on the up; the evidence it keeps is then for
    // the new spec.
    api.settled(&domain, "web", &["running"], READY);
    let did = domain_id(&domain);
    let mut evidence = Value::Null;
    support::wait_until(READY, "evidence for the new spec", || {
        evidence = api.answer(|c| c.image(&did, "web")).expect(200);
        evidence["specDigest"] == changed["specDigest"]
            && evidence["verificationStatus"] == "verified"
    });
    let now = api.instance(&domain, "web");
    assert_eq!(now["specDigest"], changed["specDigest"]);
    assert_eq!(now["state"]["kind"], "running", "{now}");
    assert_eq!(evidence["containerId"], before["Id"], "{evidence}");
    let after = docker_inspect("container", &container_of(&now)).expect("its container");
    assert_eq!(after["Id"], before["Id"], "the container was kept");
    assert_eq!(
        after["State"]["StartedAt"], before["State"]["StartedAt"],
        "the container was not restarted"
    );
    assert_eq!(after["State"]["Running"], true);
}

#[test]
fn a_changed_idle_time_keeps_the_running_container() {
    a_change_that_never_reaches_the_container_keeps_it(|s| {
        s["idleStopAfterSeconds"] = json!(7200);
    });
}

#[test]
fn a_changed_ready_check_keeps_the_running_container() {
    a_change_that_never_reaches_the_container_keeps_it(|s| {
        s["ready"] = json!({"kind": "exec", "argv": ["sh", "-c", "true"], "user": "app"});
    });
}
