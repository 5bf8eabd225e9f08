//! Where a domain's disk goes, computed from what berth keeps: which unit (an instance, a
//! snapshot, a template) holds which volumes, and the layers under each overlay. No I/O: the
//! sizes come in, measured by the engine.
//!
//! A *storage volume* is one that holds data: a plain volume, or an overlay's upper-layer
//! volume (`<overlay>.up`); the overlay itself is a mount of its layers and holds nothing. A
//! unit *holds* the storage of the volumes it lists and *uses* those and every layer under
//! them. Removing a set of units frees exactly the storage volumes that only they use.

use std::collections::{BTreeMap, BTreeSet};

pub use berth_api::disk::{
    DiskItem, DiskKind, DiskUsage, PruneAction, PruneReason, PruneReport, PruneRequest,
    SharedVolume,
};

use crate::names;
use crate::snapshots::LayeredVolume;
use crate::time::Timestamp;

/// One unit of disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    pub kind: DiskKind,
    pub id: String,
    pub name: String,
    pub instance_key: Option<String>,
    pub worktree_key: Option<String>,
    pub since: Option<Timestamp>,
    /// The Docker volumes it lists (overlays or plain).
    pub volumes: Vec<String>,
}

impl Unit {
    /// How a shared volume's users name it.
    pub fn label(&self) -> String {
        format!("{} {}", self.kind, self.name)
    }
}

/// The units of a domain and the storage each holds and uses.
#[derive(Debug, Clone)]
pub struct DiskGraph {
    pub units: Vec<Unit>,
    holds: Vec<BTreeSet<String>>,
    uses: Vec<BTreeSet<String>>,
}

impl DiskGraph {
    /// The graph of `units`, whose overlay volumes are those in `layered` (by name).
    pub fn new(units: Vec<Unit>, layered: &BTreeMap<String, LayeredVolume>) -> Self {
        let mut holds = Vec::with_capacity(units.len());
        let mut uses = Vec::with_capacity(units.len());
        for unit in &units {
            let mut held = BTreeSet::new();
            let mut used = BTreeSet::new();
            for volume in &unit.volumes {
                match layered.get(volume) {
                    Some(overlay) => {
                        held.insert(overlay.upper.clone());
                        used.extend(overlay.lowers.iter().map(|l| l.volume.clone()));
                    }
                    None => {
                        held.insert(volume.clone());
                    }
                }
            }
            used.extend(held.iter().cloned());
            holds.push(held);
            uses.push(used);
        }
        Self { units, holds, uses }
    }

    /// Every storage volume any unit uses.
    pub fn storage(&self) -> BTreeSet<String> {
        self.uses.iter().flatten().cloned().collect()
    }

    /// The units that use `volume`, by index.
    pub fn users(&self, volume: &str) -> Vec<usize> {
        (0..self.units.len())
            .filter(|&i| self.uses[i].contains(volume))
            .collect()
    }

    /// The storage volumes unit `i` holds.
    pub fn held_by(&self, i: usize) -> &BTreeSet<String> {
        &self.holds[i]
    }

    /// The storage volumes that only units in `removed` use: what removing them frees.
    pub fn freed_by(&self, removed: &BTreeSet<usize>) -> BTreeSet<String> {
        removed
            .iter()
            .flat_map(|&i| self.uses[i].iter())
            .filter(|v| self.users(v).iter().all(|u| removed.contains(u)))
            .cloned()
            .collect()
    }

    /// The storage volumes unit `i` holds that a unit outside `removed` uses, each with who.
    pub fn kept_of(&self, i: usize, removed: &BTreeSet<usize>) -> Vec<String> {
        self.holds[i]
            .iter()
            .filter_map(|v| {
                let others: Vec<String> = self
                    .users(v)
                    .into_iter()
                    .filter(|u| !removed.contains(u))
                    .map(|u| self.units[u].label())
                    .collect();
                (!others.is_empty()).then(|| format!("{v} ({})", others.join(", ")))
            })
            .collect()
    }

    /// The domain's disk, with `sizes` by storage volume (`None`: not measured).
    pub fn usage(
        &self,
        sizes: &BTreeMap<String, Option<u64>>,
        measured_at: Timestamp,
    ) -> DiskUsage {
        let size = |v: &String| sizes.get(v).copied().flatten();
        let sum = |set: &mut dyn Iterator<Item = &String>| -> Option<u64> {
            set.map(size).sum::<Option<u64>>()
        };
        let mut items: Vec<DiskItem> = self
            .units
            .iter()
            .enumerate()
            .map(|(i, unit)| {
                let alone = BTreeSet::from([i]);
                DiskItem {
                    kind: unit.kind,
                    id: unit.id.clone(),
                    name: unit.name.clone(),
                    instance_key: unit.instance_key.clone(),
                    worktree_key: unit.worktree_key.clone(),
                    bytes: sum(&mut self.holds[i].iter()),
                    frees: sum(&mut self.freed_by(&alone).iter()),
                    since: unit.since,
                    volumes: self.holds[i].iter().cloned().collect(),
                }
            })
            .collect();
        items.sort_by(|a, b| (kind_order(a.kind), &a.id).cmp(&(kind_order(b.kind), &b.id)));
        let shared = self
            .storage()
            .into_iter()
            .filter_map(|volume| {
                let users = self.users(&volume);
                (users.len() > 1).then(|| SharedVolume {
                    bytes: size(&volume),
                    users: users.iter().map(|&u| self.units[u].label()).collect(),
                    volume,
                })
            })
            .collect();
        DiskUsage {
            measured_at,
            total_bytes: sum(&mut self.storage().iter()),
            items,
            shared,
        }
    }
}

fn kind_order(kind: DiskKind) -> u8 {
    match kind {
        DiskKind::Instance => 0,
        DiskKind::Archived => 1,
        DiskKind::Snapshot => 2,
        DiskKind::Template => 3,
        DiskKind::Orphan => 4,
        DiskKind::Unknown => 5,
    }
}

/// The Docker volumes to remove for the storage volume `storage`: an upper layer's volume goes
/// after its overlay (`<x>.up` after `<x>`), a plain volume alone.
pub fn removal_order(storage: &str) -> Vec<String> {
    match storage.strip_suffix(".up") {
        Some(overlay) if names::upper_volume(overlay) == storage => {
            vec![overlay.to_owned(), storage.to_owned()]
        }
        _ => vec![storage.to_owned()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Layer;

    fn unit(kind: DiskKind, id: &str, volumes: &[&str]) -> Unit {
        Unit {
            kind,
            id: id.into(),
            name: id.into(),
            instance_key: None,
            worktree_key: None,
            since: None,
            volumes: volumes.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn overlay(volume: &str, lowers: &[&str]) -> (String, LayeredVolume) {
        (
            volume.to_owned(),
            LayeredVolume {
                volume: volume.to_owned(),
                upper: format!("{volume}.up"),
                lowers: lowers
                    .iter()
                    .map(|l| Layer {
                        volume: l.to_string(),
                        dir: "upper".into(),
                    })
                    .collect(),
            },
        )
    }

    /// main's db was snapshotted (its old volume `a` is the snapshot's, and main runs on an
    /// overlay `b` over it); a branch `c` stands on `a` too; an archived instance holds `d`.
    fn graph() -> DiskGraph {
        let layered = BTreeMap::from([overlay("b", &["a"]), overlay("c", &["a"])]);
        DiskGraph::new(
            vec![
                unit(DiskKind::Instance, "db", &["b"]),
                unit(DiskKind::Instance, "db@fix", &["c"]),
                unit(DiskKind::Snapshot, "snp", &["a"]),
                unit(DiskKind::Archived, "old", &["d"]),
            ],
            &layered,
        )
    }

    #[test]
    fn a_shared_layer_counts_once_and_is_freed_only_with_every_user() {
        let g = graph();
        let sizes = BTreeMap::from([
            ("a".to_owned(), Some(1000)),
            ("b.up".to_owned(), Some(10)),
            ("c.up".to_owned(), Some(20)),
            ("d".to_owned(), Some(300)),
        ]);
        let usage = g.usage(&sizes, Timestamp::from_millis(0));
        assert_eq!(usage.total_bytes, Some(1330));
        let item = |id: &str| usage.items.iter().find(|i| i.id == id).unwrap().clone();
        assert_eq!((item("db").bytes, item("db").frees), (Some(10), Some(10)));
        assert_eq!(
            (item("snp").bytes, item("snp").frees),
            (Some(1000), Some(0))
        );
        assert_eq!(
            (item("old").bytes, item("old").frees),
            (Some(300), Some(300))
        );
        assert_eq!(usage.shared.len(), 1);
        assert_eq!(usage.shared[0].volume, "a");
        assert_eq!(usage.shared[0].users.len(), 3);
        // The branch and the snapshot together still leave `a` to main.
        let both = BTreeSet::from([1, 2]);
        assert_eq!(g.freed_by(&both), BTreeSet::from(["c.up".to_owned()]));
        assert_eq!(g.kept_of(2, &both), vec!["a (instance db)".to_owned()]);
        let all = BTreeSet::from([0, 1, 2]);
        assert_eq!(g.freed_by(&all).len(), 3);
    }

    #[test]
    fn an_unmeasured_volume_leaves_its_sums_unknown() {
        let usage = graph().usage(&BTreeMap::new(), Timestamp::from_millis(0));
        assert_eq!(usage.total_bytes, None);
        assert!(usage.items.iter().all(|i| i.bytes.is_none()));
    }

    #[test]
    fn an_upper_layer_goes_after_its_overlay() {
        assert_eq!(removal_order("x.up"), vec!["x", "x.up"]);
        assert_eq!(removal_order("plain"), vec!["plain"]);
    }
}
