//! Preflights of berth.toml's instances: what `berth up` would do to each and whether it would
//! succeed, asked of the daemon, which writes nothing (`berth up --dry-run`, `berth doctor`).

use berth_client::{PreflightReport, UpCause, UpRequest};
use serde_json::{Value, json};

use super::{current_keys, find_domain};
use crate::client::Client;
use crate::project::InstanceDef;
use crate::repo::Repo;

/// One instance's preflight: its report, or why the daemon gave none.
pub(super) struct Preflight {
    pub name: String,
    pub key: String,
    pub report: Result<PreflightReport, String>,
}

impl Preflight {
    /// Whether `berth up` would succeed for it.
    pub fn ok(&self) -> bool {
        self.report.as_ref().is_ok_and(|r| r.ok)
    }

    /// One line: what the up would do, or why it would fail.
    pub fn summary(&self) -> String {
        let report = match &self.report {
            Ok(report) => report,
            Err(e) => return e.clone(),
        };
        if !report.ok {
            let mut why: Vec<String> = report
                .refusals
                .iter()
                .map(|r| format!("{}: {}", r.field, r.reason))
                .collect();
            why.extend(
                report
                    .checks
                    .iter()
                    .filter(|c| !c.ok && (c.check != "spec" || report.refusals.is_empty()))
                    .map(|c| format!("{}: {}", c.check, c.message)),
            );
            return format!("would fail: {}", why.join("; "));
        }
        let container = report.container.as_ref();
        let mut parts = vec![if report.would_create {
            "would create it".to_owned()
        } else if report.would_replace {
            format!(
                "would replace its container ({} changed)",
                container.map(|c| c.reasons.join(", ")).unwrap_or_default()
            )
        } else if container.is_some_and(|c| c.action == "create") {
            "would start it".to_owned()
        } else {
            "would keep its container".to_owned()
        }];
        if let Some(image) = &report.image {
            parts.push(if image.local {
                "image on this machine".to_owned()
            } else {
                "image pulled from its registry".to_owned()
            });
        }
        let new = report
            .volumes
            .iter()
            .filter(|v| v.action == "create")
            .count();
        parts.push(format!("{} volume(s), {new} new", report.volumes.len()));
        parts.join("; ")
    }

    /// As JSON, for `--json`.
    pub fn json(&self) -> Value {
        match &self.report {
            Ok(report) => json!({"name": self.name, "key": self.key, "report": report}),
            Err(e) => json!({"name": self.name, "key": self.key, "error": e}),
        }
    }
}

/// Preflights each of `defs` in the repository's domain, as `berth up` would send them; `None`
/// when the domain does not exist yet (`berth up` makes it; nothing here does).
pub(super) async fn preflight_all(
    client: &Client,
    repo: &Repo,
    defs: &[&InstanceDef],
) -> anyhow::Result<Option<Vec<Preflight>>> {
    let Some(domain) = find_domain(client, repo).await? else {
        return Ok(None);
    };
    let domain = domain.resource_domain_id;
    let keys = current_keys(client, &domain, repo, defs).await?;
    let mut all = Vec::new();
    for (def, (key, _)) in defs.iter().zip(keys) {
        let request = UpRequest {
            spec: def.spec_json(Some(&repo.worktree_key)),
            cause: UpCause::Person,
            template: def.template,
        };
        let report = client
            .api
            .preflight(&domain, &key, &request)
            .await
            .map_err(|e| format!("{:#}", client.explain(e)));
        all.push(Preflight {
            name: def.name.clone(),
            key,
            report,
        });
    }
    Ok(Some(all))
}
