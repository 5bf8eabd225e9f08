//! Commands run in a running container: stdin streamed in, the tails of stdout and stderr kept,
//! and the command killed at its timeout or when its caller goes away.
//!
//! Docker has no call that kills an exec, and dropping the attached stream leaves the process
//! running. So at the timeout (or when the caller's future is dropped) berth finds the exec's
//! processes itself: the engine's exec inspect gives the host pid of the command; the host's
//! `/proc` gives the processes of its session and its descendants (checked to belong to the
//! container's cgroup) and each one's pid inside the container (`NSpid`). They are killed with
//! `SIGKILL` by a second exec as root in the container (`sh -c 'kill …'`, or a `kill` binary),
//! and whatever survives that is killed from the host with `kill(2)`. An engine on another
//! machine shows no such processes: there the kill fails, and the error says so.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use berth_core::runtime::{ExecOutcome, ExecRequest, ExecStdin, RuntimeError};
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::error;

/// The longest wait for a kill to take effect before it is reported as failed.
const KILL_WAIT: Duration = Duration::from_secs(3);
/// Rounds of find-and-kill: a process may fork while its family is being killed.
const KILL_ROUNDS: usize = 4;

/// The last `max` bytes of a stream.
#[derive(Debug)]
struct Tail {
    bytes: VecDeque<u8>,
    max: usize,
    truncated: bool,
}

impl Tail {
    fn new(max: usize) -> Self {
        Self {
            bytes: VecDeque::new(),
            max,
            truncated: false,
        }
    }

    fn push(&mut self, data: &[u8]) {
        let data = if data.len() > self.max {
            self.truncated = true;
            &data[data.len() - self.max..]
        } else {
            data
        };
        self.bytes.extend(data);
        let excess = self.bytes.len().saturating_sub(self.max);
        if excess > 0 {
            self.truncated = true;
            self.bytes.drain(..excess);
        }
    }

    fn into_vec(self) -> Vec<u8> {
        self.bytes.into()
    }
}

/// The attached streams of a running exec. Closing them closes the command's stdin, which
/// may end it and orphan its children before they are found: they stay open until the kill.
struct Attached {
    output: Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>,
    input: Pin<Box<dyn AsyncWrite + Send>>,
}

/// Kills the exec's processes when dropped armed (the caller went away mid-run), and only then
/// closes its streams.
struct KillOnDrop {
    docker: Docker,
    exec_id: String,
    armed: bool,
    attached: Option<Attached>,
}

impl KillOnDrop {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let docker = self.docker.clone();
        let exec_id = std::mem::take(&mut self.exec_id);
        let attached = self.attached.take();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    match kill(&docker, &exec_id).await {
                        Ok(_) => tracing::debug!(exec = %exec_id, "killed an abandoned exec"),
                        Err(reason) => tracing::warn!(exec = %exec_id, reason = %reason,
                            "could not kill an abandoned exec"),
                    }
                    drop(attached);
                });
            }
            Err(_) => tracing::warn!(exec = %exec_id,
                "an abandoned exec could not be killed: no async runtime is running"),
        }
    }
}

fn outcome(exit_code: Option<i64>, stdout: Tail, stderr: Tail, timed_out: bool) -> ExecOutcome {
    ExecOutcome {
        exit_code,
        truncated: stdout.truncated || stderr.truncated,
        stdout: stdout.into_vec(),
        stderr: stderr.into_vec(),
        timed_out,
    }
}

pub(crate) async fn run(
    docker: &Docker,
    container: &str,
    request: ExecRequest,
    mut stdin: ExecStdin,
) -> Result<ExecOutcome, RuntimeError> {
    let deadline = Instant::now() + request.timeout;
    let what = format!("an exec in container {container}");
    let secrets: Vec<&str> = request.argv.iter().map(String::as_str).collect();
    let mut stdout = Tail::new(request.max_output);
    let mut stderr = Tail::new(request.max_output);

    let options = CreateExecOptions::<String> {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        cmd: Some(request.argv.clone()),
        user: request.user.clone().filter(|u| !u.is_empty()),
        ..Default::default()
    };
    let created =
        match tokio::time::timeout_at(deadline, docker.create_exec(container, options)).await {
            Ok(created) => created
                .map_err(|e| error::map_redacted(e, &format!("container {container}"), &secrets))?,
            // Nothing was started, so nothing needs killing.
            Err(_) => return Ok(outcome(None, stdout, stderr, true)),
        };
    let exec_id = created.id;
    tracing::debug!(container = %container, exec = %exec_id, "starting exec");
    let mut guard = KillOnDrop {
        docker: docker.clone(),
        exec_id: exec_id.clone(),
        armed: true,
        attached: None,
    };
    let start = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: None,
    };
    let Attached { output, input } = match docker.start_exec(&exec_id, Some(start)).await {
        Ok(StartExecResults::Attached { output, input }) => {
            guard.attached.insert(Attached { output, input })
        }
        Ok(StartExecResults::Detached) => {
            return Err(RuntimeError::Engine(format!(
                "the engine started {what} detached, without its output"
            )));
        }
        Err(e) => return Err(error::map_redacted(e, &what, &secrets)),
    };

    let cancel = request.cancel.clone();
    let finished = tokio::time::timeout_at(deadline, async {
        // Stdin goes in as it arrives; at its end the input half is shut down so the command
        // sees end-of-file. A command that exits without reading it breaks the pipe, which ends
        // the feed too. Stdin that fails to read means its caller went away mid-body.
        let feed = async {
            match feed(&mut stdin, input).await {
                Fed::CallerGone => Gone::Caller,
                Fed::Done => std::future::pending().await,
            }
        };
        // The output ends when the command's stdout and stderr close; its exit code follows.
        // Stdin keeps flowing meanwhile, for a command that closed its output first.
        let read_then_wait = async {
            while let Some(frame) = output.next().await {
                match frame {
                    Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                        stdout.push(&message)
                    }
                    Ok(LogOutput::StdErr { message }) => stderr.push(&message),
                    Ok(LogOutput::StdIn { .. }) => {}
                    Err(e) => return Err(error::map(e, &what)),
                }
            }
            wait_exit(docker, &exec_id, &what).await
        };
        tokio::select! {
            ended = read_then_wait => Ok(ended),
            gone = feed => Err(gone),
            () = cancel.cancelled() => Err(Gone::Cancelled),
        }
    })
    .await;

    match finished {
        Ok(Ok(Ok(exit_code))) => {
            guard.disarm();
            Ok(outcome(exit_code, stdout, stderr, false))
        }
        // The guard stays armed: the command may still run, and dropping it kills it.
        Ok(Ok(Err(e))) => Err(e),
        Ok(Err(gone)) => {
            let why = match gone {
                Gone::Caller => "its caller went away",
                Gone::Cancelled => "it was cancelled (its caller went away, or berth is stopping)",
            };
            tracing::debug!(container = %container, exec = %exec_id, "exec abandoned; killing it");
            let killed = kill(docker, &exec_id).await;
            guard.disarm();
            Err(RuntimeError::Cancelled(match killed {
                Ok(_) => format!("the command was killed: {why}"),
                Err(reason) => format!(
                    "the command could not be killed after {why} ({reason}); it may still be \
                     running in container {container}"
                ),
            }))
        }
        Err(_) => {
            tracing::debug!(container = %container, exec = %exec_id, "exec timed out; killing it");
            // The guard stays armed until the kill is done: a caller that goes away meanwhile
            // still gets its command killed.
            let killed = kill(docker, &exec_id).await;
            guard.disarm();
            match killed {
                Ok(Killed::Yes) => Ok(outcome(None, stdout, stderr, true)),
                Ok(Killed::AlreadyExited(code)) => Ok(outcome(code, stdout, stderr, false)),
                Err(reason) => Err(RuntimeError::Engine(format!(
                    "a command ran past its timeout of {} in container {container} and could \
                     not be killed ({reason}); it may still be running",
                    error::human(request.timeout)
                ))),
            }
        }
    }
}

/// Why an exec was given up before its command ended.
enum Gone {
    /// Its stdin failed to read: the body's connection broke.
    Caller,
    /// Its cancellation token fired.
    Cancelled,
}

/// How feeding stdin ended.
enum Fed {
    /// Stdin ended (the input was shut down), or the command stopped reading it.
    Done,
    /// Reading stdin failed.
    CallerGone,
}

/// Copies stdin into the command through a small buffer, telling a failed read (the caller is
/// gone) from a failed write (the command closed its stdin, which is its business).
async fn feed(stdin: &mut ExecStdin, input: &mut Pin<Box<dyn AsyncWrite + Send>>) -> Fed {
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        let n = match stdin.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => n,
            Err(_) => return Fed::CallerGone,
        };
        if input.write_all(&buf[..n]).await.is_err() {
            return Fed::Done;
        }
    }
    let _ = input.shutdown().await;
    Fed::Done
}

/// Polls the exec until the engine reports it ended, and returns its exit code.
pub(crate) async fn wait_exit(
    docker: &Docker,
    exec_id: &str,
    what: &str,
) -> Result<Option<i64>, RuntimeError> {
    let mut pause = Duration::from_millis(2);
    loop {
        let info = docker
            .inspect_exec(exec_id)
            .await
            .map_err(|e| error::map(e, what))?;
        if info.running != Some(true) {
            return Ok(info.exit_code);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// How a kill ended.
#[derive(Debug)]
pub(crate) enum Killed {
    /// The command's processes were killed.
    Yes,
    /// The command had ended by itself, with this exit code.
    AlreadyExited(Option<i64>),
}

/// Kills the exec's command and every process of its session or descended from it.
pub(crate) async fn kill(docker: &Docker, exec_id: &str) -> Result<Killed, String> {
    let info = docker
        .inspect_exec(exec_id)
        .await
        .map_err(|e| format!("the exec could not be inspected: {e}"))?;
    if info.running != Some(true) {
        return Ok(Killed::AlreadyExited(info.exit_code));
    }
    let leader = info
        .pid
        .and_then(|p| i32::try_from(p).ok())
        .filter(|p| *p > 0)
        .ok_or("the engine gave no process id for it")?;
    let container_id = info
        .container_id
        .filter(|id| !id.is_empty())
        .ok_or("the engine gave no container for it")?;

    let mut problems: Vec<String> = Vec::new();
    let mut inside_works = true;
    for round in 0..KILL_ROUNDS {
        let targets = procs::family(leader, &container_id);
        if targets.is_empty() {
            if round == 0 {
                problems.push(format!(
                    "its process {leader} is not visible in this host's /proc, as when the \
                     engine runs on another machine"
                ));
            }
            break;
        }
        if inside_works {
            let pids: Vec<i64> = targets.iter().map(|t| t.inside).collect();
            if let Err(problem) = kill_inside(docker, &container_id, &pids).await {
                problems.push(problem);
                inside_works = false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for target in procs::family(leader, &container_id) {
            // SAFETY: kill(2) has no memory effects; the pid was just checked to belong to
            // the container's cgroup, so it is the exec's process and not a reused pid.
            let rc = unsafe { libc::kill(target.host, libc::SIGKILL) };
            if rc != 0 {
                let errno = std::io::Error::last_os_error();
                if errno.raw_os_error() != Some(libc::ESRCH) {
                    problems.push(format!("kill({}) failed: {errno}", target.host));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let waited = Instant::now();
    loop {
        match docker.inspect_exec(exec_id).await {
            Ok(info) if info.running != Some(true) => return Ok(Killed::Yes),
            Ok(_) if waited.elapsed() < KILL_WAIT => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Ok(_) => {
                problems.dedup();
                let problems = if problems.is_empty() {
                    "no reason was found".to_owned()
                } else {
                    problems.join("; ")
                };
                return Err(format!(
                    "it still ran {} after the kill: {problems}",
                    error::human(KILL_WAIT)
                ));
            }
            Err(e) => return Err(format!("the exec could not be inspected: {e}")),
        }
    }
}

/// Runs `kill -s KILL <pids>` as root inside the container: through `sh` (whose built-in
/// `kill` every shell has), else through a `kill` binary.
async fn kill_inside(docker: &Docker, container_id: &str, pids: &[i64]) -> Result<(), String> {
    let pids: Vec<String> = pids.iter().map(i64::to_string).collect();
    let through_shell: Vec<String> = ["sh", "-c", "kill -s KILL \"$@\"", "kill"]
        .into_iter()
        .map(str::to_owned)
        .chain(pids.iter().cloned())
        .collect();
    let through_binary: Vec<String> = ["kill", "-s", "KILL"]
        .into_iter()
        .map(str::to_owned)
        .chain(pids.iter().cloned())
        .collect();
    for argv in [through_shell, through_binary] {
        match run_detached(docker, container_id, argv, "0").await? {
            // Not found or not executable: try the next way.
            Some(126 | 127) => continue,
            // A non-zero code may only mean one of the processes had already gone.
            _ => return Ok(()),
        }
    }
    Err("the container has neither sh nor kill to kill with".to_owned())
}

/// Runs `argv` as `user` without attaching, and waits (briefly) for its exit code.
async fn run_detached(
    docker: &Docker,
    container_id: &str,
    argv: Vec<String>,
    user: &str,
) -> Result<Option<i64>, String> {
    let options = CreateExecOptions::<String> {
        attach_stdin: Some(false),
        attach_stdout: Some(false),
        attach_stderr: Some(false),
        tty: Some(false),
        cmd: Some(argv),
        user: Some(user.to_owned()),
        ..Default::default()
    };
    let created = docker
        .create_exec(container_id, options)
        .await
        .map_err(|e| {
            format!(
                "the killing exec could not be created: {}",
                error::message(&e)
            )
        })?;
    let start = StartExecOptions {
        detach: true,
        tty: false,
        output_capacity: None,
    };
    docker
        .start_exec(&created.id, Some(start))
        .await
        .map_err(|e| format!("the killing exec could not start: {}", error::message(&e)))?;
    match tokio::time::timeout(
        KILL_WAIT,
        wait_exit(docker, &created.id, "the killing exec"),
    )
    .await
    {
        Ok(Ok(code)) => Ok(code),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("the killing exec did not end".to_owned()),
    }
}

/// The host's view of a container's processes.
mod procs {
    use std::collections::BTreeSet;
    use std::fs;

    /// One process to kill.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) struct Target {
        /// Its pid on the host.
        pub host: i32,
        /// Its pid inside the container.
        pub inside: i64,
    }

    struct Process {
        pid: i32,
        ppid: i32,
        session: i32,
    }

    /// `(ppid, session)` of a live, non-zombie process, from `/proc/<pid>/stat`.
    fn stat(pid: i32) -> Option<(i32, i32)> {
        let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name may hold spaces and parentheses: the fields follow the last ')'.
        let rest = &text[text.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?;
        if state == "Z" || state == "X" {
            return None;
        }
        let ppid = fields.next()?.parse().ok()?;
        let _pgrp = fields.next()?;
        let session = fields.next()?.parse().ok()?;
        Some((ppid, session))
    }

    fn processes() -> Vec<Process> {
        let Ok(entries) = fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(|pid| {
                let (ppid, session) = stat(pid)?;
                Some(Process { pid, ppid, session })
            })
            .collect()
    }

    /// Whether the process is in the container's cgroup (its id is in the cgroup path).
    fn in_container(pid: i32, container_id: &str) -> bool {
        fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .is_ok_and(|cgroups| cgroups.contains(container_id))
    }

    /// The pid of the process in its innermost pid namespace (the last `NSpid` field).
    pub(super) fn inside_pid(status: &str) -> Option<i64> {
        status
            .lines()
            .find_map(|line| line.strip_prefix("NSpid:"))?
            .split_whitespace()
            .last()?
            .parse()
            .ok()
    }

    /// The live processes of the container that are `leader`, in its session, or descended
    /// from any of those.
    pub(super) fn family(leader: i32, container_id: &str) -> Vec<Target> {
        let all = processes();
        let mut chosen: BTreeSet<i32> = all
            .iter()
            .filter(|p| p.pid == leader || p.session == leader)
            .map(|p| p.pid)
            .collect();
        loop {
            let before = chosen.len();
            for p in &all {
                if chosen.contains(&p.ppid) {
                    chosen.insert(p.pid);
                }
            }
            if chosen.len() == before {
                break;
            }
        }
        chosen
            .into_iter()
            .filter(|pid| in_container(*pid, container_id))
            .filter_map(|pid| {
                let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
                Some(Target {
                    host: pid,
                    inside: inside_pid(&status)?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_keeps_exactly_the_last_bytes() {
        let mut tail = Tail::new(5);
        tail.push(b"abc");
        assert!(!tail.truncated);
        tail.push(b"de");
        assert!(!tail.truncated);
        tail.push(b"fg");
        assert!(tail.truncated);
        assert_eq!(tail.into_vec(), b"cdefg");

        let mut tail = Tail::new(3);
        tail.push(b"0123456789");
        assert!(tail.truncated);
        assert_eq!(tail.into_vec(), b"789");

        let mut nothing = Tail::new(0);
        nothing.push(b"x");
        assert!(nothing.truncated);
        assert!(nothing.into_vec().is_empty());
    }

    #[test]
    fn the_inside_pid_is_the_last_nspid_field() {
        let status = "Name:\tsleep\nNSpid:\t16082\t30\nNSpgid:\t16082\t30\n";
        assert_eq!(procs::inside_pid(status), Some(30));
        assert_eq!(procs::inside_pid("NSpid:\t42\n"), Some(42));
        assert_eq!(procs::inside_pid("Name:\tx\n"), None);
    }

    #[test]
    fn this_process_is_found_in_its_own_family_only_with_its_cgroup() {
        let me = i32::try_from(std::process::id()).unwrap();
        // No container id matches a cgroup path of "definitely-not-a-container".
        assert!(procs::family(me, "definitely-not-a-container").is_empty());
    }
}
