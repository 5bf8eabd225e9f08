//! Ended worktrees. The CLI records where each worktree key lives at `up`; every few seconds
//! this controller looks whether each watched worktree is still there (its top level holds
//! `.git`: `git worktree remove` takes the whole directory, and a worktree deleted by hand loses
//! it too). One that is gone is marked ended, and its key's instances that run are stopped,
//! with the stop's `by` saying why; they stay until `prune` archives them or a person does.
//!
//! It reads the file system and the store's memory only, never the engine.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::context::{Context, InstanceQueue};
use crate::model::{Desired, StopReason};
use crate::store::StoreError;
use crate::time::Timestamp;
use crate::worktrees::Worktree;

/// How often worktrees are looked at.
const TICK: Duration = Duration::from_secs(3);

/// Who stopped an ended worktree's instances, as its stop reason says.
pub const ENDED_BY: &str = "berth: its worktree was removed";

/// Whether a worktree is there, as git leaves one: its top level holds `.git` (a directory in
/// the main worktree, a file in a linked one).
pub fn present(path: &str) -> bool {
    Path::new(path).join(".git").symlink_metadata().is_ok()
}

/// Notices ended worktrees.
pub(crate) struct WorktreeController {
    ctx: Arc<Context>,
    queue: InstanceQueue,
}

impl WorktreeController {
    pub(crate) fn new(ctx: Arc<Context>, queue: InstanceQueue) -> Self {
        Self { ctx, queue }
    }

    /// Looks every few seconds, until the task is stopped.
    pub(crate) async fn run(&self) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.look().await {
                tracing::error!(error = %e, "ended worktrees could not be recorded");
            }
        }
    }

    /// Looks at every watched worktree once; ends those that are gone.
    pub async fn look(&self) -> Result<(), StoreError> {
        let watched = self.ctx.store.watched_worktrees();
        if watched.is_empty() {
            return Ok(());
        }
        let gone: Vec<Worktree> = tokio::task::spawn_blocking(move || {
            watched.into_iter().filter(|w| !present(&w.path)).collect()
        })
        .await
        .unwrap_or_default();
        for worktree in gone {
            self.end(worktree).await?;
        }
        Ok(())
    }

    /// Marks `worktree` ended and stops its key's instances that are asked to run, in one
    /// transaction. A worktree told of again since it was read (at the same path, by an `up`
    /// from a worktree made there anew) is left as it is.
    async fn end(&self, worktree: Worktree) -> Result<(), StoreError> {
        let now = Timestamp::now();
        let read = worktree.clone();
        let stopped = self
            .ctx
            .store
            .write(move |tx| {
                let Some(mut current) = tx.worktree(&read.domain_id, &read.key)? else {
                    return Ok(Vec::new());
                };
                if current.seen_at != read.seen_at || current.ended_at.is_some() {
                    return Ok(Vec::new());
                }
                current.ended_at = Some(now);
                tx.put_worktree(&current)?;
                let mut stopped = Vec::new();
                for mut instance in tx.instances(&read.domain_id, false)? {
                    if instance.spec.worktree_key.as_deref() != Some(read.key.as_str())
                        || instance.desired != Desired::Running
                    {
                        continue;
                    }
                    instance.desired = Desired::Stopped;
                    instance.stop_reason = Some(StopReason::Person {
                        by: ENDED_BY.to_owned(),
                    });
                    tx.save_desired(&instance)?;
                    stopped.push(instance.id);
                }
                Ok::<_, StoreError>(stopped)
            })
            .await?;
        tracing::info!(
            worktree = %worktree.key,
            stopped = stopped.len(),
            "a worktree is gone: its instances are stopped"
        );
        for id in &stopped {
            self.queue.enqueue(id);
        }
        Ok(())
    }
}
