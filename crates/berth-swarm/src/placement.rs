//! Which swarm node an instance is placed on, and whether that node can take its task now.
//! Pure: the swarm's nodes come in as arguments.

use berth_core::runtime::RuntimeError;
use bollard::models::{Node, NodeSpecAvailabilityEnum, NodeState};

/// The id of the node `wanted` names among `nodes`: a node's id, else the host name of exactly
/// one node. `key` is the instance key of the `--swarm-place` entry, for the refusal.
pub(crate) fn pick_node(key: &str, wanted: &str, nodes: &[Node]) -> Result<String, RuntimeError> {
    if let Some(id) = nodes
        .iter()
        .filter_map(|n| n.id.as_deref())
        .find(|id| *id == wanted)
    {
        return Ok(id.to_owned());
    }
    let named: Vec<&str> = nodes
        .iter()
        .filter(|n| n.description.as_ref().and_then(|d| d.hostname.as_deref()) == Some(wanted))
        .filter_map(|n| n.id.as_deref())
        .collect();
    match named.as_slice() {
        [one] => Ok((*one).to_owned()),
        [] => Err(RuntimeError::Foreign(format!(
            "--swarm-place {key}={wanted}: no node of this swarm has that id or host name \
             (`docker node ls` lists them)"
        ))),
        many => Err(RuntimeError::Foreign(format!(
            "--swarm-place {key}={wanted}: {} nodes have that host name; name the node by \
             its id (`docker node ls`)",
            many.len()
        ))),
    }
}

/// Why `what` (placed on `node`) cannot run there: the node is no longer in the swarm.
pub(crate) fn node_gone(what: &str, node: &str) -> String {
    format!(
        "{what} is placed on swarm node {node}, which is no longer in the swarm; its \
         volumes were there, and berth does not move an instance away from them: \
         archive it and up it again to start it empty on another node"
    )
}

/// Why `what` (placed on `node`, which the swarm describes as `found`) cannot run there now:
/// the node drained, paused or down, in a sentence that names it; `None` when the node is
/// ready and active.
pub(crate) fn node_unfit_reason(what: &str, node: &str, found: &Node) -> Option<String> {
    let host = found
        .description
        .as_ref()
        .and_then(|d| d.hostname.clone())
        .unwrap_or_default();
    let availability = found
        .spec
        .as_ref()
        .and_then(|s| s.availability)
        .unwrap_or(NodeSpecAvailabilityEnum::ACTIVE);
    let state = found
        .status
        .as_ref()
        .and_then(|s| s.state)
        .unwrap_or(NodeState::UNKNOWN);
    let why = if availability != NodeSpecAvailabilityEnum::ACTIVE {
        format!(
            "is {availability} (`docker node update --availability active {node}` makes it \
             take tasks again)"
        )
    } else if state != NodeState::READY {
        format!("is {state} (its engine or machine is not answering the swarm)")
    } else {
        return None;
    };
    Some(format!(
        "{what} is placed on swarm node {node} ({host}), which {why}; the instance's volumes \
         are on that node, and berth does not move it away from them"
    ))
}

#[cfg(test)]
mod tests {
    use bollard::models::{NodeDescription, NodeSpec, NodeStatus};

    use super::*;

    fn node(id: &str, host: &str) -> Node {
        Node {
            id: Some(id.to_owned()),
            description: Some(NodeDescription {
                hostname: Some(host.to_owned()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn with_state(
        mut n: Node,
        availability: Option<NodeSpecAvailabilityEnum>,
        state: Option<NodeState>,
    ) -> Node {
        n.spec = Some(NodeSpec {
            availability,
            ..Default::default()
        });
        n.status = Some(NodeStatus {
            state,
            ..Default::default()
        });
        n
    }

    fn foreign(result: Result<String, RuntimeError>) -> String {
        match result {
            Err(RuntimeError::Foreign(why)) => why,
            other => panic!("not Foreign: {other:?}"),
        }
    }

    #[test]
    fn pick_node_by_id_first_even_when_a_host_has_that_name() {
        let nodes = [node("abc", "one"), node("def", "abc")];
        assert_eq!(pick_node("db", "abc", &nodes).ok().as_deref(), Some("abc"));
    }

    #[test]
    fn pick_node_by_a_host_name_one_node_has() {
        let nodes = [node("abc", "one"), node("def", "two")];
        assert_eq!(pick_node("db", "two", &nodes).ok().as_deref(), Some("def"));
    }

    #[test]
    fn pick_node_refuses_a_name_no_node_has() {
        let why = foreign(pick_node("db", "three", &[node("abc", "one")]));
        assert_eq!(
            why,
            "--swarm-place db=three: no node of this swarm has that id or host name \
             (`docker node ls` lists them)"
        );
    }

    #[test]
    fn pick_node_refuses_a_host_name_several_nodes_have() {
        let nodes = [node("abc", "twin"), node("def", "twin")];
        let why = foreign(pick_node("db", "twin", &nodes));
        assert!(why.starts_with("--swarm-place db=twin: 2 nodes have that host name"));
    }

    #[test]
    fn node_unfit_reason_is_none_for_a_ready_active_node() {
        let n = with_state(
            node("abc", "one"),
            Some(NodeSpecAvailabilityEnum::ACTIVE),
            Some(NodeState::READY),
        );
        assert_eq!(node_unfit_reason("service s", "abc", &n), None);
    }

    #[test]
    fn node_unfit_reason_active_when_the_spec_says_nothing_of_availability() {
        let n = with_state(node("abc", "one"), None, Some(NodeState::READY));
        assert_eq!(node_unfit_reason("service s", "abc", &n), None);
    }

    #[test]
    fn node_unfit_reason_names_a_drained_node_and_how_to_activate_it() {
        let n = with_state(
            node("abc", "one"),
            Some(NodeSpecAvailabilityEnum::DRAIN),
            Some(NodeState::READY),
        );
        assert_eq!(
            node_unfit_reason("service s", "abc", &n).as_deref(),
            Some(
                "service s is placed on swarm node abc (one), which is drain \
                 (`docker node update --availability active abc` makes it take tasks again); \
                 the instance's volumes are on that node, and berth does not move it away \
                 from them"
            )
        );
    }

    #[test]
    fn node_unfit_reason_availability_is_told_before_state() {
        let n = with_state(
            node("abc", "one"),
            Some(NodeSpecAvailabilityEnum::PAUSE),
            Some(NodeState::DOWN),
        );
        let why = node_unfit_reason("volume v", "abc", &n).expect("unfit");
        assert!(why.contains("which is pause ("), "{why}");
    }

    #[test]
    fn node_unfit_reason_names_a_down_node() {
        let n = with_state(
            node("abc", "one"),
            Some(NodeSpecAvailabilityEnum::ACTIVE),
            Some(NodeState::DOWN),
        );
        let why = node_unfit_reason("volume v", "abc", &n).expect("unfit");
        assert!(
            why.starts_with(
                "volume v is placed on swarm node abc (one), which is down (its engine or \
                 machine is not answering the swarm)"
            ),
            "{why}"
        );
    }

    #[test]
    fn node_unfit_reason_a_node_with_no_status_is_unknown_so_unfit() {
        let n = node("abc", "one");
        let why = node_unfit_reason("service s", "abc", &n).expect("unfit");
        assert!(why.contains("which is unknown ("), "{why}");
    }

    #[test]
    fn node_gone_says_it_left_the_swarm_and_what_to_do() {
        let why = node_gone("service s", "abc");
        assert!(
            why.starts_with(
                "service s is placed on swarm node abc, which is no longer in the swarm"
            )
        );
        assert!(why.ends_with("archive it and up it again to start it empty on another node"));
    }
}
