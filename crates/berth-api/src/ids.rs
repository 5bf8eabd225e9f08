//! Identifiers: `rin:<uuid>` for instances, `rdm:<uuid>` for resource domains, `snp:<uuid>`
//! for snapshots, `cpy:<uuid>` for copy operations and `pls:<uuid>` for a pool's leases
//! (a workspace's leases are `lea:`: the two are never confused).

use std::fmt;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

macro_rules! prefixed_id {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The prefix every id of this kind starts with.
            pub const PREFIX: &'static str = $prefix;
            /// What a malformed id is refused with.
            pub const EXPECTED: &'static str = concat!("must be ", $what, " (", $prefix, "<uuid>)");

            /// A new random id.
            pub fn new() -> Self {
                Self(format!("{}{}", $prefix, Uuid::new_v4().hyphenated()))
            }

            /// Parses an id: the prefix, then a lower-case hyphenated uuid.
            pub fn parse(text: &str) -> Option<Self> {
                let rest = text.strip_prefix($prefix)?;
                let canonical = rest.len() == 36
                    && rest.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f' | '-'))
                    && Uuid::try_parse(rest).is_ok_and(|u| u.hyphenated().to_string() == rest);
                canonical.then(|| Self(text.to_owned()))
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The uuid's hex digits without hyphens, for Docker object names.
            pub fn hex(&self) -> String {
                self.0[$prefix.len()..].replace('-', "")
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

prefixed_id!(
    /// A resource instance's id.
    InstanceId,
    "rin:",
    "a resource instance id"
);
prefixed_id!(
    /// A resource domain's id.
    DomainId,
    "rdm:",
    "a resource domain id"
);
prefixed_id!(
    /// A snapshot's id.
    SnapshotId,
    "snp:",
    "a snapshot id"
);
prefixed_id!(
    /// A copy operation's id (a snapshot, a branch or a restore).
    CopyId,
    "cpy:",
    "a copy id"
);

prefixed_id!(
    /// A pool lease's id: one instance of a pool, held by the service key that took it.
    PoolLeaseId,
    "pls:",
    "a pool lease id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_refuse_anything_else() {
        let id = InstanceId::new();
        assert_eq!(InstanceId::parse(id.as_str()), Some(id.clone()));
        assert!(id.as_str().starts_with("rin:"));
        for bad in [
            "",
            "rin:",
            "rdm:00000000-0000-0000-0000-000000000000",
            "rin:00000000-0000-0000-0000-00000000000G",
            "rin:00000000-0000-0000-0000-00000000000A",
            "rin:0000000000000000000000000000000000",
            "rin:00000000-0000-0000-0000-000000000000x",
        ] {
            assert_eq!(InstanceId::parse(bad), None, "{bad}");
        }
        assert!(DomainId::parse("rdm:0a1b2c3d-0000-4000-8000-000000000000").is_some());
    }
}
