//! Readiness probes: one TCP connect, or one command that must exit 0.

use std::time::Duration;

use berth_core::runtime::{ContainerFacts, ExecRequest, RuntimeError};
use berth_core::spec::Ready;
use bollard::Docker;
use tokio::net::TcpStream;

use crate::exec;

/// The longest a TCP probe waits for its connection. An exited container's old address does not
/// refuse but hangs for seconds, so this stays short.
pub(crate) const TCP_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// The most output an exec probe keeps (it is only read for its exit code).
const PROBE_OUTPUT: usize = 4096;

pub(crate) async fn probe(
    docker: &Docker,
    container: &ContainerFacts,
    network: &str,
    ready: &Ready,
    budget: Duration,
) -> Result<bool, RuntimeError> {
    match ready {
        Ready::Tcp { port } => {
            let Some(ip) = container.addresses.get(network) else {
                return Ok(false);
            };
            let wait = budget.min(TCP_CONNECT_TIMEOUT);
            let connected = tokio::time::timeout(wait, TcpStream::connect((*ip, *port))).await;
            Ok(matches!(connected, Ok(Ok(_))))
        }
        Ready::Exec { argv, user } => {
            let request = ExecRequest {
                argv: argv.clone(),
                user: user.clone(),
                timeout: budget,
                max_output: PROBE_OUTPUT,
                cancel: Default::default(),
            };
            let stdin = Box::pin(tokio::io::empty());
            match exec::run(docker, &container.id, request, stdin).await {
                Ok(outcome) => Ok(outcome.exit_code == Some(0)),
                // The container is not running (yet, or any more): not ready.
                Err(RuntimeError::Conflict(_)) => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}
