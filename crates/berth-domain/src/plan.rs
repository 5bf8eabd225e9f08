//! What is computed from a spec and an image alone, before anything runs: the volumes an
//! instance mounts, and the ones a copy fills.

use crate::model::{Instance, InstanceVolume};
use crate::names;

/// The volumes an instance mounts: the spec's, then one for every image `VOLUME` they do not
/// cover.
pub fn plan_volumes(
    prefix: &str,
    instance: &Instance,
    image_volumes: &[String],
) -> Vec<InstanceVolume> {
    let spec = &instance.spec;
    // A name the instance has had keeps its volume, whatever the tag says now.
    let kept = |name: &str, fresh: String| {
        instance
            .kept
            .iter()
            .find(|k| k.name == name)
            .map_or(fresh, |k| k.docker_name.clone())
    };
    let mut volumes: Vec<InstanceVolume> = spec
        .volumes
        .iter()
        .map(|v| InstanceVolume {
            name: v.name.clone(),
            docker_name: kept(
                &v.name,
                names::tagged_volume(
                    &names::spec_volume(prefix, &instance.domain_id, &instance.key, &v.name),
                    instance.volume_tag.as_deref(),
                ),
            ),
            mount_path: v.mount_path.clone(),
        })
        .collect();
    for path in image_volumes {
        let path = path.trim_end_matches('/');
        if spec.volumes.iter().any(|v| v.mount_path == path) {
            continue;
        }
        let (name, docker_name) =
            names::image_volume(prefix, &instance.domain_id, &instance.key, path);
        let docker_name = kept(
            &name,
            names::tagged_volume(&docker_name, instance.volume_tag.as_deref()),
        );
        volumes.push(InstanceVolume {
            name,
            docker_name,
            mount_path: path.to_owned(),
        });
    }
    volumes
}

/// The volumes a copy fills for `instance` (a restore's or a branch's target): every volume
/// its spec and image mount, and every other name `source` holds (kept, mounted by no spec
/// now), each fresh under the instance's (new) tag, ignoring what the instance kept before.
/// Answers those it mounts, then all of them.
pub fn copy_targets(
    prefix: &str,
    instance: &Instance,
    image_volumes: &[String],
    source: &[String],
) -> (Vec<InstanceVolume>, Vec<InstanceVolume>) {
    let mut fresh = instance.clone();
    fresh.kept.clear();
    let mounted = plan_volumes(prefix, &fresh, image_volumes);
    let mut volumes = mounted.clone();
    for name in source {
        if volumes.iter().any(|v| v.name == *name) {
            continue;
        }
        volumes.push(InstanceVolume {
            name: name.clone(),
            docker_name: names::tagged_volume(
                &names::spec_volume(prefix, &instance.domain_id, &instance.key, name),
                instance.volume_tag.as_deref(),
            ),
            mount_path: instance
                .kept
                .iter()
                .find(|k| k.name == *name)
                .map(|k| k.mount_path.clone())
                .unwrap_or_default(),
        });
    }
    (mounted, volumes)
}
