//! Least privilege for `berth mcp`: the capabilities each tool needs (the ones its daemon
//! routes need, by the names berth-http's capability table gives them), what the server's key
//! holds in this repository's domain (`GET /v1/whoami`), and which tools that lets it offer.

use berth_client::{Capability, Whoami};

/// Each tool with the capabilities its routes need. A tool not named here is offered to no key.
const NEEDS: &[(&str, &[Capability])] = &[
    ("list_instances", &[Capability::Read]),
    ("environment", &[Capability::Read]),
    ("logs", &[Capability::Read]),
    ("wait_running", &[Capability::Read]),
    ("up", &[Capability::Read, Capability::CreateGreenfield]),
    ("exec", &[Capability::Read, Capability::InstancesExec]),
    ("snapshot", &[Capability::Read, Capability::DataSnapshot]),
    ("restore", &[Capability::Read, Capability::DataSnapshot]),
    ("branch", &[Capability::Read, Capability::DataSnapshot]),
];

/// What `tool` needs; `None` for a tool the table does not name.
pub fn needs(tool: &str) -> Option<&'static [Capability]> {
    NEEDS.iter().find(|(t, _)| *t == tool).map(|(_, n)| *n)
}

/// The first capability `tool` needs that `held` lacks; `Ok(())` when it may be called.
pub fn check(tool: &str, held: &[Capability]) -> Result<(), Refusal> {
    match needs(tool) {
        None => Err(Refusal::Unknown),
        Some(needs) => match needs.iter().find(|c| !held.contains(c)) {
            Some(missing) => Err(Refusal::Lacks(*missing)),
            None => Ok(()),
        },
    }
}

/// Why a tool may not be called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The server has no such tool.
    Unknown,
    /// The key lacks this capability.
    Lacks(Capability),
}

/// The capabilities `me` holds in the domain `domain_name` (with id `domain_id` once it
/// exists): everything for a key the grants file does not name, else its own capabilities and
/// its grants for that domain.
pub fn held(me: &Whoami, domain_name: &str, domain_id: Option<&str>) -> Vec<Capability> {
    if !me.restricted {
        return Capability::ALL.to_vec();
    }
    let mut held = me.capabilities.clone();
    for grant in &me.service_deployment_grants {
        if grant.service_id == domain_name || Some(grant.service_id.as_str()) == domain_id {
            for c in &grant.capabilities {
                if !held.contains(c) {
                    held.push(*c);
                }
            }
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whoami(restricted: bool, caps: Vec<Capability>, grants: serde_json::Value) -> Whoami {
        let mut me: Whoami = serde_json::from_value(serde_json::json!({
            "keyId": "0123456789ab", "consentLabelTemplate": "berth.workspace=0123456789ab/ID",
            "restricted": restricted, "serviceDeploymentGrants": grants,
        }))
        .unwrap();
        me.capabilities = caps;
        me
    }

    #[test]
    fn a_tool_needs_what_its_routes_need_and_a_refusal_names_the_first_missing() {
        let read_only = [Capability::Read];
        assert_eq!(check("list_instances", &read_only), Ok(()));
        assert_eq!(
            check("exec", &read_only),
            Err(Refusal::Lacks(Capability::InstancesExec))
        );
        assert_eq!(
            check("snapshot", &[]),
            Err(Refusal::Lacks(Capability::Read))
        );
        assert_eq!(check("lease", &Capability::ALL), Err(Refusal::Unknown));
        assert_eq!(Capability::InstancesExec.as_str(), "instances:exec");
    }

    #[test]
    fn a_grant_counts_only_in_its_own_domain() {
        let me = whoami(
            true,
            vec![Capability::Read],
            serde_json::json!([{"serviceId": "shop 1a2b3c4d", "capabilities": ["data:snapshot"]}]),
        );
        assert!(held(&me, "shop 1a2b3c4d", None).contains(&Capability::DataSnapshot));
        assert!(!held(&me, "other 1a2b3c4d", None).contains(&Capability::DataSnapshot));
        let everything = whoami(false, Vec::new(), serde_json::json!([]));
        assert_eq!(held(&everything, "shop", None).len(), Capability::ALL.len());
    }
}
