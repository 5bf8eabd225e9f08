//! The tools for an instance's data: snapshot it, restore it from a snapshot (what it replaces
//! is kept as a before-restore snapshot, named in the answer), and branch this worktree's
//! instance from another worktree's (or a snapshot).

use berth_client::SnapshotView;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{ErrorData, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::context::{Server, answer, check_name, failure, instance_json};
use crate::cli::branching::{RestoreDone, branch_into, find_snapshot, restore_into, take_snapshot};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SnapshotInput {
    /// The instance's name in berth.toml.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    /// The snapshot's name (default: snapshot-<time>).
    #[schemars(length(min = 1, max = 200))]
    pub label: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RestoreInput {
    /// The instance's name in berth.toml.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    /// The snapshot to restore: its id (`snp:...`) or its name (the newest of that name).
    #[schemars(length(min = 1, max = 200))]
    pub snapshot: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BranchInput {
    /// The instance's name in berth.toml: this worktree's instance of that name is made.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    /// Another worktree's branch (its instance of that name), a snapshot id (snp:...) or name.
    #[schemars(length(min = 1, max = 200))]
    pub from: String,
}

/// A snapshot, compactly.
fn snapshot_json(s: &SnapshotView) -> Value {
    json!({
        "snapshotId": s.snapshot_id,
        "name": s.name,
        "instanceKey": s.instance_key,
        "state": s.state,
        "bytes": s.volumes.iter().filter_map(|v| v.bytes).sum::<i64>(),
        "createdAt": s.created_at,
    })
}

#[tool_router(router = data_tools, vis = "pub(super)")]
impl Server {
    #[tool(
        description = "Take a snapshot of the volumes of one of this worktree's instances (a running one is frozen, or put on new layers, for the moment of the copy) and answer its id. Adds a snapshot; changes no data.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    pub async fn snapshot(
        &self,
        Parameters(input): Parameters<SnapshotInput>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.take(input).await {
            Ok((text, value)) => answer(text, value),
            Err(e) => failure(&e),
        })
    }

    #[tool(
        description = "Replace the data of one of this worktree's instances with a snapshot's (named by id or name), and wait until it runs again. Destructive, but nothing is lost: what it replaces is first kept as a before-restore snapshot, whose id the answer gives (restore that one to undo).",
        annotations(
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false
        )
    )]
    pub async fn restore(
        &self,
        Parameters(input): Parameters<RestoreInput>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.put_back(input).await {
            Ok((text, value)) => answer(text, value),
            Err(e) => failure(&e),
        })
    }

    #[tool(
        description = "Make this worktree's instance of a berth.toml name with the data of another worktree's instance of that name (the branch that worktree is on) or of a snapshot, and wait until it runs. Creates a new instance; refused when this worktree has one of that name already. The source is only read.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    pub async fn branch(
        &self,
        Parameters(input): Parameters<BranchInput>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.make_branch(input).await {
            Ok((text, value)) => answer(text, value),
            Err(e) => failure(&e),
        })
    }
}

impl Server {
    async fn take(&self, input: SnapshotInput) -> anyhow::Result<(String, Value)> {
        if let Some(label) = &input.label {
            check_name("label", label)?;
        }
        let (domain, instance) = self.own(&input.name).await?;
        let label = input.label.unwrap_or_else(|| {
            format!(
                "snapshot-{}",
                humantime::format_rfc3339_seconds(std::time::SystemTime::now())
            )
        });
        let (done, _) = take_snapshot(&self.client, &domain, &instance.key, &label, None).await?;
        Ok((
            format!(
                "snapshot {} of {} ({}): {}",
                done.name, input.name, instance.key, done.snapshot_id
            ),
            json!({ "snapshot": snapshot_json(&done) }),
        ))
    }

    async fn put_back(&self, input: RestoreInput) -> anyhow::Result<(String, Value)> {
        check_name("snapshot", &input.snapshot)?;
        let (domain, instance) = self.own(&input.name).await?;
        // Named here first, so that a snapshot that is not there is said as such.
        let wanted = find_snapshot(&self.client, &domain, &input.snapshot).await?;
        let RestoreDone {
            restored,
            settled,
            from,
            ..
        } = restore_into(
            &self.client,
            &domain,
            &self.repo,
            &instance.key,
            (Some(wanted.snapshot_id.as_str()), None),
            None,
        )
        .await?;
        let kind = crate::ui::state_kind(&settled.instance);
        Ok((
            format!(
                "restored {} ({}) from {} ({}); it is {kind}; what it replaced is kept as the \
                 snapshot {} ({})",
                input.name,
                instance.key,
                from.name,
                from.snapshot_id,
                restored.before_restore.name,
                restored.before_restore.snapshot_id,
            ),
            json!({
                "instance": instance_json(&settled.instance, &self.repo),
                "source": snapshot_json(&from),
                "beforeRestore": snapshot_json(&restored.before_restore),
            }),
        ))
    }

    async fn make_branch(&self, input: BranchInput) -> anyhow::Result<(String, Value)> {
        check_name("name", &input.name)?;
        check_name("from", &input.from)?;
        if input.name.contains('@') {
            anyhow::bail!("name: expected a name from berth.toml, not a full key");
        }
        let project = crate::cli::load_project(&self.repo)?;
        let def = project.select(std::slice::from_ref(&input.name))?.remove(0);
        let domain = self.ensure_domain().await?;
        let (key, settled, _) =
            branch_into(&self.client, &domain, &self.repo, def, &input.from, None).await?;
        let kind = crate::ui::state_kind(&settled.instance);
        Ok((
            format!(
                "{} ({key}) branched from {}: {kind}",
                input.name, input.from
            ),
            json!({
                "instance": instance_json(&settled.instance, &self.repo),
                "from": input.from,
            }),
        ))
    }
}
