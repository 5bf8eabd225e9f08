//! Pools and leases end to end with the postgres fixture (docs/pools.md): a pool keeps its
//! size of instances made from a template ready and frozen; a lease hands one out with a host endpoint
//! psql connects to at once; a reset gives the same endpoint fresh data; a release removes the
//! instance and its layer and the pool refills; a lease not renewed is released; an empty pool
//! waits or answers at once; a lease is its key's; a daemon killed mid-refill or mid-reset
//! converges; nothing is left once the pool is deleted.

use berth_testkit as support;

use std::time::Duration;

use berth_client::{
    InstanceView, PoolLeaseId, PoolLeaseRequest, PoolLeaseView, PoolRequest, PoolSource, PoolView,
};
use serde_json::{Value, json};
use support::{
    Answer, Client, Daemon, KEY, Launch, OTHER_KEY, docker, domain_id, fixture, key_id, wait_until,
};

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

fn pool_request(name: &str, size: i64) -> PoolRequest {
    PoolRequest {
        name: name.to_owned(),
        spec: pg_spec(),
        from: PoolSource {
            template: Some(true),
            snapshot_id: None,
        },
        size,
    }
}

fn create_pool(api: &Client, domain: &str, name: &str, size: i64) -> PoolView {
    let id = domain_id(domain);
    let request = pool_request(name, size);
    api.call(|c| c.create_pool(&id, &request))
        .unwrap_or_else(|e| panic!("the pool {name}: {e}"))
}

fn delete_pool(api: &Client, domain: &str, name: &str) {
    let id = domain_id(domain);
    api.call(|c| c.delete_pool(&id, name))
        .unwrap_or_else(|e| panic!("deleting the pool {name}: {e}"));
}

/// A lease request: wait or not (the daemon's default when `None`), and a TTL.
fn ask(wait: Option<bool>, ttl_seconds: Option<i64>) -> PoolLeaseRequest {
    PoolLeaseRequest {
        wait,
        wait_seconds: None,
        ttl_seconds,
    }
}

fn lease(api: &Client, domain: &str, pool: &str, request: PoolLeaseRequest) -> PoolLeaseView {
    let id = domain_id(domain);
    let lease = api
        .call(|c| c.take_pool_lease(&id, pool, &request))
        .unwrap_or_else(|e| panic!("a lease on {pool}: {e}"));
    assert_eq!(lease.instance.state.kind(), "running", "{lease:?}");
    lease
}

/// What answers a lease's release (a success reads as 200).
fn release(api: &Client, domain: &str, lease: &PoolLeaseId) -> Answer {
    let id = domain_id(domain);
    api.answer(|c| c.release_pool_lease(&id, lease))
}

fn reset(api: &Client, domain: &str, lease: &PoolLeaseId, request: PoolLeaseRequest) -> Answer {
    let id = domain_id(domain);
    api.answer(|c| c.reset_pool_lease(&id, lease, &request))
}

fn renew(api: &Client, domain: &str, lease: &PoolLeaseId) -> Answer {
    let id = domain_id(domain);
    api.answer(|c| c.renew_pool_lease(&id, lease))
}

fn pool_view(api: &Client, domain: &str, name: &str) -> Answer {
    let id = domain_id(domain);
    api.answer(|c| c.pool(&id, name))
}

fn leases(api: &Client, domain: &str, pool: &str) -> Vec<PoolLeaseView> {
    let id = domain_id(domain);
    api.call(|c| c.pool_leases(&id, pool))
        .unwrap_or_else(|e| panic!("the leases of {pool}: {e}"))
}

fn host_port(lease: &PoolLeaseView) -> u64 {
    let pg = lease
        .endpoints
        .iter()
        .find(|e| e.port == 5432)
        .unwrap_or_else(|| panic!("no endpoint for 5432: {lease:?}"));
    assert_eq!(pg.host, "127.0.0.1");
    u64::from(pg.host_port)
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
    let id = domain_id(domain);
    api.call(|c| c.instances(&id, false))
        .expect("the instances")
        .into_iter()
        .map(|i| i.key)
        .collect()
}

fn volume_of(instance: &InstanceView) -> String {
    instance.volumes[0].docker_name.clone()
}

#[test]
fn a_lease_hands_out_a_ready_instance_a_reset_gives_its_endpoint_fresh_data_and_a_release_removes_it()
 {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("pools");
    let id = domain_id(&domain);
    let pool = create_pool(&api, &domain, "pg", 2);
    assert_eq!(pool.name, "pg");
    assert_eq!(pool.size, 2);
    assert_eq!(pool.from.template, Some(true));
    assert_eq!(pool.from.snapshot_id, None);
    assert!(!pool.deleting);

    // A second pool of the name is refused, writing nothing.
    let again = pool_request("pg", 1);
    api.answer(|c| c.create_pool(&id, &again))
        .expect_error(409, "ResourcePoolExistsError");
    let bad = PoolRequest {
        name: "Bad Name".to_owned(),
        from: PoolSource {
            template: Some(false),
            snapshot_id: None,
        },
        ..pool_request("pg", 0)
    };
    let refused = api
        .answer(|c| c.create_pool(&id, &bad))
        .expect_error(400, "RequestRefusedError");
    let message = refused["message"].as_str().unwrap();
    for place in ["body.name", "body.from.template", "body.size"] {
        assert!(message.contains(place), "{message}");
    }

    // The lease waits for a ready instance, and its endpoint answers psql at once.
    let first = lease(&api, &domain, "pg", ask(None, None));
    assert!(first.lease_id.to_string().starts_with("pls:"), "{first:?}");
    assert_eq!(first.pool, "pg");
    assert_eq!(first.resets, 0);
    assert_eq!(first.ttl_seconds, 600);
    let port = host_port(&first);
    assert_eq!(psql(port, "SELECT 1"), "1");
    psql(
        port,
        "CREATE TABLE notes AS SELECT 'kept until reset' AS body",
    );
    let first_key = first.instance.key.clone();
    let first_volume = volume_of(&first.instance);
    // Its instance started on the template (an overlay), not on an empty volume.
    let volume = support::docker_inspect("volume", &first_volume).unwrap();
    assert_eq!(volume["Options"]["type"], "overlay", "{volume}");

    // `GET .../instances` lists the leased instance, not the waiting ones.
    let keys = instance_keys(&api, &domain);
    assert_eq!(keys, vec![first_key.clone()], "{keys:?}");
    let view = pool_view(&api, &domain, "pg").expect(200);
    assert_eq!(view["leased"], 1, "{view}");
    // The leased instance runs; the pool's waiting ones, refilled to its size, are frozen once
    // ready (paused: the cgroup freezer), costing no CPU while they wait.
    assert!(first.instance.frozen.is_none(), "{first:?}");
    wait_until(READY, "the pool's two waiting instances are frozen", || {
        paused(&domain).len() == 2
    });

    // A reset: the same host port, a fresh instance, the data gone.
    let reset_view = reset(&api, &domain, &first.lease_id, ask(None, None)).expect(200);
    assert_eq!(reset_view["leaseId"], first.lease_id.to_string());
    assert_eq!(reset_view["resets"], 1);
    let reset: PoolLeaseView = serde_json::from_value(reset_view).unwrap();
    assert_eq!(host_port(&reset), port, "{reset:?}");
    assert_ne!(reset.instance.key, first.instance.key);
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
        .call(|c| c.renew_pool_lease(&id, &first.lease_id))
        .expect("a renewal");
    assert!(
        renewed.expires_at >= reset.expires_at,
        "{renewed:?} expires before the reset's {:?}",
        reset.expires_at
    );
    assert_eq!(leases(&api, &domain, "pg").len(), 1);

    // A release answers once the instance and its layer are gone; the pool refills.
    let held_key = reset.instance.key.clone();
    let held_volume = volume_of(&reset.instance);
    release(&api, &domain, &first.lease_id).expect(200);
    assert!(support::docker_inspect("volume", &held_volume).is_none());
    assert!(support::docker_inspect("volume", &format!("{held_volume}.upper")).is_none());
    assert_eq!(
        api.instance(&domain, &held_key)["state"]["kind"],
        "archived"
    );
    release(&api, &domain, &first.lease_id).expect_error(404, "ResourcePoolLeaseNotFoundError");
    let again = lease(&api, &domain, "pg", ask(None, Some(60)));
    assert_eq!(again.ttl_seconds, 60);
    assert_eq!(psql(host_port(&again), "SELECT 1"), "1");

    // Deleting the pool ends its leases and removes every instance and volume it made.
    delete_pool(&api, &domain, "pg");
    pool_view(&api, &domain, "pg").expect_error(404, "ResourcePoolNotFoundError");
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
    let id = domain_id(&domain);
    create_pool(&api, &domain, "pg", 1);
    let first = lease(&api, &domain, "pg", ask(Some(true), None));
    // Its one instance is leased: without waiting, a clear refusal at once.
    let no_wait = ask(Some(false), None);
    let refused = api
        .answer(|c| c.take_pool_lease(&id, "pg", &no_wait))
        .expect_error(409, "ResourcePoolEmptyError");
    assert!(
        refused["message"].as_str().unwrap().contains("pg"),
        "{refused}"
    );
    // Waiting, the next instance the pool makes is served.
    let second = lease(&api, &domain, "pg", ask(None, None));
    assert_ne!(second.instance.key, first.instance.key);
    assert_ne!(host_port(&second), host_port(&first));
    assert_eq!(psql(host_port(&second), "SELECT 1"), "1");
    // Bad requests name the field: a body the typed client cannot send (a string for a
    // boolean, an unknown field), so sent raw.
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
    let waiting = ask(None, None);
    api.answer(|c| c.take_pool_lease(&id, "none", &waiting))
        .expect_error(404, "ResourcePoolNotFoundError");
    delete_pool(&api, &domain, "pg");
}

#[test]
fn a_lease_not_renewed_within_its_ttl_is_released_and_its_instance_removed() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("pools-ttl");
    create_pool(&api, &domain, "pg", 1);
    let taken = lease(&api, &domain, "pg", ask(None, Some(2)));
    let key = taken.instance.key.clone();
    // Released by berth once the time runs out: the wait route says when its instance goes.
    let gone = api.settled(&domain, &key, &["archived"], READY);
    assert_eq!(gone["state"]["kind"], "archived", "{gone}");
    renew(&api, &domain, &taken.lease_id).expect_error(404, "ResourcePoolLeaseNotFoundError");
    let volume = volume_of(&taken.instance);
    wait_until(READY, "the expired lease's volume is removed", || {
        support::docker_inspect("volume", &volume).is_none()
    });
    delete_pool(&api, &domain, "pg");
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
    let mine = lease(&api, &domain, "pg", ask(None, None));
    let id = &mine.lease_id;
    reset(&other, &domain, id, ask(None, None)).expect_error(404, "ResourcePoolLeaseNotFoundError");
    renew(&other, &domain, id).expect_error(404, "ResourcePoolLeaseNotFoundError");
    release(&other, &domain, id).expect_error(404, "ResourcePoolLeaseNotFoundError");
    assert!(leases(&other, &domain, "pg").is_empty());
    // The other key takes one of its own, which the first cannot touch either.
    let theirs = lease(&other, &domain, "pg", ask(None, None));
    release(&api, &domain, &theirs.lease_id).expect_error(404, "ResourcePoolLeaseNotFoundError");
    // Both still answer.
    assert_eq!(psql(host_port(&mine), "SELECT 1"), "1");
    assert_eq!(psql(host_port(&theirs), "SELECT 1"), "1");
    release(&api, &domain, id).expect(200);
    delete_pool(&api, &domain, "pg");
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
    let taken = lease(&api, &domain, "pg", ask(None, None));
    let port = host_port(&taken);
    psql(port, "CREATE TABLE before_reset (id int)");
    let id = taken.lease_id.clone();

    // Killed while a reset waits for the pool's next instance (being made: the pool's one
    // instance is leased) or has just taken it: either way the lease stays, on its port.
    let base = format!("http://{}", daemon.address());
    let (in_thread, lease_id) = (domain.clone(), id.clone());
    let resetting = std::thread::spawn(move || {
        let api = Client::new(&base, Some(KEY));
        // The daemon is killed under it: whatever it answers (or not) is not the point.
        let id = domain_id(&in_thread);
        let waiting = ask(None, None);
        let _ = api.call(|c| c.reset_pool_lease(&id, &lease_id, &waiting));
    });
    wait_until(READY, "the pool makes its next instance", || {
        domain_objects("running", &domain).len() >= 2
    });
    daemon.kill9();
    let _ = resetting.join();
    daemon.start_again();
    let api = daemon.client();
    let items = leases(&api, &domain, "pg");
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(host_port(&items[0]), port, "{items:?}");
    let reset_done = items[0].resets == 1;
    let fresh = psql(port, "SELECT to_regclass('before_reset') IS NULL");
    assert_eq!(fresh == "t", reset_done, "{items:?}");

    // The pool converges: its size waiting again, and every container of the domain is the
    // pool's or the lease's; a reset's old instance is removed.
    if reset_done {
        let old = api.settled(&domain, &taken.instance.key, &["archived"], READY);
        assert_eq!(old["state"]["kind"], "archived", "{old}");
    }
    wait_until(READY, "the pool is full again", || {
        let view = pool_view(&api, &domain, "pg").expect(200);
        view["ready"] == 1 && view["leased"] == 1 && view["making"] == 0
    });
    wait_until(
        READY,
        "only the pool's and the lease's containers are left",
        || domain_objects("running", &domain).len() == 2,
    );
    // A reset now is served at once, on the same port.
    let (domain_id, no_wait) = (domain_id(&domain), ask(Some(false), None));
    let reset = api
        .call(|c| c.reset_pool_lease(&domain_id, &id, &no_wait))
        .expect("a reset served at once");
    assert_eq!(host_port(&reset), port);
    assert_eq!(psql(port, "SELECT 1"), "1");
    delete_pool(&api, &domain, "pg");
    let containers = domain_objects("container", &domain);
    assert!(containers.is_empty(), "{containers:?}");
    let volumes = domain_objects("volume", &domain);
    assert!(volumes.is_empty(), "{volumes:?}");
}
