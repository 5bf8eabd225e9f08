//! Consent labels: how a host container says it may be one key's workspace's executor. Pure
//! values; the workspace routes and the view controller both read them.

use crate::runtime::Labels;

/// The label by which a container consents to be one workspace's executor:
/// `berth.workspace=<keyId>/<workspaceId>`.
pub const LABEL_WORKSPACE: &str = "berth.workspace";

/// A key's public id: the first 12 hex digits of sha256 over a string that only this use
/// makes, of the key's hash. It names the key in consent labels and is no secret: it does
/// not reveal the key, nor the hash that owns the key's domains.
pub fn key_id(owner: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("berth key id v1\n{owner}").as_bytes());
    hex::encode(&digest[..6])
}

/// The value of [`LABEL_WORKSPACE`] that consents to `owner`'s workspace `id`.
pub fn consent_value(owner: &str, id: &str) -> String {
    format!("{}/{id}", key_id(owner))
}

/// The whole consent label, `berth.workspace=<keyId>/<id>`, as `docker run --label` takes it.
pub fn consent_label(owner: &str, id: &str) -> String {
    format!("{LABEL_WORKSPACE}={}", consent_value(owner, id))
}

/// Whether a container with `labels` consents to be an executor of `owner`'s workspace `id`.
pub fn consents(labels: &Labels, owner: &str, id: &str) -> bool {
    labels.get(LABEL_WORKSPACE).map(String::as_str) == Some(consent_value(owner, id).as_str())
}
