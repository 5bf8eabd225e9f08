//! Domains on the wire: a resource domain (a project) and its state.

use serde::{Deserialize, Serialize};

use crate::ids::DomainId;
use crate::instances::ArchivedVolume;
use crate::time::Timestamp;

/// Whether a domain admits new instances and links.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum DomainState {
    /// Admits new instances and links.
    Active,
    /// Admits no new instance or link; running ones keep running.
    Fenced,
    /// Every instance archived; admits nothing new.
    Archived,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl DomainState {
    /// The state's wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Fenced => "fenced",
            Self::Archived => "archived",
            Self::Unknown => "unknown",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "active" => Some(Self::Active),
            "fenced" => Some(Self::Fenced),
            "archived" => Some(Self::Archived),
            _ => None,
        }
    }
}

/// A resource domain: a project whose instances berth runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = Domain))]
#[serde(rename_all = "camelCase")]
pub struct DomainView {
    /// `rdm:<uuid>`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "rdm:0a1b2c3d-0000-4000-8000-000000000000"))]
    pub resource_domain_id: DomainId,
    /// A name for people, 1 to 200 characters.
    pub name: String,
    /// Whether it admits new instances and links.
    pub state: DomainState,
    /// When it was created.
    pub created_at: Timestamp,
}

/// A list of domains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DomainList {
    /// The caller's domains, oldest first.
    pub items: Vec<DomainView>,
}

/// What a domain archive kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArchiveDomainResponse {
    /// Every volume of every instance of the domain, all kept.
    pub volumes: Vec<ArchivedVolume>,
}

display_as_wire_name!(DomainState);

/// `POST /v1/resource-domains`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreateDomainRequest {
    /// 1 to 200 characters (Unicode scalar values), none of them a control, bidirectional
    /// control or zero-width character.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200B-\\u200F\\u202A-\\u202E\\u2060\\u2066-\\u2069\\uFEFF]*$"
        )
    )]
    pub name: String,
}
