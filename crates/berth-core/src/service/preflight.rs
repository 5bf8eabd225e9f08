//! The preflight of an `up`: the checks the `up` makes, the image, volumes, alias, endpoints and
//! container it would have, read from the store and the engine without writing to either.

use std::collections::BTreeMap;
use std::time::Duration;

use berth_api::preflight::{
    PreflightAlias, PreflightCheck, PreflightContainer, PreflightEndpoint, PreflightImage,
    PreflightReport, PreflightVolume,
};
use serde_json::Value;

use super::berth::decode_up_spec;
use super::instances::{alias_scope, check_up, next_instance};
use super::{Berth, UpCause};
use crate::controllers::endpoints::EndpointController;
use crate::error::Error;
use crate::ids::DomainId;
use crate::model::{Desired, Instance};
use crate::names;
use crate::plan::plan_volumes;
use crate::runtime::{ImageFacts, LABEL_SPEC_DIGEST, Runtime, RuntimeError};
use crate::spec::Spec;

fn check(check: &str, ok: bool, message: impl Into<String>) -> PreflightCheck {
    PreflightCheck {
        check: check.to_owned(),
        ok,
        message: message.into(),
    }
}

impl Berth {
    /// What an `up` of `spec` would do and whether it would succeed; writes nothing. A domain
    /// that is not the owner's is an error, as for the `up`; everything the `up` would refuse
    /// is a failed check in the report.
    pub async fn preflight(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        spec: &Value,
        cause: UpCause,
    ) -> Result<PreflightReport, Error> {
        self.domain(owner, domain_id)?;
        let mut report = PreflightReport {
            ok: false,
            would_create: false,
            would_replace: false,
            spec_digest: None,
            checks: Vec::new(),
            refusals: Vec::new(),
            image: None,
            volumes: Vec::new(),
            alias: None,
            endpoints: Vec::new(),
            container: None,
        };
        let spec = match decode_up_spec(spec) {
            Ok(spec) => spec,
            Err(Error::SpecRefused { message, refusals }) => {
                let message = message.replace("; nothing was written", "");
                report.checks.push(check("spec", false, message));
                report.refusals = refusals;
                return Ok(report);
            }
            Err(e) => return Err(e),
        };
        report.checks.push(check(
            "spec",
            true,
            "the spec decodes and asks for nothing an instance may not have",
        ));
        let reconciler = self.require_runtime()?;
        let runtime = reconciler.runtime().as_ref();
        let spec_digest = spec.digest().to_string();
        report.spec_digest = Some(spec_digest.clone());

        let (o, d, k, s) = (
            owner.to_owned(),
            domain_id.clone(),
            key.to_owned(),
            spec.clone(),
        );
        let (checked, existing, holder) = self
            .store
            .read(move |tx| {
                let checked = check_up(tx, &o, &d, &k, &s).map(|_| ());
                let existing = tx.instance(&d, &k)?;
                let holder = tx.alias_holder(&d, &s.alias, s.worktree_key.as_deref(), &k)?;
                Ok((checked, existing, holder))
            })
            .await?;
        match checked {
            Ok(()) => report.checks.extend([
                check("domain", true, "the domain admits the instance"),
                check(
                    "instance",
                    true,
                    match &existing {
                        None => format!("there is no instance {key} yet: the up would make it"),
                        Some(_) => format!("the instance {key} exists: the up would update it"),
                    },
                ),
                check(
                    "alias",
                    true,
                    format!("the alias {} is free in {}", spec.alias, alias_scope(&spec)),
                ),
            ]),
            Err(e @ Error::DomainNotActive { .. }) => {
                report.checks.push(check("domain", false, e.to_string()))
            }
            Err(e @ Error::InstanceArchived(_)) => {
                report.checks.push(check("instance", false, e.to_string()))
            }
            Err(e @ Error::AliasTaken { .. }) => {
                report.checks.push(check("alias", false, e.to_string()))
            }
            Err(e) => return Err(e),
        }
        report.would_create = existing.is_none();
        report.alias = Some(PreflightAlias {
            alias: spec.alias.clone(),
            scope: alias_scope(&spec),
            holder,
        });

        // The engine away: every step after this one would wait on it for nothing.
        if let Err(e) = self.require_engine() {
            report.checks.push(check("engine", false, e.to_string()));
            return Ok(report);
        }
        let facts = self.preflight_image(runtime, &spec, &mut report).await;
        let prefix = self.prefix().to_owned();
        let mut planned = next_instance(
            existing.as_ref(),
            domain_id,
            key,
            &spec,
            &spec_digest,
            cause,
            &prefix,
        );
        if let Some(facts) = &facts {
            planned.volumes = plan_volumes(&prefix, &planned, &facts.volumes);
        }
        for volume in &planned.volumes {
            let step = format!("the engine's look for the volume {}", volume.docker_name);
            let found = match bounded(
                self.preflight_step(),
                &step,
                runtime.volume_labels(&volume.docker_name),
            )
            .await
            {
                Ok(Ok(found)) => found,
                Err(stalled) => {
                    report.checks.push(check("engine", false, stalled));
                    report.ok = false;
                    return Ok(report);
                }
                Ok(Err(e)) => return Err(Error::Runtime(e.to_string())),
            };
            report.volumes.push(PreflightVolume {
                name: volume.name.clone(),
                docker_name: volume.docker_name.clone(),
                mount_path: volume.mount_path.clone(),
                action: if found.is_some() { "reuse" } else { "create" }.to_owned(),
            });
        }

        let exposed = facts
            .as_ref()
            .map(|f| f.exposed_tcp_ports.clone())
            .unwrap_or_default();
        let allocated: BTreeMap<u16, u16> = match &existing {
            Some(instance) => reconciler
                .endpoints_of(&instance.id)
                .await?
                .into_iter()
                .map(|e| (e.port, e.host_port))
                .collect(),
            None => BTreeMap::new(),
        };
        report.endpoints = EndpointController::service_ports(&planned, &exposed)
            .into_iter()
            .map(|port| PreflightEndpoint {
                port,
                host_port: allocated.get(&port).copied(),
            })
            .collect();

        let container = match self
            .preflight_container(runtime, existing.as_ref(), &planned)
            .await
        {
            Ok(container) => container,
            Err(Stalled::Step(message)) => {
                report.checks.push(check("engine", false, message));
                report.ok = false;
                return Ok(report);
            }
            Err(Stalled::Error(e)) => return Err(e),
        };
        report.would_replace = container.action == "replace";
        report.container = Some(container);
        report.ok = report.checks.iter().all(|c| c.ok);
        Ok(report)
    }

    /// The image's check and section: local (verified), else what the registry serves under
    /// the digest. Nothing is pulled. Answers the local image's facts.
    async fn preflight_image(
        &self,
        runtime: &dyn Runtime,
        spec: &Spec,
        report: &mut PreflightReport,
    ) -> Option<ImageFacts> {
        let mut image = PreflightImage {
            reference: spec.image.as_str().to_owned(),
            digest: spec.image.digest().to_string(),
            local: false,
            image_id: None,
            pullable: None,
            registry_media_type: None,
            platform_manifest_digest: None,
            platform_config_digest: None,
            message: None,
        };
        let limit = self.preflight_step();
        let step = format!("the engine's look for the image {}", spec.image.as_str());
        let local = bounded(limit, &step, runtime.local_image(&spec.image));
        let (ok, message, facts) = match local.await {
            Err(stalled) => (false, stalled, None),
            Ok(Ok(Some(facts))) => {
                image.local = true;
                image.image_id = Some(facts.image_id.clone());
                (
                    true,
                    "the engine holds the image under its digest".to_owned(),
                    Some(facts),
                )
            }
            Ok(Err(e)) => (false, e.to_string(), None),
            Ok(Ok(None)) => match bounded(
                limit,
                &format!("the registry's manifest of {}", spec.image.as_str()),
                runtime.registry_manifest(&spec.image),
            )
            .await
            {
                Err(stalled) => (
                    false,
                    format!("the engine does not hold the image, and {stalled}"),
                    None,
                ),
                Ok(Ok(Some(found))) => {
                    image.pullable = Some(true);
                    image.registry_media_type = found.media_type;
                    image.platform_manifest_digest = found.platform_manifest_digest;
                    image.platform_config_digest = found.platform_config_digest;
                    (
                        true,
                        "the engine does not hold the image; the registry serves its digest, so \
                         the up would pull it"
                            .to_owned(),
                        None,
                    )
                }
                Ok(Ok(None)) => (
                    false,
                    format!(
                        "the engine does not hold the image, and the {} runtime cannot ask its \
                         registry whether it serves the digest",
                        runtime.kind()
                    ),
                    None,
                ),
                Ok(Err(e)) => {
                    image.pullable = Some(false);
                    (
                        false,
                        format!("the engine does not hold the image, and its registry: {e}"),
                        None,
                    )
                }
            },
        };
        if !ok {
            image.message = Some(message.clone());
        }
        report.checks.push(check("image", ok, message));
        report.image = Some(image);
        facts
    }

    /// The instance's container and what the `up` would do to it.
    async fn preflight_container(
        &self,
        runtime: &dyn Runtime,
        existing: Option<&Instance>,
        planned: &Instance,
    ) -> Result<PreflightContainer, Stalled> {
        let name = names::container(self.prefix(), &planned.domain_id, &planned.key);
        let found = bounded(
            self.preflight_step(),
            &format!("the engine's look for the container {name}"),
            runtime.inspect_container(&name),
        )
        .await
        .map_err(Stalled::Step)?
        .map_err(|e| Stalled::Error(Error::Runtime(e.to_string())))?;
        let mut reasons = Vec::new();
        let action = match (&found, existing) {
            (None, _) if planned.desired == Desired::Running => "create",
            (None, _) => "none",
            (Some(_), None) => "replace",
            (Some(container), Some(before)) => {
                let made_of = container.labels.get(LABEL_SPEC_DIGEST);
                if made_of != Some(&planned.spec_digest)
                    && !before.spec.same_container(&planned.spec)
                {
                    reasons = differences(&before.spec, &planned.spec);
                }
                if reasons.is_empty() {
                    "keep"
                } else {
                    "replace"
                }
            }
        };
        if action == "replace" && reasons.is_empty() {
            reasons.push("the container is not this instance's".to_owned());
        }
        Ok(PreflightContainer {
            name,
            exists: found.is_some(),
            action: action.to_owned(),
            reasons,
        })
    }
}

/// Why a preflight step gave no answer: it stalled (named), or it failed.
enum Stalled {
    Step(String),
    Error(Error),
}

/// `step` (a call of the engine or a registry), given at most `limit`: past it, the sentence
/// naming the step and the limit.
async fn bounded<T>(
    limit: Duration,
    step: &str,
    call: impl Future<Output = Result<T, RuntimeError>>,
) -> Result<Result<T, RuntimeError>, String> {
    tokio::time::timeout(limit, call).await.map_err(|_| {
        format!(
            "{step} did not answer within {} (the daemon's --preflight-step-timeout)",
            humantime_secs(limit)
        )
    })
}

/// `30 s`, `1.5 s`.
fn humantime_secs(limit: Duration) -> String {
    let secs = limit.as_secs_f64();
    if secs.fract() == 0.0 {
        format!("{secs:.0} s")
    } else {
        format!("{secs} s")
    }
}

/// The parts of a spec a container is made of that differ between `before` and `after`.
fn differences(before: &Spec, after: &Spec) -> Vec<String> {
    let mut reasons = Vec::new();
    if before.image != after.image {
        reasons.push("image".to_owned());
    }
    if before.command != after.command {
        reasons.push("command".to_owned());
    }
    if before.env != after.env {
        reasons.push("env".to_owned());
    }
    if before.volumes != after.volumes {
        reasons.push("volumes".to_owned());
    }
    if before.limits != after.limits {
        reasons.push("limits".to_owned());
    }
    reasons
}
