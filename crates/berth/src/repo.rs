//! Where the CLI is run: the git repository (one resource domain for all its worktrees), the
//! worktree (its worktree key), and the instance keys derived from them.
//!
//! - The domain's name is `<repository dir name> <8 hex of sha256(canonical git common dir)>`:
//!   every worktree of a repository shares the common dir, so they all name the same domain.
//! - The worktree key is `<worktree dir name>-<8 hex of sha256(canonical worktree top level)>`,
//!   the dir name cut to 40 of `A-Za-z0-9._-` (anything else becomes `-`).
//! - An instance's key is `<name>` when it is shared and `<name>@<worktree key, lower-cased>`
//!   when it belongs to a worktree; the hash keeps worktrees whose names differ only in case
//!   apart.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};

/// The project file's name, at the top level of each worktree.
pub const PROJECT_FILE: &str = "berth.toml";

/// The longest part of a directory name kept in a worktree key.
const WORKTREE_NAME_MAX: usize = 40;
/// The longest part of a directory name kept in a domain name (which may be 200 long).
const DOMAIN_NAME_MAX: usize = 150;

/// The repository and worktree the CLI runs in.
#[derive(Debug, Clone)]
pub struct Repo {
    /// The canonical top level of the current worktree.
    pub top_level: PathBuf,
    /// The resource domain's name for this repository.
    pub domain_name: String,
    /// This worktree's key.
    pub worktree_key: String,
}

impl Repo {
    /// Finds the repository around the current directory.
    pub fn discover() -> anyhow::Result<Repo> {
        Self::discover_in(Path::new("."))
    }

    /// Finds the repository around `dir`.
    pub fn discover_in(dir: &Path) -> anyhow::Result<Repo> {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args([
                "rev-parse",
                "--path-format=absolute",
                "--git-common-dir",
                "--show-toplevel",
            ])
            .output()
            .context(
                "could not run git: berth finds its project through git, so it needs git on PATH",
            )?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let first = err.lines().next().unwrap_or("").trim();
            bail!(
                "berth works inside a git repository, and {} is not in one with a worktree ({first})",
                dir.canonicalize()
                    .unwrap_or_else(|_| dir.to_owned())
                    .display()
            );
        }
        let mut lines = out.stdout.split(|b| *b == b'\n').filter(|l| !l.is_empty());
        let (Some(common), Some(top)) = (lines.next(), lines.next()) else {
            bail!("git rev-parse did not name the repository's common dir and top level");
        };
        let common_dir = canonical(Path::new(OsStr::from_bytes(common)))?;
        let top_level = canonical(Path::new(OsStr::from_bytes(top)))?;
        Ok(Repo {
            domain_name: domain_name(&common_dir),
            worktree_key: worktree_key(&top_level),
            top_level,
        })
    }

    /// The project file of this worktree.
    pub fn project_file(&self) -> PathBuf {
        self.top_level.join(PROJECT_FILE)
    }

    /// The branch this worktree has checked out; `None` on a detached head (or when git cannot
    /// say).
    pub fn branch(&self) -> Option<String> {
        let out = Command::new("git")
            .arg("-C")
            .arg(&self.top_level)
            .args(["symbolic-ref", "--quiet", "--short", "HEAD"])
            .output()
            .ok()?;
        let branch = String::from_utf8(out.stdout).ok()?;
        let branch = branch.trim();
        (out.status.success() && !branch.is_empty()).then(|| branch.to_owned())
    }

    /// The instance key of `name`: `name` when shared, `name@<worktree key>` otherwise.
    pub fn instance_key(&self, name: &str, shared: bool) -> String {
        instance_key(name, (!shared).then_some(self.worktree_key.as_str()))
    }
}

fn canonical(path: &Path) -> anyhow::Result<PathBuf> {
    path.canonicalize()
        .with_context(|| format!("could not resolve {}", path.display()))
}

/// 8 hex digits of sha256 of a path's bytes.
fn short_hash(path: &Path) -> String {
    hex::encode(&Sha256::digest(path.as_os_str().as_bytes())[..4])
}

/// The name a person knows the repository by: the directory holding `.git`, or a bare
/// repository's own directory.
fn repository_dir_name(common_dir: &Path) -> String {
    let own = common_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = if own == ".git" {
        common_dir
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        own
    };
    let name: String = name
        .chars()
        .filter(|c| !c.is_control())
        .take(DOMAIN_NAME_MAX)
        .collect();
    if name.trim().is_empty() {
        "repository".to_owned()
    } else {
        name
    }
}

/// `<dir name> <8 hex of sha256(canonical common dir)>`.
pub fn domain_name(common_dir: &Path) -> String {
    format!(
        "{} {}",
        repository_dir_name(common_dir),
        short_hash(common_dir)
    )
}

/// `<dir name>-<8 hex of sha256(canonical top level)>`, within `^[A-Za-z0-9][A-Za-z0-9._-]*$`.
pub fn worktree_key(top_level: &Path) -> String {
    let raw = top_level
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let slug: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .skip_while(|c| !c.is_ascii_alphanumeric())
        .take(WORKTREE_NAME_MAX)
        .collect();
    let slug = if slug.is_empty() {
        "worktree".to_owned()
    } else {
        slug
    };
    format!("{slug}-{}", short_hash(top_level))
}

/// An instance key: `name`, or `name@<worktree key lower-cased>`.
pub fn instance_key(name: &str, worktree_key: Option<&str>) -> String {
    match worktree_key {
        None => name.to_owned(),
        Some(wt) => format!("{name}@{}", wt.to_ascii_lowercase()),
    }
}

/// The project-file name an instance key was made from: the part before `@`, without a
/// generation suffix.
pub fn name_of_key(key: &str) -> &str {
    let name = key.split_once('@').map_or(key, |(name, _)| name);
    match name.rsplit_once('.') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}

/// The generation of `key` for the base key `base`: 1 for `base` itself, N for `base.N`.
///
/// An archived key stays archived, so an instance archived and brought up again gets the next
/// generation's key (and new volumes). Instance names hold no `.`, so the suffix is unambiguous.
pub fn generation(key: &str, base: &str) -> Option<u32> {
    if key == base {
        return Some(1);
    }
    let n = key.strip_prefix(base)?.strip_prefix('.')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok().filter(|n| *n >= 2)
}

/// The key `base` has now: the live instance's (the highest generation), or, when none is
/// live, the generation after the highest archived one, or `base` itself.
pub fn current_key<'a>(
    base: &str,
    live: impl IntoIterator<Item = &'a str>,
    archived: impl IntoIterator<Item = &'a str>,
) -> String {
    let newest =
        |keys: &mut dyn Iterator<Item = &'a str>| keys.filter_map(|k| generation(k, base)).max();
    if let Some(g) = newest(&mut live.into_iter()) {
        return with_generation(base, g);
    }
    match newest(&mut archived.into_iter()) {
        Some(g) => with_generation(base, g + 1),
        None => base.to_owned(),
    }
}

fn with_generation(base: &str, g: u32) -> String {
    if g <= 1 {
        base.to_owned()
    } else {
        format!("{base}.{g}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_fit_the_contract() {
        let top = Path::new("/home/ada/src/Shop Front (feature: ä)");
        let key = worktree_key(top);
        assert!(berth_core::spec::is_worktree_key(&key), "{key}");
        assert!(key.starts_with("Shop-Front--feature---"), "{key}");
        let long = PathBuf::from(format!("/x/{}", "w".repeat(300)));
        let key = worktree_key(&long);
        assert!(berth_core::spec::is_worktree_key(&key), "{key}");
        let name = "a".repeat(63);
        let ikey = instance_key(&name, Some(&key));
        assert!(berth_core::spec::is_instance_key(&ikey), "{ikey}");
        assert!(berth_core::spec::is_instance_key(&instance_key(
            "db",
            Some("Main-0a1b2c3d")
        )));
        assert_eq!(
            instance_key("db", Some("Main-0a1b2c3d")),
            "db@main-0a1b2c3d"
        );
        assert_eq!(name_of_key("db@main-0a1b2c3d"), "db");
        assert_eq!(name_of_key("db@main-0a1b2c3d.3"), "db");
        assert_eq!(name_of_key("db.2"), "db");
        assert_eq!(name_of_key("db"), "db");
        let odd = worktree_key(Path::new("/x/..."));
        assert!(odd.starts_with("worktree-"), "{odd}");
    }

    #[test]
    fn archived_keys_give_way_to_the_next_generation() {
        let base = "db@main-0a1b2c3d";
        assert_eq!(generation(base, base), Some(1));
        assert_eq!(generation("db@main-0a1b2c3d.12", base), Some(12));
        assert_eq!(generation("db@main-0a1b2c3d.", base), None);
        assert_eq!(generation("db@main-0a1b2c3dx", base), None);
        assert_eq!(current_key(base, [], []), base);
        assert_eq!(current_key(base, [base], []), base);
        assert_eq!(current_key(base, [], [base]), "db@main-0a1b2c3d.2");
        assert_eq!(
            current_key(base, [], [base, "db@main-0a1b2c3d.2"]),
            "db@main-0a1b2c3d.3"
        );
        assert_eq!(
            current_key(base, ["db@main-0a1b2c3d.2"], [base]),
            "db@main-0a1b2c3d.2"
        );
        assert_eq!(current_key("db", ["db.2", "dbx", "db.x"], ["db"]), "db.2");
    }

    #[test]
    fn domain_names_come_from_the_repository_dir() {
        let name = domain_name(Path::new("/home/ada/src/shop/.git"));
        assert!(name.starts_with("shop "), "{name}");
        assert_eq!(name.len(), "shop ".len() + 8);
        assert!(domain_name(Path::new("/srv/git/shop.git")).starts_with("shop.git "));
        let long = PathBuf::from(format!("/x/{}/.git", "r".repeat(400)));
        assert!(domain_name(&long).chars().count() <= 200);
    }
}
