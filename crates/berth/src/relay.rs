//! berth-relay behind berth-core's relay trait: the host endpoints' connections moved by a thread
//! each, spliced where the kernel allows (`--endpoint-splice`), spinning briefly after moving
//! bytes (`--endpoint-spin`).

use berth_core::relay::{Relay, Relayed, Relaying};
use berth_relay::{Options, Path};
use tokio::net::TcpStream;

/// berth-relay with the daemon's options.
#[derive(Debug)]
pub(crate) struct HostRelay(pub(crate) Options);

impl Relay for HostRelay {
    fn relay(&self, client: TcpStream, upstream: TcpStream) -> Relaying {
        let options = self.0;
        Box::pin(async move {
            let moved = berth_relay::relay(client, upstream, options).await?;
            Ok(Relayed {
                to_upstream: moved.to_upstream.bytes,
                to_client: moved.to_client.bytes,
                spliced: moved.to_upstream.path == Path::Splice
                    && moved.to_client.path == Path::Splice,
            })
        })
    }
}
