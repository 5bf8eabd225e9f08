//! Volumes a spec change drops, end to end on the real engine with the busybox fixture: berth
//! keeps every volume an instance has had by name, so a volume an `up` dropped (or renamed) comes
//! back with its data when a later `up` names it again, through a snapshot and a restore, with a
//! daemon killed with `kill -9` after each request, and in the answer of an archive. The
//! before-restore snapshot holds every kept volume as the restore found it.

use berth_testkit as support;

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use support::{Client, Daemon, block_on};

const READY: Duration = Duration::from_secs(120);
const COPY: Duration = Duration::from_secs(120);

/// A busybox instance of alias `files` mounting `volumes` (name, mount path).
pub(super) fn files_spec(volumes: &[(&str, &str)]) -> Value {
    let mut spec = support::spec(&support::busybox_image(), "files");
    spec["volumes"] = volumes
        .iter()
        .map(|(name, path)| json!({"name": name, "mountPath": path}))
        .collect();
    spec
}

fn both() -> Value {
    files_spec(&[("data", "/srv/data"), ("logs", "/srv/logs")])
}

fn data_only() -> Value {
    files_spec(&[("data", "/srv/data")])
}

pub(super) fn exec_ok(api: &Client, domain: &str, key: &str, script: &str) -> String {
    let result = api
        .exec(domain, key, &["sh", "-c", script], None, 60_000, b"")
        .expect(200);
    assert_eq!(result["exitCode"], 0, "{script}: {result}");
    result["stdout"].as_str().unwrap().trim().to_owned()
}

/// Writes `text` into `path` in the instance's running container.
pub(super) fn write(api: &Client, domain: &str, key: &str, path: &str, text: &str) {
    exec_ok(api, domain, key, &format!("echo {text} > {path}"));
}

/// What `path` holds in the instance's running container, or `<none>` when there is no such file.
pub(super) fn read(api: &Client, domain: &str, key: &str, path: &str) -> String {
    exec_ok(
        api,
        domain,
        key,
        &format!("if [ -e {path} ]; then cat {path}; else echo '<none>'; fi"),
    )
}

/// `up`, then what berth settled on: running.
pub(super) fn up_running(api: &Client, domain: &str, key: &str, spec: &Value) -> Value {
    api.up(domain, key, spec, "person").expect(200);
    settled_running(api, domain, key)
}

pub(super) fn settled_running(api: &Client, domain: &str, key: &str) -> Value {
    let instance = api.settled(domain, key, &["running", "failed"], READY);
    assert_eq!(instance["state"]["kind"], "running", "{instance}");
    instance
}

/// The names of the volumes the instance view lists (those its container mounts).
fn mounted_names(instance: &Value) -> Vec<String> {
    instance["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_owned())
        .collect()
}

/// `GET .../volumes`: every volume the instance keeps.
fn kept(api: &Client, domain: &str, key: &str) -> Vec<berth_client::KeptVolume> {
    block_on(api.api().volumes(&support::domain_id(domain), key)).expect("the instance's volumes")
}

/// Each kept volume's name and whether it is mounted, by name (the route lists them in the
/// order the instance came to have them, which a restore changes).
fn kept_names(api: &Client, domain: &str, key: &str) -> Vec<(String, bool)> {
    let mut names: Vec<(String, bool)> = kept(api, domain, key)
        .into_iter()
        .map(|v| (v.name, v.mounted))
        .collect();
    names.sort();
    names
}

/// The kept volume `name` of `list`.
fn named<'a>(list: &'a [berth_client::KeptVolume], name: &str) -> &'a berth_client::KeptVolume {
    list.iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no kept volume {name}: {list:?}"))
}

/// A size berth measured is more than nothing (a marker file is in the volume). Sizes come from
/// the engine's disk-usage report, which the engine refuses while another runs (a busy shared
/// engine, the other tests' daemons): berth answers null then, and says so in its log, and only
/// then is null accepted.
fn measured(daemon: &Daemon, bytes: Option<i64>, what: &str) {
    match bytes {
        Some(b) => assert!(b > 0, "{what}: {b} bytes"),
        None => assert!(
            daemon
                .log_text()
                .contains("the engine refused its disk-usage report"),
            "{what}: not measured, and the engine did not refuse the report"
        ),
    }
}

fn pairs(expected: &[(&str, bool)]) -> Vec<(String, bool)> {
    expected.iter().map(|(n, m)| (n.to_string(), *m)).collect()
}

/// Waits on the domain's event stream until snapshot `id` is no longer copying, and asserts it
/// is `ready`. Each look at the snapshot comes after the stream is open, so no change is missed.
pub(super) fn wait_ready(
    api: &Client,
    domain: &str,
    id: &berth_client::SnapshotId,
) -> berth_client::SnapshotView {
    let mut events = Box::pin(api.api().events(&support::domain_id(domain), None));
    loop {
        let now = block_on(api.api().snapshot_by_id(&support::domain_id(domain), id))
            .expect("the snapshot");
        if now.state.as_str() != "copying" {
            assert_eq!(now.state.as_str(), "ready", "{now:?}");
            return now;
        }
        block_on(async {
            tokio::time::timeout(COPY, events.next())
                .await
                .unwrap_or_else(|_| panic!("snapshot {id} was not ready within {COPY:?}"))
                .expect("the event stream goes on")
                .expect("an event")
        });
    }
}

/// Restores `key` from `snapshot` and waits, on the domain's event stream, until the restore's
/// copy is done: a restore waiting for its turn leaves the instance running on its old volumes,
/// so `running` alone does not say the copy happened.
fn restore_done(
    api: &Client,
    domain: &str,
    key: &str,
    snapshot: &berth_client::SnapshotId,
) -> berth_client::RestoreResponse {
    let mut events = Box::pin(api.api().events(&support::domain_id(domain), None));
    // The stream opens with every instance of the domain: once the first is read, it is
    // subscribed, and nothing of the copy can be missed.
    block_on(async { tokio::time::timeout(COPY, events.next()).await })
        .expect("the stream opens")
        .expect("an event")
        .expect("an event");
    let answer = block_on(
        api.api()
            .restore(&support::domain_id(domain), key, snapshot),
    )
    .expect("a restore");
    block_on(async {
        loop {
            let event = tokio::time::timeout(COPY, events.next())
                .await
                .unwrap_or_else(|_| panic!("the restore of {key} did not end within {COPY:?}"))
                .expect("the stream goes on")
                .expect("an event");
            if let berth_client::DomainEvent::Copy { copy, .. } = event
                && copy.kind == berth_client::CopyKind::Restore
                && copy.instance_key == key
                && copy.state.as_str() != "copying"
            {
                assert_eq!(copy.state.as_str(), "done", "{copy:?}");
                return;
            }
        }
    });
    answer
}

pub(super) fn snapshot_ready(
    api: &Client,
    domain: &str,
    key: &str,
    name: &str,
) -> berth_client::SnapshotView {
    let snapshot =
        block_on(api.api().snapshot(&support::domain_id(domain), key, name)).expect("a snapshot");
    wait_ready(api, domain, &snapshot.snapshot_id)
}

fn snapshot_names(snapshot: &berth_client::SnapshotView) -> Vec<&str> {
    snapshot.volumes.iter().map(|v| v.name.as_str()).collect()
}

/// Ups `files` with `data` and `logs`, writes a marker into each, and ups it with only `data`:
/// the view lists `data`, the volumes route both, `logs` unmounted.
fn drop_logs(daemon: &Daemon, api: &Client, domain: &str) -> Vec<berth_client::KeptVolume> {
    let first = up_running(api, domain, "files", &both());
    assert_eq!(mounted_names(&first), ["data", "logs"], "{first}");
    write(api, domain, "files", "/srv/data/marker", "data-marker");
    write(api, domain, "files", "/srv/logs/marker", "logs-marker");
    let before = kept(api, domain, "files");

    let one = up_running(api, domain, "files", &data_only());
    assert_eq!(mounted_names(&one), ["data"], "{one}");
    assert_eq!(
        kept_names(api, domain, "files"),
        pairs(&[("data", true), ("logs", false)])
    );
    let after = kept(api, domain, "files");
    assert_eq!(
        after.iter().map(|v| &v.docker_name).collect::<Vec<_>>(),
        before.iter().map(|v| &v.docker_name).collect::<Vec<_>>(),
        "the same engine volumes, the dropped one kept"
    );
    measured(
        daemon,
        named(&after, "logs").bytes,
        "the dropped volume keeps its data",
    );
    assert_eq!(
        read(api, domain, "files", "/srv/logs/marker"),
        "<none>",
        "the container no longer mounts logs"
    );
    after
}

#[test]
fn a_volume_a_spec_change_dropped_comes_back_with_its_data_after_a_snapshot_and_a_restore_and_archive_lists_it()
 {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("kept");
    let before = drop_logs(&daemon, &api, &domain);

    let snapshot = snapshot_ready(&api, &domain, "files", "with-logs");
    // Both volumes, the unmounted one too. (Their sizes are not checked: a snapshot waits only
    // briefly for the engine's disk-usage report, and a busy engine leaves them null.)
    assert_eq!(snapshot_names(&snapshot), ["data", "logs"], "{snapshot:?}");

    let restored = restore_done(&api, &domain, "files", &snapshot.snapshot_id);
    assert_eq!(
        snapshot_names(&restored.before_restore),
        ["data", "logs"],
        "the before-restore snapshot holds every kept volume: {restored:?}"
    );
    let back = settled_running(&api, &domain, "files");
    assert_eq!(mounted_names(&back), ["data"], "{back}");
    assert_eq!(
        read(&api, &domain, "files", "/srv/data/marker"),
        "data-marker"
    );
    // The restore filled fresh volumes for both names, and the instance keeps those.
    let after = kept(&api, &domain, "files");
    assert_eq!(
        kept_names(&api, &domain, "files"),
        pairs(&[("data", true), ("logs", false)])
    );
    for name in ["data", "logs"] {
        assert_ne!(
            named(&before, name).docker_name,
            named(&after, name).docker_name,
            "a fresh volume: {after:?}"
        );
    }

    // Named again, logs comes back with its data at its mount path.
    let again = up_running(&api, &domain, "files", &both());
    assert_eq!(mounted_names(&again), ["data", "logs"], "{again}");
    assert_eq!(
        again["volumes"][1]["dockerName"].as_str(),
        Some(named(&after, "logs").docker_name.as_str()),
        "logs mounts the volume the restore filled"
    );
    assert_eq!(
        read(&api, &domain, "files", "/srv/data/marker"),
        "data-marker"
    );
    assert_eq!(
        read(&api, &domain, "files", "/srv/logs/marker"),
        "logs-marker"
    );

    // Dropped once more and archived: the archive lists both, with their sizes.
    let one = up_running(&api, &domain, "files", &data_only());
    assert_eq!(mounted_names(&one), ["data"], "{one}");
    let archived =
        block_on(api.api().archive(&support::domain_id(&domain), "files")).expect("an archive");
    let mut listed: Vec<(&str, &str)> = archived
        .volumes
        .iter()
        .map(|v| (v.name.as_str(), v.docker_name.as_str()))
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        ["data", "logs"].map(|n| (n, named(&after, n).docker_name.as_str())),
        "{archived:?}"
    );
    for v in &archived.volumes {
        assert_eq!(v.instance_key, "files", "{archived:?}");
        measured(
            &daemon,
            v.bytes,
            &format!("the archived {} holds data", v.name),
        );
    }
    for v in &archived.volumes {
        assert!(
            support::docker_inspect("volume", &v.docker_name).is_some(),
            "the archive keeps {}",
            v.docker_name
        );
    }
}

#[test]
fn a_renamed_volume_comes_back_with_its_data_after_a_snapshot_and_a_restore() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("kept");
    up_running(&api, &domain, "files", &data_only());
    write(&api, &domain, "files", "/srv/data/marker", "data-marker");

    let renamed = up_running(
        &api,
        &domain,
        "files",
        &files_spec(&[("data2", "/srv/data2")]),
    );
    assert_eq!(mounted_names(&renamed), ["data2"], "{renamed}");
    assert_eq!(
        kept_names(&api, &domain, "files"),
        pairs(&[("data", false), ("data2", true)])
    );
    assert_eq!(read(&api, &domain, "files", "/srv/data2/marker"), "<none>");
    write(&api, &domain, "files", "/srv/data2/marker", "data2-marker");

    let snapshot = snapshot_ready(&api, &domain, "files", "renamed");
    assert_eq!(snapshot_names(&snapshot), ["data", "data2"], "{snapshot:?}");
    restore_done(&api, &domain, "files", &snapshot.snapshot_id);
    let back = settled_running(&api, &domain, "files");
    assert_eq!(mounted_names(&back), ["data2"], "{back}");
    assert_eq!(
        read(&api, &domain, "files", "/srv/data2/marker"),
        "data2-marker"
    );

    // The old name again: its data, at its mount path; data2 kept beside it.
    let old = up_running(&api, &domain, "files", &data_only());
    assert_eq!(mounted_names(&old), ["data"], "{old}");
    assert_eq!(
        read(&api, &domain, "files", "/srv/data/marker"),
        "data-marker"
    );
    assert_eq!(
        kept_names(&api, &domain, "files"),
        pairs(&[("data", true), ("data2", false)])
    );
}

/// How many copies the daemon's log (kept across its starts) says it finished.
fn copies_done(daemon: &Daemon) -> usize {
    daemon
        .log_text()
        .lines()
        .filter(|l| l.contains("copy done"))
        .count()
}

#[test]
fn a_daemon_killed_after_each_request_converges_and_the_dropped_volume_still_comes_back() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("kept");
    let domain_id = support::domain_id(&domain);
    let first = up_running(&api, &domain, "files", &both());
    assert_eq!(mounted_names(&first), ["data", "logs"], "{first}");
    write(&api, &domain, "files", "/srv/data/marker", "data-marker");
    write(&api, &domain, "files", "/srv/logs/marker", "logs-marker");

    // Killed right after the up that drops logs.
    api.up(&domain, "files", &data_only(), "person").expect(200);
    daemon.kill9();
    daemon.start_again();
    let api = daemon.client();
    let one = settled_running(&api, &domain, "files");
    assert_eq!(mounted_names(&one), ["data"], "{one}");
    assert_eq!(
        kept_names(&api, &domain, "files"),
        pairs(&[("data", true), ("logs", false)])
    );

    // Killed right after the snapshot request, before its copy is done.
    let snapshot =
        block_on(api.api().snapshot(&domain_id, "files", "with-logs")).expect("a snapshot");
    assert_eq!(snapshot.state.as_str(), "copying", "{snapshot:?}");
    daemon.kill9();
    assert_eq!(
        copies_done(&daemon),
        0,
        "killed before the snapshot's copy was done"
    );
    daemon.start_again();
    let api = daemon.client();
    let snapshot = wait_ready(&api, &domain, &snapshot.snapshot_id);
    assert_eq!(snapshot_names(&snapshot), ["data", "logs"], "{snapshot:?}");
    assert_eq!(copies_done(&daemon), 1, "the next start did the copy");
    settled_running(&api, &domain, "files");

    // Killed right after the restore request.
    let restored = block_on(
        api.api()
            .restore(&domain_id, "files", &snapshot.snapshot_id),
    )
    .expect("a restore");
    assert_eq!(snapshot_names(&restored.before_restore), ["data", "logs"]);
    daemon.kill9();
    assert_eq!(
        copies_done(&daemon),
        1,
        "killed before the restore's copy was done"
    );
    daemon.start_again();
    let api = daemon.client();
    // The next start does the restore's copy (the instance may run on its old volumes until
    // the copy's turn comes): its log says when.
    support::wait_until(COPY, "the next start did the restore's copy", || {
        copies_done(&daemon) == 2
    });
    let back = settled_running(&api, &domain, "files");
    assert_eq!(mounted_names(&back), ["data"], "{back}");
    assert_eq!(
        kept_names(&api, &domain, "files"),
        pairs(&[("data", true), ("logs", false)])
    );

    // Killed right after the up that names logs again.
    api.up(&domain, "files", &both(), "person").expect(200);
    daemon.kill9();
    daemon.start_again();
    let api = daemon.client();
    let again = settled_running(&api, &domain, "files");
    assert_eq!(mounted_names(&again), ["data", "logs"], "{again}");
    assert_eq!(
        read(&api, &domain, "files", "/srv/data/marker"),
        "data-marker"
    );
    assert_eq!(
        read(&api, &domain, "files", "/srv/logs/marker"),
        "logs-marker"
    );
    let list = block_on(api.api().snapshots(&domain_id, Some("files"))).expect("the list");
    assert_eq!(
        list.len(),
        2,
        "the snapshot and the before-restore one: {list:?}"
    );
    assert!(list.iter().all(|s| s.state.as_str() == "ready"), "{list:?}");
}

#[test]
fn the_before_restore_snapshot_holds_every_kept_volume_as_the_restore_found_it() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("kept");
    drop_logs(&daemon, &api, &domain);
    let snapshot = snapshot_ready(&api, &domain, "files", "with-logs");
    // Written after the snapshot: the restore replaces it.
    write(&api, &domain, "files", "/srv/data/late", "late-marker");

    let restored = restore_done(&api, &domain, "files", &snapshot.snapshot_id);
    settled_running(&api, &domain, "files");
    assert_eq!(read(&api, &domain, "files", "/srv/data/late"), "<none>");
    assert_eq!(
        read(&api, &domain, "files", "/srv/data/marker"),
        "data-marker"
    );

    // A branch of the before-restore snapshot has both volumes as they were: data with the late
    // write, and logs, which no spec mounted at the restore.
    let before = restored.before_restore;
    assert_eq!(snapshot_names(&before), ["data", "logs"], "{before:?}");
    let before = wait_ready(&api, &domain, &before.snapshot_id);
    let mut check = both();
    check["alias"] = json!("check");
    block_on(api.api().branch(
        &support::domain_id(&domain),
        "check",
        &berth_client::BranchFrom::Snapshot(before.snapshot_id.clone()),
        &check,
        berth_client::UpCause::Person,
    ))
    .expect("a branch of the before-restore snapshot");
    let branch = settled_running(&api, &domain, "check");
    assert_eq!(mounted_names(&branch), ["data", "logs"], "{branch}");
    assert_eq!(
        read(&api, &domain, "check", "/srv/data/late"),
        "late-marker"
    );
    assert_eq!(
        read(&api, &domain, "check", "/srv/data/marker"),
        "data-marker"
    );
    assert_eq!(
        read(&api, &domain, "check", "/srv/logs/marker"),
        "logs-marker"
    );
}
