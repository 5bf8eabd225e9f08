//! Turning berth's [`ContainerPlan`] into a swarm service spec, and reading and editing a
//! service's spec (its replica count, its placement, its networks). Pure: no engine here.

use std::collections::HashMap;

use berth_core::runtime::ContainerPlan;
use bollard::models::{
    EndpointSpec, EndpointSpecModeEnum, Mount, MountType, NetworkAttachmentConfig, ServiceSpec,
    ServiceSpecMode, ServiceSpecModeReplicated, TaskSpec, TaskSpecContainerSpec, TaskSpecPlacement,
    TaskSpecResources, TaskSpecRestartPolicy, TaskSpecRestartPolicyConditionEnum,
};

/// The service an instance's plan becomes, with no replica yet.
pub fn service_spec(plan: &ContainerPlan, node_id: &str) -> ServiceSpec {
    let labels: HashMap<String, String> = plan.labels.clone().into_iter().collect();
    ServiceSpec {
        name: Some(plan.name.clone()),
        labels: Some(labels.clone()),
        task_template: Some(TaskSpec {
            container_spec: Some(TaskSpecContainerSpec {
                image: Some(plan.image.clone()),
                labels: Some(labels),
                // A plan's command replaces the image's CMD, which a service calls its args.
                args: plan.command.clone(),
                env: Some(plan.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
                mounts: Some(
                    plan.mounts
                        .iter()
                        .map(|m| Mount {
                            typ: Some(MountType::VOLUME),
                            source: Some(m.volume.clone()),
                            target: Some(m.path.clone()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                stop_grace_period: Some(
                    i64::try_from(plan.stop_timeout.as_nanos()).unwrap_or(i64::MAX),
                ),
                init: Some(true),
                capability_add: None,
                ..Default::default()
            }),
            resources: Some(TaskSpecResources {
                limits: Some(bollard::models::Limit {
                    nano_cpus: Some(plan.nano_cpus),
                    memory_bytes: Some(plan.memory_bytes),
                    pids: None,
                }),
                ..Default::default()
            }),
            // berth restarts what exits, with its own back-off and crash-loop handling.
            restart_policy: Some(TaskSpecRestartPolicy {
                condition: Some(TaskSpecRestartPolicyConditionEnum::NONE),
                ..Default::default()
            }),
            placement: Some(TaskSpecPlacement {
                constraints: Some(vec![format!("node.id=={node_id}")]),
                ..Default::default()
            }),
            networks: Some(vec![NetworkAttachmentConfig {
                target: Some(plan.network.clone()),
                aliases: Some(plan.aliases.clone()),
                driver_opts: None,
            }]),
            ..Default::default()
        }),
        mode: Some(ServiceSpecMode {
            replicated: Some(ServiceSpecModeReplicated { replicas: Some(0) }),
            ..Default::default()
        }),
        // No virtual IP and no published port: the aliases resolve to the task itself.
        endpoint_spec: Some(EndpointSpec {
            mode: Some(EndpointSpecModeEnum::DNSRR),
            ports: None,
        }),
        ..Default::default()
    }
}

/// The node a service's placement constraint names.
pub(crate) fn placed_node(spec: &ServiceSpec) -> Option<String> {
    spec.task_template
        .as_ref()
        .and_then(|t| t.placement.as_ref())
        .and_then(|p| p.constraints.as_ref())
        .and_then(|c| {
            c.iter()
                .find_map(|c| c.strip_prefix("node.id==").map(str::to_owned))
        })
}

pub(crate) fn service_networks(spec: &ServiceSpec) -> Vec<NetworkAttachmentConfig> {
    spec.task_template
        .as_ref()
        .and_then(|t| t.networks.clone())
        .unwrap_or_default()
}

pub(crate) fn replicas(spec: &ServiceSpec) -> i64 {
    spec.mode
        .as_ref()
        .and_then(|m| m.replicated.as_ref())
        .and_then(|r| r.replicas)
        .unwrap_or_default()
}

pub(crate) fn set_replicas(spec: &mut ServiceSpec, n: i64) {
    spec.mode = Some(ServiceSpecMode {
        replicated: Some(ServiceSpecModeReplicated { replicas: Some(n) }),
        ..Default::default()
    });
}

/// Asks the swarm for a new task: any change of the spec makes it look at the service again,
/// and a forced update replaces a task that ended.
pub(crate) fn force_update(spec: &mut ServiceSpec) {
    let task = spec.task_template.get_or_insert_with(Default::default);
    task.force_update = Some(task.force_update.unwrap_or_default() + 1);
}

/// Attaches the service to the network (named `network`, with id `network_id`) with these
/// aliases, in place of any attachment to it the spec already has.
pub(crate) fn attach_network(
    spec: &mut ServiceSpec,
    network: &str,
    network_id: &str,
    aliases: &[String],
) {
    let task = spec.task_template.get_or_insert_with(Default::default);
    let mut attached = task.networks.take().unwrap_or_default();
    attached.retain(|a| {
        let target = a.target.as_deref().unwrap_or_default();
        target != network && target != network_id
    });
    attached.push(NetworkAttachmentConfig {
        target: Some(network_id.to_owned()),
        aliases: Some(aliases.to_vec()),
        driver_opts: None,
    });
    task.networks = Some(attached);
}

/// Removes the service's attachment to the network, whether the spec names it by name or id.
pub(crate) fn detach_network(spec: &mut ServiceSpec, network: &str, network_id: &str) {
    if let Some(task) = spec.task_template.as_mut()
        && let Some(attached) = task.networks.as_mut()
    {
        attached.retain(|a| {
            let target = a.target.as_deref().unwrap_or_default();
            target != network && target != network_id
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use berth_core::runtime::{LABEL_INSTANCE, LABEL_MANAGED};

    use super::*;

    fn plan() -> ContainerPlan {
        ContainerPlan {
            name: "p-dom-db".to_owned(),
            image: "registry.test/db@sha256:abc".to_owned(),
            command: Some(vec!["serve".to_owned(), "--fast".to_owned()]),
            env: BTreeMap::from([
                ("A".to_owned(), "1".to_owned()),
                ("B".to_owned(), "two".to_owned()),
            ]),
            mounts: vec![berth_core::runtime::Mount {
                volume: "p-dom-db-data".to_owned(),
                path: "/var/lib/db".to_owned(),
            }],
            nano_cpus: 500_000_000,
            memory_bytes: 256 * 1024 * 1024,
            network: "p-dom".to_owned(),
            aliases: vec!["db".to_owned(), "db.dom".to_owned()],
            labels: BTreeMap::from([
                (LABEL_MANAGED.to_owned(), "1".to_owned()),
                (LABEL_INSTANCE.to_owned(), "i-1".to_owned()),
            ]),
            stop_timeout: Duration::from_secs(7),
        }
    }

    fn container(spec: &ServiceSpec) -> &TaskSpecContainerSpec {
        spec.task_template
            .as_ref()
            .and_then(|t| t.container_spec.as_ref())
            .expect("a container spec")
    }

    #[test]
    fn service_spec_is_named_for_the_plan_and_runs_its_pinned_image() {
        let spec = service_spec(&plan(), "node-1");
        assert_eq!(spec.name.as_deref(), Some("p-dom-db"));
        assert_eq!(
            container(&spec).image.as_deref(),
            Some("registry.test/db@sha256:abc")
        );
    }

    #[test]
    fn service_spec_starts_with_zero_replicas() {
        let spec = service_spec(&plan(), "node-1");
        assert_eq!(replicas(&spec), 0);
        assert_eq!(
            spec.mode.as_ref().and_then(|m| m.global.as_ref()),
            None,
            "replicated, not global"
        );
    }

    #[test]
    fn service_spec_carries_the_plan_labels_on_the_service_and_its_containers() {
        let spec = service_spec(&plan(), "node-1");
        let want: HashMap<String, String> = plan().labels.into_iter().collect();
        assert_eq!(spec.labels.as_ref(), Some(&want));
        assert_eq!(container(&spec).labels.as_ref(), Some(&want));
    }

    #[test]
    fn service_spec_hardening_init_no_capability_no_port_dnsrr() {
        let spec = service_spec(&plan(), "node-1");
        let c = container(&spec);
        assert_eq!(c.init, Some(true));
        assert_eq!(c.capability_add, None);
        assert_eq!(c.privileges, None);
        let endpoint = spec.endpoint_spec.as_ref().expect("an endpoint spec");
        assert_eq!(endpoint.mode, Some(EndpointSpecModeEnum::DNSRR));
        assert_eq!(endpoint.ports, None);
    }

    #[test]
    fn service_spec_restart_policy_is_none_so_berth_restarts() {
        let spec = service_spec(&plan(), "node-1");
        let policy = spec
            .task_template
            .as_ref()
            .and_then(|t| t.restart_policy.as_ref())
            .expect("a restart policy");
        assert_eq!(
            policy.condition,
            Some(TaskSpecRestartPolicyConditionEnum::NONE)
        );
    }

    #[test]
    fn service_spec_command_becomes_args_and_env_is_key_equals_value() {
        let spec = service_spec(&plan(), "node-1");
        let c = container(&spec);
        assert_eq!(
            c.args.as_deref(),
            Some(&["serve".to_owned(), "--fast".to_owned()][..])
        );
        assert_eq!(c.command, None, "the image's entrypoint still runs");
        assert_eq!(
            c.env.as_deref(),
            Some(&["A=1".to_owned(), "B=two".to_owned()][..])
        );
    }

    #[test]
    fn service_spec_without_a_command_keeps_the_image_cmd() {
        let mut plan = plan();
        plan.command = None;
        assert_eq!(container(&service_spec(&plan, "node-1")).args, None);
    }

    #[test]
    fn service_spec_mounts_named_volumes_only() {
        let spec = service_spec(&plan(), "node-1");
        let mounts = container(&spec).mounts.clone().expect("mounts");
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].typ, Some(MountType::VOLUME));
        assert_eq!(mounts[0].source.as_deref(), Some("p-dom-db-data"));
        assert_eq!(mounts[0].target.as_deref(), Some("/var/lib/db"));
    }

    #[test]
    fn service_spec_limits_cpu_and_memory_and_stop_grace_in_nanoseconds() {
        let spec = service_spec(&plan(), "node-1");
        let limits = spec
            .task_template
            .as_ref()
            .and_then(|t| t.resources.as_ref())
            .and_then(|r| r.limits.as_ref())
            .expect("limits");
        assert_eq!(limits.nano_cpus, Some(500_000_000));
        assert_eq!(limits.memory_bytes, Some(256 * 1024 * 1024));
        assert_eq!(limits.pids, None);
        assert_eq!(container(&spec).stop_grace_period, Some(7_000_000_000));
    }

    #[test]
    fn service_spec_attaches_the_plan_network_with_its_aliases() {
        let spec = service_spec(&plan(), "node-1");
        let networks = service_networks(&spec);
        assert_eq!(networks.len(), 1);
        assert_eq!(networks[0].target.as_deref(), Some("p-dom"));
        assert_eq!(
            networks[0].aliases.as_deref(),
            Some(&["db".to_owned(), "db.dom".to_owned()][..])
        );
    }

    #[test]
    fn service_spec_is_placed_by_node_id_and_placed_node_reads_it_back() {
        let spec = service_spec(&plan(), "node-7");
        let constraints = spec
            .task_template
            .as_ref()
            .and_then(|t| t.placement.as_ref())
            .and_then(|p| p.constraints.clone());
        assert_eq!(constraints, Some(vec!["node.id==node-7".to_owned()]));
        assert_eq!(placed_node(&spec).as_deref(), Some("node-7"));
    }

    #[test]
    fn placed_node_is_none_without_a_node_id_constraint() {
        assert_eq!(placed_node(&ServiceSpec::default()), None);
        let mut spec = service_spec(&plan(), "node-1");
        if let Some(p) = spec
            .task_template
            .as_mut()
            .and_then(|t| t.placement.as_mut())
        {
            p.constraints = Some(vec!["node.role==manager".to_owned()]);
        }
        assert_eq!(placed_node(&spec), None);
    }

    #[test]
    fn replicas_is_zero_for_a_spec_without_a_mode_and_set_replicas_sets_it() {
        let mut spec = ServiceSpec::default();
        assert_eq!(replicas(&spec), 0);
        set_replicas(&mut spec, 1);
        assert_eq!(replicas(&spec), 1);
        set_replicas(&mut spec, 0);
        assert_eq!(replicas(&spec), 0);
    }

    #[test]
    fn force_update_counts_up_from_none() {
        let mut spec = ServiceSpec::default();
        force_update(&mut spec);
        force_update(&mut spec);
        assert_eq!(spec.task_template.and_then(|t| t.force_update), Some(2));
    }

    #[test]
    fn attach_network_adds_by_id_and_replaces_an_attachment_by_name_or_id() {
        let mut spec = service_spec(&plan(), "node-1");
        attach_network(&mut spec, "p-view", "id-view", &["db".to_owned()]);
        attach_network(&mut spec, "p-view", "id-view", &["db2".to_owned()]);
        let networks = service_networks(&spec);
        let targets: Vec<_> = networks.iter().map(|n| n.target.clone()).collect();
        assert_eq!(
            targets,
            vec![Some("p-dom".to_owned()), Some("id-view".to_owned())]
        );
        assert_eq!(networks[1].aliases, Some(vec!["db2".to_owned()]));
        // The plan's network is named by name in the spec: attaching it by id replaces it.
        attach_network(&mut spec, "p-dom", "id-dom", &["x".to_owned()]);
        let targets: Vec<_> = service_networks(&spec)
            .into_iter()
            .map(|n| n.target)
            .collect();
        assert_eq!(
            targets,
            vec![Some("id-view".to_owned()), Some("id-dom".to_owned())]
        );
    }

    #[test]
    fn detach_network_removes_by_name_or_id_and_leaves_the_others() {
        let mut spec = service_spec(&plan(), "node-1");
        attach_network(&mut spec, "p-view", "id-view", &[]);
        detach_network(&mut spec, "p-dom", "id-dom");
        detach_network(&mut spec, "other", "id-view");
        assert!(service_networks(&spec).is_empty());
        let mut empty = ServiceSpec::default();
        detach_network(&mut empty, "p-dom", "id-dom");
        assert_eq!(
            empty.task_template, None,
            "nothing added to a spec without networks"
        );
    }
}
