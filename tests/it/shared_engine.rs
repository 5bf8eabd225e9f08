//! Two daemons on one engine with the same prefix and different data directories: each
//! reconciles only its own store's objects, leaves the other's alone, and says once that they
//! are there. The second starts on a zero-length `berth.db`, which makes a new store that
//! touches none of the first one's objects.

use berth_testkit as support;

use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::{Daemon, busybox_image, container_of, spec};

const READY: Duration = Duration::from_secs(60);
/// How long both daemons run side by side while the engine's events are watched. A bounded
/// wait for something that must *not* happen (a stop or a removal): both daemons resync every
/// 2 s in it, so it covers more than ten looks at the other's containers each.
const SIDE_BY_SIDE: Duration = Duration::from_secs(32);
const OTHER_STORE_LINE: &str = "containers of another berth store under this prefix";

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs()
}

#[test]
fn two_daemons_on_one_prefix_leave_each_others_containers_alone() {
    let first = Daemon::start_with(&["--resync-every", "2s"]);
    let a = first.client();
    let domain_a = a.create_domain("first");
    for key in ["db", "cache"] {
        a.up_ok(&domain_a, key, &spec(&busybox_image(), key), "person");
    }
    let running_a: Vec<String> = ["db", "cache"]
        .iter()
        .map(|key| container_of(&a.wait_state(&domain_a, key, "running", READY)))
        .collect();
    let ids_before = container_ids(&running_a);

    // The engine's own record of every container stop, kill, death and removal under the
    // prefix while the two run side by side.
    let since = unix_now();
    let until = since + SIDE_BY_SIDE.as_secs();
    let events = Command::new("docker")
        .args([
            "events",
            "--since",
            &since.to_string(),
            "--until",
            &until.to_string(),
        ])
        .args(["--filter", "type=container"])
        .args(["--filter", &format!("label=berth.prefix={}", first.prefix)])
        .args(["--format", "{{.Action}} {{.Actor.Attributes.name}}"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("docker events runs");

    let second = Daemon::start_sharing(&first.prefix, &["--resync-every", "2s"], true);
    let b = second.client();
    let domain_b = b.create_domain("second");
    b.up_ok(&domain_b, "db", &spec(&busybox_image(), "db"), "person");
    // Exactly one container of its own.
    container_of(&b.wait_state(&domain_b, "db", "running", READY));

    let watched = events
        .wait_with_output()
        .expect("docker events ends at --until");
    let seen = String::from_utf8_lossy(&watched.stdout);
    let harmful: Vec<&str> = seen
        .lines()
        .filter(|l| {
            let action = l.split_whitespace().next().unwrap_or("");
            ["stop", "kill", "die", "destroy", "pause"].contains(&action)
        })
        .collect();
    assert!(
        harmful.is_empty(),
        "no container of either daemon was stopped or removed: {harmful:?}"
    );

    // Each still runs its own, in the very containers it made.
    assert_eq!(
        container_ids(&running_a),
        ids_before,
        "the first's containers are the same"
    );
    for key in ["db", "cache"] {
        assert_eq!(a.instance(&domain_a, key)["state"]["kind"], "running");
    }
    assert_eq!(b.instance(&domain_b, "db")["state"]["kind"], "running");

    // Each tells of the other's containers: once in its log, and on GET /v1/daemon.
    let (store_a, store_b) = (daemon_of(&a), daemon_of(&b));
    assert_ne!(
        store_a.store_id, store_b.store_id,
        "the empty berth.db made a new store"
    );
    let seen_by_b = only_other(&store_b);
    assert_eq!(
        seen_by_b.store_id.as_deref(),
        Some(store_a.store_id.as_str())
    );
    assert_eq!(seen_by_b.containers, 2);
    assert_eq!(
        seen_by_b.data_dir.as_deref(),
        Some(first.data_dir.display().to_string().as_str()),
        "the second names the data directory that manages them"
    );
    let seen_by_a = only_other(&store_a);
    assert_eq!(
        seen_by_a.store_id.as_deref(),
        Some(store_b.store_id.as_str())
    );
    assert_eq!(seen_by_a.containers, 1);
    for (who, daemon) in [("first", &first), ("second", &second)] {
        let log = daemon.log_text();
        assert_eq!(
            log.matches(OTHER_STORE_LINE).count(),
            1,
            "the {who} daemon says once that the other's containers are there: {log}"
        );
        assert!(
            !log.contains("removing a container whose instance berth does not know"),
            "the {who} daemon removed nothing"
        );
    }
    assert!(
        second.log_text().contains("the database file is empty"),
        "the second says its berth.db was empty"
    );
}

fn container_ids(names: &[String]) -> Vec<String> {
    names
        .iter()
        .map(|n| {
            support::docker(&["inspect", "--format", "{{.Id}}", n])
                .trim()
                .to_owned()
        })
        .collect()
}

fn daemon_of(client: &support::Client) -> berth_client::DaemonView {
    support::block_on(client.api().daemon()).expect("GET /v1/daemon answers")
}

fn only_other(daemon: &berth_client::DaemonView) -> berth_client::OtherStoreView {
    assert_eq!(daemon.other_stores.len(), 1, "one other store: {daemon:?}");
    daemon.other_stores[0].clone()
}
