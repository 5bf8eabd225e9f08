//! The checks of an instance's fields, one method each: what each value must be, named at its
//! place (`instances.NAME.FIELD`), with the spec's own limits.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::LazyLock;
use std::time::Duration;

use berth_core::image::PinnedImage;
use berth_core::spec::{MAX_IDLE_SECONDS, MAX_VOLUMES, mount_path_problem};
use regex::Regex;
use toml::de::DeValue;

use super::definition::ReadyDef;
use super::reading::{Checker, Item, display_key};
use super::units::{cores_to_millis, parse_cpu, parse_size};

static ENV_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$").unwrap());
static VOLUME_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[a-z][a-z0-9-]{0,30}$").unwrap());
static READY_USER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9._-]{1,64}$").unwrap());
impl Checker<'_> {
    pub(super) fn image(&mut self, value: &Item<'_>, place: &str) -> Option<String> {
        let text = self.string(value, place)?;
        match PinnedImage::parse(&text) {
            Ok(_) => Some(text),
            Err(berth_core::image::ReferenceError::NotPinned) if !text.contains("@sha256:") => {
                self.problem(
                    value.span(),
                    format!(
                        "{place} {text:?} is not pinned by digest: berth runs images by digest only; write repo[:tag]@sha256:<64 hex> (`docker inspect --format '{{{{index .RepoDigests 0}}}}' IMAGE` prints it)"
                    ),
                );
                None
            }
            Err(e) => {
                self.problem(value.span(), format!("{place} {text:?} {e}"));
                None
            }
        }
    }

    /// `env_file`: paths relative to berth.toml's folder, inside the repository, with no
    /// reference in them (they are read at `berth up`, not here).
    pub(super) fn env_files(&mut self, value: &Item<'_>, place: &str) -> Vec<String> {
        let Some(paths) = self.strings(value, place, 1, "[\".env\"]") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, p) in paths.into_iter().enumerate() {
            let path = std::path::Path::new(&p);
            let outside = path.is_absolute()
                || super::envfile::normalize(path).starts_with("..")
                || p.is_empty();
            if outside || p.chars().any(char::is_control) {
                self.problem(
                    value.span(),
                    format!("{place}[{i}] must be a path inside the repository, relative to {} (such as \".env\")", self.shown),
                );
            } else {
                out.push(p);
            }
        }
        out
    }

    pub(super) fn env(&mut self, value: &Item<'_>, place: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(table) = self.table(value, place, "{ POSTGRES_PASSWORD = \"dev\" }") else {
            return out;
        };
        for (key, v) in table.iter() {
            let name = key.get_ref().to_string();
            let p = format!("{place}.{}", display_key(&name));
            if !ENV_NAME.is_match(&name) {
                self.problem(
                    key.span(),
                    format!("{p} is not an environment variable name (a letter or '_', then letters, digits or '_', at most 128)"),
                );
                continue;
            }
            let text = match v.get_ref() {
                DeValue::String(s) => s.to_string(),
                DeValue::Integer(i) => i.to_string(),
                DeValue::Float(f) => f.to_string(),
                DeValue::Boolean(b) => b.to_string(),
                other => {
                    self.problem(
                        v.span(),
                        format!(
                            "{p} must be a string (or a number or boolean), not {}",
                            other.type_str()
                        ),
                    );
                    continue;
                }
            };
            out.insert(name, text);
        }
        out
    }

    pub(super) fn volumes(&mut self, value: &Item<'_>, place: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let Some(table) = self.table(value, place, "{ data = \"/var/lib/postgresql/data\" }")
        else {
            return out;
        };
        if table.len() > MAX_VOLUMES {
            self.problem(
                value.span(),
                format!("{place} may name at most {MAX_VOLUMES} volumes"),
            );
        }
        let mut paths: HashMap<String, String> = HashMap::new();
        for (key, v) in table.iter() {
            let name = key.get_ref().to_string();
            let p = format!("{place}.{}", display_key(&name));
            if !VOLUME_NAME.is_match(&name) {
                self.problem(key.span(), format!("{p}: a volume name must be 1 to 31 lower-case letters, digits or '-', starting with a letter"));
                continue;
            }
            let Some(path) = self.string(v, &p) else {
                continue;
            };
            if let Some(problem) = mount_path_problem(&path) {
                self.problem(v.span(), format!("{p} (the mount path) {problem}"));
                continue;
            }
            if let Some(other) = paths.insert(path.clone(), name.clone()) {
                self.problem(
                    v.span(),
                    format!("{p} is mounted at the same path as {place}.{other}"),
                );
                continue;
            }
            out.insert(name, path);
        }
        out
    }

    pub(super) fn ready(&mut self, value: &Item<'_>, place: &str) -> Option<ReadyDef> {
        let example = "{ tcp = 5432 } or { exec = [\"pg_isready\"], user = \"postgres\" }";
        let table = self.table(value, place, example)?;
        let (mut tcp, mut exec, mut user) = (None, None, None);
        let mut ok = true;
        for (key, v) in table.iter() {
            let field = key.get_ref().as_ref();
            let p = format!("{place}.{}", display_key(field));
            match field {
                "tcp" => match self.integer(v, &p) {
                    Some(port) if (1..=65535).contains(&port) => tcp = Some(port as u16),
                    Some(_) => {
                        self.problem(v.span(), format!("{p} must be a port between 1 and 65535"));
                        ok = false;
                    }
                    None => ok = false,
                },
                "exec" => match self.strings(v, &p, 1, "[\"pg_isready\", \"-U\", \"postgres\"]") {
                    Some(argv) => exec = Some(argv),
                    None => ok = false,
                },
                "user" => match self.string(v, &p) {
                    Some(u) if READY_USER.is_match(&u) => user = Some((u, v.span())),
                    Some(_) => {
                        self.problem(v.span(), format!("{p} must be a user name or uid (1 to 64 letters, digits, '.', '_' or '-')"));
                        ok = false;
                    }
                    None => ok = false,
                },
                _ => {
                    self.problem(
                        key.span(),
                        format!("{p} is not a field of ready: it is {example}"),
                    );
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        match (tcp, exec) {
            (Some(port), None) => {
                if let Some((_, span)) = user {
                    self.problem(
                        span,
                        format!("{place}.user goes only with exec: a tcp check runs nothing"),
                    );
                    return None;
                }
                Some(ReadyDef::Tcp(port))
            }
            (None, Some(argv)) => Some(ReadyDef::Exec {
                argv,
                user: user.map(|(u, _)| u),
            }),
            (Some(_), Some(_)) => {
                self.problem(
                    value.span(),
                    format!("{place} must have tcp or exec, not both"),
                );
                None
            }
            (None, None) => {
                self.problem(
                    value.span(),
                    format!("{place} must have tcp or exec: {example}"),
                );
                None
            }
        }
    }

    pub(super) fn cpu(&mut self, value: &Item<'_>, place: &str) -> Option<i64> {
        let millis = match value.get_ref() {
            DeValue::Integer(_) => self.integer(value, place).map(|n| n.saturating_mul(1000)),
            DeValue::Float(f) => f.as_str().parse::<f64>().ok().and_then(cores_to_millis),
            DeValue::String(s) => parse_cpu(s),
            _ => None,
        };
        match millis {
            Some(m) if (10..=256_000).contains(&m) => Some(m),
            Some(_) => {
                self.problem(
                    value.span(),
                    format!("{place} must be between 10m (a hundredth of a core) and 256 cores"),
                );
                None
            }
            None => {
                self.problem(
                    value.span(),
                    format!("{place} must be cores (\"1\", \"0.5\") or millicores (\"500m\")"),
                );
                None
            }
        }
    }

    pub(super) fn memory(&mut self, value: &Item<'_>, place: &str) -> Option<i64> {
        let bytes = match value.get_ref() {
            DeValue::Integer(_) => self.integer(value, place),
            DeValue::String(s) => parse_size(s),
            _ => None,
        };
        match bytes {
            Some(b) if (16 * 1024 * 1024..=berth_core::decode::MAX_SAFE_INTEGER).contains(&b) => {
                Some(b)
            }
            Some(_) => {
                self.problem(value.span(), format!("{place} must be at least 16MiB"));
                None
            }
            None => {
                self.problem(
                    value.span(),
                    format!("{place} must be a size such as \"512MiB\", \"1GiB\" or \"256M\" (or a number of bytes)"),
                );
                None
            }
        }
    }

    pub(super) fn idle(&mut self, value: &Item<'_>, place: &str) -> Option<i64> {
        let seconds = match value.get_ref() {
            DeValue::Integer(_) => self.integer(value, place),
            DeValue::String(s) => {
                match humantime::parse_duration(s.trim()) {
                    Ok(d) if d.subsec_nanos() == 0 => i64::try_from(d.as_secs()).ok(),
                    Ok(_) => {
                        self.problem(value.span(), format!("{place} must be whole seconds"));
                        return None;
                    }
                    Err(e) => {
                        self.problem(value.span(), format!("{place} must be a duration such as \"30m\", \"1h\" or \"2h 30m\": {e}"));
                        return None;
                    }
                }
            }
            other => {
                self.problem(
                    value.span(),
                    format!(
                        "{place} must be a duration such as \"30m\" or \"1h\", not {}",
                        other.type_str()
                    ),
                );
                return None;
            }
        };
        match seconds {
            Some(s) if (1..=MAX_IDLE_SECONDS).contains(&s) => Some(s),
            Some(_) => {
                let max = humantime::format_duration(Duration::from_secs(MAX_IDLE_SECONDS as u64));
                self.problem(
                    value.span(),
                    format!("{place} must be between 1s and {max}"),
                );
                None
            }
            None => None,
        }
    }

    pub(super) fn connect(
        &mut self,
        value: &Item<'_>,
        place: &str,
    ) -> Vec<(Range<usize>, String, String)> {
        let mut out = Vec::new();
        let example = "{ DATABASE_URL = \"postgres://postgres@{host}:{port}/postgres\" }";
        let Some(table) = self.table(value, place, example) else {
            return out;
        };
        for (key, v) in table.iter() {
            let name = key.get_ref().to_string();
            let p = format!("{place}.{}", display_key(&name));
            if !ENV_NAME.is_match(&name) {
                self.problem(
                    key.span(),
                    format!("{p} is not an environment variable name (a letter or '_', then letters, digits or '_', at most 128)"),
                );
                continue;
            }
            if let Some(t) = self.string(v, &p) {
                out.push((v.span(), name, t));
            }
        }
        out.sort_by_key(|(span, _, _)| span.start);
        out
    }
}
