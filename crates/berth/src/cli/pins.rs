//! Tags in, digests out: `berth init`, `berth add` and `berth pin` write berth.toml's pins
//! from what registries serve under tags. The daemon never resolves a tag; these commands do,
//! and write the digest they read beside the tag (`postgres:17@sha256:...`).

use std::process::ExitCode;

use anyhow::{Context, bail};
use berth_core::image::PinnedImage;
use berth_docker::tags::{TagReader, TagRef};
use clap::Args;
use serde_json::json;

use super::writes::{HEADER, Mirror, pin, set_image, write_checked};
use crate::project::presets::{NewInstance, PRESETS, Preset, preset, preset_for_repository};
use crate::repo::{PROJECT_FILE, Repo};

#[derive(Args, Debug)]
pub struct InitArgs {
    /// Services to add, comma-separated: postgres, redis, mailpit, mysql, mongo.
    #[arg(long, value_delimiter = ',', value_name = "SERVICE,...")]
    with: Vec<String>,
    #[command(flatten)]
    mirror: Mirror,
    /// Convert a Compose file's services instead (without FILE: compose.yaml, compose.yml,
    /// docker-compose.yaml or docker-compose.yml at the top of the repository).
    #[arg(long, value_name = "FILE", num_args = 0..=1, conflicts_with = "with")]
    from: Option<Option<std::path::PathBuf>>,
    /// With --from: the Compose profiles to convert besides the services in none (`*`: all).
    #[arg(
        long = "profile",
        env = "COMPOSE_PROFILES",
        value_delimiter = ',',
        value_name = "PROFILE"
    )]
    profiles: Vec<String>,
    /// With --from: convert only these Compose services (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "SERVICE,...",
        requires = "from"
    )]
    only: Vec<String>,
    /// With --from: read `${VAR}` from this file instead of the .env beside the Compose file.
    #[arg(long, value_name = "FILE", requires = "from")]
    env_file: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
pub struct AddArgs {
    /// The instance's name in berth.toml.
    name: String,
    /// The image by tag (`postgres:17`, `127.0.0.1:5000/team/app:1`; no tag means `latest`).
    image: String,
    /// The port that answers when the image is ready (a tcp ready check); needed for an image
    /// berth has no preset for.
    #[arg(long)]
    port: Option<u16>,
}

#[derive(Args, Debug)]
pub struct PinArgs {
    /// The instances to re-pin (default: every one whose image carries a tag).
    names: Vec<String>,
    /// Print what changed as JSON.
    #[arg(long)]
    json: bool,
}

fn presets_named(names: &[String]) -> anyhow::Result<Vec<&'static Preset>> {
    names
        .iter()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
        .map(|n| {
            preset(n).ok_or_else(|| {
                anyhow::anyhow!(
                    "--with {n:?} is not a service berth knows; it knows {}",
                    PRESETS
                        .iter()
                        .map(|p| p.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
        })
        .collect()
}

/// `berth init [--with ...]`.
pub async fn init(args: InitArgs) -> anyhow::Result<ExitCode> {
    let repo = Repo::discover()?;
    let path = repo.project_file();
    if path.exists() {
        bail!(
            "{} already exists ({}): add instances to it with `berth add NAME IMAGE[:TAG]`",
            PROJECT_FILE,
            path.display()
        );
    }
    if let Some(from) = &args.from {
        return super::compose::init_from(
            &repo,
            &path,
            from.as_deref(),
            &super::compose::Choices {
                profiles: &args.profiles,
                only: &args.only,
                env_file: args.env_file.as_deref(),
            },
            &args.mirror,
        )
        .await;
    }
    let presets = presets_named(&args.with)?;
    let reader = TagReader::new();
    let mut text = HEADER.to_owned();
    let mut pinned = Vec::new();
    for p in &presets {
        let image = pin(&reader, &args.mirror.apply(p.image)).await?;
        text.push('\n');
        text.push_str(
            &NewInstance {
                name: p.name,
                image: image.as_str(),
                preset: Some(p),
                port: None,
            }
            .table(),
        );
        pinned.push((p.name, image));
    }
    if presets.is_empty() {
        std::fs::write(&path, &text)
            .with_context(|| format!("could not write {}", path.display()))?;
        println!(
            "wrote {PROJECT_FILE} with no instances: add one with `berth add NAME IMAGE[:TAG]`, \
             or start again with `berth init --with postgres,redis`"
        );
        return Ok(ExitCode::SUCCESS);
    }
    write_checked(&path, &text)?;
    println!("wrote {PROJECT_FILE}:");
    for (name, image) in &pinned {
        println!("  {name:<10} {image}");
    }
    println!("start them with `berth up`; `berth env` prints how to connect");
    Ok(ExitCode::SUCCESS)
}

/// `berth add NAME IMAGE[:TAG] [--port P]`.
pub async fn add(args: AddArgs) -> anyhow::Result<ExitCode> {
    let repo = Repo::discover()?;
    let path = repo.project_file();
    let existing = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => bail!("could not read {}: {e}", path.display()),
    };
    if let Some(text) = &existing
        && let Ok(doc) = text.parse::<toml_edit::DocumentMut>()
        && doc
            .get("instances")
            .and_then(|i| i.get(&args.name))
            .is_some()
    {
        bail!(
            "{PROJECT_FILE} already has instances.{}: `berth pin {}` re-reads its tag",
            args.name,
            args.name
        );
    }
    let tag = TagRef::parse(&args.image).map_err(anyhow::Error::msg)?;
    // The image first: a name that is not there is said as such, before anything is asked of
    // its ports.
    let reader = TagReader::new();
    let image = pin(&reader, &args.image).await?;
    let (preset, port) = match args.port {
        Some(port) => (None, Some(port)),
        None => match preset_for_repository(&tag.registry_repository()) {
            Some(preset) => (Some(preset), None),
            // No preset: the image's one `EXPOSE`d port is the one that answers when ready.
            None => (None, Some(exposed_port(&reader, &image, &tag).await?)),
        },
    };
    let mut text = existing.unwrap_or_else(|| HEADER.to_owned());
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push('\n');
    text.push_str(
        &NewInstance {
            name: &args.name,
            image: image.as_str(),
            preset,
            port,
        }
        .table(),
    );
    write_checked(&path, &text)?;
    println!("added instances.{} to {PROJECT_FILE}: {image}", args.name);
    Ok(ExitCode::SUCCESS)
}

/// The one tcp port the image's config exposes, for an image berth has no preset for; an
/// error asking for `--port` (and naming what it exposes) otherwise.
async fn exposed_port(
    reader: &TagReader,
    image: &PinnedImage,
    tag: &TagRef,
) -> anyhow::Result<u16> {
    let presets = || {
        PRESETS
            .iter()
            .map(|p| p.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match reader.exposed_tcp_ports(image).await.as_deref() {
        Some([port]) => {
            eprintln!("berth: {tag} exposes one tcp port, {port}: its ready check is tcp {port}");
            Ok(*port)
        }
        Some([]) => bail!(
            "{tag} exposes no tcp port and berth has no preset for it: give --port PORT, the port \
             that answers when it is ready (its presets are {})",
            presets()
        ),
        Some(ports) => bail!(
            "{tag} exposes the tcp ports {} and berth has no preset for it: give --port PORT, the \
             one that answers when it is ready",
            ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => bail!(
            "berth has no preset for {tag}, and could not read its config from the registry to \
             find its port: give --port PORT, the port that answers when it is ready (its \
             presets are {})",
            presets()
        ),
    }
}

/// `berth pin [NAME...]`.
pub async fn pin_command(args: PinArgs) -> anyhow::Result<ExitCode> {
    let repo = Repo::discover()?;
    let project = super::load_project(&repo)?;
    let selected = project.select(&args.names)?;
    let text = std::fs::read_to_string(&project.path)
        .with_context(|| format!("could not read {}", project.path.display()))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("could not read {PROJECT_FILE} again"))?;
    let reader = TagReader::new();
    let mut report = Vec::new();
    for def in selected {
        let old = PinnedImage::parse(&def.image)
            .with_context(|| format!("instances.{}.image is not pinned", def.name))?;
        let Some(tag) = TagRef::of_pinned(&old) else {
            if !args.names.is_empty() {
                bail!(
                    "instances.{}.image carries no tag, so there is nothing to re-read: write \
                     it as NAME:TAG@DIGEST, or `berth add` it again",
                    def.name
                );
            }
            continue;
        };
        let found = reader.read(&tag).await.map_err(anyhow::Error::msg)?;
        let new = tag.pin(&found.digest);
        let changed = new.digest() != old.digest();
        if changed {
            set_image(&mut doc, &def.name, new.as_str());
        }
        report.push((def.name.clone(), tag.to_string(), old, new, changed));
    }
    let changed = report.iter().filter(|r| r.4).count();
    if changed > 0 {
        write_checked(&project.path, &doc.to_string())?;
    }
    if args.json {
        let items: Vec<_> = report
            .iter()
            .map(|(name, tag, old, new, changed)| {
                json!({"name": name, "tag": tag, "from": old.digest().as_str(),
                       "to": new.digest().as_str(), "changed": changed})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"items": items}))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    if report.is_empty() {
        println!("no instance in {PROJECT_FILE} carries a tag to re-read");
    }
    for (name, tag, old, new, changed) in &report {
        if *changed {
            println!(
                "{name:<12} {tag}: {} -> {}",
                short(old.digest().as_str()),
                short(new.digest().as_str())
            );
        } else {
            println!(
                "{name:<12} {tag}: unchanged ({})",
                short(old.digest().as_str())
            );
        }
    }
    if changed > 0 {
        println!("rewrote {changed} pin(s) in {PROJECT_FILE}; `berth up` runs them");
    }
    Ok(ExitCode::SUCCESS)
}

/// `sha256:` and the first 12 hex digits.
fn short(digest: &str) -> &str {
    &digest[..digest.len().min(19)]
}
