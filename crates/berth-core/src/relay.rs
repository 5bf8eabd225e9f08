//! The relay a host endpoint hands each proxied connection to, once its upstream is open: a trait
//! core owns, as it owns the runtime's, so how bytes move (a thread per connection, splice(2),
//! the system calls that needs) lives in its own crate (berth-relay, adapted by the binary) and
//! core holds none of it. [`CopyRelay`], tokio's copy both ways, is the default and what core's
//! own tests run on.

use std::fmt::Debug;
use std::future::Future;
use std::io;
use std::pin::Pin;

use tokio::net::TcpStream;

/// What a finished connection moved each way, and whether every byte went through the kernel
/// without a copy through user space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Relayed {
    pub to_upstream: u64,
    pub to_client: u64,
    pub spliced: bool,
}

/// What a relay answers once both sides of a connection have closed.
pub type Relaying = Pin<Box<dyn Future<Output = io::Result<Relayed>> + Send>>;

/// Moves a proxied connection's bytes both ways until both sides have closed. A side that closes
/// its sending half has that half closed on the other side too; an error on either direction ends
/// both. Every descriptor of the connection is closed before the answer.
pub trait Relay: Send + Sync + Debug + 'static {
    fn relay(&self, client: TcpStream, upstream: TcpStream) -> Relaying;
}

/// Copies through tokio's buffers (`copy_bidirectional`), on the runtime's workers.
#[derive(Clone, Copy, Debug, Default)]
pub struct CopyRelay;

impl Relay for CopyRelay {
    fn relay(&self, mut client: TcpStream, mut upstream: TcpStream) -> Relaying {
        Box::pin(async move {
            let (to_upstream, to_client) =
                tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
            Ok(Relayed {
                to_upstream,
                to_client,
                spliced: false,
            })
        })
    }
}
