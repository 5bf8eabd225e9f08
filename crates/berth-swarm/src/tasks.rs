//! A service's tasks as core sees them: which task is current, whether it runs or ended, and
//! what a service, its current task and that task's container become as [`ContainerFacts`].
//! Pure: the engine's answers come in as arguments.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use berth_core::runtime::ContainerFacts;
use bollard::models::{Service, Task, TaskState};

pub(crate) fn task_state(task: &Task) -> Option<TaskState> {
    task.status.as_ref().and_then(|s| s.state)
}

pub(crate) fn task_container(task: &Task) -> Option<String> {
    task.status
        .as_ref()
        .and_then(|s| s.container_status.as_ref())
        .and_then(|c| c.container_id.clone())
        .filter(|id| !id.is_empty())
}

/// A task that will not run again.
pub(crate) fn is_final(state: Option<TaskState>) -> bool {
    matches!(
        state,
        Some(
            TaskState::COMPLETE
                | TaskState::SHUTDOWN
                | TaskState::FAILED
                | TaskState::REJECTED
                | TaskState::REMOVE
                | TaskState::ORPHANED
        )
    )
}

/// A task whose node's agent has reached the making of its container (or gone past it): from
/// then on the container may be there before the manager has heard which one it is.
pub(crate) fn container_made(task: &Task) -> bool {
    matches!(
        task_state(task),
        Some(TaskState::PREPARING | TaskState::READY | TaskState::STARTING | TaskState::RUNNING)
    )
}

/// A task the swarm wants running and that has not ended.
pub(crate) fn wants_running(task: &Task) -> bool {
    task.desired_state == Some(TaskState::RUNNING) && !is_final(task_state(task))
}

/// The task core is told about: the newest one the swarm wants running, else the newest.
pub(crate) fn current_task<'a>(tasks: &[&'a Task]) -> Option<&'a Task> {
    let newest = |t: &&&Task| t.version.as_ref().and_then(|v| v.index).unwrap_or_default();
    tasks
        .iter()
        .filter(|t| t.desired_state == Some(TaskState::RUNNING))
        .max_by_key(newest)
        .or_else(|| tasks.iter().max_by_key(newest))
        .copied()
}

/// The newest task the swarm wants running, the one a start waits for.
pub(crate) fn wanted_task(tasks: &[Task]) -> Option<&Task> {
    tasks
        .iter()
        .filter(|t| t.desired_state == Some(TaskState::RUNNING))
        .max_by_key(|t| t.version.as_ref().and_then(|v| v.index).unwrap_or_default())
}

/// The task whose container an engine event says started (`start`, with the swarm's task id
/// among the container's labels), if it says that.
pub(crate) fn started_task(event: &bollard::models::EventMessage) -> Option<&str> {
    if event.action.as_deref() != Some("start") {
        return None;
    }
    event
        .actor
        .as_ref()?
        .attributes
        .as_ref()?
        .get("com.docker.swarm.task.id")
        .map(String::as_str)
}

/// Why a task that ended before it ran did: the engine's error, else the swarm's message.
pub(crate) fn start_failure(task: &Task) -> String {
    let status = task.status.clone().unwrap_or_default();
    status
        .err
        .filter(|e| !e.is_empty())
        .or(status.message)
        .unwrap_or_else(|| "no reason given".to_owned())
}

/// The service's slot is empty: every task is one the swarm shut down and that ended (the
/// history it keeps), so a start makes a new one.
pub(crate) fn slot_empty(tasks: &[Task]) -> bool {
    tasks
        .iter()
        .all(|t| t.desired_state == Some(TaskState::SHUTDOWN) && is_final(task_state(t)))
}

/// What core sees of a service before its task: its id, name, labels, image and networks
/// (`networks`: each attachment's network name with its aliases).
pub(crate) fn service_facts(
    service: &Service,
    networks: BTreeMap<String, Vec<String>>,
) -> ContainerFacts {
    let spec = service.spec.clone().unwrap_or_default();
    let name = spec.name.clone().unwrap_or_default();
    ContainerFacts {
        id: service.id.clone().unwrap_or_default(),
        name,
        labels: spec
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        networks,
        config_image: spec
            .task_template
            .as_ref()
            .and_then(|t| t.container_spec.as_ref())
            .and_then(|c| c.image.clone())
            .unwrap_or_default(),
        ..ContainerFacts::default()
    }
}

/// What the service's current task adds to its facts: `local` is the task's container as its
/// node's engine reports it (`None` when there is none or the engine does not answer),
/// `on_manager` whether the task is on the manager's node, `gateways` each container's address
/// on the manager's gateway bridge.
pub(crate) fn with_task(
    facts: &mut ContainerFacts,
    task: &Task,
    local: Option<ContainerFacts>,
    on_manager: bool,
    gateways: &HashMap<String, IpAddr>,
) {
    let state = task_state(task);
    // Running as soon as its container runs on its node's engine, which is before the
    // node's agent has told the manager so.
    facts.running = task.desired_state == Some(TaskState::RUNNING)
        && !is_final(state)
        && local.as_ref().is_some_and(|c| c.running);
    if let Some(local) = local {
        facts.started_at = local.started_at;
        facts.finished_at = local.finished_at;
        facts.exit_code = local.exit_code;
        facts.image_id = local.image_id;
        facts.config_image = local.config_image;
        // Only this machine's gateway bridge is reachable from it.
        if facts.running
            && on_manager
            && let Some(ip) = gateways.get(&local.id)
        {
            for network in facts.networks.keys() {
                facts.addresses.insert(network.clone(), *ip);
            }
        }
    } else if is_final(state) {
        facts.exit_code = task
            .status
            .as_ref()
            .and_then(|s| s.container_status.as_ref())
            .and_then(|c| c.exit_code);
    }
}

#[cfg(test)]
mod tests {
    use bollard::models::{
        ContainerStatus, ObjectVersion, ServiceSpec, TaskSpec, TaskSpecContainerSpec, TaskStatus,
    };

    use super::*;

    fn task(version: u64, desired: TaskState, state: TaskState) -> Task {
        Task {
            id: Some(format!("t{version}")),
            version: Some(ObjectVersion {
                index: Some(version),
            }),
            desired_state: Some(desired),
            status: Some(TaskStatus {
                state: Some(state),
                container_status: Some(ContainerStatus {
                    container_id: Some(format!("c{version}")),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn with_exit(mut task: Task, code: i64) -> Task {
        if let Some(c) = task
            .status
            .as_mut()
            .and_then(|s| s.container_status.as_mut())
        {
            c.exit_code = Some(code);
        }
        task
    }

    fn service() -> Service {
        Service {
            id: Some("svc-id".to_owned()),
            spec: Some(ServiceSpec {
                name: Some("p-dom-db".to_owned()),
                labels: Some(HashMap::from([("berth.key".to_owned(), "db".to_owned())])),
                task_template: Some(TaskSpec {
                    container_spec: Some(TaskSpecContainerSpec {
                        image: Some("db@sha256:abc".to_owned()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn networks() -> BTreeMap<String, Vec<String>> {
        BTreeMap::from([
            ("p-dom".to_owned(), vec!["db".to_owned()]),
            ("p-view".to_owned(), vec![]),
        ])
    }

    fn local(running: bool) -> ContainerFacts {
        ContainerFacts {
            id: "c2".to_owned(),
            running,
            started_at: Some("2024-01-01T00:00:00Z".to_owned()),
            finished_at: None,
            exit_code: None,
            image_id: "sha256:img".to_owned(),
            config_image: "db@sha256:abc-local".to_owned(),
            ..Default::default()
        }
    }

    #[test]
    fn is_final_for_every_ended_state_and_not_for_live_ones() {
        for state in [
            TaskState::COMPLETE,
            TaskState::SHUTDOWN,
            TaskState::FAILED,
            TaskState::REJECTED,
            TaskState::REMOVE,
            TaskState::ORPHANED,
        ] {
            assert!(is_final(Some(state)), "{state}");
        }
        for state in [
            TaskState::NEW,
            TaskState::PENDING,
            TaskState::ASSIGNED,
            TaskState::PREPARING,
            TaskState::STARTING,
            TaskState::RUNNING,
        ] {
            assert!(!is_final(Some(state)), "{state}");
        }
        assert!(!is_final(None));
    }

    #[test]
    fn task_container_is_none_for_an_empty_id() {
        let mut t = task(1, TaskState::RUNNING, TaskState::PENDING);
        assert_eq!(task_container(&t).as_deref(), Some("c1"));
        if let Some(c) = t.status.as_mut().and_then(|s| s.container_status.as_mut()) {
            c.container_id = Some(String::new());
        }
        assert_eq!(task_container(&t), None);
    }

    #[test]
    fn current_task_prefers_the_newest_wanted_running_over_a_newer_shut_down_one() {
        let old = task(1, TaskState::RUNNING, TaskState::RUNNING);
        let wanted = task(2, TaskState::RUNNING, TaskState::STARTING);
        let leaving = task(3, TaskState::SHUTDOWN, TaskState::SHUTDOWN);
        let found = current_task(&[&old, &leaving, &wanted]).expect("a task");
        assert_eq!(found.id.as_deref(), Some("t2"));
    }

    #[test]
    fn current_task_falls_back_to_the_newest_when_none_is_wanted_running() {
        let a = task(4, TaskState::SHUTDOWN, TaskState::COMPLETE);
        let b = task(9, TaskState::SHUTDOWN, TaskState::FAILED);
        assert_eq!(
            current_task(&[&b, &a]).and_then(|t| t.id.as_deref()),
            Some("t9")
        );
        assert!(current_task(&[]).is_none());
    }

    #[test]
    fn a_start_event_names_its_task_and_no_other_event_does() {
        use bollard::models::{EventActor, EventMessage};
        let event = |action: &str, task: Option<&str>| EventMessage {
            action: Some(action.to_owned()),
            actor: Some(EventActor {
                id: Some("c1".to_owned()),
                attributes: Some(
                    task.map(|t| ("com.docker.swarm.task.id".to_owned(), t.to_owned()))
                        .into_iter()
                        .collect(),
                ),
            }),
            ..Default::default()
        };
        assert_eq!(started_task(&event("start", Some("t2"))), Some("t2"));
        assert_eq!(started_task(&event("create", Some("t2"))), None);
        assert_eq!(started_task(&event("start", None)), None);
        assert_eq!(started_task(&EventMessage::default()), None);
    }

    #[test]
    fn wanted_task_is_the_newest_wanted_running_and_never_a_shut_down_one() {
        let tasks = [
            task(1, TaskState::RUNNING, TaskState::FAILED),
            task(2, TaskState::RUNNING, TaskState::PENDING),
            task(3, TaskState::SHUTDOWN, TaskState::SHUTDOWN),
        ];
        assert_eq!(
            wanted_task(&tasks).and_then(|t| t.id.as_deref()),
            Some("t2")
        );
        assert!(wanted_task(&tasks[2..]).is_none());
    }

    #[test]
    fn a_container_may_be_made_from_preparing_on_and_not_before() {
        for state in [
            TaskState::PREPARING,
            TaskState::READY,
            TaskState::STARTING,
            TaskState::RUNNING,
        ] {
            assert!(
                container_made(&task(1, TaskState::RUNNING, state)),
                "{state}"
            );
        }
        for state in [
            TaskState::NEW,
            TaskState::PENDING,
            TaskState::ASSIGNED,
            TaskState::FAILED,
            TaskState::SHUTDOWN,
        ] {
            assert!(
                !container_made(&task(1, TaskState::RUNNING, state)),
                "{state}"
            );
        }
    }

    #[test]
    fn wants_running_only_when_wanted_running_and_not_ended() {
        assert!(wants_running(&task(
            1,
            TaskState::RUNNING,
            TaskState::STARTING
        )));
        assert!(!wants_running(&task(
            1,
            TaskState::RUNNING,
            TaskState::FAILED
        )));
        assert!(!wants_running(&task(
            1,
            TaskState::SHUTDOWN,
            TaskState::RUNNING
        )));
    }

    #[test]
    fn slot_empty_only_when_every_task_is_shut_down_and_ended() {
        assert!(slot_empty(&[]));
        assert!(slot_empty(&[
            task(1, TaskState::SHUTDOWN, TaskState::COMPLETE),
            task(2, TaskState::SHUTDOWN, TaskState::SHUTDOWN),
        ]));
        // Told to shut down but its container still runs.
        assert!(!slot_empty(&[task(
            3,
            TaskState::SHUTDOWN,
            TaskState::RUNNING
        )]));
        assert!(!slot_empty(&[task(
            4,
            TaskState::RUNNING,
            TaskState::FAILED
        )]));
    }

    #[test]
    fn start_failure_prefers_the_error_then_the_message() {
        let mut t = task(1, TaskState::RUNNING, TaskState::REJECTED);
        assert_eq!(start_failure(&t), "no reason given");
        if let Some(s) = t.status.as_mut() {
            s.message = Some("preparing".to_owned());
            s.err = Some(String::new());
        }
        assert_eq!(start_failure(&t), "preparing");
        if let Some(s) = t.status.as_mut() {
            s.err = Some("No such image".to_owned());
        }
        assert_eq!(start_failure(&t), "No such image");
    }

    #[test]
    fn service_facts_carry_the_service_id_name_labels_image_and_networks() {
        let facts = service_facts(&service(), networks());
        assert_eq!(facts.id, "svc-id");
        assert_eq!(facts.name, "p-dom-db");
        assert_eq!(
            facts.labels.get("berth.key").map(String::as_str),
            Some("db")
        );
        assert_eq!(facts.config_image, "db@sha256:abc");
        assert_eq!(facts.networks, networks());
        assert!(!facts.running);
        assert!(facts.addresses.is_empty());
    }

    #[test]
    fn with_task_running_on_the_manager_reports_the_gateway_address_on_every_network() {
        let mut facts = service_facts(&service(), networks());
        let ip: IpAddr = "172.18.0.5".parse().expect("an address");
        let gateways = HashMap::from([("c2".to_owned(), ip)]);
        let t = task(2, TaskState::RUNNING, TaskState::RUNNING);
        with_task(&mut facts, &t, Some(local(true)), true, &gateways);
        assert!(facts.running);
        assert_eq!(facts.started_at.as_deref(), Some("2024-01-01T00:00:00Z"));
        assert_eq!(facts.image_id, "sha256:img");
        assert_eq!(facts.config_image, "db@sha256:abc-local");
        assert_eq!(
            facts.addresses,
            BTreeMap::from([("p-dom".to_owned(), ip), ("p-view".to_owned(), ip)])
        );
    }

    #[test]
    fn with_task_running_before_the_manager_hears_so_counts_as_running() {
        let mut facts = service_facts(&service(), networks());
        let t = task(2, TaskState::RUNNING, TaskState::STARTING);
        with_task(&mut facts, &t, Some(local(true)), true, &HashMap::new());
        assert!(facts.running);
        assert!(facts.addresses.is_empty(), "no gateway address known");
    }

    #[test]
    fn with_task_on_another_node_has_no_address() {
        let mut facts = service_facts(&service(), networks());
        let ip: IpAddr = "172.18.0.5".parse().expect("an address");
        let gateways = HashMap::from([("c2".to_owned(), ip)]);
        let t = task(2, TaskState::RUNNING, TaskState::RUNNING);
        with_task(&mut facts, &t, Some(local(true)), false, &gateways);
        assert!(facts.running);
        assert!(facts.addresses.is_empty());
    }

    #[test]
    fn with_task_is_not_running_without_a_container_the_engine_reports_running() {
        let t = task(2, TaskState::RUNNING, TaskState::RUNNING);
        let mut facts = service_facts(&service(), networks());
        with_task(&mut facts, &t, None, true, &HashMap::new());
        assert!(!facts.running, "no container on its node's engine");
        let mut facts = service_facts(&service(), networks());
        with_task(&mut facts, &t, Some(local(false)), true, &HashMap::new());
        assert!(!facts.running, "its container does not run");
    }

    #[test]
    fn with_task_shut_down_is_not_running_even_while_its_container_runs() {
        let t = task(2, TaskState::SHUTDOWN, TaskState::RUNNING);
        let mut facts = service_facts(&service(), networks());
        with_task(&mut facts, &t, Some(local(true)), true, &HashMap::new());
        assert!(!facts.running);
        assert!(facts.addresses.is_empty());
    }

    #[test]
    fn with_task_ended_without_a_container_takes_the_swarm_exit_code() {
        let t = with_exit(task(2, TaskState::RUNNING, TaskState::FAILED), 3);
        let mut facts = service_facts(&service(), networks());
        with_task(&mut facts, &t, None, true, &HashMap::new());
        assert!(!facts.running);
        assert_eq!(facts.exit_code, Some(3));
        assert_eq!(facts.config_image, "db@sha256:abc", "the spec's image");
    }

    #[test]
    fn with_task_still_pending_without_a_container_has_no_exit_code() {
        let t = with_exit(task(2, TaskState::RUNNING, TaskState::PENDING), 3);
        let mut facts = service_facts(&service(), networks());
        with_task(&mut facts, &t, None, true, &HashMap::new());
        assert_eq!(facts.exit_code, None);
    }

    #[test]
    fn with_task_prefers_the_local_container_exit_code() {
        let t = with_exit(task(2, TaskState::RUNNING, TaskState::FAILED), 3);
        let mut facts = service_facts(&service(), networks());
        let mut ended = local(false);
        ended.exit_code = Some(137);
        with_task(&mut facts, &t, Some(ended), true, &HashMap::new());
        assert_eq!(facts.exit_code, Some(137));
    }
}
