//! What the crate's own tests build again and again.

use crate::ids::{DomainId, InstanceId};
use crate::model::{Desired, Instance, InstanceState};
use crate::spec::Spec;
use crate::time::Timestamp;

/// An instance `db` of `domain_id`, not started, with one generation and no volumes.
pub fn db_instance(domain_id: &DomainId) -> Instance {
    let spec: Spec = serde_json::from_value(serde_json::json!({
        "alias": "db", "worktreeKey": null,
        "image": format!("r/x@sha256:{}", "a".repeat(64)),
        "command": null, "env": {}, "volumes": [],
        "limits": {"cpuMillicores": 100, "memoryBytes": 67108864},
        "ready": {"kind": "tcp", "port": 80}, "idleStopAfterSeconds": 60
    }))
    .unwrap();
    Instance {
        id: InstanceId::new(),
        domain_id: domain_id.clone(),
        key: "db".into(),
        spec_digest: spec.digest().to_string(),
        spec,
        desired: Desired::Running,
        stop_reason: None,
        state: InstanceState::NotStarted,
        observed_at: Timestamp::from_millis(1),
        started_at: None,
        last_reached_at: None,
        frozen_at: None,
        volumes: vec![],
        kept: vec![],
        restart_count: 0,
        generation: 1,
        observed_generation: 1,
        volume_tag: None,
        template: false,
    }
}
