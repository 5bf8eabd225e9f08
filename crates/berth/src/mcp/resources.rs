//! The resources `berth mcp` offers as context: the project's berth.toml as it is in this
//! worktree, and the worktree's state (what the `list_instances` tool answers).

use anyhow::{Context, bail};
use berth_client::Capability;
use rmcp::model::{Resource, ResourceContents};

use super::context::Server;

pub const PROJECT_URI: &str = "berth://project/berth.toml";
pub const STATE_URI: &str = "berth://worktree/state";
/// The most of berth.toml read.
const FILE_MAX: u64 = 1024 * 1024;

impl Server {
    /// The resources this server's key lets it read.
    pub fn resources(&self) -> Vec<Resource> {
        let mut out = vec![
            Resource::new(PROJECT_URI, "berth.toml")
                .with_title("The project's berth.toml")
                .with_description(
                    "What this repository runs: the berth.toml at the top of this worktree.",
                )
                .with_mime_type("application/toml"),
        ];
        if self.held.contains(&Capability::Read) {
            out.push(
                Resource::new(STATE_URI, "worktree state")
                    .with_title("This worktree's instances")
                    .with_description(
                        "The repository, this worktree's key, its live instances and the shared \
                         ones (state, endpoints), and the names in berth.toml that are not up.",
                    )
                    .with_mime_type("application/json"),
            );
        }
        out
    }

    /// The contents of the resource `uri`.
    pub async fn read(&self, uri: &str) -> anyhow::Result<ResourceContents> {
        match uri {
            PROJECT_URI => {
                let file = self.repo.project_file();
                let size = std::fs::metadata(&file)
                    .with_context(|| format!("could not read {}", file.display()))?
                    .len();
                if size > FILE_MAX {
                    bail!("{} is larger than 1 MiB", file.display());
                }
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("could not read {}", file.display()))?;
                Ok(ResourceContents::text(text, uri).with_mime_type("application/toml"))
            }
            STATE_URI => {
                if !self.held.contains(&Capability::Read) {
                    bail!(
                        "this server's key lacks the capability `{}`, which {STATE_URI} needs",
                        Capability::Read.as_str()
                    );
                }
                let state = self.state().await?;
                Ok(
                    ResourceContents::text(serde_json::to_string_pretty(&state)?, uri)
                        .with_mime_type("application/json"),
                )
            }
            _ => bail!("uri: no resource {uri:?}: this server has {PROJECT_URI} and {STATE_URI}"),
        }
    }
}
