//! Deterministic engine object names: a container, network or volume made after a crash gets
//! the same name as before, so berth finds it again instead of making a second one.
//!
//! Names start with the daemon's prefix (`berth` by default, one per test run), then 12 hex
//! digits of the domain id, then a slug of the instance key with 8 hex digits of its sha256
//! (the slug alone could collide: engine names cannot hold '@').

use sha2::{Digest as _, Sha256};

use crate::ids::DomainId;

fn short_hash(text: &str) -> String {
    hex::encode(&Sha256::digest(text.as_bytes())[..4])
}

fn domain_part(domain: &DomainId) -> String {
    domain.hex()[..12].to_owned()
}

/// The container of instance `key` in `domain`.
pub fn container(prefix: &str, domain: &DomainId, key: &str) -> String {
    let slug: String = key
        .chars()
        .map(|c| if c == '@' { '_' } else { c })
        .collect();
    format!(
        "{prefix}-{}-{slug}-{}",
        domain_part(domain),
        short_hash(key)
    )
}

/// The network of a domain.
pub fn domain_network(prefix: &str, domain: &DomainId) -> String {
    format!("{prefix}-{}", domain_part(domain))
}

/// The network of one worktree key's view of a domain: its instances, and the domain's shared
/// ones, under their aliases; and the containers of workspaces linked with that key.
pub fn view_network(prefix: &str, domain: &DomainId, worktree_key: &str) -> String {
    format!(
        "{}-wt-{}",
        domain_network(prefix, domain),
        short_hash(worktree_key)
    )
}

/// A volume the spec names.
pub fn spec_volume(prefix: &str, domain: &DomainId, key: &str, name: &str) -> String {
    format!("{}.vol.{name}", container(prefix, domain, key))
}

/// A volume for an image `VOLUME` at `path` that the spec does not cover, and its name in the
/// instance's `volumes` (`image-<slug of the path>`).
pub fn image_volume(prefix: &str, domain: &DomainId, key: &str, path: &str) -> (String, String) {
    let docker = format!(
        "{}.img.{}",
        container(prefix, domain, key),
        short_hash(path)
    );
    let slug: String = path
        .trim_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    (format!("image-{slug}"), docker)
}

/// An instance volume's name under the tag of the copy that filled it (a branch or a restore):
/// a fresh name, so a copy never writes into a volume an instance mounted before.
pub fn tagged_volume(docker_name: &str, tag: Option<&str>) -> String {
    match tag {
        Some(tag) => format!("{docker_name}.{tag}"),
        None => docker_name.to_owned(),
    }
}

/// The tag of a copy: `c` and 8 hex digits of its id.
pub fn copy_tag(copy: &crate::ids::CopyId) -> String {
    format!("c{}", &copy.hex()[..8])
}

/// The volume of snapshot `snapshot` that holds its instance's volume `name`.
pub fn snapshot_volume(prefix: &str, snapshot: &crate::ids::SnapshotId, name: &str) -> String {
    format!("{prefix}-snp-{}.{name}", &snapshot.hex()[..16])
}

/// The overlay volume a branch of a running instance stands on for the instance's volume
/// `name`: a copy of its upper layer, made under a freeze, over its lower layers.
pub fn frozen_layer(prefix: &str, copy: &crate::ids::CopyId, name: &str) -> String {
    format!("{prefix}-frz-{}.{name}", &copy.hex()[..16])
}

/// The volume that holds overlay volume `volume`'s upper layer (and its work directory).
pub fn upper_volume(volume: &str) -> String {
    format!("{volume}.up")
}

/// The start of the names of the scratch volumes and helpers with which this store's daemon
/// asks the engine whether it mounts overlay volumes: the store's id in it, so two daemons on
/// one engine and prefix never touch each other's.
pub fn overlay_probe(prefix: &str, store_id: &str) -> String {
    let id = store_id.strip_prefix("bst:").unwrap_or(store_id);
    format!("{prefix}-layers-probe-{}", &id[..id.len().min(16)])
}

/// The never-started container a copy reads and writes volumes through.
pub fn copy_helper(prefix: &str, copy: &crate::ids::CopyId, index: usize) -> String {
    format!("{prefix}-copy-{}-{index}", &copy.hex()[..16])
}

/// The private container, and its network, that template `id` of `domain` is made with.
pub fn template(prefix: &str, domain: &DomainId, id: &str) -> String {
    format!("{prefix}-tpl-{}-{id}", domain_part(domain))
}

/// The volume of template `id` that holds what its image writes at `path`.
pub fn template_volume(prefix: &str, domain: &DomainId, id: &str, path: &str) -> String {
    format!("{}.{}", template(prefix, domain, id), short_hash(path))
}

/// The volume a flatten copies an instance's volume `name`'s layers into.
pub fn flat_volume(prefix: &str, copy: &crate::ids::CopyId, name: &str) -> String {
    format!("{prefix}-flat-{}.{name}", &copy.hex()[..16])
}

/// The scratch overlay volume through which a flatten reads the layers of the instance's
/// `index`th volume it flattens.
pub fn flat_reader(prefix: &str, copy: &crate::ids::CopyId, index: usize) -> String {
    format!("{prefix}-flat-{}-r{index}", &copy.hex()[..16])
}

/// An instance key's lineage: the key without its generation suffix (`db@wt.3` is the third
/// generation of `db@wt`, made after the two before it were archived). Host ports stay with a
/// lineage: a new generation gets the ports the one before it had.
pub fn key_lineage(key: &str) -> &str {
    match key.rsplit_once('.') {
        Some((base, n))
            if !base.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) =>
        {
            base
        }
        _ => key,
    }
}

/// True when a Docker volume name is one [`image_volume`] made (not one the spec names).
pub fn is_image_volume(docker_name: &str) -> bool {
    docker_name.contains(".img.")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_overlay_probe_is_named_for_the_store_and_an_upper_volume_for_its_overlay() {
        assert_eq!(
            overlay_probe("berth", "bst:0123456789abcdef0123456789abcdef"),
            "berth-layers-probe-0123456789abcdef"
        );
        assert_ne!(
            overlay_probe("berth", "bst:0123456789abcdef0123456789abcdef"),
            overlay_probe("berth", "bst:fedcba98765432100123456789abcdef")
        );
        assert_eq!(
            upper_volume("berth-x-db.vol.data.c1"),
            "berth-x-db.vol.data.c1.up"
        );
    }

    use super::*;

    #[test]
    fn a_keys_lineage_is_the_key_without_its_generation_suffix() {
        assert_eq!(key_lineage("db@shop-1a2b3c4d.3"), "db@shop-1a2b3c4d");
        assert_eq!(key_lineage("db@shop-1a2b3c4d"), "db@shop-1a2b3c4d");
        assert_eq!(key_lineage("db.2"), "db");
        assert_eq!(key_lineage("db@my.repo-1a2b3c4d"), "db@my.repo-1a2b3c4d");
        assert_eq!(key_lineage("v1.x"), "v1.x");
        assert_eq!(key_lineage("db."), "db.");
    }

    #[test]
    fn names_are_deterministic_and_keys_that_differ_only_by_at_do_not_collide() {
        let d = DomainId::parse("rdm:0a1b2c3d-0000-4000-8000-000000000000").unwrap();
        assert_eq!(container("berth", &d, "db"), container("berth", &d, "db"));
        assert!(container("berth", &d, "db").starts_with("berth-0a1b2c3d0000-db-"));
        assert_ne!(
            container("berth", &d, "db@wt"),
            container("berth", &d, "db_wt")
        );
        assert_eq!(
            spec_volume("berth", &d, "db", "data"),
            format!("{}.vol.data", container("berth", &d, "db"))
        );
        let (name, docker) = image_volume("berth", &d, "db", "/var/lib/Data");
        assert_eq!(name, "image-var-lib-data");
        assert!(is_image_volume(&docker));
        assert!(!is_image_volume(&spec_volume(
            "berth",
            &d,
            "db",
            "image-data"
        )));
    }
}
