//! A Unix socket in front of the engine's that a test can cut: while down it refuses new
//! connections and has shut every open one, as an engine that stopped would. A daemon started
//! with `DOCKER_HOST` at [`EngineGate::host`] loses its engine at [`EngineGate::set_up`]`(false)`
//! and gets it back at `set_up(true)`.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The gate; its socket goes with it.
pub struct EngineGate {
    path: PathBuf,
    up: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<UnixStream>>>,
    _dir: tempfile::TempDir,
}

impl EngineGate {
    /// A gate, open, in front of `/var/run/docker.sock`.
    pub fn new() -> EngineGate {
        let dir = tempfile::tempdir().expect("a directory for the gate's socket");
        let path = dir.path().join("docker.sock");
        let listener = UnixListener::bind(&path).expect("the gate's socket");
        let up = Arc::new(AtomicBool::new(true));
        let open = Arc::new(Mutex::new(Vec::<UnixStream>::new()));
        let (up2, open2) = (up.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: refused
                }
                let Ok(engine) = UnixStream::connect("/var/run/docker.sock") else {
                    continue;
                };
                let (Ok(c1), Ok(e1), Ok(c_kept), Ok(e_kept)) = (
                    client.try_clone(),
                    engine.try_clone(),
                    client.try_clone(),
                    engine.try_clone(),
                ) else {
                    continue;
                };
                open2
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend([c_kept, e_kept]);
                let (mut c1, mut e1) = (c1, e1);
                let (mut c2, mut e2) = (client, engine);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c1, &mut e1);
                    let _ = e1.shutdown(std::net::Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut e2, &mut c2);
                    let _ = c2.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        EngineGate {
            path,
            up,
            open,
            _dir: dir,
        }
    }

    /// `unix://<its socket>`: the `DOCKER_HOST` to give a daemon.
    pub fn host(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    /// Opens the gate, or cuts it: every connection through it is shut, and new ones refused.
    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            for s in self
                .open
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..)
            {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

impl Default for EngineGate {
    fn default() -> Self {
        Self::new()
    }
}
