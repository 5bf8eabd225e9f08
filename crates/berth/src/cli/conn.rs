//! What every command starts from: where the daemon is ([`Conn`]), the worktree's berth.toml,
//! the resource domain of the repository, the keys of this worktree's instances, and how an
//! answer is printed.

use std::path::{Path, PathBuf};

use anyhow::Context;
use berth_client::DomainId;
use berth_client::{DomainState, DomainView, InstanceView};
use clap::Args;
use serde_json::Value;

use crate::client::{Client, DEFAULT_URL, Endpoint, OrSay};
use crate::project::Project;
use crate::repo::Repo;
use crate::ui::Ui;

/// Where the daemon is, for every command that talks to it.
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// The daemon's address.
    #[arg(long, env = "BERTH_URL", default_value = DEFAULT_URL)]
    url: String,

    /// The daemon's data directory, where its key file is [default: the user's data directory/berth].
    #[arg(long, env = "BERTH_DATA_DIR")]
    data_dir: Option<PathBuf>,
}

impl Conn {
    pub(crate) fn endpoint(&self) -> Endpoint {
        Endpoint {
            url: self.url.clone(),
            data_dir: self.data_dir.clone(),
        }
    }
}

/// The project file's path as a person at the current directory would write it.
fn shown_path(file: &Path) -> String {
    let Ok(cwd) = std::env::current_dir().and_then(|d| d.canonicalize()) else {
        return file.display().to_string();
    };
    if let Ok(rel) = file.strip_prefix(&cwd) {
        return rel.display().to_string();
    }
    let dir = file.parent().unwrap_or(Path::new("/"));
    if let Ok(below) = cwd.strip_prefix(dir) {
        let ups = below.components().count();
        if ups <= 3 {
            let mut p = PathBuf::new();
            for _ in 0..ups {
                p.push("..");
            }
            p.push(file.file_name().unwrap_or_default());
            return p.display().to_string();
        }
    }
    file.display().to_string()
}

/// Reads and checks this worktree's berth.toml.
pub(crate) fn load_project(repo: &Repo) -> anyhow::Result<Project> {
    let file = repo.project_file();
    Project::load(&file, &shown_path(&file))
}

/// The repository's domain: the oldest of the caller's domains with the repository's name that
/// is not archived.
pub(crate) async fn find_domain(
    client: &Client,
    repo: &Repo,
) -> anyhow::Result<Option<DomainView>> {
    Ok(client
        .api
        .domains()
        .await
        .or_say(client)?
        .into_iter()
        .find(|d| d.name == repo.domain_name && d.state != DomainState::Archived))
}

/// The repository's domain, created on first use.
pub(crate) async fn ensure_domain(client: &Client, repo: &Repo) -> anyhow::Result<DomainView> {
    let domain = find_or_create_domain(client, repo).await?;
    tell_worktree(client, &domain.resource_domain_id, repo).await;
    Ok(domain)
}

/// Tells the daemon where this worktree lives and its branch, so that it notices the worktree
/// end (and the page labels it by branch). Bookkeeping beside the command: a key that may not
/// (a read-only one) or a daemon that cannot does not stop the command.
async fn tell_worktree(client: &Client, domain: &DomainId, repo: &Repo) {
    let request = berth_client::WorktreeRequest {
        path: repo.top_level.to_string_lossy().into_owned(),
        branch: repo.branch(),
    };
    if let Err(e) = client
        .api
        .put_worktree(domain, &repo.worktree_key, &request)
        .await
    {
        tracing::debug!(error = %e, "the daemon was not told of this worktree");
    }
}

async fn find_or_create_domain(client: &Client, repo: &Repo) -> anyhow::Result<DomainView> {
    if let Some(d) = find_domain(client, repo).await? {
        return Ok(d);
    }
    let created = client
        .api
        .create_domain(&repo.domain_name)
        .await
        .or_say(client)
        .context("could not create the repository's domain")?;
    // Two commands may create one each at the same moment: all of them settle on the oldest,
    // and one that lost the race archives its own (empty) domain.
    let chosen = find_domain(client, repo)
        .await?
        .unwrap_or_else(|| created.clone());
    if chosen.resource_domain_id != created.resource_domain_id {
        let _ = client.api.archive_domain(&created.resource_domain_id).await;
    }
    Ok(chosen)
}

/// The key each of `defs` has now in this worktree (see [`crate::repo::current_key`]), and
/// whether an instance with that key is live.
pub(crate) async fn current_keys(
    client: &Client,
    domain: &DomainId,
    repo: &Repo,
    defs: &[&crate::project::InstanceDef],
) -> anyhow::Result<Vec<(String, bool)>> {
    let keys =
        |list: Vec<InstanceView>| -> Vec<String> { list.into_iter().map(|i| i.key).collect() };
    let live = keys(client.api.instances(domain, false).await.or_say(client)?);
    let archived = keys(client.api.instances(domain, true).await.or_say(client)?);
    Ok(defs
        .iter()
        .map(|def| {
            let base = repo.instance_key(&def.name, def.scope == crate::project::Scope::Shared);
            let key = crate::repo::current_key(
                &base,
                live.iter().map(String::as_str),
                archived.iter().map(String::as_str),
            );
            let is_live = live.contains(&key);
            (key, is_live)
        })
        .collect())
}

/// An instance with the project-file name and scope it was made from, for `--json`.
pub(crate) fn annotated(instance: &InstanceView, repo: &Repo) -> Value {
    let mut out = serde_json::to_value(instance).unwrap_or(Value::Null);
    if let Some(map) = out.as_object_mut() {
        map.insert(
            "name".into(),
            Value::from(crate::repo::name_of_key(&instance.key)),
        );
        map.insert("scope".into(), Value::from(scope_of(instance, repo)));
    }
    out
}

/// `shared`, `worktree` (this one's), or `worktree <branch>` (another one's, by the branch it
/// had checked out when the CLI last told the daemon; by its key when it never told or the head
/// was detached).
pub(crate) fn scope_of(instance: &InstanceView, repo: &Repo) -> String {
    match instance.worktree_key.as_deref() {
        None => "shared".to_owned(),
        Some(k) if k == repo.worktree_key => "worktree".to_owned(),
        Some(k) => {
            let branch = instance.worktree.as_ref().and_then(|w| w.branch.as_deref());
            format!("worktree {}", crate::ui::escape(branch.unwrap_or(k)))
        }
    }
}

/// Prints JSON on stdout.
pub(crate) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// A ui for the command.
pub(crate) fn ui(json: bool) -> Ui {
    Ui::new(json)
}
