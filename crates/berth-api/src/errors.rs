//! Error bodies on the wire: every error answers `{"_tag", "message", ...}`.

use serde::{Deserialize, Serialize};

use crate::spec::Refusal;

/// An error body. `_tag` is the error's name; the other fields depend on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// The error's name, e.g. `ResourceInstanceNotFoundError`.
    #[serde(rename = "_tag")]
    pub tag: String,
    /// A sentence for a person.
    pub message: String,
    /// `ResourceInstanceSpecRefusedError`: each refused field with its sentence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusals: Option<Vec<Refusal>>,
    /// `ResourceDomainNotActiveError`: `fenced` or `archived`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `ResourceRuntimeUnsupportedError`: what this berth runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// `ResourceWorkspaceLinkedElsewhereError`: the domain the workspace is linked to.
    #[serde(rename = "resourceDomainId", skip_serializing_if = "Option::is_none")]
    pub resource_domain_id: Option<String>,
    /// `ResourceInstanceReleaseConflictError`: the spec digest the instance is asked to run now.
    #[serde(rename = "currentSpecDigest", skip_serializing_if = "Option::is_none")]
    pub current_spec_digest: Option<String>,
    /// `ResourceInstanceRolloutConflictError`: the instance's newest rollout generation.
    #[serde(
        rename = "currentRolloutGeneration",
        skip_serializing_if = "Option::is_none"
    )]
    pub current_rollout_generation: Option<i64>,
    /// `ResourceInstanceRolloutConflictError` from a promotion: the instance's newest rollout
    /// id (absent when it has none).
    #[serde(rename = "currentRolloutId", skip_serializing_if = "Option::is_none")]
    pub current_rollout_id: Option<String>,
    /// `ResourceInstanceRollbackTargetNotAcceptedError`: `rollback-target-not-accepted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `ServiceKeyCapabilityMissingError`: the capability the route needs, e.g.
    /// `instances:exec`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
}
