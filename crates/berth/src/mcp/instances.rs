//! The tools for this worktree's instances: list them, `up` them from berth.toml, their
//! connection environment (`berth env`), and waiting until one runs.

use std::time::{Duration, Instant};

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::{ErrorData, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::context::{Server, answer, check_name, failure, instance_json};
use crate::cli::up::{Outcome, SETTLED, send_up, settle};

/// The longest an `up` or a wait may take before the tool answers (the daemon goes on).
const WAIT_MAX_SECONDS: u64 = 900;
const WAIT_DEFAULT_SECONDS: u64 = 300;

/// A tool that takes nothing: `{}`, and no other field.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoInput {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UpInput {
    /// Instance names from berth.toml; none or absent: all of them.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub names: Vec<String>,
    /// How long to wait for each to be running or failed, in seconds (1 to 900; default 300).
    #[schemars(range(min = 1, max = 900))]
    pub wait_seconds: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EnvInput {
    /// Instance names from berth.toml; none or absent: all of them that have a connect table.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub names: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WaitInput {
    /// The instance's name in berth.toml.
    #[schemars(length(min = 1, max = 200))]
    pub name: String,
    /// How long to wait, in seconds (1 to 900; default 300).
    #[schemars(range(min = 1, max = 900))]
    pub timeout_seconds: Option<u64>,
}

/// A number of seconds the agent gave, checked against 1..=900.
pub fn seconds(field: &str, value: Option<u64>, default: u64) -> anyhow::Result<Duration> {
    let s = value.unwrap_or(default);
    if !(1..=WAIT_MAX_SECONDS).contains(&s) {
        anyhow::bail!(
            "{field}: expected a number of seconds from 1 to {WAIT_MAX_SECONDS}, not {s}"
        );
    }
    Ok(Duration::from_secs(s))
}

fn check_names(names: &[String]) -> anyhow::Result<()> {
    if names.len() > 64 {
        anyhow::bail!("names: expected at most 64 names, not {}", names.len());
    }
    for (i, n) in names.iter().enumerate() {
        check_name(&format!("names[{i}]"), n)?;
        if n.contains('@') {
            anyhow::bail!("names[{i}]: expected a name from berth.toml, not a full key ({n:?})");
        }
    }
    Ok(())
}

#[tool_router(router = instance_tools, vis = "pub(super)")]
impl Server {
    #[tool(
        description = "List this worktree's instances and the repository's shared ones: name, key, scope, state and host endpoints, and the names in berth.toml that are not up. Changes nothing.",
        annotations(read_only_hint = true)
    )]
    pub async fn list_instances(
        &self,
        Parameters(_): Parameters<NoInput>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.state().await {
            Ok(state) => {
                let items = state["instances"].as_array().map_or(0, Vec::len);
                let running = state["instances"]
                    .as_array()
                    .map_or(0, |a| a.iter().filter(|i| i["state"] == "running").count());
                answer(format!("{items} instance(s), {running} running"), state)
            }
            Err(e) => failure(&e),
        })
    }

    #[tool(
        description = "Start this worktree's instances from berth.toml (all, or the names given) and wait until each is running or failed. Creates the instance (and the repository's domain) when it does not exist, changes its spec to what berth.toml says, and starts it when stopped; data in its volumes is kept.",
        annotations(read_only_hint = false, destructive_hint = false)
    )]
    pub async fn up(
        &self,
        Parameters(input): Parameters<UpInput>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.up_all(input).await {
            Ok((text, value)) => answer(text, value),
            Err(e) => failure(&e),
        })
    }

    #[tool(
        description = "The connection environment of this worktree's instances, from the connect tables of berth.toml and their host endpoints: what `berth env` prints, as one object of variable names to values. Changes nothing.",
        annotations(read_only_hint = true)
    )]
    pub async fn environment(
        &self,
        Parameters(input): Parameters<EnvInput>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.env(input).await {
            Ok(vars) => {
                let names: Vec<&str> = vars.keys().map(String::as_str).collect();
                answer(
                    format!("{} variable(s): {}", names.len(), names.join(", ")),
                    json!({ "variables": vars }),
                )
            }
            Err(e) => failure(&e),
        })
    }

    #[tool(
        description = "Wait until one of this worktree's instances is running (or failed, or the timeout passes), and answer its state. Changes nothing.",
        annotations(read_only_hint = true)
    )]
    pub async fn wait_running(
        &self,
        Parameters(input): Parameters<WaitInput>,
    ) -> Result<CallToolResult, ErrorData> {
        Ok(match self.wait(input).await {
            Ok((text, value)) => answer(text, value),
            Err(e) => failure(&e),
        })
    }
}

impl Server {
    /// The worktree's state: the repository, the worktree key, the live instances (with their
    /// host endpoints) and the names in berth.toml with no live instance.
    pub async fn state(&self) -> anyhow::Result<Value> {
        let instances = self.instances().await?;
        let domain = self.find_domain().await?;
        let mut items = Vec::new();
        for i in &instances {
            let mut v = instance_json(i, &self.repo);
            if let Some(domain) = &domain {
                let endpoints = self
                    .client
                    .api
                    .endpoints(domain, &i.key)
                    .await
                    .unwrap_or_default();
                v["endpoints"] = json!(
                    endpoints
                        .iter()
                        .map(|e| json!({
                            "port": e.port,
                            "host": e.host,
                            "hostPort": e.host_port,
                            "unavailable": e.unavailable,
                        }))
                        .collect::<Vec<_>>()
                );
            }
            items.push(v);
        }
        let not_up: Vec<String> = match crate::cli::load_project(&self.repo) {
            Ok(project) => project
                .instances
                .iter()
                .filter(|d| {
                    !instances
                        .iter()
                        .any(|i| crate::repo::name_of_key(&i.key) == d.name)
                })
                .map(|d| d.name.clone())
                .collect(),
            Err(_) => Vec::new(),
        };
        Ok(json!({
            "repository": self.repo.domain_name,
            "worktreeKey": self.repo.worktree_key,
            "instances": items,
            "notUp": not_up,
        }))
    }

    async fn up_all(&self, input: UpInput) -> anyhow::Result<(String, Value)> {
        check_names(&input.names)?;
        let wait = seconds("waitSeconds", input.wait_seconds, WAIT_DEFAULT_SECONDS)?;
        let project = crate::cli::load_project(&self.repo)?;
        let selected = project.select(&input.names)?;
        let domain = self.ensure_domain().await?;
        let keys = crate::cli::current_keys(&self.client, &domain, &self.repo, &selected).await?;
        let deadline = Instant::now() + wait;
        let mut out = Vec::new();
        let mut lines = Vec::new();
        for (def, (key, _)) in selected.into_iter().zip(keys) {
            let (outcome, instance) =
                match send_up(&self.client, &domain, &self.repo, def, &key, |_| {}).await {
                    Err(e) => (Outcome::Failed(format!("{e:#}")), None),
                    Ok(sent) => match settle(&sent.instance, sent.sent_at, sent.steady) {
                        Outcome::Waiting => {
                            let left = deadline.saturating_duration_since(Instant::now());
                            let (sent_at, steady) = (sent.sent_at, sent.steady);
                            match self
                                .client
                                .api
                                .wait_for_state(&domain, &key, &SETTLED, left, |seen| {
                                    settle(seen, sent_at, steady) != Outcome::Waiting
                                })
                                .await
                            {
                                Ok(s) if s.timed_out => (Outcome::Waiting, Some(s.instance)),
                                // The wait route answers only once berth acted on the `up`.
                                Ok(s) => (
                                    match settle(&s.instance, sent_at, steady) {
                                        Outcome::Waiting => settle(&s.instance, 0, true),
                                        done => done,
                                    },
                                    Some(s.instance),
                                ),
                                Err(e) => (
                                    Outcome::Failed(format!("{:#}", self.client.explain(e))),
                                    Some(sent.instance),
                                ),
                            }
                        }
                        done => (done, Some(sent.instance)),
                    },
                };
            let (word, message) = match &outcome {
                Outcome::Running => ("running", None),
                Outcome::Failed(m) => ("failed", Some(m.clone())),
                Outcome::Waiting => (
                    "waiting",
                    Some(format!(
                        "not running after {}s; the `wait_running` tool waits on",
                        wait.as_secs()
                    )),
                ),
            };
            lines.push(match &message {
                Some(m) => format!("{} ({key}): {word}: {m}", def.name),
                None => format!("{} ({key}): {word}", def.name),
            });
            let mut v = match &instance {
                Some(i) => instance_json(i, &self.repo),
                None => json!({ "name": def.name, "key": key }),
            };
            v["outcome"] = json!(word);
            v["message"] = json!(message);
            out.push(v);
        }
        Ok((lines.join("\n"), json!({ "instances": out })))
    }

    async fn env(&self, input: EnvInput) -> anyhow::Result<Map<String, Value>> {
        check_names(&input.names)?;
        let project = crate::cli::load_project(&self.repo)?;
        let selected: Vec<_> = project
            .select(&input.names)?
            .into_iter()
            .filter(|d| !d.connect.is_empty())
            .collect();
        let vars = crate::cli::instances::connect_env(&self.client, &self.repo, &selected).await?;
        Ok(vars.into_iter().map(|(k, v)| (k, Value::from(v))).collect())
    }

    async fn wait(&self, input: WaitInput) -> anyhow::Result<(String, Value)> {
        let timeout = seconds(
            "timeoutSeconds",
            input.timeout_seconds,
            WAIT_DEFAULT_SECONDS,
        )?;
        let (domain, instance) = self.own(&input.name).await?;
        let settled = self
            .client
            .api
            .wait_for_state(
                &domain,
                &instance.key,
                &["running", "failed"],
                timeout,
                |_| true,
            )
            .await
            .map_err(|e| self.client.explain(e))?;
        let kind = crate::ui::state_kind(&settled.instance);
        let mut v = instance_json(&settled.instance, &self.repo);
        v["timedOut"] = json!(settled.timed_out);
        let text = if settled.timed_out {
            format!(
                "{} ({}) is still {kind} after {}s",
                input.name,
                instance.key,
                timeout.as_secs()
            )
        } else {
            format!("{} ({}) is {kind}", input.name, instance.key)
        };
        Ok((text, v))
    }
}
