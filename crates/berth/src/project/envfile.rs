//! Reading the files a project names (a Compose file, its env files, `.env`, berth.toml's
//! `env_file`) as a hostile one could be written: regular files only (never a fifo, a device or
//! a directory), inside the repository when asked, read up to a cap, and never quoted back in an
//! error. Also: text made safe to print (terminal control and bidi characters escaped).

use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// The most of a Compose file read.
pub const MAX_COMPOSE_BYTES: u64 = 4 * 1024 * 1024;
/// The most of an env file (or `.env`) read.
pub const MAX_ENV_FILE_BYTES: u64 = 256 * 1024;

/// Why a file was not read; the message names the file, never its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProblem {
    pub missing: bool,
    pub message: String,
}

impl std::fmt::Display for FileProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for FileProblem {}

fn problem(message: String) -> FileProblem {
    FileProblem {
        missing: false,
        message,
    }
}

/// `path` with `.` and `..` taken out by name, without asking the file system.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// `path` (relative to `base`) as a path relative to `root`, when it is inside it, both by its
/// name and (when it exists) after its links are followed; `None` when it is outside.
pub fn inside(root: &Path, base: &Path, path: &Path) -> Option<PathBuf> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let base = base.canonicalize().unwrap_or_else(|_| base.to_path_buf());
    let joined = normalize(&base.join(path));
    let relative = joined.strip_prefix(&root).ok()?.to_path_buf();
    if let Ok(real) = joined.canonicalize() {
        real.strip_prefix(&root).ok()?;
    }
    Some(relative)
}

/// Reads the regular file `path` (shown in messages as `shown`), at most `cap` bytes of it.
pub fn read_capped(path: &Path, shown: &str, cap: u64) -> Result<String, FileProblem> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(FileProblem {
                missing: true,
                message: format!("{shown} does not exist"),
            });
        }
        Err(e) => return Err(problem(format!("could not read {shown}: {}", e.kind()))),
    };
    if !meta.is_file() {
        return Err(problem(format!(
            "{shown} is not a regular file (a {}): berth reads only regular files",
            kind_of(&meta)
        )));
    }
    if meta.len() > cap {
        return Err(problem(format!(
            "{shown} has {} bytes, more than the {cap} berth reads",
            meta.len()
        )));
    }
    // Opened without blocking, and checked again once open: the name may have been swapped
    // for a fifo in between.
    let file = open_nonblocking(path)
        .map_err(|e| problem(format!("could not read {shown}: {}", e.kind())))?;
    let meta = file
        .metadata()
        .map_err(|e| problem(format!("could not read {shown}: {}", e.kind())))?;
    if !meta.is_file() {
        return Err(problem(format!(
            "{shown} is not a regular file: berth reads only regular files"
        )));
    }
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| problem(format!("could not read {shown}: {}", e.kind())))?;
    if bytes.len() as u64 > cap {
        return Err(problem(format!(
            "{shown} has more than the {cap} bytes berth reads"
        )));
    }
    String::from_utf8(bytes).map_err(|_| problem(format!("{shown} is not UTF-8 text")))
}

fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "fifo"
    } else if t.is_char_device() || t.is_block_device() {
        "device"
    } else if t.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

/// An env file's variables, in order (later ones over earlier ones of the same name); a line
/// that is not `NAME=VALUE` is named by its number, never quoted.
pub fn parse_env(text: &str, shown: &str) -> Result<Vec<(String, String)>, String> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (i, item) in dotenvy::from_read_iter(text.as_bytes()).enumerate() {
        let (k, v) = item.map_err(|e| {
            let what = match e {
                dotenvy::Error::Io(_) => "could not be read",
                _ => "is not NAME=VALUE",
            };
            format!("{shown}: its variable number {} {what}", i + 1)
        })?;
        match out.iter_mut().find(|(name, _)| *name == k) {
            Some(slot) => slot.1 = v,
            None => out.push((k, v)),
        }
    }
    Ok(out)
}

/// `text` safe to print on a terminal: control characters (C0, DEL, C1) and the bidi controls
/// written as `\u{...}`, everything else as it is.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read_and_never_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_capped(Path::new("/dev/zero"), "/dev/zero", 10).unwrap_err();
        assert!(
            err.message.contains("not a regular file (a device)"),
            "{err}"
        );
        let err = read_capped(dir.path(), "d", 10).unwrap_err();
        assert!(err.message.contains("(a directory)"), "{err}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_capped(&fifo, "fifo", 10).unwrap_err();
        assert!(err.message.contains("(a fifo)"), "{err}");
        let big = dir.path().join("big");
        std::fs::write(&big, "A=1\n".repeat(10)).unwrap();
        let err = read_capped(&big, "big", 8).unwrap_err();
        assert!(err.message.contains("more than the 8 berth reads"), "{err}");
        assert!(
            read_capped(&dir.path().join("nope"), "nope", 8)
                .unwrap_err()
                .missing
        );
        let err = parse_env("A=1\nsecret-line-here\n", "e").unwrap_err();
        assert!(!err.contains("secret-line"), "{err}");
        assert_eq!(
            parse_env("A=1\n# c\nB=\"x y\"\nA=2\n", "e").unwrap(),
            [("A".into(), "2".into()), ("B".into(), "x y".into())]
        );
    }

    #[test]
    fn paths_outside_the_root_are_told() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        assert_eq!(
            inside(&root, &root.join("sub"), Path::new("../.env")),
            Some(PathBuf::from(".env"))
        );
        assert_eq!(inside(&root, &root, Path::new("../../x.env")), None);
        assert_eq!(inside(&root, &root, Path::new("/etc/shadow")), None);
        std::os::unix::fs::symlink("/etc/hostname", root.join("link.env")).unwrap();
        assert_eq!(inside(&root, &root, Path::new("link.env")), None);
    }

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        assert_eq!(
            printable("web\u{1b}]0;T\u{7}\u{202e}x\u{9b}"),
            "web\\u{1b}]0;T\\u{7}\\u{202e}x\\u{9b}"
        );
        assert_eq!(printable("plain: ünïcode"), "plain: ünïcode");
    }
}
