//! Volume sizes as people mean them. The engine measures a plain volume by walking its data; an
//! overlay volume's data is not there while no container mounts it, so its size is that of the
//! layers it is made of: its upper layer's volume and the volumes under it. Overlapping files
//! count once per layer that holds them, so for an overlay this is an upper bound of its
//! apparent size, and the disk its layers take.

use std::collections::{BTreeMap, BTreeSet};

use crate::runtime::{Runtime, RuntimeError};
use crate::store::Store;

/// The size of each of `names`, `None` where the engine could not measure it (or one of its
/// layers).
pub async fn volume_sizes(
    store: &Store,
    runtime: &dyn Runtime,
    names: &[String],
) -> Result<BTreeMap<String, Option<u64>>, RuntimeError> {
    let asked = names.to_vec();
    let layered = store
        .read(move |tx| {
            let mut found = BTreeMap::new();
            for name in &asked {
                if let Some(l) = tx.layered_volume(name)? {
                    let mut parts = vec![l.upper.clone()];
                    parts.extend(l.lowers.iter().map(|layer| layer.volume.clone()));
                    found.insert(name.clone(), parts);
                }
            }
            Ok(found)
        })
        .await
        .unwrap_or_default();
    let measured: BTreeSet<String> = names
        .iter()
        .flat_map(|n| layered.get(n).cloned().unwrap_or_else(|| vec![n.clone()]))
        .collect();
    let sizes = runtime
        .volume_bytes(&measured.into_iter().collect::<Vec<_>>())
        .await?;
    Ok(names
        .iter()
        .map(|n| {
            let size = match layered.get(n) {
                Some(parts) => parts
                    .iter()
                    .map(|p| sizes.get(p).copied().flatten())
                    .sum::<Option<u64>>(),
                None => sizes.get(n).copied().flatten(),
            };
            (n.clone(), size)
        })
        .collect())
}
