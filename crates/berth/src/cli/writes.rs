//! Writing berth.toml for `berth init`, `berth add` and `berth pin`: the header a new file
//! starts with, an image pinned from what its registry serves under its tag, an instance's
//! pin rewritten in place, and the write itself, checked as any berth.toml first and done in one rename (or not at all).

use std::path::Path;

use anyhow::Context;
use berth_core::image::PinnedImage;
use berth_docker::tags::{TagReader, TagRef};

use crate::repo::PROJECT_FILE;

/// The text a new berth.toml starts with.
pub(super) const HEADER: &str = "\
# The services this repository runs beside its code, one [instances.NAME] table each.
# `berth up` starts them (one set per git worktree), `berth env` prints their connect
# variables, `berth pin` re-reads their tags. Images are pinned by digest: the tag is a
# label; `berth add NAME IMAGE[:TAG]` writes a new one. See docs/cli.md in berth.
";

/// Pins `image` (a tag) from its registry.
pub(super) async fn pin(reader: &TagReader, image: &str) -> anyhow::Result<PinnedImage> {
    let tag = TagRef::parse(image).map_err(anyhow::Error::msg)?;
    let found = reader.read(&tag, true).await.map_err(anyhow::Error::msg)?;
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
