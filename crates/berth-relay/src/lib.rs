//! berth-relay: moving a proxied connection's bytes both ways until both sides have closed.
//!
//! berth's host endpoints hand each accepted connection here (through the relay trait berth-core
//! owns, implemented by the binary over this crate), so the system calls that move bytes
//! without copying them live apart from the domain.
//!
//! A connection is relayed by one thread of its own over non-blocking sockets: it waits in
//! poll(2) for either side, moves what is ready, and waits again. On Linux a direction's bytes go
//! socket → pipe → socket with splice(2), so they are never copied through user space; where the
//! kernel refuses a splice (`EINVAL`, `ENOSYS`, `EOPNOTSUPP`: a socket or file the splice cannot
//! take, a kernel without it) or no pipe can be had, the direction moves what its pipe holds and
//! goes on with read and write through a buffer. Elsewhere it always copies.
//!
//! After it has moved bytes the thread polls on without sleeping for a short while
//! ([`Options::spin`]): an answer that comes back within it (a query's round trip through a
//! database) is moved without the thread being put to sleep and woken again, which is most of
//! what a proxy adds to a small round trip (docs/benchmarks.md §5). At most half the machine's
//! cores spin at once (at least one), so a busy proxy never takes the CPUs from the programs it
//! serves; a connection that finds no core free to spin on waits in poll at once.
//!
//! Why a thread, not the async runtime: bytes that arrive for a thread waiting in poll wake it
//! directly, while through the runtime they wait for its poller to wake a worker that then polls
//! the task, twice a round trip. A connection holds one thread with a small stack for its life;
//! the endpoints serve a developer's clients, not thousands, and take a connection only while
//! its descriptors leave the API and the engine theirs (`admission`).
//!
//! A side that closes its sending half has that half closed on the other side too (half-close
//! is kept); an error on either direction shuts both sockets down and ends the relay.

#![forbid(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::retry_on_intr;
use rustix::net::Shutdown;
use tokio::sync::oneshot;

/// The buffer of a direction that copies.
const COPY_BUFFER: usize = 64 * 1024;
/// Each relay thread's stack: the thread holds no more than a few frames.
const THREAD_STACK: usize = 128 * 1024;

/// How a connection's bytes are moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// splice(2) where the kernel allows it; `false` copies through a buffer only.
    pub splice: bool,
    /// How long the thread polls on without sleeping after it moved bytes; zero never spins.
    pub spin: Duration,
}

/// How a direction moved its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// splice(2) through a pipe, from its first byte to its last.
    Splice,
    /// read and write through a buffer: asked for, or the kernel refused a splice.
    Copy,
}

/// What one direction moved, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moved {
    pub bytes: u64,
    pub path: Path,
}

/// What a finished connection moved each way.
#[derive(Clone, Copy, Debug)]
pub struct Relayed {
    pub to_upstream: Moved,
    pub to_client: Moved,
}

/// Moves bytes between `client` and `upstream` both ways, on a thread of its own, until both
/// directions have ended. An error is the first that either direction met.
pub async fn relay(
    client: tokio::net::TcpStream,
    upstream: tokio::net::TcpStream,
    options: Options,
) -> io::Result<Relayed> {
    // Both stay non-blocking, as the runtime left them.
    let client = OwnedFd::from(client.into_std()?);
    let upstream = OwnedFd::from(upstream.into_std()?);
    let (answer, answered) = oneshot::channel();
    std::thread::Builder::new()
        .name("berth-relay".to_owned())
        .stack_size(THREAD_STACK)
        .spawn(move || {
            let relayed = {
                let mut ways = [
                    Direction::new(client.as_fd(), upstream.as_fd(), options.splice),
                    Direction::new(upstream.as_fd(), client.as_fd(), options.splice),
                ];
                run(&mut ways, options.spin).map(|()| Relayed {
                    to_upstream: ways[0].moved(),
                    to_client: ways[1].moved(),
                })
                // The pipes close here, with the directions.
            };
            // Every descriptor is closed before the answer: the caller then gives back the
            // connection's share of them (`admission`).
            drop((client, upstream));
            let _ = answer.send(relayed);
        })?;
    answered
        .await
        .map_err(|_| io::Error::other("the relay thread ended without an answer"))?
}

/// Moves everything `from` sends into `to` until `from` reaches its end, on the calling thread:
/// one direction of [`relay`], for any pair of descriptors poll(2) takes.
#[cfg(test)]
pub(crate) fn pump(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    options: Options,
) -> io::Result<Moved> {
    let mut ways = [Direction::new(from, to, options.splice)];
    run(&mut ways, options.spin)?;
    Ok(ways[0].moved())
}

/// Runs the directions until each has ended, spinning for `spin` after each move while a core
/// is free to spin on. On an error every direction's sockets are shut down both ways.
fn run(ways: &mut [Direction<'_>], spin: Duration) -> io::Result<()> {
    let result = run_until_error(ways, spin);
    if result.is_err() {
        for way in ways.iter() {
            shut(way.from, Shutdown::Both);
            shut(way.to, Shutdown::Both);
        }
    }
    result
}

fn run_until_error(ways: &mut [Direction<'_>], spin: Duration) -> io::Result<()> {
    let mut spinning = Spinning::default();
    let mut spin_until: Option<Instant> = None;
    let mut wanted = Vec::with_capacity(4);
    let mut polled = Vec::with_capacity(4);
    loop {
        wanted.clear();
        for way in ways.iter() {
            let (read, write) = way.wants();
            if read {
                interest(&mut wanted, way.from, PollFlags::IN);
            }
            if write {
                interest(&mut wanted, way.to, PollFlags::OUT);
            }
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let timeout = match spin_until {
            Some(until) if Instant::now() < until => Some(&NO_WAIT),
            _ => {
                spin_until = None;
                spinning.stop();
                None
            }
        };
        polled.clear();
        polled.extend(
            wanted
                .iter()
                .map(|&(fd, events)| PollFd::from_borrowed_fd(fd, events)),
        );
        if poll(&mut polled, timeout)? == 0 {
            std::hint::spin_loop();
            continue;
        }
        let mut moved = false;
        for way in ways.iter_mut() {
            let readable = ready(&polled, way.from);
            let writable = ready(&polled, way.to);
            moved |= way.step(readable, writable)?;
        }
        if moved && !spin.is_zero() && spinning.start() {
            spin_until = Some(Instant::now() + spin);
        }
    }
}

/// A poll that does not wait: the spin after moving bytes.
const NO_WAIT: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 0,
};

/// Adds `events` for `fd` to the poll set, merged with what is already asked of it.
fn interest<'fd>(
    wanted: &mut Vec<(BorrowedFd<'fd>, PollFlags)>,
    fd: BorrowedFd<'fd>,
    events: PollFlags,
) {
    match wanted
        .iter_mut()
        .find(|(f, _)| f.as_raw_fd() == fd.as_raw_fd())
    {
        Some((_, asked)) => *asked |= events,
        None => wanted.push((fd, events)),
    }
}

/// Whether poll reported anything for `fd` (readiness, an end, an error): the direction tries
/// it and learns which.
fn ready(polled: &[PollFd<'_>], fd: BorrowedFd<'_>) -> bool {
    polled
        .iter()
        .any(|p| p.as_fd().as_raw_fd() == fd.as_raw_fd() && !p.revents().is_empty())
}

/// poll(2) over the set, again after an interrupt; how many descriptors are ready. `None`
/// waits until one is.
fn poll(polled: &mut [PollFd<'_>], timeout: Option<&Timespec>) -> io::Result<usize> {
    Ok(retry_on_intr(|| rustix::event::poll(polled, timeout))?)
}

/// shutdown(2) of a socket's halves; an error (a socket already down, a file) changes nothing.
fn shut(fd: BorrowedFd<'_>, how: Shutdown) {
    let _ = rustix::net::shutdown(fd, how);
}

/// How many relay threads may spin at once: half the cores, at least one.
fn spin_slots() -> usize {
    static SLOTS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SLOTS.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| (n.get() / 2).max(1))
            .unwrap_or(1)
    })
}

/// How many relay threads are spinning now, across every connection.
static SPINNING: AtomicUsize = AtomicUsize::new(0);

/// A relay thread's hold on one of the spin slots, given back when it stops spinning or ends.
#[derive(Default)]
struct Spinning {
    held: bool,
}

impl Spinning {
    /// Takes a slot unless this thread holds one already; whether it may spin.
    fn start(&mut self) -> bool {
        if !self.held {
            self.held = SPINNING
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < spin_slots()).then_some(n + 1)
                })
                .is_ok();
        }
        self.held
    }

    fn stop(&mut self) {
        if std::mem::take(&mut self.held) {
            SPINNING.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Spinning {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One direction: bytes taken from `from` and held (in a pipe or a buffer) until `to` takes
/// them.
struct Direction<'fd> {
    from: BorrowedFd<'fd>,
    to: BorrowedFd<'fd>,
    way: Way,
    /// Bytes taken from `from` and not yet written to `to`.
    held: usize,
    /// `from` has reached its end.
    ended: bool,
    /// Ended, everything written, and `to`'s sending half shut.
    done: bool,
    bytes: u64,
}

/// Where a direction holds what it took.
enum Way {
    /// A pipe, between two splices.
    #[cfg(target_os = "linux")]
    Splice(linux::Pipe),
    /// A buffer: what it holds is `buffer[start..start + held]`.
    Copy { buffer: Vec<u8>, start: usize },
}

impl<'fd> Direction<'fd> {
    fn new(from: BorrowedFd<'fd>, to: BorrowedFd<'fd>, splice: bool) -> Self {
        #[cfg(target_os = "linux")]
        let way = match splice.then(linux::Pipe::new) {
            Some(Ok(pipe)) => Way::Splice(pipe),
            _ => Way::copy(),
        };
        #[cfg(not(target_os = "linux"))]
        let way = {
            let _ = splice;
            Way::copy()
        };
        Direction {
            from,
            to,
            way,
            held: 0,
            ended: false,
            done: false,
            bytes: 0,
        }
    }

    fn moved(&self) -> Moved {
        Moved {
            bytes: self.bytes,
            path: match self.way {
                #[cfg(target_os = "linux")]
                Way::Splice(_) => Path::Splice,
                Way::Copy { .. } => Path::Copy,
            },
        }
    }

    /// Whether it waits to read from `from`, and to write to `to`.
    fn wants(&self) -> (bool, bool) {
        (!self.ended && self.room() > 0, self.held > 0)
    }

    /// How much more it can take from `from` now.
    fn room(&self) -> usize {
        match &self.way {
            #[cfg(target_os = "linux")]
            Way::Splice(pipe) => pipe.size - self.held,
            Way::Copy { buffer, .. } if self.held == 0 => buffer.len(),
            Way::Copy { .. } => 0,
        }
    }

    /// Moves what is ready: takes from `from` when poll reported it, and writes what it holds
    /// to `to` when poll reported it or it has just taken something. Whether anything moved.
    fn step(&mut self, readable: bool, writable: bool) -> io::Result<bool> {
        if self.done {
            return Ok(false);
        }
        let mut moved = false;
        if readable && !self.ended && self.room() > 0 {
            let took = self.take()?;
            match took {
                Some(0) => self.ended = true,
                Some(n) => self.held += n,
                None => {}
            }
            moved = took.is_some();
        }
        if writable || moved {
            while self.held > 0 {
                match self.give()? {
                    Some(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Some(n) => {
                        self.held -= n;
                        self.bytes += n as u64;
                        moved = true;
                    }
                    None => break,
                }
            }
        }
        if self.ended && self.held == 0 {
            // The other side learns the sender is done; the other direction goes on.
            shut(self.to, Shutdown::Write);
            self.done = true;
            moved = true;
        }
        Ok(moved)
    }

    /// One read from `from` into the pipe or the buffer: how many bytes (0 at its end), `None`
    /// when nothing is there yet.
    fn take(&mut self) -> io::Result<Option<usize>> {
        let room = self.room();
        let result = match &mut self.way {
            #[cfg(target_os = "linux")]
            Way::Splice(pipe) => linux::splice(self.from, pipe.write.as_fd(), room),
            Way::Copy { buffer, start } => {
                *start = 0;
                read(self.from, &mut buffer[..room])
            }
        };
        match result {
            Err(e) if linux::refused(&e) => {
                self.fall_back()?;
                // A buffer that holds what the pipe held takes nothing more until it is written.
                if self.room() == 0 {
                    Ok(None)
                } else {
                    self.take()
                }
            }
            other => would_block(other),
        }
    }

    /// One write of what it holds to `to`: how many bytes, `None` when `to` takes none now.
    fn give(&mut self) -> io::Result<Option<usize>> {
        let result = match &mut self.way {
            #[cfg(target_os = "linux")]
            Way::Splice(pipe) => linux::splice(pipe.read.as_fd(), self.to, self.held),
            Way::Copy { buffer, start } => {
                let n = write(self.to, &buffer[*start..*start + self.held]);
                if let Ok(n) = n {
                    *start += n;
                }
                n
            }
        };
        match result {
            Err(e) if linux::refused(&e) => {
                self.fall_back()?;
                self.give()
            }
            other => would_block(other),
        }
    }

    /// Goes on copying through a buffer, with what the pipe holds moved into it first.
    fn fall_back(&mut self) -> io::Result<()> {
        tracing::debug!("the kernel refused a splice; copying through a buffer");
        #[cfg(target_os = "linux")]
        if let Way::Splice(pipe) = &self.way {
            let mut buffer = vec![0u8; COPY_BUFFER.max(self.held)];
            let mut filled = 0;
            while filled < self.held {
                match read(pipe.read.as_fd(), &mut buffer[filled..self.held])? {
                    0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                    n => filled += n,
                }
            }
            self.way = Way::Copy { buffer, start: 0 };
            return Ok(());
        }
        Err(io::Error::other("a copy cannot fall back further"))
    }
}

impl Way {
    fn copy() -> Way {
        Way::Copy {
            buffer: vec![0u8; COPY_BUFFER],
            start: 0,
        }
    }
}

/// `None` for an error that only says nothing is ready now.
fn would_block(result: io::Result<usize>) -> io::Result<Option<usize>> {
    match result {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// read(2), again after an interrupt.
fn read(fd: BorrowedFd<'_>, buffer: &mut [u8]) -> io::Result<usize> {
    Ok(retry_on_intr(|| rustix::io::read(fd, &mut *buffer))?)
}

/// write(2), again after an interrupt.
fn write(fd: BorrowedFd<'_>, buffer: &[u8]) -> io::Result<usize> {
    Ok(retry_on_intr(|| rustix::io::write(fd, buffer))?)
}

#[cfg(target_os = "linux")]
mod linux {
    use std::fs::File;
    use std::io;
    use std::os::fd::BorrowedFd;

    use rustix::io::{Errno, retry_on_intr};
    use rustix::pipe::{PipeFlags, SpliceFlags};

    /// What the pipe is asked to hold: a bulk transfer moves this much per pair of splices.
    const PIPE_SIZE: usize = 1 << 20;

    /// Whether an error is the kernel refusing the splice itself, not the connection failing.
    pub(super) fn refused(e: &io::Error) -> bool {
        matches!(
            Errno::from_io_error(e),
            Some(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP)
        )
    }

    /// A pipe's two ends, and how much it holds.
    pub(super) struct Pipe {
        pub(super) read: File,
        pub(super) write: File,
        pub(super) size: usize,
    }

    impl Pipe {
        pub(super) fn new() -> io::Result<Pipe> {
            let (read, write) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
            // A larger pipe moves more per splice; a kernel that keeps it smaller is fine.
            let _ = rustix::pipe::fcntl_setpipe_size(&write, PIPE_SIZE);
            let size = rustix::pipe::fcntl_getpipe_size(&write).unwrap_or(0);
            Ok(Pipe {
                read: File::from(read),
                write: File::from(write),
                size: size.max(4096),
            })
        }
    }

    /// One splice of up to `len` bytes that does not wait, again after an interrupt. Neither end
    /// is read at an offset.
    pub(super) fn splice(
        from: BorrowedFd<'_>,
        to: BorrowedFd<'_>,
        len: usize,
    ) -> io::Result<usize> {
        let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
        Ok(retry_on_intr(|| {
            rustix::pipe::splice(from, None, to, None, len, flags)
        })?)
    }
}

#[cfg(not(target_os = "linux"))]
mod linux {
    pub(super) fn refused(_: &std::io::Error) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::Shutdown;
    use tokio::net::{TcpListener, TcpStream};

    const SPLICE: Options = Options {
        splice: true,
        spin: Duration::ZERO,
    };
    const COPY: Options = Options {
        splice: false,
        spin: Duration::ZERO,
    };
    const SPIN: Options = Options {
        splice: true,
        spin: Duration::from_micros(100),
    };

    /// A relayed pair over real loopback sockets: what the test holds as the client, and what
    /// it holds as the upstream, with the relay running between them.
    async fn relayed(
        options: Options,
    ) -> (
        std::net::TcpStream,
        std::net::TcpStream,
        tokio::task::JoinHandle<io::Result<Relayed>>,
    ) {
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let back = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(front.local_addr().unwrap())
            .await
            .unwrap();
        let (accepted, _) = front.accept().await.unwrap();
        let proxy_side = TcpStream::connect(back.local_addr().unwrap())
            .await
            .unwrap();
        let (upstream, _) = back.accept().await.unwrap();
        let task = tokio::spawn(relay(accepted, proxy_side, options));
        let client = client.into_std().unwrap();
        client.set_nonblocking(false).unwrap();
        let upstream = upstream.into_std().unwrap();
        upstream.set_nonblocking(false).unwrap();
        (client, upstream, task)
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    /// Sends `len` bytes from the client, echoes them at the upstream, and reads them back;
    /// then both close.
    async fn echo_through(options: Options, len: usize) -> Relayed {
        let (mut client, mut upstream, task) = relayed(options).await;
        let echo = std::thread::spawn(move || {
            let mut got = Vec::new();
            upstream.read_to_end(&mut got).unwrap();
            upstream.write_all(&got).unwrap();
            upstream.shutdown(Shutdown::Write).unwrap();
            got.len()
        });
        let sent = pattern(len);
        let reader = {
            let mut client = client.try_clone().unwrap();
            std::thread::spawn(move || {
                let mut back = Vec::new();
                client.read_to_end(&mut back).unwrap();
                back
            })
        };
        client.write_all(&sent).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let back = reader.join().unwrap();
        assert_eq!(echo.join().unwrap(), len);
        assert!(back == sent, "the bytes came back changed");
        task.await.unwrap().unwrap()
    }

    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tcp_to_tcp_splices_every_byte_both_ways_on_linux() {
        let len = 8 << 20;
        let relayed = echo_through(SPLICE, len).await;
        let expected = Moved {
            bytes: len as u64,
            path: Path::Splice,
        };
        assert_eq!(relayed.to_upstream, expected);
        assert_eq!(relayed.to_client, expected);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_splice_every_byte_is_copied_both_ways() {
        let len = 3 << 20;
        let relayed = echo_through(COPY, len).await;
        let expected = Moved {
            bytes: len as u64,
            path: Path::Copy,
        };
        assert_eq!(relayed.to_upstream, expected);
        assert_eq!(relayed.to_client, expected);
    }

    /// Both directions stream at once, each far larger than a socket's and the pipe's buffers,
    /// so the one thread must keep moving one way while the other waits for room.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn both_directions_stream_at_once_on_one_thread() {
        for options in [SPLICE, COPY, SPIN] {
            let (client, upstream, task) = relayed(options).await;
            let up = pattern(16 << 20);
            let down: Vec<u8> = pattern(12 << 20).into_iter().rev().collect();
            let send = |mut to: std::net::TcpStream, bytes: Vec<u8>| {
                std::thread::spawn(move || {
                    to.write_all(&bytes).unwrap();
                    to.shutdown(Shutdown::Write).unwrap();
                })
            };
            let receive = |mut from: std::net::TcpStream| {
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    from.read_to_end(&mut got).unwrap();
                    got
                })
            };
            let sending = [
                send(client.try_clone().unwrap(), up.clone()),
                send(upstream.try_clone().unwrap(), down.clone()),
            ];
            let at_upstream = receive(upstream);
            let at_client = receive(client);
            sending.into_iter().for_each(|s| s.join().unwrap());
            assert!(
                at_upstream.join().unwrap() == up,
                "{options:?}: upstream got other bytes"
            );
            assert!(
                at_client.join().unwrap() == down,
                "{options:?}: client got other bytes"
            );
            let relayed = task.await.unwrap().unwrap();
            assert_eq!(relayed.to_upstream.bytes, up.len() as u64);
            assert_eq!(relayed.to_client.bytes, down.len() as u64);
        }
    }

    /// A query's pattern: a small question, a small answer, many times, with and without the
    /// spin after each move; every answer arrives whole and in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn small_round_trips_arrive_whole_and_in_order_with_and_without_spinning() {
        for options in [SPLICE, COPY, SPIN] {
            let (mut client, mut upstream, task) = relayed(options).await;
            let server = std::thread::spawn(move || {
                let mut question = [0u8; 8];
                let mut answered = 0u64;
                while upstream.read_exact(&mut question).is_ok() {
                    let n = u64::from_le_bytes(question);
                    upstream.write_all(&(n * 3).to_le_bytes()).unwrap();
                    answered += 1;
                }
                answered
            });
            for n in 0..2000u64 {
                client.write_all(&n.to_le_bytes()).unwrap();
                let mut answer = [0u8; 8];
                client.read_exact(&mut answer).unwrap();
                assert_eq!(u64::from_le_bytes(answer), n * 3, "{options:?}");
            }
            client.shutdown(Shutdown::Write).unwrap();
            assert_eq!(server.join().unwrap(), 2000);
            let mut rest = Vec::new();
            client.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty());
            let relayed = task.await.unwrap().unwrap();
            assert_eq!(relayed.to_upstream.bytes, 16_000);
            assert_eq!(relayed.to_client.bytes, 16_000);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_half_close_is_passed_on_and_the_answer_still_comes_back() {
        let (mut client, mut upstream, task) = relayed(SPLICE).await;
        client.write_all(b"question").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut asked = Vec::new();
        upstream.read_to_end(&mut asked).unwrap();
        assert_eq!(asked, b"question");
        upstream.write_all(b"answer after the end").unwrap();
        drop(upstream);
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).unwrap();
        assert_eq!(answer, b"answer after the end");
        let relayed = task.await.unwrap().unwrap();
        assert_eq!(relayed.to_upstream.bytes, 8);
        assert_eq!(relayed.to_client.bytes, 20);
    }

    /// An upstream that resets ends the relay with its error, and the client is let go (its
    /// read ends) instead of being held open.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reset_upstream_ends_the_relay_with_an_error_and_lets_the_client_go() {
        for options in [SPLICE, SPIN] {
            let (mut client, upstream, task) = relayed(options).await;
            // Linger 0: the close sends a reset, not an end.
            socket_linger_zero(&upstream);
            drop(upstream);
            let mut rest = Vec::new();
            let _ = client.read_to_end(&mut rest);
            assert!(rest.is_empty());
            let ended = task.await.unwrap();
            assert!(
                ended.is_err(),
                "{options:?}: a reset ended the relay as {ended:?}"
            );
        }
    }

    fn socket_linger_zero(stream: &std::net::TcpStream) {
        rustix::net::sockopt::set_socket_linger(stream, Some(Duration::ZERO))
            .expect("SO_LINGER set");
    }

    /// The kernel refuses to splice into a file opened for appending (EINVAL): the direction
    /// moves what its pipe holds, falls back to copying, and every byte still arrives, in order.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_splice_the_kernel_refuses_falls_back_to_copying() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (receiver, _) = listener.accept().unwrap();
        receiver.set_nonblocking(true).unwrap();
        let sent = pattern(1 << 20);
        let writer = {
            let sent = sent.clone();
            std::thread::spawn(move || {
                sender.write_all(&sent).unwrap();
            })
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("appended");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let moved = pump(receiver.as_fd(), file.as_fd(), SPLICE).unwrap();
        writer.join().unwrap();
        assert_eq!(
            moved,
            Moved {
                bytes: sent.len() as u64,
                path: Path::Copy
            }
        );
        assert!(
            std::fs::read(&path).unwrap() == sent,
            "the file holds other bytes"
        );
    }
}
