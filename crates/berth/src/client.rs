//! A blocking client for the daemon's HTTP API, found the way `berth serve` sets itself up:
//! the URL from `--url`/`BERTH_URL` (default `http://127.0.0.1:2378`), the key from the first
//! entry of `BERTH_SERVICE_KEYS` or else the key file `<data dir>/service-key`.

use std::fmt;
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use crate::serve::{KEY_FILE, default_data_dir};

/// Where the CLI looks for the daemon unless told otherwise.
pub const DEFAULT_URL: &str = "http://127.0.0.1:2378";

/// How long an ordinary request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// The daemon could not be reached at all.
#[derive(Debug)]
pub struct Unreachable {
    pub url: String,
    pub detail: String,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the berth daemon is not answering at {} ({}): start it with `berth serve` (in a checkout of berth: `cargo run --release -- serve`), or point --url or BERTH_URL at it",
            self.url, self.detail
        )
    }
}

impl std::error::Error for Unreachable {}

/// The daemon answered with an error: `{"_tag", "message", ...}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub tag: String,
    pub message: String,
    pub body: Value,
    /// Where the key came from, for a refused key.
    pub key_source: String,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.tag.as_str() {
            "UnauthorizedError" => write!(
                f,
                "the daemon did not accept the service key from {} ({}): use the key file of the daemon you run (see --data-dir and BERTH_DATA_DIR) or set BERTH_SERVICE_KEYS to one of its keys",
                self.key_source, self.message
            ),
            "ResourceInstanceSpecRefusedError" => {
                let refusals: Vec<String> = self.body["refusals"]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .map(|r| {
                                format!(
                                    "{}: {}",
                                    r["field"].as_str().unwrap_or("spec"),
                                    r["reason"].as_str().unwrap_or("")
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if refusals.is_empty() {
                    write!(f, "{}", self.message)
                } else {
                    write!(f, "{} ({})", self.message, refusals.join("; "))
                }
            }
            "ResourceRuntimeUnsupportedError" => write!(
                f,
                "{}: the daemon runs without a container runtime; start it without --runtime none",
                self.message
            ),
            "HostNotAllowedError" => write!(
                f,
                "{}: reach the daemon by a loopback address such as {DEFAULT_URL}",
                self.message
            ),
            _ => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for ApiError {}

/// True when `err` is the API error `tag`.
pub fn is_api_error(err: &anyhow::Error, tag: &str) -> bool {
    err.downcast_ref::<ApiError>().is_some_and(|e| e.tag == tag)
}

/// Where the client finds the daemon and its key.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub url: String,
    pub data_dir: Option<PathBuf>,
}

/// A connection to the daemon, with its key.
pub struct Client {
    base: String,
    key: String,
    key_source: String,
    http: reqwest::blocking::Client,
}

fn http_client() -> anyhow::Result<reqwest::blocking::Client> {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .timeout(REQUEST_TIMEOUT)
        .build()
        .context("could not set up an HTTP client")
}

/// The innermost cause of an error, which for a refused connection is the useful part.
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

impl Endpoint {
    /// The URL without a trailing slash.
    pub fn base(&self) -> String {
        self.url.trim_end_matches('/').to_owned()
    }

    /// Asks `GET /healthz`, which needs no key.
    pub fn health(&self) -> anyhow::Result<()> {
        let http = http_client()?;
        let url = format!("{}/healthz", self.base());
        let res = http
            .get(&url)
            .timeout(Duration::from_secs(10))
            .send()
            .map_err(|e| self.unreachable(&e))?;
        if !res.status().is_success() {
            anyhow::bail!("{url} answered {}: is that a berth daemon?", res.status());
        }
        let body: Value = res.json().unwrap_or(Value::Null);
        if body["status"] != "ok" {
            anyhow::bail!("{url} did not answer {{\"status\": \"ok\"}}: is that a berth daemon?");
        }
        Ok(())
    }

    fn unreachable(&self, e: &reqwest::Error) -> anyhow::Error {
        if e.is_connect() || e.is_timeout() {
            Unreachable {
                url: self.base(),
                detail: root_cause(e),
            }
            .into()
        } else {
            anyhow::anyhow!(
                "could not reach the berth daemon at {}: {}",
                self.base(),
                root_cause(e)
            )
        }
    }

    /// The service key and a description of where it came from.
    pub fn key(&self) -> anyhow::Result<(String, String)> {
        if let Ok(list) = std::env::var("BERTH_SERVICE_KEYS") {
            let first = list.split(',').map(str::trim).find(|k| !k.is_empty());
            return match first {
                Some(k) => Ok((k.to_owned(), "BERTH_SERVICE_KEYS".to_owned())),
                None => anyhow::bail!("BERTH_SERVICE_KEYS is set but holds no key"),
            };
        }
        let dir = match &self.data_dir {
            Some(d) => d.clone(),
            None => default_data_dir()?,
        };
        let path = dir.join(KEY_FILE);
        match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => {
                Ok((text.trim().to_owned(), path.display().to_string()))
            }
            Ok(_) => anyhow::bail!(
                "the key file {} is empty: stop the daemon, remove it, and `berth serve` makes a new one",
                path.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Say first that there is no daemon, when there is none: that is the fix.
                self.health()?;
                anyhow::bail!(
                    "no service key at {}: the daemon at {} keeps its key elsewhere; pass its --data-dir (or BERTH_DATA_DIR), or set BERTH_SERVICE_KEYS",
                    path.display(),
                    self.base()
                )
            }
            Err(e) => {
                Err(e).with_context(|| format!("could not read the key file {}", path.display()))
            }
        }
    }

    /// A client with the key.
    pub fn connect(&self) -> anyhow::Result<Client> {
        let (key, key_source) = self.key()?;
        Ok(Client {
            base: self.base(),
            key,
            key_source,
            http: http_client()?,
        })
    }
}

impl Client {
    fn endpoint(&self) -> Endpoint {
        Endpoint {
            url: self.base.clone(),
            data_dir: None,
        }
    }

    fn send(&self, req: reqwest::blocking::RequestBuilder) -> anyhow::Result<Value> {
        let res = req
            .bearer_auth(&self.key)
            .send()
            .map_err(|e| self.endpoint().unreachable(&e))?;
        let status = res.status();
        let text = res.text().map_err(|e| {
            anyhow::anyhow!("the daemon's answer could not be read: {}", root_cause(&e))
        })?;
        self.answer(status, text)
    }

    /// A success's JSON body, or the error it carries.
    fn answer(&self, status: reqwest::StatusCode, text: String) -> anyhow::Result<Value> {
        let body: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text.clone()))
        };
        if status.is_success() {
            return Ok(body);
        }
        let (tag, message) = match (body["_tag"].as_str(), body["message"].as_str()) {
            (Some(tag), Some(message)) => (crate::ui::escape(tag), crate::ui::escape(message)),
            _ => {
                let excerpt: String =
                    crate::ui::escape(&text.chars().take(200).collect::<String>());
                (
                    "HttpError".to_owned(),
                    format!("the daemon answered {status}: {excerpt}"),
                )
            }
        };
        Err(ApiError {
            tag,
            message,
            body,
            key_source: self.key_source.clone(),
        }
        .into())
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.send(self.http.get(format!("{}{path}", self.base)))
    }

    pub fn post(&self, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        let mut req = self.http.post(format!("{}{path}", self.base));
        if let Some(body) = body {
            req = req
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        self.send(req)
    }

    pub fn put(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.send(
            self.http
                .put(format!("{}{path}", self.base))
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
    }

    /// Copies an instance's output to `out` as it comes (with `follow`, until the instance
    /// stops or the command is interrupted).
    pub fn logs(
        &self,
        domain: &str,
        key: &str,
        tail: u64,
        follow: bool,
        out: &mut dyn std::io::Write,
    ) -> anyhow::Result<()> {
        // No overall timeout: a followed log lasts as long as the instance runs.
        let http = reqwest::blocking::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .timeout(None)
            .build()
            .context("could not set up an HTTP client")?;
        let url = format!(
            "{}/v1/resource-domains/{domain}/instances/{key}/logs?tail={tail}&follow={follow}",
            self.base
        );
        let mut res = http
            .get(url)
            .bearer_auth(&self.key)
            .send()
            .map_err(|e| self.endpoint().unreachable(&e))?;
        let status = res.status();
        if !status.is_success() {
            let text = res.text().unwrap_or_default();
            return self.answer(status, text).map(|_| ());
        }
        std::io::copy(&mut res, out).context("the log stream broke off")?;
        Ok(())
    }

    /// The caller's domains, oldest first.
    pub fn domains(&self) -> anyhow::Result<Vec<Value>> {
        Ok(self.get("/v1/resource-domains")?["items"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    pub fn create_domain(&self, name: &str) -> anyhow::Result<Value> {
        self.post("/v1/resource-domains", Some(json!({"name": name})))
    }

    pub fn archive_domain(&self, domain: &str) -> anyhow::Result<Value> {
        self.post(&format!("/v1/resource-domains/{domain}/archive"), None)
    }

    /// The domain's instances: the live ones, or only the archived ones.
    pub fn instances(&self, domain: &str, archived: bool) -> anyhow::Result<Vec<Value>> {
        let query = if archived { "?archived=true" } else { "" };
        let body = self.get(&format!("/v1/resource-domains/{domain}/instances{query}"))?;
        Ok(body["items"].as_array().cloned().unwrap_or_default())
    }

    /// One instance, or `None` when the domain has no instance with that key.
    pub fn instance(&self, domain: &str, key: &str) -> anyhow::Result<Option<Value>> {
        match self.get(&format!("/v1/resource-domains/{domain}/instances/{key}")) {
            Ok(v) => Ok(Some(v)),
            Err(e) if is_api_error(&e, "ResourceInstanceNotFoundError") => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn up(&self, domain: &str, key: &str, spec: &Value, cause: &str) -> anyhow::Result<Value> {
        self.post(
            &format!("/v1/resource-domains/{domain}/instances/{key}/up"),
            Some(json!({"spec": spec, "cause": cause})),
        )
    }

    pub fn stop(&self, domain: &str, key: &str, by: &str) -> anyhow::Result<Value> {
        self.post(
            &format!("/v1/resource-domains/{domain}/instances/{key}/stop"),
            Some(json!({"by": by})),
        )
    }

    pub fn archive(&self, domain: &str, key: &str) -> anyhow::Result<Value> {
        self.post(
            &format!("/v1/resource-domains/{domain}/instances/{key}/archive"),
            None,
        )
    }

    /// An instance's host endpoints, as `(container port, host, host port)`.
    pub fn endpoints(&self, domain: &str, key: &str) -> anyhow::Result<Vec<(u16, String, u16)>> {
        let body = self.get(&format!(
            "/v1/resource-domains/{domain}/instances/{key}/endpoints"
        ))?;
        Ok(body["items"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|e| {
                        Some((
                            u16::try_from(e["port"].as_u64()?).ok()?,
                            e["host"].as_str()?.to_owned(),
                            u16::try_from(e["hostPort"].as_u64()?).ok()?,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Runs a command: the frame line, then `stdin` streamed as it is read.
    ///
    /// The body is sent from a stream that a thread fills from stdin, so the answer is taken
    /// as soon as the daemon gives it, even when the command ended without reading all of its
    /// stdin (the blocking client would report the unsent rest as an error instead).
    pub fn exec(
        &self,
        domain: &str,
        key: &str,
        frame: &Value,
        stdin: Option<Box<dyn Read + Send>>,
        timeout: Duration,
    ) -> anyhow::Result<Value> {
        let mut head = frame.to_string().into_bytes();
        head.push(b'\n');
        let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<u8>>>(8);
        tx.try_send(Ok(head))
            .expect("an empty channel takes the frame");
        if let Some(mut stdin) = stdin {
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let item = match stdin.read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => Ok(buf[..n].to_vec()),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => Err(e),
                    };
                    let failed = item.is_err();
                    if tx.blocking_send(item).is_err() || failed {
                        return;
                    }
                }
            });
        } else {
            drop(tx);
        }
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let url = format!(
            "{}/v1/resource-domains/{domain}/instances/{key}/exec",
            self.base
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("could not start the async runtime")?;
        let (status, text) = runtime.block_on(async {
            let http = reqwest::Client::builder()
                .no_proxy()
                .connect_timeout(Duration::from_secs(5))
                .build()
                .context("could not set up an HTTP client")?;
            let res = http
                .post(&url)
                .bearer_auth(&self.key)
                .header("content-type", "application/octet-stream")
                // The daemon ends the command at its timeout; the answer follows shortly after.
                .timeout(timeout + Duration::from_secs(60))
                .body(reqwest::Body::wrap_stream(stream))
                .send()
                .await
                .map_err(|e| self.endpoint().unreachable(&e))?;
            let status = res.status();
            let text = res.text().await.map_err(|e| {
                anyhow::anyhow!("the daemon's answer could not be read: {}", root_cause(&e))
            })?;
            anyhow::Ok((status, text))
        })?;
        self.answer(status, text)
    }
}
