//! What every figure shares: the clients, the engine, the run's prefix and images, and the
//! steady instance the exec and GET figures use.

use std::path::PathBuf;
use std::time::Duration;

use berth_client::DomainId;
use bollard::Docker;
use tokio::sync::OnceCell;

use anyhow::anyhow;
use berth_testkit::spec;

use crate::api::Api;
use crate::engine;

/// What the figures share.
pub struct Ctx {
    pub api: Api,
    /// A client with another service key of the same daemon (whose domains are not `api`'s).
    pub other_api: Api,
    pub docker: Docker,
    pub prefix: String,
    pub image: String,
    /// The resource domain every benchmark instance lives in.
    pub domain: DomainId,
    /// The daemon's process id, when the launcher knows it (the pool figure reads its CPU).
    pub daemon_pid: Option<u32>,
    /// The daemon's binary (the idle figure starts one of its own).
    pub berth_bin: PathBuf,
    /// The echo fixture image, if it is known.
    pub echo_image: Option<String>,
    /// The Postgres fixture image, if it is known.
    pub postgres_image: Option<String>,
    pub(crate) steady: OnceCell<(String, String)>,
}

impl Ctx {
    /// The instance the exec and GET figures use, up and running, and its container's id.
    pub async fn steady(&self) -> anyhow::Result<(&str, &str)> {
        let (key, id) = self
            .steady
            .get_or_try_init(|| async {
                let key = "steady";
                self.api
                    .up(&self.domain, key, &spec(&self.image, key))
                    .await?;
                self.api
                    .wait_running(
                        &self.domain,
                        key,
                        Duration::from_millis(20),
                        Duration::from_secs(120),
                    )
                    .await?;
                let id = engine::berth_container(&self.docker, &self.prefix, key).await?;
                Ok::<_, anyhow::Error>((key.to_owned(), id))
            })
            .await?;
        Ok((key, id))
    }
}

pub(crate) fn random_hex(bytes: usize) -> anyhow::Result<String> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| anyhow!("no randomness: {e}"))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}
