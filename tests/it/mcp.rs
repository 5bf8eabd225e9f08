//! `berth mcp` end to end: the real binary started by the official MCP Python SDK's stdio
//! client (tests/fixtures/mcp/client.py, from the venv scripts/fixtures makes) in a real git
//! worktree, against a real daemon and Docker. An agent brings up a Postgres, reads its
//! environment, runs SQL through exec, snapshots, breaks it and restores it, all through MCP
//! calls; a key without `exec` is offered no exec tool and refused one by the capability's
//! name; a server started in one worktree cannot reach another worktree's instances, and
//! branches from them; the agent key docs/mcp.md shows gets the tools it says.

use berth_testkit as support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};
use support::{Daemon, KEY, Launch, busybox_image, fixture, key_id};

use crate::cli::repo;

/// Long enough for any one call: an `up` of a Postgres (its pull, initdb, the start) or a
/// restore and the start after it.
const CALL: Duration = Duration::from_secs(300);
const PASSWORD: &str = "dev-secret";
const AGENT_KEY: &str = "test-key-agent-no-exec-eeeeeeee";
const READER_KEY: &str = "test-key-agent-read-only-ffff";
const WORKTREE_AGENT_KEY: &str = "test-key-worktree-agent-gggggg";

/// One `berth mcp` session, through the Python client.
struct Session {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// What the client printed on its first line: the server's answer to `initialize`.
    init: Value,
    /// Every line the client printed, for the check that the key is never in one.
    seen: Vec<String>,
    stderr: tempfile::NamedTempFile,
}

impl Session {
    /// Starts the client, which starts `berth mcp` in `dir` with `key` as the CLI would take it
    /// (BERTH_SERVICE_KEYS) and initializes the session.
    fn start(daemon: &Daemon, dir: &Path, key: &str) -> Session {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/mcp/client.py"
        );
        let stderr = tempfile::NamedTempFile::new().expect("a file for stderr");
        let mut child = Command::new(fixture("BERTH_TEST_MCP_PYTHON"))
            .arg(script)
            .arg(env!("CARGO_BIN_EXE_berth"))
            .arg(dir)
            .current_dir(dir)
            .env("BERTH_URL", &daemon.base)
            .env("BERTH_SERVICE_KEYS", key)
            .env_remove("BERTH_DATA_DIR")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr.reopen().expect("stderr's file")))
            .spawn()
            .expect("the MCP client starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut session = Session {
            child,
            stdin,
            lines,
            init: Value::Null,
            seen: Vec::new(),
            stderr,
        };
        session.init = session.next();
        session
    }

    /// The client's next line, as JSON.
    fn next(&mut self) -> Value {
        let line = self.lines.recv_timeout(CALL).unwrap_or_else(|_| {
            panic!(
                "the MCP client said nothing within {CALL:?}; its stderr:\n{}",
                self.stderr_text()
            )
        });
        self.seen.push(line.clone());
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    fn stderr_text(&self) -> String {
        std::fs::read_to_string(self.stderr.path()).unwrap_or_default()
    }

    fn ask(&mut self, request: Value) -> Value {
        writeln!(self.stdin, "{request}").expect("the MCP client reads");
        self.stdin.flush().expect("the MCP client reads");
        self.next()
    }

    /// The tools listed, by name.
    fn tools(&mut self) -> Vec<Value> {
        let answer = self.ask(json!({"op": "tools"}));
        answer["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools: {answer}"))
            .clone()
    }

    fn tool_names(&mut self) -> Vec<String> {
        let mut names: Vec<String> = self
            .tools()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    }

    /// A tool call: `{isError, structured, text}` (or `{protocolError}`).
    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.ask(json!({"op": "call", "tool": tool, "arguments": arguments}))
    }

    /// A tool call that must succeed: its structured content.
    fn ok(&mut self, tool: &str, arguments: Value) -> Value {
        let answer = self.call(tool, arguments.clone());
        assert_eq!(
            answer["isError"],
            json!(false),
            "{tool} {arguments}: {answer}\nstderr: {}",
            self.stderr_text()
        );
        answer["structured"].clone()
    }

    /// A tool call that must fail: its text.
    fn refused(&mut self, tool: &str, arguments: Value) -> (String, Value) {
        let answer = self.call(tool, arguments.clone());
        assert_eq!(
            answer["isError"],
            json!(true),
            "{tool} {arguments}: {answer}"
        );
        let text = answer["text"][0].as_str().unwrap_or_default().to_owned();
        (text, answer["structured"].clone())
    }

    /// Asserts the key never reached the client or the server's stderr.
    fn never_showed(&self, key: &str) {
        for line in &self.seen {
            assert!(!line.contains(key), "the service key in an answer: {line}");
        }
        assert!(
            !self.stderr_text().contains(key),
            "the service key on stderr: {}",
            self.stderr_text()
        );
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// psql's argv for `query` in the instance, as the image's user over the Unix socket.
fn psql(query: &str) -> Value {
    json!([
        "psql",
        "-v",
        "ON_ERROR_STOP=1",
        "-tAq",
        "-d",
        "postgres",
        "-c",
        query
    ])
}

/// A worktree-scoped Postgres with a connect table.
fn postgres_project() -> String {
    let image = fixture("BERTH_TEST_POSTGRES_IMAGE");
    format!(
        r#"[instances.db]
image = "{image}"
scope = "worktree"
volumes = {{ data = "/var/lib/postgresql/data" }}
env = {{ POSTGRES_PASSWORD = "{PASSWORD}" }}
ready = {{ exec = ["pg_isready", "-h", "127.0.0.1", "-U", "postgres"] }}
cpu = "1"
memory = "512MiB"

[instances.db.connect]
DATABASE_URL = "postgres://postgres:{PASSWORD}@{{host}}:{{port:5432}}/postgres"
"#
    )
}

/// A worktree-scoped busybox with a volume (httpd on 8080).
fn busybox_project() -> String {
    let image = busybox_image();
    format!(
        r#"[instances.db]
image = "{image}"
scope = "worktree"
volumes = {{ data = "/srv/data" }}
ready = {{ tcp = 8080 }}
cpu = "250m"
memory = "64MiB"
"#
    )
}

#[test]
fn an_agent_brings_up_a_postgres_and_restores_it_after_a_bad_migration_through_mcp_calls_only() {
    let daemon = Daemon::start();
    let repo = repo(&postgres_project());
    let mut agent = Session::start(&daemon, &repo.main, KEY);
    assert_eq!(agent.init["server"], "berth", "{}", agent.init);
    assert_eq!(agent.init["tools"], json!(true), "{}", agent.init);
    assert_eq!(agent.init["resources"], json!(true), "{}", agent.init);

    // A key the grants file does not name may do everything: every tool, each with an exact
    // schema and a description of what it changes.
    let tools = agent.tools();
    let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "branch",
            "environment",
            "exec",
            "list_instances",
            "logs",
            "restore",
            "snapshot",
            "up",
            "wait_running"
        ]
    );
    for tool in &tools {
        assert_eq!(
            tool["inputSchema"]["additionalProperties"],
            json!(false),
            "an exact schema: {tool}"
        );
    }
    let exec = tools.iter().find(|t| t["name"] == "exec").unwrap();
    let schema = &exec["inputSchema"];
    assert_eq!(schema["additionalProperties"], json!(false), "{schema}");
    assert_eq!(schema["properties"]["argv"]["type"], "array", "{schema}");
    let required: Vec<&str> = schema["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        required.contains(&"name") && required.contains(&"argv"),
        "{schema}"
    );
    let restore = tools.iter().find(|t| t["name"] == "restore").unwrap();
    assert!(
        restore["description"]
            .as_str()
            .unwrap()
            .contains("before-restore snapshot"),
        "{restore}"
    );
    assert_eq!(
        restore["annotations"]["destructiveHint"],
        json!(true),
        "{restore}"
    );

    // The project file, as a resource.
    let resources = agent.ask(json!({"op": "resources"}));
    assert!(
        resources.to_string().contains("berth://project/berth.toml")
            && resources.to_string().contains("berth://worktree/state"),
        "{resources}"
    );
    let file = agent.ask(json!({"op": "read", "uri": "berth://project/berth.toml"}));
    assert_eq!(file["contents"][0], json!(postgres_project()), "{file}");

    // Up, from berth.toml: running once the call answers.
    let up = agent.ok("up", json!({}));
    assert_eq!(up["instances"][0]["name"], "db", "{up}");
    assert_eq!(up["instances"][0]["outcome"], "running", "{up}");
    let key = up["instances"][0]["key"].as_str().unwrap().to_owned();
    let listed = agent.ok("list_instances", json!({}));
    assert_eq!(listed["instances"][0]["key"], json!(key), "{listed}");
    assert_eq!(listed["instances"][0]["scope"], "worktree", "{listed}");
    assert_eq!(listed["instances"][0]["state"], "running", "{listed}");
    let state = agent.ask(json!({"op": "read", "uri": "berth://worktree/state"}));
    assert!(
        state["contents"][0].as_str().unwrap().contains(&key),
        "{state}"
    );

    // Its environment: what `berth env` prints.
    let env = agent.ok("environment", json!({}));
    let url = env["variables"]["DATABASE_URL"]
        .as_str()
        .unwrap_or_default();
    assert!(
        url.starts_with(&format!("postgres://postgres:{PASSWORD}@127.0.0.1:")),
        "{env}"
    );

    // SQL through exec, a snapshot, a destructive migration.
    let made = agent.ok(
        "exec",
        json!({"name": "db", "argv": psql("CREATE TABLE orders (id int); INSERT INTO orders VALUES (1), (2), (3)")}),
    );
    assert_eq!(made["exitCode"], 0, "{made}");
    let snap = agent.ok(
        "snapshot",
        json!({"name": "db", "label": "before-migration"}),
    );
    let snapshot_id = snap["snapshot"]["snapshotId"].as_str().unwrap().to_owned();
    assert!(snapshot_id.starts_with("snp:"), "{snap}");
    let dropped = agent.ok(
        "exec",
        json!({"name": "db", "argv": psql("DROP TABLE orders")}),
    );
    assert_eq!(dropped["exitCode"], 0, "{dropped}");
    let gone = agent.ok(
        "exec",
        json!({"name": "db", "argv": psql("SELECT count(*) FROM orders")}),
    );
    assert_ne!(gone["exitCode"], 0, "{gone}");
    assert!(
        gone["stderr"].as_str().unwrap().contains("orders"),
        "{gone}"
    );

    // The restore names the snapshot, and says which one keeps what it replaced.
    let answer = agent.call(
        "restore",
        json!({"name": "db", "snapshot": "before-migration"}),
    );
    assert_eq!(answer["isError"], json!(false), "{answer}");
    let restored = &answer["structured"];
    assert_eq!(
        restored["source"]["snapshotId"],
        json!(snapshot_id),
        "{restored}"
    );
    let before = restored["beforeRestore"]["snapshotId"].as_str().unwrap();
    assert!(
        before.starts_with("snp:") && before != snapshot_id,
        "{restored}"
    );
    assert!(
        answer["text"][0].as_str().unwrap().contains(before),
        "the short text names the before-restore snapshot: {answer}"
    );
    assert_eq!(restored["instance"]["state"], "running", "{restored}");
    let back = agent.ok(
        "exec",
        json!({"name": "db", "argv": psql("SELECT count(*) FROM orders")}),
    );
    assert_eq!(back["exitCode"], 0, "{back}");
    assert_eq!(back["stdout"].as_str().unwrap().trim(), "3", "{back}");

    // Logs: a bounded tail; the wait answers at once for a running instance.
    let logs = agent.ok("logs", json!({"name": "db", "tail": 50}));
    assert!(
        logs["text"]
            .as_str()
            .unwrap()
            .contains("ready to accept connections"),
        "{logs}"
    );
    let waited = agent.ok("wait_running", json!({"name": "db", "timeoutSeconds": 30}));
    assert_eq!(waited["state"], "running", "{waited}");

    // Bad input is refused naming the field, and nothing runs.
    let (text, _) = agent.refused("exec", json!({"name": "db", "argv": []}));
    assert!(text.contains("argv"), "{text}");
    let (text, _) = agent.refused(
        "exec",
        json!({"name": "db", "argv": ["true"], "timeoutSeconds": 100000}),
    );
    assert!(text.contains("timeoutSeconds"), "{text}");
    let (text, _) = agent.refused("logs", json!({"name": "db", "tail": 0}));
    assert!(text.contains("tail"), "{text}");
    let unknown = agent.call(
        "exec",
        json!({"name": "db", "argv": ["true"], "shell": true}),
    );
    assert!(
        unknown.to_string().contains("shell"),
        "an unknown field is named: {unknown}"
    );
    let (text, _) = agent.refused("list_instances", json!({"all": true}));
    assert!(text.contains("`all`"), "{text}");

    agent.never_showed(KEY);
}

#[test]
fn a_key_without_exec_is_offered_no_exec_tool_and_a_forced_call_is_refused_naming_the_capability() {
    let grants = format!(
        "[keys.{agent}]\ncapabilities = [\"read\", \"domains:create\", \"deployment:create-greenfield\", \"data:snapshot\"]\n\n\
         [keys.{reader}]\ncapabilities = [\"read\"]\n",
        agent = key_id(AGENT_KEY),
        reader = key_id(READER_KEY),
    );
    let daemon = Launch::new()
        .keys(&[KEY, AGENT_KEY, READER_KEY])
        .grants(&grants)
        .start();
    let repo = repo(&busybox_project());

    let mut agent = Session::start(&daemon, &repo.main, AGENT_KEY);
    let names = agent.tool_names();
    assert!(!names.contains(&"exec".to_owned()), "{names:?}");
    for offered in [
        "up",
        "list_instances",
        "snapshot",
        "restore",
        "branch",
        "logs",
    ] {
        assert!(names.contains(&offered.to_owned()), "{offered}: {names:?}");
    }
    let up = agent.ok("up", json!({}));
    assert_eq!(up["instances"][0]["outcome"], "running", "{up}");
    let (text, refusal) = agent.refused(
        "exec",
        json!({"name": "db", "argv": ["touch", "/srv/data/x"]}),
    );
    assert_eq!(refusal["capability"], "instances:exec", "{refusal}");
    assert!(text.contains("instances:exec"), "{text}");
    // A tool it may call still works after the refusal.
    let snap = agent.ok("snapshot", json!({"name": "db", "label": "kept"}));
    assert!(
        snap["snapshot"]["snapshotId"]
            .as_str()
            .unwrap()
            .starts_with("snp:")
    );
    agent.never_showed(AGENT_KEY);

    // A read-only key: only the tools that change nothing.
    let mut reader = Session::start(&daemon, &repo.main, READER_KEY);
    assert_eq!(
        reader.tool_names(),
        ["environment", "list_instances", "logs", "wait_running"]
    );
    let (text, refusal) = reader.refused("snapshot", json!({"name": "db"}));
    assert_eq!(refusal["capability"], "data:snapshot", "{refusal}");
    assert!(text.contains("data:snapshot"), "{text}");
    let (_, refusal) = reader.refused("up", json!({}));
    assert_eq!(
        refusal["capability"], "deployment:create-greenfield",
        "{refusal}"
    );
    reader.never_showed(READER_KEY);
}

#[test]
fn a_server_in_one_worktree_cannot_reach_another_worktree_s_instances_but_branches_from_them() {
    let daemon = Daemon::start();
    let repo = repo(&busybox_project());
    let mut first = Session::start(&daemon, &repo.main, KEY);
    let up = first.ok("up", json!({}));
    assert_eq!(up["instances"][0]["outcome"], "running", "{up}");
    let first_key = up["instances"][0]["key"].as_str().unwrap().to_owned();
    let written = first.ok(
        "exec",
        json!({"name": "db", "argv": ["sh", "-c", "echo from-main > /srv/data/origin"]}),
    );
    assert_eq!(written["exitCode"], 0, "{written}");

    // The second worktree's server sees none of the first's instances...
    let mut second = Session::start(&daemon, &repo.second, KEY);
    let listed = second.ok("list_instances", json!({}));
    assert_eq!(listed["instances"], json!([]), "{listed}");
    assert_eq!(listed["notUp"], json!(["db"]), "{listed}");
    // ...and reaches none by its full key: exec, logs, snapshot, restore, wait.
    let calls = [
        (
            "exec",
            json!({"name": first_key, "argv": ["rm", "/srv/data/origin"]}),
        ),
        ("logs", json!({"name": first_key})),
        ("snapshot", json!({"name": first_key})),
        (
            "restore",
            json!({"name": first_key, "snapshot": "anything"}),
        ),
        (
            "wait_running",
            json!({"name": first_key, "timeoutSeconds": 5}),
        ),
    ];
    for (tool, arguments) in calls {
        let (text, _) = second.refused(tool, arguments);
        assert!(text.contains("out of reach"), "{tool}: {text}");
    }
    // Its own name means its own instance, which is not up.
    let (text, _) = second.refused("exec", json!({"name": "db", "argv": ["true"]}));
    assert!(text.contains("no live instance"), "{text}");

    // A branch reads the first worktree's instance as its source, and makes the second's own.
    let branched = second.ok("branch", json!({"name": "db", "from": "main"}));
    let second_key = branched["instance"]["key"].as_str().unwrap().to_owned();
    assert_ne!(second_key, first_key, "{branched}");
    assert_eq!(branched["instance"]["scope"], "worktree", "{branched}");
    let read = second.ok(
        "exec",
        json!({"name": "db", "argv": ["cat", "/srv/data/origin"]}),
    );
    assert_eq!(read["stdout"], "from-main\n", "{read}");
    // The first's data is untouched, and the first's server does not see the second's.
    let still = first.ok(
        "exec",
        json!({"name": "db", "argv": ["cat", "/srv/data/origin"]}),
    );
    assert_eq!(still["stdout"], "from-main\n", "{still}");
    let mine = first.ok("list_instances", json!({}));
    assert!(!mine.to_string().contains(&second_key), "{mine}");
    let (text, _) = first.refused("logs", json!({"name": second_key}));
    assert!(text.contains("out of reach"), "{text}");
}

#[test]
fn the_documented_agent_key_may_read_exec_and_snapshot_in_its_repository_and_nothing_else() {
    // At first the agent's key (acting for the developer's) may only read.
    let read_only = format!(
        "[keys.{agent}]\nactsFor = \"{dev}\"\ncapabilities = [\"read\"]\n",
        agent = key_id(WORKTREE_AGENT_KEY),
        dev = key_id(KEY),
    );
    let mut daemon = Launch::new()
        .keys(&[KEY, WORKTREE_AGENT_KEY])
        .grants(&read_only)
        .start();
    let repo = repo(&busybox_project());
    let mut developer = Session::start(&daemon, &repo.main, KEY);
    let up = developer.ok("up", json!({}));
    assert_eq!(up["instances"][0]["outcome"], "running", "{up}");
    let domain_name = developer.ok("list_instances", json!({}))["repository"]
        .as_str()
        .unwrap()
        .to_owned();
    drop(developer);

    // docs/mcp.md's key: read everywhere, exec and snapshot in this repository's domain, by name.
    let documented = format!(
        "{read_only}serviceDeploymentGrants = [\n  {{ serviceId = \"{domain_name}\", capabilities = [\"instances:exec\", \"data:snapshot\"] }},\n]\n"
    );
    daemon.rewrite_grants(&documented);
    daemon.restart();
    let mut agent = Session::start(&daemon, &repo.main, WORKTREE_AGENT_KEY);
    assert_eq!(
        agent.tool_names(),
        [
            "branch",
            "environment",
            "exec",
            "list_instances",
            "logs",
            "restore",
            "snapshot",
            "wait_running"
        ]
    );
    let listed = agent.ok("list_instances", json!({}));
    assert_eq!(listed["instances"][0]["state"], "running", "{listed}");
    let wrote = agent.ok(
        "exec",
        json!({"name": "db", "argv": ["sh", "-c", "echo kept > /srv/data/note"]}),
    );
    assert_eq!(wrote["exitCode"], 0, "{wrote}");
    let snap = agent.ok("snapshot", json!({"name": "db", "label": "agent"}));
    assert!(
        snap["snapshot"]["snapshotId"]
            .as_str()
            .unwrap()
            .starts_with("snp:"),
        "{snap}"
    );
    let (_, refusal) = agent.refused("up", json!({}));
    assert_eq!(
        refusal["capability"], "deployment:create-greenfield",
        "{refusal}"
    );
    agent.never_showed(WORKTREE_AGENT_KEY);
}
