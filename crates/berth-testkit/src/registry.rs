//! A registry of the test's own in front of the fixture registry, on a loopback port of its
//! own. It passes every request through to the fixture registry, and the test can hold the
//! requests (a pull that waits on its registry, for as long as the test wants) or
//! change the bytes of a manifest (a registry that does not serve what a digest names), without
//! touching the fixture registry or anything another test uses.
//!
//! Its images are the fixture images under another name: `127.0.0.1:<port>/<scope>/<fixture
//! repository>@<digest>`, where the scope is the test daemon's prefix, so no run or test shares
//! a local image with another. The engine reads 127.0.0.0/8 registries over plain http (after a
//! TLS attempt, which is refused the way the fixture registry refuses it).

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    /// Requests wait while this is set.
    hold: bool,
    /// Requests that arrived while held.
    held_arrivals: u32,
    /// Digests whose manifest bytes are changed on the way.
    tampered: HashSet<String>,
    /// Every request line passed, for a failing test's message.
    seen: Vec<String>,
}

/// The proxy; it stops accepting when dropped, and removes the local images of its name.
pub struct RegistryProxy {
    port: u16,
    scope: String,
    upstream: String,
    state: Arc<(Mutex<State>, Condvar)>,
}

impl RegistryProxy {
    /// Starts a proxy to the fixture registry whose images are named under `scope` (lower case).
    pub fn start(scope: &str) -> RegistryProxy {
        let upstream = crate::fixture("BERTH_TEST_REGISTRY");
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().unwrap().port();
        let state: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let proxy = RegistryProxy {
            port,
            scope: scope.to_lowercase(),
            upstream: upstream.clone(),
            state: state.clone(),
        };
        let strip = format!("/v2/{}/", proxy.scope);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (state, upstream, strip) = (state.clone(), upstream.clone(), strip.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, &state, &upstream, &strip);
                });
            }
        });
        proxy
    }

    /// `127.0.0.1:<port>`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A fixture image (`<fixture registry>/<repository>@<digest>`) under this proxy's name.
    pub fn image(&self, fixture_image: &str) -> String {
        let rest = fixture_image
            .strip_prefix(&format!("{}/", self.upstream))
            .unwrap_or_else(|| panic!("{fixture_image} is not a fixture image"));
        format!("{}/{}/{rest}", self.host(), self.scope)
    }

    /// From now on every request waits until [`RegistryProxy::release`]. (A pull always
    /// begins with the registry's `GET /v2/`; the engine may ask no more than that of a
    /// registry when it holds the manifest already.)
    pub fn hold(&self) {
        let mut s = self.state.0.lock().unwrap_or_else(|e| e.into_inner());
        s.hold = true;
        s.held_arrivals = 0;
    }

    /// Waits (told by the proxy's own thread, never on a timer) until a request is held: the
    /// engine has begun to pull. Panics at `timeout`.
    pub fn wait_held(&self, timeout: Duration) {
        let (lock, cond) = &*self.state;
        let deadline = Instant::now() + timeout;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        while s.held_arrivals == 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no request reached the registry within {timeout:?}; requests: {:?}",
                s.seen
            );
            s = cond
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Lets every held request, and every later one, through.
    pub fn release(&self) {
        let (lock, cond) = &*self.state;
        lock.lock().unwrap_or_else(|e| e.into_inner()).hold = false;
        cond.notify_all();
    }

    /// From now on the manifest with `digest` is served with one byte more (a trailing
    /// newline): still the same manifest to a JSON reader, but its bytes no longer hash to the
    /// digest that names it.
    pub fn tamper(&self, digest: &str) {
        self.state
            .0
            .lock()
            .unwrap()
            .tampered
            .insert(digest.to_owned());
    }

    /// The request lines passed so far.
    pub fn seen(&self) -> Vec<String> {
        self.state
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .seen
            .clone()
    }
}

impl Drop for RegistryProxy {
    fn drop(&mut self) {
        self.release();
        // Every local image pulled under this proxy's name goes with it.
        crate::docker::remove_local_images(&format!("{}/", self.host()));
    }
}

/// One connection: one request, passed on with `Connection: close`, its answer passed back.
fn serve(
    mut client: TcpStream,
    state: &Arc<(Mutex<State>, Condvar)>,
    upstream: &str,
    strip: &str,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    // The engine tries TLS first: answer as a plain-http server does, so it falls back.
    if reader.fill_buf()?.first() == Some(&0x16) {
        client.write_all(b"HTTP/1.0 400 Bad Request\r\n\r\n")?;
        return Ok(());
    }
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut headers = Vec::new();
    let mut content_length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            content_length = v.trim().parse().unwrap_or(0);
        }
        if lower.starts_with("host:") || lower.starts_with("connection:") {
            continue;
        }
        headers.push(line);
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body)?;
    let mut parts = request_line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_owned(),
        parts.next().unwrap_or("").to_owned(),
    );
    let path = match path.strip_prefix(strip) {
        Some(rest) => format!("/v2/{rest}"),
        None => path,
    };
    let manifest = path.contains("/manifests/");
    let digest = path.rsplit('/').next().unwrap_or("").to_owned();
    {
        let (lock, cond) = &**state;
        let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
        s.seen.push(format!("{method} {path}"));
        if s.hold {
            s.held_arrivals += 1;
            cond.notify_all();
            while s.hold {
                s = cond.wait(s).unwrap_or_else(|e| e.into_inner());
            }
        }
    }
    let tamper = manifest
        && method == "GET"
        && state
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .tampered
            .contains(&digest);

    let mut server = TcpStream::connect(upstream)?;
    server.set_read_timeout(Some(Duration::from_secs(120)))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {upstream}\r\nConnection: close\r\n");
    for h in &headers {
        head.push_str(h);
    }
    head.push_str("\r\n");
    server.write_all(head.as_bytes())?;
    server.write_all(&body)?;
    if !tamper {
        std::io::copy(&mut server, &mut client)?;
        return Ok(());
    }
    let mut answer = Vec::new();
    server.read_to_end(&mut answer)?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an answer with a head");
    let (head, rest) = (
        String::from_utf8_lossy(&answer[..split]).into_owned(),
        &answer[split + 4..],
    );
    let mut changed = rest.to_vec();
    changed.push(b'\n');
    let mut out = String::new();
    for line in head.split("\r\n") {
        if !line.to_ascii_lowercase().starts_with("content-length:") {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n", changed.len()));
    client.write_all(out.as_bytes())?;
    client.write_all(&changed)?;
    Ok(())
}
