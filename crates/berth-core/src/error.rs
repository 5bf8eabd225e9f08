//! The errors berth answers with. Each variant is one error of the contract; the HTTP layer maps
//! each to its `_tag` and status in one place.

use crate::model::DomainState;
use crate::spec::Refusal;
use crate::store::StoreError;

/// An error a caller sees.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A body, path parameter or query did not decode; the message names the place.
    #[error("{0}")]
    RequestRefused(String),
    /// The spec asks for what an instance may never have, or is not a spec.
    #[error("{message}")]
    SpecRefused {
        /// A summary sentence.
        message: String,
        /// Each refused field with its sentence.
        refusals: Vec<Refusal>,
    },
    /// No domain has that id.
    #[error("no resource domain has the id {0}")]
    DomainNotFound(String),
    /// The domain belongs to another service key.
    #[error("the resource domain {0} belongs to another service key")]
    DomainForbidden(String),
    /// The domain is fenced or archived.
    #[error("the resource domain {id} is {} and admits no new instance or link", state.as_str())]
    DomainNotActive {
        /// The domain's id.
        id: String,
        /// Fenced or archived.
        state: DomainState,
    },
    /// No instance has that key in the domain.
    #[error("no resource instance has the key {key} in {domain}")]
    InstanceNotFound {
        /// The domain.
        domain: String,
        /// The key.
        key: String,
    },
    /// The key names an archived instance.
    #[error(
        "the resource instance {0} is archived: it stays archived and its volumes are kept; use another key"
    )]
    InstanceArchived(String),
    /// Another live instance answers to the alias for the same worktree key.
    #[error("the alias {alias} is taken by the instance {holder} for {scope}")]
    AliasTaken {
        /// The alias.
        alias: String,
        /// The key of the instance holding it.
        holder: String,
        /// `the whole domain` or `worktree key K`.
        scope: String,
    },
    /// No workspace has that id (for this key).
    #[error("no workspace has the id {0}")]
    WorkspaceNotFound(String),
    /// The workspace is linked to another domain.
    #[error(
        "the workspace {workspace} is linked to the resource domain {domain}; a workspace links to one domain"
    )]
    WorkspaceLinkedElsewhere {
        /// The workspace.
        workspace: String,
        /// The domain it is linked to.
        domain: String,
    },
    /// No lease has that id in the workspace.
    #[error("no lease has the id {0} in this workspace")]
    LeaseNotFound(String),
    /// The instance is not running, so a command cannot run in it.
    #[error(
        "the resource instance {key} is not running ({state}); start it with an up and wait for running"
    )]
    InstanceNotRunning {
        /// The key.
        key: String,
        /// Its state's kind.
        state: String,
    },
    /// A rollback named a spec digest the instance no longer runs.
    #[error(
        "the resource instance {key} is asked to run the spec {current}, not the \
         expectedSpecDigest sent: read the instance again and decide whether to roll back from \
         {current}"
    )]
    ReleaseConflict {
        /// The key.
        key: String,
        /// The spec digest the instance is asked to run now.
        current: String,
    },
    /// A rollback of an instance that never ran another spec.
    #[error(
        "the resource instance {key} has no previous release to roll back to: berth has started \
         no other spec for it"
    )]
    NoPreviousRelease {
        /// The key.
        key: String,
    },
    /// A rollback named a rollout generation that is not the instance's newest.
    #[error(
        "the resource instance {key} has another rollout generation than the \
         expectedRolloutGeneration sent (currentRolloutGeneration): read its rollouts again and \
         decide whether to roll back"
    )]
    RolloutConflict {
        /// The key.
        key: String,
        /// The instance's newest rollout generation (0: none yet).
        current: i64,
    },
    /// A promotion read another newest rollout than the instance has.
    #[error(
        "the resource instance {key} has moved on since it was read: its newest rollout is \
         generation {current} ({}), not the expectedRolloutGeneration and \
         expectedCurrentRolloutId sent; read its image releases and rollouts again and decide \
         whether to promote",
        current_id.as_deref().unwrap_or("none yet")
    )]
    PromotionConflict {
        /// The key.
        key: String,
        /// The instance's newest rollout generation (0: none yet).
        current: i64,
        /// The instance's newest rollout id.
        current_id: Option<String>,
    },
    /// A promotion named a release of another repository than the instance's image now names.
    #[error(
        "releaseId names a release of {repository}, but {key} now runs an image of another \
         repository: promote one of the releases observed for its image"
    )]
    ReleaseOfAnotherImage {
        /// The key.
        key: String,
        /// The release's `host/repository`.
        repository: String,
    },
    /// The instance's image names no tag, so there is nothing to observe.
    #[error(
        "the image of {key} is pinned by digest alone, with no tag to observe: write it as \
         name:tag@sha256:... (berth add and berth pin do) to have berth watch the tag"
    )]
    ImageNotTagged {
        /// The key.
        key: String,
    },
    /// The registry could not be read for the tag the instance's image carries.
    #[error("could not observe the tag of {key}'s image: {message}")]
    ImageObservationFailed {
        /// The key.
        key: String,
        /// The registry's sentence.
        message: String,
    },
    /// A rollback named an image release that never ran verified.
    #[error(
        "releaseId must name an image release of {key} that ran verified (has acceptedAt); \
         this one never did"
    )]
    RollbackTargetNotAccepted {
        /// The key.
        key: String,
    },
    /// No image release of the instance has this id.
    #[error("releaseId must name one of the image releases of {key}; none has this id")]
    ImageReleaseNotFound {
        /// The key.
        key: String,
    },
    /// No rollout of the instance has this id.
    #[error("rolloutId must name one of the rollouts of {key}; none has this id")]
    RolloutNotFound {
        /// The key.
        key: String,
    },
    /// An idempotency key reused for a different rollback.
    #[error(
        "this idempotency key was used for a rollback of {key} with another expectedSpecDigest, \
         expectedRolloutGeneration or releaseId; use a new key for a new rollback"
    )]
    IdempotencyKeyReused {
        /// The key.
        key: String,
    },
    /// No snapshot has that id in the domain.
    #[error("no snapshot has the id {0} in this resource domain")]
    SnapshotNotFound(String),
    /// A snapshot that is still being copied, or whose copy failed, cannot be read yet.
    #[error("the snapshot {id} is {state}, not ready: {what}")]
    SnapshotNotReady {
        /// The snapshot.
        id: String,
        /// `copying` or `failed`.
        state: String,
        /// What to do.
        what: String,
    },
    /// A branch onto a key a live instance has.
    #[error(
        "the resource instance {0} exists: a branch makes a new instance, so choose a key no \
         instance has"
    )]
    InstanceExists(String),
    /// A copy already reads or fills the instance (or the snapshot).
    #[error(
        "a copy ({copy}) of {what} is under way; wait for its `event: copy` with state done, then ask again"
    )]
    CopyUnderWay {
        /// The instance or snapshot.
        what: String,
        /// The copy's id.
        copy: String,
    },
    /// No template of that id in the domain.
    #[error("no template {0} in this domain; `GET .../templates` lists them")]
    TemplateNotFound(String),
    /// Volumes stand on the template, or it is being made: deleting it would take their data.
    #[error(
        "the template {id} holds the layers that {users} stand on: it is kept while they are; \
         archive and remove those instances' volumes first if their data is not needed"
    )]
    TemplateInUse {
        /// The template.
        id: String,
        /// What stands on it, comma-separated.
        users: String,
    },
    /// No pool of that name in the domain (or it is being deleted).
    #[error("no pool {0} in this domain; `GET .../pools` lists them")]
    PoolNotFound(String),
    /// The domain has a pool of that name already.
    #[error("the domain has a pool {0} already; delete it first or choose another name")]
    PoolExists(String),
    /// The pool has no ready instance and the lease asked not to wait, or waited its longest.
    #[error(
        "the pool {pool} has no ready instance {what}; take the lease again, or with \
         \"wait\": true to wait for the next one"
    )]
    PoolEmpty {
        /// The pool.
        pool: String,
        /// `now` or how long the lease waited.
        what: String,
    },
    /// No lease of that id in the domain that the caller's key holds: another key's lease is
    /// not found either, so nothing says it exists.
    #[error("no lease {0} held by this key in this domain; it may have been released or expired")]
    PoolLeaseNotFound(String),
    /// This daemon runs no container runtime.
    #[error("resources run on Docker; this berth runs {runtime}")]
    RuntimeUnsupported {
        /// What it runs instead.
        runtime: String,
    },
    /// The daemon's container engine does not answer, so what needs it cannot be done now.
    #[error(
        "berth's container engine does not answer (since {since}): {message}; nothing was \
         done, and berth acts again by itself once it answers"
    )]
    EngineUnreachable {
        /// When berth found it away.
        since: crate::time::Timestamp,
        /// What the last try met, naming the engine.
        message: String,
    },
    /// The container engine failed in a way the caller must hear of now.
    #[error("{0}")]
    Runtime(String),
    /// Something inside berth failed.
    #[error("{0}")]
    Internal(String),
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "store failure");
        Error::Internal("berth's store failed; see the daemon's log".to_owned())
    }
}
