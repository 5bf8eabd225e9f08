//! `rollouts`, `releases` and `rollback`: an instance's image rollouts, the image releases it
//! ran, and a rollback to one of them, checked against the rollout generation the command read.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use berth_client::{DomainId, ImageReleaseView, InstanceView, RolloutView};
use clap::Args;
use serde_json::json;

use super::{Conn, annotated, find_domain, print_json, ui};
use crate::client::{Client, OrSay};
use crate::repo::{Repo, name_of_key};
use crate::ui::{Cell, state_detail, state_kind};

#[derive(Args, Debug)]
pub struct RolloutsArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the rollouts as JSON (the API's `{"plan", "status"}` items, newest first).
    #[arg(long)]
    json: bool,
    /// The instance's name from berth.toml (or its full key, `name@worktree`).
    #[arg(value_name = "NAME")]
    name: String,
}

#[derive(Args, Debug)]
pub struct ReleasesArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the image releases as JSON (the API's items, most recently observed first).
    #[arg(long)]
    json: bool,
    /// The instance's name from berth.toml (or its full key, `name@worktree`).
    #[arg(value_name = "NAME")]
    name: String,
}

#[derive(Args, Debug)]
pub struct RollbackArgs {
    #[command(flatten)]
    conn: Conn,
    /// The image release to go back to (`irl:...`, from `berth releases NAME`) [default: the
    /// previous image that ran verified].
    #[arg(long, value_name = "ID")]
    release: Option<String>,
    /// How long to wait for the instance to run again.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Print the rollback's answer and the instance it settled as, as JSON.
    #[arg(long)]
    json: bool,
    /// The instance's name from berth.toml (or its full key, `name@worktree`).
    #[arg(value_name = "NAME")]
    name: String,
}

/// The repository, a client, its domain and the one live instance `name` means.
pub(super) async fn target(
    conn: &Conn,
    name: &str,
) -> anyhow::Result<(Repo, Client, DomainId, InstanceView)> {
    let repo = Repo::discover()?;
    let client = conn.endpoint().connect().await?;
    let Some(domain) = find_domain(&client, &repo).await? else {
        bail!("this repository has no instances yet: `berth up` starts them");
    };
    let domain = domain.resource_domain_id;
    let mut found = super::instances::resolve(&client, &domain, &repo, &[name.to_owned()]).await?;
    let instance = found.remove(0);
    Ok((repo, client, domain, instance))
}

/// `12s ago` for milliseconds since the epoch.
pub(super) fn ago_millis(ms: i64) -> String {
    crate::ui::ago(Some(berth_client::Timestamp::from_millis(ms)))
}

/// `sha256:0123456789ab`: enough of a digest to tell releases apart.
pub(super) fn short(digest: &str) -> String {
    digest.chars().take(19).collect()
}

pub async fn rollouts(args: RolloutsArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let (_, client, domain, instance) = target(&args.conn, &args.name).await?;
    let items = client
        .api
        .rollouts(&domain, &instance.key)
        .await
        .or_say(&client)?;
    if args.json {
        print_json(&serde_json::to_value(&items)?);
        return Ok(ExitCode::SUCCESS);
    }
    if items.is_empty() {
        eprintln!(
            "berth: {} has no rollouts yet: its first `up` is one",
            instance.key
        );
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<Cell>> = items.iter().map(rollout_row).collect();
    ui.table(
        &[
            "GEN", "MODE", "STATUS", "REASON", "RELEASE", "DIGEST", "CREATED",
        ],
        &rows,
    );
    Ok(ExitCode::SUCCESS)
}

fn rollout_row(r: &RolloutView) -> Vec<Cell> {
    vec![
        Cell::plain(r.plan.rollout_generation.to_string()),
        Cell::plain(r.plan.mode.as_str()),
        Cell::state(r.status.status.as_str()),
        Cell::plain(r.status.mismatch_reason.map(|m| m.as_str()).unwrap_or("")),
        Cell::plain(&r.plan.release_id),
        Cell::plain(short(&r.plan.requested_digest)),
        Cell::plain(ago_millis(r.plan.created_at)),
    ]
}

pub async fn releases(args: ReleasesArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let (_, client, domain, instance) = target(&args.conn, &args.name).await?;
    let items = client
        .api
        .image_releases(&domain, &instance.key)
        .await
        .or_say(&client)?;
    if args.json {
        print_json(&serde_json::to_value(&items)?);
        return Ok(ExitCode::SUCCESS);
    }
    if items.is_empty() {
        eprintln!("berth: berth has made no container of {} yet", instance.key);
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<Cell>> = items.iter().map(release_row).collect();
    ui.table(
        &[
            "RELEASE",
            "IMAGE",
            "TAGS",
            "ACCEPTED",
            "ROLLOUTS",
            "LAST SEEN",
        ],
        &rows,
    );
    Ok(ExitCode::SUCCESS)
}

fn release_row(r: &ImageReleaseView) -> Vec<Cell> {
    let d = &r.data;
    vec![
        Cell::plain(&r.id),
        Cell::plain(format!("{}@{}", d.image_id, short(&d.registry_root_digest))),
        Cell::plain(d.observed_tags.join(",")),
        Cell::plain(match d.accepted_at {
            Some(at) => ago_millis(at),
            None => "never (no rollback target)".to_owned(),
        }),
        Cell::plain(d.promotion_count.unwrap_or(0).to_string()),
        Cell::plain(ago_millis(d.last_observed_at)),
    ]
}

/// A fresh idempotency key: a retried command is a new rollback.
pub(super) fn idempotency_key() -> anyhow::Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(format!("cli-{}", hex::encode(bytes)))
}

pub async fn rollback(args: RollbackArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let (repo, client, domain, instance) = target(&args.conn, &args.name).await?;
    let key = instance.key.clone();
    // The generation this command read: a rollout written meanwhile (another person's up or
    // rollback) makes the daemon refuse, instead of rolling back from what no one saw.
    let newest = client
        .api
        .rollouts(&domain, &key)
        .await
        .or_say(&client)?
        .into_iter()
        .next();
    let generation = newest.as_ref().map_or(0, |r| r.plan.rollout_generation);
    // What berth.toml pins now, if it follows the daemon: rewritten to what the rollback runs.
    let pinned_before = newest.map(|r| r.plan.digest_pinned_image_reference);
    let answer = client
        .api
        .rollback_to(
            &domain,
            &key,
            &idempotency_key()?,
            generation,
            args.release.as_deref(),
        )
        .await
        .or_say(&client)?;
    let settled = client
        .api
        .wait_for_state(&domain, &key, &["running", "failed"], args.timeout, |_| {
            true
        })
        .await
        .or_say(&client)?;
    let rollout = match &answer.rollout_id {
        Some(id) => Some(
            client
                .api
                .rollout(&domain, &key, id)
                .await
                .or_say(&client)?,
        ),
        None => None,
    };
    let ran = state_kind(&settled.instance) == "running" && !settled.timed_out;
    // As `promote` does: berth.toml follows what runs, so the next `up` does not roll forward
    // again. A file pinning something else there (changed by a person meanwhile) is left.
    let pinned = match (
        ran,
        &pinned_before,
        rollout
            .as_ref()
            .map(|r| &r.plan.digest_pinned_image_reference),
    ) {
        (true, Some(from), Some(to)) if from != to => {
            super::writes::repin(&repo, name_of_key(&key), from, to)?
        }
        _ => false,
    };
    if args.json {
        print_json(&json!({
            "rollback": answer,
            "rollout": rollout,
            "instance": annotated(&settled.instance, &repo),
            "pinned": pinned,
        }));
    } else {
        let status = rollout
            .as_ref()
            .map(|r| {
                format!(
                    " (rollout {}: {}{})",
                    r.plan.rollout_generation,
                    r.status.status,
                    r.status
                        .mismatch_reason
                        .map(|m| format!(", {m}"))
                        .unwrap_or_default()
                )
            })
            .unwrap_or_default();
        let image = rollout
            .as_ref()
            .map(|r| r.plan.digest_pinned_image_reference.clone())
            .unwrap_or_else(|| answer.to_spec_digest.clone());
        if ran {
            let file = if pinned {
                "; berth.toml pinned to it"
            } else {
                ""
            };
            println!(
                "{} {} ({key}) rolled back to {image}{status}{file}",
                ui.ok_mark(),
                name_of_key(&key)
            );
        } else {
            let detail = if settled.timed_out {
                format!(
                    "still {} after {} (--timeout)",
                    state_kind(&settled.instance),
                    humantime::format_duration(args.timeout)
                )
            } else {
                state_detail(&settled.instance)
            };
            println!(
                "{} {} ({key}) rolling back to {image}{status}: {detail}",
                ui.fail_mark(),
                name_of_key(&key)
            );
        }
    }
    Ok(if ran {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
