//! A second Docker engine for the swarm tests: a `dockerd` of its own in a network namespace of
//! its own, joined to the test's swarm as a worker.
//!
//! Needs root (CI runs as root). The namespace is linked to the host by a veth pair (host side
//! [`HOST_ADDR`], namespace side [`NODE_ADDR`]); the swarm's manager advertises [`HOST_ADDR`]. The
//! engine is started with `nsenter --net=<namespace>`, not `ip netns exec` (which remounts `/sys`,
//! after which the engine finds no devices cgroup), with its own `--config-file` (the machine's
//! `/etc/docker/daemon.json` names the first engine's data root), data root, exec root and socket
//! under a temporary directory, no bridge and no iptables rules.
//!
//! The fixture images are pinned as `127.0.0.1:<port>/...@sha256:...`, and the namespace's
//! loopback is its own: a thread of this test process listens on the namespace's loopback at the
//! registry's port (it enters the namespace with `setns`, binds, and comes back) and forwards each
//! connection to the registry on the host's loopback.
//!
//! Everything goes when the node is dropped, on every exit path: the worker leaves the swarm, the
//! engine is stopped, the namespace (and with it the veth pair) is deleted and the temporary
//! directory removed.

use std::io::Write;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The host's end of the veth pair: the address the swarm's manager advertises.
pub const HOST_ADDR: &str = "10.77.0.1";
/// The second node's end of the veth pair.
pub const NODE_ADDR: &str = "10.77.0.2";

/// A second engine in a network namespace; see the module's documentation.
pub struct SecondNode {
    /// The network namespace's name (`/var/run/netns/<name>`).
    pub netns: String,
    /// The host side of the veth pair.
    veth: String,
    /// Where its engine listens (`unix:///...`), as `DOCKER_HOST` and berth's node map take it.
    pub host: String,
    dir: Option<tempfile::TempDir>,
    dockerd: Option<Child>,
    /// Whether it joined a swarm (it leaves it when dropped).
    joined: bool,
}

fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program} could not run: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "{program} {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn must(program: &str, args: &[&str]) -> String {
    run(program, args).unwrap_or_else(|e| panic!("{e}"))
}

impl SecondNode {
    /// Makes the namespace and the veth pair and starts the engine; panics with what failed.
    /// `tag` (a few characters) tells this run's namespace and interfaces apart.
    pub fn start(tag: &str) -> SecondNode {
        assert!(
            unsafe { libc::geteuid() } == 0,
            "the second swarm node needs root (a network namespace and a second Docker engine)"
        );
        let tag: String = tag
            .chars()
            .rev()
            .filter(char::is_ascii_alphanumeric)
            .take(8)
            .collect();
        let dir = tempfile::Builder::new()
            .prefix("berth-node2-")
            .tempdir()
            .expect("a temporary directory");
        let mut node = SecondNode {
            netns: format!("berth-n2-{tag}"),
            veth: format!("bn2h{tag}"),
            host: format!("unix://{}", dir.path().join("docker.sock").display()),
            dir: Some(dir),
            dockerd: None,
            joined: false,
        };
        node.network();
        node.engine();
        node
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("the node's directory").path()
    }

    fn network(&mut self) {
        let (ns, host_side) = (self.netns.clone(), self.veth.clone());
        let node_side = format!("bn2n{}", &host_side[4..]);
        let taken = run("ip", &["-4", "-o", "addr", "show"]).unwrap_or_default();
        assert!(
            !taken.contains(&format!(" {HOST_ADDR}/")),
            "{HOST_ADDR} is already on an interface of this machine (a second node left over?): \
             `ip -4 addr` says {taken}"
        );
        must("ip", &["netns", "add", &ns]);
        must(
            "ip",
            &[
                "link", "add", &host_side, "type", "veth", "peer", "name", &node_side,
            ],
        );
        must("ip", &["link", "set", &node_side, "netns", &ns]);
        must(
            "ip",
            &["addr", "add", &format!("{HOST_ADDR}/24"), "dev", &host_side],
        );
        must("ip", &["link", "set", &host_side, "up"]);
        must(
            "ip",
            &[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{NODE_ADDR}/24"),
                "dev",
                &node_side,
            ],
        );
        must("ip", &["-n", &ns, "link", "set", &node_side, "up"]);
        must("ip", &["-n", &ns, "link", "set", "lo", "up"]);
    }

    fn engine(&mut self) {
        let dir = self.dir().to_path_buf();
        let config = dir.join("daemon.json");
        std::fs::write(&config, "{}").expect("the engine's config");
        for sub in ["data", "exec"] {
            std::fs::create_dir(dir.join(sub)).expect("the engine's directories");
        }
        let log = std::fs::File::create(dir.join("dockerd.log")).expect("the engine's log");
        let path = |p: PathBuf| p.display().to_string();
        let child = Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{}", self.netns))
            .arg("dockerd")
            .args(["--config-file", &path(config)])
            .args(["--data-root", &path(dir.join("data"))])
            .args(["--exec-root", &path(dir.join("exec"))])
            .args(["--pidfile", &path(dir.join("dockerd.pid"))])
            .args(["-H", &self.host])
            .args(["--bridge", "none", "--iptables=false"])
            .args(["--storage-driver", "fuse-overlayfs"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the engine's log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("nsenter dockerd could not start: {e}"));
        self.dockerd = Some(child);
        // The engine says nothing when it is ready but answers `docker info`.
        let mut last = String::new();
        let answered = (0..300).any(|_| {
            if let Some(Ok(Some(status))) = self.dockerd.as_mut().map(Child::try_wait) {
                last = format!("dockerd exited ({status})");
                return true;
            }
            match run("docker", &["-H", &self.host, "info", "--format", "{{.ID}}"]) {
                Ok(_) => true,
                Err(e) => {
                    last = e;
                    std::thread::sleep(Duration::from_millis(100));
                    false
                }
            }
        });
        let exited = self
            .dockerd
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
        if !answered || exited {
            panic!(
                "the second Docker engine did not come up ({last}); its log: {}",
                std::fs::read_to_string(self.dir().join("dockerd.log")).unwrap_or_default()
            );
        }
    }

    /// A `docker` command against this engine, panicking on failure.
    pub fn docker(&self, args: &[&str]) -> String {
        let mut all = vec!["-H", self.host.as_str()];
        all.extend_from_slice(args);
        must("docker", &all)
    }

    /// Joins the swarm whose manager (on the host's engine, advertising [`HOST_ADDR`]) gives
    /// this worker token; returns this node's id.
    pub fn join(&mut self, token: &str) -> String {
        self.joined = true;
        self.docker(&[
            "swarm",
            "join",
            "--token",
            token,
            &format!("{HOST_ADDR}:2377"),
        ]);
        self.docker(&["info", "--format", "{{.Swarm.NodeID}}"])
    }

    /// Forwards the namespace's loopback `port` to the host's loopback `port` (the fixture
    /// registry), for as long as the test process lives.
    pub fn forward_loopback(&self, port: u16) {
        let listener = in_namespace(&format!("/var/run/netns/{}", self.netns), || {
            TcpListener::bind(("127.0.0.1", port))
        })
        .unwrap_or_else(|e| panic!("listening on the namespace's loopback port {port}: {e}"));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(inner) = conn else { continue };
                std::thread::spawn(move || {
                    if let Ok(outer) = TcpStream::connect(("127.0.0.1", port)) {
                        pipe(inner, outer);
                    }
                });
            }
        });
    }

    /// Kills the engine at once (SIGKILL), as a machine's engine dies; the namespace stays
    /// until the node is dropped.
    pub fn kill_engine(&mut self) {
        if let Some(mut child) = self.dockerd.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `done` for up to 30 s (for processes that end: nothing announces it).
fn support_wait(mut done: impl FnMut() -> bool) {
    for _ in 0..300 {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Copies both ways between two connections until each side has ended.
fn pipe(a: TcpStream, b: TcpStream) {
    let (Ok(a2), Ok(b2)) = (a.try_clone(), b.try_clone()) else {
        return;
    };
    let one = std::thread::spawn(move || copy_then_close(a, b2));
    copy_then_close(b, a2);
    let _ = one.join();
}

fn copy_then_close(mut from: TcpStream, mut to: TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.flush();
    let _ = to.shutdown(Shutdown::Write);
}

/// Runs `f` with this thread in the network namespace at `path`, then back in its own: a socket
/// made by `f` stays in the namespace it was made in.
fn in_namespace<T>(path: &str, f: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    let own = std::fs::File::open("/proc/thread-self/ns/net")?;
    let target = std::fs::File::open(path)?;
    // SAFETY: setns only changes this thread's network namespace, with valid open descriptors.
    if unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let made = f();
    // SAFETY: as above, back to the namespace this thread started in.
    if unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        // A thread left in another namespace would make every later socket there.
        panic!(
            "could not return to the test's own network namespace: {}",
            std::io::Error::last_os_error()
        );
    }
    made
}

impl Drop for SecondNode {
    fn drop(&mut self) {
        if self.joined && self.dockerd.is_some() {
            let _ = run("docker", &["-H", &self.host, "swarm", "leave", "--force"]);
        }
        if let Some(child) = self.dockerd.take() {
            // SIGTERM to the engine (nsenter execs it, so the child is dockerd itself), then
            // wait for it to unmount and end.
            let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
            // SAFETY: a signal to our own child process.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
            // Killed if it has not ended within 30 s.
            let _ = crate::wait_exit(child, Duration::from_secs(30));
        }
        // Whatever still runs in the namespace (a killed engine's containerd, its shims and
        // containers) goes with it.
        let left = run("ip", &["netns", "pids", &self.netns]).unwrap_or_default();
        for pid in left
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: a signal to a process of the namespace this node made.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        if !left.trim().is_empty() {
            support_wait(|| {
                run("ip", &["netns", "pids", &self.netns])
                    .unwrap_or_default()
                    .trim()
                    .is_empty()
            });
        }
        // What a killed engine may have left mounted under its directories.
        if let Some(dir) = &self.dir {
            let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
            let root = dir.path().display().to_string();
            let mut ours: Vec<&str> = mounts
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1))
                .filter(|m| m.starts_with(&root))
                .collect();
            ours.sort_by_key(|m| std::cmp::Reverse(m.len()));
            for m in ours {
                let _ = run("umount", &["-l", m]);
            }
        }
        let _ = run("ip", &["link", "del", &self.veth]);
        let _ = run("ip", &["netns", "del", &self.netns]);
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }
}
