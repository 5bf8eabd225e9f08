//! `berth init --from [FILE]`: a Compose file's services become berth.toml's instances, each
//! image pinned from its tag as `berth add` pins it (through `--mirror` for Docker Hub's, an
//! image already pinned too); the command ends by naming what it renamed, and everything it
//! left out and why. A service whose image cannot be read is left out on its own. The
//! conversion itself is `crate::project::compose`; everything printed is made safe for a
//! terminal first.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use berth_core::image::PinnedImage;
use berth_docker::tags::TagReader;

use super::writes::{HEADER, Mirror, pin, write_checked};
use crate::project::compose::{COMPOSE_FILES, Inputs, LeftOut, Ready, convert};
use crate::project::envfile::{MAX_COMPOSE_BYTES, printable, read_capped};
use crate::repo::{PROJECT_FILE, Repo};

/// What the command line chose besides the file.
pub(super) struct Choices<'a> {
    pub profiles: &'a [String],
    pub only: &'a [String],
    pub env_file: Option<&'a Path>,
}

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
    choices: &Choices<'_>,
    mirror: &Mirror,
) -> anyhow::Result<ExitCode> {
    // Every line of an error escaped too: a service key or a path may hold terminal controls.
    run(repo, target, from, choices, mirror).await.map_err(|e| {
        let text = format!("{e:#}");
        anyhow::anyhow!(
            "{}",
            text.lines().map(printable).collect::<Vec<_>>().join("\n")
        )
    })
}

async fn run(
    repo: &Repo,
    target: &Path,
    from: Option<&Path>,
    choices: &Choices<'_>,
    mirror: &Mirror,
) -> anyhow::Result<ExitCode> {
    let file = compose_file(repo, from)?;
    let shown = file.display().to_string();
    let text = read_capped(&file, &shown, MAX_COMPOSE_BYTES)?;
    let dir = file
        .canonicalize()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."));
    let env = |name: &str| std::env::var(name).ok();
    let profiles: Vec<String> = choices
        .profiles
        .iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    let only: Vec<String> = choices
        .only
        .iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    let mut conversion = convert(
        &text,
        &shown,
        &Inputs {
            dir: &dir,
            root: &repo.top_level,
            profiles: &profiles,
            only: &only,
            env_file: choices.env_file,
            env: &env,
        },
    )?;
    // Every image pinned before anything is written; one that cannot be read leaves its
    // service out.
    let reader = TagReader::new();
    let mut pinned = Vec::new();
    let mut unreadable = Vec::new();
    let mut exposed_notes = Vec::new();
    for instance in &conversion.instances {
        let image = mirror.apply_to_hub(&instance.image);
        let found = match PinnedImage::parse(&image) {
            Ok(already) => Ok(already),
            Err(_) => pin(&reader, &image).await,
        };
        let image = match found {
            Ok(image) => image,
            Err(e) => {
                unreadable.push(LeftOut {
                    place: format!("services.{}.image", instance.service),
                    why: format!("left out, its image cannot be read: {e:#}"),
                });
                continue;
            }
        };
        let mut instance = instance.clone();
        if let Ready::FromImage { unless } = &instance.ready {
            // No healthcheck, no port, an image berth has no check for: the first port the
            // image EXPOSEs, as `berth add --port` would be given it.
            let exposed = reader.exposed_ports(&image).await;
            let place = format!("services.{}", instance.service);
            match exposed.first() {
                Some(&port) => {
                    exposed_notes.push(LeftOut {
                        place,
                        why: format!(
                            "it has no healthcheck and no port: its ready check is a tcp connection to {port}, the first port its image EXPOSEs ({})",
                            exposed.iter().map(u16::to_string).collect::<Vec<_>>().join(", ")
                        ),
                    });
                    instance.ready = Ready::Tcp(port);
                }
                None => {
                    unreadable.push(LeftOut {
                        place,
                        why: unless.clone(),
                    });
                    continue;
                }
            }
        }
        pinned.push((instance, image));
    }
    conversion.left_out.splice(0..0, unreadable);
    conversion.left_out.extend(exposed_notes);
    if pinned.is_empty() {
        let mut why = String::new();
        for l in &conversion.left_out {
            why.push_str(&format!("\n  {}: {}", l.place, l.why));
        }
        bail!("{shown} has no service berth can run, so nothing was written:{why}");
    }
    let mut text = format!(
        "{HEADER}# Converted from {} by `berth init --from`.\n",
        printable(&file.file_name().unwrap_or_default().to_string_lossy())
    );
    if pinned
        .iter()
        .any(|(i, _)| i.env.iter().any(|(_, v)| v.contains("${")) || !i.env_file.is_empty())
    {
        text.push_str(
            "# ${VAR} in env and command, and env_file, are read by `berth up` from the shell, .env\n\
             # and the files named: no value of them is written here.\n",
        );
    }
    for (instance, image) in &pinned {
        text.push('\n');
        text.push_str(&instance.table(image.as_str()));
    }
    write_checked(target, &text)?;
    println!("wrote {PROJECT_FILE} from {}:", printable(&shown));
    for (instance, image) in &pinned {
        println!("  {:<10} {}", instance.name, printable(image.as_str()));
    }
    let renamed: Vec<_> = conversion
        .renamed
        .iter()
        .filter(|(s, _)| pinned.iter().any(|(i, _)| i.service == *s))
        .collect();
    if !renamed.is_empty() {
        println!(
            "renamed {} service(s): an instance's name is lower case, with one '-' for each run of \
             '_' and other characters but a-z and 0-9, from its first letter (then -2, -3, ... to \
             keep it unique); it is also the host name other instances reach it by, so the \
             application's settings must follow:",
            renamed.len()
        );
        for (service, name) in renamed {
            println!("  {} -> {name}", printable(service));
        }
    }
    if conversion.left_out.is_empty() {
        println!("left nothing out");
    } else {
        println!(
            "left out {} thing(s) berth.toml has no place for, or berth's contract refuses:",
            conversion.left_out.len()
        );
        for l in &conversion.left_out {
            println!("  {}: {}", printable(&l.place), printable(&l.why));
        }
    }
    println!("start them with `berth up`; `berth env` prints how to connect");
    Ok(ExitCode::SUCCESS)
}
