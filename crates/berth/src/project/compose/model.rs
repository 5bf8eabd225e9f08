//! What a conversion is made of: what one service becomes (`Converted`, its `Ready` check),
//! what is left out and why (`LeftOut`), the whole `Conversion`, and what it reads besides the
//! file (`Inputs`).

use std::path::Path;

use serde_norway::Value;

/// The file names Compose looks for, in its order.
pub const COMPOSE_FILES: [&str; 4] = [
    "compose.yaml",
    "compose.yml",
    "docker-compose.yaml",
    "docker-compose.yml",
];

/// What one service becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Converted {
    /// Its name in berth.toml (and its alias).
    pub name: String,
    /// Its name in the Compose file.
    pub service: String,
    /// The image as the Compose file names it (a tag, or already pinned).
    pub image: String,
    /// In berth.toml's form (`${VAR}` references, `$$` for `$`).
    pub command: Option<Vec<String>>,
    /// In berth.toml's form.
    pub env: Vec<(String, String)>,
    /// Paths relative to the repository's top.
    pub env_file: Vec<String>,
    pub volumes: Vec<(String, String)>,
    /// The Compose volume each named volume came from, and its name here.
    pub volume_sources: Vec<(String, String)>,
    pub ready: Ready,
    /// The container ports it published.
    pub ports: Vec<u16>,
    /// The known database it is (`postgres`, `mysql`, `redis`), for its connection URL.
    pub database: Option<&'static str>,
    pub connect: Vec<(String, String)>,
}

/// A ready check as berth.toml writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ready {
    Tcp(u16),
    Exec(Vec<String>),
    /// A known image's own check, as `berth add` writes it (berth.toml's inline table).
    Preset(&'static str),
    /// A tcp check of the first port the image EXPOSEs, once its config is read; the service is
    /// left out `unless` it exposes one.
    FromImage {
        unless: String,
    },
}

/// Something left out: where in the Compose file, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    pub place: String,
    pub why: String,
}

/// The whole conversion.
#[derive(Debug, Clone, Default)]
pub struct Conversion {
    pub instances: Vec<Converted>,
    /// `(service, instance)` for each service whose name changed.
    pub renamed: Vec<(String, String)>,
    pub left_out: Vec<LeftOut>,
}

/// What the conversion reads besides the file.
pub struct Inputs<'a> {
    /// The Compose file's folder: env files and `.env` are read from it.
    pub dir: &'a Path,
    /// The repository's top: no file outside it is read for a service.
    pub root: &'a Path,
    /// The active profiles (`--profile`, or COMPOSE_PROFILES); `*` activates all. Empty: the
    /// `.env` file's COMPOSE_PROFILES.
    pub profiles: &'a [String],
    /// `--only`: the services to convert (all when empty).
    pub only: &'a [String],
    /// `--env-file`: read instead of `.env` for `${VAR}`.
    pub env_file: Option<&'a Path>,
    /// The shell's environment.
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

/// A YAML key as text.
pub(crate) fn key_text(key: &Value) -> String {
    match key {
        Value::String(s) => s.clone(),
        other => serde_norway::to_string(other)
            .unwrap_or_default()
            .trim()
            .to_owned(),
    }
}
