//! Snapshots, branches and restores of instance volumes, end to end on the real engine with the
//! postgres and redis fixtures: a branch has every row and its writes stay apart from its
//! source's, a restore brings rows back and keeps what it replaced, owners and modes survive,
//! images with no shell copy too, and a daemon killed in the middle of a copy never lets a
//! half-written volume be used.

use berth_testkit as support;

use std::time::Duration;

use berth_client::{BranchFrom, UpCause};
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::{Client, Daemon, block_on, docker, fixture, wait_until};

const READY: Duration = Duration::from_secs(150);
const COPY: Duration = Duration::from_secs(240);
const PASSWORD: &str = "dev-secret";

pub(super) fn pg_spec(worktree: &str) -> Value {
    json!({
        "alias": "db",
        "worktreeKey": worktree,
        "image": fixture("BERTH_TEST_POSTGRES_IMAGE"),
        "command": null,
        "env": {"POSTGRES_PASSWORD": PASSWORD},
        "volumes": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}],
        "limits": {"cpuMillicores": 1000, "memoryBytes": 536_870_912},
        "ready": {"kind": "exec", "argv": ["pg_isready", "-h", "127.0.0.1", "-U", "postgres"], "user": null},
        "idleStopAfterSeconds": 3600
    })
}

fn redis_spec(worktree: &str) -> Value {
    json!({
        "alias": "cache",
        "worktreeKey": worktree,
        "image": fixture("BERTH_TEST_REDIS_IMAGE"),
        "command": ["--appendonly", "yes", "--appendfsync", "always"],
        "env": {},
        "volumes": [{"name": "data", "mountPath": "/data"}],
        "limits": {"cpuMillicores": 500, "memoryBytes": 134_217_728},
        "ready": {"kind": "tcp", "port": 6379},
        "idleStopAfterSeconds": 3600
    })
}

/// A busybox instance (it runs as root, so it can make files of any owner) or, with the bare
/// image, one whose image has no shell and no tools at all.
pub(super) fn files_spec(image: &str, worktree: &str) -> Value {
    let mut spec = support::spec(image, "files");
    spec["worktreeKey"] = json!(worktree);
    spec
}

pub(super) fn exec_ok(api: &Client, domain: &str, key: &str, argv: &[&str]) -> String {
    let result = api.exec(domain, key, argv, None, 120_000, b"").expect(200);
    assert_eq!(result["exitCode"], 0, "{argv:?}: {result}");
    result["stdout"].as_str().unwrap().trim().to_owned()
}

pub(super) fn sql(api: &Client, domain: &str, key: &str, query: &str) -> String {
    exec_ok(
        api,
        domain,
        key,
        &[
            "psql",
            "-v",
            "ON_ERROR_STOP=1",
            "-tAq",
            "-d",
            "postgres",
            "-c",
            query,
        ],
    )
}

fn redis(api: &Client, domain: &str, key: &str, args: &[&str]) -> String {
    let mut argv = vec!["redis-cli"];
    argv.extend_from_slice(args);
    exec_ok(api, domain, key, &argv)
}

/// Rows of about 330 bytes each into table `t` of a postgres instance.
fn fill(api: &Client, domain: &str, key: &str, rows: u32) {
    sql(
        api,
        domain,
        key,
        &format!(
            "CREATE TABLE t (id int PRIMARY KEY, body text); \
             INSERT INTO t SELECT g, repeat(md5(g::text), 10) FROM generate_series(1, {rows}) g"
        ),
    );
}

/// Waits until `key` settles, and asserts that it runs: the instance.
pub(super) fn running(api: &Client, domain: &str, key: &str) -> Value {
    let instance = api.settled(domain, key, &["running", "failed"], READY);
    assert_eq!(instance["state"]["kind"], "running", "{instance}");
    instance
}

/// A person's branch of `key` from `from` with `spec`: the instance as stored (it runs once
/// the copy is done).
fn branch_into(
    api: &Client,
    domain: &str,
    key: &str,
    from: BranchFrom,
    spec: &Value,
) -> berth_client::InstanceView {
    let domain = support::domain_id(domain);
    api.call(|c| c.branch(&domain, key, &from, spec, UpCause::Person))
        .unwrap_or_else(|e| panic!("a branch into {key}: {e}"))
}

fn up_running(api: &Client, domain: &str, key: &str, spec: &Value) -> Value {
    api.up(domain, key, spec, "person").expect(200);
    api.settled(domain, key, &["running", "failed"], READY)
}

/// Runs `request` (which starts a copy of `kind` for `instance_key`) with the domain's event
/// stream open from before it, and waits there for the copy to end: its last `event: copy`,
/// every one seen on the way checked to only move forward.
pub(super) fn copy_of<T>(
    api: &Client,
    domain: &str,
    kind: &str,
    instance_key: &str,
    request: impl FnOnce() -> T,
) -> (T, berth_client::CopyEvent) {
    let mut events = Box::pin(api.api().events(&support::domain_id(domain), None));
    // The stream opens with every instance of the domain: once the first one is read, it is
    // subscribed, and nothing of the copy can be missed.
    block_on(async { tokio::time::timeout(COPY, events.next()).await })
        .expect("the stream opens")
        .expect("an event")
        .expect("an event");
    let answer = request();
    let copy = block_on(async {
        let mut last_done = 0;
        loop {
            let event = tokio::time::timeout(COPY, events.next())
                .await
                .unwrap_or_else(|_| panic!("no end of the {kind} copy of {instance_key} in time"))
                .expect("the stream goes on")
                .expect("an event");
            if let berth_client::DomainEvent::Copy { copy, .. } = event
                && copy.kind.as_str() == kind
                && copy.instance_key == instance_key
            {
                assert!(
                    copy.bytes_done >= last_done,
                    "progress goes forward: {copy:?}"
                );
                last_done = copy.bytes_done;
                if copy.state.as_str() != "copying" {
                    return copy;
                }
            }
        }
    });
    (answer, copy)
}

fn snapshot_ready(api: &Client, domain: &str, key: &str, name: &str) -> berth_client::SnapshotView {
    let snapshot =
        block_on(api.api().snapshot(&support::domain_id(domain), key, name)).expect("a snapshot");
    assert_eq!(snapshot.state.as_str(), "copying");
    assert!(snapshot.snapshot_id.as_str().starts_with("snp:"));
    until_ready(api, domain, &snapshot.snapshot_id)
}

/// Waits, on the domain's event stream, until snapshot `id` is no longer `copying`; it must be
/// `ready`.
fn until_ready(
    api: &Client,
    domain: &str,
    id: &berth_client::SnapshotId,
) -> berth_client::SnapshotView {
    let mut events = Box::pin(api.api().events(&support::domain_id(domain), None));
    let id = id.clone();
    // The copy may be done before the stream opens: the snapshot itself says so then.
    loop {
        let now = block_on(api.api().snapshot_by_id(&support::domain_id(domain), &id))
            .expect("the snapshot");
        if now.state.as_str() != "copying" {
            assert_eq!(now.state.as_str(), "ready", "{now:?}");
            return now;
        }
        block_on(async {
            tokio::time::timeout(COPY, events.next())
                .await
                .expect("an event in time")
        });
    }
}

#[test]
fn a_branch_of_a_running_postgres_has_every_row_and_writes_stay_apart_both_ways() {
    // Copies (layers off): a running source is frozen while its bytes move, never stopped.
    let daemon = Daemon::start_with(&["--volume-layers", "off"]);
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let main = up_running(&api, &domain, "db@main", &pg_spec("main"));
    assert_eq!(main["state"]["kind"], "running", "{main}");
    fill(&api, &domain, "db@main", 60_000);
    let owner_mode = |key: &str| {
        exec_ok(
            &api,
            &domain,
            key,
            &["stat", "-c", "%u %g %a", "/var/lib/postgresql/data"],
        )
    };
    let before = owner_mode("db@main");
    assert_eq!(before, "999 999 700");

    let (branch, copied) = copy_of(&api, &domain, "branch", "db@fix", || {
        branch_into(
            &api,
            &domain,
            "db@fix",
            BranchFrom::Instance("db@main".into()),
            &pg_spec("fix"),
        )
    });
    assert_eq!(branch.key, "db@fix");
    assert_eq!(copied.state.as_str(), "done", "{copied:?}");
    assert!(copied.bytes_total.unwrap_or(0) > 15_000_000, "{copied:?}");
    running(&api, &domain, "db@fix");

    // Every row; Postgres started on the copy, which it refuses with the wrong owner or mode.
    assert_eq!(
        sql(&api, &domain, "db@fix", "SELECT count(*) FROM t"),
        "60000"
    );
    assert_eq!(
        sql(
            &api,
            &domain,
            "db@fix",
            "SELECT md5(string_agg(body, '' ORDER BY id)) FROM t"
        ),
        sql(
            &api,
            &domain,
            "db@main",
            "SELECT md5(string_agg(body, '' ORDER BY id)) FROM t"
        ),
    );
    assert_eq!(owner_mode("db@fix"), before);

    // The source was frozen, never stopped: the same run of its container.
    let main_now = api.instance(&domain, "db@main");
    assert_eq!(main_now["state"]["kind"], "running");
    assert_eq!(main_now["startedAt"], main["startedAt"]);

    // Writes stay apart both ways.
    sql(
        &api,
        &domain,
        "db@fix",
        "INSERT INTO t VALUES (-1, 'only in fix')",
    );
    sql(
        &api,
        &domain,
        "db@main",
        "INSERT INTO t VALUES (-2, 'only in main')",
    );
    assert_eq!(
        sql(
            &api,
            &domain,
            "db@main",
            "SELECT count(*) FROM t WHERE id = -1"
        ),
        "0"
    );
    assert_eq!(
        sql(
            &api,
            &domain,
            "db@fix",
            "SELECT count(*) FROM t WHERE id = -2"
        ),
        "0"
    );
    assert_eq!(
        sql(&api, &domain, "db@fix", "SELECT count(*) FROM t"),
        "60001"
    );

    // A branch onto a key that exists is refused and writes nothing.
    let did = support::domain_id(&domain);
    let from_main = berth_client::BranchFrom::Instance("db@main".into());
    let fix_spec = pg_spec("fix");
    support::refused(
        api.call(|c| {
            c.branch(
                &did,
                "db@fix",
                &from_main,
                &fix_spec,
                berth_client::UpCause::Person,
            )
        }),
        409,
        "ResourceInstanceExistsError",
    );
    // An unknown source is the contract's 404.
    let from_nobody = berth_client::BranchFrom::Instance("db@nobody".into());
    let other_spec = pg_spec("other");
    support::refused(
        api.call(|c| {
            c.branch(
                &did,
                "db@other",
                &from_nobody,
                &other_spec,
                berth_client::UpCause::Person,
            )
        }),
        404,
        "ResourceInstanceNotFoundError",
    );
    support::refused(
        api.call(|c| c.instance(&did, "db@other")),
        404,
        "ResourceInstanceNotFoundError",
    );
}

#[test]
fn a_postgres_restore_brings_the_rows_back_and_keeps_the_migrated_state_as_a_snapshot() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let domain_id = support::domain_id(&domain);
    let main = up_running(&api, &domain, "db@main", &pg_spec("main"));
    assert_eq!(main["state"]["kind"], "running", "{main}");
    fill(&api, &domain, "db@main", 20_000);

    let snapshot = snapshot_ready(&api, &domain, "db@main", "before-migration");
    assert_eq!(snapshot.name, "before-migration");
    assert!(snapshot.source_paused_ms.is_some(), "{snapshot:?}");
    assert!(
        snapshot.volumes[0].bytes.unwrap_or(0) > 5_000_000,
        "{snapshot:?}"
    );
    // On layers, the source went on after a restart, on a new layer over the snapshot's.
    running(&api, &domain, "db@main");

    // A destructive migration.
    sql(
        &api,
        &domain,
        "db@main",
        "DROP TABLE t; CREATE TABLE migrated (x int); INSERT INTO migrated VALUES (7)",
    );

    let (restored, copied) = copy_of(&api, &domain, "restore", "db@main", || {
        block_on(
            api.api()
                .restore(&domain_id, "db@main", &snapshot.snapshot_id),
        )
        .expect("a restore")
    });
    assert_eq!(restored.instance.state.kind(), "starting");
    assert!(
        restored.before_restore.name.starts_with("before-restore-"),
        "{restored:?}"
    );
    assert_eq!(copied.state.as_str(), "done", "{copied:?}");
    running(&api, &domain, "db@main");
    assert_eq!(
        sql(&api, &domain, "db@main", "SELECT count(*) FROM t"),
        "20000"
    );
    assert_eq!(
        sql(
            &api,
            &domain,
            "db@main",
            "SELECT to_regclass('migrated') IS NULL"
        ),
        "t"
    );

    // The automatic snapshot holds the migrated state: a branch of it shows it.
    let list = block_on(api.api().snapshots(&domain_id, Some("db@main"))).expect("the list");
    assert_eq!(list.len(), 2);
    assert_eq!(
        list[0].snapshot_id, restored.before_restore.snapshot_id,
        "newest first"
    );
    assert_eq!(list[0].state.as_str(), "ready");
    branch_into(
        &api,
        &domain,
        "db@check",
        BranchFrom::Snapshot(restored.before_restore.snapshot_id.clone()),
        &pg_spec("check"),
    );
    running(&api, &domain, "db@check");
    assert_eq!(
        sql(&api, &domain, "db@check", "SELECT x FROM migrated"),
        "7"
    );
    assert_eq!(
        sql(&api, &domain, "db@check", "SELECT to_regclass('t') IS NULL"),
        "t"
    );

    // Snapshots belong to their domain: another domain's id is unknown there. One another
    // instance stands on is deleted, its layers kept for it; one only its own instance stands
    // on is forgotten, its volume the instance's.
    let other = support::domain_id(&api.create_domain("other"));
    support::refused(
        api.call(|c| c.snapshot_by_id(&other, &snapshot.snapshot_id)),
        404,
        "ResourceSnapshotNotFoundError",
    );
    let volume_count = |id: &berth_client::SnapshotId| {
        docker(&[
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=berth.snapshot={id}"),
        ])
        .lines()
        .count()
    };
    let deleted =
        block_on(api.api().delete_snapshot(&domain_id, &snapshot.snapshot_id)).expect("a delete");
    assert!(
        deleted
            .kept
            .iter()
            .any(|k| k.users.iter().any(|u| u == "db@check")),
        "db@check stands on it: {deleted:?}"
    );
    support::refused(
        api.call(|c| c.snapshot_by_id(&domain_id, &snapshot.snapshot_id)),
        404,
        "ResourceSnapshotNotFoundError",
    );
    assert_eq!(
        sql(&api, &domain, "db@check", "SELECT x FROM migrated"),
        "7"
    );
    // A snapshot of the instance running on layers holds a copy of its upper layer (an
    // overlay volume and its upper volume, taken under a freeze); its delete removes them,
    // and the instance runs on.
    let spare = snapshot_ready(&api, &domain, "db@main", "spare");
    assert_eq!(volume_count(&spare.snapshot_id), 2);
    block_on(api.api().delete_snapshot(&domain_id, &spare.snapshot_id)).expect("a delete");
    assert_eq!(volume_count(&spare.snapshot_id), 0);
    running(&api, &domain, "db@main");
    assert_eq!(
        sql(&api, &domain, "db@main", "SELECT count(*) FROM t"),
        "20000"
    );
    support::refused(
        api.call(|c| c.snapshot_by_id(&domain_id, &spare.snapshot_id)),
        404,
        "ResourceSnapshotNotFoundError",
    );
}

#[test]
fn a_redis_restore_brings_the_keys_back_with_appendonly_always() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let domain_id = support::domain_id(&domain);
    let cache = up_running(&api, &domain, "cache@main", &redis_spec("main"));
    assert_eq!(cache["state"]["kind"], "running", "{cache}");
    redis(&api, &domain, "cache@main", &["set", "greeting", "hello"]);
    redis(
        &api,
        &domain,
        "cache@main",
        &["rpush", "queue", "a", "b", "c"],
    );
    let snapshot = snapshot_ready(&api, &domain, "cache@main", "before-flush");

    // A branch has every key, and its writes stay apart.
    branch_into(
        &api,
        &domain,
        "cache@fix",
        BranchFrom::Instance("cache@main".into()),
        &redis_spec("fix"),
    );
    running(&api, &domain, "cache@fix");
    assert_eq!(
        redis(&api, &domain, "cache@fix", &["get", "greeting"]),
        "hello"
    );
    redis(&api, &domain, "cache@fix", &["set", "greeting", "from fix"]);
    assert_eq!(
        redis(&api, &domain, "cache@main", &["get", "greeting"]),
        "hello"
    );

    redis(&api, &domain, "cache@main", &["flushall"]);
    redis(&api, &domain, "cache@main", &["set", "after", "flush"]);
    let (restored, copied) = copy_of(&api, &domain, "restore", "cache@main", || {
        block_on(
            api.api()
                .restore(&domain_id, "cache@main", &snapshot.snapshot_id),
        )
        .expect("a restore")
    });
    assert_eq!(copied.state.as_str(), "done", "{copied:?}");
    running(&api, &domain, "cache@main");
    assert_eq!(
        redis(&api, &domain, "cache@main", &["get", "greeting"]),
        "hello"
    );
    assert_eq!(redis(&api, &domain, "cache@main", &["llen", "queue"]), "3");
    assert_eq!(
        redis(&api, &domain, "cache@main", &["exists", "after"]),
        "0"
    );

    // What the restore replaced is in the before-restore snapshot.
    branch_into(
        &api,
        &domain,
        "cache@check",
        BranchFrom::Snapshot(restored.before_restore.snapshot_id),
        &redis_spec("check"),
    );
    running(&api, &domain, "cache@check");
    assert_eq!(
        redis(&api, &domain, "cache@check", &["get", "after"]),
        "flush"
    );
    assert_eq!(
        redis(&api, &domain, "cache@check", &["exists", "greeting"]),
        "0"
    );
}

#[test]
fn owners_modes_links_and_empty_directories_survive_a_copy_with_the_image_s_cp_and_one_through_the_archive_api()
 {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("files");
    let domain_id = support::domain_id(&domain);
    let busybox = support::busybox_image();
    let made = up_running(&api, &domain, "files@a", &files_spec(&busybox, "a"));
    assert_eq!(made["state"]["kind"], "running", "{made}");
    exec_ok(
        &api,
        &domain,
        "files@a",
        &[
            "sh",
            "-c",
            "cd /srv/data && echo secret > f && chown 1234:5678 f && chmod 0640 f \
             && ln -s f link && mkdir -p empty sticky && chmod 1777 sticky \
             && chown 999:999 empty && chmod 0700 empty && ln f hard \
             && chown 4321:4321 /srv/data && chmod 0751 /srv/data",
        ],
    );
    // Link counts of files only: a directory's depends on the filesystem (an overlay's merged
    // directory, as a branch from a snapshot has, counts 1).
    let listing = |key: &str| {
        exec_ok(
            &api,
            &domain,
            key,
            &[
                "sh",
                "-c",
                "cd /srv/data && stat -c '%n %u %g %a %F' . * && stat -c '%n %h' f hard \
                 && readlink link && cat f",
            ],
        )
    };
    let expected = listing("files@a");
    assert!(
        expected.contains("f 1234 5678 640 regular file\n") && expected.contains("hard 2"),
        "{expected}"
    );

    // A branch into the same image, which has `cp`: its helper copies with it.
    block_on(api.api().branch(
        &domain_id,
        "files@d",
        &berth_client::BranchFrom::Instance("files@a".into()),
        &files_spec(&busybox, "d"),
        berth_client::UpCause::Person,
    ))
    .expect("a branch into an image with cp");
    running(&api, &domain, "files@d");
    assert_eq!(listing("files@d"), expected);

    // Through the bare image, which has no shell, no `cp` and no tools: a branch (its helper
    // is made from that image, so the copy goes through the archive API) and a snapshot of it.
    let bare = support::bare_image();
    let mut no_shell = files_spec(&bare, "b");
    no_shell["ready"] = json!({"kind": "tcp", "port": 7000});
    branch_into(
        &api,
        &domain,
        "files@b",
        BranchFrom::Instance("files@a".into()),
        &no_shell,
    );
    running(&api, &domain, "files@b");
    let snapshot = snapshot_ready(&api, &domain, "files@b", "no-shell");

    // The instance it was taken of is archived; the snapshot outlives it.
    api.call(|c| c.archive(&domain_id, "files@b"))
        .expect("an archive");
    let from_snapshot = berth_client::BranchFrom::Snapshot(snapshot.snapshot_id.clone());
    support::refused(
        api.call(|c| {
            c.branch(
                &domain_id,
                "files@b",
                &from_snapshot,
                &no_shell,
                berth_client::UpCause::Person,
            )
        }),
        409,
        "ResourceInstanceArchivedError",
    );
    block_on(api.api().branch(
        &domain_id,
        "files@c",
        &berth_client::BranchFrom::Snapshot(snapshot.snapshot_id.clone()),
        &files_spec(&busybox, "c"),
        berth_client::UpCause::Person,
    ))
    .expect("a branch from a snapshot of an archived instance");
    running(&api, &domain, "files@c");
    assert_eq!(listing("files@c"), expected);
}

#[test]
fn bad_snapshot_branch_and_restore_requests_are_refused_and_write_nothing() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("files");
    let busybox = support::busybox_image();
    up_running(&api, &domain, "files@a", &files_spec(&busybox, "a"));
    let base = format!("/v1/resource-domains/{domain}/instances");
    for (body, place) in [
        (json!({}), "body.name"),
        (json!({"name": ""}), "body.name"),
        (json!({"name": "x".repeat(101)}), "body.name"),
        (json!({"name": "a\u{7}b"}), "body.name"),
        (json!({"name": "ok", "extra": 1}), "body.extra"),
    ] {
        let refused = api
            .post(&format!("{base}/files@a/snapshots"), body)
            .expect_error(400, "RequestRefusedError");
        assert!(
            refused["message"].as_str().unwrap().contains(place),
            "{refused}"
        );
    }
    api.post(&format!("{base}/nobody/snapshots"), json!({"name": "x"}))
        .expect_error(404, "ResourceInstanceNotFoundError");
    for (body, place) in [
        (
            json!({"from": {}, "spec": files_spec(&busybox, "b"), "cause": "use"}),
            "body.from",
        ),
        (
            json!({"from": {"instanceKey": "files@a", "snapshotId": "snp:00000000-0000-4000-8000-000000000000"}, "spec": files_spec(&busybox, "b"), "cause": "use"}),
            "body.from",
        ),
        (
            json!({"from": {"snapshotId": "nope"}, "spec": files_spec(&busybox, "b"), "cause": "use"}),
            "body.from.snapshotId",
        ),
        (
            json!({"from": {"instanceKey": "files@a"}, "spec": files_spec(&busybox, "b"), "worktreeKey": "b", "cause": "use"}),
            "body.worktreeKey",
        ),
        (
            json!({"from": {"instanceKey": "files@a"}, "worktreeKey": "Not A Key", "cause": "use"}),
            "body.worktreeKey",
        ),
        (
            json!({"from": {"instanceKey": "files@a"}, "worktreeKey": "b"}),
            "body.cause",
        ),
    ] {
        let refused = api
            .post(&format!("{base}/files@b/branch"), body)
            .expect_error(400, "RequestRefusedError");
        assert!(
            refused["message"].as_str().unwrap().contains(place),
            "{refused}"
        );
    }
    api.post(
        &format!("{base}/files@b/branch"),
        json!({"from": {"snapshotId": "snp:00000000-0000-4000-8000-000000000000"}, "spec": files_spec(&busybox, "b"), "cause": "use"}),
    )
    .expect_error(404, "ResourceSnapshotNotFoundError");
    // Without a spec, the source's is used: in the source's own worktree, its alias is taken.
    api.post(
        &format!("{base}/files@b/branch"),
        json!({"from": {"instanceKey": "files@a"}, "cause": "use"}),
    )
    .expect_error(409, "ResourceInstanceAliasTakenError");
    api.post(
        &format!("{base}/files@b/branch"),
        json!({"from": {"snapshotId": "snp:00000000-0000-4000-8000-000000000000"}, "worktreeKey": "b", "cause": "use"}),
    )
    .expect_error(404, "ResourceSnapshotNotFoundError");
    api.post(
        &format!("{base}/files@b/branch"),
        json!({"from": {"instanceKey": "nobody"}, "worktreeKey": "b", "cause": "use"}),
    )
    .expect_error(404, "ResourceInstanceNotFoundError");
    api.post(
        &format!("{base}/files@a/restore"),
        json!({"snapshotId": "snp:00000000-0000-4000-8000-000000000000"}),
    )
    .expect_error(404, "ResourceSnapshotNotFoundError");
    api.post(&format!("{base}/files@a/restore"), json!({}))
        .expect_error(400, "RequestRefusedError");
    // From another instance: it must exist, and be another; neither refusal takes a snapshot.
    api.post(
        &format!("{base}/files@a/restore"),
        json!({"instanceKey": "nobody"}),
    )
    .expect_error(404, "ResourceInstanceNotFoundError");
    api.post(
        &format!("{base}/files@a/restore"),
        json!({"instanceKey": "files@a"}),
    )
    .expect_error(400, "RequestRefusedError");
    api.post(
        &format!("{base}/files@a/restore"),
        json!({"instanceKey": "files@a", "snapshotId": "snp:00000000-0000-4000-8000-000000000000"}),
    )
    .expect_error(400, "RequestRefusedError");
    let did = support::domain_id(&domain);
    support::refused(
        api.call(|c| c.instance(&did, "files@b")),
        404,
        "ResourceInstanceNotFoundError",
    );
    let list = block_on(api.api().snapshots(&did, None)).expect("a list");
    assert!(list.is_empty(), "{list:?}");
    // Another key sees no snapshot of this domain.
    let other = daemon.client_with(Some(support::OTHER_KEY));
    support::refused(
        other.call(|c| c.snapshots(&did, None)),
        403,
        "ResourceDomainForbiddenError",
    );
}

#[test]
fn a_daemon_killed_in_the_middle_of_a_copy_never_uses_the_half_written_volume_and_the_next_start_finishes_it()
 {
    // Copies (layers off): the half-written volume is a copy's.
    let mut daemon = Daemon::start_with(&["--volume-layers", "off"]);
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let main = up_running(&api, &domain, "db@main", &pg_spec("main"));
    assert_eq!(main["state"]["kind"], "running", "{main}");
    // Enough data that the copy lasts well beyond the moment its helper appears.
    fill(&api, &domain, "db@main", 400_000);
    let prefix_label = format!("label=berth.prefix={}", daemon.prefix);
    let helpers = || {
        docker(&[
            "ps",
            "-a",
            "--filter",
            &prefix_label,
            "--filter",
            "label=berth.copy",
            "--format",
            "{{.Names}}",
        ])
        .lines()
        .count()
    };
    let branch = branch_into(
        &api,
        &domain,
        "db@fix",
        BranchFrom::Instance("db@main".into()),
        &pg_spec("fix"),
    );
    wait_until(COPY, "the copy's helper appears", || helpers() > 0);
    daemon.kill9();
    // Nothing runs on the half-written volume, and the source is left frozen or running, never
    // stopped.
    let branch_json = serde_json::to_value(&branch).unwrap();
    assert!(support::containers_of(&branch_json).is_empty());

    daemon.start_again();
    let api = daemon.client();
    let fix = api.settled(&domain, "db@fix", &["running", "failed"], COPY);
    assert_eq!(fix["state"]["kind"], "running", "{fix}");
    assert_eq!(
        sql(&api, &domain, "db@fix", "SELECT count(*) FROM t"),
        "400000"
    );
    assert_eq!(
        docker(&[
            "inspect",
            "-f",
            "{{.State.Paused}}",
            &support::container_of(&main)
        ]),
        "false",
        "the source is thawed"
    );
    assert_eq!(api.instance(&domain, "db@main")["state"]["kind"], "running");
    assert_eq!(helpers(), 0, "no helper is left");
    assert!(
        daemon
            .log_text()
            .contains("removing what an interrupted copy wrote"),
        "the next start removed the half-written volume before copying again"
    );
    // The branch mounts exactly the volume the finished copy filled.
    let volumes = docker(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!(
            "label=berth.instance={}",
            fix["resourceInstanceId"].as_str().unwrap()
        ),
    ]);
    assert_eq!(volumes.lines().count(), 1, "{volumes}");
    assert_eq!(volumes, fix["volumes"][0]["dockerName"].as_str().unwrap());
}

/// Restores `key` from `snapshot`, which must stand on layers, and waits until it runs with
/// `rows` rows in `t`; answers the restore's answer.
/// A person's stop of `key`, waited for.
fn stop(api: &Client, domain: &str, key: &str) {
    block_on(api.api().stop(&support::domain_id(domain), key, "the test")).expect("a stop");
    let stopped = api.settled(domain, key, &["stopped", "failed"], READY);
    assert_eq!(stopped["state"]["kind"], "stopped", "{stopped}");
}

/// A snapshot of `key` taken while it is stopped (so that it moves onto one more layer),
/// then `key` started again and running.
fn stopped_snapshot(
    api: &Client,
    domain: &str,
    key: &str,
    name: &str,
) -> berth_client::SnapshotView {
    stop(api, domain, key);
    let snapshot = snapshot_ready(api, domain, key, name);
    block_on(api.api().start(&support::domain_id(domain), key)).expect("a start");
    running(api, domain, key);
    snapshot
}

fn restore_on_layers(
    api: &Client,
    domain: &str,
    key: &str,
    snapshot: &berth_client::SnapshotId,
    rows: &str,
) -> berth_client::RestoreResponse {
    let domain_id = support::domain_id(domain);
    let (restored, copy) = copy_of(api, domain, "restore", key, || {
        block_on(api.api().restore(&domain_id, key, snapshot)).expect("a restore")
    });
    assert_eq!(copy.method, berth_client::CopyMethod::Overlay, "{copy:?}");
    let back = api.settled(domain, key, &["running", "failed"], READY);
    assert_eq!(back["state"]["kind"], "running", "{back}");
    assert_eq!(sql(api, domain, key, "SELECT count(*) FROM t"), rows);
    restored
}

/// The engine's options of volume `name` (`type`, `o`, ...); empty for a plain volume.
fn volume_options(name: &str) -> Value {
    support::docker_inspect("volume", name)
        .unwrap_or_else(|| panic!("the volume {name} exists"))["Options"]
        .clone()
}

#[test]
fn a_branch_and_a_restore_from_a_snapshot_stand_on_its_layers_and_the_snapshot_is_kept_while_they_do()
 {
    use berth_client::{CopyMethod, CopyState};
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("layers");
    let main = up_running(&api, &domain, "db@main", &pg_spec("main"));
    assert_eq!(main["state"]["kind"], "running", "{main}");
    fill(&api, &domain, "db@main", 20_000);
    let snapshot = snapshot_ready(&api, &domain, "db@main", "base");
    let snapshot_volume = snapshot.volumes[0].name.clone();
    assert_eq!(snapshot_volume, "data");

    // A branch from the snapshot: an overlay volume on its layer, no byte moved.
    let (_, copy) = copy_of(&api, &domain, "branch", "db@layered", || {
        branch_into(
            &api,
            &domain,
            "db@layered",
            BranchFrom::Snapshot(snapshot.snapshot_id.clone()),
            &pg_spec("layered"),
        )
    });
    assert_eq!(copy.state, CopyState::Done, "{copy:?}");
    assert_eq!(copy.method, CopyMethod::Overlay, "{copy:?}");
    assert_eq!(copy.bytes_done, 0, "{copy:?}");
    let branch = running(&api, &domain, "db@layered");
    let volume = branch["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(volume_options(&volume)["type"], "overlay", "{volume}");
    assert_eq!(
        sql(&api, &domain, "db@layered", "SELECT count(*) FROM t"),
        "20000"
    );
    let root = |key: &str| {
        exec_ok(
            &api,
            &domain,
            key,
            &["stat", "-c", "%u:%g %a", "/var/lib/postgresql/data"],
        )
    };
    assert_eq!(
        root("db@layered"),
        root("db@main"),
        "the root's owner and mode"
    );
    assert_eq!(
        api.answer(|c| c.daemon()).expect(200)["volumeLayers"],
        "overlay"
    );

    // Writes stay on their side, both ways.
    sql(
        &api,
        &domain,
        "db@layered",
        "INSERT INTO t VALUES (20001, 'branch')",
    );
    sql(&api, &domain, "db@main", "DELETE FROM t WHERE id = 1");
    assert_eq!(
        sql(&api, &domain, "db@layered", "SELECT count(*) FROM t"),
        "20001"
    );
    assert_eq!(
        sql(&api, &domain, "db@main", "SELECT count(*) FROM t"),
        "19999"
    );

    // A destructive migration, then a restore from the snapshot: layers again, rows back.
    sql(&api, &domain, "db@main", "DROP TABLE t");
    let restored = restore_on_layers(&api, &domain, "db@main", &snapshot.snapshot_id, "20000");

    // The before-restore snapshot holds the migrated state: a branch from it has no table.
    let before = restored.before_restore.snapshot_id.clone();
    copy_of(&api, &domain, "branch", "db@before", || {
        branch_into(
            &api,
            &domain,
            "db@before",
            BranchFrom::Snapshot(before.clone()),
            &pg_spec("before"),
        )
    });
    running(&api, &domain, "db@before");
    assert_eq!(
        sql(
            &api,
            &domain,
            "db@before",
            "SELECT to_regclass('public.t') IS NULL"
        ),
        "t"
    );

    // A branch of a branch: a snapshot of the layered one, and a branch from that.
    let second = snapshot_ready(&api, &domain, "db@layered", "layered");
    let (_, copy) = copy_of(&api, &domain, "branch", "db@second", || {
        branch_into(
            &api,
            &domain,
            "db@second",
            BranchFrom::Snapshot(second.snapshot_id.clone()),
            &pg_spec("second"),
        )
    });
    assert_eq!(copy.method, CopyMethod::Overlay, "{copy:?}");
    running(&api, &domain, "db@second");
    assert_eq!(
        sql(&api, &domain, "db@second", "SELECT count(*) FROM t"),
        "20001"
    );
}

#[test]
fn with_volume_layers_off_a_branch_from_a_snapshot_copies_every_byte() {
    use berth_client::{BranchFrom, CopyMethod, UpCause};
    let daemon = Daemon::start_with(&["--volume-layers", "off"]);
    let api = daemon.client();
    let domain = api.create_domain("copies");
    let domain_id = support::domain_id(&domain);
    let image = support::busybox_image();
    let files = up_running(&api, &domain, "files", &files_spec(&image, "main"));
    assert_eq!(files["state"]["kind"], "running", "{files}");
    exec_ok(
        &api,
        &domain,
        "files",
        &["sh", "-c", "echo kept > /srv/data/f"],
    );
    let snapshot = snapshot_ready(&api, &domain, "files", "base");
    let (_, copy) = copy_of(&api, &domain, "branch", "files@copy", || {
        block_on(api.api().branch(
            &domain_id,
            "files@copy",
            &BranchFrom::Snapshot(snapshot.snapshot_id.clone()),
            &files_spec(&image, "copy"),
            UpCause::Person,
        ))
        .expect("a branch")
    });
    assert_eq!(copy.method, CopyMethod::Copy, "{copy:?}");
    let branch = running(&api, &domain, "files@copy");
    let volume = branch["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        volume_options(&volume)
            .as_object()
            .is_none_or(|o| o.is_empty()),
        "{volume}"
    );
    assert_eq!(
        exec_ok(&api, &domain, "files@copy", &["cat", "/srv/data/f"]),
        "kept"
    );
    assert_eq!(
        api.answer(|c| c.daemon()).expect(200)["volumeLayers"],
        "copy"
    );
}

#[test]
fn a_daemon_killed_as_a_branch_stands_on_layers_converges_on_whole_overlay_volumes() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("layers-kill");
    let main = up_running(&api, &domain, "db@main", &pg_spec("main"));
    assert_eq!(main["state"]["kind"], "running", "{main}");
    fill(&api, &domain, "db@main", 10_000);
    let snapshot = snapshot_ready(&api, &domain, "db@main", "base");
    // Killed the moment the branch is accepted: its layers are being made (or not begun).
    let branch = branch_into(
        &api,
        &domain,
        "db@fix",
        BranchFrom::Snapshot(snapshot.snapshot_id.clone()),
        &pg_spec("fix"),
    );
    daemon.kill9();
    let branch_json = serde_json::to_value(&branch).unwrap();
    assert!(support::containers_of(&branch_json).is_empty());

    daemon.start_again();
    let api = daemon.client();
    let fix = api.settled(&domain, "db@fix", &["running", "failed"], COPY);
    assert_eq!(fix["state"]["kind"], "running", "{fix}");
    assert_eq!(
        sql(&api, &domain, "db@fix", "SELECT count(*) FROM t"),
        "10000"
    );
    // Exactly the overlay volume it mounts and its upper layer's volume, no helper left.
    let mounted = fix["volumes"][0]["dockerName"].as_str().unwrap().to_owned();
    assert_eq!(volume_options(&mounted)["type"], "overlay", "{mounted}");
    let mut volumes: Vec<String> = docker(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!(
            "label=berth.instance={}",
            fix["resourceInstanceId"].as_str().unwrap()
        ),
    ])
    .lines()
    .map(str::to_owned)
    .collect();
    volumes.sort();
    assert_eq!(volumes, [mounted.clone(), format!("{mounted}.up")]);
    let helpers = docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=berth.prefix={}", daemon.prefix),
        "--filter",
        "label=berth.copy",
        "--format",
        "{{.Names}}",
    ]);
    assert_eq!(helpers, "", "no helper is left");
}

#[test]
fn a_snapshot_moves_a_running_postgres_onto_layers_and_a_branch_of_it_then_copies_its_upper_layer_under_a_freeze()
 {
    use berth_client::{CopyMethod, CopyState};
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("moves");
    let domain_id = support::domain_id(&domain);
    let main = up_running(&api, &domain, "db@main", &pg_spec("main"));
    assert_eq!(main["state"]["kind"], "running", "{main}");
    fill(&api, &domain, "db@main", 20_000);
    let plain = main["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned();

    // The snapshot copies nothing: the source stops cleanly, its volume becomes the
    // snapshot's layer, and it starts again on an overlay volume over it.
    let (_, copy) = copy_of(&api, &domain, "snapshot", "db@main", || {
        block_on(api.api().snapshot(&domain_id, "db@main", "before")).expect("a snapshot")
    });
    assert_eq!(copy.state, CopyState::Done, "{copy:?}");
    assert_eq!(copy.method, CopyMethod::Overlay, "{copy:?}");
    assert_eq!(copy.bytes_done, 0, "{copy:?}");
    let snapshot = block_on(api.api().snapshot_by_id(
        &domain_id,
        copy.snapshot_id.as_ref().expect("the copy's snapshot"),
    ))
    .expect("the snapshot");
    assert_eq!(snapshot.state.as_str(), "ready", "{snapshot:?}");
    assert!(snapshot.source_paused_ms.is_some(), "{snapshot:?}");
    assert!(
        snapshot.volumes[0].bytes.unwrap_or(0) > 5_000_000,
        "{snapshot:?}"
    );
    let moved = running(&api, &domain, "db@main");
    assert_ne!(moved["startedAt"], main["startedAt"], "it restarted");
    let upper = moved["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(volume_options(&upper)["type"], "overlay", "{upper}");
    assert_eq!(volume_options(&plain), Value::Null, "{plain} stays plain");
    sql(
        &api,
        &domain,
        "db@main",
        "INSERT INTO t VALUES (-1, 'after')",
    );

    // A branch of the running source, now on layers, copies its upper layer (what it wrote
    // since the move) under a freeze: it is not stopped, and the branch has every row.
    let (_, copy) = copy_of(&api, &domain, "branch", "db@fix", || {
        branch_into(
            &api,
            &domain,
            "db@fix",
            BranchFrom::Instance("db@main".into()),
            &pg_spec("fix"),
        )
    });
    assert_eq!(copy.state, CopyState::Done, "{copy:?}");
    assert_eq!(copy.method, CopyMethod::Overlay, "{copy:?}");
    assert_eq!(copy.bytes_done, 0, "{copy:?}");
    let fix = running(&api, &domain, "db@fix");
    assert_eq!(
        sql(&api, &domain, "db@fix", "SELECT count(*) FROM t"),
        "20001"
    );
    // It stands on a crash image (the source was frozen, not stopped): Postgres recovered.
    let logs = std::process::Command::new("docker")
        .args(["logs", &support::container_of(&fix)])
        .output()
        .expect("docker logs");
    let logs =
        String::from_utf8_lossy(&logs.stderr).into_owned() + &String::from_utf8_lossy(&logs.stdout);
    assert!(logs.contains("database system was interrupted"), "{logs}");
    let still = running(&api, &domain, "db@main");
    assert_eq!(
        still["startedAt"], moved["startedAt"],
        "main was not restarted"
    );
    assert_eq!(
        still["volumes"], moved["volumes"],
        "main runs on its volumes"
    );

    // Writes stay apart both ways.
    sql(&api, &domain, "db@fix", "INSERT INTO t VALUES (-2, 'fix')");
    sql(
        &api,
        &domain,
        "db@main",
        "INSERT INTO t VALUES (-3, 'main')",
    );
    assert_eq!(
        sql(
            &api,
            &domain,
            "db@main",
            "SELECT count(*) FROM t WHERE id = -2"
        ),
        "0"
    );
    assert_eq!(
        sql(
            &api,
            &domain,
            "db@fix",
            "SELECT count(*) FROM t WHERE id = -3"
        ),
        "0"
    );

    // The snapshot holds the state it was taken in: a restore brings it back.
    restore_on_layers(&api, &domain, "db@main", &snapshot.snapshot_id, "20000");

    // The branch stands on the snapshot's layer: deleting the snapshot keeps that layer for it,
    // and says who stands on it.
    let deleted =
        block_on(api.api().delete_snapshot(&domain_id, &snapshot.snapshot_id)).expect("a delete");
    assert!(
        deleted
            .kept
            .iter()
            .any(|k| k.users.iter().any(|u| u == "db@fix")),
        "db@fix stands on it: {deleted:?}"
    );
    assert!(deleted.removed_volumes.is_empty(), "{deleted:?}");
    let fix_volume = fix["volumes"][0]["dockerName"].as_str().unwrap();

    // A snapshot of db@fix (running on layers) copies its upper layer; its delete removes
    // that copy, and db@fix runs on its own volumes.
    let (_, copy) = copy_of(&api, &domain, "snapshot", "db@fix", || {
        block_on(api.api().snapshot(&domain_id, "db@fix", "fix-base")).expect("a snapshot")
    });
    let own = copy.snapshot_id.expect("the copy's snapshot");
    block_on(api.api().delete_snapshot(&domain_id, &own)).expect("a delete");
    running(&api, &domain, "db@fix");
    assert_eq!(
        sql(&api, &domain, "db@fix", "SELECT count(*) FROM t"),
        "20002"
    );
    assert_eq!(
        volume_options(fix_volume)["type"],
        "overlay",
        "{fix_volume} stays"
    );
}

#[test]
fn a_daemon_killed_as_a_snapshot_moves_its_source_onto_layers_converges_with_nothing_half_made() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("moves-kill");
    let domain_id = support::domain_id(&domain);
    let main = up_running(&api, &domain, "db@main", &pg_spec("main"));
    assert_eq!(main["state"]["kind"], "running", "{main}");
    fill(&api, &domain, "db@main", 10_000);
    // Killed the moment the snapshot is accepted: the source is stopping, or its layers are
    // being made, or it moved already.
    let taken = block_on(api.api().snapshot(&domain_id, "db@main", "base")).expect("a snapshot");
    daemon.kill9();

    daemon.start_again();
    let api = daemon.client();
    until_ready(&api, &domain, &taken.snapshot_id);
    let main = api.settled(&domain, "db@main", &["running", "failed"], COPY);
    assert_eq!(main["state"]["kind"], "running", "{main}");
    sql(&api, &domain, "db@main", "DELETE FROM t WHERE id <= 10");
    // Exactly the volume it mounts, its upper layer and the volume it left: nothing half-made.
    let mounted = main["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(volume_options(&mounted)["type"], "overlay", "{mounted}");
    let volumes = docker(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!(
            "label=berth.instance={}",
            main["resourceInstanceId"].as_str().unwrap()
        ),
    ]);
    assert_eq!(volumes.lines().count(), 3, "{volumes}");
    assert!(
        volumes.lines().any(|v| v == format!("{mounted}.up")),
        "{volumes}"
    );

    // The snapshot holds the rows as they were.
    copy_of(&api, &domain, "restore", "db@main", || {
        block_on(api.api().restore(&domain_id, "db@main", &taken.snapshot_id)).expect("a restore")
    });
    let back = api.settled(&domain, "db@main", &["running", "failed"], COPY);
    assert_eq!(back["state"]["kind"], "running", "{back}");
    assert_eq!(
        sql(&api, &domain, "db@main", "SELECT count(*) FROM t"),
        "10000"
    );
}

#[test]
fn layers_past_the_flatten_limit_are_copied_into_one_in_the_background_and_every_snapshot_still_restores()
 {
    let daemon = Daemon::start_with(&["--layers-flatten-at", "3"]);
    let api = daemon.client();
    let domain = api.create_domain("flatten");
    let domain_id = support::domain_id(&domain);
    let main = up_running(&api, &domain, "db@main", &pg_spec("main"));
    assert_eq!(main["state"]["kind"], "running", "{main}");
    fill(&api, &domain, "db@main", 1_000);
    let lowers = |instance: &Value| -> usize {
        let options = volume_options(instance["volumes"][0]["dockerName"].as_str().unwrap());
        let o = options["o"].as_str().unwrap_or_else(|| panic!("{options}"));
        let lowerdir = o
            .split(',')
            .find_map(|part| part.strip_prefix("lowerdir="))
            .unwrap_or_else(|| panic!("{o}"));
        lowerdir.split(':').count()
    };

    // Each snapshot of the stopped instance moves it onto one more layer: 1, then 2 (one of
    // it running would copy its upper layer instead, and leave it on the layers it has).
    let first = stopped_snapshot(&api, &domain, "db@main", "first");
    sql(
        &api,
        &domain,
        "db@main",
        "INSERT INTO t VALUES (1001, 'second')",
    );
    assert_eq!(lowers(&api.instance(&domain, "db@main")), 1);
    let second = stopped_snapshot(&api, &domain, "db@main", "second");
    sql(
        &api,
        &domain,
        "db@main",
        "INSERT INTO t VALUES (1002, 'third')",
    );
    assert_eq!(lowers(&api.instance(&domain, "db@main")), 2);

    // The third reaches the limit: a flatten follows it, reported on the stream, and the
    // instance stands on two layers (its upper layer over one flat copy of the rest).
    stop(&api, &domain, "db@main");
    let (third, flattened) = copy_of(&api, &domain, "flatten", "db@main", || {
        block_on(api.api().snapshot(&domain_id, "db@main", "third")).expect("a snapshot")
    });
    block_on(api.api().start(&domain_id, "db@main")).expect("a start");
    assert_eq!(flattened.state.as_str(), "done", "{flattened:?}");
    assert_eq!(
        flattened.method,
        berth_client::CopyMethod::Copy,
        "{flattened:?}"
    );
    assert!(flattened.bytes_done > 1_000_000, "{flattened:?}");
    until_ready(&api, &domain, &third.snapshot_id);
    let now = running(&api, &domain, "db@main");
    assert_eq!(lowers(&now), 2, "{now}");
    assert_eq!(
        sql(&api, &domain, "db@main", "SELECT count(*) FROM t"),
        "1002"
    );
    sql(
        &api,
        &domain,
        "db@main",
        "INSERT INTO t VALUES (1003, 'after')",
    );

    // Every snapshot still holds what it held: a branch of the second, a restore of the first.
    copy_of(&api, &domain, "branch", "db@second", || {
        branch_into(
            &api,
            &domain,
            "db@second",
            BranchFrom::Snapshot(second.snapshot_id.clone()),
            &pg_spec("second"),
        )
    });
    running(&api, &domain, "db@second");
    assert_eq!(
        sql(&api, &domain, "db@second", "SELECT count(*) FROM t"),
        "1001"
    );
    restore_on_layers(&api, &domain, "db@main", &first.snapshot_id, "1000");
}

#[test]
fn a_daemon_killed_while_it_flattens_converges_on_two_layers_with_nothing_half_made() {
    let mut daemon = Daemon::start_with(&["--layers-flatten-at", "2"]);
    let api = daemon.client();
    let domain = api.create_domain("flatten-kill");
    let domain_id = support::domain_id(&domain);
    let main = up_running(&api, &domain, "db@main", &pg_spec("main"));
    assert_eq!(main["state"]["kind"], "running", "{main}");
    fill(&api, &domain, "db@main", 2_000);
    stopped_snapshot(&api, &domain, "db@main", "first");
    sql(
        &api,
        &domain,
        "db@main",
        "INSERT INTO t VALUES (2001, 'second')",
    );
    // The second snapshot reaches the limit; killed as soon as the flatten is under way.
    let mut events = Box::pin(api.api().events(&domain_id, None));
    block_on(async { tokio::time::timeout(COPY, events.next()).await })
        .expect("the stream opens")
        .expect("an event")
        .expect("an event");
    stop(&api, &domain, "db@main");
    block_on(api.api().snapshot(&domain_id, "db@main", "second")).expect("a snapshot");
    let flatten = block_on(async {
        loop {
            let event = tokio::time::timeout(COPY, events.next())
                .await
                .expect("a flatten in time")
                .expect("the stream goes on")
                .expect("an event");
            if let berth_client::DomainEvent::Copy { copy, .. } = event
                && copy.kind == berth_client::CopyKind::Flatten
            {
                return copy.copy_id;
            }
        }
    });
    daemon.kill9();

    daemon.start_again();
    let api = daemon.client();
    let copy_label = format!("label=berth.copy={flatten}");
    // The redo ends with the instance on the flatten's volumes (named with its tag).
    let tag = format!(".c{}", &flatten.as_str()[4..12]);
    wait_until(COPY, "the flatten's redo switches the instance", || {
        api.instance(&domain, "db@main")["volumes"][0]["dockerName"]
            .as_str()
            .is_some_and(|v| v.ends_with(&tag))
    });
    block_on(api.api().start(&domain_id, "db@main")).expect("a start");
    let main = api.settled(&domain, "db@main", &["running", "failed"], COPY);
    assert_eq!(main["state"]["kind"], "running", "{main}");
    let mounted = main["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned();
    let o = volume_options(&mounted)["o"].as_str().unwrap().to_owned();
    let lowerdir = o
        .split(',')
        .find_map(|p| p.strip_prefix("lowerdir="))
        .unwrap();
    assert_eq!(lowerdir.split(':').count(), 2, "{o}");
    assert_eq!(
        sql(&api, &domain, "db@main", "SELECT count(*) FROM t"),
        "2001"
    );
    // What the flatten made: the flat volume, the instance's overlay and its upper; no
    // scratch reader is left.
    let made = docker(&["volume", "ls", "-q", "--filter", &copy_label]);
    let mut made: Vec<&str> = made.lines().collect();
    made.sort_unstable();
    assert_eq!(made.len(), 3, "{made:?}");
    assert!(made.iter().all(|v| !v.contains("-r0")), "{made:?}");
    assert!(made.contains(&mounted.as_str()), "{made:?}");
}
