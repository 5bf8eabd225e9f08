//! The daemon knows its engine's health: a daemon whose `DOCKER_HOST` is a socket that the test
//! cuts says so in the instances' views, on its event stream, in `GET /v1/daemon`, `berth ps`
//! and `berth doctor`; what needs the engine fails within seconds with a sentence; and when the
//! engine is back everything converges without a person.

use berth_testkit as support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Daemon, EngineGate, busybox_image};

use super::cli::{Run, berth, repo};

/// How soon each command must fail, once the engine is gone.
const PROMPTLY: Duration = Duration::from_secs(10);

fn one_instance() -> String {
    format!(
        r#"[instances.db]
image = "{}"
scope = "worktree"
volumes = {{ data = "/srv/data" }}
ready = {{ tcp = 8080 }}
"#,
        busybox_image()
    )
}

/// `berth args...`, which must end within [`PROMPTLY`] and fail.
fn fails_promptly(daemon: &Daemon, dir: &std::path::Path, args: &[&str]) -> Run {
    let began = Instant::now();
    let run = berth(daemon, dir, args);
    assert!(
        began.elapsed() < PROMPTLY,
        "berth {args:?} took {:?} with the engine gone: {run:?}",
        began.elapsed()
    );
    assert_ne!(
        run.code, 0,
        "berth {args:?} succeeded with the engine gone: {run:?}"
    );
    run
}

/// doctor's line for `check`, as printed (`ok  engine: ...` or `FAIL engine: ...`).
fn doctor_line(run: &Run, check: &str) -> String {
    run.stdout
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(&format!("{check}:")))
        .unwrap_or_else(|| panic!("doctor printed no {check} line: {run:?}"))
        .to_owned()
}

#[test]
fn a_daemon_whose_engine_goes_away_says_so_fails_what_needs_it_and_converges_when_it_returns() {
    let gate = EngineGate::new();
    let host = gate.host();
    let daemon = Daemon::start_with_env(&[("DOCKER_HOST", host.as_str())]);
    let repo = repo(&one_instance());
    berth(&daemon, &repo.main, &["up"]).ok();
    let api = daemon.client();
    let domains = api.call(|c| c.domains()).expect("the domains");
    let domain = domains
        .first()
        .expect("the repository's domain")
        .resource_domain_id
        .to_string();
    let daemon_view = api.answer(|c| c.daemon()).expect(200);
    assert_eq!(daemon_view["engine"]["reachable"], true, "{daemon_view:#}");
    assert_eq!(daemon_view["engine"]["runtime"], "docker");
    let doctor = berth(&daemon, &repo.main, &["doctor"]);
    assert!(
        doctor_line(&doctor, "engine").starts_with("ok"),
        "{doctor:?}"
    );

    let mut watch = api.watch(&domain);
    gate.set_up(false);
    let cut = Instant::now();

    // The event stream says so on every instance, as GET and the daemon's view do.
    let seen = watch.until(PROMPTLY, "the engine is away", |i| !i["engine"].is_null());
    assert!(cut.elapsed() < PROMPTLY, "{:?}", cut.elapsed());
    let message = seen["engine"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&host),
        "the sentence names the engine: {seen:#}"
    );
    let key = seen["key"].as_str().expect("a key").to_owned();
    let got = api.instance(&domain, &key);
    assert!(!got["engine"]["since"].is_null(), "{got:#}");
    let daemon_view = api.answer(|c| c.daemon()).expect(200);
    assert_eq!(daemon_view["engine"]["reachable"], false, "{daemon_view:#}");

    // berth ps shows it: a sentence above the table, and a note on the instance.
    let ps = berth(&daemon, &repo.main, &["ps"]).ok();
    assert!(
        ps.stderr.contains("container engine has not answered"),
        "{ps:?}"
    );
    assert!(ps.stdout.contains("engine unreachable"), "{ps:?}");
    assert!(
        cut.elapsed() < PROMPTLY,
        "ps took until {:?}",
        cut.elapsed()
    );

    // What needs the engine fails within seconds, with a sentence and a non-zero exit.
    let stop = fails_promptly(&daemon, &repo.main, &["stop", "db"]);
    assert!(
        stop.stdout
            .contains("not stopped: the daemon's container engine"),
        "{stop:?}"
    );
    let up = fails_promptly(&daemon, &repo.main, &["up"]);
    assert!(
        up.stderr.contains("container engine has not answered"),
        "{up:?}"
    );
    for args in [&["exec", "db", "--", "true"][..], &["logs", "db"]] {
        let run = fails_promptly(&daemon, &repo.main, args);
        assert!(
            run.stderr.contains("container engine does not answer"),
            "{args:?}: {run:?}"
        );
    }
    let doctor = fails_promptly(&daemon, &repo.main, &["doctor"]);
    let line = doctor_line(&doctor, "engine");
    assert!(
        line.starts_with("FAIL") && line.contains("has not answered"),
        "{doctor:?}"
    );
    // The routes: the contract's exec answers its internal error, berth's own logs a 503.
    let exec = api
        .exec(&domain, &key, &["true"], None, 5_000, b"")
        .expect_error(500, "ResourceDomainInternalServerError");
    assert!(
        exec["message"].as_str().is_some_and(|m| m.contains(&host)),
        "{exec:#}"
    );
    let did = support::domain_id(&domain);
    support::refused(
        api.call(|c| c.logs(&did, &key, None, false)).map(|_| ()),
        503,
        "EngineUnreachableError",
    );

    // Back: the views lose `engine`, and the up after the stop has it running, by itself.
    gate.set_up(true);
    watch.until(
        Duration::from_secs(60),
        "the engine is back and db runs",
        |i| i["key"] == key && i["engine"].is_null() && i["state"]["kind"] == "running",
    );
    let settled = api.wait_state(&domain, &key, "running", Duration::from_secs(60));
    assert_eq!(settled["desired"], "running");
    let daemon_view = api.answer(|c| c.daemon()).expect(200);
    assert_eq!(daemon_view["engine"]["reachable"], true, "{daemon_view:#}");
    assert_eq!(daemon_view["engine"]["unreachable"], Value::Null);
    let ps = berth(&daemon, &repo.main, &["ps"]).ok();
    assert!(!ps.stdout.contains("engine unreachable"), "{ps:?}");
    let doctor = berth(&daemon, &repo.main, &["doctor"]);
    assert!(
        doctor_line(&doctor, "engine").starts_with("ok"),
        "{doctor:?}"
    );
    berth(&daemon, &repo.main, &["exec", "db", "--", "true"]).ok();
    berth(&daemon, &repo.main, &["rm", "db"]).ok();
}
