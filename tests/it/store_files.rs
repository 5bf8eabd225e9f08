//! The data directory: its files are the user's alone whatever the umask, one daemon holds it at
//! a time, and a store that is damaged or cannot be written is refused at start, with a sentence
//! naming the file and what to do, rather than served with 500s.

use berth_testkit as support;

use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use support::{Client, Daemon, KEY};

/// `berth serve` on `data_dir` under `umask`, with the key file (no `BERTH_SERVICE_KEYS`).
fn serve(data_dir: &Path, umask: &str) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "umask {umask} && exec \"$0\" serve --listen 127.0.0.1:0 --runtime none --data-dir \"$1\""
        ))
        .arg(env!("CARGO_BIN_EXE_berth"))
        .arg(data_dir)
        .env_remove("BERTH_SERVICE_KEYS")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the berth binary starts")
}

/// Waits for a daemon's address line; panics with its stderr when it ends first.
fn address_of(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("stdout");
    match line.trim().strip_prefix("berth listening on ") {
        Some(base) => base.to_owned(),
        None => {
            let _ = child.kill();
            let mut err = String::new();
            let _ = child.stderr.take().unwrap().read_to_string(&mut err);
            panic!("the daemon did not start: {line:?}; {err}");
        }
    }
}

/// Waits (bounded) for a daemon that must refuse to start, and returns what it said.
fn refused_start(child: Child) -> Output {
    let (out, by_itself) = support::wait_exit(child, Duration::from_secs(20));
    assert!(by_itself, "the daemon did not exit");
    assert!(!out.status.success(), "the daemon must exit non-zero");
    assert!(
        out.stdout.is_empty(),
        "it never said it listens: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// Stops a daemon with SIGTERM (a clean stop) and returns its stderr.
fn stop(child: Child) -> String {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let out = child.wait_with_output().expect("the daemon ends");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

#[test]
fn the_data_directory_and_every_file_in_it_are_the_users_alone_whatever_the_umask() {
    for umask in ["022", "000"] {
        let tmp = tempfile::tempdir().unwrap();
        let data_dir = tmp.path().join("data");
        let mut child = serve(&data_dir, umask);
        let base = address_of(&mut child);
        let key = std::fs::read_to_string(data_dir.join("service-key"))
            .unwrap()
            .trim()
            .to_owned();
        let api = Client::new(&base, Some(&key));
        // Writes, so the database has its write-ahead log and shared-memory files.
        for i in 0..20 {
            api.create_domain(&format!("d{i}"));
        }
        assert_eq!(mode(&data_dir), 0o700, "umask {umask}: the data directory");
        let files = files_in(&data_dir);
        for name in [
            "berth.db",
            "berth.db-wal",
            "berth.db-shm",
            "service-key",
            "berth.lock",
        ] {
            assert!(
                files.contains(&data_dir.join(name)),
                "umask {umask}: {name} in {files:?}"
            );
        }
        for file in &files {
            assert_eq!(mode(file), 0o600, "umask {umask}: {}", file.display());
        }
        stop(child);
        for file in files_in(&data_dir) {
            assert_eq!(mode(&file), 0o600, "umask {umask}: {}", file.display());
        }
    }
}

#[test]
fn a_data_directory_and_files_others_could_read_are_tightened_at_start_with_a_log_line() {
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let mut child = serve(&data_dir, "077");
    address_of(&mut child);
    stop(child);
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let db = data_dir.join("berth.db");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let stray = data_dir.join("notes.txt");
    std::fs::write(&stray, "left here by hand").unwrap();
    std::fs::set_permissions(&stray, std::fs::Permissions::from_mode(0o666)).unwrap();

    let mut child = serve(&data_dir, "000");
    address_of(&mut child);
    assert_eq!(mode(&data_dir), 0o700);
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(&stray), 0o600);
    let log = stop(child);
    assert!(
        log.contains("the data directory could be read by others: made it mode 700"),
        "{log}"
    );
    for path in [&db, &stray] {
        assert!(
            log.lines().any(|l| l.contains("made it mode 600")
                && l.contains(&path.display().to_string())
                && l.contains("was=644") == (path == &db)),
            "{}: {log}",
            path.display()
        );
    }
}

#[test]
fn a_second_daemon_on_the_same_data_directory_exits_at_once_naming_it_and_the_first_pid() {
    let mut first = Daemon::start_with(&["--runtime", "none"]);
    let api = first.client();
    let domain = api.create_domain("held");
    let second = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "--listen", "127.0.0.1:0", "--runtime", "none"])
        .arg("--data-dir")
        .arg(&first.data_dir)
        .env("BERTH_SERVICE_KEYS", KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the berth binary starts");
    let out = refused_start(second);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "another berth is running on the data directory {} (pid {})",
            first.data_dir.display(),
            first.pid()
        )),
        "{stderr}"
    );
    // The first one is untouched.
    let did = support::domain_id(&domain);
    api.call(|c| c.domain(&did)).expect("the domain");
    // Once it stops, the directory is free again, even after a crash.
    first.kill9();
    first.start_again();
    first.client().call(|c| c.domain(&did)).expect("the domain");
}

#[test]
fn a_store_damaged_in_its_middle_is_refused_at_start_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let mut child = serve(&data_dir, "022");
    let base = address_of(&mut child);
    let key = std::fs::read_to_string(data_dir.join("service-key"))
        .unwrap()
        .trim()
        .to_owned();
    let api = Client::new(&base, Some(&key));
    for i in 0..300 {
        api.create_domain(&format!("{i:03}{}", "n".repeat(190)));
    }
    stop(child);
    // A clean stop leaves everything in the database file itself.
    let db = data_dir.join("berth.db");
    let wal = data_dir.join("berth.db-wal");
    assert!(
        std::fs::metadata(&wal).map_or(true, |m| m.len() == 0),
        "the write-ahead log was folded into the database"
    );
    let len = std::fs::metadata(&db).unwrap().len();
    assert!(len >= 16 * 4096, "the database holds the domains: {len}");
    // One page in the middle of the file, overwritten.
    let mut file = std::fs::OpenOptions::new().write(true).open(&db).unwrap();
    file.seek(SeekFrom::Start(len / 2 / 4096 * 4096)).unwrap();
    file.write_all(&[0x5a; 4096]).unwrap();
    drop(file);

    let out = refused_start(serve(&data_dir, "022"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("the database {} is damaged", db.display())),
        "{stderr}"
    );
    assert!(stderr.contains("move the file aside"), "{stderr}");
    assert!(stderr.contains("restore it from a backup"), "{stderr}");
}

/// Makes a path unwritable for the test's life. As root, file modes do not stop a write, so the
/// file is made immutable (`chattr +i`); otherwise its write bits are removed.
struct ReadOnly(PathBuf);

impl ReadOnly {
    fn new(path: &Path) -> ReadOnly {
        if is_root() {
            let ok = Command::new("chattr")
                .arg("+i")
                .arg(path)
                .status()
                .expect("chattr (e2fsprogs) is installed")
                .success();
            assert!(ok, "chattr +i {}", path.display());
        } else {
            let mode = std::fs::metadata(path).unwrap().permissions().mode();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & !0o222)).unwrap();
        }
        ReadOnly(path.to_owned())
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        if is_root() {
            let _ = Command::new("chattr").arg("-i").arg(&self.0).status();
        } else if let Ok(meta) = std::fs::metadata(&self.0) {
            let _ = std::fs::set_permissions(
                &self.0,
                std::fs::Permissions::from_mode(meta.permissions().mode() | 0o200),
            );
        }
    }
}

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("id");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

#[test]
fn a_read_only_store_or_data_directory_is_refused_at_start_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let mut child = serve(&data_dir, "022");
    let base = address_of(&mut child);
    let key = std::fs::read_to_string(data_dir.join("service-key"))
        .unwrap()
        .trim()
        .to_owned();
    Client::new(&base, Some(&key)).create_domain("kept");
    stop(child);
    let db = data_dir.join("berth.db");

    {
        let _guard = ReadOnly::new(&db);
        let out = refused_start(serve(&data_dir, "022"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("the database {} cannot be written", db.display())),
            "{stderr}"
        );
        assert!(stderr.contains("write access"), "{stderr}");
    }
    {
        let _guard = ReadOnly::new(&data_dir);
        let out = refused_start(serve(&data_dir, "022"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "the data directory {} is not writable",
                data_dir.display()
            )),
            "{stderr}"
        );
        assert!(stderr.contains("write access"), "{stderr}");
    }
    // Writable again, it starts with what it had.
    let mut child = serve(&data_dir, "022");
    let base = address_of(&mut child);
    let items = Client::new(&base, Some(&key))
        .call(|c| c.domains())
        .expect("the domains");
    assert_eq!(items[0].name, "kept");
    stop(child);
}
