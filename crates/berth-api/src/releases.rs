//! Releases on the wire: the specs an instance ran, and what a rollback did.

use serde::{Deserialize, Serialize};

use crate::instances::InstanceView;
use crate::time::Timestamp;

/// How a release ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ReleaseEnd {
    /// Another spec started in its place.
    Replaced,
    /// The instance was archived while it was current.
    Archived,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl ReleaseEnd {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Replaced => "replaced",
            Self::Archived => "archived",
            Self::Unknown => "unknown",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "replaced" => Some(Self::Replaced),
            "archived" => Some(Self::Archived),
            _ => None,
        }
    }
}

/// A release on the wire (`GET .../instances/{key}/releases`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ReleaseView {
    /// `sha256:<hex>` of the spec it ran.
    pub spec_digest: String,
    /// The pinned image reference, as written in that spec.
    pub image: String,
    /// The digest that reference pins.
    pub image_digest: String,
    /// When berth first started a verified container of it.
    pub first_started_at: Timestamp,
    /// When berth last started (or adopted) a verified container of it.
    pub last_started_at: Timestamp,
    /// `replaced` or `archived`; null while it is the current release.
    pub ended: Option<ReleaseEnd>,
    /// When it ended; null while current.
    pub ended_at: Option<Timestamp>,
}

/// What a rollback did (`POST .../instances/{key}/rollback`). A replay of its idempotency key
/// answers this same record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct RollbackView {
    /// The instance as stored right after the rollback was asked for.
    pub instance: InstanceView,
    /// The spec it was asked to run before.
    pub from_spec_digest: String,
    /// The previous release's spec it is now asked to run.
    pub to_spec_digest: String,
    /// The rollout the rollback made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_id: Option<String>,
    /// Its generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_generation: Option<i64>,
}

/// An instance's release history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ReleaseList {
    /// Every spec it ran, newest first.
    pub items: Vec<ReleaseView>,
}

display_as_wire_name!(ReleaseEnd);

/// `POST .../instances/{key}/rollback`: either `expectedSpecDigest` (to the previous release),
/// or `expectedRolloutGeneration` with an optional `releaseId`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", schema(example = json!({"idempotencyKey": "k1", "expectedRolloutGeneration": 2})))]
pub struct RollbackRequest {
    /// 1 to 128 characters (Unicode scalar values), none of them a control, bidirectional
    /// control or zero-width character: the same key answers the same result.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 128,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200B-\\u200F\\u202A-\\u202E\\u2060\\u2066-\\u2069\\uFEFF]*$"
        )
    )]
    pub idempotency_key: String,
    /// The `specDigest` the instance is asked to run now; a stale one is refused with 409.
    /// Exactly one of this and `expectedRolloutGeneration`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, pattern = "^sha256:[0-9a-f]{64}$"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_spec_digest: Option<String>,
    /// The instance's newest `rolloutGeneration` (0 before its first rollout); a stale one is
    /// refused with 409 `ResourceInstanceRolloutConflictError`.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_rollout_generation: Option<i64>,
    /// With `expectedRolloutGeneration` only: the image release (`irl:...`) to roll back to,
    /// which must have run verified. Without it: the newest other image that ran verified.
    #[cfg_attr(feature = "openapi", schema(pattern = "^irl:[0-9a-f]{32}$"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_id: Option<String>,
}

/// `POST .../instances/{key}/promote`: the contract's `promoteServiceImageRelease` request. It
/// moves the instance to an observed image release and starts a `promotion` rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "openapi", schema(example = json!({"releaseId": "irl:0123456789abcdef0123456789abcdef", "idempotencyKey": "k1", "expectedRolloutGeneration": 1, "expectedCurrentRolloutId": "rol:8c1b2a52-0d0e-4a43-9d8e-2f1b5a3c4d5e", "enableImmutableImage": true})))]
pub struct PromoteRequest {
    /// The image release (`irl:...`) to run: one berth observed for the instance.
    #[cfg_attr(feature = "openapi", schema(pattern = "^irl:[0-9a-f]{32}$"))]
    pub release_id: String,
    /// 1 to 128 characters (Unicode scalar values), none of them a control, bidirectional
    /// control or zero-width character: the same key with the same body answers the same
    /// result; with another body, 409 `RequestIdempotencyKeyReusedError`.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 128,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200B-\\u200F\\u202A-\\u202E\\u2060\\u2066-\\u2069\\uFEFF]*$"
        )
    )]
    pub idempotency_key: String,
    /// The instance's newest `rolloutGeneration` (0 before its first rollout); a stale one is
    /// refused with 409 `ResourceInstanceRolloutConflictError`.
    #[cfg_attr(feature = "openapi", schema(minimum = 0))]
    pub expected_rollout_generation: i64,
    /// The id of the instance's newest rollout, when the caller read one; a stale one is
    /// refused with 409 `ResourceInstanceRolloutConflictError`.
    #[cfg_attr(feature = "openapi", schema(pattern = "^rol:[0-9a-f-]{36}$"))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_current_rollout_id: Option<String>,
    /// Must be `true`: the instance runs only the digest-pinned, verified image.
    pub enable_immutable_image: bool,
}

/// What a promotion did (`POST .../instances/{key}/promote`). A replay of its idempotency key
/// with the same body answers this same record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PromotionView {
    /// The instance as stored right after the promotion was asked for.
    pub instance: InstanceView,
    /// The image release it moves to.
    pub release_id: String,
    /// The pinned reference it ran before.
    pub from_image: String,
    /// The pinned reference it is now asked to run.
    pub to_image: String,
    /// The rollout the promotion made.
    pub rollout_id: String,
    /// Its generation.
    pub rollout_generation: i64,
}
