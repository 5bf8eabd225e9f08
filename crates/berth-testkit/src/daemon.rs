//! The daemon launcher: a real `berth serve` on `127.0.0.1:0`, its own data directory, Docker
//! prefix and service keys.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::{Client, KEY, OTHER_KEY, daemon_prefix, remove_docker_objects, wait_exit};

/// The environment variable that names the `berth` binary the launcher starts, when
/// [`Launch::binary`] does not.
pub const BERTH_BIN_ENV: &str = "BERTH_TESTKIT_BERTH";

/// How long a daemon may take to print its address, unless [`Launch::start_timeout`] says.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The `berth` binary a [`Launch`] starts when it is not given one:
///
/// 1. the path in `BERTH_TESTKIT_BERTH` ([`BERTH_BIN_ENV`]), if set;
/// 2. else `CARGO_BIN_EXE_berth`, if Cargo set it in the environment at run time;
/// 3. else `berth` beside the running executable, or beside its directory when that directory
///    is `deps/`: an integration test runs from `target/<profile>/deps/<test>-<hash>`, and Cargo
///    builds the package's binaries into `target/<profile>/` before it runs the package's
///    integration tests; the benchmark runs from `target/<profile>/berth-bench`.
///
/// Panics, saying what it looked for, when the file is not there.
pub fn berth_binary() -> PathBuf {
    for var in [BERTH_BIN_ENV, "CARGO_BIN_EXE_berth"] {
        if let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "{var} names {}, which is not a file",
                path.display()
            );
            return path;
        }
    }
    let exe = std::env::current_exe().expect("the running executable's path");
    let mut dir = exe
        .parent()
        .expect("the executable's directory")
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let path = dir.join("berth");
    assert!(
        path.is_file(),
        "no berth binary at {} (looked beside {}): build it (`cargo build -p berth`; `cargo test` \
         builds it for the end-to-end tests), or name it in {BERTH_BIN_ENV}",
        path.display(),
        exe.display()
    );
    path
}

/// How to start a [`Daemon`]. [`Launch::new`] has the tests' defaults: [`berth_binary`], a
/// fresh [`daemon_prefix`], the keys [`KEY`] and [`OTHER_KEY`], `RUST_LOG` from
/// `BERTH_TEST_LOG` (else `info`), a fresh data directory, and the daemon's Docker objects
/// removed when it is dropped.
#[derive(Debug, Clone)]
pub struct Launch {
    binary: Option<PathBuf>,
    prefix: Option<String>,
    keys: Vec<String>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log_level: Option<String>,
    data_dir: Option<PathBuf>,
    empty_database: bool,
    remove_on_drop: bool,
    start_timeout: Duration,
    grants: Option<String>,
}

impl Default for Launch {
    fn default() -> Self {
        Self::new()
    }
}

impl Launch {
    /// The tests' defaults; see [`Launch`].
    pub fn new() -> Launch {
        Launch {
            binary: None,
            prefix: None,
            keys: vec![KEY.to_owned(), OTHER_KEY.to_owned()],
            args: Vec::new(),
            env: Vec::new(),
            log_level: None,
            data_dir: None,
            empty_database: false,
            remove_on_drop: true,
            start_timeout: START_TIMEOUT,
            grants: None,
        }
    }

    /// The `berth` binary to start (else [`berth_binary`]).
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Launch {
        self.binary = Some(path.into());
        self
    }

    /// The daemon's Docker prefix (else a fresh [`daemon_prefix`]). Every object it makes is
    /// named `<prefix>-…`.
    pub fn prefix(mut self, prefix: &str) -> Launch {
        self.prefix = Some(prefix.to_owned());
        self
    }

    /// The service keys it accepts (`BERTH_SERVICE_KEYS`), instead of [`KEY`] and [`OTHER_KEY`].
    pub fn keys<S: AsRef<str>>(mut self, keys: &[S]) -> Launch {
        self.keys = keys.iter().map(|k| k.as_ref().to_owned()).collect();
        self
    }

    /// Extra `serve` arguments.
    pub fn args<S: AsRef<str>>(mut self, args: &[S]) -> Launch {
        self.args.extend(args.iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// An extra environment variable (`DOCKER_HOST`, `BERTH_RUNTIME`, ...).
    pub fn env(mut self, name: &str, value: &str) -> Launch {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The daemon's `RUST_LOG`.
    pub fn log_level(mut self, level: &str) -> Launch {
        self.log_level = Some(level.to_owned());
        self
    }

    /// Keeps the data in `dir` (so a second daemon can start on a first one's store) instead
    /// of a fresh directory.
    pub fn data_dir(mut self, dir: &Path) -> Launch {
        self.data_dir = Some(dir.to_path_buf());
        self
    }

    /// The data directory holds a zero-length `berth.db` when the daemon starts.
    pub fn empty_database(mut self) -> Launch {
        self.empty_database = true;
        self
    }

    /// Leaves the daemon's Docker objects when it is dropped: the caller removes them (the
    /// benchmark does, at its end, so a restarted daemon finds its predecessor's).
    pub fn keep_docker_objects(mut self) -> Launch {
        self.remove_on_drop = false;
        self
    }

    /// A grants file with this text (`--grants`; docs/security.md, "Capabilities"): name the
    /// keys by [`crate::key_id`].
    pub fn grants(mut self, text: &str) -> Launch {
        self.grants = Some(text.to_owned());
        self
    }

    /// How long the daemon may take to print its address (120 s unless set).
    pub fn start_timeout(mut self, timeout: Duration) -> Launch {
        self.start_timeout = timeout;
        self
    }

    /// Starts the daemon and waits for the line that names its address; panics saying why it
    /// did not start.
    pub fn start(self) -> Daemon {
        self.try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Launch::start`], with the reason it did not start as an error.
    pub fn try_start(self) -> Result<Daemon, String> {
        let tmp = tempfile::Builder::new()
            .prefix("berth-testkit-")
            .tempdir()
            .map_err(|e| format!("a temporary directory: {e}"))?;
        let data_dir = self
            .data_dir
            .clone()
            .unwrap_or_else(|| tmp.path().join("data"));
        if self.empty_database {
            std::fs::create_dir_all(&data_dir)
                .and_then(|()| std::fs::write(data_dir.join("berth.db"), b""))
                .map_err(|e| format!("an empty berth.db in {}: {e}", data_dir.display()))?;
        }
        let mut launch = self;
        if let Some(text) = launch.grants.take() {
            let path = tmp.path().join("grants.toml");
            std::fs::write(&path, text).map_err(|e| format!("the grants file: {e}"))?;
            launch.args.push("--grants".into());
            launch.args.push(path.display().to_string());
        }
        let binary = launch.binary.clone().unwrap_or_else(berth_binary);
        let log_level = launch
            .log_level
            .clone()
            .unwrap_or_else(|| std::env::var("BERTH_TEST_LOG").unwrap_or_else(|_| "info".into()));
        let mut d = Daemon {
            child: None,
            base: String::new(),
            log: tmp.path().join("daemon.log"),
            data_dir,
            prefix: launch.prefix.clone().unwrap_or_else(daemon_prefix),
            _tmp: Some(tmp),
            binary,
            log_level,
            launch,
        };
        d.try_spawn()?;
        Ok(d)
    }
}

/// A daemon under test. Killed when dropped, and its Docker objects (everything named with its
/// prefix) removed unless it was started with [`Launch::keep_docker_objects`]; a test that
/// panics prints the end of the daemon's log and of its containers' output first.
pub struct Daemon {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub data_dir: PathBuf,
    pub prefix: String,
    _tmp: Option<tempfile::TempDir>,
    binary: PathBuf,
    log_level: String,
    launch: Launch,
    pub log: PathBuf,
}

impl Daemon {
    /// A daemon with Docker, in a fresh data directory.
    pub fn start() -> Daemon {
        Launch::new().start()
    }

    /// A daemon with extra `serve` arguments.
    pub fn start_with(args: &[&str]) -> Daemon {
        Launch::new().args(args).start()
    }

    /// A daemon with extra `serve` arguments and the given `RUST_LOG`.
    pub fn start_logging(args: &[&str], level: &str) -> Daemon {
        Launch::new().args(args).log_level(level).start()
    }

    /// A second daemon on another daemon's prefix, in a fresh data directory of its own, as a
    /// test daemon beside a person's would be; with `empty_database`, that directory holds a
    /// zero-length `berth.db` when it starts.
    pub fn start_sharing(prefix: &str, args: &[&str], empty_database: bool) -> Daemon {
        let launch = Launch::new().prefix(prefix).args(args).log_level("info");
        if empty_database {
            launch.empty_database().start()
        } else {
            launch.start()
        }
    }

    /// A daemon with Docker and extra environment variables (`DOCKER_HOST`, say).
    pub fn start_with_env(env: &[(&str, &str)]) -> Daemon {
        env.iter()
            .fold(Launch::new(), |l, (k, v)| l.env(k, v))
            .start()
    }

    fn spawn(&mut self) {
        if let Err(e) = self.try_spawn() {
            panic!("{e}");
        }
    }

    fn try_spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("the daemon log {}: {e}", self.log.display()))?;
        let launch = &self.launch;
        let mut child = Command::new(&self.binary)
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--prefix", &self.prefix])
            .args(["--stop-timeout", "2s"])
            .args(&launch.args)
            .env("BERTH_SERVICE_KEYS", launch.keys.join(","))
            .envs(launch.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RUST_LOG", &self.log_level)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("{} could not start: {e}", self.binary.display()))?;
        let stdout = child.stdout.take().expect("stdout");
        // The first line names the address; the rest is read and dropped, so the daemon never
        // blocks on a full pipe or writes to a closed one.
        let (said, first) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = said.send(lines.next());
            for _ in lines.by_ref() {}
        });
        let line = match first.recv_timeout(launch.start_timeout) {
            Ok(Some(Ok(line))) => line,
            Ok(_) => {
                let _ = wait_exit(child, Duration::from_secs(10));
                return Err(format!(
                    "the daemon ended before it listened; log: {}",
                    self.log_text()
                ));
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "the daemon printed no address within {:?}; log: {}",
                    launch.start_timeout,
                    self.log_text()
                ));
            }
        };
        let Some(address) = line.trim().strip_prefix("berth listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "the daemon did not start: {line:?}; log: {}",
                self.log_text()
            ));
        };
        self.base = address.to_owned();
        self.child = Some(child);
        Ok(())
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon runs").id()
    }

    /// The daemon's process id, while it runs.
    pub fn try_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
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

    /// The last `n` lines of the daemon's log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Stops the daemon gracefully (SIGTERM) and waits for it; killed if it has not ended
    /// within 10 s.
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
        let head = read_head(&mut stream);
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

    /// Rewrites the grants file the daemon was started with ([`Launch::grants`]): the daemon
    /// reads it at its next start ([`Daemon::restart`]).
    pub fn rewrite_grants(&self, text: &str) {
        let path = self
            .launch
            .args
            .iter()
            .skip_while(|a| *a != "--grants")
            .nth(1)
            .expect("the daemon was started with a grants file");
        std::fs::write(path, text).expect("the grants file is written");
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
        if self.launch.remove_on_drop {
            remove_docker_objects(&self.prefix);
        }
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

/// Reads a response head off a raw connection, byte by byte (so nothing of the body is taken),
/// waiting up to 30 s for it.
pub fn read_head(stream: &mut TcpStream) -> String {
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).expect("a response head");
        got.push(byte[0]);
    }
    String::from_utf8_lossy(&got).into_owned()
}
