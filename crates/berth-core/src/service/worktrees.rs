//! Worktree records: the CLI tells where a worktree key lives and its branch at `up`; views of
//! that key's instances carry it, and the worktree controller ends it once it is gone.

use super::Berth;
use crate::error::Error;
use crate::ids::DomainId;
use crate::model::InstanceView;
use crate::time::Timestamp;
use crate::worktrees::{Worktree, WorktreeRequest, WorktreeView, check_request};

impl Berth {
    /// Records where `key`'s worktree lives and its branch. A worktree found ended before is
    /// live again: its instances, stopped when it ended, start at the next `up`. The daemon
    /// watches the path only if it sees it now (a daemon on another host never ends it).
    pub async fn put_worktree(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        request: WorktreeRequest,
    ) -> Result<WorktreeView, Error> {
        self.domain(owner, domain_id)?;
        check_request(&request)
            .map_err(|(place, expected)| Error::RequestRefused(format!("{place} {expected}")))?;
        let path = request.path.clone();
        let watched =
            tokio::task::spawn_blocking(move || crate::controllers::worktrees::present(&path))
                .await
                .unwrap_or(false);
        let worktree = Worktree {
            domain_id: domain_id.clone(),
            key: key.to_owned(),
            path: request.path,
            branch: request.branch,
            watched,
            seen_at: Timestamp::now(),
            ended_at: None,
        };
        let put = worktree.clone();
        self.store().write(move |tx| tx.put_worktree(&put)).await?;
        Ok(worktree.view())
    }

    /// A domain's worktree records, by key.
    pub fn worktrees(&self, owner: &str, domain_id: &DomainId) -> Result<Vec<WorktreeView>, Error> {
        self.domain(owner, domain_id)?;
        Ok(self
            .store()
            .worktrees(domain_id)
            .iter()
            .map(Worktree::view)
            .collect())
    }

    /// An instance's view as the API answers it: with the engine's absence while it lasts, and
    /// its worktree's record.
    pub fn annotated(&self, mut view: InstanceView) -> InstanceView {
        view.engine = self.engine_unreachable();
        view.worktree = self
            .store()
            .worktree_of(&view.resource_instance_id)
            .map(|w| Box::new(w.view()));
        view
    }
}
