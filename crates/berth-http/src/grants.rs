//! What one service key may do: its capabilities everywhere and in single domains.
//!
//! A key the daemon's grants file does not name may do everything, so a daemon without one
//! behaves as before grants existed. A named key may do what its entry lists and nothing else.
//! Grants are configuration the daemon reads at start; no request can widen them.

use std::collections::{BTreeMap, BTreeSet};

use berth_api::capabilities::{Capability, ServiceDeploymentGrant};

/// One key's capabilities.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyGrants {
    /// In every domain the key reaches; `None` for a key without configuration (everything).
    everywhere: Option<BTreeSet<Capability>>,
    /// Beyond those, in one domain each, by the domain's name.
    per_domain: BTreeMap<String, BTreeSet<Capability>>,
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
    pub fn allows(&self, capability: Capability, domain: Option<&str>) -> bool {
        let Some(everywhere) = &self.everywhere else {
            return true;
        };
        everywhere.contains(&capability)
            || domain
                .and_then(|d| self.per_domain.get(d))
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
            assert!(all.allows(c, Some("shop")));
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
        assert!(ide.allows(Capability::Read, Some("blog")));
        assert!(!ide.allows(Capability::InstancesExec, Some("shop")));
        assert!(ide.allows(Capability::PromoteRoute, Some("shop")));
        assert!(!ide.allows(Capability::PromoteRoute, Some("blog")));
        assert!(!ide.allows(Capability::PromoteRoute, None));
        assert_eq!(
            ide.everywhere(),
            vec![Capability::Read, Capability::WorkspacesLink]
        );
        assert_eq!(ide.grants()[0].service_id, "shop");
    }
}
