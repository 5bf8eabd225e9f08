//! The `berth` CLI end to end: the real binary, in a real git repository with two worktrees,
//! against a real daemon and Docker. One domain per repository, one worktree-scoped instance
//! per worktree with its own volumes, one shared instance for both; exec with stdin, exit codes
//! and timeouts; stop, start and archive; project-file errors that name their line and field
//! and create nothing; no control codes off a terminal; and, in tmux, the progress display on a
//! terminal.

use berth_testkit as support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Daemon, KEY, busybox_image, domain_id};

/// The daemon's domains, through the typed client.
fn domains(api: &support::Client) -> Vec<berth_client::DomainView> {
    api.call(|c| c.domains()).expect("the domains")
}

/// The id of the first domain (the one a repository's `berth` made).
fn the_domain(api: &support::Client) -> String {
    domains(api)[0].resource_domain_id.to_string()
}

/// A git repository with a main worktree `shop` and a second worktree `shop-feature`.
pub(crate) struct Repo {
    _tmp: tempfile::TempDir,
    pub(crate) main: PathBuf,
    pub(crate) second: PathBuf,
}

pub(crate) fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A repository whose berth.toml is `toml`, committed, with a second worktree.
pub(crate) fn repo(toml: &str) -> Repo {
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let main = tmp.path().join("shop");
    std::fs::create_dir(&main).unwrap();
    git(&main, &["init", "-q"]);
    std::fs::write(main.join("berth.toml"), toml).unwrap();
    git(&main, &["add", "berth.toml"]);
    git(&main, &["commit", "-q", "-m", "services"]);
    let second = tmp.path().join("shop-feature");
    git(&main, &["worktree", "add", "-q", second.to_str().unwrap()]);
    Repo {
        main: main.canonicalize().unwrap(),
        second: second.canonicalize().unwrap(),
        _tmp: tmp,
    }
}

/// What a run of the CLI gave.
#[derive(Debug)]
pub(super) struct Run {
    pub(super) code: i32,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

impl Run {
    pub(super) fn ok(self) -> Run {
        assert_eq!(self.code, 0, "berth failed: {self:?}");
        self
    }

    pub(super) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

/// Runs `berth args...` in `dir` against `base`, with `stdin` (none: /dev/null). Asserts that
/// nothing it printed carries a control code: its output is never a terminal here.
fn berth_at(base: &str, dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .current_dir(dir)
        .env("BERTH_URL", base)
        .env("BERTH_SERVICE_KEYS", KEY)
        .env("USER", "tester")
        .env_remove("BERTH_DATA_DIR")
        .env_remove("NO_COLOR")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the berth binary starts");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        });
    }
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("berth ends");
    let run = Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    };
    assert!(
        !run.stdout.contains('\x1b') && !run.stderr.contains('\x1b'),
        "a control code off a terminal: {run:?}"
    );
    run
}

pub(super) fn berth(daemon: &Daemon, dir: &Path, args: &[&str]) -> Run {
    berth_at(&daemon.base, dir, args, None)
}

/// A worktree-scoped `db` with a volume and a shared `web`, both the fixture busybox (httpd on
/// 8080).
fn two_instances() -> String {
    let image = busybox_image();
    format!(
        r#"# The services this repository runs.
[instances.db]
image = "{image}"
scope = "worktree"
volumes = {{ data = "/srv/data" }}
ready = {{ tcp = 8080 }}
cpu = "250m"
memory = "64MiB"
idle-stop = "30m"
env = {{ GREETING = "hello" }}

[instances.db.connect]
DATABASE_URL = "http://{{host}}:{{port}}/db"

[instances.web]
image = "{image}"
scope = "shared"
alias = "www"
ready = {{ tcp = 8080 }}
cpu = "0.1"
memory = "32MiB"
"#
    )
}

fn by_key<'a>(items: &'a Value, key: &str) -> &'a Value {
    items
        .as_array()
        .expect("an array")
        .iter()
        .find(|i| i["key"] == key)
        .unwrap_or_else(|| panic!("no instance {key} in {items:#}"))
}

fn keys(items: &Value) -> Vec<String> {
    let mut keys: Vec<String> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    keys
}

/// The worktree part of the instance keys for `name` in `items`.
fn db_key(items: &Value, scope_of_this: &str) -> String {
    items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "db" && i["scope"] == scope_of_this)
        .and_then(|i| i["key"].as_str())
        .unwrap_or_else(|| panic!("no db in {items:#}"))
        .to_owned()
}

#[test]
fn each_worktree_gets_its_own_instance_and_both_share_one() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());

    let first = berth(&daemon, &repo.main, &["up", "--json"]).ok();
    let first_items = first.json();
    assert_eq!(first_items.as_array().unwrap().len(), 2, "{first_items:#}");
    for item in first_items.as_array().unwrap() {
        assert_eq!(item["state"]["kind"], "running", "{item:#}");
    }
    // Without a terminal, progress is plain lines on stderr.
    assert!(first.stderr.contains("db: running"), "{first:?}");

    let second = berth(&daemon, &repo.second, &["up"]).ok();
    assert!(second.stdout.starts_with("NAME"), "{second:?}");
    // The table ends with each instance's host endpoint.
    assert!(
        second
            .stdout
            .lines()
            .skip(1)
            .all(|l| l.contains(" 127.0.0.1:") && l.ends_with("->8080")),
        "{second:?}"
    );

    // One domain for the repository; three instances: a db per worktree and one shared web.
    let api = daemon.client();
    assert_eq!(domains(&api).len(), 1, "{:#?}", domains(&api));
    let domain = the_domain(&api);

    let from_main = berth(&daemon, &repo.main, &["ps", "--json"]).ok().json();
    let from_second = berth(&daemon, &repo.second, &["ps", "--json"]).ok().json();
    assert_eq!(keys(&from_main), keys(&from_second));
    assert_eq!(from_main.as_array().unwrap().len(), 3, "{from_main:#}");
    let main_db = db_key(&from_main, "worktree");
    let second_db = db_key(&from_second, "worktree");
    assert_ne!(main_db, second_db);
    assert!(main_db.starts_with("db@shop-"), "{main_db}");
    assert!(second_db.starts_with("db@shop-feature-"), "{second_db}");
    let web = by_key(&from_main, "web");
    assert_eq!(web["scope"], "shared");
    assert_eq!(web["worktreeKey"], Value::Null);
    assert_eq!(web["alias"], "www");
    assert_eq!(
        web["resourceInstanceId"],
        by_key(&first_items, "web")["resourceInstanceId"],
        "the shared instance is made once"
    );
    let main_volume = &by_key(&from_main, &main_db)["volumes"][0]["dockerName"];
    let second_volume = &by_key(&from_main, &second_db)["volumes"][0]["dockerName"];
    assert_ne!(main_volume, second_volume);
    for item in from_main.as_array().unwrap() {
        assert_eq!(item["state"]["kind"], "running", "{item:#}");
    }

    // A file written in one worktree's db is not in the other's.
    berth(
        &daemon,
        &repo.main,
        &["exec", "db", "--", "sh", "-c", "echo A > /srv/data/f"],
    )
    .ok();
    let mine = berth(
        &daemon,
        &repo.main,
        &["exec", "db", "--", "cat", "/srv/data/f"],
    )
    .ok();
    assert_eq!(mine.stdout, "A\n");
    let theirs = berth(
        &daemon,
        &repo.second,
        &["exec", "db", "--", "cat", "/srv/data/f"],
    );
    assert_eq!(theirs.code, 1, "{theirs:?}");
    assert!(theirs.stderr.contains("No such file"), "{theirs:?}");
    assert_eq!(theirs.stdout, "");

    // Stdin passes through and the remote exit code becomes berth's.
    let piped = berth_at(
        &daemon.base,
        &repo.second,
        &["exec", "db", "--", "sh", "-c", "cat; exit 7"],
        Some(b"through the pipe\n"),
    );
    assert_eq!(piped.code, 7, "{piped:?}");
    assert_eq!(piped.stdout, "through the pipe\n");
    // A command that ends before reading all its stdin still gives its answer.
    let big = vec![b'x'; 32 * 1024 * 1024];
    let early = berth_at(
        &daemon.base,
        &repo.main,
        &["exec", "db", "--", "sh", "-c", "head -c 3; exit 3"],
        Some(&big),
    );
    assert_eq!(early.code, 3, "{}", early.stderr);
    assert_eq!(early.stdout, "xxx");
    let streamed = berth_at(
        &daemon.base,
        &repo.main,
        &["exec", "db", "--", "wc", "-c"],
        Some(&big),
    );
    assert_eq!(streamed.stdout.trim(), (32 * 1024 * 1024).to_string());
    let env = berth(
        &daemon,
        &repo.main,
        &["exec", "web", "--", "sh", "-c", "echo $GREETING-$HOSTNAME"],
    )
    .ok();
    assert!(env.stdout.starts_with('-'), "web has no GREETING: {env:?}");
    let env = berth(
        &daemon,
        &repo.main,
        &["exec", "db", "--", "sh", "-c", "echo $GREETING"],
    )
    .ok();
    assert_eq!(env.stdout, "hello\n");

    // A command past its timeout is killed, and berth exits 124 as timeout(1) does.
    let started = Instant::now();
    let slow = berth(
        &daemon,
        &repo.main,
        &["exec", "db", "--timeout", "1s", "--", "sleep", "30"],
    );
    assert_eq!(slow.code, 124, "{slow:?}");
    assert!(slow.stderr.contains("killed after 1s"), "{slow:?}");
    assert!(started.elapsed() < Duration::from_secs(25));

    // Up again changes nothing and answers at once.
    let again = berth(&daemon, &repo.main, &["up", "--json"]).ok().json();
    assert_eq!(
        by_key(&again, &main_db)["resourceInstanceId"],
        by_key(&from_main, &main_db)["resourceInstanceId"]
    );

    // `berth env` fills {host} and {port} with the alias and the ready port.
    let env = berth(&daemon, &repo.second, &["env"]).ok();
    let did = domain_id(&domain);
    let endpoints = api
        .call(|c| c.endpoints(&did, &second_db))
        .expect("the endpoints");
    let host_port = endpoints
        .iter()
        .find(|e| e.port == 8080)
        .map(|e| e.host_port)
        .unwrap_or_else(|| panic!("no endpoint for 8080: {endpoints:#?}"));
    assert_eq!(
        env.stdout,
        format!("export DATABASE_URL='http://127.0.0.1:{host_port}/db'\n")
    );
    let up_endpoints = &by_key(&first_items, &main_db)["endpoints"];
    assert_eq!(up_endpoints[0]["port"], 8080, "{first_items:#}");
    // And it reaches the worktree's db from the host.
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", host_port)).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut conn, &mut answer);
    assert!(answer.starts_with("HTTP/1."), "{answer:?}");
}

#[test]
fn stop_start_and_archive_do_what_they_say() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());
    let dir = &repo.main;
    berth(&daemon, dir, &["up", "db"]).ok();
    let items = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    assert_eq!(
        items.as_array().unwrap().len(),
        1,
        "only the named instance comes up: {items:#}"
    );
    let key = db_key(&items, "worktree");

    let stopped = berth(&daemon, dir, &["stop", "db"]).ok();
    assert!(stopped.stdout.contains("stopped by tester"), "{stopped:?}");
    let items = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    let db = by_key(&items, &key);
    assert_eq!(db["desired"], "stopped");
    assert_eq!(db["state"]["kind"], "stopped", "{db:#}");
    assert_eq!(
        db["state"]["reason"],
        serde_json::json!({"kind": "person", "by": "tester"})
    );
    let container =
        support::docker_inspect("container", &support::containers_named(&daemon.prefix)[0])
            .unwrap();
    assert_eq!(container["State"]["Running"], Value::Bool(false));

    berth(&daemon, dir, &["start", "db"]).ok();
    let items = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    assert_eq!(by_key(&items, &key)["state"]["kind"], "running");

    berth(
        &daemon,
        dir,
        &[
            "exec",
            "db",
            "--",
            "sh",
            "-c",
            "head -c 5000 /dev/zero > /srv/data/blob",
        ],
    )
    .ok();
    let archived = berth(&daemon, dir, &["archive", "db"]).ok();
    assert!(archived.stdout.contains("archived db"), "{archived:?}");
    assert!(archived.stdout.contains(".vol.data"), "{archived:?}");
    assert!(
        archived.stdout.contains("4.9 KiB"),
        "the kept volume is measured: {archived:?}"
    );
    let domain = the_domain(&daemon.client());
    let instance = daemon.client().instance(&domain, &key);
    assert_eq!(instance["state"]["kind"], "archived", "{instance:#}");
    assert!(
        berth(&daemon, dir, &["ps", "--json"])
            .ok()
            .json()
            .as_array()
            .unwrap()
            .is_empty()
    );
    let gone = berth(&daemon, dir, &["exec", "db", "--", "true"]);
    assert_eq!(gone.code, 1, "{gone:?}");
    assert!(
        gone.stderr.contains(&format!(
            "db has no live instance here: its last one, {key}, is archived"
        )),
        "{gone:?}"
    );

    // An archived key stays archived: the next up makes the next generation, with new volumes.
    let again = berth(&daemon, dir, &["up", "db", "--json"]).ok().json();
    assert_eq!(again[0]["key"], format!("{key}.2"));
    assert_eq!(again[0]["state"]["kind"], "running");
    let blob = berth(&daemon, dir, &["exec", "db", "--", "ls", "/srv/data"]).ok();
    assert_eq!(blob.stdout, "");
    let archived = berth(&daemon, dir, &["ps", "--archived", "--json"])
        .ok()
        .json();
    assert_eq!(keys(&archived), vec![key.clone()]);

    // Archive needs names; an unknown flag is a usage error.
    assert_eq!(berth(&daemon, dir, &["archive"]).code, 2);
    assert_eq!(berth(&daemon, dir, &["ps", "--bogus"]).code, 2);
}

#[test]
fn an_instance_that_cannot_start_fails_up_with_its_message() {
    let daemon = Daemon::start();
    let registry = support::fixture("BERTH_TEST_REGISTRY");
    let missing = format!(
        "{registry}/berth-fixtures/busybox@sha256:{}",
        "0".repeat(64)
    );
    let toml = format!(
        "[instances.db]\nimage = \"{missing}\"\nready = {{ tcp = 8080 }}\n\n[instances.web]\nimage = \"{}\"\nready = {{ tcp = 8080 }}\nmemory = \"32MiB\"\n",
        busybox_image()
    );
    let repo = repo(&toml);
    let run = berth(&daemon, &repo.main, &["up"]);
    assert_eq!(run.code, 1, "{run:?}");
    let failed = run
        .stderr
        .lines()
        .find(|l| l.starts_with("berth: db (db@shop-") && l.contains("failed to up: "))
        .unwrap_or_else(|| panic!("no failure line: {run:?}"));
    assert!(
        failed.len() > "berth: db () failed to up: ".len() + 30,
        "the daemon's message is there: {failed}"
    );
    // The other instance still came up, and the table shows both.
    let table: Vec<&str> = run.stdout.lines().collect();
    assert!(table[0].starts_with("NAME"), "{run:?}");
    assert!(
        table
            .iter()
            .any(|l| l.starts_with("db ") && l.contains(" failed ")),
        "{run:?}"
    );
    assert!(
        table
            .iter()
            .any(|l| l.starts_with("web ") && l.contains(" running ")),
        "{run:?}"
    );
}

#[test]
fn an_instance_that_exits_before_it_is_ready_fails_up_with_its_last_lines_and_berth_logs() {
    let daemon = Daemon::start();
    let toml = format!(
        "[instances.crash]\nimage = \"{}\"\ncommand = [\"sh\", \"-c\", \"echo first-words; echo last-words; exit 3\"]\nready = {{ tcp = 8080 }}\nmemory = \"32MiB\"\n",
        busybox_image()
    );
    let repo = repo(&toml);
    let run = berth(&daemon, &repo.main, &["up"]);
    assert_eq!(run.code, 1, "{run:?}");
    assert!(
        run.stderr
            .contains("its process exited with 3 before it was ready"),
        "{run:?}"
    );
    assert!(
        run.stderr.contains("  | first-words") && run.stderr.contains("  | last-words"),
        "its last lines: {run:?}"
    );
    assert!(
        run.stderr.contains("all of its output: berth logs crash"),
        "{run:?}"
    );
    assert!(!run.stderr.contains("docker logs"), "{run:?}");
}

#[test]
fn project_file_errors_name_their_line_and_field_and_create_nothing() {
    let daemon = Daemon::start();
    let image = busybox_image();
    let tag_only = format!(
        "{}/berth-fixtures/busybox:1.36",
        support::fixture("BERTH_TEST_REGISTRY")
    );
    let cases = [
        (
            format!(
                "[instances.db]\nimage = \"{image}\"\nready = {{ tcp = 8080 }}\ncolour = \"red\"\n"
            ),
            "berth.toml:4: instances.db.colour is not a field of an instance",
        ),
        (
            format!(
                "[instances.db]\nimage = \"{image}\"\nready = {{ tcp = 8080 }}\n\nidle-stop = \"soon\"\n"
            ),
            "berth.toml:5: instances.db.idle-stop must be a duration",
        ),
        (
            format!("[instances.db]\nimage = \"{tag_only}\"\nready = {{ tcp = 8080 }}\n"),
            "berth.toml:2: instances.db.image \"",
        ),
        (
            format!(
                "[instances.db]\nimage = \"{image}\"\nready = {{ tcp = 8080 }}\n\n[instances.db2]\nimage = \"{image}\"\nready = {{ tcp = 8080 }}\nalias = \"db\"\n"
            ),
            "berth.toml:8: instances.db2.alias \"db\" is already the alias of instances.db",
        ),
        (
            format!(
                "[instances.db]\nimage = \"{image}\"\nready = {{ tcp = 8080 }}\nmemory = \"lots\"\n"
            ),
            "berth.toml:4: instances.db.memory must be a size",
        ),
        (
            format!("[instances.db]\nimage = \"{image}\"\nready = {{ tcp = 8080 }}\npool = 0\n"),
            "berth.toml:4: instances.db.pool must be a whole number from 1 to 32",
        ),
        (
            format!(
                "[instances.db]\nimage = \"{image}\"\nready = {{ tcp = 8080 }}\nprivileged = true\n"
            ),
            "berth.toml:4: instances.db.privileged is refused: berth never runs an instance privileged",
        ),
    ];
    for (toml, expected) in &cases {
        let repo = repo(toml);
        let run = berth(&daemon, &repo.second, &["up"]);
        assert_eq!(run.code, 1, "{toml}\n{run:?}");
        assert!(
            run.stderr.lines().any(|l| l.starts_with(expected)),
            "expected {expected:?} in\n{}",
            run.stderr
        );
        assert!(
            run.stderr.contains("nothing was sent to the daemon"),
            "{run:?}"
        );
        assert_eq!(run.stdout, "");
    }
    let run = berth(&daemon, &repo(&cases[2].0).main, &["up"]);
    assert!(
        run.stderr.contains(":1.36\" is not pinned by digest"),
        "{run:?}"
    );

    // Nothing reached the daemon: no domain, no container.
    assert_eq!(domains(&daemon.client()), vec![]);
    assert!(support::containers_named(&daemon.prefix).is_empty());

    // `env` and `doctor` read the same file and refuse it the same way.
    let repo = repo(&cases[1].0);
    let env = berth(&daemon, &repo.main, &["env"]);
    assert_eq!(env.code, 1);
    assert!(env.stderr.starts_with(cases[1].1), "{env:?}");
    let doctor = berth(&daemon, &repo.main, &["doctor"]);
    assert_eq!(doctor.code, 1, "{doctor:?}");
    assert!(
        doctor
            .stdout
            .contains("FAIL berth.toml: berth.toml:5: instances.db.idle-stop"),
        "{doctor:?}"
    );
}

#[test]
fn a_daemon_that_does_not_answer_is_named_with_what_to_run() {
    let repo = repo(&two_instances());
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{closed}");
    for args in [
        &["ps"][..],
        &["up"],
        &["domains"],
        &["exec", "db", "--", "true"],
    ] {
        let run = berth_at(&base, &repo.main, args, None);
        assert_eq!(run.code, 1, "{args:?}: {run:?}");
        let line = run.stderr.trim();
        assert!(!line.contains('\n'), "one line: {run:?}");
        assert!(
            line.contains(&format!("not answering at {base}")),
            "{run:?}"
        );
        assert!(
            line.contains("`berth serve`") && line.contains("`cargo run --release -- serve`"),
            "{run:?}"
        );
    }
    let doctor = berth_at(&base, &repo.main, &["doctor"], None);
    assert_eq!(doctor.code, 1);
    assert!(doctor.stdout.contains("FAIL daemon:"), "{doctor:?}");
    assert!(
        doctor.stdout.contains("fix: run `berth serve`"),
        "{doctor:?}"
    );

    // Outside a repository, the commands that need one say so.
    let outside = tempfile::tempdir().unwrap();
    let run = berth_at(&base, outside.path(), &["up"], None);
    assert_eq!(run.code, 1);
    assert!(run.stderr.contains("inside a git repository"), "{run:?}");
}

#[test]
fn a_refused_key_is_said_plainly_and_doctor_passes_with_a_good_one() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["domains"])
        .current_dir(&repo.main)
        .env("BERTH_URL", &daemon.base)
        .env("BERTH_SERVICE_KEYS", "not-the-key-at-all-0000")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("did not accept the service key from BERTH_SERVICE_KEYS"),
        "{stderr}"
    );

    let doctor = berth(&daemon, &repo.main, &["doctor"]).ok();
    for check in ["docker", "daemon", "key", "berth.toml", "image"] {
        assert!(
            doctor
                .stdout
                .lines()
                .any(|l| l.starts_with("ok") && l.contains(&format!(" {check}: "))),
            "{check}: {doctor:?}"
        );
    }
    let checks = berth(&daemon, &repo.main, &["doctor", "--json"])
        .ok()
        .json();
    assert!(
        checks.as_array().unwrap().iter().all(|c| c["ok"] == true),
        "{checks:#}"
    );

    let domains = berth(&daemon, &repo.main, &["domains", "--json"])
        .ok()
        .json();
    assert_eq!(domains, serde_json::json!([]));
    let completions = berth(&daemon, &repo.main, &["completions", "bash"]).ok();
    assert!(
        completions.stdout.contains("berth") && completions.stdout.contains("exec"),
        "{completions:?}"
    );
}

#[test]
fn up_dry_run_and_doctor_say_what_each_up_would_do_and_change_nothing() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let repo = repo(&two_instances());
    let dir = &repo.main;
    // No domain yet: said, and none is made.
    let first = berth(&daemon, dir, &["up", "--dry-run"]).ok();
    assert!(first.stdout.contains("does not exist yet"), "{first:?}");
    assert_eq!(domains(&api), vec![], "no domain was made");

    berth(&daemon, dir, &["up", "db"]).ok();
    let domain = domain_id(&the_domain(&api));

    let reports = berth(&daemon, dir, &["up", "--dry-run", "--json"])
        .ok()
        .json();
    let of = |name: &str| {
        reports
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {reports:#}"))["report"]
            .clone()
    };
    let (db, web) = (of("db"), of("web"));
    assert_eq!(db["ok"], true, "{db:#}");
    assert_eq!(db["wouldCreate"], false);
    assert_eq!(db["container"]["action"], "keep");
    assert_eq!(web["ok"], true, "{web:#}");
    assert_eq!(web["wouldCreate"], true);
    assert_eq!(web["alias"]["alias"], "www");

    let text = berth(&daemon, dir, &["up", "--dry-run"]).ok();
    assert!(text.stdout.contains("would keep its container"), "{text:?}");
    assert!(text.stdout.contains("would create it"), "{text:?}");
    let doctor = berth(&daemon, dir, &["doctor"]).ok();
    for name in ["db", "web"] {
        assert!(
            doctor
                .stdout
                .lines()
                .any(|l| l.starts_with("ok") && l.contains(&format!(" preflight {name}: "))),
            "{name}: {doctor:?}"
        );
    }
    // Only the instance `berth up` made exists.
    let listed = api.call(|c| c.instances(&domain, false)).expect("a list");
    assert_eq!(listed.len(), 1, "{listed:#?}");
}

/// A tmux server of this test's own, removed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new() -> Tmux {
        Tmux::named("up")
    }

    /// A server of its own for each test (`what`), which its drop kills.
    fn named(what: &str) -> Tmux {
        Tmux {
            socket: format!("berth-cli-test-{}-{what}", std::process::id()),
        }
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-u", "-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux runs (apt-get install tmux)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

#[test]
fn on_a_terminal_up_shows_progress_and_ends_in_the_table() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());
    let tmux = Tmux::new();
    let script = repo.main.join("run-up.sh");
    std::fs::write(
        &script,
        format!(
            "cd '{}' && BERTH_URL='{}' BERTH_SERVICE_KEYS='{KEY}' '{}' up; echo \"exit=$?\"; sleep 600\n",
            repo.main.display(),
            daemon.base,
            env!("CARGO_BIN_EXE_berth")
        ),
    )
    .unwrap();
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "up",
        "-x",
        "120",
        "-y",
        "40",
        &format!("sh '{}'", script.display()),
    ]);
    // What the terminal shows has no event: the pane is looked at until the command ends.
    let mut screen = String::new();
    support::wait_until(
        Duration::from_secs(120),
        "berth up finishing on the terminal",
        || {
            screen = tmux.run(&["capture-pane", "-p", "-t", "up"]);
            screen.contains("exit=")
        },
    );
    assert!(screen.contains("exit=0"), "{screen}");
    let lines: Vec<&str> = screen
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty())
        .collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("NAME"))
        .unwrap_or_else(|| panic!("no table:\n{screen}"));
    assert!(
        lines[header].contains("STATE") && lines[header].contains("ENDPOINTS"),
        "{screen}"
    );
    assert!(
        lines[header + 1].starts_with("db ") && lines[header + 1].contains("running"),
        "{screen}"
    );
    assert!(
        lines[header + 2].starts_with("web ") && lines[header + 2].contains("running"),
        "{screen}"
    );
    assert_eq!(
        lines[header + 3],
        "exit=0",
        "the table is the last thing berth prints:\n{screen}"
    );
    // The spinners finished as marks above the table.
    assert!(
        lines[..header]
            .iter()
            .any(|l| l.contains("db") && l.contains("✔ running")),
        "{screen}"
    );
}

#[test]
fn exec_it_runs_an_interactive_shell_on_a_terminal_that_follows_its_size() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());
    berth(&daemon, &repo.main, &["up", "db"]).ok();
    let tmux = Tmux::named("exec");
    let script = repo.main.join("run-exec.sh");
    std::fs::write(
        &script,
        format!(
            "cd '{}' && BERTH_URL='{}' BERTH_SERVICE_KEYS='{KEY}' '{}' exec -it db -- sh; echo \"exit=$?\"; sleep 600\n",
            repo.main.display(),
            daemon.base,
            env!("CARGO_BIN_EXE_berth")
        ),
    )
    .unwrap();
    tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "exec",
        "-x",
        "100",
        "-y",
        "30",
        &format!("sh '{}'", script.display()),
    ]);
    // What the terminal shows has no event: the pane is looked at until it shows `wanted`.
    let screen_shows = |wanted: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = tmux.run(&["capture-pane", "-p", "-t", "exec"]);
            if screen.contains(wanted) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the terminal did not show {wanted:?} within 60 s:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    // busybox sh's prompt, on the instance's terminal.
    screen_shows("/ #");
    tmux.run(&[
        "send-keys",
        "-t",
        "exec",
        "echo hello-$((6*7)); tty",
        "Enter",
    ]);
    // `tty` answers after the echo: once it has, both are on the screen.
    let screen = screen_shows("/dev/pts/");
    assert!(
        screen.contains("hello-42"),
        "the shell ran the line on its terminal:\n{screen}"
    );
    // The terminal's size is this one's, and follows it.
    tmux.run(&["send-keys", "-t", "exec", "stty size", "Enter"]);
    screen_shows("30 100");
    tmux.run(&["resize-window", "-t", "exec", "-x", "120", "-y", "40"]);
    // The resize reaches the engine on its own path, which keystrokes may overtake: asked
    // again until the terminal says the new size.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        tmux.run(&["send-keys", "-t", "exec", "clear; stty size", "Enter"]);
        std::thread::sleep(Duration::from_millis(500));
        let screen = tmux.run(&["capture-pane", "-p", "-t", "exec"]);
        if screen.contains("40 120") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the terminal did not follow the window's size:\n{screen}"
        );
    }
    // A key the local terminal would take (Ctrl-C) goes to the shell, which stays. It is sent
    // once `sleep` runs: sent with the line, it could reach the shell's line editor before
    // the command starts (a plain byte there, not a signal), and the sleep would run its 100 s.
    tmux.run(&["send-keys", "-t", "exec", "sleep 100", "Enter"]);
    let runs = |command: &str| {
        let ps = berth(&daemon, &repo.main, &["exec", "db", "--", "ps"]).ok();
        ps.stdout.contains(command)
    };
    // The container's processes have no event: they are looked at until the deadline.
    support::wait_until(Duration::from_secs(30), "the shell's sleep running", || {
        runs("sleep 100")
    });
    tmux.run(&["send-keys", "-t", "exec", "C-c"]);
    tmux.run(&["send-keys", "-t", "exec", "echo still-$((1+1))", "Enter"]);
    screen_shows("still-2");
    // The shell's exit status is berth's, and the terminal is itself again.
    tmux.run(&["send-keys", "-t", "exec", "exit 7", "Enter"]);
    screen_shows("exit=7");

    // A terminal whose berth goes away (its window closed) has its command killed in the
    // container, as an exec's is.
    let abandoned = repo.main.join("run-abandoned.sh");
    std::fs::write(
        &abandoned,
        format!(
            "cd '{}' && BERTH_URL='{}' BERTH_SERVICE_KEYS='{KEY}' exec '{}' exec -it db -- sleep 4242\n",
            repo.main.display(),
            daemon.base,
            env!("CARGO_BIN_EXE_berth")
        ),
    )
    .unwrap();
    tmux.run(&[
        "new-window",
        "-t",
        "exec",
        "-n",
        "gone",
        &format!("sh '{}'", abandoned.display()),
    ]);
    let sleeping = || runs("sleep 4242");
    // The container's processes have no event: they are looked at until the deadline.
    support::wait_until(
        Duration::from_secs(30),
        "the terminal's command running",
        sleeping,
    );
    tmux.run(&["kill-window", "-t", "exec:gone"]);
    support::wait_until(
        Duration::from_secs(30),
        "the abandoned terminal's command killed",
        || !sleeping(),
    );
}

#[test]
fn logs_print_an_instances_output_and_link_lets_a_container_resolve_it() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());
    berth(&daemon, &repo.main, &["up", "db"]).ok();
    // Whatever the container's first process writes is its log.
    berth(
        &daemon,
        &repo.main,
        &[
            "exec",
            "db",
            "--",
            "sh",
            "-c",
            "echo a-log-line > /proc/1/fd/1",
        ],
    )
    .ok();
    let logs = berth(&daemon, &repo.main, &["logs", "db", "--tail", "50"]).ok();
    assert!(logs.stdout.contains("a-log-line"), "{logs:?}");
    // Without a name, as in Compose: every instance of the worktree, each line with its name.
    berth(&daemon, &repo.main, &["up", "web"]).ok();
    berth(
        &daemon,
        &repo.main,
        &[
            "exec",
            "web",
            "--",
            "sh",
            "-c",
            "printf 'web-says-one\\nweb-says-two\\n' > /proc/1/fd/1",
        ],
    )
    .ok();
    let all = berth(&daemon, &repo.main, &["logs", "--tail", "50"]).ok();
    let lines: Vec<&str> = all.stdout.lines().collect();
    assert!(lines.contains(&"db  | a-log-line"), "{all:?}");
    assert!(
        lines.contains(&"web | web-says-one") && lines.contains(&"web | web-says-two"),
        "{all:?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("db  | ") || l.starts_with("web | ")),
        "{all:?}"
    );

    // A container without the workspace's label is not attached, and berth says what it needs.
    let bare = format!("{}-bare", daemon.prefix);
    support::docker(&[
        "run",
        "-d",
        "--name",
        &bare,
        &busybox_image(),
        "sleep",
        "3600",
    ]);
    let label = berth(&daemon, &repo.main, &["link", "--print-label"]).ok();
    let label = label.stdout.trim().to_owned();
    assert!(label.starts_with("berth.workspace="), "{label}");
    let refused = berth(&daemon, &repo.main, &["link", &bare]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains(&format!("{bare} is not attached"))
            && refused.stderr.contains(&label),
        "{refused:?}"
    );
    let shell = format!("{}-shell", daemon.prefix);
    support::docker(&[
        "run",
        "-d",
        "--name",
        &shell,
        "--label",
        &label,
        &busybox_image(),
        "sleep",
        "3600",
    ]);
    let linked = berth(&daemon, &repo.main, &["link", &shell]).ok();
    assert!(
        linked.stdout.contains("1 executor(s) attached"),
        "{linked:?}"
    );
    // The engine's DNS, which berth has no event for.
    support::wait_until(
        Duration::from_secs(30),
        "db resolving from the linked container",
        || {
            let out = Command::new("docker")
                .args(["exec", &shell, "nslookup", "-type=a", "db"])
                .output()
                .unwrap();
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Address: ")
        },
    );
    let refused = berth(&daemon, &repo.main, &["link"]);
    assert_eq!(refused.code, 1, "{refused:?}");
}

#[test]
fn who_stopped_an_instance_is_a_name_refused_with_control_characters_and_shown_as_sent() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());
    let dir = &repo.main;
    let items = berth(&daemon, dir, &["up", "db", "--json"]).ok().json();
    let key = items[0]["key"].as_str().unwrap().to_owned();
    let api = daemon.client();
    let domain = the_domain(&api);
    let did = domain_id(&domain);
    // `by` is a name: terminal escapes (C0 or C1) in it are refused by its place, and nothing
    // is stopped. (What a table shows is escaped all the same: `crates/berth/src/ui.rs`.)
    for by in [
        "\u{1b}[2J\u{1b}[31mmallory\u{1b}[0m",
        "mallory\nnext",
        "\u{9b}1Amallory",
    ] {
        let err = support::refused(
            api.call(|c| c.stop(&did, &key, by)),
            400,
            "RequestRefusedError",
        );
        assert_eq!(
            err["message"],
            "body.by must not contain control characters (U+0000 to U+001F, U+007F to U+009F)"
        );
    }
    assert_eq!(api.instance(&domain, &key)["desired"], "running");
    // Any other text is shown as it was sent.
    let by = "Zo\u{eb} \u{1F6A2} \u{5e9}\u{5dc}\u{5d5}\u{5dd}";
    api.call(|c| c.stop(&did, &key, by)).expect("a stop");
    api.wait_state(&domain, &key, "stopped", Duration::from_secs(30));
    // `berth_at` asserts that no escape reaches the output.
    let table = berth(&daemon, dir, &["ps"]).ok();
    let line = table
        .stdout
        .lines()
        .find(|l| l.starts_with("db "))
        .unwrap_or_else(|| panic!("{table:?}"));
    assert!(line.ends_with(&format!("by {by}")), "{line:?}");
    assert_eq!(table.stdout.lines().count(), 2, "{table:?}");
    // JSON output carries the text as it is, for programs.
    let items = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    assert_eq!(items[0]["state"]["reason"]["by"], by);
}

#[test]
fn rollouts_releases_and_rollback_to_a_named_release() {
    let daemon = Daemon::start();
    let (a, b) = (busybox_image(), support::volume_image());
    let toml = |image: &str| {
        format!(
            "[instances.web]\nimage = \"{image}\"\nready = {{ tcp = 8080 }}\nmemory = \"32MiB\"\n"
        )
    };
    let repo = repo(&toml(&a));
    berth(&daemon, &repo.main, &["up"]).ok();
    std::fs::write(repo.main.join("berth.toml"), toml(&b)).unwrap();
    berth(&daemon, &repo.main, &["up"]).ok();

    let rollouts = berth(&daemon, &repo.main, &["rollouts", "web", "--json"])
        .ok()
        .json();
    let generations: Vec<i64> = rollouts
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["plan"]["rolloutGeneration"].as_i64().unwrap())
        .collect();
    assert_eq!(generations, [2, 1], "{rollouts:#}");
    assert_eq!(rollouts[0]["status"]["status"], "succeeded");
    let releases = berth(&daemon, &repo.main, &["releases", "web", "--json"])
        .ok()
        .json();
    let of_a = releases
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["data"]["registryRootDigest"] == a.rsplit_once('@').unwrap().1)
        .unwrap_or_else(|| panic!("no release of A: {releases:#}"));
    assert!(of_a["data"]["acceptedAt"].is_i64(), "{of_a:#}");
    let release = of_a["id"].as_str().unwrap();
    let table = berth(&daemon, &repo.main, &["releases", "web"]).ok();
    assert!(table.stdout.starts_with("RELEASE"), "{table:?}");
    assert!(table.stdout.contains(release), "{table:?}");

    // Back to A by its release id: the command waits until it runs again.
    let run = berth(
        &daemon,
        &repo.main,
        &["rollback", "web", "--release", release],
    )
    .ok();
    assert!(run.stdout.contains("rolled back to"), "{run:?}");
    assert!(run.stdout.contains("(rollout 3: rolled-back)"), "{run:?}");
    // berth.toml follows, as after a promote: the next `up` does not roll forward again.
    assert!(run.stdout.contains("berth.toml pinned to it"), "{run:?}");
    let file = std::fs::read_to_string(repo.main.join("berth.toml")).unwrap();
    assert!(file.contains(&a) && !file.contains(&b), "{file}");
    let again = berth(&daemon, &repo.main, &["up", "--json"]).ok().json();
    assert_eq!(
        berth(&daemon, &repo.main, &["rollouts", "web", "--json"])
            .ok()
            .json()
            .as_array()
            .unwrap()
            .len(),
        3,
        "the up after the rollback changed nothing: {again:#}"
    );
    let table = berth(&daemon, &repo.main, &["rollouts", "web"]).ok();
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(lines[0].starts_with("GEN"), "{table:?}");
    let newest: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(newest[..3], ["3", "rollback", "rolled-back"], "{table:?}");
    assert!(lines[1].contains(release), "{table:?}");

    // Without --release: the previous image that ran verified, B.
    let run = berth(&daemon, &repo.main, &["rollback", "web", "--json"]).ok();
    let answer = run.json();
    assert_eq!(
        answer["rollout"]["plan"]["requestedDigest"],
        b.rsplit_once('@').unwrap().1
    );
    assert_eq!(answer["rollout"]["status"]["status"], "rolled-back");
    assert_eq!(answer["instance"]["state"]["kind"], "running");

    // An unknown release is refused by the daemon, and nothing is rolled back.
    let unknown = format!("irl:{}", "0".repeat(32));
    let run = berth(
        &daemon,
        &repo.main,
        &["rollback", "web", "--release", &unknown],
    );
    assert_eq!(run.code, 1, "{run:?}");
    assert!(run.stderr.starts_with("berth: "), "{run:?}");
    let after = berth(&daemon, &repo.main, &["rollouts", "web", "--json"])
        .ok()
        .json();
    assert_eq!(after.as_array().unwrap().len(), 4, "{after:#}");
}

#[test]
fn snapshot_restore_and_branch_from_another_worktree_do_what_they_say() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());
    berth(&daemon, &repo.main, &["up", "db"]).ok();
    let write = |dir: &Path, text: &str| {
        berth(
            &daemon,
            dir,
            &[
                "exec",
                "db",
                "--",
                "sh",
                "-c",
                &format!("echo {text} > /srv/data/x"),
            ],
        )
        .ok();
    };
    let read = |dir: &Path| {
        berth(&daemon, dir, &["exec", "db", "--", "cat", "/srv/data/x"])
            .ok()
            .stdout
            .trim()
            .to_owned()
    };
    write(&repo.main, "v1");

    let taken = berth(&daemon, &repo.main, &["snapshot", "db", "before", "--json"]).ok();
    let taken = taken.json();
    assert_eq!(taken["state"], "ready", "{taken:#}");
    assert_eq!(taken["name"], "before");
    write(&repo.main, "v2");
    let listed = berth(&daemon, &repo.main, &["snapshots", "--json"])
        .ok()
        .json();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed:#}");
    let table = berth(&daemon, &repo.main, &["snapshots"]).ok();
    assert!(table.stdout.starts_with("NAME"), "{table:?}");
    assert!(table.stdout.contains("before"), "{table:?}");
    // `snapshots rm` deletes one by name; a name that is not there is said so.
    berth(&daemon, &repo.main, &["snapshot", "db", "scratch"]).ok();
    let removed = berth(&daemon, &repo.main, &["snapshots", "rm", "scratch"]).ok();
    assert!(
        removed.stdout.contains("deleted snapshot scratch"),
        "{removed:?}"
    );
    let listed = berth(&daemon, &repo.main, &["snapshots", "--json"])
        .ok()
        .json();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["before"], "{listed:#}");
    let missing = berth(&daemon, &repo.main, &["snapshots", "rm", "scratch"]);
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(
        missing
            .stderr
            .contains("no snapshot of this repository has the id or name \"scratch\""),
        "{missing:?}"
    );

    let restored = berth(&daemon, &repo.main, &["restore", "db", "before", "--json"])
        .ok()
        .json();
    assert_eq!(
        restored["instance"]["state"]["kind"], "running",
        "{restored:#}"
    );
    assert!(
        restored["beforeRestore"]["name"]
            .as_str()
            .unwrap()
            .starts_with("before-restore-")
    );
    assert_eq!(read(&repo.main), "v1");

    // The second worktree (on its own branch) gets main's data instead of an empty volume.
    let branched = berth(
        &daemon,
        &repo.second,
        &["branch", "db", "--from", "main", "--json"],
    )
    .ok()
    .json();
    assert_eq!(branched["state"]["kind"], "running", "{branched:#}");
    assert_eq!(read(&repo.second), "v1");
    write(&repo.second, "only here");
    assert_eq!(read(&repo.main), "v1");

    let missing = berth(
        &daemon,
        &repo.second,
        &["branch", "web", "--from", "nowhere"],
    );
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(missing.stderr.contains("nowhere"), "{missing:?}");
}

#[test]
fn branch_from_in_berth_toml_gives_a_new_worktree_mains_data_and_names_a_missing_branch() {
    let daemon = Daemon::start();
    let toml = two_instances().replace(
        "idle-stop = \"30m\"\n",
        "idle-stop = \"30m\"\nbranch-from = \"main\"\n",
    );
    let repo = repo(&toml);
    berth(&daemon, &repo.main, &["up", "db"]).ok();
    berth(
        &daemon,
        &repo.main,
        &[
            "exec",
            "db",
            "--",
            "sh",
            "-c",
            "echo from-main > /srv/data/x",
        ],
    )
    .ok();
    // The new worktree's db has no volume yet: it starts as a branch of main's.
    let up = berth(&daemon, &repo.second, &["up", "db", "--json"])
        .ok()
        .json();
    assert_eq!(up[0]["state"]["kind"], "running", "{up:#}");
    let seen = berth(
        &daemon,
        &repo.second,
        &["exec", "db", "--", "cat", "/srv/data/x"],
    )
    .ok();
    assert_eq!(seen.stdout.trim(), "from-main");
    // Once it has its own data, an up keeps it.
    berth(&daemon, &repo.second, &["up", "db"]).ok();

    let elsewhere = self::repo(&two_instances().replace(
        "idle-stop = \"30m\"\n",
        "idle-stop = \"30m\"\nbranch-from = \"no-such-branch\"\n",
    ));
    let refused = berth(&daemon, &elsewhere.second, &["up", "db"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("no-such-branch"), "{refused:?}");
}

#[test]
fn template_true_in_berth_toml_starts_each_worktree_on_one_template_that_templates_lists_and_doctor_counts()
 {
    let daemon = Daemon::start();
    let toml = two_instances().replace(
        "idle-stop = \"30m\"\n",
        "idle-stop = \"30m\"\ntemplate = true\n",
    );
    assert!(toml.contains("template = true"));
    let repo = repo(&toml);
    berth(&daemon, &repo.main, &["up", "db"]).ok();
    berth(&daemon, &repo.second, &["up", "db"]).ok();

    let list = berth(&daemon, &repo.main, &["templates", "--json"])
        .ok()
        .json();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 1, "one recipe for both worktrees: {list:?}");
    assert_eq!(list[0]["state"], "ready", "{list:?}");
    assert_eq!(list[0]["volumes"][0]["mountPath"], "/srv/data");
    assert_eq!(list[0]["users"].as_array().unwrap().len(), 2, "{list:?}");
    let id = list[0]["templateId"].as_str().unwrap().to_owned();

    let table = berth(&daemon, &repo.second, &["templates"]).ok();
    assert!(
        table
            .stdout
            .lines()
            .any(|l| l.starts_with(&id) && l.contains("ready")),
        "{table:?}"
    );
    let doctor = berth(&daemon, &repo.main, &["doctor"]).ok();
    assert!(
        doctor.stdout.lines().any(|l| l.starts_with("ok")
            && l.contains(" templates: 1 template(s)")
            && l.contains("2 instance volume(s) stand on them")),
        "{doctor:?}"
    );
    // In use: kept, and the error says what stands on it.
    let rm = berth(&daemon, &repo.main, &["templates", "rm", &id]);
    assert_eq!(rm.code, 1, "{rm:?}");
    assert!(rm.stderr.contains("stand on"), "{rm:?}");
    assert_eq!(
        berth(&daemon, &repo.main, &["templates", "--json"])
            .ok()
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn berth_lease_prints_what_env_prints_for_a_pools_instance_and_resets_and_releases_it() {
    let daemon = Daemon::start();
    let toml = two_instances().replace("idle-stop = \"30m\"\n", "idle-stop = \"30m\"\npool = 1\n");
    assert!(toml.contains("pool = 1"));
    let repo = repo(&toml);
    // The pool is made on first use, and the lease waits for its instance.
    let taken = berth(&daemon, &repo.main, &["lease", "db", "--json"])
        .ok()
        .json();
    let url = taken["DATABASE_URL"]
        .as_str()
        .expect("DATABASE_URL")
        .to_owned();
    let port: u16 = url
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/db"))
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"));
    let lease = taken["BERTH_LEASE"]
        .as_str()
        .expect("BERTH_LEASE")
        .to_owned();
    assert!(lease.starts_with("pls:"), "{taken}");
    assert_eq!(taken["lease"]["leaseId"], lease.as_str());
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("the lease's endpoint answers");
    // Shell lines, as `berth env` prints them.
    let again = berth(&daemon, &repo.main, &["lease", "db", "--reset", &lease]).ok();
    assert!(
        again
            .stdout
            .lines()
            .any(|l| l == format!("export DATABASE_URL='{url}'")),
        "{again:?}"
    );
    assert!(
        again
            .stdout
            .lines()
            .any(|l| l == format!("export BERTH_LEASE='{lease}'")),
        "{again:?}"
    );
    berth(&daemon, &repo.main, &["lease", "db", "--release", &lease]).ok();
    let gone = berth(&daemon, &repo.main, &["lease", "db", "--release", &lease]);
    assert_eq!(gone.code, 1, "{gone:?}");
    // An instance without a pool is named with what to add.
    let none = berth(&daemon, &repo.main, &["lease", "web"]);
    assert_eq!(none.code, 1, "{none:?}");
    assert!(none.stderr.contains("pool = N"), "{none:?}");
    // The daemon's leftovers go with the pool.
    let domain = berth(&daemon, &repo.main, &["domains", "--json"])
        .ok()
        .json()[0]["resourceDomainId"]
        .as_str()
        .unwrap()
        .to_owned();
    daemon
        .client()
        .raw(
            "DELETE",
            &format!("/v1/resource-domains/{domain}/pools/db"),
            None,
            &[],
        )
        .expect(204);
}

/// The host port `berth env --json` puts into db's DATABASE_URL.
fn db_port(daemon: &Daemon, dir: &Path) -> u16 {
    let vars = berth(daemon, dir, &["env", "db", "--json"]).ok().json();
    let url = vars["DATABASE_URL"].as_str().expect("DATABASE_URL");
    url.strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/db"))
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

#[test]
fn after_an_archive_the_messages_name_the_archived_key_and_a_branch_keeps_the_host_port() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());
    let up = berth(&daemon, &repo.main, &["up", "db", "--json"])
        .ok()
        .json();
    let key = up[0]["key"].as_str().unwrap().to_owned();
    let port = db_port(&daemon, &repo.main);
    berth(&daemon, &repo.main, &["archive", "db"]).ok();

    // ps says the archived instance exists.
    let ps = berth(&daemon, &repo.main, &["ps"]).ok();
    assert_eq!(ps.stdout, "", "{ps:?}");
    assert!(
        ps.stderr.contains(
            "this repository has no live instances; 1 is archived (`berth ps --archived` lists it)"
        ),
        "{ps:?}"
    );
    // A second archive, and env, name the key that is archived and the one up makes next.
    let note = format!(
        "db has no live instance here: its last one, {key}, is archived (`berth ps --archived` \
         lists it); `berth up db` starts a new one as {key}.2"
    );
    let again = berth(&daemon, &repo.main, &["archive", "db"]);
    assert_eq!(again.code, 1, "{again:?}");
    assert!(again.stderr.contains(&note), "{again:?}");
    let env = berth(&daemon, &repo.main, &["env"]);
    assert_eq!(env.code, 1, "{env:?}");
    assert!(env.stderr.contains(&note), "{env:?}");
    let full = berth(&daemon, &repo.main, &["archive", &key]);
    assert_eq!(full.code, 1, "{full:?}");
    assert!(
        full.stderr
            .contains(&format!("the instance {key} is archived")),
        "{full:?}"
    );

    // A branch from the other worktree makes the next generation, on the same host port.
    berth(&daemon, &repo.second, &["up", "db"]).ok();
    berth(
        &daemon,
        &repo.second,
        &["exec", "db", "--", "sh", "-c", "echo feature > /srv/data/x"],
    )
    .ok();
    let branched = berth(
        &daemon,
        &repo.main,
        &["branch", "db", "--from", "shop-feature", "--json"],
    )
    .ok()
    .json();
    assert_eq!(branched["key"], format!("{key}.2"), "{branched:#}");
    assert_eq!(branched["state"]["kind"], "running", "{branched:#}");
    assert_eq!(
        db_port(&daemon, &repo.main),
        port,
        "the branch listens on the port the archived db had"
    );
    let seen = berth(
        &daemon,
        &repo.main,
        &["exec", "db", "--", "cat", "/srv/data/x"],
    )
    .ok();
    assert_eq!(seen.stdout.trim(), "feature");

    // Something else holds the port when the next generation comes up: it gets another, and
    // up says so.
    berth(&daemon, &repo.main, &["archive", "db"]).ok();
    let holder = std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
    let third = berth(&daemon, &repo.main, &["up", "db"]).ok();
    assert!(
        third.stderr.contains(&format!(
            "berth: db ({key}.3): host port {port}, which db had before, is taken; 8080 is now on"
        )),
        "{third:?}"
    );
    assert_ne!(db_port(&daemon, &repo.main), port);
    drop(holder);
}

#[test]
fn restore_from_another_worktree_gives_its_data_and_keeps_the_old_as_a_snapshot() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());
    let write = |dir: &Path, text: &str| {
        berth(
            &daemon,
            dir,
            &[
                "exec",
                "db",
                "--",
                "sh",
                "-c",
                &format!("echo {text} > /srv/data/x"),
            ],
        )
        .ok();
    };
    let read = |dir: &Path| {
        berth(&daemon, dir, &["exec", "db", "--", "cat", "/srv/data/x"])
            .ok()
            .stdout
            .trim()
            .to_owned()
    };
    let main_key = berth(&daemon, &repo.main, &["up", "db", "--json"])
        .ok()
        .json()[0]["key"]
        .as_str()
        .unwrap()
        .to_owned();
    write(&repo.main, "from-main");
    let key = berth(&daemon, &repo.second, &["up", "db", "--json"])
        .ok()
        .json()[0]["key"]
        .as_str()
        .unwrap()
        .to_owned();
    write(&repo.second, "mine");
    let port = db_port(&daemon, &repo.second);

    // A branch is for a new instance, and says what to run for this one.
    let refused = berth(&daemon, &repo.second, &["branch", "db", "--from", "main"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("`berth restore db --from main`"),
        "{refused:?}"
    );

    let restored = berth(
        &daemon,
        &repo.second,
        &["restore", "db", "--from", "main", "--json"],
    )
    .ok()
    .json();
    assert_eq!(restored["instance"]["key"], key.as_str(), "{restored:#}");
    assert_eq!(restored["instance"]["state"]["kind"], "running");
    assert_eq!(restored["source"]["instanceKey"], main_key.as_str());
    assert_eq!(restored["source"]["state"], "ready");
    assert!(
        restored["source"]["name"]
            .as_str()
            .unwrap()
            .starts_with("for-restore-"),
        "{restored:#}"
    );
    let before = restored["beforeRestore"]["snapshotId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        restored["beforeRestore"]["name"]
            .as_str()
            .unwrap()
            .starts_with("before-restore-")
    );
    assert_eq!(read(&repo.second), "from-main");
    assert_eq!(db_port(&daemon, &repo.second), port, "the same host port");
    // The two stay apart, and main's db runs on.
    write(&repo.second, "changed-here");
    assert_eq!(read(&repo.main), "from-main");

    // What the restore replaced is the before-restore snapshot: it comes back.
    let back = berth(&daemon, &repo.second, &["restore", "db", &before]).ok();
    assert!(
        back.stdout.contains("restored db from before-restore-"),
        "{back:?}"
    );
    assert_eq!(read(&repo.second), "mine");

    let nowhere = berth(
        &daemon,
        &repo.second,
        &["restore", "db", "--from", "nowhere"],
    );
    assert_eq!(nowhere.code, 1, "{nowhere:?}");
    assert!(
        nowhere
            .stderr
            .contains("no worktree is on the branch nowhere"),
        "{nowhere:?}"
    );
    let both = berth(&daemon, &repo.second, &["restore", "db"]);
    assert_eq!(both.code, 2, "a snapshot or --from is required: {both:?}");
}

#[test]
fn ps_shows_each_instances_endpoints_and_ui_opens_the_repositorys_project() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());
    let dir = &repo.main;
    // Before the repository has a domain, `berth ui` opens the list of projects.
    let before = berth(&daemon, dir, &["ui", "--print"]).ok();
    assert!(
        before
            .stdout
            .trim()
            .starts_with(&format!("{}/ui/#code=", daemon.base))
            && !before.stdout.contains("&open="),
        "{before:?}"
    );

    let up = berth(&daemon, dir, &["up", "--json"]).ok().json();
    let ps = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    assert_eq!(ps.as_array().unwrap().len(), 2, "{ps:#}");
    for item in up.as_array().unwrap() {
        let listed = by_key(&ps, item["key"].as_str().unwrap());
        assert!(
            !item["endpoints"].as_array().unwrap().is_empty(),
            "{item:#}"
        );
        assert_eq!(listed["endpoints"], item["endpoints"], "{listed:#}");
    }
    // The table shows them as `berth up` does, before the note.
    let table = berth(&daemon, dir, &["ps"]).ok();
    let mut lines = table.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "SCOPE",
            "KEY",
            "STATE",
            "SINCE",
            "ENDPOINTS",
            "NOTE"
        ],
        "{table:?}"
    );
    for item in up.as_array().unwrap() {
        let name = item["name"].as_str().unwrap();
        let endpoint = &item["endpoints"][0];
        let shown = format!(
            "{}:{}->{}",
            endpoint["host"].as_str().unwrap(),
            endpoint["hostPort"],
            endpoint["port"]
        );
        assert!(
            table
                .stdout
                .lines()
                .any(|l| l.starts_with(&format!("{name} ")) && l.contains(&shown)),
            "{name}: {shown} in {table:?}"
        );
    }

    // In the repository, `berth ui` opens its project's page; the code still signs in once.
    let api = daemon.client();
    let domain = the_domain(&api);
    let link = berth(&daemon, dir, &["ui", "--print"]).ok();
    let link = link.stdout.trim();
    assert!(
        link.starts_with(&format!("{}/ui/#code=", daemon.base))
            && link.ends_with(&format!("&open=d/{domain}")),
        "{link}"
    );
    let code = link
        .split_once("#code=")
        .unwrap()
        .1
        .split('&')
        .next()
        .unwrap();
    support::Client::new(&daemon.base, None)
        .call(|c| c.create_session(code))
        .expect("a session");
    // Outside any repository, the list.
    let elsewhere = tempfile::tempdir().expect("a directory");
    let outside = berth(&daemon, elsewhere.path(), &["ui", "--print"]).ok();
    assert!(!outside.stdout.contains("&open="), "{outside:?}");
}

#[test]
fn ps_and_doctor_name_an_instance_whose_volume_was_removed_outside_berth() {
    let mut daemon = Daemon::start();
    let repo = repo(&two_instances());
    let dir = &repo.main;
    berth(&daemon, dir, &["up", "db"]).ok();
    let items = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    let key = db_key(&items, "worktree");
    let volume = by_key(&items, &key)["volumes"][0]["dockerName"]
        .as_str()
        .unwrap()
        .to_owned();
    let doctor = berth(&daemon, dir, &["doctor", "--json"]).ok().json();
    let check = |checks: &Value, name: &str| {
        checks
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no {name} check: {checks:#}"))
            .clone()
    };
    let holders = check(&doctor, "holders");
    assert_eq!(holders["ok"], true, "{holders:#}");
    assert!(
        holders["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("{volume}.held holds {volume}")),
        "{holders:#}"
    );
    assert_eq!(check(&doctor, "data")["ok"], true);

    // With the daemon away, a person removes the container, the holder and the volume.
    daemon.stop();
    for container in support::containers_named(&daemon.prefix) {
        if !container.ends_with(".held") {
            support::docker(&["rm", "-f", &container]);
        }
    }
    support::docker(&["rm", "-f", &format!("{volume}.held")]);
    support::docker(&["volume", "rm", &volume]);
    daemon.start_again();

    let client = daemon.client();
    let domain = the_domain(&client);
    let failed = client.settled(&domain, &key, &["failed"], Duration::from_secs(120));
    assert!(
        failed["state"]["message"]
            .as_str()
            .unwrap()
            .contains(&volume),
        "{failed:#}"
    );
    let ps = berth(&daemon, dir, &["ps"]);
    assert!(
        ps.stdout.contains("failed") && ps.stdout.contains("removed outside berth"),
        "{ps:?}"
    );
    let doctor = berth(&daemon, dir, &["doctor", "--json"]).json();
    let data = check(&doctor, "data");
    assert_eq!(data["ok"], false, "{data:#}");
    assert!(
        data["detail"].as_str().unwrap().contains(&volume),
        "{data:#}"
    );
}

#[test]
fn compose_habits_up_d_and_wait_down_and_rm_do_what_compose_users_expect() {
    let daemon = Daemon::start();
    let repo = repo(&two_instances());
    let dir = &repo.main;
    // `up -d` returns once the daemon has the specs; `--wait` is what up does anyway.
    let detached = berth(&daemon, dir, &["up", "-d"]).ok();
    assert!(!detached.stderr.contains("failed"), "{detached:?}");
    berth(&daemon, dir, &["up", "--wait"]).ok();
    let items = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    assert_eq!(keys(&items).len(), 2, "{items:#}");
    for item in items.as_array().unwrap() {
        assert_eq!(item["state"]["kind"], "running", "{item:#}");
    }
    let both = berth(&daemon, dir, &["up", "-d", "--wait"]);
    assert_eq!(both.code, 2, "-d and --wait are refused together: {both:?}");

    // `down` stops this worktree's own instances and leaves the shared one to the others.
    let db = db_key(&items, "worktree");
    let down = berth(&daemon, dir, &["down"]).ok();
    assert!(down.stdout.contains("stopped by tester"), "{down:?}");
    let items = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    assert_eq!(by_key(&items, &db)["state"]["kind"], "stopped", "{items:#}");
    let web = items
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "web")
        .unwrap();
    assert_eq!(web["state"]["kind"], "running", "{items:#}");

    // `down --archive` archives them, their volumes kept; `rm` archives a named one.
    berth(&daemon, dir, &["up", "db"]).ok();
    let archived = berth(&daemon, dir, &["down", "--archive", "--json"])
        .ok()
        .json();
    assert_eq!(archived.as_array().unwrap().len(), 1, "{archived:#}");
    assert_eq!(archived[0]["name"], "db");
    assert_eq!(archived[0]["volumes"].as_array().unwrap().len(), 1);
    let removed = berth(&daemon, dir, &["rm", "web"]).ok();
    assert!(removed.stdout.contains("archived web"), "{removed:?}");
    let left = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    assert!(left.as_array().unwrap().is_empty(), "{left:#}");
}

#[test]
fn a_scope_change_names_the_instance_it_left_and_an_ambiguous_name_is_refused_naming_both() {
    let daemon = Daemon::start();
    let toml = two_instances();
    let repo = repo(&toml);
    let dir = &repo.main;
    berth(&daemon, dir, &["up", "db"]).ok();
    let items = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    let own = db_key(&items, "worktree");

    // db becomes shared: the up runs the shared one and names this worktree's, left running.
    let shared = toml.replacen("scope = \"worktree\"", "scope = \"shared\"", 1);
    assert_ne!(shared, toml);
    std::fs::write(dir.join("berth.toml"), shared).unwrap();
    let up = berth(&daemon, dir, &["up", "db"]).ok();
    assert!(
        up.stderr.contains(&format!(
            "db is shared in berth.toml now; this worktree's db from before ({own}) still runs"
        )) && up.stderr.contains(&format!("`berth archive {own}`")),
        "{up:?}"
    );

    // `db` now names both: nothing is archived on a guess, and both keys are named.
    let refused = berth(&daemon, dir, &["archive", "db"]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("db names two live instances")
            && refused.stderr.contains(&own)
            && refused.stderr.contains("the shared one (db)"),
        "{refused:?}"
    );
    let items = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    assert_eq!(by_key(&items, &own)["state"]["kind"], "running");
    assert_eq!(by_key(&items, "db")["state"]["kind"], "running");
    // The full key archives the one berth.toml no longer asks for.
    berth(&daemon, dir, &["archive", &own]).ok();
    let up = berth(&daemon, dir, &["up", "db"]).ok();
    assert!(!up.stderr.contains("still runs"), "{up:?}");
}

#[test]
fn a_host_port_another_program_holds_is_named_by_ps_env_and_doctor() {
    let mut daemon = Daemon::start();
    let repo = repo(&two_instances());
    let dir = &repo.main;
    berth(&daemon, dir, &["up", "db"]).ok();
    let items = berth(&daemon, dir, &["ps", "--json"]).ok().json();
    let key = db_key(&items, "worktree");
    let port = by_key(&items, &key)["endpoints"][0]["hostPort"]
        .as_u64()
        .unwrap() as u16;

    // Another program takes the port while the daemon is away.
    daemon.stop();
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
    daemon.start_again();
    support::wait_until(
        Duration::from_secs(60),
        "berth finding its port taken",
        || {
            daemon
                .log_text()
                .contains("the host endpoint's port is taken")
        },
    );
    let held = format!("127.0.0.1:{port}->8080 is held by another program");
    let ps = berth(&daemon, dir, &["ps"]).ok();
    assert!(ps.stdout.contains(&held), "{ps:?}");
    let env = berth(&daemon, dir, &["env"]);
    assert_eq!(env.code, 1, "{env:?}");
    assert!(
        env.stderr
            .contains(&format!("another program holds 127.0.0.1:{port}")),
        "{env:?}"
    );
    let doctor = berth(&daemon, dir, &["doctor", "--json"]).json();
    let check = doctor
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "endpoints")
        .unwrap_or_else(|| panic!("no endpoints check: {doctor:#}"))
        .clone();
    assert_eq!(check["ok"], false, "{check:#}");
    assert!(
        check["detail"].as_str().unwrap().contains(&key),
        "{check:#}"
    );

    // Once it lets go, berth listens there again and env gives the port.
    drop(squatter);
    support::wait_until(
        Duration::from_secs(60),
        "berth binding its freed port",
        || !berth(&daemon, dir, &["ps"]).stdout.contains(&held),
    );
    let env = berth(&daemon, dir, &["env"]).ok();
    assert!(env.stdout.contains(&format!(":{port}/db")), "{env:?}");
}
