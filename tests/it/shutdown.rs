//! berth's own stop: SIGTERM or SIGINT ends open execs and followed logs at once, exits 0
//! within `--stop-timeout` plus 5 s, and leaves instances running for the next start to adopt.

use berth_testkit as support;

use std::io::Read;
use std::time::Duration;

use support::{Daemon, busybox_image, spec};

const READY: Duration = Duration::from_secs(60);
/// The daemon's `--stop-timeout` (set by the test support).
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

#[test]
fn sigterm_ends_open_execs_and_followed_logs_and_the_next_start_adopts_the_instances() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("stop");
    api.up(&domain, "box", &spec(&busybox_image(), "box"), "use")
        .expect(200);
    api.wait_state(&domain, "box", "running", READY);
    let container = support::containers_named(&daemon.prefix)[0].clone();

    let argv = ["sh", "-c", "cat >/dev/null; sleep 3600", "stop-exec-41b9"];
    let mut exec = daemon.open_exec(&domain, "box", &argv, 3_600_000);
    support::wait_until(Duration::from_secs(30), "the exec starting", || {
        support::processes(&container).contains("stop-exec-41b9")
    });
    let mut logs = daemon.open_follow_logs(&domain, "box");
    // An up in flight: its reconcile is finished or abandoned by the stop.
    api.up(&domain, "late", &spec(&busybox_image(), "late"), "use")
        .expect(200);

    let bound = STOP_TIMEOUT + Duration::from_secs(5);
    let (status, took) = daemon.terminate(bound + Duration::from_secs(5));
    let status = status.unwrap_or_else(|| {
        panic!(
            "berth still ran {took:?} after SIGTERM; log: {}",
            daemon.log_text()
        )
    });
    assert!(status.success(), "berth exited with {status}");
    assert!(
        took < bound,
        "berth took {took:?} to stop, past --stop-timeout + 5 s"
    );

    // The exec was killed before berth exited, not left to its timeout.
    let ps = support::processes(&container);
    assert!(
        !ps.contains("stop-exec-41b9") && !ps.contains("sleep 3600"),
        "the exec still runs after berth stopped: {ps}"
    );
    // Both connections were ended by berth: reading them reaches their end.
    for (what, stream) in [("exec", &mut exec), ("logs", &mut logs)] {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut rest = Vec::new();
        stream
            .read_to_end(&mut rest)
            .unwrap_or_else(|e| panic!("the {what} connection was left open: {e}"));
    }
    // The instance kept running through the stop.
    let state = support::docker(&["inspect", "-f", "{{.State.Running}}", &container]);
    assert_eq!(state, "true", "the instance's container kept running");

    daemon.start_again();
    let api = daemon.client();
    api.wait_state(&domain, "box", "running", READY);
    api.wait_state(&domain, "late", "running", READY);
    let result = api
        .exec(&domain, "box", &["echo", "adopted"], None, 10_000, b"")
        .expect(200);
    assert_eq!(result["stdout"], "adopted\n");
}

#[test]
fn sigterm_while_five_ups_are_reconciled_exits_in_time_and_the_next_start_runs_them_all() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("stop-many");
    let keys: Vec<String> = (0..5).map(|i| format!("k{i}")).collect();
    // Five ups at once; SIGTERM as soon as the last is answered, while they are reconciled.
    let answers: Vec<serde_json::Value> = std::thread::scope(|scope| {
        let ups: Vec<_> = keys
            .iter()
            .map(|key| {
                let (api, domain) = (&api, &domain);
                scope.spawn(move || {
                    api.up(domain, key, &spec(&busybox_image(), key), "use")
                        .expect(200)
                })
            })
            .collect();
        ups.into_iter().map(|u| u.join().unwrap()).collect()
    });
    let (status, took) = daemon.terminate(STOP_TIMEOUT + Duration::from_secs(10));
    for answer in &answers {
        assert_eq!(answer["desired"], "running", "{answer}");
        assert_ne!(answer["state"]["kind"], "running", "{answer}");
    }
    let status = status.unwrap_or_else(|| {
        panic!(
            "berth still ran {took:?} after SIGTERM; log: {}",
            daemon.log_text()
        )
    });
    assert!(status.success(), "berth exited with {status}");
    let bound = STOP_TIMEOUT + Duration::from_secs(5);
    assert!(
        took < bound,
        "berth took {took:?} to stop, past --stop-timeout + 5 s"
    );

    daemon.start_again();
    let api = daemon.client();
    for key in &keys {
        let running = api.wait_state(&domain, key, "running", READY);
        let id = running["resourceInstanceId"].as_str().unwrap();
        assert_eq!(
            support::containers_labelled(id).len(),
            1,
            "{key} has one container"
        );
    }
    assert_eq!(
        support::containers_named(&format!("{}-", daemon.prefix)).len(),
        keys.len()
    );
}
