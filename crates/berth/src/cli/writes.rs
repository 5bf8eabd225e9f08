//! Writing berth.toml for `berth init`, `berth add` and `berth pin`: the header a new file
//! starts with, an image pinned from what its registry serves under its tag, an instance's
//! pin rewritten in place, the registry mirror Docker Hub names are read through (`--mirror`), and
//! the write itself, checked as any berth.toml first and done in one rename (or not at all).

use std::path::Path;

use anyhow::Context;
use berth_core::image::PinnedImage;
use berth_docker::tags::{TagReader, TagRef};
use clap::Args;

use crate::repo::{PROJECT_FILE, Repo};

/// The text a new berth.toml starts with.
pub(super) const HEADER: &str = "\
# The services this repository runs beside its code, one [instances.NAME] table each.
# `berth up` starts them (one set per git worktree), `berth env` prints their connect
# variables, `berth pin` re-reads their tags. Images are pinned by digest: the tag is a
# label; `berth add NAME IMAGE[:TAG]` writes a new one. See docs/cli.md in berth.
";

/// Pins `image` (a tag) from its registry. Docker Hub out of reach is told with the way
/// around it (`--mirror`, `BERTH_IMAGE_MIRROR`).
pub(super) async fn pin(reader: &TagReader, image: &str) -> anyhow::Result<PinnedImage> {
    let tag = TagRef::parse(image).map_err(anyhow::Error::msg)?;
    let found = reader.read(&tag).await.map_err(|e| {
        let hub = matches!(
            tag.host().as_str(),
            "docker.io" | "index.docker.io" | "registry-1.docker.io"
        );
        if hub && e.kind == berth_docker::tags::TagErrorKind::Unreachable {
            anyhow::anyhow!(
                "{e}; where Docker Hub is out of reach, `--mirror PREFIX` (or BERTH_IMAGE_MIRROR) \
                 reads its images through a registry mirror you can reach"
            )
        } else {
            anyhow::Error::msg(e)
        }
    })?;
    Ok(tag.pin(&found.digest))
}

/// Checks `text` as berth.toml and writes it to `path` in one rename, or writes nothing.
pub(super) fn write_checked(path: &Path, text: &str) -> anyhow::Result<()> {
    crate::project::parse(text, PROJECT_FILE).map_err(anyhow::Error::new)?;
    let temp = path.with_extension("toml.berth-new");
    std::fs::write(&temp, text).with_context(|| format!("could not write {}", temp.display()))?;
    std::fs::rename(&temp, path).with_context(|| format!("could not write {}", path.display()))
}

/// Sets `instances.NAME.image`, keeping the comments and spacing around the value.
pub(super) fn set_image(doc: &mut toml_edit::DocumentMut, name: &str, image: &str) {
    let item = &mut doc["instances"][name]["image"];
    let decor = item.as_value().map(|v| v.decor().clone());
    let mut value = toml_edit::Value::from(image);
    if let Some(decor) = decor {
        *value.decor_mut() = decor;
    }
    *item = toml_edit::Item::Value(value);
}

/// The registry mirror Docker Hub's images are read from instead (`--mirror`).
#[derive(Args, Debug, Clone)]
pub struct Mirror {
    /// Take the presets' images (and with --from, the Compose file's Docker Hub images) from this
    /// registry prefix instead of Docker Hub (`registry.example.com/dockerhub`: `postgres:17`
    /// becomes `registry.example.com/dockerhub/postgres:17`).
    #[arg(long, env = "BERTH_IMAGE_MIRROR", value_name = "PREFIX")]
    mirror: Option<String>,
}

impl Mirror {
    /// `image`, a Docker Hub name, under the mirror when there is one.
    pub(super) fn apply(&self, image: &str) -> String {
        match self.mirror.as_deref().map(|m| m.trim_end_matches('/')) {
            Some(prefix) if !prefix.is_empty() => format!("{prefix}/{image}"),
            _ => image.to_owned(),
        }
    }

    /// `image` under the mirror when it names Docker Hub (`postgres:16`, `bitnami/redis`,
    /// `docker.io/library/postgres`); an image of another registry as it is.
    pub(super) fn apply_to_hub(&self, image: &str) -> String {
        if self
            .mirror
            .as_deref()
            .is_none_or(|m| m.trim_end_matches('/').is_empty())
        {
            return image.to_owned();
        }
        let hub = image
            .strip_prefix("docker.io/")
            .or_else(|| image.strip_prefix("index.docker.io/"));
        let first = image.split('/').next().unwrap_or(image);
        let names_registry = image.contains('/')
            && (first.contains('.') || first.contains(':') || first == "localhost");
        match hub {
            Some(rest) => self.apply(rest.strip_prefix("library/").unwrap_or(rest)),
            None if names_registry => image.to_owned(),
            None => self.apply(image),
        }
    }
}

/// Rewrites berth.toml's pin of `name` from `from` to `to`; `false` when the file pins
/// something else there (a person changed it meanwhile), which is left as it is.
pub(super) fn repin(repo: &Repo, name: &str, from: &str, to: &str) -> anyhow::Result<bool> {
    let project = super::load_project(repo)?;
    if !project
        .select(&[])?
        .iter()
        .any(|d| d.name == name && d.image == from)
    {
        return Ok(false);
    }
    let text = std::fs::read_to_string(&project.path)
        .with_context(|| format!("could not read {}", project.path.display()))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("could not read {} again", project.path.display()))?;
    super::writes::set_image(&mut doc, name, to);
    super::writes::write_checked(&project.path, &doc.to_string())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::Mirror;

    #[test]
    fn a_mirror_takes_docker_hubs_names_and_leaves_other_registries() {
        let m = Mirror {
            mirror: Some("mirror.example/hub/".into()),
        };
        assert_eq!(
            m.apply_to_hub("postgres:16"),
            "mirror.example/hub/postgres:16"
        );
        assert_eq!(
            m.apply_to_hub("miniflux/miniflux"),
            "mirror.example/hub/miniflux/miniflux"
        );
        assert_eq!(
            m.apply_to_hub("docker.io/library/redis:7"),
            "mirror.example/hub/redis:7"
        );
        assert_eq!(m.apply_to_hub("ghcr.io/o/app:1"), "ghcr.io/o/app:1");
        assert_eq!(m.apply_to_hub("localhost:5000/app"), "localhost:5000/app");
        let none = Mirror { mirror: None };
        assert_eq!(none.apply_to_hub("postgres:16"), "postgres:16");
        assert_eq!(
            none.apply_to_hub("docker.io/library/redis:7"),
            "docker.io/library/redis:7"
        );
    }
}
