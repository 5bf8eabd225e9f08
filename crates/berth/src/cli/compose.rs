//! `berth init --from [FILE]`: a Compose file's services become berth.toml's instances, each
//! image pinned from its tag as `berth add` pins it; the command ends by naming everything it
//! left out and why. The conversion itself is `crate::project::compose`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use berth_core::image::PinnedImage;
use berth_docker::tags::TagReader;

use super::writes::{HEADER, Mirror, pin, write_checked};
use crate::project::compose::{COMPOSE_FILES, Inputs, convert};
use crate::repo::{PROJECT_FILE, Repo};

/// The Compose file `--from` names (relative to the current directory), or without a name the
/// first of Compose's own file names at the top of the repository.
fn compose_file(repo: &Repo, from: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(from) = from {
        return Ok(from.to_path_buf());
    }
    COMPOSE_FILES
        .iter()
        .map(|name| repo.top_level.join(name))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "found no Compose file at the top of the repository ({}): name one, `berth init --from FILE`",
                COMPOSE_FILES.join(", ")
            )
        })
}

pub(super) async fn init_from(
    repo: &Repo,
    target: &Path,
    from: Option<&Path>,
    profiles: &[String],
    mirror: &Mirror,
) -> anyhow::Result<ExitCode> {
    let file = compose_file(repo, from)?;
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("could not read {}", file.display()))?;
    let dir = file
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let shown = file.display().to_string();
    let env = |name: &str| std::env::var(name).ok();
    let profiles: Vec<String> = profiles
        .iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    let conversion = convert(
        &text,
        &shown,
        &Inputs {
            dir: &dir,
            profiles: &profiles,
            env: &env,
        },
    )?;
    if conversion.instances.is_empty() {
        let mut why = String::new();
        for l in &conversion.left_out {
            why.push_str(&format!("\n  {}: {}", l.place, l.why));
        }
        bail!("{shown} has no service berth can run, so nothing was written:{why}");
    }
    // Every image pinned before anything is written: one tag that cannot be read writes nothing.
    let reader = TagReader::new();
    let mut text = format!(
        "{HEADER}# Converted from {} by `berth init --from`.\n",
        file.file_name().unwrap_or_default().to_string_lossy()
    );
    let mut pinned = Vec::new();
    for instance in &conversion.instances {
        let image = match PinnedImage::parse(&instance.image) {
            Ok(already) => already,
            Err(_) => pin(&reader, &mirror.apply_to_hub(&instance.image))
                .await
                .with_context(|| format!("services.{}.image", instance.service))?,
        };
        text.push('\n');
        text.push_str(&instance.table(image.as_str()));
        pinned.push((instance.name.clone(), image));
    }
    write_checked(target, &text)?;
    println!("wrote {PROJECT_FILE} from {shown}:");
    for (name, image) in &pinned {
        println!("  {name:<10} {image}");
    }
    if conversion.left_out.is_empty() {
        println!("left nothing out");
    } else {
        println!(
            "left out {} thing(s) berth.toml has no place for, or berth's contract refuses:",
            conversion.left_out.len()
        );
        for l in &conversion.left_out {
            println!("  {}: {}", l.place, l.why);
        }
    }
    println!("start them with `berth up`; `berth env` prints how to connect");
    Ok(ExitCode::SUCCESS)
}
