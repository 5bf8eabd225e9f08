//! What the end-to-end tests share: a real `berth serve` on a loopback port with its own data
//! directory and Docker prefix, a client for its API, and the fixture images.
//!
//! The fixtures (a local registry and FROM-scratch busybox images pinned by digest) are prepared
//! by `scripts/test`; a test that needs one and finds none panics saying so.

#![allow(dead_code)]

pub mod registry;
pub mod second_node;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

/// The service key the test daemons accept first.
pub const KEY: &str = "test-key-aaaaaaaaaaaaaaaa";
/// A second key, for ownership tests.
pub const OTHER_KEY: &str = "test-key-bbbbbbbbbbbbbbbb";

/// A fixture's env var, or a panic that says how to get it.
pub fn fixture(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the tests with scripts/test, which prepares the fixture registry and images")
    })
}

/// The busybox image (httpd on 8080, every applet).
pub fn busybox_image() -> String {
    fixture("BERTH_TEST_BUSYBOX_IMAGE")
}

/// The busybox image with `VOLUME /data`.
pub fn volume_image() -> String {
    fixture("BERTH_TEST_VOLUME_IMAGE")
}

/// The echo image (a TCP echo server on 7000, beside a static busybox).
pub fn echo_image() -> String {
    fixture("BERTH_TEST_ECHO_IMAGE")
}

/// The echo server alone in its image: no shell, no `cp`, no tools at all.
pub fn bare_image() -> String {
    fixture("BERTH_TEST_BARE_IMAGE")
}

/// The prefix of every Docker object this test run creates.
pub fn run_prefix() -> String {
    std::env::var("BERTH_TEST_PREFIX")
        .unwrap_or_else(|_| format!("berth-t{:08x}", std::process::id()))
}

/// A prefix for one daemon: the run's, this test binary's pid, and a counter.
pub fn daemon_prefix() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}-{}x{}",
        run_prefix(),
        std::process::id() % 100_000,
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// A daemon under test. Stopped (and its Docker objects removed) when dropped.
pub struct Daemon {
    child: Option<Child>,
    pub base: String,
    pub data_dir: PathBuf,
    pub prefix: String,
    _tmp: Option<tempfile::TempDir>,
    extra_args: Vec<String>,
    extra_env: Vec<(String, String)>,
    log_level: String,
    pub log: PathBuf,
}

impl Daemon {
    /// A daemon with Docker, in a fresh data directory.
    pub fn start() -> Daemon {
        Self::start_with(&[])
    }

    /// A daemon with extra `serve` arguments.
    pub fn start_with(args: &[&str]) -> Daemon {
        Self::start_logging(
            args,
            &std::env::var("BERTH_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
    }

    /// A daemon with extra `serve` arguments and the given `RUST_LOG`.
    pub fn start_logging(args: &[&str], level: &str) -> Daemon {
        Self::launch(args, &[], level)
    }

    /// A second daemon on another daemon's prefix, in a fresh data directory of its own, as a
    /// test daemon beside a person's would be; with `empty_database`, that directory holds a
    /// zero-length `berth.db` when it starts.
    pub fn start_sharing(prefix: &str, args: &[&str], empty_database: bool) -> Daemon {
        Self::launch_on(prefix, args, &[], "info", |data_dir| {
            if empty_database {
                std::fs::create_dir_all(data_dir).expect("the data directory");
                std::fs::write(data_dir.join("berth.db"), b"").expect("an empty berth.db");
            }
        })
    }

    /// Starts a daemon in a fresh data directory with its own prefix.
    fn launch(args: &[&str], env: &[(&str, &str)], level: &str) -> Daemon {
        Self::launch_on(&daemon_prefix(), args, env, level, |_| {})
    }

    fn launch_on(
        prefix: &str,
        args: &[&str],
        env: &[(&str, &str)],
        level: &str,
        prepare: impl FnOnce(&std::path::Path),
    ) -> Daemon {
        let tmp = tempfile::tempdir().expect("a temporary directory");
        prepare(&tmp.path().join("data"));
        let mut d = Daemon {
            child: None,
            base: String::new(),
            log: tmp.path().join("daemon.log"),
            data_dir: tmp.path().join("data"),
            prefix: prefix.to_owned(),
            _tmp: Some(tmp),
            extra_args: args.iter().map(|s| s.to_string()).collect(),
            extra_env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            log_level: level.to_owned(),
        };
        d.spawn();
        d
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("the daemon log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--prefix", &self.prefix])
            .args(["--stop-timeout", "2s"])
            .args(&self.extra_args)
            .env("BERTH_SERVICE_KEYS", format!("{KEY},{OTHER_KEY}"))
            .envs(self.extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RUST_LOG", &self.log_level)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("the berth binary starts");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the daemon prints its address");
        let address = line
            .trim()
            .strip_prefix("berth listening on ")
            .unwrap_or_else(|| {
                panic!(
                    "the daemon did not start: {line:?}; log: {}",
                    self.log_text()
                )
            })
            .to_owned();
        self.base = address;
        self.child = Some(child);
    }

    /// A daemon with Docker and extra environment variables (`DOCKER_HOST`, say).
    pub fn start_with_env(env: &[(&str, &str)]) -> Daemon {
        Self::launch(
            &[],
            env,
            &std::env::var("BERTH_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon runs").id()
    }

    /// The daemon's resident memory in KiB, from /proc.
    pub fn rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("/proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// The daemon's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops the daemon gracefully (SIGTERM) and waits for it.
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            wait_exit(child, Duration::from_secs(10));
        }
    }

    /// Sends SIGTERM and waits for the daemon to exit, for at most `bound`. Returns its exit
    /// status (`None` if it still ran at `bound`, when it is killed) and how long it took.
    pub fn terminate(&mut self, bound: Duration) -> (Option<std::process::ExitStatus>, Duration) {
        let child = self.child.take().expect("the daemon runs");
        let started = Instant::now();
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let (output, by_itself) = wait_exit(child, bound);
        let took = started.elapsed();
        (by_itself.then_some(output.status), took)
    }

    /// `host:port` the daemon listens on.
    pub fn address(&self) -> String {
        self.base
            .strip_prefix("http://")
            .unwrap_or(&self.base)
            .to_owned()
    }

    /// Opens an exec over a raw connection: the headers and the frame line go out, with stdin
    /// chunked and never ended. The connection is returned open; dropping it is a client that
    /// goes away mid-body.
    pub fn open_exec(&self, domain: &str, key: &str, argv: &[&str], timeout_ms: u64) -> TcpStream {
        let frame = format!(
            "{}\n",
            json!({"argv": argv, "user": null, "timeoutMs": timeout_ms})
        );
        let mut stream = TcpStream::connect(self.address()).expect("connect to the daemon");
        let head = format!(
            "POST /v1/resource-domains/{domain}/instances/{key}/exec HTTP/1.1\r\nHost: {}\r\n\
             Authorization: Bearer {KEY}\r\nContent-Type: application/octet-stream\r\n\
             Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{frame}\r\n",
            self.address(),
            frame.len()
        );
        stream.write_all(head.as_bytes()).expect("send the exec");
        stream
    }

    /// Opens `GET .../logs?follow=true` over a raw connection and reads its response head.
    pub fn open_follow_logs(&self, domain: &str, key: &str) -> TcpStream {
        let mut stream = TcpStream::connect(self.address()).expect("connect to the daemon");
        let head = format!(
            "GET /v1/resource-domains/{domain}/instances/{key}/logs?follow=true HTTP/1.1\r\n\
             Host: {}\r\nAuthorization: Bearer {KEY}\r\n\r\n",
            self.address()
        );
        stream.write_all(head.as_bytes()).expect("ask for the logs");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            stream
                .read_exact(&mut byte)
                .expect("the logs' response head");
            got.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&got);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        stream
    }

    /// Kills the daemon with SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the daemon again on the same data directory (on a new port).
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// Starts the daemon after a [`Daemon::kill9`].
    pub fn start_again(&mut self) {
        assert!(self.child.is_none());
        self.spawn();
    }

    /// A client with the first key.
    pub fn client(&self) -> Client {
        Client::new(&self.base, Some(KEY))
    }

    /// A client with the given key (or none).
    pub fn client_with(&self, key: Option<&str>) -> Client {
        Client::new(&self.base, key)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            self.report_failure();
        }
        remove_docker_objects(&self.prefix);
    }
}

impl Daemon {
    /// What a failed test leaves to read: the end of the daemon's log and of every container's
    /// output under its prefix, printed before they are removed.
    fn report_failure(&self) {
        const LINES: usize = 200;
        let log = self.log_text();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(LINES);
        eprintln!(
            "---- the daemon's log, last {} of {} lines ----\n{}",
            lines.len() - from,
            lines.len(),
            lines[from..].join("\n")
        );
        let Ok(listing) = Command::new("docker")
            .args(["ps", "-a", "--format", "{{.Names}}\t{{.Status}}"])
            .output()
        else {
            return;
        };
        for row in String::from_utf8_lossy(&listing.stdout).lines() {
            let name = row.split('\t').next().unwrap_or_default();
            if !name.starts_with(&self.prefix) {
                continue;
            }
            let output = Command::new("docker")
                .args(["logs", "--tail", "40", name])
                .output()
                .map(|o| {
                    format!(
                        "{}{}",
                        String::from_utf8_lossy(&o.stdout),
                        String::from_utf8_lossy(&o.stderr)
                    )
                })
                .unwrap_or_default();
            eprintln!("---- container {row}, last 40 lines ----\n{output}");
        }
    }
}

/// Removes every container, network and volume whose name starts with `prefix` (test objects).
pub fn remove_docker_objects(prefix: &str) {
    let list = |args: &[&str]| -> Vec<String> {
        Command::new("docker")
            .args(args)
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mine = |names: Vec<String>| -> Vec<String> {
        names
            .into_iter()
            .filter(|n| n.starts_with(&format!("{prefix}-")) || n == prefix)
            .collect()
    };
    let containers = mine(list(&["ps", "-a", "--format", "{{.Names}}"]));
    if !containers.is_empty() {
        let _ = Command::new("docker")
            .args(["rm", "-f"])
            .args(&containers)
            .output();
    }
    let networks = mine(list(&["network", "ls", "--format", "{{.Name}}"]));
    if !networks.is_empty() {
        let _ = Command::new("docker")
            .args(["network", "rm"])
            .args(&networks)
            .output();
    }
    let volumes = mine(list(&["volume", "ls", "--format", "{{.Name}}"]));
    if !volumes.is_empty() {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f"])
            .args(&volumes)
            .output();
    }
}

/// The runtime the tests' typed calls run on: one for the test binary, shared by its threads.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// Runs `future` to its end on [`runtime`].
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// A client for the daemon's API: typed calls through `berth-client` ([`Client::api`]), and raw
/// requests for the tests that send what no client would.
pub struct Client {
    base: String,
    key: Option<String>,
    http: reqwest::blocking::Client,
    api: berth_client::Client,
}

/// A response: its status and JSON body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Value,
}

impl Answer {
    /// Panics unless the status is `status`; returns the body.
    pub fn expect(self, status: u16) -> Value {
        assert_eq!(self.status, status, "unexpected answer: {}", self.body);
        self.body
    }

    /// Panics unless this is the error `tag` with `status`; returns the body.
    pub fn expect_error(self, status: u16, tag: &str) -> Value {
        assert_eq!(self.status, status, "unexpected answer: {}", self.body);
        assert_eq!(self.body["_tag"], tag, "unexpected error: {}", self.body);
        assert!(
            self.body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}",
            self.body
        );
        self.body
    }
}

impl Client {
    pub fn new(base: &str, key: Option<&str>) -> Self {
        // Poll often on a daemon without the wait route: a test may wait for a brief state.
        let mut api = berth_client::Client::builder(base).poll_every(Duration::from_millis(50));
        if let Some(key) = key {
            api = api.key(key);
        }
        Self {
            base: base.to_owned(),
            key: key.map(str::to_owned),
            http: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .expect("an http client"),
            api: api.build().expect("a berth client"),
        }
    }

    /// The typed client, for [`block_on`].
    pub fn api(&self) -> &berth_client::Client {
        &self.api
    }

    /// Sends `method path` with an optional raw body and extra headers.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("a method");
        let mut req = self.http.request(method, format!("{}{}", self.base, path));
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(body) = body {
            req = req.header("content-type", "application/json").body(body);
        }
        let res = req.send().expect("the daemon answers");
        let status = res.status().as_u16();
        let text = res.text().expect("a body");
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Answer { status, body }
    }

    /// POSTs a streamed body.
    pub fn post_stream(&self, path: &str, body: impl std::io::Read + Send + 'static) -> Answer {
        let mut req = self.http.post(format!("{}{}", self.base, path));
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        let res = req
            .body(reqwest::blocking::Body::new(body))
            .send()
            .expect("the daemon answers");
        let status = res.status().as_u16();
        let text = res.text().expect("a body");
        Answer {
            status,
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        }
    }

    /// Runs `argv` in an instance through the exec route with `stdin`.
    pub fn exec(
        &self,
        domain: &str,
        key: &str,
        argv: &[&str],
        user: Option<&str>,
        timeout_ms: u64,
        stdin: &[u8],
    ) -> Answer {
        let mut body = json!({"argv": argv, "user": user, "timeoutMs": timeout_ms})
            .to_string()
            .into_bytes();
        body.push(b'\n');
        body.extend_from_slice(stdin);
        self.raw(
            "POST",
            &format!("/v1/resource-domains/{domain}/instances/{key}/exec"),
            Some(body),
            &[],
        )
    }

    pub fn get(&self, path: &str) -> Answer {
        self.raw("GET", path, None, &[])
    }

    pub fn post(&self, path: &str, body: Value) -> Answer {
        self.raw("POST", path, Some(body.to_string().into_bytes()), &[])
    }

    pub fn post_empty(&self, path: &str) -> Answer {
        self.raw("POST", path, None, &[])
    }

    /// Creates a domain and returns its id.
    pub fn create_domain(&self, name: &str) -> String {
        block_on(self.api.create_domain(name))
            .unwrap_or_else(|e| panic!("creating domain {name:?}: {e}"))
            .resource_domain_id
    }

    /// `up` through the typed client: the instance as stored, or a panic naming the error.
    pub fn up_ok(
        &self,
        domain: &str,
        key: &str,
        spec: &Value,
        cause: &str,
    ) -> berth_client::Instance {
        let cause = match cause {
            "use" => berth_client::Cause::Use,
            "person" => berth_client::Cause::Person,
            other => panic!("no cause {other:?}"),
        };
        block_on(self.api.up(domain, key, spec, cause))
            .unwrap_or_else(|e| panic!("up of {key}: {e}"))
    }

    /// `get` an instance through the typed client.
    pub fn get_instance(&self, domain: &str, key: &str) -> berth_client::Instance {
        block_on(self.api.instance(domain, key)).unwrap_or_else(|e| panic!("get of {key}: {e}"))
    }

    /// `up` with a spec and cause.
    pub fn up(&self, domain: &str, key: &str, spec: &Value, cause: &str) -> Answer {
        self.post(
            &format!("/v1/resource-domains/{domain}/instances/{key}/up"),
            json!({"spec": spec, "cause": cause}),
        )
    }

    /// `get` an instance, decoded by the typed client (so a shape it cannot read fails here),
    /// as JSON for the tests that look into it.
    pub fn instance(&self, domain: &str, key: &str) -> Value {
        serde_json::to_value(self.get_instance(domain, key)).expect("an instance as JSON")
    }

    /// Waits until `done(instance)` or `timeout`, and returns the instance: told of each change
    /// by the domain's event stream, never asking on a timer. `done` runs outside any async
    /// context, so it may make blocking requests of its own.
    pub fn wait_for(
        &self,
        domain: &str,
        key: &str,
        timeout: Duration,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        // A new subscription starts with every instance, so the first look after subscribing
        // comes after it: no change falls between them.
        let mut events = Box::pin(self.api.events(domain, None));
        loop {
            let instance = self.instance(domain, key);
            if done(&instance) {
                return instance;
            }
            let woke = block_on(async {
                loop {
                    match tokio::time::timeout_at(deadline, events.next()).await {
                        Err(_) => return None,
                        Ok(Some(Ok(berth_client::DomainEvent::Instance { instance, .. })))
                            if instance.key != key => {}
                        Ok(Some(Ok(_))) => return Some(true),
                        Ok(Some(Err(e))) => panic!("the event stream failed: {e}"),
                        // The daemon ended the stream: subscribe again.
                        Ok(None) => return Some(false),
                    }
                }
            });
            match woke {
                None => panic!("{key} did not become {what} within {timeout:?}: {instance}"),
                Some(true) => {}
                Some(false) => events = Box::pin(self.api.events(domain, None)),
            }
        }
    }

    /// Asks the wait route once until the instance's state kind is one of `kinds` and berth has
    /// acted on the latest request made of it (`observedGeneration == generation`); panics at
    /// `timeout` (at most 300 s). What a test asserts after this is what berth settled on, not
    /// what it had not got to yet.
    pub fn settled(&self, domain: &str, key: &str, kinds: &[&str], timeout: Duration) -> Value {
        let waited = block_on(self.api.wait(domain, key, kinds, timeout))
            .unwrap_or_else(|e| panic!("waiting for {key} to settle as {kinds:?}: {e}"));
        assert!(
            !waited.timed_out,
            "{key} did not settle as {kinds:?} within {timeout:?} (generation {}, observed {}): {:?}",
            waited.generation, waited.observed_generation, waited.instance
        );
        assert_eq!(
            waited.observed_generation, waited.generation,
            "the wait route answered before berth acted on the latest request: {:?}",
            waited.instance
        );
        serde_json::to_value(waited.instance).expect("an instance as JSON")
    }

    /// Subscribes to the domain's event stream, for [`Watch::never`]: a bounded check that
    /// something does *not* happen.
    pub fn watch(&self, domain: &str) -> Watch {
        Watch {
            events: Box::pin(self.api.events(domain, None)),
        }
    }

    /// Waits through the client's one wait (the wait route, or polling on a daemon without
    /// it) until the instance's state kind is `kind`; panics at `timeout`.
    pub fn wait_state(&self, domain: &str, key: &str, kind: &str, timeout: Duration) -> Value {
        serde_json::to_value(self.wait_state_typed(domain, key, kind, timeout))
            .expect("an instance as JSON")
    }

    /// [`Client::wait_state`], typed.
    pub fn wait_state_typed(
        &self,
        domain: &str,
        key: &str,
        kind: &str,
        timeout: Duration,
    ) -> berth_client::Instance {
        let settled = block_on(
            self.api
                .wait_for_state(domain, key, &[kind], timeout, |_| true),
        )
        .unwrap_or_else(|e| panic!("waiting for {key} to be {kind}: {e}"));
        assert!(
            !settled.timed_out,
            "{key} did not become {kind} within {timeout:?}: {:?}",
            settled.instance
        );
        settled.instance
    }
}

/// A subscription to a domain's event stream, opened by [`Client::watch`].
pub struct Watch {
    events: std::pin::Pin<
        Box<
            dyn futures_util::Stream<
                    Item = Result<berth_client::DomainEvent, berth_client::ClientError>,
                > + Send,
        >,
    >,
}

impl Watch {
    /// The one bounded negative check: reads the domain's events for `within` (the first ones
    /// are every instance as it is now) and panics if any instance event shows `bad` (the
    /// instance as JSON). There is no positive signal for "this did not happen", so the check
    /// lasts a fixed time; a test uses it only for what must *not* happen, and says so.
    pub fn never(&mut self, within: Duration, what: &str, bad: impl Fn(&Value) -> bool) {
        let deadline = tokio::time::Instant::now() + within;
        block_on(async {
            loop {
                match tokio::time::timeout_at(deadline, self.events.next()).await {
                    Err(_) => return,
                    Ok(Some(Ok(berth_client::DomainEvent::Instance { instance, .. }))) => {
                        let instance = serde_json::to_value(instance).expect("an instance");
                        assert!(!bad(&instance), "{what}: {instance}");
                    }
                    Ok(Some(Ok(
                        berth_client::DomainEvent::Resync { .. }
                        | berth_client::DomainEvent::Copy { .. },
                    ))) => {}
                    Ok(Some(Err(e))) => panic!("the event stream failed: {e}"),
                    Ok(None) => panic!("the event stream ended while checking that {what}"),
                }
            }
        })
    }
}

/// Waits for `child` to exit, for at most `bound`, and kills it then: a thread blocks in its wait
/// (std has no bounded wait for a child), so nothing polls. Returns its output (of the pipes not
/// taken) and whether it exited by itself.
pub fn wait_exit(child: Child, bound: Duration) -> (std::process::Output, bool) {
    let pid = child.id();
    let (exited, exit) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = exited.send(child.wait_with_output());
    });
    let (output, by_itself) = match exit.recv_timeout(bound) {
        Ok(output) => (output, true),
        Err(_) => {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(pid.to_string())
                .status();
            (exit.recv().expect("the waiting thread answers"), false)
        }
    };
    (output.expect("the child's exit"), by_itself)
}

/// Polls `done` until it holds or `timeout` passes; panics naming `what` then. For conditions
/// berth has no event for (the engine's state, a log line, a process): what berth does is
/// waited on with [`Client::wait_for`], [`Client::wait_state`] or [`Client::settled`].
pub fn wait_until(timeout: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() > deadline {
            panic!("{what} did not happen within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The argv of every process in a container, as busybox `ps -o args` prints them.
pub fn processes(container: &str) -> String {
    docker(&["exec", container, "ps", "-o", "args"])
}

/// A valid spec for `image` with a tcp ready check on 8080.
pub fn spec(image: &str, alias: &str) -> Value {
    json!({
        "alias": alias,
        "worktreeKey": null,
        "image": image,
        "command": null,
        "env": {"GREETING": "hello"},
        "volumes": [{"name": "data", "mountPath": "/srv/data"}],
        "limits": {"cpuMillicores": 250, "memoryBytes": 67108864},
        "ready": {"kind": "tcp", "port": 8080},
        "idleStopAfterSeconds": 3600
    })
}

/// `docker inspect` of an object, as JSON.
pub fn docker_inspect(kind: &str, name: &str) -> Option<Value> {
    let out = Command::new("docker")
        .args([kind, "inspect", name])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v.as_array()?.first().cloned()
}

/// Runs `docker args...`, panicking on failure, and returns stdout.
pub fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Names of containers whose name starts with `prefix`.
pub fn containers_named(prefix: &str) -> Vec<String> {
    docker(&["ps", "-a", "--format", "{{.Names}}"])
        .lines()
        .filter(|n| n.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// `value` as JSON text with every object's keys in reverse order and extra whitespace.
pub fn reorder_keys(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let parts: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| format!("\n  {} : {}", Value::String(k.clone()), reorder_keys(v)))
                .collect();
            format!("{{{} }}", parts.join(","))
        }
        Value::Array(items) => format!(
            "[ {} ]",
            items
                .iter()
                .map(reorder_keys)
                .collect::<Vec<_>>()
                .join(" , ")
        ),
        other => other.to_string(),
    }
}

/// Names of the containers labelled with instance id `id`.
pub fn containers_labelled(id: &str) -> Vec<String> {
    docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=berth.instance={id}"),
        "--format",
        "{{.Names}}",
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

/// Names of the containers of an instance (as the API answers it).
pub fn containers_of(instance: &Value) -> Vec<String> {
    containers_labelled(
        instance["resourceInstanceId"]
            .as_str()
            .expect("an instance id"),
    )
}

/// The one container of an instance; panics unless there is exactly one.
pub fn container_of(instance: &Value) -> String {
    let names = containers_of(instance);
    assert_eq!(
        names.len(),
        1,
        "exactly one container for {}: {names:?}",
        instance["resourceInstanceId"]
    );
    names[0].clone()
}

/// What `GET /who` on `<host>:8080` answers from inside `container`, or None when it cannot.
/// The name is resolved with busybox's own DNS client (`nslookup`), through Docker's embedded
/// DNS, and the request sent with `nc`: a static busybox's `wget` cannot use the C library's
/// resolver.
pub fn who_from(container: &str, host: &str) -> Option<String> {
    let script = format!(
        "ip=$(nslookup -type=a {host} 2>/dev/null | awk '/^Address: /{{print $2; exit}}'); \
         [ -n \"$ip\" ] && printf 'GET /who HTTP/1.0\\r\\n\\r\\n' | nc -w 2 \"$ip\" 8080 | tail -n 1"
    );
    let out = std::process::Command::new("docker")
        .args(["exec", container, "sh", "-c", &script])
        .output()
        .expect("docker exec");
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !answer.is_empty()).then_some(answer)
}
