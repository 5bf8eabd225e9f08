//! What the web page reads, each in one request: the facts of a domain's instances (for its
//! summary), its volumes' sizes (measured by the engine, reused a short while), and a person's
//! start. Handlers call these; none of them reaches the store or the reconciler itself.

use std::sync::Arc;
use std::time::Instant;

use super::size_cache::SIZE_CACHE_FOR;
use super::{Berth, UpCause};
use crate::controllers::endpoints::EndpointView;
use crate::controllers::sizes::volume_sizes;
use crate::error::Error;
use crate::evidence::ImageEvidence;
use crate::ids::DomainId;
use crate::model::{Domain, Instance, InstanceView};
use crate::snapshots::BranchOrigin;
use crate::time::Timestamp;
use crate::watch::Watch;
pub use berth_api::page::{InstanceVolumeUsage, LastFailure, VolumeSize, VolumeUsage};

/// One instance that is not archived, with what the page's summary shows of it.
#[derive(Debug, Clone)]
pub struct InstanceFacts {
    /// The instance as stored.
    pub instance: Instance,
    /// Its host endpoints.
    pub endpoints: Vec<EndpointView>,
    /// Its image evidence, of whatever spec it was recorded for.
    pub evidence: Option<ImageEvidence>,
    /// Its last failure, kept after it recovered.
    pub last_failure: Option<LastFailure>,
    /// What it was branched from, when it was.
    pub branched_from: Option<BranchOrigin>,
}

impl Berth {
    /// Where each domain's changes are published, for the event stream's ids.
    pub fn watch(&self) -> &Arc<Watch> {
        self.store.watch()
    }

    /// The domain and the facts of each of its instances that is not archived, by key: one
    /// read for every instance's endpoints and one for their evidence, so a domain of 200
    /// costs about what a domain of one does.
    pub async fn domain_facts(
        &self,
        owner: &str,
        domain_id: &DomainId,
    ) -> Result<(Domain, Vec<InstanceFacts>), Error> {
        let domain = self.domain(owner, domain_id)?;
        // A pool's waiting instances are shown with their pool (`GET .../pools`).
        let mut instances = self.store.instances(domain_id, false);
        instances.retain(|i| self.is_persons(i));
        let ids: Vec<_> = instances.iter().map(|i| i.id.clone()).collect();
        let endpoints = match &self.reconciler {
            Some(r) => r.endpoints_of_all(&ids).await?,
            None => vec![Vec::new(); ids.len()],
        };
        let recorded = self
            .store
            .read(move |tx| {
                ids.iter()
                    .map(|id| {
                        Ok((
                            tx.evidence(id)?,
                            tx.last_failure(id)?,
                            tx.branch_origin(id)?,
                        ))
                    })
                    .collect::<Result<Vec<_>, crate::store::StoreError>>()
            })
            .await?;
        let facts = instances
            .into_iter()
            .zip(recorded)
            .zip(endpoints)
            .map(
                |((instance, (evidence, last_failure, branched_from)), endpoints)| InstanceFacts {
                    instance,
                    endpoints,
                    evidence,
                    last_failure,
                    branched_from,
                },
            )
            .collect();
        Ok((domain, facts))
    }

    /// The sizes of a domain's volumes (those its instances that are not archived mount), as
    /// the engine reports them; a measurement of every volume is reused for 10 seconds.
    pub async fn volume_usage(
        &self,
        owner: &str,
        domain_id: &DomainId,
    ) -> Result<VolumeUsage, Error> {
        self.domain(owner, domain_id)?;
        let instances = self.store.instances(domain_id, false);
        let names: Vec<String> = instances
            .iter()
            .flat_map(|i| i.volumes.iter().map(|v| v.docker_name.clone()))
            .collect();
        let (measured_at, sizes) = {
            let mut cache = self.sizes.0.lock().await;
            match cache.as_ref() {
                Some((when, at, sizes))
                    if when.elapsed() < SIZE_CACHE_FOR
                        && names.iter().all(|n| sizes.contains_key(n)) =>
                {
                    (*at, sizes.clone())
                }
                _ => {
                    let sizes = match &self.reconciler {
                        Some(r) if !names.is_empty() => {
                            volume_sizes(self.store(), r.runtime().as_ref(), &names)
                                .await
                                .map_err(|e| Error::Runtime(e.to_string()))?
                        }
                        _ => names.iter().map(|n| (n.clone(), None)).collect(),
                    };
                    let at = Timestamp::now();
                    // A size the engine did not give (it refused its report, busy with
                    // another) is not kept: the next ask measures again.
                    if sizes.values().all(Option::is_some) {
                        *cache = Some((Instant::now(), at, sizes.clone()));
                    }
                    (at, sizes)
                }
            }
        };
        Ok(VolumeUsage {
            measured_at,
            instances: instances
                .iter()
                .map(|i| InstanceVolumeUsage {
                    key: i.key.clone(),
                    volumes: i
                        .volumes
                        .iter()
                        .map(|v| VolumeSize {
                            name: v.name.clone(),
                            docker_name: v.docker_name.clone(),
                            bytes: sizes.get(&v.docker_name).copied().flatten(),
                        })
                        .collect(),
                })
                .collect(),
        })
    }

    /// A person's start: an `up` with cause `person` of the spec the instance has, which lifts
    /// a person's stop.
    pub async fn start(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
    ) -> Result<InstanceView, Error> {
        let instance = self.instance(owner, domain_id, key)?;
        let spec: serde_json::Value = serde_json::from_str(&instance.spec.canonical_json())
            .map_err(|e| Error::Internal(e.to_string()))?;
        self.up(owner, domain_id, key, &spec, UpCause::Person).await
    }
}
