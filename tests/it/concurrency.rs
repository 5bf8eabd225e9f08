//! Concurrent requests against one daemon: many `up`s of one key, many keys racing for one
//! alias, and one workspace linked to two domains at once. Every race has exactly one winner,
//! and the engine ends with exactly what the store says.

use berth_testkit as support;

use std::collections::BTreeSet;
use std::sync::Barrier;
use std::time::Duration;

use serde_json::json;
use support::{Client, Daemon, busybox_image, containers_of, docker, spec, volume_image};

const READY: Duration = Duration::from_secs(60);

/// Runs `n` calls of `f` at once (released together by a barrier) and returns their answers in
/// call order.
fn all_at_once<T: Send, F>(n: usize, f: F) -> Vec<T>
where
    F: Fn(usize) -> T + Sync,
{
    let barrier = Barrier::new(n);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (barrier, f) = (&barrier, &f);
                s.spawn(move || {
                    barrier.wait();
                    f(i)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a request thread"))
            .collect()
    })
}

fn link(
    api: &Client,
    domain: &str,
    workspace: &str,
    key: &str,
) -> Result<berth_client::LinkView, berth_client::ClientError> {
    let domain = support::domain_id(domain);
    api.call(|c| c.link(&domain, workspace, key))
}

/// The domain's live instances through the typed client, as JSON for the assertions.
fn instances(api: &Client, domain: &str) -> Vec<serde_json::Value> {
    let domain = support::domain_id(domain);
    let list = api.call(|c| c.instances(&domain, false)).expect("a list");
    list.iter().map(support::json_of).collect()
}

#[test]
fn a_hundred_concurrent_ups_of_one_key_make_one_instance_and_one_container() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let s = spec(&busybox_image(), "web");

    let answers = all_at_once(100, |_| api.up(&domain, "web", &s, "use"));
    let ids: BTreeSet<String> = answers
        .into_iter()
        .map(|a| {
            a.expect(200)["resourceInstanceId"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 1, "one instance id: {ids:?}");

    let running = api.wait_state(&domain, "web", "running", READY);
    assert_eq!(
        running["resourceInstanceId"].as_str(),
        ids.first().map(String::as_str)
    );
    // Another burst against the running instance changes nothing either.
    let again = all_at_once(20, |_| api.up(&domain, "web", &s, "use"));
    assert!(
        again
            .into_iter()
            .all(|a| a.expect(200)["resourceInstanceId"] == running["resourceInstanceId"])
    );
    // Asserted once berth has acted on the latest of those requests.
    api.settled(&domain, "web", &["running"], READY);
    assert_eq!(containers_of(&running).len(), 1);
    assert_eq!(
        support::containers_named(&daemon.prefix).len(),
        1,
        "one container under the daemon's prefix"
    );
    assert_eq!(instances(&api, &domain).len(), 1);
}

#[test]
fn fifty_keys_racing_for_one_alias_give_one_winner_and_forty_nine_conflicts() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let mut s = spec(&busybox_image(), "db");
    s["worktreeKey"] = json!("feature-x");

    let answers = all_at_once(50, |i| api.up(&domain, &format!("db-{i}"), &s, "use"));
    let mut winners = Vec::new();
    for (i, answer) in answers.into_iter().enumerate() {
        if answer.status == 200 {
            winners.push((i, answer.body));
        } else {
            let err = answer.expect_error(409, "ResourceInstanceAliasTakenError");
            assert!(
                err["message"].as_str().unwrap().contains("db"),
                "the message names the alias: {err}"
            );
        }
    }
    assert_eq!(winners.len(), 1, "exactly one up wins the alias");
    let (i, winner) = &winners[0];
    let items = instances(&api, &domain);
    assert_eq!(items.len(), 1, "only the winner was written: {items:?}");
    assert_eq!(items[0]["key"], format!("db-{i}"));
    assert_eq!(items[0]["resourceInstanceId"], winner["resourceInstanceId"]);

    let running = api.wait_state(&domain, &format!("db-{i}"), "running", READY);
    assert_eq!(containers_of(&running).len(), 1);
    assert_eq!(support::containers_named(&daemon.prefix).len(), 1);
}

#[test]
fn one_workspace_linked_to_two_domains_at_once_is_linked_to_exactly_one() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domains = [api.create_domain("one"), api.create_domain("two")];
    for round in 0..8 {
        let workspace = format!("ws-{round}");
        let request = berth_client::WorkspaceRequest {
            containers: vec![],
            selector: None,
        };
        api.call(|c| c.put_workspace(&workspace, &request))
            .expect("a workspace");
        let answers = all_at_once(2, |i| link(&api, &domains[i], &workspace, "main"));
        let mut linked_to = None;
        let mut refused = 0;
        for (i, answer) in answers.into_iter().enumerate() {
            if answer.is_ok() {
                assert!(linked_to.is_none(), "round {round}: both links succeeded");
                linked_to = Some(&domains[i]);
            } else {
                let err = support::refused(answer, 409, "ResourceWorkspaceLinkedElsewhereError");
                assert_eq!(err["resourceDomainId"], domains[1 - i].as_str());
                refused += 1;
            }
        }
        assert_eq!(refused, 1, "round {round}: one link is refused");
        let ws = api.answer(|c| c.workspace(&workspace)).expect(200);
        assert_eq!(
            ws["resourceDomainId"].as_str(),
            linked_to.map(String::as_str),
            "round {round}: the store holds the winner's link"
        );
        assert_eq!(ws["worktreeKey"], "main");
    }
}

#[test]
fn a_domain_archive_keeps_every_volume_the_reconciler_recorded_while_it_ran() {
    let since = unix_now();
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    // `a` ignores SIGTERM, so its stop takes the whole stop timeout (2 s in these tests).
    let mut slow = spec(&busybox_image(), "a");
    slow["command"] = json!(["sh", "-c", "trap '' TERM; exec httpd -f -p 8080 -h /www"]);
    api.up(&domain, "a", &slow, "use").expect(200);
    api.wait_state(&domain, "a", "running", READY);
    // `b`'s image has a VOLUME: berth learns of the volume it gets only when it looks at the
    // image, which it does while `a` is being stopped.
    let b = api
        .up(&domain, "b", &spec(&volume_image(), "b"), "use")
        .expect(200);
    let did = support::domain_id(&domain);
    let archived = api.answer(|c| c.archive_domain(&did)).expect(200);
    let listed: BTreeSet<String> = archived["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["instanceKey"] == "b")
        .map(|v| v["dockerName"].as_str().unwrap().to_owned())
        .collect();
    // Every volume berth made for `b` is in what the archive answered, and in `b`'s record.
    let made: BTreeSet<String> = docker(&[
        "volume",
        "ls",
        "--filter",
        &format!(
            "label=berth.instance={}",
            b["resourceInstanceId"].as_str().unwrap()
        ),
        "--format",
        "{{.Name}}",
    ])
    .lines()
    .map(str::to_owned)
    .collect();
    eprintln!("made for b: {made:?}; archived: {listed:?}");
    assert!(
        made.is_subset(&listed),
        "made {made:?}, archived {listed:?}"
    );
    let b = api.instance(&domain, "b");
    assert_eq!(b["state"]["kind"], "archived");
    let recorded: BTreeSet<String> = b["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["dockerName"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(recorded, listed);
    // A volume is listed before it is made, so an archive that lands between the two lists one
    // the engine never had; what was made is still there, and the engine removed none of them.
    let destroyed: BTreeSet<String> = docker(&[
        "events",
        "--since",
        &since,
        "--until",
        &unix_now(),
        "--filter",
        "type=volume",
        "--filter",
        "event=destroy",
        "--format",
        "{{.Actor.ID}}",
    ])
    .lines()
    .map(str::to_owned)
    .collect();
    for name in &recorded {
        assert!(!destroyed.contains(name), "{name} was removed");
        if made.contains(name) {
            assert!(
                support::docker_inspect("volume", name).is_some(),
                "{name} is kept"
            );
        }
    }
}

/// Now, as `docker events --since` and `--until` take it.
fn unix_now() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970");
    format!("{}.{:09}", now.as_secs(), now.subsec_nanos())
}

#[test]
fn many_instances_started_at_once_in_a_new_domain_share_one_network() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let keys: Vec<String> = (0..12).map(|i| format!("svc-{i}")).collect();
    let answers = all_at_once(keys.len(), |i| {
        api.up(&domain, &keys[i], &spec(&busybox_image(), &keys[i]), "use")
    });
    for answer in answers {
        answer.expect(200);
    }
    for key in &keys {
        api.wait_state(&domain, key, "running", READY);
    }
    let network = berth_core::names::domain_network(
        &daemon.prefix,
        &berth_core::DomainId::parse(&domain).unwrap(),
    );
    let same_name: Vec<String> = docker(&["network", "ls", "--format", "{{.Name}}"])
        .lines()
        .filter(|n| *n == network)
        .map(str::to_owned)
        .collect();
    assert_eq!(same_name.len(), 1, "one network named {network}");
}
