//! What a service key may do: its capabilities, for every domain or for one.
//!
//! The four `deployment:*` names are the immutable-image contract's
//! `TServiceDeploymentCapability`; the others are berth's, in the same style. A grant for one
//! domain has the contract's `IServiceDeploymentGrant` shape (`serviceId` names the resource
//! domain). Grants are the daemon's configuration, never a request's: no route takes them.

use serde::{Deserialize, Serialize};

/// One thing a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Capability {
    /// Lists, gets, events, logs, the wait route, the web page, observing image releases.
    #[serde(rename = "read")]
    Read,
    /// Workspaces, their links to a domain, and leases.
    #[serde(rename = "workspaces:link")]
    WorkspacesLink,
    /// Starting and stopping instances; fencing and unfencing a domain.
    #[serde(rename = "instances:lifecycle")]
    InstancesLifecycle,
    /// Creating an instance or changing its spec (`up`).
    #[serde(rename = "deployment:create-greenfield")]
    CreateGreenfield,
    /// Answering what an `up` would do, writing nothing.
    #[serde(rename = "deployment:preflight")]
    Preflight,
    /// Running a command in an instance.
    #[serde(rename = "instances:exec")]
    InstancesExec,
    /// Snapshots, restores, branches and templates: an instance's data.
    #[serde(rename = "data:snapshot")]
    DataSnapshot,
    /// Promoting an observed image release.
    #[serde(rename = "deployment:promote-route")]
    PromoteRoute,
    /// Rolling an instance back to an accepted release.
    #[serde(rename = "deployment:rollback-route")]
    RollbackRoute,
    /// Archiving an instance or a domain.
    #[serde(rename = "instances:archive")]
    InstancesArchive,
    /// Creating resource domains.
    #[serde(rename = "domains:create")]
    DomainsCreate,
}

impl Capability {
    /// Every capability: what a key without configuration has.
    pub const ALL: [Capability; 11] = [
        Capability::Read,
        Capability::WorkspacesLink,
        Capability::InstancesLifecycle,
        Capability::CreateGreenfield,
        Capability::Preflight,
        Capability::InstancesExec,
        Capability::DataSnapshot,
        Capability::PromoteRoute,
        Capability::RollbackRoute,
        Capability::InstancesArchive,
        Capability::DomainsCreate,
    ];

    /// The wire name, e.g. `instances:exec`.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Read => "read",
            Capability::WorkspacesLink => "workspaces:link",
            Capability::InstancesLifecycle => "instances:lifecycle",
            Capability::CreateGreenfield => "deployment:create-greenfield",
            Capability::Preflight => "deployment:preflight",
            Capability::InstancesExec => "instances:exec",
            Capability::DataSnapshot => "data:snapshot",
            Capability::PromoteRoute => "deployment:promote-route",
            Capability::RollbackRoute => "deployment:rollback-route",
            Capability::InstancesArchive => "instances:archive",
            Capability::DomainsCreate => "domains:create",
        }
    }

    /// The capability a wire name names.
    pub fn parse(name: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

display_as_wire_name!(Capability);

/// Capabilities in one resource domain, beyond the key's own (the contract's
/// `IServiceDeploymentGrant`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ServiceDeploymentGrant {
    /// The resource domain: its name or its `rdm:` id.
    pub service_id: String,
    /// What the key may do there.
    pub capabilities: Vec<Capability>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_capability_round_trips_through_its_wire_name() {
        for c in Capability::ALL {
            assert_eq!(Capability::parse(c.as_str()), Some(c));
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert_eq!(serde_json::from_str::<Capability>(&json).unwrap(), c);
        }
        assert_eq!(Capability::parse("everything"), None);
    }
}
