//! Instances on the wire: their desired and observed states, volumes, endpoints and the changes a domain's stream carries.

use serde::{Deserialize, Serialize};

use crate::ids::InstanceId;
use crate::time::Timestamp;

/// Why an instance is asked to run (an `up`'s and a branch's `cause`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpCause {
    /// A launch or a wake: leaves a person's stop standing.
    Use,
    /// A person's Start: runs it whatever stopped it.
    Person,
}

/// What was asked of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Desired {
    /// Run it.
    Running,
    /// Keep it stopped.
    Stopped,
    /// Remove its container for good; keep its volumes.
    Archived,
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl Desired {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Stopped => "stopped",
            Self::Archived => "archived",
            Self::Unknown => "unknown",
        }
    }

    /// Parses a wire name.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "running" => Some(Self::Running),
            "stopped" => Some(Self::Stopped),
            "archived" => Some(Self::Archived),
            _ => None,
        }
    }
}

/// Why an instance is stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum StopReason {
    /// Nothing reached it for `idleStopAfterSeconds`.
    Idle,
    /// A person stopped it; `by` is the application's words for who.
    Person {
        /// Who stopped it, 1 to 200 characters.
        by: String,
    },
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

/// What berth last observed of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase"
)]
pub enum InstanceState {
    /// Nothing has been started yet.
    NotStarted,
    /// Its container started; the ready check has not answered yet.
    Starting {
        /// When the start began.
        since: Timestamp,
    },
    /// Its ready check answered.
    Running {
        /// When it became ready.
        since: Timestamp,
    },
    /// Stopped, and why.
    Stopped {
        /// When it stopped.
        at: Timestamp,
        /// Why.
        reason: StopReason,
    },
    /// The container ended on its own; berth starts it again.
    Exited {
        /// When it ended.
        at: Timestamp,
        /// Its exit code, when known.
        exit_code: Option<i64>,
    },
    /// A start that could not finish: an image pull, a ready check, a volume.
    Failed {
        /// When it failed.
        at: Timestamp,
        /// What went wrong and what to do, for a person.
        message: String,
    },
    /// Archived: its container is gone, its volumes are kept.
    Archived {
        /// When it was archived.
        at: Timestamp,
    },
    /// A value this berth does not know, from a newer daemon: a client decodes it so and goes
    /// on; a daemon never sends it (and it does not encode).
    #[serde(other, skip_serializing)]
    Unknown,
}

impl InstanceState {
    /// The state's `kind` on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotStarted => "not-started",
            Self::Starting { .. } => "starting",
            Self::Running { .. } => "running",
            Self::Stopped { .. } => "stopped",
            Self::Exited { .. } => "exited",
            Self::Failed { .. } => "failed",
            Self::Archived { .. } => "archived",
            Self::Unknown => "unknown",
        }
    }

    /// When the instance entered this state (`since` or `at`); none before its first start or
    /// for a state this berth does not know.
    pub fn time(&self) -> Option<Timestamp> {
        match self {
            Self::Starting { since } | Self::Running { since } => Some(*since),
            Self::Stopped { at, .. }
            | Self::Exited { at, .. }
            | Self::Failed { at, .. }
            | Self::Archived { at } => Some(*at),
            Self::NotStarted | Self::Unknown => None,
        }
    }
}

/// A Docker volume an instance mounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct InstanceVolume {
    /// The spec's name for it, or `image-...` for an image `VOLUME` the spec did not cover.
    pub name: String,
    /// The Docker volume's name.
    pub docker_name: String,
    /// Where it is mounted; not on the wire.
    #[serde(skip_serializing, default)]
    pub mount_path: String,
}

/// An instance on the wire (`resourceInstanceSchema`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct InstanceView {
    /// `rin:<uuid>`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub resource_instance_id: InstanceId,
    /// The application's name for it.
    pub key: String,
    /// The DNS label linked workspaces resolve it by.
    pub alias: String,
    /// Null: shared by the domain.
    pub worktree_key: Option<String>,
    /// `sha256:<hex>` of the spec's canonical JSON.
    pub spec_digest: String,
    /// What was asked of it.
    pub desired: Desired,
    /// Why it is stopped, while desired is stopped.
    pub stop_reason: Option<StopReason>,
    /// What was last observed.
    pub state: InstanceState,
    /// When it was last observed.
    pub observed_at: Timestamp,
    /// When its container last started.
    pub started_at: Option<Timestamp>,
    /// When a live executor last reached it.
    pub last_reached_at: Option<Timestamp>,
    /// The Docker volumes it mounts, which outlive it.
    pub volumes: Vec<InstanceVolume>,
    /// Present while the daemon's container engine does not answer: then `state` is the last
    /// one berth saw, and nothing changes until the engine answers again (berth then converges
    /// by itself). Absent while the engine answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineUnreachable>,
    /// Its worktree's record (where it lives, its branch, whether it has ended), once the CLI
    /// has told of it; absent for a shared instance and for a key no CLI told of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<Box<crate::worktrees::WorktreeView>>,
    /// Present while the instance is frozen (its processes held by the cgroup freezer, after
    /// `idleFreezeAfterSeconds` unreached): `state` stays `running`, and a connection to one of
    /// its host endpoints, an exec or a `use` up thaws it. Absent while it is not frozen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen: Option<Frozen>,
}

/// A running instance whose processes are frozen: since when.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Frozen {
    /// When berth froze it (or found it frozen, after a restart).
    pub since: Timestamp,
}

/// The daemon's container engine does not answer: since when, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct EngineUnreachable {
    /// When berth found it gone.
    pub since: Timestamp,
    /// A sentence naming the engine and what the last try met; berth acts again by itself
    /// once it answers.
    pub message: String,
}

/// A volume kept when its instance was archived (`resourceInstanceArchivedVolumeSchema`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ArchivedVolume {
    /// The archived instance's key.
    pub instance_key: String,
    /// The volume's name in the spec.
    pub name: String,
    /// The Docker volume's name.
    pub docker_name: String,
    /// Apparent size of its files in bytes, measured at archive; null when it could not be.
    pub bytes: Option<i64>,
}

/// A volume an instance keeps (`GET .../instances/{key}/volumes`): one it mounts, or one a
/// spec change dropped, whose data an `up` naming it again mounts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct KeptVolume {
    /// The volume's name in the spec (or `image-...` for an image `VOLUME`).
    pub name: String,
    /// The Docker volume's name.
    pub docker_name: String,
    /// Whether the instance's spec mounts it now.
    pub mounted: bool,
    /// Apparent size of its files in bytes; null when it could not be measured.
    pub bytes: Option<i64>,
}

/// One change of one instance, as the event stream and the wait route carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct InstanceChange {
    /// Exactly the view `GET` answers.
    pub instance: InstanceView,
    /// Bumped by every accepted change of what is desired.
    pub generation: i64,
    /// The generation the last finished reconcile acted on.
    pub observed_generation: i64,
}

/// An endpoint on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct EndpointView {
    /// The port in the container.
    pub port: u16,
    /// The host address to connect to.
    pub host: String,
    /// The port on the host. It stays with the instance's name: a later generation of its key
    /// (`db@wt.2` after `db@wt` was archived) gets the same port, unless it is taken then.
    pub host_port: u16,
    /// The port the instance's name had before (an archived generation's), when something else
    /// held it as this endpoint was made, so it got `hostPort` instead; null when it kept the
    /// port it had, or had none.
    #[serde(default)]
    pub previous_host_port: Option<u16>,
    /// Why nothing listens on `hostPort` now, when berth could not bind it (another program
    /// holds it): a sentence naming the port and what berth does about it. Absent when berth
    /// listens on it; a client connects only to endpoints without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// A list of instances.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InstanceList {
    /// The instances, by key.
    pub items: Vec<InstanceView>,
}

/// What an archive did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArchiveInstanceResponse {
    /// The instance, archived.
    pub instance: InstanceView,
    /// Its volumes, kept, with their sizes.
    pub volumes: Vec<ArchivedVolume>,
}

/// An instance's host endpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EndpointList {
    /// One per service port (the tcp ready port and the image's exposed tcp ports), by port.
    pub items: Vec<EndpointView>,
}

/// Every volume an instance keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct VolumeList {
    /// One per name: those its spec mounts (`mounted: true`) and those a spec change dropped,
    /// in the order the instance came to have them (after a restore or a branch, those its
    /// spec mounted then come first).
    pub items: Vec<KeptVolume>,
}

/// What a wait answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WaitAnswer {
    /// Exactly the view `GET .../instances/{key}` answers.
    pub instance: InstanceView,
    /// Bumped by every accepted change of what is desired.
    pub generation: i64,
    /// The generation the last finished reconcile acted on.
    pub observed_generation: i64,
    /// `true`: the time ran out first; the view is the current one.
    pub timed_out: bool,
}

display_as_wire_name!(Desired);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn states_serialise_as_the_contract_spells_them() {
        let at = Timestamp::from_millis(0);
        assert_eq!(
            serde_json::to_value(InstanceState::NotStarted).unwrap(),
            json!({"kind": "not-started"})
        );
        assert_eq!(
            serde_json::to_value(InstanceState::Exited {
                at,
                exit_code: Some(3)
            })
            .unwrap(),
            json!({"kind": "exited", "at": "1970-01-01T00:00:00.000Z", "exitCode": 3})
        );
        assert_eq!(
            serde_json::to_value(InstanceState::Stopped {
                at,
                reason: StopReason::Person { by: "Ada".into() }
            })
            .unwrap(),
            json!({"kind": "stopped", "at": "1970-01-01T00:00:00.000Z", "reason": {"kind": "person", "by": "Ada"}})
        );
    }

    #[test]
    fn a_newer_daemons_state_decodes_as_unknown_and_is_never_encoded() {
        let state: InstanceState =
            serde_json::from_value(json!({"kind": "hibernating", "since": "x"})).unwrap();
        assert_eq!(state, InstanceState::Unknown);
        assert_eq!(state.kind(), "unknown");
        assert!(serde_json::to_value(&state).is_err());
        let desired: Desired = serde_json::from_value(json!("paused")).unwrap();
        assert_eq!(desired, Desired::Unknown);
        let reason: StopReason = serde_json::from_value(json!({"kind": "quota"})).unwrap();
        assert_eq!(reason, StopReason::Unknown);
    }

    #[test]
    fn a_field_a_newer_daemon_adds_is_ignored() {
        let view: InstanceView = serde_json::from_value(json!({
            "resourceInstanceId": "rin:0a1b2c3d-0000-4000-8000-000000000000",
            "key": "db",
            "alias": "db",
            "worktreeKey": null,
            "specDigest": "sha256:00",
            "desired": "running",
            "stopReason": null,
            "state": {"kind": "not-started"},
            "observedAt": "1970-01-01T00:00:00.000Z",
            "startedAt": null,
            "lastReachedAt": null,
            "volumes": [],
            "addedLater": {"any": 1}
        }))
        .unwrap();
        assert_eq!(view.key, "db");
        assert_eq!(view.desired, Desired::Running);
    }
}

/// `POST .../instances/{key}/up`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(example = json!({"spec": crate::schema::example_spec(), "cause": "use"})))]
pub struct UpRequest {
    /// A resource-instance spec: every field, its pattern and bounds. Decoded by the core,
    /// which refuses a bad one with `ResourceInstanceSpecRefusedError`.
    #[cfg_attr(feature = "openapi", schema(value_type = crate::schema::SpecSchema))]
    pub spec: serde_json::Value,
    /// `use`: a launch or a wake, which leaves a person's stop standing. `person`: a person's Start.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^(use|person)$"))]
    pub cause: UpCause,
    /// `true`: volumes the instance does not have yet start on the domain's template for its
    /// image, command, environment and volume paths (made once, by running the image
    /// privately until it is ready), instead of empty. Left out: `false`. Only with overlay
    /// volumes (`volumeLayers` in `GET /v1/daemon`); otherwise they start empty, as without it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub template: bool,
}

/// `POST .../instances/{key}/stop`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StopRequest {
    /// Who stopped it, 1 to 200 characters (Unicode scalar values), none of them a control,
    /// bidirectional control or zero-width character.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200B-\\u200F\\u202A-\\u202E\\u2060\\u2066-\\u2069\\uFEFF]*$"
        )
    )]
    pub by: String,
}
