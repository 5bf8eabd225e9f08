//! `outdated` and `promote`: which instances' tags now name another digest than the one they
//! run (read from the registry by the daemon, recorded as observed image releases), and the
//! promotion of one, which waits for its rollout and then pins berth.toml to it.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use berth_client::{DomainId, ImageReleaseView, PromoteRequest, RolloutView};
use clap::Args;
use serde_json::json;

use super::rollouts::{ago_millis, idempotency_key, short, target};
use super::{Conn, annotated, find_domain, print_json, ui};
use crate::client::{Client, OrSay};
use crate::repo::{Repo, name_of_key};
use crate::ui::{Cell, state_detail, state_kind};

#[derive(Args, Debug)]
pub struct OutdatedArgs {
    #[command(flatten)]
    conn: Conn,
    /// Print the instances and their newest observed releases as JSON.
    #[arg(long)]
    json: bool,
    /// The instances' names from berth.toml [default: every instance of this worktree].
    #[arg(value_name = "NAME")]
    names: Vec<String>,
}

#[derive(Args, Debug)]
pub struct PromoteArgs {
    #[command(flatten)]
    conn: Conn,
    /// How long to wait for the promotion's rollout.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Print the promotion's answer, its rollout and the instance it settled as, as JSON.
    #[arg(long)]
    json: bool,
    /// The instance's name from berth.toml (or its full key, `name@worktree`).
    #[arg(value_name = "NAME")]
    name: String,
    /// The image release to run (`irl:...`, from `berth outdated` or `berth releases`)
    /// [default: the newest one its tag was seen naming].
    #[arg(value_name = "RELEASE")]
    release: Option<String>,
}

/// The pinned reference the instance is asked to run, as its spec writes it.
async fn image_of(client: &Client, domain: &DomainId, key: &str) -> anyhow::Result<String> {
    Ok(client
        .api
        .image(domain, key)
        .await
        .or_say(client)?
        .pinned_reference)
}

/// The digest a pinned reference names.
fn digest_of(image: &str) -> &str {
    image.rsplit_once('@').map_or("", |(_, d)| d)
}

/// The tag a pinned reference carries, if any.
fn tag_of(image: &str) -> Option<&str> {
    let name = image.split_once('@').map_or(image, |(n, _)| n);
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    name[last_slash..]
        .rfind(':')
        .map(|i| &name[last_slash + i + 1..])
}

/// The newest release observed under the instance's tag that is not the digest it runs.
fn newest_other<'a>(image: &str, releases: &'a [ImageReleaseView]) -> Option<&'a ImageReleaseView> {
    let tag = tag_of(image)?;
    let running = digest_of(image);
    releases
        .iter()
        .filter(|r| r.data.registry_root_digest != running)
        .filter(|r| r.data.observed_tags.iter().any(|t| t == tag))
        .max_by_key(|r| (r.data.last_observed_at, r.data.first_observed_at))
}

/// Whether the tag names the release now: it was seen under it at the last observation.
fn is_current_under_tag(release: &ImageReleaseView, releases: &[ImageReleaseView]) -> bool {
    let newest = releases.iter().map(|r| r.data.last_observed_at).max();
    Some(release.data.last_observed_at) == newest
}

pub async fn outdated(args: OutdatedArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let repo = Repo::discover()?;
    let client = args.conn.endpoint().connect().await?;
    let Some(domain) = find_domain(&client, &repo).await? else {
        bail!("this repository has no instances yet: `berth up` starts them");
    };
    let domain = domain.resource_domain_id;
    let instances = super::instances::resolve(&client, &domain, &repo, &args.names).await?;
    let mut rows = Vec::new();
    let mut items = Vec::new();
    let mut failed = false;
    for instance in &instances {
        let name = name_of_key(&instance.key).to_owned();
        let image = image_of(&client, &domain, &instance.key).await?;
        let Some(tag) = tag_of(&image) else {
            items.push(json!({"name": name, "key": instance.key, "tag": null,
                "running": image, "outdated": false, "release": null}));
            continue;
        };
        let releases = match client
            .api
            .observe_image_releases(&domain, &instance.key)
            .await
        {
            Ok(releases) => releases,
            Err(e) => {
                failed = true;
                eprintln!("berth: {name}: {e}");
                continue;
            }
        };
        let newer = newest_other(&image, &releases).filter(|r| is_current_under_tag(r, &releases));
        items.push(json!({"name": name, "key": instance.key, "tag": tag,
            "running": image, "outdated": newer.is_some(),
            "release": newer}));
        if let Some(newer) = newer {
            rows.push(vec![
                Cell::plain(&name),
                Cell::plain(tag),
                Cell::plain(short(digest_of(&image))),
                Cell::plain(short(&newer.data.registry_root_digest)),
                Cell::plain(ago_millis(newer.data.first_observed_at)),
                Cell::plain(&newer.id),
            ]);
        }
    }
    if args.json {
        print_json(&json!({"items": items}));
    } else if rows.is_empty() {
        if !failed {
            println!("every tagged instance runs what its tag names now");
        }
    } else {
        ui.table(
            &["NAME", "TAG", "RUNS", "TAG NAMES", "FIRST SEEN", "RELEASE"],
            &rows,
        );
        println!("`berth promote NAME` runs the new one and pins berth.toml to it");
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Reads the rollout until it has a verdict (or the deadline passes).
async fn settle_rollout(
    client: &Client,
    domain: &DomainId,
    key: &str,
    rollout_id: &str,
    deadline: tokio::time::Instant,
) -> anyhow::Result<RolloutView> {
    loop {
        let rollout = client
            .api
            .rollout(domain, key, rollout_id)
            .await
            .or_say(client)?;
        if !rollout.status.status.in_progress() || tokio::time::Instant::now() >= deadline {
            return Ok(rollout);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub async fn promote(args: PromoteArgs) -> anyhow::Result<ExitCode> {
    let ui = ui(args.json);
    let deadline = tokio::time::Instant::now() + args.timeout;
    let (repo, client, domain, instance) = target(&args.conn, &args.name).await?;
    let key = instance.key.clone();
    let name = name_of_key(&key).to_owned();
    let image = image_of(&client, &domain, &key).await?;
    let releases = client
        .api
        .observe_image_releases(&domain, &key)
        .await
        .or_say(&client)?;
    let release_id = match &args.release {
        Some(id) => id.clone(),
        None => {
            match newest_other(&image, &releases).filter(|r| is_current_under_tag(r, &releases)) {
                Some(r) => r.id.clone(),
                None => bail!(
                    "{name} is up to date: its tag still names {}, the digest it runs",
                    short(digest_of(&image))
                ),
            }
        }
    };
    // What this command read: a rollout written meanwhile makes the daemon refuse.
    let rollouts = client.api.rollouts(&domain, &key).await.or_say(&client)?;
    let request = PromoteRequest {
        release_id,
        idempotency_key: idempotency_key()?,
        expected_rollout_generation: rollouts.first().map_or(0, |r| r.plan.rollout_generation),
        expected_current_rollout_id: rollouts.first().map(|r| r.plan.rollout_id.clone()),
        enable_immutable_image: true,
    };
    let answer = client
        .api
        .promote(&domain, &key, &request)
        .await
        .or_say(&client)?;
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let settled = client
        .api
        .wait_for_state(&domain, &key, &["running", "failed"], left, |_| true)
        .await
        .or_say(&client)?;
    let rollout = settle_rollout(&client, &domain, &key, &answer.rollout_id, deadline).await?;
    let succeeded =
        rollout.status.status.as_str() == "succeeded" && state_kind(&settled.instance) == "running";
    let pinned = if succeeded {
        super::writes::repin(&repo, &name, &answer.from_image, &answer.to_image)?
    } else {
        false
    };
    let status = format!(
        "rollout {}: {}{}",
        rollout.plan.rollout_generation,
        rollout.status.status,
        rollout
            .status
            .mismatch_reason
            .map(|m| format!(", {m}"))
            .unwrap_or_default()
    );
    if args.json {
        print_json(&json!({
            "promotion": answer,
            "rollout": rollout,
            "instance": annotated(&settled.instance, &repo),
            "pinned": pinned,
        }));
    } else if succeeded {
        let file = if pinned {
            "; berth.toml pinned to it"
        } else {
            ""
        };
        println!(
            "{} {name} ({key}) promoted to {} ({status}){file}",
            ui.ok_mark(),
            answer.to_image
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
            "{} {name} ({key}) promoting to {} ({status}): {detail}; `berth rollback {name}` \
             returns to {}",
            ui.fail_mark(),
            answer.to_image,
            answer.from_image
        );
    }
    Ok(if succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
