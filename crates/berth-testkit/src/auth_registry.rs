//! A registry that wants a password: Debian's `docker-registry` with htpasswd auth, on a
//! loopback port and a storage folder of its own, stopped when dropped.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::tagging::Target;

/// The user the registry accepts.
pub const USER: &str = "berth-test";
/// Its password (bcrypt-hashed below, as htpasswd files hold them).
pub const PASSWORD: &str = "berth-test-password";
const HTPASSWD: &str = "berth-test:$2b$12$fthqskUntcVMikzSML2IcuwKk5UECfS.WF7KuFa647JuMjSvmO8IC\n";

pub struct AuthRegistry {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl AuthRegistry {
    /// Starts it and waits until it answers `/v2/` (with a 401).
    pub fn start() -> AuthRegistry {
        let dir = tempfile::tempdir().expect("a folder for the registry");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        std::fs::write(dir.path().join("htpasswd"), HTPASSWD).unwrap();
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
             auth:\n  htpasswd:\n    realm: berth-test\n    path: {}\n\
             http:\n  addr: 127.0.0.1:{port}\n  secret: berth-test-{port}\n",
            dir.path().join("storage").display(),
            dir.path().join("htpasswd").display(),
        );
        let config_path = dir.path().join("config.yml");
        std::fs::File::create(&config_path)
            .and_then(|mut f| f.write_all(config.as_bytes()))
            .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("docker-registry (Debian's package docker-registry) to start");
        let registry = AuthRegistry {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answered = reqwest::blocking::get(format!("http://127.0.0.1:{port}/v2/"))
                .map(|r| r.status() == reqwest::StatusCode::UNAUTHORIZED)
                .unwrap_or(false);
            if answered {
                return registry;
            }
            assert!(
                Instant::now() < deadline,
                "the password registry did not answer on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `127.0.0.1:port`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Where to push, with its credentials.
    pub fn target(&self) -> Target {
        Target {
            registry: self.address(),
            auth: Some((USER.to_owned(), PASSWORD.to_owned())),
        }
    }

    /// A Docker config folder (for `DOCKER_CONFIG`) that holds its credentials.
    pub fn docker_config(&self) -> tempfile::TempDir {
        docker_config_for(&self.address())
    }
}

/// A Docker config folder (for `DOCKER_CONFIG`) that holds [`USER`] and [`PASSWORD`] for the
/// registry at `address`.
pub fn docker_config_for(address: &str) -> tempfile::TempDir {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let config = serde_json::json!({"auths": {address: {"auth": auth}}});
    std::fs::File::create(dir.path().join("config.json"))
        .and_then(|mut f| f.write_all(config.to_string().as_bytes()))
        .unwrap();
    dir
}

impl Drop for AuthRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
