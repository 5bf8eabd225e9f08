//! A preflight on the wire: what an `up` with the same body would do, and whether it would
//! succeed, answered without writing anything (the contract's `IDeploymentPreflightReport`).

use serde::{Deserialize, Serialize};

use crate::spec::Refusal;

/// What `POST .../instances/{key}/preflight` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PreflightReport {
    /// Whether the `up` would succeed: every check passed.
    pub ok: bool,
    /// The instance does not exist yet: the `up` would make it.
    pub would_create: bool,
    /// The instance's container exists and the `up` would replace it (`container.reasons`
    /// say why).
    pub would_replace: bool,
    /// The spec's `specDigest`, when it decodes.
    pub spec_digest: Option<String>,
    /// Every check, in the order the `up` makes them.
    pub checks: Vec<PreflightCheck>,
    /// Each field the spec is refused for (empty when it decodes).
    pub refusals: Vec<Refusal>,
    /// The image, when the spec decodes.
    pub image: Option<PreflightImage>,
    /// The volumes the instance would mount.
    pub volumes: Vec<PreflightVolume>,
    /// The alias, when the spec decodes.
    pub alias: Option<PreflightAlias>,
    /// One per service port (the tcp ready port and the image's exposed tcp ports).
    pub endpoints: Vec<PreflightEndpoint>,
    /// The instance's container, when the spec decodes.
    pub container: Option<PreflightContainer>,
}

/// One check an `up` makes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PreflightCheck {
    /// Its name: `spec`, `domain`, `instance`, `alias`, `image`, or `engine` (a step of the
    /// engine's that did not answer in time).
    pub check: String,
    /// Whether it passed.
    pub ok: bool,
    /// What was found, as a sentence.
    pub message: String,
}

/// The spec's image as the engine and its registry have it; nothing is pulled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PreflightImage {
    /// The pinned reference as the spec has it.
    pub reference: String,
    /// Its digest.
    pub digest: String,
    /// Whether the engine holds the image under that digest.
    pub local: bool,
    /// The local image's id, when it is local.
    pub image_id: Option<String>,
    /// Whether the registry serves the digest: `null` when it was not asked (the image is
    /// local) or could not say.
    pub pullable: Option<bool>,
    /// The registry's media type for the digest, when it was asked.
    pub registry_media_type: Option<String>,
    /// When the digest names an index: the manifest it lists for the engine's platform.
    pub platform_manifest_digest: Option<String>,
    /// That manifest's config digest (the image id the engine would give the image).
    pub platform_config_digest: Option<String>,
    /// Why the registry was not read, or what it answered, when it failed.
    pub message: Option<String>,
}

/// A volume the instance would mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PreflightVolume {
    /// The spec's name for it (or `image-...` for an image `VOLUME`).
    pub name: String,
    /// The engine's volume.
    pub docker_name: String,
    /// Where it is mounted.
    pub mount_path: String,
    /// `create` (no such volume yet) or `reuse` (the engine has it, with its data).
    pub action: String,
}

/// The alias and whether it is free.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PreflightAlias {
    /// The DNS label.
    pub alias: String,
    /// Where it must be unique: `the whole domain` or `worktree key ...`.
    pub scope: String,
    /// The key of another instance holding it there, if one does.
    pub holder: Option<String>,
}

/// A service port and the host port that reaches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PreflightEndpoint {
    /// The port in the container.
    pub port: u16,
    /// The host port the instance already has for it; `null`: one would be allocated.
    pub host_port: Option<u16>,
}

/// The instance's container and what the `up` would do to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct PreflightContainer {
    /// The container's name.
    pub name: String,
    /// Whether the engine has it.
    pub exists: bool,
    /// `create`, `replace` or `keep`.
    pub action: String,
    /// Why it would be replaced: each part of the spec that differs (`image`, `command`,
    /// `env`, `volumes`, `limits`).
    pub reasons: Vec<String>,
}
