//! Host endpoints: every service port of an instance (its tcp ready port and its image's exposed
//! tcp ports) gets a loopback port on the host, allocated once and kept for the instance's life,
//! across stops, spec changes and daemon restarts, and past it: the ports of an archived
//! instance are remembered for its key's lineage (the key without its generation suffix), and
//! the next generation, or a branch made under it, listens on them again unless something else
//! holds one by then (it then gets another, logged and shown as `previousHostPort`). A port the
//! kernel picks for a new endpoint is passed over while another name keeps it.
//!
//! berth listens on that port itself and proxies each connection to the container, rather than
//! publishing the port through Docker, so that the endpoint exists while the instance is stopped:
//! a connection to an idle-stopped or not-yet-started instance wakes it (a `use`, which leaves a
//! person's stop standing), is held until the instance is ready, and is then proxied. An open
//! proxied connection counts as a live executor reaching the instance, so idle stop never cuts a
//! connection in use.
//!
//! An endpoint is advertised (in [`EndpointController::endpoints_of`]) only while berth listens on its
//! port. A stored port that cannot be bound at start (another program holds it: an old daemon
//! still draining, or anyone else) is left out and bound again with back-off until it is free,
//! so no client is ever sent to a port that something other than berth holds.
//!
//! A connection is taken only while enough descriptors stay free for the API and the engine
//! (`admission`): one over that is closed at once, and the burst it belongs to logged once.

mod admission;
mod controller;

pub use controller::*;
