//! Pools and leases end to end with the postgres fixture (docs/pools.md): a pool keeps its
//! size of instances made from a template ready and frozen; a lease hands one out with a host endpoint
//! psql connects to at once; a reset gives the same endpoint fresh data; a release removes the
//! instance and its layer and the pool refills; a lease not renewed is released; an empty pool
//! waits or answers at once; a lease is its key's; a daemon killed mid-refill or mid-reset
//! converges; nothing is left once the pool is deleted.

use berth_testkit as support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Client, Daemon, KEY, Launch, OTHER_KEY, docker, fixture, key_id, wait_until};

const READY: Duration = Duration::from_secs(180);

fn pg_spec() -> Value {
    json!({
        "alias": "db",
        "worktreeKey": null,
        "image": fixture("BERTH_TEST_POSTGRES_IMAGE"),
        "command": null,
        "env": {"POSTGRES_PASSWORD": "dev-secret"},
        "volumes": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}],
        "limits": {"cpuMillicores": 1000, "memoryBytes": 536_870_912},
        "ready": {"kind": "exec", "argv": ["pg_isready", "-h", "127.0.0.1", "-U", "postgres"], "user": null},
        "idleStopAfterSeconds": 3600
    })
}

fn create_pool(api: &Client, domain: &str, name: &str, size: i64) -> Value {
    api.post(
        &format!("/v1/resource-domains/{domain}/pools"),
        json!({"name": name, "spec": pg_spec(), "from": {"template": true}, "size": size}),
    )
    .expect(201)
}

fn lease(api: &Client, domain: &str, pool: &str, body: Value) -> Value {
    let lease = api
        .post(
            &format!("/v1/resource-domains/{domain}/pools/{pool}/leases"),
            body,
        )
        .expect(201);
    assert_eq!(lease["instance"]["state"]["kind"], "running", "{lease}");
    lease
}

fn host_port(lease: &Value) -> u64 {
    let endpoints = lease["endpoints"].as_array().unwrap();
    let pg = endpoints
        .iter()
        .find(|e| e["port"] == 5432)
        .unwrap_or_else(|| panic!("no endpoint for 5432: {lease}"));
    assert_eq!(pg["host"], "127.0.0.1");
    pg["hostPort"].as_u64().unwrap()
}

/// psql on the host through the lease's endpoint: what a test's `DATABASE_URL` reaches.
fn psql(port: u64, query: &str) -> String {
    let out = std::process::Command::new("psql")
        .args([
            &format!("postgresql://postgres:dev-secret@127.0.0.1:{port}/postgres"),
            "-v",
            "ON_ERROR_STOP=1",
            "-tAqc",
            query,
        ])
        .output()
        .expect("psql runs");
    assert!(
        out.status.success(),
        "{query}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The domain's containers (`container`: stopped ones and holders too; `running`: running
/// ones) or volumes, one per line, but the template's, which stay for the next pool or instance made from it.
fn domain_objects(kind: &str, domain: &str) -> Vec<String> {
    let label = format!("label=berth.domain={domain}");
    let format = match kind {
        "container" | "running" => "{{.Names}} {{.Label \"berth.template\"}}",
        _ => "{{.Name}} {{.Label \"berth.template\"}}",
    };
    let args = match kind {
        "container" => vec!["ps", "-a", "--format", format, "--filter", &label],
        "running" => vec!["ps", "--format", format, "--filter", &label],
        _ => vec!["volume", "ls", "--format", format, "--filter", &label],
    };
    docker(&args)
        .lines()
        .filter_map(|line| match line.trim().split_once(' ') {
            Some((_, template)) if !template.trim().is_empty() => None,
            _ if line.trim().is_empty() => None,
            _ => Some(line.trim().to_owned()),
        })
        .collect()
}

/// The domain's paused (frozen) containers.
fn paused(domain: &str) -> Vec<String> {
    docker(&[
        "ps",
        "--filter",
        "status=paused",
        "--filter",
        &format!("label=berth.domain={domain}"),
        "--format",
        "{{.Names}}",
    ])
    .lines()
    .filter(|l| !l.trim().is_empty())
    .map(str::to_owned)
    .collect()
}

fn instance_keys(api: &Client, domain: &str) -> Vec<String> {
    api.get(&format!("/v1/resource-domains/{domain}/instances"))
        .expect(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["key"].as_str().unwrap().to_owned())
        .collect()
}

fn volume_of(instance: &Value) -> String {
    instance["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_lease_hands_out_a_ready_instance_a_reset_gives_its_endpoint_fresh_data_and_a_release_removes_it()
 {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("pools");
    let pool = create_pool(&api, &domain, "pg", 2);
    assert_eq!(pool["name"], "pg");
    assert_eq!(pool["size"], 2);
    assert_eq!(pool["from"], json!({"template": true}));
    assert_eq!(pool["deleting"], false);

    // A second pool of the name is refused, writing nothing.
    api.post(
        &format!("/v1/resource-domains/{domain}/pools"),
        json!({"name": "pg", "spec": pg_spec(), "from": {"template": true}, "size": 1}),
    )
    .expect_error(409, "ResourcePoolExistsError");
    let refused = api
        .post(
            &format!("/v1/resource-domains/{domain}/pools"),
            json!({"name": "Bad Name", "spec": pg_spec(), "from": {"template": false}, "size": 0}),
        )
        .expect_error(400, "RequestRefusedError");
    let message = refused["message"].as_str().unwrap();
    for place in ["body.name", "body.from.template", "body.size"] {
        assert!(message.contains(place), "{message}");
    }

    // The lease waits for a ready instance, and its endpoint answers psql at once.
    let first = lease(&api, &domain, "pg", json!({}));
    assert!(
        first["leaseId"].as_str().unwrap().starts_with("pls:"),
        "{first}"
    );
    assert_eq!(first["pool"], "pg");
    assert_eq!(first["resets"], 0);
    assert_eq!(first["ttlSeconds"], 600);
    let port = host_port(&first);
    assert_eq!(psql(port, "SELECT 1"), "1");
    psql(
        port,
        "CREATE TABLE notes AS SELECT 'kept until reset' AS body",
    );
    let first_key = first["instance"]["key"].as_str().unwrap().to_owned();
    let first_volume = volume_of(&first["instance"]);
    // Its instance started on the template (an overlay), not on an empty volume.
    let volume = support::docker_inspect("volume", &first_volume).unwrap();
    assert_eq!(volume["Options"]["type"], "overlay", "{volume}");

    // `GET .../instances` lists the leased instance, not the waiting ones.
    let keys = instance_keys(&api, &domain);
    assert_eq!(keys, vec![first_key.clone()], "{keys:?}");
    let view = api
        .get(&format!("/v1/resource-domains/{domain}/pools/pg"))
        .expect(200);
    assert_eq!(view["leased"], 1, "{view}");
    // The leased instance runs; the pool's waiting ones, refilled to its size, are frozen once
    // ready (paused: the cgroup freezer), costing no CPU while they wait.
    assert!(first["instance"]["frozen"].is_null(), "{first}");
    wait_until(READY, "the pool's two waiting instances are frozen", || {
        paused(&domain).len() == 2
    });

    // A reset: the same host port, a fresh instance, the data gone.
    let id = first["leaseId"].as_str().unwrap().to_owned();
    let reset = api
        .post(
            &format!("/v1/resource-domains/{domain}/leases/{id}/reset"),
            json!({}),
        )
        .expect(200);
    assert_eq!(reset["leaseId"], first["leaseId"]);
    assert_eq!(reset["resets"], 1);
    assert_eq!(host_port(&reset), port, "{reset}");
    assert_ne!(reset["instance"]["key"], first["instance"]["key"]);
    assert_eq!(
        psql(port, "SELECT to_regclass('notes') IS NULL"),
        "t",
        "the reset instance has the old one's data"
    );
    // The instance it held goes, with its volume (the pools loop removes it).
    let old = api.settled(&domain, &first_key, &["archived"], READY);
    assert_eq!(old["state"]["kind"], "archived", "{old}");
    wait_until(READY, "the reset lease's old volume is removed", || {
        support::docker_inspect("volume", &first_volume).is_none()
    });

    // Renewed by its key.
    let renewed = api
        .post_empty(&format!("/v1/resource-domains/{domain}/leases/{id}/renew"))
        .expect(200);
    assert!(
        renewed["expiresAt"].as_i64() >= reset["expiresAt"].as_i64(),
        "{renewed}"
    );
    let listed = api
        .get(&format!("/v1/resource-domains/{domain}/pools/pg/leases"))
        .expect(200);
    assert_eq!(listed["items"].as_array().unwrap().len(), 1, "{listed}");

    // A release answers once the instance and its layer are gone; the pool refills.
    let held_key = reset["instance"]["key"].as_str().unwrap().to_owned();
    let held_volume = volume_of(&reset["instance"]);
    api.raw(
        "DELETE",
        &format!("/v1/resource-domains/{domain}/leases/{id}"),
        None,
        &[],
    )
    .expect(204);
    assert!(support::docker_inspect("volume", &held_volume).is_none());
    assert!(support::docker_inspect("volume", &format!("{held_volume}.upper")).is_none());
    assert_eq!(
        api.instance(&domain, &held_key)["state"]["kind"],
        "archived"
    );
    api.raw(
        "DELETE",
        &format!("/v1/resource-domains/{domain}/leases/{id}"),
        None,
        &[],
    )
    .expect_error(404, "ResourcePoolLeaseNotFoundError");
    let again = lease(&api, &domain, "pg", json!({"ttlSeconds": 60}));
    assert_eq!(again["ttlSeconds"], 60);
    assert_eq!(psql(host_port(&again), "SELECT 1"), "1");

    // Deleting the pool ends its leases and removes every instance and volume it made.
    api.raw(
        "DELETE",
        &format!("/v1/resource-domains/{domain}/pools/pg"),
        None,
        &[],
    )
    .expect(204);
    api.get(&format!("/v1/resource-domains/{domain}/pools/pg"))
        .expect_error(404, "ResourcePoolNotFoundError");
    let containers = domain_objects("container", &domain);
    assert!(containers.is_empty(), "{containers:?}");
    let volumes = domain_objects("volume", &domain);
    assert!(volumes.is_empty(), "{volumes:?}");
    assert!(instance_keys(&api, &domain).is_empty());
}

#[test]
fn an_empty_pool_answers_at_once_when_asked_not_to_wait_and_otherwise_serves_the_next_instance() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("pools-empty");
    create_pool(&api, &domain, "pg", 1);
    let first = lease(&api, &domain, "pg", json!({"wait": true}));
    // Its one instance is leased: without waiting, a clear refusal at once.
    let refused = api
        .post(
            &format!("/v1/resource-domains/{domain}/pools/pg/leases"),
            json!({"wait": false}),
        )
        .expect_error(409, "ResourcePoolEmptyError");
    assert!(
        refused["message"].as_str().unwrap().contains("pg"),
        "{refused}"
    );
    // Waiting, the next instance the pool makes is served.
    let second = lease(&api, &domain, "pg", json!({}));
    assert_ne!(second["instance"]["key"], first["instance"]["key"]);
    assert_ne!(host_port(&second), host_port(&first));
    assert_eq!(psql(host_port(&second), "SELECT 1"), "1");
    // Bad requests name the field.
    let bad = api
        .post(
            &format!("/v1/resource-domains/{domain}/pools/pg/leases"),
            json!({"wait": "no", "ttlSeconds": 0, "extra": 1}),
        )
        .expect_error(400, "RequestRefusedError");
    let message = bad["message"].as_str().unwrap();
    for place in ["body.wait", "body.ttlSeconds", "body.extra"] {
        assert!(message.contains(place), "{message}");
    }
    api.post(
        &format!("/v1/resource-domains/{domain}/pools/none/leases"),
        json!({}),
    )
    .expect_error(404, "ResourcePoolNotFoundError");
    api.raw(
        "DELETE",
        &format!("/v1/resource-domains/{domain}/pools/pg"),
        None,
        &[],
    )
    .expect(204);
}

#[test]
fn a_lease_not_renewed_within_its_ttl_is_released_and_its_instance_removed() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("pools-ttl");
    create_pool(&api, &domain, "pg", 1);
    let taken = lease(&api, &domain, "pg", json!({"ttlSeconds": 2}));
    let key = taken["instance"]["key"].as_str().unwrap().to_owned();
    let id = taken["leaseId"].as_str().unwrap().to_owned();
    // Released by berth once the time runs out: the wait route says when its instance goes.
    let gone = api.settled(&domain, &key, &["archived"], READY);
    assert_eq!(gone["state"]["kind"], "archived", "{gone}");
    api.post_empty(&format!("/v1/resource-domains/{domain}/leases/{id}/renew"))
        .expect_error(404, "ResourcePoolLeaseNotFoundError");
    let volume = volume_of(&taken["instance"]);
    wait_until(READY, "the expired lease's volume is removed", || {
        support::docker_inspect("volume", &volume).is_none()
    });
    api.raw(
        "DELETE",
        &format!("/v1/resource-domains/{domain}/pools/pg"),
        None,
        &[],
    )
    .expect(204);
}

#[test]
fn a_lease_is_its_keys_another_key_acting_for_the_same_owner_can_neither_reset_nor_release_it() {
    let grants = format!(
        "[keys.{other}]\nactsFor = \"{dev}\"\ncapabilities = [\"read\", \"instances:lifecycle\"]\n",
        other = key_id(OTHER_KEY),
        dev = key_id(KEY),
    );
    let daemon = Launch::new()
        .keys(&[KEY, OTHER_KEY])
        .grants(&grants)
        .start();
    let api = daemon.client();
    let other = daemon.client_with(Some(OTHER_KEY));
    let domain = api.create_domain("pools-keys");
    create_pool(&api, &domain, "pg", 1);
    let mine = lease(&api, &domain, "pg", json!({}));
    let id = mine["leaseId"].as_str().unwrap().to_owned();
    other
        .post(
            &format!("/v1/resource-domains/{domain}/leases/{id}/reset"),
            json!({}),
        )
        .expect_error(404, "ResourcePoolLeaseNotFoundError");
    other
        .post_empty(&format!("/v1/resource-domains/{domain}/leases/{id}/renew"))
        .expect_error(404, "ResourcePoolLeaseNotFoundError");
    other
        .raw(
            "DELETE",
            &format!("/v1/resource-domains/{domain}/leases/{id}"),
            None,
            &[],
        )
        .expect_error(404, "ResourcePoolLeaseNotFoundError");
    let listed = other
        .get(&format!("/v1/resource-domains/{domain}/pools/pg/leases"))
        .expect(200);
    assert_eq!(listed["items"], json!([]), "{listed}");
    // The other key takes one of its own, which the first cannot touch either.
    let theirs = lease(&other, &domain, "pg", json!({}));
    let their_id = theirs["leaseId"].as_str().unwrap().to_owned();
    api.raw(
        "DELETE",
        &format!("/v1/resource-domains/{domain}/leases/{their_id}"),
        None,
        &[],
    )
    .expect_error(404, "ResourcePoolLeaseNotFoundError");
    // Both still answer.
    assert_eq!(psql(host_port(&mine), "SELECT 1"), "1");
    assert_eq!(psql(host_port(&theirs), "SELECT 1"), "1");
    // A key without instances:lifecycle is refused the route.
    api.raw(
        "DELETE",
        &format!("/v1/resource-domains/{domain}/leases/{id}"),
        None,
        &[],
    )
    .expect(204);
    api.raw(
        "DELETE",
        &format!("/v1/resource-domains/{domain}/pools/pg"),
        None,
        &[],
    )
    .expect(204);
}

#[test]
fn a_daemon_killed_mid_refill_and_mid_reset_loses_no_lease_and_leaves_nothing_running_for_nobody() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("pools-kill");
    create_pool(&api, &domain, "pg", 1);
    // Killed while its instance is being made (the template's container runs first).
    wait_until(READY, "the pool's first instance is being made", || {
        !docker(&[
            "ps",
            "-q",
            "--filter",
            &format!("label=berth.domain={domain}"),
        ])
        .trim()
        .is_empty()
    });
    daemon.kill9();
    daemon.start_again();
    let api = daemon.client();
    let taken = lease(&api, &domain, "pg", json!({}));
    let port = host_port(&taken);
    psql(port, "CREATE TABLE before_reset (id int)");
    let id = taken["leaseId"].as_str().unwrap().to_owned();

    // Killed while a reset waits for the pool's next instance (being made: the pool's one
    // instance is leased) or has just taken it: either way the lease stays, on its port.
    let base = format!("http://{}", daemon.address());
    let reset_path = format!("/v1/resource-domains/{domain}/leases/{id}/reset");
    let resetting = std::thread::spawn(move || {
        let api = Client::new(&base, Some(KEY));
        api.post(&reset_path, json!({})).status
    });
    wait_until(READY, "the pool makes its next instance", || {
        domain_objects("running", &domain).len() >= 2
    });
    daemon.kill9();
    let _ = resetting.join();
    daemon.start_again();
    let api = daemon.client();
    let leases = api
        .get(&format!("/v1/resource-domains/{domain}/pools/pg/leases"))
        .expect(200);
    let items = leases["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{leases}");
    assert_eq!(host_port(&items[0]), port, "{leases}");
    let reset_done = items[0]["resets"] == 1;
    let fresh = psql(port, "SELECT to_regclass('before_reset') IS NULL");
    assert_eq!(fresh == "t", reset_done, "{leases}");

    // The pool converges: its size waiting again, and every container of the domain is the
    // pool's or the lease's; a reset's old instance is removed.
    if reset_done {
        let old_key = taken["instance"]["key"].as_str().unwrap().to_owned();
        let old = api.settled(&domain, &old_key, &["archived"], READY);
        assert_eq!(old["state"]["kind"], "archived", "{old}");
    }
    wait_until(READY, "the pool is full again", || {
        let view = api
            .get(&format!("/v1/resource-domains/{domain}/pools/pg"))
            .expect(200);
        view["ready"] == 1 && view["leased"] == 1 && view["making"] == 0
    });
    wait_until(
        READY,
        "only the pool's and the lease's containers are left",
        || domain_objects("running", &domain).len() == 2,
    );
    // A reset now is served at once, on the same port.
    let reset = api
        .post(
            &format!("/v1/resource-domains/{domain}/leases/{id}/reset"),
            json!({"wait": false}),
        )
        .expect(200);
    assert_eq!(host_port(&reset), port);
    assert_eq!(psql(port, "SELECT 1"), "1");
    api.raw(
        "DELETE",
        &format!("/v1/resource-domains/{domain}/pools/pg"),
        None,
        &[],
    )
    .expect(204);
    let containers = domain_objects("container", &domain);
    assert!(containers.is_empty(), "{containers:?}");
    let volumes = domain_objects("volume", &domain);
    assert!(volumes.is_empty(), "{volumes:?}");
}
