//! What every tool of `berth mcp` works with: the daemon (through the CLI's client, with the
//! service key the CLI would use), the repository and worktree the server was started in, the
//! capabilities its key holds there, and the shape of a tool's answer (structured JSON and a
//! short line of text).

use std::sync::Mutex;

use anyhow::bail;
use berth_client::{Capability, DomainId, InstanceView};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};

use crate::client::Client;
use crate::repo::Repo;

/// The server: one repository and one worktree, one key.
pub struct Server {
    pub client: Client,
    pub repo: Repo,
    /// The capabilities the key holds in this repository's domain (its own and the grants for
    /// the domain by name or id).
    pub held: Vec<Capability>,
    /// Every tool; `tools/list` shows those `held` allows.
    pub tools: ToolRouter<Server>,
    /// The repository's domain once it is known.
    domain: Mutex<Option<DomainId>>,
}

impl Server {
    pub fn new(
        client: Client,
        repo: Repo,
        held: Vec<Capability>,
        tools: ToolRouter<Server>,
    ) -> Self {
        Server {
            client,
            repo,
            held,
            tools,
            domain: Mutex::new(None),
        }
    }

    fn remember(&self, id: &DomainId) {
        if let Ok(mut slot) = self.domain.lock() {
            *slot = Some(id.clone());
        }
    }

    /// The repository's domain; an error saying the `up` tool makes it when there is none yet.
    pub async fn domain(&self) -> anyhow::Result<DomainId> {
        match self.find_domain().await? {
            Some(id) => Ok(id),
            None => bail!("this repository has no instances yet: the `up` tool starts them"),
        }
    }

    /// The repository's domain, or `None` when it has none yet.
    pub async fn find_domain(&self) -> anyhow::Result<Option<DomainId>> {
        if let Some(id) = self.domain.lock().ok().and_then(|d| d.clone()) {
            return Ok(Some(id));
        }
        let found = crate::cli::find_domain(&self.client, &self.repo)
            .await?
            .map(|d| d.resource_domain_id);
        if let Some(id) = &found {
            self.remember(id);
        }
        Ok(found)
    }

    /// The repository's domain, created on first use (as `berth up` does).
    pub async fn ensure_domain(&self) -> anyhow::Result<DomainId> {
        let d = crate::cli::ensure_domain(&self.client, &self.repo).await?;
        self.remember(&d.resource_domain_id);
        Ok(d.resource_domain_id)
    }

    /// The live instance `name` means in this worktree: its own instance of that name, else
    /// the shared one. Another worktree's instance is out of this server's reach: a full key
    /// (`name@worktree`) is taken only when it is this worktree's.
    pub async fn own(&self, name: &str) -> anyhow::Result<(DomainId, InstanceView)> {
        check_name("name", name)?;
        if let Some((_, worktree)) = name.split_once('@')
            && !worktree.eq_ignore_ascii_case(&self.repo.worktree_key)
        {
            bail!(
                "name: {name:?} is another worktree's instance, out of reach of this server: it \
                 speaks for the worktree {} only (give the instance's name in berth.toml)",
                self.repo.worktree_key
            );
        }
        let domain = self.domain().await?;
        let found = crate::cli::instances::resolve(
            &self.client,
            &domain,
            &self.repo,
            std::slice::from_ref(&name.to_owned()),
        )
        .await?
        .remove(0);
        if found
            .worktree_key
            .as_deref()
            .is_some_and(|k| k != self.repo.worktree_key)
        {
            bail!(
                "name: {name:?} is another worktree's instance ({}), out of reach of this server",
                found.key
            );
        }
        Ok((domain, found))
    }

    /// This worktree's live instances and the shared ones.
    pub async fn instances(&self) -> anyhow::Result<Vec<InstanceView>> {
        let Some(domain) = self.find_domain().await? else {
            return Ok(Vec::new());
        };
        crate::cli::instances::resolve(&self.client, &domain, &self.repo, &[]).await
    }
}

/// The most a name may be long: an instance name in berth.toml, or this worktree's full key.
const NAME_MAX: usize = 200;

/// A name the agent gave: present, not too long, printable.
pub fn check_name(field: &str, name: &str) -> anyhow::Result<()> {
    if name.is_empty() || name.len() > NAME_MAX || name.chars().any(char::is_control) {
        bail!(
            "{field}: expected an instance's name from berth.toml (1 to {NAME_MAX} printable \
             characters)"
        );
    }
    Ok(())
}

/// A tool's answer: `value` as its structured content, `text` as its short line, then the
/// value as JSON text (for hosts that read only text).
pub fn answer(text: impl Into<String>, value: Value) -> CallToolResult {
    let mut result = CallToolResult::structured(value);
    result.content.insert(0, ContentBlock::text(text.into()));
    result
}

/// A tool that could not do what it was asked: the reason, as text and as `{"error": ...}`.
pub fn failure(e: &anyhow::Error) -> CallToolResult {
    let message = format!("{e:#}");
    let mut result = CallToolResult::structured_error(json!({ "error": message }));
    result.content = vec![ContentBlock::text(message)];
    result
}

/// An instance, compactly: its name in berth.toml, key, scope, state and what berth says of it.
pub fn instance_json(instance: &InstanceView, repo: &Repo) -> Value {
    json!({
        "name": crate::repo::name_of_key(&instance.key),
        "key": instance.key,
        "scope": crate::cli::scope_of(instance, repo),
        "state": crate::ui::state_kind(instance),
        "detail": crate::ui::state_detail(instance),
        "desired": instance.desired,
    })
}
