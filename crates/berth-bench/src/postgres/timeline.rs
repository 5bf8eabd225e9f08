//! What a Postgres container's log says of its start: when it started, finished its first
//! initialisation and took connections, and one sample of one way with those parts.

use super::*;
use crate::stats::between;
use anyhow::{Context, anyhow};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::{InspectContainerOptions, LogsOptions};
use futures_util::StreamExt;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// When, by its container's log, Postgres started, finished its first-start initialisation and
/// took connections.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeline {
    /// The container's `State.StartedAt`.
    pub(super) started: SystemTime,
    /// The entrypoint's "init process complete" line (fresh volumes only).
    pub(super) init_done: Option<SystemTime>,
    /// The server's "ready to accept connections" line, on stderr.
    pub(super) ready: Option<SystemTime>,
}

/// One sample of one way.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    pub(super) total: f64,
    pub(super) wall_start: SystemTime,
    pub(super) wall_end: SystemTime,
    pub(super) timeline: Option<Timeline>,
    /// berth: when its ready check answered (`state.since` of `running`).
    pub(super) berth_ready: Option<SystemTime>,
    /// Compose: `up -d`'s run, the health wait after it, and how many health reads it took.
    pub(super) compose: Option<(f64, f64, u32)>,
}

impl Sample {
    pub(super) fn new(total: f64, wall_start: SystemTime, wall_end: SystemTime) -> Sample {
        Sample {
            total,
            wall_start,
            wall_end,
            timeline: None,
            berth_ready: None,
            compose: None,
        }
    }

    /// From the sample's start to the container's start: the tool and the engine's work before
    /// Postgres runs.
    pub(super) fn before_start(&self) -> Option<f64> {
        Some(between(self.wall_start, self.timeline?.started))
    }

    /// From the container's start to the server's ready line.
    pub(super) fn postgres(&self) -> Option<f64> {
        let t = self.timeline?;
        Some(between(t.started, t.ready?))
    }

    /// From the container's start to the end of the entrypoint's initialisation.
    pub(super) fn init(&self) -> Option<f64> {
        let t = self.timeline?;
        Some(between(t.started, t.init_done?))
    }

    /// From the server's ready line to the tool saying it is ready.
    pub(super) fn notice(&self) -> Option<f64> {
        Some(between(self.timeline?.ready?, self.wall_end))
    }
}

pub(super) fn timestamp(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339_weak(text.trim()).ok()
}

/// A log line as Docker sends it with timestamps: `2026-11-29T21:55:20.144796909Z text`.
pub(super) fn split_timestamp(line: &str) -> Option<(SystemTime, &str)> {
    let (stamp, text) = line.split_once(' ')?;
    Some((timestamp(stamp)?, text))
}

/// The timeline in a container's log lines (`(stderr?, line)` with Docker's timestamps), from
/// the lines written at or after `since` only: an existing container's log holds its earlier
/// runs too.
pub(super) fn read_timeline<'a>(
    started: SystemTime,
    since: SystemTime,
    lines: impl IntoIterator<Item = (bool, &'a str)>,
) -> Timeline {
    let mut timeline = Timeline {
        started,
        init_done: None,
        ready: None,
    };
    for (stderr, line) in lines {
        let Some((at, text)) = split_timestamp(line) else {
            continue;
        };
        if at < since {
            continue;
        }
        if stderr && timeline.ready.is_none() && text.contains(READY_LINE) {
            timeline.ready = Some(at);
        }
        if !stderr && timeline.init_done.is_none() && text.contains(INIT_LINE) {
            timeline.init_done = Some(at);
        }
    }
    timeline
}

/// How long a sample's timeline waits for the server's ready line once the tool has said ready:
/// a tcp check's connect is accepted as soon as the server listens, a moment before it logs that
/// it is ready, and the wait route answers at once.
const READY_LINE_WITHIN: Duration = Duration::from_secs(10);

/// Reads container `id`'s start and log for the sample that began at `since` (not timed), again
/// every 20 ms until the log holds the server's ready line (at most [`READY_LINE_WITHIN`]).
pub(super) async fn timeline(
    docker: &Docker,
    id: &str,
    since: SystemTime,
) -> anyhow::Result<Timeline> {
    let deadline = Instant::now() + READY_LINE_WITHIN;
    loop {
        let read = timeline_once(docker, id, since).await?;
        if read.ready.is_some() || Instant::now() > deadline {
            return Ok(read);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One read of container `id`'s start and log for the sample that began at `since`.
async fn timeline_once(docker: &Docker, id: &str, since: SystemTime) -> anyhow::Result<Timeline> {
    let inspected = docker
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .with_context(|| format!("inspecting container {id}"))?;
    let started = inspected
        .state
        .and_then(|s| s.started_at)
        .as_deref()
        .and_then(timestamp)
        .ok_or_else(|| anyhow!("container {id} has no start time"))?;
    let options = LogsOptions {
        follow: false,
        stdout: true,
        stderr: true,
        timestamps: true,
        tail: "all".to_owned(),
        ..Default::default()
    };
    let mut stream = docker.logs(id, Some(options));
    let mut lines: Vec<(bool, String)> = Vec::new();
    while let Some(frame) = stream.next().await {
        let (stderr, message) = match frame.with_context(|| format!("reading {id}'s log"))? {
            LogOutput::StdErr { message } => (true, message),
            LogOutput::StdOut { message } | LogOutput::Console { message } => (false, message),
            LogOutput::StdIn { .. } => continue,
        };
        let text = String::from_utf8_lossy(&message);
        lines.extend(text.lines().map(|l| (stderr, l.to_owned())));
    }
    Ok(read_timeline(
        started,
        since,
        lines.iter().map(|(e, l)| (*e, l.as_str())),
    ))
}
