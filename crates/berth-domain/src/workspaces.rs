//! Workspaces: a developer's environments that reach instances. Their executors are containers
//! (named, or matched by a label selector) and leases that host tools keep renewing. A workspace
//! links to one domain with one worktree key; its containers then join that key's network view
//! and resolve the aliases of the key's instances and of the domain's shared ones.
//!
//! Workspace ids are per key: key A's `ide-1` and key B's `ide-1` are two workspaces, and
//! nothing B is answered says whether A has one. A host container is an executor only with its
//! owner's consent: the label `berth.workspace=<keyId>/<workspaceId>`, set by whoever created
//! it, naming the key's public id and the workspace. Naming a container, or selecting it by a
//! label, is not enough; a container consents to one workspace, so it is in one view at most.

use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use serde_json::Value;

use crate::decode::{Problems, pattern};
use crate::spec::{WORKTREE_KEY_EXPECTED, is_worktree_key};

/// What a malformed workspace id is refused with.
pub const WORKSPACE_ID_EXPECTED: &str =
    "must be 1 to 128 letters, digits, '.', '_', ':', '@' or '-', starting with a letter or digit";
/// The most containers one workspace names.
pub const MAX_CONTAINERS: usize = 64;
/// The longest lease.
pub const MAX_LEASE_SECONDS: i64 = 86_400;

pub use crate::consent::{LABEL_WORKSPACE, consent_label, consent_value, consents, key_id};

static WORKSPACE_ID: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"));
static CONTAINER_REF: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"));
static LABEL: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}=[^\x00-\x1f\x7f]{0,256}$"));

/// True when `id` is a valid workspace id.
pub fn is_workspace_id(id: &str) -> bool {
    WORKSPACE_ID.is_match(id)
}

/// A decoded `PUT /v1/workspaces/{id}` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceRequest {
    /// Container names or ids.
    pub containers: Vec<String>,
    /// A label `k=v`.
    pub selector: Option<String>,
}

/// Decodes a workspace registration.
pub fn decode_workspace(value: &Value, p: &mut Problems) -> Option<WorkspaceRequest> {
    let mut fields = p.object(value, "body")?;
    let containers = fields.required(p, "containers").and_then(|v| {
        let items = p.array(v, "body.containers")?;
        if items.len() > MAX_CONTAINERS {
            p.push(
                "body.containers",
                &format!("must have at most {MAX_CONTAINERS} items"),
            );
            return None;
        }
        let names: Vec<Option<String>> = items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                p.matching(
                    item,
                    &format!("body.containers[{i}]"),
                    &CONTAINER_REF,
                    "must be a container name or id (letters, digits, '_', '.', '-')",
                )
            })
            .collect();
        names.into_iter().collect::<Option<Vec<_>>>()
    });
    let selector = fields.required(p, "selector").and_then(|v| match v {
        Value::Null => Some(None),
        v => {
            let mut sel = p.object(v, "body.selector")?;
            let label = sel.required(p, "label").and_then(|l| {
                p.matching(
                    l,
                    "body.selector.label",
                    &LABEL,
                    "must be a label `key=value` (a key of letters, digits, '.', '_', '/', '-'; a value of printable characters)",
                )
            });
            sel.finish(p);
            label.map(Some)
        }
    });
    fields.finish(p);
    Some(WorkspaceRequest {
        containers: containers?,
        selector: selector?,
    })
}

/// Decodes a lease request: `{"ttlSeconds": 1..86400}`.
pub fn decode_lease(value: &Value, p: &mut Problems) -> Option<Duration> {
    let mut fields = p.object(value, "body")?;
    let ttl = fields
        .required(p, "ttlSeconds")
        .and_then(|v| p.integer(v, "body.ttlSeconds", 1, MAX_LEASE_SECONDS));
    fields.finish(p);
    Some(Duration::from_secs(ttl? as u64))
}

/// Decodes a link request: `{"worktreeKey": ...}`.
pub fn decode_link(value: &Value, p: &mut Problems) -> Option<String> {
    let mut fields = p.object(value, "body")?;
    let key = fields.required(p, "worktreeKey").and_then(|v| {
        let s = p.string(v, "body.worktreeKey")?;
        if is_worktree_key(s) {
            Some(s.to_owned())
        } else {
            p.push("body.worktreeKey", WORKTREE_KEY_EXPECTED);
            None
        }
    });
    fields.finish(p);
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Labels;
    use serde_json::json;

    fn decode<T>(f: fn(&Value, &mut Problems) -> Option<T>, v: Value) -> Result<T, String> {
        let mut p = Problems::default();
        let out = f(&v, &mut p);
        p.finish(out).map_err(|p| p.joined())
    }

    #[test]
    fn workspace_bodies_are_decoded_strictly() {
        let ok = decode(decode_workspace, json!({"containers": ["dev-1", "0123abcd"], "selector": {"label": "com.example.ws=a b"}})).unwrap();
        assert_eq!(ok.selector.as_deref(), Some("com.example.ws=a b"));
        for (body, expected) in [
            (
                json!({"containers": ["bad name"], "selector": null}),
                "body.containers[0] must be a container name",
            ),
            (
                json!({"containers": [], "selector": {"label": "novalue"}}),
                "body.selector.label must be a label",
            ),
            (
                json!({"containers": [], "selector": {"label": "=x"}}),
                "body.selector.label must be a label",
            ),
            (
                json!({"containers": [], "selector": {"label": "k=v", "x": 1}}),
                "body.selector.x is not an allowed key",
            ),
            (json!({"containers": []}), "body.selector is missing"),
            (
                json!({"containers": (0..65).map(|i| format!("c{i}")).collect::<Vec<_>>(), "selector": null}),
                "at most 64",
            ),
        ] {
            let err = decode(decode_workspace, body).unwrap_err();
            assert!(
                err.contains(expected),
                "{err:?} should contain {expected:?}"
            );
        }
    }

    #[test]
    fn lease_ttls_and_link_keys_are_bounded() {
        assert_eq!(
            decode(decode_lease, json!({"ttlSeconds": 30})).unwrap(),
            Duration::from_secs(30)
        );
        for bad in [
            json!({"ttlSeconds": 0}),
            json!({"ttlSeconds": 86401}),
            json!({"ttlSeconds": "5"}),
        ] {
            assert!(
                decode(decode_lease, bad)
                    .unwrap_err()
                    .contains("body.ttlSeconds must be an integer between 1 and 86400")
            );
        }
        assert_eq!(
            decode(decode_link, json!({"worktreeKey": "feature:x"})).unwrap(),
            "feature:x"
        );
        assert!(
            decode(decode_link, json!({"worktreeKey": "-x"}))
                .unwrap_err()
                .contains("body.worktreeKey must be 1 to 128")
        );
        assert!(is_workspace_id("ws_1.a:b@c-d") && !is_workspace_id("") && !is_workspace_id("a/b"));
    }

    #[test]
    fn consent_names_one_key_and_one_workspace() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let id = key_id(&a);
        assert_eq!(id.len(), 12);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        assert!(
            !a.contains(&id),
            "the public id is not a piece of the key's hash"
        );
        assert_ne!(id, key_id(&b));
        assert_eq!(
            consent_label(&a, "ide-1"),
            format!("berth.workspace={id}/ide-1")
        );
        let labels = |v: &str| Labels::from([(LABEL_WORKSPACE.to_owned(), v.to_owned())]);
        assert!(consents(&labels(&format!("{id}/ide-1")), &a, "ide-1"));
        for other in [
            format!("{}/ide-1", key_id(&b)),
            format!("{id}/ide-2"),
            format!("{id}/ide-1 "),
            "ide-1".to_owned(),
            String::new(),
        ] {
            assert!(!consents(&labels(&other), &a, "ide-1"), "{other:?}");
        }
        assert!(!consents(&Labels::new(), &a, "ide-1"));
    }
}
