//! Finding the daemon the way `berth serve` sets itself up: the URL from `--url`/`BERTH_URL`
//! (default `http://127.0.0.1:2378`), the key from the first entry of `BERTH_SERVICE_KEYS` or
//! else the key file `<data dir>/service-key`. The calls themselves are `berth-client`'s; this
//! module turns its errors into sentences that say what to fix.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use berth_client::ClientError;

use crate::serve::{KEY_FILE, default_data_dir};

/// Where the CLI looks for the daemon unless told otherwise.
pub const DEFAULT_URL: &str = "http://127.0.0.1:2378";

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

/// The daemon answered with an error, said for a person at the command line.
#[derive(Debug)]
pub struct ApiError {
    pub error: berth_client::ApiError,
    /// Where the key came from, for a refused key.
    pub key_source: String,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = crate::ui::escape(&self.error.message);
        match self.error.tag.as_str() {
            "UnauthorizedError" => write!(
                f,
                "the daemon did not accept the service key from {} ({message}): use the key file of the daemon you run (see --data-dir and BERTH_DATA_DIR) or set BERTH_SERVICE_KEYS to one of its keys",
                self.key_source
            ),
            "ResourceInstanceSpecRefusedError" => {
                let refusals: Vec<String> = self
                    .error
                    .refusals()
                    .into_iter()
                    .map(|r| format!("{}: {}", r.field, r.reason))
                    .collect();
                if refusals.is_empty() {
                    write!(f, "{message}")
                } else {
                    write!(f, "{message} ({})", refusals.join("; "))
                }
            }
            "ResourceRuntimeUnsupportedError" => write!(
                f,
                "{message}: the daemon runs without a container runtime; start it without --runtime none"
            ),
            "ServiceKeyCapabilityMissingError" => {
                let capability = self.error.body["capability"].as_str().unwrap_or("");
                write!(
                    f,
                    "the daemon does not let the key from {} do this: it lacks the capability `{}`. \
                     Capabilities are granted in the daemon's grants file (grants.toml in its data \
                     directory, or `berth serve --grants FILE`); `berth whoami` shows what this key may do",
                    self.key_source,
                    crate::ui::escape(capability)
                )
            }
            "HostNotAllowedError" => write!(
                f,
                "{message}: reach the daemon by a loopback address such as {DEFAULT_URL}"
            ),
            _ => write!(f, "{message}"),
        }
    }
}

impl std::error::Error for ApiError {}

/// A client error as the CLI says it.
pub fn explain(e: ClientError, key_source: &str) -> anyhow::Error {
    match e {
        ClientError::Api(error) => ApiError {
            error,
            key_source: key_source.to_owned(),
        }
        .into(),
        ClientError::Unreachable { url, detail } => Unreachable { url, detail }.into(),
        ClientError::Transport { url, detail } => {
            anyhow::anyhow!("could not reach the berth daemon at {url}: {detail}")
        }
        other @ ClientError::Decode { .. } => other.into(),
    }
}

/// Where the client finds the daemon and its key.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub url: String,
    pub data_dir: Option<PathBuf>,
}

/// A connection to the daemon, with where its key came from.
pub struct Client {
    pub api: berth_client::Client,
    pub key_source: String,
}

impl Client {
    /// A client error as the CLI says it.
    pub fn explain(&self, e: ClientError) -> anyhow::Error {
        explain(e, &self.key_source)
    }
}

/// Adds the CLI's sentences to a client call's error: `client.api.x().await.or_say(&client)?`.
pub trait OrSay<T> {
    fn or_say(self, client: &Client) -> anyhow::Result<T>;
}

impl<T> OrSay<T> for Result<T, ClientError> {
    fn or_say(self, client: &Client) -> anyhow::Result<T> {
        self.map_err(|e| client.explain(e))
    }
}

impl Endpoint {
    /// The URL without a trailing slash.
    pub fn base(&self) -> String {
        self.url.trim_end_matches('/').to_owned()
    }

    /// Asks `GET /healthz`, which needs no key.
    pub async fn health(&self) -> anyhow::Result<()> {
        let url = format!("{}/healthz", self.base());
        let api = berth_client::Client::builder(&self.base())
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| explain(e, ""))?;
        match api.healthz().await {
            Ok(h) if h.status == "ok" => Ok(()),
            Ok(_) => anyhow::bail!(
                "{url} did not answer {{\"status\": \"ok\"}}: is that a berth daemon?"
            ),
            Err(ClientError::Api(e)) => {
                anyhow::bail!("{url} answered {}: is that a berth daemon?", e.status)
            }
            Err(ClientError::Decode { .. }) => anyhow::bail!(
                "{url} did not answer {{\"status\": \"ok\"}}: is that a berth daemon?"
            ),
            Err(e) => Err(explain(e, "")),
        }
    }

    /// The service key and a description of where it came from.
    pub async fn key(&self) -> anyhow::Result<(String, String)> {
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
                self.health().await?;
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
    pub async fn connect(&self) -> anyhow::Result<Client> {
        let (key, key_source) = self.key().await?;
        let api =
            berth_client::Client::new(&self.base(), key).map_err(|e| explain(e, &key_source))?;
        Ok(Client { api, key_source })
    }
}
