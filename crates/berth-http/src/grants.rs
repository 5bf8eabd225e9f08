//! What one service key may do: its capabilities everywhere and in single domains.
//!
//! A key the daemon's grants file does not name may do everything, so a daemon without one
//! behaves as before grants existed. A named key may do what its entry lists and nothing else.
//! Grants are configuration the daemon reads at start; no request can widen them.
//!
//! A per-domain grant names its domain by id (`rdm:<uuid>`) or by name, and matches only what
//! it names: a grant by id matches the domain with that id, never a domain *named* like it (a
//! key that may create domains could otherwise name one after the id it was granted), and a
//! grant by name matches only the domain's name.

use std::collections::{BTreeMap, BTreeSet};

use berth_api::capabilities::{Capability, ServiceDeploymentGrant};
use berth_api::ids::DomainId;

/// How a route's domain is matched against per-domain grants: by its id or by its name, never
/// one for the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DomainRef<'a> {
    /// The domain's id, as the route's path names it; matches only grants by id.
    Id(&'a str),
    /// The domain's stored name; matches only grants by name.
    Name(&'a str),
}

/// One key's capabilities.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyGrants {
    /// In every domain the key reaches; `None` for a key without configuration (everything).
    everywhere: Option<BTreeSet<Capability>>,
    /// Beyond those, in one domain each, as the grant names it (id or name).
    per_domain: BTreeMap<String, BTreeSet<Capability>>,
}

/// Whether a grant's `serviceId` names a domain by id: it has the id's exact shape.
fn names_an_id(service_id: &str) -> bool {
    DomainId::parse(service_id).is_some()
}

impl KeyGrants {
    /// Every capability everywhere: a key the grants file does not name.
    pub fn unrestricted() -> Self {
        Self::default()
    }

    /// Exactly `everywhere` in every domain, and each grant's capabilities in its domain.
    pub fn restricted(
        everywhere: impl IntoIterator<Item = Capability>,
        per_domain: impl IntoIterator<Item = ServiceDeploymentGrant>,
    ) -> Self {
        let mut domains: BTreeMap<String, BTreeSet<Capability>> = BTreeMap::new();
        for grant in per_domain {
            domains
                .entry(grant.service_id)
                .or_default()
                .extend(grant.capabilities);
        }
        Self {
            everywhere: Some(everywhere.into_iter().collect()),
            per_domain: domains,
        }
    }

    /// Whether the grants file names this key.
    pub fn is_restricted(&self) -> bool {
        self.everywhere.is_some()
    }

    /// Whether the key may use `capability`, in `domain` when the route names one. A route
    /// outside any domain (lists, workspaces) goes by the key's capabilities everywhere only.
    /// A domain given by id matches only grants by id, one given by name only grants by name.
    pub fn allows(&self, capability: Capability, domain: Option<DomainRef<'_>>) -> bool {
        let Some(everywhere) = &self.everywhere else {
            return true;
        };
        if everywhere.contains(&capability) {
            return true;
        }
        let key = match domain {
            None => return false,
            Some(DomainRef::Id(id)) if names_an_id(id) => id,
            Some(DomainRef::Name(name)) if !names_an_id(name) => name,
            // An id that is not one, or a name with an id's shape: no grant names it as such.
            Some(_) => return false,
        };
        self.per_domain
            .get(key)
            .is_some_and(|set| set.contains(&capability))
    }

    /// What the key may do in every domain, in the order of [`Capability::ALL`].
    pub fn everywhere(&self) -> Vec<Capability> {
        match &self.everywhere {
            None => Capability::ALL.to_vec(),
            Some(set) => Capability::ALL
                .into_iter()
                .filter(|c| set.contains(c))
                .collect(),
        }
    }

    /// The per-domain grants, in the contract's shape, by domain name.
    pub fn grants(&self) -> Vec<ServiceDeploymentGrant> {
        self.per_domain
            .iter()
            .map(|(domain, set)| ServiceDeploymentGrant {
                service_id: domain.clone(),
                capabilities: Capability::ALL
                    .into_iter()
                    .filter(|c| set.contains(c))
                    .collect(),
            })
            .collect()
    }
}

/// The grants file's entry for one key, named by its public id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyConfig {
    /// The key's public id (`keyId`, 12 hex digits, as `GET /v1/whoami` answers it).
    pub key_id: String,
    /// Another key's id whose domains and workspaces this key works on, when set: an IDE
    /// plugin's key acting for the developer's.
    pub acts_for: Option<String>,
    /// What it may do.
    pub grants: KeyGrants,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unnamed_key_may_do_everything_and_a_named_one_only_what_it_lists() {
        let all = KeyGrants::unrestricted();
        assert!(!all.is_restricted());
        for c in Capability::ALL {
            assert!(all.allows(c, None));
            assert!(all.allows(c, Some(DomainRef::Name("shop"))));
        }
        assert_eq!(all.everywhere(), Capability::ALL.to_vec());

        let ide = KeyGrants::restricted(
            [Capability::WorkspacesLink, Capability::Read],
            [ServiceDeploymentGrant {
                service_id: "shop".into(),
                capabilities: vec![Capability::PromoteRoute],
            }],
        );
        assert!(ide.is_restricted());
        assert!(ide.allows(Capability::Read, None));
        assert!(ide.allows(Capability::Read, Some(DomainRef::Name("blog"))));
        assert!(!ide.allows(Capability::InstancesExec, Some(DomainRef::Name("shop"))));
        assert!(ide.allows(Capability::PromoteRoute, Some(DomainRef::Name("shop"))));
        assert!(!ide.allows(Capability::PromoteRoute, Some(DomainRef::Name("blog"))));
        assert!(!ide.allows(Capability::PromoteRoute, Some(DomainRef::Id("shop"))));
        assert!(!ide.allows(Capability::PromoteRoute, None));
        assert_eq!(
            ide.everywhere(),
            vec![Capability::Read, Capability::WorkspacesLink]
        );
        assert_eq!(ide.grants()[0].service_id, "shop");
    }

    #[test]
    fn a_grant_by_id_matches_only_that_id_and_a_grant_by_name_only_that_name() {
        const A: &str = "rdm:0a1b2c3d-0000-4000-8000-000000000001";
        const B: &str = "rdm:0a1b2c3d-0000-4000-8000-000000000002";
        let key = KeyGrants::restricted(
            [Capability::DomainsCreate],
            [
                ServiceDeploymentGrant {
                    service_id: A.into(),
                    capabilities: vec![Capability::CreateGreenfield, Capability::InstancesExec],
                },
                ServiceDeploymentGrant {
                    service_id: "shop".into(),
                    capabilities: vec![Capability::InstancesLifecycle],
                },
            ],
        );
        let exec = Capability::InstancesExec;
        // By id: the domain with that id, and nothing else.
        assert!(key.allows(exec, Some(DomainRef::Id(A))));
        assert!(!key.allows(exec, Some(DomainRef::Id(B))));
        // A domain *named* like the granted id (another domain, made with `domains:create`)
        // gets nothing from the grant by id.
        assert!(!key.allows(exec, Some(DomainRef::Name(A))));
        assert!(!key.allows(Capability::CreateGreenfield, Some(DomainRef::Name(A))));
        // By name: only the name; an id never matches a grant by name.
        let lifecycle = Capability::InstancesLifecycle;
        assert!(key.allows(lifecycle, Some(DomainRef::Name("shop"))));
        assert!(!key.allows(lifecycle, Some(DomainRef::Id("shop"))));
        assert!(!key.allows(lifecycle, Some(DomainRef::Name("blog"))));
        // An id in another case is not the id (ids are lower case) and not a name either.
        assert!(!key.allows(exec, Some(DomainRef::Id(&A.to_uppercase()))));
        assert!(!key.allows(exec, Some(DomainRef::Name(&A.to_uppercase()))));
    }
}
