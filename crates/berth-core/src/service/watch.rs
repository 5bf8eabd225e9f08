//! A domain's changes: the event stream's subscription and the wait route.

use std::time::Duration;

use super::Berth;
use crate::error::Error;
use crate::ids::DomainId;
use crate::watch::{InstanceChange, MAX_WAIT, Resume, Subscription, Watch, settled};

impl Berth {
    /// Subscribes to a domain's changes for a client that last saw `last_event_id` (none: a
    /// new client), with the snapshot it starts from when it cannot resume: every instance of
    /// the domain, archived ones included.
    pub fn subscribe(
        &self,
        owner: &str,
        domain_id: &DomainId,
        last_event_id: Option<&str>,
    ) -> Result<(Subscription, Vec<InstanceChange>), Error> {
        self.domain(owner, domain_id)?;
        let (feed, resume, at) = self.store.watch().subscribe(domain_id, last_event_id);
        // Read after subscribing: a change in between is in both, never in neither.
        let snapshot = match resume {
            Resume::Missed(_) => Vec::new(),
            Resume::Resync => {
                let mut all = self.store.instances(domain_id, false);
                all.extend(self.store.instances(domain_id, true));
                all.sort_by(|a, b| a.key.cmp(&b.key));
                all.iter()
                    .map(|i| {
                        let mut change = i.change();
                        change.instance = self.annotated(change.instance);
                        change
                    })
                    .collect()
            }
        };
        Ok((Subscription { feed, resume, at }, snapshot))
    }

    /// Waits until the instance is settled in one of `kinds` (see [`crate::watch::settled`])
    /// or `timeout` passes; answers its view then, and whether the time ran out.
    pub async fn wait_for(
        &self,
        owner: &str,
        domain_id: &DomainId,
        key: &str,
        kinds: &[String],
        timeout: Duration,
    ) -> Result<(InstanceChange, bool), Error> {
        let deadline = tokio::time::Instant::now() + timeout.min(MAX_WAIT);
        let (mut feed, _, _) = self.store.watch().subscribe(domain_id, None);
        let annotate = |mut change: InstanceChange| {
            change.instance = self.annotated(change.instance);
            change
        };
        loop {
            let change = annotate(self.instance(owner, domain_id, key)?.change());
            if settled(&change, kinds) {
                return Ok((change, false));
            }
            let id = change.instance.resource_instance_id.clone();
            if !Watch::next_change(&mut feed, &id, deadline).await {
                let change = annotate(self.instance(owner, domain_id, key)?.change());
                let done = settled(&change, kinds);
                return Ok((change, !done));
            }
        }
    }
}
