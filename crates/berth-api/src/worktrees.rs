//! Worktrees on the wire: where each worktree key of a domain lives on disk and which branch it
//! has checked out, as the CLI tells the daemon at `up`, and whether that worktree has ended.

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;

/// The longest worktree path berth keeps (Linux's `PATH_MAX`).
pub const MAX_WORKTREE_PATH: usize = 4096;
/// The longest branch name berth keeps (git refuses longer ref names on most file systems).
pub const MAX_BRANCH: usize = 255;

/// What the CLI says of its worktree (`PUT .../worktrees/{worktreeKey}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WorktreeRequest {
    /// The worktree's top level: an absolute path, as the CLI's host sees it.
    pub path: String,
    /// The branch it has checked out; null on a detached head.
    pub branch: Option<String>,
}

/// A worktree key's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct WorktreeView {
    /// The key its instances carry.
    pub worktree_key: String,
    /// Its top level.
    pub path: String,
    /// The branch it had checked out when last told; null on a detached head.
    pub branch: Option<String>,
    /// Whether the daemon can see the path: only then does it notice the worktree end. A
    /// daemon on another host (or in a container) cannot, and never ends it.
    pub watched: bool,
    /// When the CLI last told of it.
    pub seen_at: Timestamp,
    /// When the daemon found the worktree gone (its path, or the path's `.git`, removed):
    /// its instances are stopped then, and `prune` archives them. Null while it exists.
    pub ended_at: Option<Timestamp>,
}

/// `GET .../worktrees`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WorktreeList {
    /// By key.
    pub items: Vec<WorktreeView>,
}
