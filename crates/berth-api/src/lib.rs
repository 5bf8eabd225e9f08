//! berth-api: what crosses berth's wire, defined once for the daemon and its clients.
//!
//! The values of the resource-instance contract: ids (`rdm:`, `rin:`, `snp:`, `cpy:` and a
//! uuid), times (RFC 3339 in milliseconds), digest-pinned image references, the spec with its
//! strict decoder (every problem named by its place, never by its value) and `specDigest`, and
//! the exec frame and result. With the `openapi` feature each type also carries its OpenAPI
//! schema, for the daemon's document.
//!
//! Invariants: pure values, no I/O; nothing here knows of HTTP, the store or an engine. A value
//! that decodes here is one the daemon accepts.

/// `Display` as the wire name (`as_str`), for the enums that have one.
macro_rules! display_as_wire_name {
    ($($t:ty),* $(,)?) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}

pub mod capabilities;
pub mod daemon;
pub mod decode;
pub mod disk;
pub mod domains;
pub mod errors;
pub mod evidence;
pub mod exec;
pub mod ids;
pub mod image;
pub mod instances;
pub mod page;
pub mod pools;
pub mod preflight;
pub mod releases;
pub mod rollouts;
pub mod schema;
pub mod snapshots;
pub mod spec;
pub mod templates;
pub mod time;
pub mod workspaces;
pub mod worktrees;
