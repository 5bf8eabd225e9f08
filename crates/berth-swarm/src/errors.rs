//! What the engine's errors say (a status, an update that lost a race), the refusal every
//! layer gives for a node berth has no engine for, and how a wait's bound is written.

use std::time::Duration;

use berth_core::runtime::RuntimeError;

/// An instance placed on a node berth has no engine for.
pub(crate) fn no_engine(node: &str) -> RuntimeError {
    RuntimeError::Foreign(format!(
        "the instance is placed on swarm node {node}, and berth has no address for that node's \
         engine: give it with --swarm-node-engine {node}=<engine address> (docs/swarm.md); \
         berth does not move an instance away from the node its volumes are on"
    ))
}

pub(crate) fn humanise(d: Duration) -> String {
    format!("{} s", d.as_secs())
}

pub(crate) fn is_status(err: &bollard::errors::Error, status: u16) -> bool {
    matches!(err, bollard::errors::Error::DockerResponseServerError { status_code, .. } if *status_code == status)
}

pub(crate) fn is_out_of_sequence(err: &bollard::errors::Error) -> bool {
    matches!(err, bollard::errors::Error::DockerResponseServerError { message, .. } if message.contains("out of sequence"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(status_code: u16, message: &str) -> bollard::errors::Error {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message: message.to_owned(),
        }
    }

    #[test]
    fn is_status_matches_only_the_engine_answer_of_that_status() {
        assert!(is_status(&server_error(404, "no such service"), 404));
        assert!(!is_status(&server_error(409, "conflict"), 404));
        assert!(!is_status(
            &bollard::errors::Error::RequestTimeoutError,
            404
        ));
    }

    #[test]
    fn is_out_of_sequence_spots_an_update_that_lost_the_version_race() {
        assert!(is_out_of_sequence(&server_error(
            500,
            "rpc error: update out of sequence"
        )));
        assert!(!is_out_of_sequence(&server_error(500, "something else")));
    }

    #[test]
    fn no_engine_is_foreign_and_names_the_node_and_the_flag() {
        let RuntimeError::Foreign(why) = no_engine("n1") else {
            panic!("not Foreign");
        };
        assert!(why.contains("swarm node n1"));
        assert!(why.contains("--swarm-node-engine n1=<engine address>"));
    }

    #[test]
    fn humanise_writes_whole_seconds() {
        assert_eq!(humanise(Duration::from_millis(12_900)), "12 s");
    }
}
