//! `berth service install | uninstall | status` and doctor's `service` line: the systemd user
//! unit that runs `berth serve` at login, checked by `systemd-analyze verify`. Every test
//! points XDG_CONFIG_HOME (and HOME) at a directory of its own, so nothing is written into the
//! real home; the one that starts the unit in a systemd user instance does so only when asked
//! (`BERTH_TEST_SYSTEMD_USER=1`), and otherwise says why it checks the file alone.

use berth_testkit as support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

/// A home and a config directory of the test's own.
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home {
            dir: tempfile::tempdir().expect("a directory"),
        }
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config")
    }

    fn unit(&self) -> PathBuf {
        self.config().join("systemd/user/berth.service")
    }

    /// `berth args...` with this home, BERTH_* set as a person might have them, and the service
    /// key in the environment (which must never reach the unit).
    fn berth(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(args)
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.config())
            .env("BERTH_DATA_DIR", self.dir.path().join("data dir"))
            .env("BERTH_SERVICE_KEYS", "a-secret-key-0123456789")
            .env("BERTH_URL", "http://127.0.0.1:9")
            .env_remove("NO_COLOR")
            .stdin(Stdio::null())
            .output()
            .expect("berth runs")
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `systemd-analyze --user verify UNIT` with a runtime directory of its own (it needs one, and
/// needs no running user instance): its exit code and everything it printed.
fn verify(unit: &Path) -> (i32, String) {
    let runtime = tempfile::tempdir().expect("a runtime directory");
    let out = Command::new("systemd-analyze")
        .args(["--user", "verify"])
        .arg(unit)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .expect("systemd-analyze runs (Debian's systemd package)");
    (
        out.status.code().unwrap_or(-1),
        format!("{}{}", text(&out.stdout), text(&out.stderr)),
    )
}

/// The unit's content as `berth service install -- --listen 127.0.0.1:2400` must write it.
fn assert_unit(home: &Home) {
    let unit = std::fs::read_to_string(home.unit()).expect("the unit is written");
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_berth"))
        .canonicalize()
        .unwrap();
    let exec = format!(
        "ExecStart=\"{}\" \"serve\" \"--listen\" \"127.0.0.1:2400\"\n",
        binary.display()
    );
    assert!(unit.contains(&exec), "{exec} in\n{unit}");
    let data = format!(
        "Environment=\"BERTH_DATA_DIR={}\"\n",
        home.dir.path().join("data dir").display()
    );
    assert!(unit.contains(&data), "{data} in\n{unit}");
    for line in [
        "Restart=on-failure\n",
        "WantedBy=default.target\n",
        "[Install]\n",
    ] {
        assert!(unit.contains(line), "{line} in\n{unit}");
    }
    assert!(
        !unit.contains("a-secret-key") && !unit.contains("BERTH_SERVICE_KEYS"),
        "the service key stays out of the file:\n{unit}"
    );
    assert!(!unit.contains("BERTH_URL"), "{unit}");
    // The verifier's verdict: no error, and no warning either.
    let (code, said) = verify(&home.unit());
    assert_eq!(
        (code, said.as_str()),
        (0, ""),
        "systemd-analyze verify refused the unit"
    );
}

#[test]
fn install_writes_a_unit_that_systemd_analyze_verifies_and_uninstall_removes_it() {
    let home = Home::new();
    let status = home.berth(&["service", "status"]);
    assert!(status.status.success(), "{status:?}");
    assert!(
        text(&status.stdout).contains("no login service is installed"),
        "{status:?}"
    );

    let out = home.berth(&[
        "service",
        "install",
        "--no-start",
        "--",
        "--listen",
        "127.0.0.1:2400",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out.stdout).contains(&format!("wrote {}", home.unit().display())),
        "{out:?}"
    );
    assert_unit(&home);

    let status = home.berth(&["service", "status"]);
    assert!(
        text(&status.stdout).contains(&format!(
            "the login service is installed ({})",
            home.unit().display()
        )),
        "{status:?}"
    );

    let out = home.berth(&["service", "uninstall"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!home.unit().exists());
    assert!(
        text(&out.stdout).contains(&format!("removed {}", home.unit().display())),
        "{out:?}"
    );
}

#[test]
fn bad_serve_flags_are_refused_and_nothing_is_written() {
    let home = Home::new();
    let out = home.berth(&["service", "install", "--no-start", "--", "--workers", "0"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = text(&out.stderr);
    assert!(
        said.contains("the flags for `berth serve` are refused, nothing was written")
            && said.contains("--workers"),
        "{said}"
    );
    assert!(!home.unit().exists());
    assert!(!home.config().exists(), "not even its directory");
}

/// What `systemctl --user` says when asked whether a user instance runs: `None` when one
/// answers, else why not.
fn no_user_instance() -> Option<String> {
    let out = Command::new("systemctl")
        .args(["--user", "is-system-running"])
        .output()
        .expect("systemctl runs");
    let state = text(&out.stdout).trim().to_owned();
    match state.as_str() {
        "running" | "degraded" | "starting" => None,
        _ => Some(format!(
            "`systemctl --user is-system-running` says {state:?} ({})",
            text(&out.stderr).trim()
        )),
    }
}

#[test]
fn install_starts_the_unit_in_a_user_instance_or_says_why_it_cannot() {
    let home = Home::new();
    if let Some(why) = no_user_instance() {
        eprintln!(
            "no systemd user instance here ({why}): the unit cannot be started, so this test \
             checks that install says so, and checks the unit file and the verifier's verdict"
        );
        let out = home.berth(&["service", "install", "--", "--listen", "127.0.0.1:2400"]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let said = text(&out.stderr);
        assert!(
            said.contains(&format!(
                "wrote {} but could not start it",
                home.unit().display()
            )) && said.contains("no systemd user instance"),
            "{said}"
        );
        assert_unit(&home);
        // doctor names it installed, and says the service manager could not tell.
        let doctor = home.berth(&["doctor", "--json"]);
        let checks: Value = serde_json::from_slice(&doctor.stdout).expect("doctor's JSON");
        let service = checks
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "service")
            .unwrap_or_else(|| panic!("a service check in {checks:#}"));
        let detail = service["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("the login service is installed")
                && detail.contains("no systemd user instance"),
            "{service:#}"
        );
        return;
    }
    if std::env::var("BERTH_TEST_SYSTEMD_USER").as_deref() != Ok("1") {
        eprintln!(
            "a systemd user instance answers, but starting the unit in it installs \
             ~/.config/systemd/user/berth.service in the real home: set BERTH_TEST_SYSTEMD_USER=1 \
             to let this test do that (it removes it after). Checking the unit file and the \
             verifier's verdict only"
        );
        let out = home.berth(&[
            "service",
            "install",
            "--no-start",
            "--",
            "--listen",
            "127.0.0.1:2400",
        ]);
        assert!(out.status.success(), "{out:?}");
        assert_unit(&home);
        return;
    }
    started_in_the_users_instance();
}

/// With BERTH_TEST_SYSTEMD_USER=1 and a user instance: install in the real config directory
/// (where the instance reads units), see it run, kill it, see it run again, uninstall.
fn started_in_the_users_instance() {
    let data = tempfile::tempdir().expect("a data directory");
    let berth = |args: &[&str]| -> Output {
        Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(args)
            .env_remove("XDG_CONFIG_HOME")
            .env("BERTH_DATA_DIR", data.path())
            .output()
            .expect("berth runs")
    };
    let unit = dirs_config().join("systemd/user/berth.service");
    assert!(
        !unit.exists(),
        "{} exists already: this test would replace it",
        unit.display()
    );
    let out = berth(&[
        "service",
        "install",
        "--",
        "--listen",
        "127.0.0.1:0",
        "--runtime",
        "none",
    ]);
    let main_pid = || {
        let out = Command::new("systemctl")
            .args([
                "--user",
                "show",
                "--value",
                "-p",
                "MainPID",
                "berth.service",
            ])
            .output()
            .expect("systemctl");
        text(&out.stdout).trim().parse::<u32>().unwrap_or(0)
    };
    let result = std::panic::catch_unwind(|| {
        assert!(out.status.success(), "{out:?}");
        support::wait_until(Duration::from_secs(30), "berth.service runs", || {
            main_pid() != 0
        });
        let status = berth(&["service", "status"]);
        assert!(
            text(&status.stdout).contains("is installed")
                && text(&status.stdout).contains("and running"),
            "{status:?}"
        );
        // Killed, it is started again (Restart=on-failure).
        let first = main_pid();
        Command::new("kill")
            .args(["-9", &first.to_string()])
            .status()
            .expect("kill");
        support::wait_until(Duration::from_secs(30), "berth.service runs again", || {
            let now = main_pid();
            now != 0 && now != first
        });
    });
    let out = berth(&["service", "uninstall"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!unit.exists());
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

fn dirs_config() -> PathBuf {
    match std::env::var_os("XDG_CONFIG_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".config"),
    }
}
