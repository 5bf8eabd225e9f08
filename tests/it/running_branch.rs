//! A snapshot or a branch of a running instance that stands on layers leaves it running: its
//! upper layers are copied under a short freeze, its open connections and a query in flight
//! survive, and the branch has the data. An upper layer that cannot be copied faithfully (a
//! directory removed and made again over a lower one) falls back to a move, and the branch
//! never shows what was deleted.

use berth_testkit as support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use super::faults::EngineEvents;
use berth_client::{BranchFrom, CopyMethod, CopyState, UpCause};
use serde_json::{Value, json};
use support::{Client, Daemon, block_on, busybox_image, docker};

const COPY: Duration = Duration::from_secs(240);

use super::branching::{copy_of, exec_ok, running, sql};

/// branching's Postgres with `syncfs` recovery, as berth's preset runs it: a branch of a
/// running source is a crash image.
fn pg_spec(worktree: &str) -> Value {
    let mut spec = super::branching::pg_spec(worktree);
    spec["command"] = json!(["postgres", "-c", "recovery_init_sync_method=syncfs"]);
    spec
}

fn files_spec(worktree: &str) -> Value {
    super::branching::files_spec(&busybox_image(), worktree)
}

/// The source after a branch: never stopped (the same start), not left frozen.
fn untouched(api: &Client, domain: &str, key: &str, before: &Value) -> Value {
    let now = running(api, domain, key);
    assert_eq!(
        now["startedAt"], before["startedAt"],
        "{key} was never stopped"
    );
    let paused = docker(&[
        "inspect",
        "--format",
        "{{.State.Paused}}",
        &support::container_of(&now),
    ]);
    assert_eq!(paused.trim(), "false", "{key} is thawed");
    now
}

fn snapshot(api: &Client, domain: &str, key: &str, name: &str) -> berth_client::SnapshotView {
    let domain_id = support::domain_id(domain);
    let (_, copy) = copy_of(api, domain, "snapshot", key, || {
        block_on(api.api().snapshot(&domain_id, key, name)).expect("a snapshot")
    });
    assert_eq!(copy.state, CopyState::Done, "{copy:?}");
    let snapshot = block_on(api.api().snapshot_by_id(
        &domain_id,
        copy.snapshot_id.as_ref().expect("the copy's snapshot"),
    ))
    .expect("the snapshot");
    assert_eq!(snapshot.state.as_str(), "ready", "{snapshot:?}");
    snapshot
}

fn branch(
    api: &Client,
    domain: &str,
    key: &str,
    from: &str,
    spec: &Value,
) -> berth_client::CopyEvent {
    let domain_id = support::domain_id(domain);
    let from = BranchFrom::Instance(from.into());
    let (_, copy) = copy_of(api, domain, "branch", key, || {
        api.call(|c| c.branch(&domain_id, key, &from, spec, UpCause::Person))
            .unwrap_or_else(|e| panic!("a branch into {key}: {e}"))
    });
    assert_eq!(copy.state, CopyState::Done, "{copy:?}");
    copy
}

/// A psql session inside an instance's container, held open: queries go in one at a time and
/// each one's rows come back as lines.
struct Session {
    child: Child,
    input: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Session {
    fn open(container: &str) -> Self {
        let mut child = Command::new("docker")
            .args([
                "exec",
                "-i",
                container,
                "psql",
                "-X",
                "-v",
                "ON_ERROR_STOP=1",
                "-tAq",
                "-d",
                "postgres",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("docker exec psql");
        let input = child.stdin.take().expect("stdin");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            input,
            lines,
        }
    }

    /// Sends `query` (a statement ending with `;`) without waiting for its answer.
    fn send(&mut self, query: &str) {
        writeln!(self.input, "{query}").expect("psql takes the query");
        self.input.flush().expect("psql takes the query");
    }

    /// The next line psql prints.
    fn line(&self) -> String {
        self.lines
            .recv_timeout(COPY)
            .expect("psql answers while its connection is open")
    }

    fn ask(&mut self, query: &str) -> String {
        self.send(query);
        self.line()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = writeln!(self.input, "\\q");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn helpers_left(daemon_prefix: &str) -> Vec<String> {
    docker(&[
        "ps",
        "-a",
        "--format",
        "{{.Names}}",
        "--filter",
        "label=berth.copy",
    ])
    .lines()
    .filter(|n| n.starts_with(daemon_prefix) && !n.ends_with(".held"))
    .map(str::to_owned)
    .collect()
}

#[test]
fn a_branch_of_a_running_postgres_on_layers_keeps_its_connections_and_a_query_in_flight() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("running-branch");
    api.up(&domain, "db@main", &pg_spec("main"), "person")
        .expect(200);
    running(&api, &domain, "db@main");
    sql(
        &api,
        &domain,
        "db@main",
        "CREATE TABLE t (id int PRIMARY KEY, body text); \
         INSERT INTO t SELECT g, repeat(md5(g::text), 10) FROM generate_series(1, 20000) g",
    );
    // Its first snapshot moves it onto layers (a stop and a start: its volume was plain).
    let first = snapshot(&api, &domain, "db@main", "base");
    assert!(first.source_paused_ms.is_some(), "{first:?}");
    let main = running(&api, &domain, "db@main");
    sql(
        &api,
        &domain,
        "db@main",
        "INSERT INTO t VALUES (-1, 'after the move')",
    );

    // Two sessions held open: one holds an advisory lock, the other waits for it in a query
    // that runs across the branch.
    let container = support::container_of(&main);
    let mut holder = Session::open(&container);
    let mut waiter = Session::open(&container);
    holder.ask("SELECT pg_advisory_lock(52);");
    let before = waiter.ask("SELECT pg_backend_pid() || ' ' || pg_postmaster_start_time();");
    holder.ask("BEGIN; INSERT INTO t VALUES (-2, 'not committed') RETURNING id;");
    waiter.send("SELECT 'got' FROM (SELECT pg_advisory_lock(52)) l;");

    // The branch copies main's upper layer under a freeze: main is not stopped.
    let copy = branch(&api, &domain, "db@fix", "db@main", &pg_spec("fix"));
    assert_eq!(copy.method, CopyMethod::Overlay, "{copy:?}");
    assert_eq!(copy.bytes_done, 0, "{copy:?}");

    // The query in flight finishes once the lock is let go, on the same connection, in the
    // same server.
    holder.ask("COMMIT; SELECT pg_advisory_unlock(52);");
    assert_eq!(waiter.line(), "got");
    let after = waiter.ask("SELECT pg_backend_pid() || ' ' || pg_postmaster_start_time();");
    assert_eq!(before, after, "the same backend of the same postmaster");
    let main_after = running(&api, &domain, "db@main");
    assert_eq!(
        main_after["startedAt"], main["startedAt"],
        "main never restarted"
    );
    assert_eq!(
        main_after["volumes"], main["volumes"],
        "main runs on the volumes it had"
    );

    // The branch has every committed row up to the freeze and not the uncommitted one (it
    // recovered from a crash image), and its writes stay apart.
    running(&api, &domain, "db@fix");
    assert_eq!(
        sql(&api, &domain, "db@fix", "SELECT count(*) FROM t"),
        "20001"
    );
    sql(&api, &domain, "db@fix", "INSERT INTO t VALUES (-3, 'fix')");
    assert_eq!(
        sql(
            &api,
            &domain,
            "db@main",
            "SELECT count(*) FROM t WHERE id = -3"
        ),
        "0"
    );
    assert_eq!(
        sql(&api, &domain, "db@main", "SELECT count(*) FROM t"),
        "20002"
    );

    // A snapshot of running main goes the same way and records the freeze.
    let frozen = snapshot(&api, &domain, "db@main", "frozen");
    let paused = frozen.source_paused_ms.expect("the freeze is recorded");
    assert!(paused >= 0, "{frozen:?}");
    assert_eq!(
        running(&api, &domain, "db@main")["startedAt"],
        main["startedAt"],
        "main never restarted"
    );
    assert_eq!(
        waiter.ask("SELECT pg_backend_pid() || ' ' || pg_postmaster_start_time();"),
        before
    );
    assert!(
        helpers_left(&daemon.prefix).is_empty(),
        "{:?}",
        helpers_left(&daemon.prefix)
    );
}

#[test]
fn a_directory_made_again_over_a_lower_one_falls_back_to_a_move_and_deleted_files_stay_deleted() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("opaque");
    let mount = support::SPEC_MOUNT;
    api.up(&domain, "files@main", &files_spec("main"), "person")
        .expect(200);
    running(&api, &domain, "files@main");
    exec_ok(
        &api,
        &domain,
        "files@main",
        &[
            "sh",
            "-c",
            &format!("mkdir {mount}/d && echo old > {mount}/d/old && echo gone > {mount}/gone"),
        ],
    );
    snapshot(&api, &domain, "files@main", "base");
    let moved = running(&api, &domain, "files@main");

    // A file removed (a whiteout in the upper layer): copied as it is, without a stop.
    exec_ok(
        &api,
        &domain,
        "files@main",
        &["rm", &format!("{mount}/gone")],
    );
    branch(&api, &domain, "files@one", "files@main", &files_spec("one"));
    let still = running(&api, &domain, "files@main");
    assert_eq!(
        still["startedAt"], moved["startedAt"],
        "no stop for a whiteout"
    );
    running(&api, &domain, "files@one");
    assert_eq!(
        exec_ok(
            &api,
            &domain,
            "files@one",
            &["sh", "-c", &format!("ls {mount}")]
        ),
        "d"
    );

    // A directory removed and made again: overlayfs marks it opaque in an attribute no helper
    // reads, so the copy is found to differ, and main moves onto layers with a stop instead.
    exec_ok(
        &api,
        &domain,
        "files@main",
        &[
            "sh",
            "-c",
            &format!("rm -rf {mount}/d && mkdir {mount}/d && echo new > {mount}/d/new"),
        ],
    );
    branch(&api, &domain, "files@two", "files@main", &files_spec("two"));
    let after = running(&api, &domain, "files@main");
    assert_ne!(
        after["startedAt"], moved["startedAt"],
        "it moved, with a stop"
    );
    running(&api, &domain, "files@two");
    assert_eq!(
        exec_ok(&api, &domain, "files@two", &["ls", &format!("{mount}/d")]),
        "new",
        "the deleted file stays deleted"
    );
    assert!(
        helpers_left(&daemon.prefix).is_empty(),
        "{:?}",
        helpers_left(&daemon.prefix)
    );
}

#[test]
fn a_daemon_killed_as_it_copies_a_running_source_s_upper_layer_converges_with_the_source_thawed_and_nothing_half_made()
 {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("running-kill");
    let domain_id = support::domain_id(&domain);
    let mount = support::SPEC_MOUNT;
    api.up(&domain, "files@main", &files_spec("main"), "person")
        .expect(200);
    running(&api, &domain, "files@main");
    exec_ok(
        &api,
        &domain,
        "files@main",
        &["sh", "-c", &format!("echo lower > {mount}/lower")],
    );
    snapshot(&api, &domain, "files@main", "base");
    let main = running(&api, &domain, "files@main");
    exec_ok(
        &api,
        &domain,
        "files@main",
        &["sh", "-c", &format!("echo upper > {mount}/upper")],
    );

    // Killed the moment the branch is accepted: its copies are being made, or main is frozen,
    // or the copies are being checked.
    let from = BranchFrom::Instance("files@main".into());
    let spec = files_spec("fix");
    let branch = api
        .call(|c| c.branch(&domain_id, "files@fix", &from, &spec, UpCause::Person))
        .expect("a branch");
    daemon.kill9();

    daemon.start_again();
    let api = daemon.client();
    running(&api, &domain, "files@fix");
    let now = untouched(&api, &domain, "files@main", &main);
    assert_eq!(now["volumes"], main["volumes"], "main runs on its volumes");
    assert_eq!(
        exec_ok(
            &api,
            &domain,
            "files@fix",
            &["sh", "-c", &format!("cat {mount}/lower {mount}/upper")]
        ),
        "lower\nupper"
    );
    // Exactly what the branch stands on: the copy of main's upper layer and the branch's own
    // overlay, each with its upper volume; no helper is left.
    let volumes = docker(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=berth.instance={}", branch.resource_instance_id),
    ]);
    let mut volumes: Vec<&str> = volumes.lines().collect();
    volumes.sort_unstable();
    assert_eq!(volumes.len(), 4, "{volumes:?}");
    assert_eq!(
        volumes.iter().filter(|v| v.contains("-frz-")).count(),
        2,
        "{volumes:?}"
    );
    assert!(
        helpers_left(&daemon.prefix).is_empty(),
        "{:?}",
        helpers_left(&daemon.prefix)
    );
}

#[test]
fn a_daemon_killed_while_its_running_source_is_frozen_for_the_copy_converges_with_it_thawed() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("running-frozen-kill");
    let domain_id = support::domain_id(&domain);
    let mount = support::SPEC_MOUNT;
    api.up(&domain, "files@main", &files_spec("main"), "person")
        .expect(200);
    running(&api, &domain, "files@main");
    snapshot(&api, &domain, "files@main", "base");
    let main = running(&api, &domain, "files@main");
    // 150 MB written since the move: its copy holds the freeze long enough to be killed in.
    exec_ok(
        &api,
        &domain,
        "files@main",
        &[
            "sh",
            "-c",
            &format!("dd if=/dev/urandom of={mount}/big bs=1M count=150 2>/dev/null"),
        ],
    );
    let sum = exec_ok(
        &api,
        &domain,
        "files@main",
        &["md5sum", &format!("{mount}/big")],
    );

    let events = EngineEvents::watch(&daemon.prefix);
    let from = BranchFrom::Instance("files@main".into());
    let spec = files_spec("fix");
    api.call(|c| c.branch(&domain_id, "files@fix", &from, &spec, UpCause::Person))
        .expect("a branch");
    // The engine says the source is paused: the copy runs under the freeze now.
    let mut seen = 0;
    while events.count(&["pause"]) == 0 {
        let new = events.wait_past(seen, COPY);
        assert!(!new.is_empty(), "no pause of the source in time");
        seen += new.len();
    }
    daemon.kill9();

    daemon.start_again();
    let api = daemon.client();
    running(&api, &domain, "files@fix");
    untouched(&api, &domain, "files@main", &main);
    assert_eq!(
        exec_ok(
            &api,
            &domain,
            "files@fix",
            &["md5sum", &format!("{mount}/big")]
        ),
        sum
    );
    assert!(
        helpers_left(&daemon.prefix).is_empty(),
        "{:?}",
        helpers_left(&daemon.prefix)
    );
}
