//! Templates end to end with the postgres fixture: instances that ask for one start on a base
//! made once (its image run privately until ready, then stopped cleanly) instead of running
//! `initdb`; their data is their own; the base is never mounted writable; a template in use is
//! kept; a daemon killed while it makes one converges; and with layers off the instance starts
//! on empty volumes as before.

use berth_testkit as support;

use std::time::Duration;

use berth_client::{UpCause, UpRequest};
use serde_json::{Value, json};
use support::{Client, Daemon, docker, domain_id, fixture, refused, wait_until};

/// `up` with `template: true` through the typed client.
fn up_template(api: &Client, domain: &str, key: &str, spec: &Value) {
    let request = UpRequest {
        spec: spec.clone(),
        cause: UpCause::Person,
        template: true,
    };
    let domain = domain_id(domain);
    api.call(|c| c.up_request(&domain, key, &request))
        .expect("an up with a template");
}

const READY: Duration = Duration::from_secs(150);

fn pg_spec(worktree: &str) -> Value {
    json!({
        "alias": "db",
        "worktreeKey": worktree,
        "image": fixture("BERTH_TEST_POSTGRES_IMAGE"),
        "command": null,
        "env": {"POSTGRES_PASSWORD": "dev-secret"},
        "volumes": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}],
        "limits": {"cpuMillicores": 1000, "memoryBytes": 536_870_912},
        "ready": {"kind": "exec", "argv": ["pg_isready", "-h", "127.0.0.1", "-U", "postgres"], "user": null},
        "idleStopAfterSeconds": 3600
    })
}

/// `up` with `template: true`, then the instance once it runs (or failed).
fn up_from_template(api: &Client, domain: &str, key: &str, spec: &Value) -> Value {
    up_template(api, domain, key, spec);
    let instance = api.settled(domain, key, &["running", "failed"], READY);
    assert_eq!(instance["state"]["kind"], "running", "{instance}");
    instance
}

fn sql(api: &Client, domain: &str, key: &str, query: &str) -> String {
    let argv = [
        "psql",
        "-v",
        "ON_ERROR_STOP=1",
        "-tAq",
        "-d",
        "postgres",
        "-c",
        query,
    ];
    let result = api.exec(domain, key, &argv, None, 120_000, b"").expect(200);
    assert_eq!(result["exitCode"], 0, "{query}: {result}");
    result["stdout"].as_str().unwrap().trim().to_owned()
}

fn templates(api: &Client, domain: &str) -> Vec<Value> {
    let domain = domain_id(domain);
    let templates = api.call(|c| c.templates(&domain)).expect("the templates");
    templates.iter().map(support::json_of).collect()
}

fn docker_name(instance: &Value) -> String {
    instance["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A digest of every file, link and directory in volume `name` (owners, modes, sizes, times
/// and contents), read through a read-only mount.
fn contents(name: &str) -> String {
    docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        &format!("{name}:/v:ro"),
        &support::busybox_image(),
        "sh",
        "-c",
        "cd /v && find . -exec stat -c '%n %u %g %a %s %Y' {} + | sort | md5sum && \
         find . -type f -exec md5sum {} + | sort | md5sum",
    ])
}

/// The template containers (`"container"`, stopped ones too) or volumes of `domain`, one per
/// line.
fn template_objects(kind: &str, domain: &str) -> String {
    let domain_label = format!("label=berth.domain={domain}");
    let mut args = match kind {
        "container" => vec!["ps", "-aq"],
        _ => vec!["volume", "ls", "-q"],
    };
    args.extend([
        "--filter",
        "label=berth.template",
        "--filter",
        &domain_label,
    ]);
    docker(&args)
}

/// Whether container `name` ran `initdb` (the postgres image prints this as it does).
fn ran_initdb(container: &str) -> bool {
    let out = std::process::Command::new("docker")
        .args(["logs", container])
        .output()
        .expect("docker runs");
    assert!(out.status.success(), "docker logs {container}");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.contains("The files belonging to this database system will be owned by user")
}

#[test]
fn two_instances_from_one_template_start_without_initdb_keep_their_data_apart_and_never_mount_its_base_writable()
 {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("templates");

    let a = up_from_template(&api, &domain, "db@a", &pg_spec("a"));
    let made = templates(&api, &domain);
    assert_eq!(made.len(), 1, "{made:?}");
    let template = &made[0];
    assert_eq!(template["state"], "ready", "{template}");
    assert!(template["buildMs"].as_i64().unwrap() > 0, "{template}");
    assert_eq!(
        template["volumes"][0]["mountPath"],
        "/var/lib/postgresql/data"
    );
    let base = template["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        template["volumes"][0]["bytes"].as_i64().unwrap() > 1_000_000,
        "{template}"
    );
    assert_eq!(template["users"], json!([docker_name(&a)]), "{template}");
    // The private container and network that made it are gone.
    let name = base.split_once('.').unwrap().0.to_owned();
    assert!(
        support::docker_inspect("container", &name).is_none(),
        "{name}"
    );
    assert!(
        support::docker_inspect("network", &name).is_none(),
        "{name}"
    );

    let b = up_from_template(&api, &domain, "db@b", &pg_spec("b"));
    let made = templates(&api, &domain);
    assert_eq!(made.len(), 1, "one recipe, one template: {made:?}");
    let mut users: Vec<String> = made[0]["users"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap().to_owned())
        .collect();
    users.sort();
    let mut expected = vec![docker_name(&a), docker_name(&b)];
    expected.sort();
    assert_eq!(users, expected);

    // Each stands on an overlay over the base, and neither ran initdb: they started on a
    // cluster that was shut down cleanly.
    for (instance, key) in [(&a, "db@a"), (&b, "db@b")] {
        let volume = support::docker_inspect("volume", &docker_name(instance)).unwrap();
        assert_eq!(volume["Options"]["type"], "overlay", "{volume}");
        let base_dir = support::docker_inspect("volume", &base).unwrap()["Mountpoint"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            volume["Options"]["o"].as_str().unwrap().contains(&base_dir),
            "{volume}"
        );
        let container = support::container_of(instance);
        assert!(!ran_initdb(&container), "{key} ran initdb");
        assert_eq!(sql(&api, &domain, key, "SELECT 1"), "1");
        // The merged root has the base's owner and mode: read from the base for the first
        // instance, and remembered (the base never changes) for the second.
        let argv = ["stat", "-c", "%u %g %a", "/var/lib/postgresql/data"];
        let root = api.exec(&domain, key, &argv, None, 60_000, b"").expect(200);
        assert_eq!(
            root["stdout"].as_str().unwrap().trim(),
            "999 999 700",
            "{key}: {root}"
        );
    }

    // Their data is their own, both ways; the base does not change.
    let before = contents(&base);
    sql(
        &api,
        &domain,
        "db@a",
        "CREATE TABLE only_a AS SELECT generate_series(1, 5000) g",
    );
    sql(&api, &domain, "db@b", "CREATE TABLE only_b (id int)");
    assert_eq!(
        sql(
            &api,
            &domain,
            "db@a",
            "SELECT to_regclass('only_b') IS NULL"
        ),
        "t"
    );
    assert_eq!(
        sql(
            &api,
            &domain,
            "db@b",
            "SELECT to_regclass('only_a') IS NULL"
        ),
        "t"
    );
    assert_eq!(
        sql(&api, &domain, "db@a", "SELECT count(*) FROM only_a"),
        "5000"
    );
    sql(&api, &domain, "db@a", "CHECKPOINT");
    sql(&api, &domain, "db@b", "CHECKPOINT");
    assert_eq!(contents(&base), before, "the template's base changed");
    // No container mounts the base itself but its holder (created, never started): the
    // instances only as an overlay's lower layer.
    let mounting = docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("volume={base}"),
        "--format",
        "{{.Names}}",
    ]);
    assert_eq!(
        mounting.trim(),
        format!("{base}.held"),
        "containers mount {base}"
    );

    // In use, it is kept: the delete is refused, naming what stands on it.
    let id = made[0]["templateId"].as_str().unwrap().to_owned();
    let did = domain_id(&domain);
    let in_use = refused(
        api.call(|c| c.delete_template(&did, &id)),
        409,
        "ResourceTemplateInUseError",
    );
    assert!(
        in_use["message"]
            .as_str()
            .unwrap()
            .contains(&docker_name(&a)),
        "{in_use}"
    );
    assert!(support::docker_inspect("volume", &base).is_some());
    refused(
        api.call(|c| c.delete_template(&did, "ffffffffffff")),
        404,
        "ResourceTemplateNotFoundError",
    );
    refused(
        api.call(|c| c.delete_template(&did, "NOT-AN-ID")),
        400,
        "RequestRefusedError",
    );
}

#[test]
fn a_daemon_killed_while_it_makes_a_template_makes_it_whole_on_its_next_start() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("templates-kill");
    up_template(&api, &domain, "db@main", &pg_spec("main"));
    // Killed while the template's private container runs (its image is in initdb).
    wait_until(READY, "the template's container runs", || {
        docker(&[
            "ps",
            "-q",
            "--filter",
            "label=berth.template",
            "--filter",
            &format!("label=berth.domain={domain}"),
        ])
        .lines()
        .count()
            == 1
    });
    daemon.kill9();
    daemon.start_again();
    let api = daemon.client();
    let main = api.settled(&domain, "db@main", &["running", "failed"], READY);
    assert_eq!(main["state"]["kind"], "running", "{main}");
    let made = templates(&api, &domain);
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0]["state"], "ready", "{made:?}");
    assert_eq!(made[0]["users"], json!([docker_name(&main)]));
    assert!(!ran_initdb(&support::container_of(&main)));
    // Nothing of the first attempt is left: no template container, one base volume.
    let left = template_objects("container", &domain);
    assert_eq!(left.trim(), "", "{left}");
    let volumes = template_objects("volume", &domain);
    assert_eq!(volumes.lines().count(), 1, "{volumes}");

    // Unused once the instance is archived and its volumes removed: deleted with its base.
    let id = made[0]["templateId"].as_str().unwrap().to_owned();
    let did = domain_id(&domain);
    api.call(|c| c.archive(&did, "db@main"))
        .expect("an archive");
    // Archived volumes are held (no prune takes them, and berth holds them again as soon as a
    // holder goes): removed by hand while the daemon is away, holders first.
    let mounted = docker_name(&main);
    let upper = format!("{mounted}.up");
    daemon.stop();
    docker(&[
        "rm",
        "-f",
        &format!("{mounted}.held"),
        &format!("{upper}.held"),
    ]);
    docker(&["volume", "rm", &mounted, &upper]);
    daemon.start_again();
    let api = daemon.client();
    api.call(|c| c.delete_template(&did, &id))
        .expect("a delete");
    assert!(templates(&api, &domain).is_empty());
    let volumes = template_objects("volume", &domain);
    assert_eq!(volumes.trim(), "", "{volumes}");
}

#[test]
fn with_volume_layers_off_an_instance_that_asks_for_a_template_starts_on_empty_volumes() {
    let daemon = Daemon::start_with(&["--volume-layers", "off"]);
    let api = daemon.client();
    let domain = api.create_domain("templates-off");
    let main = up_from_template(&api, &domain, "db@main", &pg_spec("main"));
    assert!(templates(&api, &domain).is_empty());
    let volume = support::docker_inspect("volume", &docker_name(&main)).unwrap();
    assert!(
        volume["Options"].is_null() || volume["Options"].get("type").is_none(),
        "{volume}"
    );
    assert!(ran_initdb(&support::container_of(&main)));
}
