//! Real services end to end: the postgres and redis fixtures (Debian's PostgreSQL 15 and Redis,
//! see docs/testing.md) run by berth, one database per worktree and a shared cache, data that
//! survives everything short of a person deleting the volume, dumps streamed through exec, and
//! a ready check that waits out initdb.

use berth_testkit as support;

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Daemon, docker, domain_id, fixture};

/// Long enough for a first start: pulling the image, initdb, and the server's start.
const READY: Duration = Duration::from_secs(150);
const PASSWORD: &str = "dev-secret";

fn postgres_image() -> String {
    fixture("BERTH_TEST_POSTGRES_IMAGE")
}

fn redis_image() -> String {
    fixture("BERTH_TEST_REDIS_IMAGE")
}

/// A Postgres for `worktree` under `alias`, ready when `pg_isready` answers over TCP.
fn pg_spec(alias: &str, worktree: Option<&str>) -> Value {
    json!({
        "alias": alias,
        "worktreeKey": worktree,
        "image": postgres_image(),
        "command": null,
        "env": {"POSTGRES_PASSWORD": PASSWORD},
        "volumes": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}],
        "limits": {"cpuMillicores": 1000, "memoryBytes": 536_870_912},
        "ready": {"kind": "exec", "argv": ["pg_isready", "-h", "127.0.0.1", "-U", "postgres"], "user": null},
        "idleStopAfterSeconds": 3600
    })
}

/// A shared Redis under `alias`, ready when 6379 accepts connections.
fn redis_spec(alias: &str) -> Value {
    json!({
        "alias": alias,
        "worktreeKey": null,
        "image": redis_image(),
        "command": null,
        "env": {},
        "volumes": [{"name": "data", "mountPath": "/data"}],
        "limits": {"cpuMillicores": 500, "memoryBytes": 134_217_728},
        "ready": {"kind": "tcp", "port": 6379},
        "idleStopAfterSeconds": 3600
    })
}

/// Runs SQL in instance `key` through the exec route, as the image's user over the Unix
/// socket, and returns psql's unaligned output, trimmed.
fn sql(api: &Client, domain: &str, key: &str, database: &str, query: &str) -> String {
    let result = api
        .exec(
            domain,
            key,
            &[
                "psql",
                "-v",
                "ON_ERROR_STOP=1",
                "-tAq",
                "-d",
                database,
                "-c",
                query,
            ],
            None,
            60_000,
            b"",
        )
        .expect(200);
    assert_eq!(result["exitCode"], 0, "{query}: {result}");
    result["stdout"].as_str().unwrap().trim().to_owned()
}

/// The label by which a container consents to be an executor of the caller's workspace `ws`.
fn consent(api: &Client, ws: &str) -> String {
    let me = api.call(|c| c.whoami()).expect("whoami");
    format!("berth.workspace={}/{ws}", me.key_id)
}

/// A plain container (not berth's) of `image` that sleeps, named under the daemon's prefix so
/// it goes with the daemon, consenting to be an executor of `api`'s workspace `ws`: the
/// postgres image has psql, the redis image redis-cli.
fn workspace_container(daemon: &Daemon, api: &Client, ws: &str, name: &str, image: &str) -> String {
    let full = format!("{}-{name}", daemon.prefix);
    docker(&[
        "run",
        "-d",
        "--name",
        &full,
        "--label",
        &consent(api, ws),
        "-e",
        &format!("PGPASSWORD={PASSWORD}"),
        image,
        "sleep",
        "3600",
    ]);
    full
}

/// `docker exec container argv...`: its exit status and stdout (trimmed), stderr appended
/// on failure.
fn docker_exec(container: &str, argv: &[&str]) -> (bool, String) {
    let out = Command::new("docker")
        .arg("exec")
        .arg(container)
        .args(argv)
        .output()
        .expect("docker exec runs");
    let mut text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() {
        text.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    (out.status.success(), text)
}

/// `psql -h host` with the password from inside `container`.
fn psql_over_tcp(container: &str, host: &str, query: &str) -> (bool, String) {
    docker_exec(
        container,
        &[
            "psql",
            "-h",
            host,
            "-U",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-tAq",
            "-c",
            query,
        ],
    )
}

/// Retries `f` until it holds or `timeout` passes: for what psql and the engine say, which berth
/// has no event for.
fn eventually(what: &str, timeout: Duration, mut f: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(()) => return,
            Err(e) if Instant::now() > deadline => {
                panic!("{what} did not happen within {timeout:?}: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

fn put_workspace(api: &Client, id: &str, containers: &[&str]) {
    let request = berth_client::WorkspaceRequest {
        containers: containers
            .iter()
            .map(|c| berth_client::ContainerRef((*c).to_owned()))
            .collect(),
        selector: None,
    };
    api.call(|c| c.put_workspace(id, &request))
        .expect("a workspace");
}

fn link(api: &Client, domain: &str, workspace: &str, key: &str) {
    let domain = domain_id(domain);
    api.call(|c| c.link(&domain, workspace, key))
        .expect("a link");
}

/// The id of the one container berth runs for the daemon (the daemon's other containers are
/// named `<prefix>-ws...` or `<prefix>-inspect`, and are not berth's; the holders of its
/// volumes carry no instance label).
fn berth_container_id(daemon: &Daemon) -> String {
    let ids = docker(&[
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        &format!("label=berth.prefix={}", daemon.prefix),
        "--filter",
        "label=berth.instance",
    ]);
    let ids: Vec<&str> = ids.lines().collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    ids[0].to_owned()
}

fn container_logs(container: &str) -> String {
    let out = Command::new("docker")
        .args(["logs", container])
        .output()
        .expect("docker logs runs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn each_worktree_has_its_own_database_and_every_worktree_shares_the_cache() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    // One with the exec ready check, one with tcp: neither is running before the server
    // listens on TCP.
    let mut k2 = pg_spec("db", Some("k2"));
    k2["ready"] = json!({"kind": "tcp", "port": 5432});
    api.up(&domain, "db@k1", &pg_spec("db", Some("k1")), "use")
        .expect(200);
    api.up(&domain, "db@k2", &k2, "use").expect(200);
    api.up(&domain, "cache", &redis_spec("cache"), "use")
        .expect(200);
    for key in ["db@k1", "db@k2", "cache"] {
        api.wait_state(&domain, key, "running", READY);
    }
    // Each worktree's workspace has two containers: one with psql, one with redis-cli.
    let one = workspace_container(&daemon, &api, "ws-k1", "ws-k1", &postgres_image());
    let two = workspace_container(&daemon, &api, "ws-k2", "ws-k2", &postgres_image());
    let one_cli = workspace_container(&daemon, &api, "ws-k1", "ws-k1-cli", &redis_image());
    let two_cli = workspace_container(&daemon, &api, "ws-k2", "ws-k2-cli", &redis_image());
    put_workspace(&api, "ws-k1", &[&one, &one_cli]);
    put_workspace(&api, "ws-k2", &[&two, &two_cli]);
    link(&api, &domain, "ws-k1", "k1");
    link(&api, &domain, "ws-k2", "k2");

    for (container, row) in [(&one, "written from k1"), (&two, "written from k2")] {
        eventually(&format!("{container} writes through db"), READY, || {
            let (ok, out) = psql_over_tcp(
                container,
                "db",
                &format!(
                    "CREATE TABLE IF NOT EXISTS notes (body text); INSERT INTO notes VALUES ('{row}')"
                ),
            );
            if ok { Ok(()) } else { Err(out) }
        });
    }
    assert_eq!(
        psql_over_tcp(&one, "db", "SELECT body FROM notes"),
        (true, "written from k1".to_owned())
    );
    assert_eq!(
        psql_over_tcp(&two, "db", "SELECT body FROM notes"),
        (true, "written from k2".to_owned())
    );
    // The password is checked over TCP.
    let (ok, out) = docker_exec(
        &one,
        &[
            "env",
            "PGPASSWORD=wrong",
            "psql",
            "-h",
            "db",
            "-U",
            "postgres",
            "-c",
            "SELECT 1",
        ],
    );
    assert!(
        !ok && out.contains("password authentication failed"),
        "{out}"
    );

    // Both reach the one cache, and see each other's keys there.
    for container in [&one_cli, &two_cli] {
        eventually(
            &format!("{container} reaches cache"),
            READY,
            || match docker_exec(container, &["redis-cli", "-h", "cache", "ping"]) {
                (true, out) if out == "PONG" => Ok(()),
                (_, out) => Err(out),
            },
        );
    }
    assert_eq!(
        docker_exec(
            &one_cli,
            &["redis-cli", "-h", "cache", "set", "greeting", "from k1"]
        ),
        (true, "OK".to_owned())
    );
    assert_eq!(
        docker_exec(&two_cli, &["redis-cli", "-h", "cache", "get", "greeting"]),
        (true, "from k1".to_owned())
    );
}

#[test]
fn rows_survive_stop_idle_a_spec_change_a_daemon_crash_and_archive() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("safe");
    let base = pg_spec("db", None);
    api.up(&domain, "db", &base, "use").expect(200);
    api.wait_state(&domain, "db", "running", READY);
    sql(
        &api,
        &domain,
        "db",
        "postgres",
        "CREATE TABLE notes (n int); INSERT INTO notes VALUES (1)",
    );
    let count = |api: &Client| sql(api, &domain, "db", "postgres", "SELECT count(*) FROM notes");
    let insert = |api: &Client, n: u32| {
        sql(
            api,
            &domain,
            "db",
            "postgres",
            &format!("INSERT INTO notes VALUES ({n})"),
        );
    };

    // A person's stop, and a start.
    let did = domain_id(&domain);
    api.call(|c| c.stop(&did, "db", "Ada")).expect("a stop");
    api.wait_state(&domain, "db", "stopped", READY);
    api.up(&domain, "db", &base, "person").expect(200);
    api.wait_state(&domain, "db", "running", READY);
    assert_eq!(count(&api), "1");
    insert(&api, 2);

    // A spec change (a new variable) replaces the container and keeps the volume.
    let before = berth_container_id(&daemon);
    let since = api.instance(&domain, "db")["state"]["since"].clone();
    let mut changed = base.clone();
    changed["env"]["APP_MODE"] = json!("changed");
    api.up(&domain, "db", &changed, "use").expect(200);
    api.wait_for(&domain, "db", READY, "running the new spec", |i| {
        i["state"]["kind"] == "running" && i["state"]["since"] != since
    });
    assert_ne!(
        berth_container_id(&daemon),
        before,
        "the container was replaced"
    );
    assert_eq!(
        sql(
            &api,
            &domain,
            "db",
            "postgres",
            "SELECT current_setting('server_version_num')::int / 10000"
        ),
        "15"
    );
    assert_eq!(count(&api), "2");
    insert(&api, 3);

    // Idle: nothing reaches it, so it stops; a use up wakes it. A lease taken before the wake
    // keeps it reached while the rows are counted.
    let mut idle = changed.clone();
    idle["idleStopAfterSeconds"] = json!(3);
    api.up(&domain, "db", &idle, "use").expect(200);
    let stopped = api.wait_for(&domain, "db", READY, "stopped for idle", |i| {
        i["state"]["kind"] == "stopped"
    });
    assert_eq!(stopped["stopReason"], json!({"kind": "idle"}));
    put_workspace(&api, "ws", &[]);
    api.call(|c| c.create_lease("ws", 600)).expect("a lease");
    link(&api, &domain, "ws", "k1");
    api.up(&domain, "db", &idle, "use").expect(200);
    api.wait_state(&domain, "db", "running", READY);
    assert_eq!(count(&api), "3");
    insert(&api, 4);

    // The daemon is killed; its container runs on, is adopted when the daemon comes back, and
    // the data is all there.
    let running = berth_container_id(&daemon);
    daemon.kill9();
    daemon.start_again();
    let api = daemon.client();
    api.wait_state(&domain, "db", "running", READY);
    assert_eq!(
        berth_container_id(&daemon),
        running,
        "adopted, not replaced"
    );
    assert_eq!(count(&api), "4");

    // Archive: the container goes, the volume stays with the database in it, which a new
    // server reads back.
    let archived = api.answer(|c| c.archive(&did, "db")).expect(200);
    assert_eq!(archived["instance"]["state"]["kind"], "archived");
    let volume = &archived["volumes"][0];
    assert_eq!(volume["name"], "data", "{archived}");
    assert!(
        volume["bytes"].as_i64().is_some_and(|b| b > 20_000_000),
        "a whole cluster is measured: {archived}"
    );
    let volume = volume["dockerName"].as_str().unwrap();
    let inspect = format!("{}-inspect", daemon.prefix);
    let rows = docker(&[
        "run",
        "--rm",
        "--name",
        &inspect,
        "--mount",
        &format!("type=volume,src={volume},dst=/var/lib/postgresql/data"),
        &postgres_image(),
        "sh",
        "-c",
        "test -s \"$PGDATA/PG_VERSION\" && pg_ctl -w -s -o \"-c listen_addresses=''\" start >/dev/null \
         && psql -tAq -c \"SELECT string_agg(n::text, ',' ORDER BY n) FROM notes\" \
         && pg_ctl -w -s -m fast stop >/dev/null",
    ]);
    assert_eq!(rows, "1,2,3,4");
}

/// The frame line, then a SQL script that creates `big` and copies `ROWS` rows into it, made
/// as it is read.
struct SqlDump {
    head: Vec<u8>,
    next: u64,
    tail: Option<Vec<u8>>,
}

const ROWS: u64 = 480_000;
const PAYLOAD: usize = 100;

impl SqlDump {
    fn new() -> Self {
        let mut head = Vec::new();
        head.extend_from_slice(
            b"CREATE TABLE big (id integer PRIMARY KEY, payload text NOT NULL);\n\
              COPY big (id, payload) FROM stdin;\n",
        );
        SqlDump {
            head,
            next: 1,
            tail: Some(b"\\.\n".to_vec()),
        }
    }
}

impl Read for SqlDump {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.head.len() < buf.len() && self.next <= ROWS {
            let i = self.next;
            let line = format!(
                "{i}\t{:0>PAYLOAD$}\n",
                i.wrapping_mul(2_654_435_761) % 1_000_000_007
            );
            self.head.extend_from_slice(line.as_bytes());
            self.next += 1;
        }
        if self.next > ROWS
            && let Some(tail) = self.tail.take()
        {
            self.head.extend_from_slice(&tail);
        }
        let n = self.head.len().min(buf.len());
        buf[..n].copy_from_slice(&self.head[..n]);
        self.head.drain(..n);
        Ok(n)
    }
}

#[test]
fn a_fifty_megabyte_dump_streams_into_psql_and_pg_dump_brings_it_back() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("dump");
    api.up(&domain, "db", &pg_spec("db", None), "use")
        .expect(200);
    api.wait_state(&domain, "db", "running", READY);

    let frame = berth_client::ExecFrame {
        argv: ["psql", "-q", "-v", "ON_ERROR_STOP=1"]
            .map(str::to_owned)
            .to_vec(),
        user: None,
        timeout_ms: 600_000,
    };
    // stdin streamed as the dump is made, 64 KiB at a time.
    let stdin = futures_util::stream::unfold(SqlDump::new(), |mut dump| async move {
        let mut buf = vec![0u8; 64 * 1024];
        match dump.read(&mut buf) {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(bytes::Bytes::from(buf)), dump))
            }
            Err(e) => Some((Err(e), dump)),
        }
    });
    let did = domain_id(&domain);
    let started = Instant::now();
    let loaded = api
        .answer(|c| c.exec(&did, "db", &frame, stdin))
        .expect(200);
    eprintln!("loaded {ROWS} rows in {:?}", started.elapsed());
    assert_eq!(loaded["exitCode"], 0, "{loaded}");
    let expected = format!("{ROWS}|{}|{}", ROWS * (ROWS + 1) / 2, ROWS * PAYLOAD as u64);
    let summary = "SELECT count(*), sum(id), sum(length(payload)) FROM big";
    assert_eq!(sql(&api, &domain, "db", "postgres", summary), expected);

    // The dump is bigger than the 1 MiB that exec keeps, so it is measured where it is made.
    let size = api
        .exec(
            &domain,
            "db",
            &[
                "sh",
                "-c",
                "set -o pipefail; pg_dump -t big postgres | wc -c",
            ],
            None,
            300_000,
            b"",
        )
        .expect(200);
    assert_eq!(size["exitCode"], 0, "{size}");
    let bytes: u64 = size["stdout"].as_str().unwrap().trim().parse().unwrap();
    assert!(bytes > 50_000_000, "the dump has {bytes} bytes");

    // Round trip: the dump restored into another database holds the same rows.
    let restored = api
        .exec(
            &domain,
            "db",
            &[
                "sh",
                "-c",
                "set -o pipefail; createdb copy && pg_dump -t big postgres | psql -q -v ON_ERROR_STOP=1 -d copy",
            ],
            None,
            300_000,
            b"",
        )
        .expect(200);
    assert_eq!(restored["exitCode"], 0, "{restored}");
    assert_eq!(sql(&api, &domain, "db", "copy", summary), expected);
    let checksum = "SELECT md5(string_agg(id || ':' || payload, ',' ORDER BY id)) FROM big";
    assert_eq!(
        sql(&api, &domain, "db", "copy", checksum),
        sql(&api, &domain, "db", "postgres", checksum)
    );
}

#[test]
fn postgres_is_starting_through_initdb_and_running_once_it_accepts_tcp() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("ready");
    let mut spec = pg_spec("db", None);
    spec["env"]["POSTGRES_USER"] = json!("app");
    spec["env"]["POSTGRES_DB"] = json!("shop");
    api.up(&domain, "db", &spec, "use").expect(200);

    // initdb writes to the container's log, which berth has no event for: looked at until it
    // is under way (or its temporary server, on the Unix socket only, runs), and berth must
    // say starting all the while.
    support::wait_until(READY, "initdb under way while db is starting", || {
        let instance = api.instance(&domain, "db");
        match instance["state"]["kind"].as_str().unwrap() {
            "starting" => {}
            "not-started" => return false,
            other => panic!("unexpected state {other} before initdb was seen: {instance}"),
        }
        support::containers_named(&daemon.prefix)
            .first()
            .is_some_and(|container| {
                let logs = container_logs(container);
                logs.contains("The files belonging to this database system")
                    && !logs.contains("PostgreSQL init process complete")
            })
    });
    // Then running, and nothing else on the way, as berth reports each change.
    api.wait_for(&domain, "db", READY, "running", |instance| {
        let kind = instance["state"]["kind"].as_str().unwrap();
        assert!(
            ["starting", "running"].contains(&kind),
            "unexpected state {kind}: {instance}"
        );
        kind == "running"
    });
    let container = berth_container_id(&daemon);
    let logs = container_logs(&container);
    let init_done = logs
        .find("PostgreSQL init process complete")
        .expect("initdb finished before running");
    assert!(
        logs[init_done..].contains("listening on IPv4 address \"0.0.0.0\", port 5432"),
        "{logs}"
    );
    assert_eq!(
        docker_exec(&container, &["pg_isready", "-h", "127.0.0.1", "-q"]),
        (true, String::new())
    );
    // POSTGRES_USER and POSTGRES_DB made the superuser and its database, with the password.
    let (ok, out) = docker_exec(
        &container,
        &[
            "env",
            &format!("PGPASSWORD={PASSWORD}"),
            "psql",
            "-h",
            "127.0.0.1",
            "-U",
            "app",
            "-d",
            "shop",
            "-tAc",
            "SELECT current_user || '@' || current_database() || ' ' || (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)",
        ],
    );
    assert!(ok, "{out}");
    assert_eq!(out, "app@shop true");
    // The server runs as postgres (uid 999), not root, and only on the volume's data.
    let (_, uids) = docker_exec(
        &container,
        &["sh", "-c", "ps -o user,args | grep '[p]ostgres$'"],
    );
    assert!(uids.starts_with("postgres"), "{uids}");
    let (_, stat) = docker_exec(
        &container,
        &["stat", "-c", "%u %a", "/var/lib/postgresql/data"],
    );
    assert_eq!(stat, "999 700");
}
