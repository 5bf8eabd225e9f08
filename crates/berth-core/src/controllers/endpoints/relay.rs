//! Moving a proxied connection's bytes both ways until both sides have closed.
//!
//! Each direction runs on a thread of its own over blocking sockets. On Linux its bytes go
//! socket → pipe → socket with splice(2), so they are never copied through user space; where the
//! kernel refuses a splice (`EINVAL`, `ENOSYS`, `EOPNOTSUPP`: a socket or file the splice cannot
//! take, a kernel without it) or no pipe can be had, the direction moves what it has already
//! taken in and goes on with read and write through a buffer. Elsewhere it always copies.
//!
//! Why threads, not the async runtime: a thread blocked in a splice is woken by the kernel as
//! the bytes arrive and moves them at once, while through the runtime the same bytes wait for
//! its poller to wake a worker that then polls the task: a round trip of a small query pays
//! that twice (docs/benchmarks.md §5 measures both). A connection holds two threads with small
//! stacks for its life; the endpoints serve a developer's clients, not thousands.
//!
//! A side that closes its sending half has that half closed on the other side too (half-close
//! is kept); an error on either direction shuts both sockets down, which ends the other.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;

use tokio::sync::oneshot;

/// The buffer of a direction that copies.
const COPY_BUFFER: usize = 64 * 1024;
/// Each relay thread's stack: the threads hold no more than a few frames.
const THREAD_STACK: usize = 128 * 1024;

/// How a direction moved its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// splice(2) through a pipe, from its first byte to its last.
    Splice,
    /// read and write through a buffer: asked for, or the kernel refused a splice.
    Copy,
}

/// What one direction moved, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Moved {
    pub(crate) bytes: u64,
    pub(crate) path: Path,
}

/// What a finished connection moved each way.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Relayed {
    pub(crate) to_upstream: Moved,
    pub(crate) to_client: Moved,
}

/// Moves bytes between `client` and `upstream` both ways until both directions have ended;
/// `splice` false copies through a buffer only. An error is the first direction's that failed.
pub(crate) async fn relay(
    client: tokio::net::TcpStream,
    upstream: tokio::net::TcpStream,
    splice: bool,
) -> io::Result<Relayed> {
    let client = blocking(client)?;
    let upstream = blocking(upstream)?;
    let up = direction(client.try_clone()?, upstream.try_clone()?, splice)?;
    let down = direction(upstream, client, splice)?;
    let (up, down) = (up.await, down.await);
    let ended = || io::Error::other("a relay thread ended without an answer");
    Ok(Relayed {
        to_upstream: up.map_err(|_| ended())??,
        to_client: down.map_err(|_| ended())??,
    })
}

/// The socket taken from the async runtime, in blocking mode.
fn blocking(stream: tokio::net::TcpStream) -> io::Result<TcpStream> {
    let stream = stream.into_std()?;
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// One direction on a thread of its own; its answer comes on the receiver.
fn direction(
    mut from: TcpStream,
    mut to: TcpStream,
    splice: bool,
) -> io::Result<oneshot::Receiver<io::Result<Moved>>> {
    let (answer, answered) = oneshot::channel();
    std::thread::Builder::new()
        .name("berth-relay".to_owned())
        .stack_size(THREAD_STACK)
        .spawn(move || {
            let moved = pump(&mut from, &mut to, splice);
            match &moved {
                // The other side learns the sender is done; the other direction goes on.
                Ok(_) => {
                    let _ = to.shutdown(Shutdown::Write);
                }
                // Both sockets down: the other direction's thread wakes and ends too.
                Err(_) => {
                    let _ = from.shutdown(Shutdown::Both);
                    let _ = to.shutdown(Shutdown::Both);
                }
            }
            let _ = answer.send(moved);
        })?;
    Ok(answered)
}

/// Moves everything `from` sends into `to` until `from` reaches its end: spliced where the
/// kernel allows it (and `splice` asks for it), else copied.
pub(crate) fn pump<R, W>(from: &mut R, to: &mut W, splice: bool) -> io::Result<Moved>
where
    R: Read + AsFd,
    W: Write + AsFd,
{
    #[cfg(target_os = "linux")]
    if splice {
        return match linux::splice_all(from, to)? {
            linux::Spliced::Done(bytes) => Ok(Moved {
                bytes,
                path: Path::Splice,
            }),
            linux::Spliced::Refused(bytes) => {
                tracing::debug!("the kernel refused a splice; copying through a buffer");
                Ok(Moved {
                    bytes: bytes + copy_all(from, to)?,
                    path: Path::Copy,
                })
            }
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = splice;
    Ok(Moved {
        bytes: copy_all(from, to)?,
        path: Path::Copy,
    })
}

/// read and write through a buffer until `from` reaches its end.
fn copy_all(from: &mut impl Read, to: &mut impl Write) -> io::Result<u64> {
    let mut buffer = vec![0u8; COPY_BUFFER];
    let mut total = 0u64;
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buffer[..n])?;
        total += n as u64;
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::fs::File;
    use std::io::{self, Read, Write};
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

    /// What the pipe is asked to hold: a bulk transfer moves this much per pair of splices.
    const PIPE_SIZE: libc::c_int = 1 << 20;

    pub(super) enum Spliced {
        /// Every byte up to `from`'s end went through the pipe.
        Done(u64),
        /// The kernel refused a splice (or no pipe could be had) after this many bytes, all of
        /// them written to `to`: the caller copies the rest.
        Refused(u64),
    }

    /// Whether an error is the kernel refusing the splice itself, not the connection failing.
    fn refused(e: &io::Error) -> bool {
        matches!(
            e.raw_os_error(),
            Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
        )
    }

    /// A pipe's two ends, and how much it holds.
    struct Pipe {
        read: File,
        write: File,
        size: usize,
    }

    impl Pipe {
        fn new() -> io::Result<Pipe> {
            let mut fds = [0 as libc::c_int; 2];
            // SAFETY: `fds` has room for the two descriptors pipe2 writes.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nothing else.
            let (read, write) =
                unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
            // A larger pipe moves more per splice; a kernel that keeps it smaller is fine.
            // SAFETY: F_SETPIPE_SZ and F_GETPIPE_SZ take an int and touch no memory.
            let size = unsafe {
                libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE);
                libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ)
            };
            Ok(Pipe {
                read: File::from(read),
                write: File::from(write),
                size: usize::try_from(size).unwrap_or(0).max(4096),
            })
        }
    }

    /// One splice of up to `len` bytes, again after an interrupt.
    fn splice(from: &impl AsFd, to: &impl AsFd, len: usize) -> io::Result<usize> {
        loop {
            // SAFETY: both descriptors are open for the call (borrowed), the offsets are null
            // (neither end is read at an offset), and splice touches no memory of ours.
            let n = unsafe {
                libc::splice(
                    from.as_fd().as_raw_fd(),
                    std::ptr::null_mut(),
                    to.as_fd().as_raw_fd(),
                    std::ptr::null_mut(),
                    len,
                    libc::SPLICE_F_MOVE,
                )
            };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Splices everything `from` sends into `to`, through a pipe, until `from`'s end.
    pub(super) fn splice_all<R, W>(from: &mut R, to: &mut W) -> io::Result<Spliced>
    where
        R: Read + AsFd,
        W: Write + AsFd,
    {
        let Ok(mut pipe) = Pipe::new() else {
            return Ok(Spliced::Refused(0));
        };
        let mut total = 0u64;
        loop {
            let taken = match splice(from, &pipe.write, pipe.size) {
                Ok(0) => return Ok(Spliced::Done(total)),
                Ok(n) => n,
                Err(e) if refused(&e) => return Ok(Spliced::Refused(total)),
                Err(e) => return Err(e),
            };
            let mut left = taken;
            while left > 0 {
                match splice(&pipe.read, to, left) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(n) => {
                        left -= n;
                        total += n as u64;
                    }
                    Err(e) if refused(&e) => {
                        // What the pipe holds is written the ordinary way before copying on.
                        let mut held = vec![0u8; left];
                        pipe.read.read_exact(&mut held)?;
                        to.write_all(&held)?;
                        return Ok(Spliced::Refused(total + left as u64));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::Shutdown;
    use tokio::net::{TcpListener, TcpStream};

    /// A relayed pair over real loopback sockets: what the test holds as the client, and what
    /// it holds as the upstream, with the relay running between them.
    async fn relayed(
        splice: bool,
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
        let task = tokio::spawn(relay(accepted, proxy_side, splice));
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
    async fn echo_through(splice: bool, len: usize) -> Relayed {
        let (mut client, mut upstream, task) = relayed(splice).await;
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
        let relayed = echo_through(true, len).await;
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
        let relayed = echo_through(false, len).await;
        let expected = Moved {
            bytes: len as u64,
            path: Path::Copy,
        };
        assert_eq!(relayed.to_upstream, expected);
        assert_eq!(relayed.to_client, expected);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_half_close_is_passed_on_and_the_answer_still_comes_back() {
        let (mut client, mut upstream, task) = relayed(true).await;
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_reset_upstream_ends_both_directions() {
        let (mut client, upstream, task) = relayed(true).await;
        // Linger 0: the close sends a reset, not an end.
        socket_linger_zero(&upstream);
        drop(upstream);
        let mut rest = Vec::new();
        let _ = client.read_to_end(&mut rest);
        let _ = client.write_all(b"anyone?");
        // The relay ends (with or without an error) instead of holding the client.
        let _ = task.await.unwrap();
    }

    fn socket_linger_zero(stream: &std::net::TcpStream) {
        use std::os::fd::AsRawFd;
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: the descriptor is open and `linger` is the option's type and size.
        let rc = unsafe {
            libc::setsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&raw const linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
    }

    /// The kernel refuses to splice into a file opened for appending (EINVAL): the direction
    /// falls back to copying and every byte still arrives, in order.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_splice_the_kernel_refuses_falls_back_to_copying() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut sender = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        let sent = pattern(1 << 20);
        let writer = {
            let sent = sent.clone();
            std::thread::spawn(move || {
                sender.write_all(&sent).unwrap();
            })
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("appended");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        let moved = pump(&mut receiver, &mut file, true).unwrap();
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
