//! Moving the bytes: fresh target volumes, the helpers that fill them, and the freeze of a
//! running source.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{CopyController, MEASURE_GRACE, PROGRESS_EVERY, Stop};
use crate::model::{Instance, InstanceVolume};
use crate::names;
use crate::runtime::{CopyPlan, LABEL_COPY, LABEL_INSTANCE, LABEL_VOLUME, Labels, RuntimeError};
use crate::snapshots::CopyOp;

impl CopyController {
    /// Makes every target fresh, freezes `source` when it runs, copies each pair, and thaws
    /// it. Answers the bytes moved, how long the source was frozen, and the sources' sizes.
    pub(super) async fn copy_pairs(
        &self,
        copy: &CopyOp,
        key: &str,
        pairs: &[Pair],
        labels: &Labels,
        image: &str,
        source: Option<&Instance>,
    ) -> Result<(u64, Option<i64>, BTreeMap<String, Option<u64>>), Stop> {
        for pair in pairs {
            let mut labels = labels.clone();
            labels.insert(LABEL_VOLUME.to_owned(), pair.name.clone());
            self.fresh_volume(copy, &pair.to, &labels).await?;
        }
        let from: Vec<String> = pairs.iter().filter_map(|p| p.from.clone()).collect();
        // The engine's disk-usage report walks every volume it has, which can take seconds:
        // it is asked alongside the copy, never before it, and gives the progress its total
        // once it answers.
        let measured: Arc<std::sync::OnceLock<BTreeMap<String, Option<u64>>>> = Arc::default();
        let measuring = {
            let (store, runtime, from, measured) = (
                self.ctx.store.clone(),
                self.ctx.runtime.clone(),
                from.clone(),
                measured.clone(),
            );
            tokio::spawn(async move {
                let sizes = if from.is_empty() {
                    BTreeMap::new()
                } else {
                    crate::controllers::sizes::volume_sizes(&store, runtime.as_ref(), &from)
                        .await
                        .unwrap_or_default()
                };
                let _ = measured.set(sizes);
            })
        };
        let total_of = |sizes: &BTreeMap<String, Option<u64>>| -> Option<u64> {
            from.iter()
                .map(|f| sizes.get(f).copied().flatten())
                .sum::<Option<u64>>()
        };
        let total = || measured.get().and_then(total_of);
        self.publish(copy, key, 0, total());
        // While the copy may pause the source, the freezer leaves that pause to the copy: a
        // connection then waits for the copy's thaw rather than undoing its freeze.
        let _held = source.map(|s| self.instances.freezer().held_by_copy(&s.id));
        let container = match source {
            Some(s) => self
                .ctx
                .runtime
                .inspect_container(&self.ctx.container_name(s))
                .await?
                .filter(|c| c.running),
            None => None,
        };
        // One volume to copy: the runtime freezes the source only while the bytes move (after
        // it has made its helpers, before it removes them). Several: berth holds one freeze
        // around all of them, so they are consistent with each other.
        let copied_volumes = pairs.iter().filter(|p| p.from.is_some()).count();
        let freeze_each = container.as_ref().filter(|_| copied_volumes == 1);
        if let Some(c) = freeze_each {
            // Thawed after the attempt whatever happens to the copy (a copy cut off by a
            // shutdown cannot thaw it itself).
            self.paused().insert(copy.id.clone(), c.id.clone());
        }
        let frozen_at = match container.as_ref().filter(|_| copied_volumes > 1) {
            Some(c) => match self.ctx.runtime.pause_container(&c.id).await {
                Ok(()) => {
                    self.paused().insert(copy.id.clone(), c.id.clone());
                    Some(Instant::now())
                }
                // It stopped meanwhile: nothing writes, nothing to freeze.
                Err(RuntimeError::Conflict(_) | RuntimeError::NotFound(_)) => None,
                Err(e) => return Err(e.into()),
            },
            None => None,
        };
        let mut frozen_by_runtime: Option<Duration> = None;
        let moved_before = Arc::new(AtomicU64::new(0));
        let last = Mutex::new(Instant::now());
        let mut helper_labels = labels.clone();
        helper_labels.remove(LABEL_INSTANCE);
        let mut result = Ok(());
        let mut streamed: BTreeMap<String, u64> = BTreeMap::new();
        for (i, pair) in pairs.iter().enumerate() {
            let Some(from) = &pair.from else { continue };
            let plan = CopyPlan {
                helper: names::copy_helper(&self.ctx.config.prefix, &copy.id, i),
                image: image.to_owned(),
                from: from.clone(),
                to: pair.to.clone(),
                labels: helper_labels.clone(),
                freeze: freeze_each.map(|c| c.id.clone()),
            };
            let base = moved_before.load(Ordering::Relaxed);
            let report = |bytes: u64| {
                let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
                if last.elapsed() >= PROGRESS_EVERY {
                    *last = Instant::now();
                    let done = base + bytes;
                    let total = total();
                    self.publish(copy, key, total.map_or(done, |t| done.min(t)), total);
                }
            };
            match self.ctx.runtime.copy_volume(&plan, &report).await {
                Ok(copied) => {
                    moved_before.fetch_add(copied.bytes, Ordering::Relaxed);
                    // 0: the way of copying does not count (the image's `cp`).
                    if copied.bytes > 0 {
                        streamed.insert(from.clone(), copied.bytes);
                    }
                    if copied.frozen.is_some() {
                        frozen_by_runtime = copied.frozen;
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let frozen = match frozen_at {
            Some(at) => {
                let elapsed = at.elapsed();
                self.thaw(&copy.id).await;
                Some(elapsed)
            }
            None => frozen_by_runtime,
        };
        let paused_ms = frozen.map(|f| i64::try_from(f.as_millis()).unwrap_or(i64::MAX));
        if result.is_err() {
            measuring.abort();
        }
        result?;
        // The sizes, when the report is in (it is not waited for long: without it, the bytes
        // that went through the copy stand in).
        let _ = tokio::time::timeout(MEASURE_GRACE, measuring).await;
        let mut sizes = measured.get().cloned().unwrap_or_default();
        for (from, bytes) in streamed {
            let size = sizes.entry(from).or_insert(None);
            if size.is_none() {
                *size = Some(bytes);
            }
        }
        let moved = total_of(&sizes).unwrap_or_else(|| moved_before.load(Ordering::Relaxed));
        Ok((moved, paused_ms, sizes))
    }

    /// Makes `name` a fresh, empty volume of this copy: one an earlier attempt of it left is
    /// removed first; any other of that name is in the way.
    pub(super) async fn fresh_volume(
        &self,
        copy: &CopyOp,
        name: &str,
        labels: &Labels,
    ) -> Result<(), Stop> {
        let runtime = &self.ctx.runtime;
        if let Some(existing) = runtime.volume_labels(name).await? {
            if existing.get(LABEL_COPY) == Some(&copy.id.to_string()) {
                tracing::info!(volume = %name, copy = %copy.id, "removing what an interrupted copy wrote");
                runtime
                    .remove_volume(name, LABEL_COPY, copy.id.as_str())
                    .await?;
            } else {
                return Err(Stop::Fail(format!(
                    "a volume named {name} exists already and is not this copy's; berth will not \
                     write into it"
                )));
            }
        }
        match runtime.create_volume(name, labels).await {
            Ok(()) => Ok(()),
            Err(RuntimeError::Conflict(m)) => Err(Stop::Retry(m)),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) async fn remove_helpers(&self, copy: &CopyOp) -> Result<(), Stop> {
        let label = format!("{LABEL_COPY}={}", copy.id);
        for helper in self.ctx.runtime.list_labelled(&label).await? {
            self.ctx.runtime.remove_container(&helper.id).await?;
        }
        Ok(())
    }
}

/// One volume to copy: from the source's volume of the same name, when it has one.
pub(super) struct Pair {
    pub(super) name: String,
    pub(super) from: Option<String>,
    pub(super) to: String,
}

/// Each target volume with the source's volume of the same name, when it has one (a volume
/// the source lacks starts empty).
pub(super) fn pairs_into(targets: &[InstanceVolume], sources: &[(String, String)]) -> Vec<Pair> {
    targets
        .iter()
        .map(|t| Pair {
            name: t.name.clone(),
            from: sources
                .iter()
                .find(|(name, _)| *name == t.name)
                .map(|(_, docker)| docker.clone()),
            to: t.docker_name.clone(),
        })
        .collect()
}
