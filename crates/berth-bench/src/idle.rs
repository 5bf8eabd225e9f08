//! What an idle daemon costs: a `berth serve` of its own with 50 running instances and 10
//! linked workspaces, left alone for a minute, its CPU time and resident memory read from
//! /proc and its Docker API requests counted by a proxy in front of the engine's socket.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use berth_testkit::Daemon;
use futures_util::future::try_join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::time::Instant;

use crate::api::{self as berth, Api, small_spec};
use crate::context::Ctx;
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::median;

pub const NAME_CPU: &str = "idle_daemon_cpu";
pub const NAME_RSS: &str = "idle_daemon_rss";
/// Running instances.
const INSTANCES: usize = 50;
/// Linked workspaces.
const WORKSPACES: usize = 10;
/// Left alone before the measurement starts, once the setup's network attachments are done.
const SETTLE: Duration = Duration::from_secs(5);
/// The setup is done when berth has attached nothing for this long...
const QUIET: Duration = Duration::from_secs(5);
/// ...or, at the latest, after this long.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(300);
/// One CPU reading's window; the measurement is [`WINDOWS`] of them.
const WINDOW: Duration = Duration::from_secs(10);
const WINDOWS: usize = 6;
/// The budgets: a hundredth of a core, and 50 MB resident.
const CPU_BUDGET: f64 = 1.0;
const RSS_BUDGET: f64 = 50.0;

/// Where the engine listens, when it is a Unix socket.
pub(crate) fn engine_socket() -> Option<PathBuf> {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if !host.is_empty() => host.strip_prefix("unix://").map(PathBuf::from),
        _ => Some(PathBuf::from("/var/run/docker.sock")),
    }
}

/// Requests by kind: method and path, with the API version, the query and object ids left out.
type Kinds = Arc<Mutex<HashMap<String, u64>>>;

/// A Unix socket that forwards every connection to the engine's, counting the HTTP requests
/// sent through it (request lines, ` HTTP/1.1\r\n`, in the client's bytes).
pub(crate) struct CountingProxy {
    requests: Arc<AtomicU64>,
    kinds: Kinds,
    task: tokio::task::JoinHandle<()>,
}

/// The request lines in `bytes`, as `METHOD /path` (one read of a client's bytes: a client
/// writes each request's head at once, so a line is not split between reads in practice).
fn request_lines(bytes: &[u8]) -> Vec<String> {
    const LINE_END: &[u8] = b" HTTP/1.1\r\n";
    let mut lines = Vec::new();
    let mut line_start = 0;
    let mut i = 0;
    while i + LINE_END.len() <= bytes.len() {
        if bytes[i..].starts_with(b"\r\n") {
            line_start = i + 2;
        }
        if bytes[i..].starts_with(LINE_END) {
            lines.push(kind(&String::from_utf8_lossy(&bytes[line_start..i])));
            i += LINE_END.len();
            line_start = i;
            continue;
        }
        i += 1;
    }
    lines
}

/// `GET /v1.41/containers/abc/json?all=1` → `GET /containers/{id}/json`.
fn kind(line: &str) -> String {
    let (method, target) = line.split_once(' ').unwrap_or((line, ""));
    let path = target.split('?').next().unwrap_or("");
    let mut segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segments.first().is_some_and(|s| s.starts_with("v1.")) {
        segments.remove(0);
    }
    let verbs = [
        "json", "create", "prune", "_ping", "version", "events", "info",
    ];
    let named = segments
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if i == 1 && !verbs.contains(s) {
                "{id}"
            } else {
                s
            }
        })
        .collect::<Vec<_>>()
        .join("/");
    format!("{method} /{named}")
}

async fn forward(client: UnixStream, upstream: PathBuf, requests: Arc<AtomicU64>, kinds: Kinds) {
    let Ok(engine) = UnixStream::connect(&upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut engine_read, mut engine_write) = engine.into_split();
    let up = async move {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let lines = request_lines(&buf[..n]);
                    if !lines.is_empty() {
                        requests.fetch_add(lines.len() as u64, Ordering::Relaxed);
                        let mut kinds = kinds.lock().unwrap_or_else(|e| e.into_inner());
                        for line in lines {
                            *kinds.entry(line).or_default() += 1;
                        }
                    }
                    if engine_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = engine_write.shutdown().await;
    };
    let down = async move {
        let _ = tokio::io::copy(&mut engine_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::join!(up, down);
}

impl CountingProxy {
    pub(crate) fn start(path: &Path, upstream: PathBuf) -> anyhow::Result<CountingProxy> {
        let listener =
            UnixListener::bind(path).with_context(|| format!("listening on {}", path.display()))?;
        let requests = Arc::new(AtomicU64::new(0));
        let kinds = Kinds::default();
        let (counter, by_kind) = (requests.clone(), kinds.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(forward(
                    client,
                    upstream.clone(),
                    counter.clone(),
                    by_kind.clone(),
                ));
            }
        });
        Ok(CountingProxy {
            requests,
            kinds,
            task,
        })
    }

    pub(crate) fn count(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The network requests (connects, disconnects, creates and inspects) so far.
    fn network_requests(&self) -> u64 {
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        kinds
            .iter()
            .filter(|(k, _)| k.contains(" /networks"))
            .map(|(_, n)| n)
            .sum()
    }

    /// Waits until no network request has gone through for [`QUIET`] (at most
    /// [`DRAIN_TIMEOUT`]), and returns how long that took. Linking the workspaces returns at
    /// once, but berth then attaches every shared instance to every view, one engine request
    /// after another, for a minute or two: that is setup, not idling.
    async fn drain(&self) -> Duration {
        let started = Instant::now();
        let mut last = self.network_requests();
        let mut quiet_since = Instant::now();
        while started.elapsed() < DRAIN_TIMEOUT {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = self.network_requests();
            if now != last {
                (last, quiet_since) = (now, Instant::now());
            } else if quiet_since.elapsed() >= QUIET {
                break;
            }
        }
        started.elapsed()
    }

    /// The requests so far, by kind.
    pub(crate) fn kinds(&self) -> HashMap<String, u64> {
        self.kinds.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The process's user and system CPU time so far, in seconds.
pub(crate) fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The fields after the command (which may hold spaces) start at its closing parenthesis;
    // utime and stime are the 14th and 15th fields, the 12th and 13th after it.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("odd /proc/{pid}/stat"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .ok_or_else(|| anyhow!("odd /proc/{pid}/stat"))
    };
    // SAFETY: sysconf reads a constant of the system; it has no memory effects.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok((ticks(11)? + ticks(12)?) / per_second)
}

/// The process's resident memory, in MB (10^6 bytes).
pub(crate) fn rss_mb(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS in /proc/{pid}/status"))?;
    Ok(kib * 1024.0 / 1e6)
}

struct Measured {
    cpu: Vec<f64>,
    /// Over the whole measurement.
    cpu_overall: f64,
    rss_start: f64,
    rss_end: f64,
    calls: Option<f64>,
    /// The measured minute's requests by kind, most first, per minute.
    call_kinds: Vec<(String, f64)>,
    setup_calls: Option<u64>,
    /// Network attachments made during the setup.
    setup_connects: Option<u64>,
    /// The whole setup, and the part of it spent waiting for the attachments, in seconds.
    setup: f64,
    linked: f64,
    drain: f64,
}

async fn measure(
    ctx: &Ctx,
    daemon: &Daemon,
    api: &Api,
    proxy: Option<&CountingProxy>,
) -> anyhow::Result<Measured> {
    let pid = daemon.try_pid().context("the idle daemon has no pid")?;
    let domain = api.create_domain("berth-bench-idle").await?;
    let started = Instant::now();
    progress::line(&format!(
        "{NAME_CPU}: starting {INSTANCES} instances and linking {WORKSPACES} workspaces"
    ));
    let keys: Vec<String> = (0..INSTANCES).map(|i| format!("idle-{i}")).collect();
    try_join_all(keys.iter().map(|key| {
        let spec = small_spec(&ctx.image, key);
        let domain = domain.clone();
        async move { api.up(&domain, key, &spec).await }
    }))
    .await?;
    for key in &keys {
        api.wait_running(
            &domain,
            key,
            Duration::from_millis(200),
            Duration::from_secs(180),
        )
        .await?;
    }
    for i in 0..WORKSPACES {
        let id = format!("ws-{i}");
        api.workspace(&id, Some((&domain, &format!("wt-{i}"))))
            .await?;
    }
    let linked = started.elapsed().as_secs_f64();
    progress::line(&format!(
        "{NAME_CPU}: linked after {linked:.1} s; waiting for berth to finish attaching"
    ));
    let drain = match proxy {
        Some(p) => p.drain().await.as_secs_f64(),
        None => 0.0,
    };
    let setup = started.elapsed().as_secs_f64();
    let setup_calls = proxy.map(CountingProxy::count);
    let setup_connects = proxy.map(|p| {
        p.kinds()
            .get("POST /networks/{id}/connect")
            .copied()
            .unwrap_or(0)
    });
    progress::line(&format!(
        "{NAME_CPU}: set up in {setup:.1} s; measuring for {} s",
        (WINDOW * WINDOWS as u32).as_secs()
    ));
    tokio::time::sleep(SETTLE).await;

    let rss_start = rss_mb(pid)?;
    let calls_start = proxy.map(CountingProxy::count);
    let kinds_start = proxy.map(CountingProxy::kinds).unwrap_or_default();
    let begin = Instant::now();
    let first = cpu_seconds(pid)?;
    let mut last = first;
    let mut last_at = begin;
    let mut cpu = Vec::with_capacity(WINDOWS);
    for i in 0..WINDOWS {
        tokio::time::sleep_until(begin + WINDOW * (i as u32 + 1)).await;
        let now = cpu_seconds(pid)?;
        let at = Instant::now();
        cpu.push((now - last) / (at - last_at).as_secs_f64() * 100.0);
        (last, last_at) = (now, at);
        progress::step(NAME_CPU, i + 1, WINDOWS);
    }
    let minutes = begin.elapsed().as_secs_f64() / 60.0;
    let cpu_overall = (last - first) / (last_at - begin).as_secs_f64() * 100.0;
    let rss_end = rss_mb(pid)?;
    let calls = proxy
        .zip(calls_start)
        .map(|(p, start)| (p.count() - start) as f64 / minutes);
    let mut call_kinds: Vec<(String, f64)> = proxy
        .map(CountingProxy::kinds)
        .unwrap_or_default()
        .into_iter()
        .map(|(k, n)| {
            let before = kinds_start.get(&k).copied().unwrap_or(0);
            (k, (n - before) as f64 / minutes)
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    call_kinds.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    // Still running means nothing it ran has failed underneath.
    let listed = api.list(&domain).await?;
    let running = listed["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["state"]["kind"] == "running")
        .count();
    if running != INSTANCES {
        bail!("{running} of {INSTANCES} idle instances were running at the end: {listed}");
    }
    Ok(Measured {
        cpu,
        cpu_overall,
        rss_start,
        rss_end,
        calls,
        call_kinds,
        setup_calls,
        setup_connects,
        setup,
        linked,
        drain,
    })
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Figure> {
    // A daemon of its own, named under the run's prefix (so the run's cleanup covers it), that
    // reaches Docker through the counting proxy.
    let prefix = format!("{}-idle", ctx.prefix);
    let dir = tempfile::Builder::new()
        .prefix("berth-bench-idle-")
        .tempdir()
        .context("a temporary directory")?;
    let proxy = match engine_socket() {
        Some(upstream) => Some(CountingProxy::start(
            &dir.path().join("docker.sock"),
            upstream,
        )?),
        None => None,
    };
    let docker_host = proxy
        .as_ref()
        .map(|_| format!("unix://{}", dir.path().join("docker.sock").display()));
    let key = format!("bench-idle-{}", crate::context::random_hex(16)?);
    let mut launch = berth::launch(&ctx.berth_bin, &prefix, &[&key]);
    if let Some(host) = &docker_host {
        launch = launch.env("DOCKER_HOST", host);
    }
    let daemon = berth::start(launch).await?;
    let outcome = async {
        let api = Api::new(&daemon.base, &key)?;
        measure(ctx, &daemon, &api, proxy.as_ref()).await
    }
    .await;
    if outcome.is_err() {
        eprintln!(
            "berth-bench: the idle daemon's last log lines:\n{}",
            daemon.log_tail(20)
        );
    }
    berth::stop(daemon).await;
    progress::line(&format!("{NAME_CPU}: removing the idle instances"));
    let leftovers = berth::remove_everything(&prefix).await?;
    if !leftovers.is_empty() {
        bail!("could not remove the idle figure's objects: {leftovers:?}");
    }
    let m = outcome?;

    let budget = |value: f64| Stat {
        n: 1,
        value,
        p90: None,
    };
    let rows = vec![
        Row {
            name: NAME_CPU.to_owned(),
            unit: "%core",
            berth: Stat {
                n: m.cpu.len(),
                value: m.cpu_overall,
                p90: Some(crate::stats::quantile(&m.cpu, 0.9)),
            },
            baseline: "budget",
            base: budget(CPU_BUDGET),
            target: Some(Target::Below(1.0)),
        },
        Row {
            name: NAME_RSS.to_owned(),
            unit: "MB",
            berth: Stat {
                n: 2,
                value: m.rss_end,
                p90: None,
            },
            baseline: "budget",
            base: budget(RSS_BUDGET),
            target: Some(Target::Below(1.0)),
        },
    ];
    let calls = match m.calls {
        Some(per_minute) => format!(
            "Docker API requests while idle: {} a minute ({} per instance a minute), counted by \
             a proxy in front of the engine's socket; setting up took {} requests, {} of them \
             network attachments. By kind, a minute: {}.",
            number(per_minute),
            number(per_minute / INSTANCES as f64),
            m.setup_calls.unwrap_or_default(),
            m.setup_connects.unwrap_or_default(),
            m.call_kinds
                .iter()
                .map(|(k, n)| format!("`{k}` {}", number(*n)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => "Docker API requests: not measured (DOCKER_HOST is not a Unix socket).".to_owned(),
    };
    let notes = vec![
        format!(
            "{INSTANCES} running instances and {WORKSPACES} linked workspaces, set up in {:.1} s \
             (running and linked after {:.1} s, then {:.1} s until berth had made no network \
             request for {} s: it attaches each shared instance to each worktree key's view), \
             then left alone for {} s and measured over {WINDOWS} windows of {} s: n counts \
             windows, the value is the CPU time over the whole minute, the p90 the windows' \
             (CPU time is counted in ticks of 10 ms, 0.1 % of a 10 s window).",
            m.setup,
            m.linked,
            m.drain,
            QUIET.as_secs(),
            SETTLE.as_secs(),
            WINDOW.as_secs(),
        ),
        format!(
            "Resident memory (VmRSS) was {} MB at the start of the measurement and {} MB at its \
             end (the value); CPU windows ranged from {} % to {} % (median {} %).",
            number(m.rss_start),
            number(m.rss_end),
            number(m.cpu.iter().copied().fold(f64::INFINITY, f64::min)),
            number(m.cpu.iter().copied().fold(0.0, f64::max)),
            number(median(&m.cpu)),
        ),
        calls,
    ];
    Ok(Figure { rows, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_counted_by_kind() {
        assert_eq!(
            request_lines(b"GET /v1.41/_ping HTTP/1.1\r\nHost: d\r\n\r\n"),
            vec!["GET /_ping"]
        );
        assert_eq!(
            request_lines(
                b"GET /v1.41/containers/abc/json?all=1 HTTP/1.1\r\n\r\n\
                  POST /v1.41/containers/create?name=x HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
            ),
            vec!["GET /containers/{id}/json", "POST /containers/create"]
        );
        assert!(request_lines(b"{\"HTTP/1.1\": 1}").is_empty());
    }
}
