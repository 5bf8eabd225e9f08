//! berth's test kit: what the end-to-end tests in `tests/` and the benchmark binary
//! (`crates/berth-bench`) share.
//!
//! - [`Daemon`] and [`Launch`]: a real `berth serve` on a loopback port with its own data
//!   directory, Docker prefix and service keys; see [`berth_binary`] for how the binary is found.
//! - [`Client`]: a blocking client for its API, typed calls through `berth-client` and raw
//!   requests for what no client would send, with the waits the tests use.
//! - The fixtures ([`fixture`], [`busybox_image`], ...) that `scripts/test` prepares, and the
//!   standard spec ([`spec`]).
//! - Docker helpers: the cleanup by prefix ([`remove_docker_objects`]), `docker` itself, and the
//!   containers of an instance.
//! - [`registry::RegistryProxy`] (a registry of the test's own in front of the fixture
//!   registry) and [`second_node::SecondNode`] (a second Docker engine for the swarm tests).
//! - [`tagging::push_tag`] (a fixture image pushed under a repository and tag of the test's
//!   own) and [`auth_registry::AuthRegistry`] (a registry that wants a password).
//! - [`token_registry::TokenRegistry`]: a registry with token auth that misbehaves as a test
//!   asks (a huge token answer, a realm on another host, a digest header that lies).
//!
//! The fixtures (a local registry and FROM-scratch busybox images pinned by digest) are prepared
//! by `scripts/test`; a test that needs one and finds none panics saying so. Every Docker object
//! a daemon makes is named with [`run_prefix`] and removed by prefix when its [`Daemon`] drops.

pub mod auth_registry;
mod client;
mod daemon;
mod docker;
mod engine_gate;
pub mod registry;
pub mod second_node;
pub mod tagging;
pub mod token_registry;

use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub use client::{Answer, Client, Watch, domain_id, json_of, refused};
pub use daemon::{BERTH_BIN_ENV, Daemon, Launch, berth_binary, read_head};
pub use docker::{
    DockerObjects, LocalImages, container_of, containers_labelled, containers_named, containers_of,
    docker, docker_inspect, docker_objects, named_with, processes, remove_docker_objects,
    remove_local_images, who_from,
};
pub use engine_gate::EngineGate;

/// The service key the test daemons accept first.
pub const KEY: &str = "test-key-aaaaaaaaaaaaaaaa";
/// A second key, for ownership tests.
pub const OTHER_KEY: &str = "test-key-bbbbbbbbbbbbbbbb";

/// Makes `dir` a fresh git repository (`git init -q`), as a worktree berth's CLI runs in.
pub fn git_init(dir: &std::path::Path) {
    let out = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git init in {}: {out:?}",
        dir.display()
    );
}

/// A key's public id (`keyId`), as `GET /v1/whoami` answers it and a grants file names it.
pub fn key_id(key: &str) -> String {
    use sha2::Digest;
    berth_core::consent::key_id(&hex::encode(sha2::Sha256::digest(key.as_bytes())))
}

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

/// Where [`spec`] mounts its volume.
pub const SPEC_MOUNT: &str = "/srv/data";
/// [`spec`]'s CPU limit, in thousandths of a CPU.
pub const SPEC_MILLICORES: i64 = 250;
/// [`spec`]'s memory limit (64 MiB).
pub const SPEC_MEMORY: i64 = 64 << 20;
/// The port [`spec`]'s ready check connects to (the busybox fixture's httpd).
pub const READY_PORT: u16 = 8080;

/// The standard spec: `image` (the busybox fixture, say) with one named volume at
/// [`SPEC_MOUNT`], small limits and a tcp ready check on [`READY_PORT`]. The tests and the
/// benchmark's instances run it.
pub fn spec(image: &str, alias: &str) -> Value {
    json!({
        "alias": alias,
        "worktreeKey": null,
        "image": image,
        "command": null,
        "env": {"GREETING": "hello"},
        "volumes": [{"name": "data", "mountPath": SPEC_MOUNT}],
        "limits": {"cpuMillicores": SPEC_MILLICORES, "memoryBytes": SPEC_MEMORY},
        "ready": {"kind": "tcp", "port": READY_PORT},
        "idleStopAfterSeconds": 3600
    })
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
