//! Workspaces, links and aliases, and idle stop, against real containers resolving real DNS.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Daemon, busybox_image, docker, spec};

const READY: Duration = Duration::from_secs(60);

/// A busybox instance whose httpd answers `/who` with `who`.
fn who_spec(alias: &str, worktree: Option<&str>, who: &str) -> Value {
    let mut s = spec(&busybox_image(), alias);
    s["worktreeKey"] = json!(worktree);
    s["command"] = json!([
        "sh",
        "-c",
        format!("echo {who} > /www/who && exec httpd -f -p 8080 -h /www")
    ]);
    s
}

/// A plain container (not berth's) that sleeps, named under the daemon's prefix so it is
/// cleaned up with the daemon.
fn workspace_container(daemon: &Daemon, name: &str, labels: &[&str]) -> String {
    let full = format!("{}-{name}", daemon.prefix);
    let mut args = vec!["run", "-d", "--name", &full];
    for l in labels {
        args.extend(["--label", l]);
    }
    let image = busybox_image();
    args.extend([image.as_str(), "sleep", "3600"]);
    docker(&args);
    full
}

/// What `GET /who` on `<host>:8080` answers from inside `container`, or None when it cannot.
/// The name is resolved with busybox's own DNS client (`nslookup`), through Docker's embedded
/// DNS, and the request sent with `nc`: a static busybox's `wget` cannot use the C library's
/// resolver.
fn who_from(container: &str, host: &str) -> Option<String> {
    let script = format!(
        "ip=$(nslookup -type=a {host} 2>/dev/null | awk '/^Address: /{{print $2; exit}}'); \
         [ -n \"$ip\" ] && printf 'GET /who HTTP/1.0\\r\\n\\r\\n' | nc -w 2 \"$ip\" 8080 | tail -n 1"
    );
    let out = std::process::Command::new("docker")
        .args(["exec", container, "sh", "-c", &script])
        .output()
        .expect("docker exec");
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (out.status.success() && !answer.is_empty()).then_some(answer)
}

fn eventually(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn put_workspace(api: &Client, id: &str, containers: &[&str], selector: Option<&str>) -> Value {
    let selector = selector.map(|l| json!({"label": l}));
    api.raw(
        "PUT",
        &format!("/v1/workspaces/{id}"),
        Some(
            json!({"containers": containers, "selector": selector})
                .to_string()
                .into_bytes(),
        ),
        &[],
    )
    .expect(200)
}

fn link(api: &Client, domain: &str, workspace: &str, key: &str) -> support::Answer {
    api.raw(
        "PUT",
        &format!("/v1/resource-domains/{domain}/workspace-links/{workspace}"),
        Some(json!({"worktreeKey": key}).to_string().into_bytes()),
        &[],
    )
}

#[test]
fn linked_workspaces_reach_their_keys_instances_and_the_shared_ones_by_alias() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(&domain, "mail", &who_spec("mail", None, "mail"), "use")
        .expect(200);
    api.up(
        &domain,
        "db@k1",
        &who_spec("db", Some("k1"), "db-k1"),
        "use",
    )
    .expect(200);
    api.up(
        &domain,
        "db@k2",
        &who_spec("db", Some("k2"), "db-k2"),
        "use",
    )
    .expect(200);
    for key in ["mail", "db@k1", "db@k2"] {
        api.wait_state(&domain, key, "running", READY);
    }
    let one = workspace_container(&daemon, "one", &[]);
    let two = workspace_container(&daemon, "two", &[]);
    let stranger = workspace_container(&daemon, "stranger", &[]);
    put_workspace(&api, "ws-one", &[&one], None);
    put_workspace(&api, "ws-two", &[&two], None);

    let linked = link(&api, &domain, "ws-one", "k1").expect(200);
    assert_eq!(
        linked,
        json!({"workspaceId": "ws-one", "worktreeKey": "k1", "attachedExecutors": 1})
    );
    link(&api, &domain, "ws-two", "k2").expect(200);

    eventually("ws-one reaches its db and the shared mail", READY, || {
        who_from(&one, "db").as_deref() == Some("db-k1")
            && who_from(&one, "mail").as_deref() == Some("mail")
    });
    eventually("ws-two reaches its own db", READY, || {
        who_from(&two, "db").as_deref() == Some("db-k2")
            && who_from(&two, "mail").as_deref() == Some("mail")
    });
    assert_eq!(
        who_from(&stranger, "db"),
        None,
        "an unlinked container reaches nothing"
    );
    assert_eq!(who_from(&stranger, "mail"), None);

    let ws = api.get("/v1/workspaces/ws-one").expect(200);
    assert_eq!(ws["resourceDomainId"], domain.as_str());
    assert_eq!(ws["worktreeKey"], "k1");
    assert_eq!(ws["executors"][0]["kind"], "container");
    assert_eq!(ws["executors"][0]["name"], one.as_str());
    assert_eq!(ws["executors"][0]["running"], true);

    // Relinking with another key moves its executors to that key's view.
    let again = link(&api, &domain, "ws-one", "k2").expect(200);
    assert_eq!(again["attachedExecutors"], 1);
    eventually("ws-one now reaches k2's db", READY, || {
        who_from(&one, "db").as_deref() == Some("db-k2")
    });

    // Deleting the workspace detaches it.
    api.raw("DELETE", "/v1/workspaces/ws-one", None, &[])
        .expect(200);
    eventually("ws-one reaches nothing", READY, || {
        who_from(&one, "db").is_none()
    });
    api.get("/v1/workspaces/ws-one")
        .expect_error(404, "ResourceWorkspaceNotFoundError");
}

#[test]
fn a_worktree_instance_shadows_a_shared_one_with_the_same_alias() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(&domain, "db", &who_spec("db", None, "shared"), "use")
        .expect(200);
    api.up(
        &domain,
        "db@k1",
        &who_spec("db", Some("k1"), "db-k1"),
        "use",
    )
    .expect(200);
    api.wait_state(&domain, "db", "running", READY);
    api.wait_state(&domain, "db@k1", "running", READY);
    let one = workspace_container(&daemon, "one", &[]);
    let three = workspace_container(&daemon, "three", &[]);
    put_workspace(&api, "ws-one", &[&one], None);
    put_workspace(&api, "ws-three", &[&three], None);
    link(&api, &domain, "ws-one", "k1").expect(200);
    link(&api, &domain, "ws-three", "k3").expect(200);
    eventually("k1 reaches its own db, k3 the shared one", READY, || {
        who_from(&one, "db").as_deref() == Some("db-k1")
            && who_from(&three, "db").as_deref() == Some("shared")
    });
    // Many lookups, one answer: the alias is held by one container on each network.
    for _ in 0..5 {
        assert_eq!(who_from(&one, "db").as_deref(), Some("db-k1"));
    }
}

#[test]
fn a_container_started_after_the_link_with_the_selector_label_is_attached() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(
        &domain,
        "db@k1",
        &who_spec("db", Some("k1"), "db-k1"),
        "use",
    )
    .expect(200);
    api.wait_state(&domain, "db@k1", "running", READY);
    let label = format!("dev.berth.test={}", daemon.prefix);
    put_workspace(&api, "ws-sel", &[], Some(&label));
    let linked = link(&api, &domain, "ws-sel", "k1").expect(200);
    assert_eq!(linked["attachedExecutors"], 0);
    let late = workspace_container(&daemon, "late", &[&label]);
    eventually("the late container resolves db", READY, || {
        who_from(&late, "db").as_deref() == Some("db-k1")
    });
    let ws = api.get("/v1/workspaces/ws-sel").expect(200);
    assert_eq!(ws["executors"].as_array().unwrap().len(), 1, "{ws}");
}

#[test]
fn links_answer_their_errors_and_bad_input_is_refused_with_its_place() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let other = api.create_domain("other");
    put_workspace(&api, "ws", &[], None);
    link(&api, &domain, "ws", "k1").expect(200);
    let err =
        link(&api, &other, "ws", "k1").expect_error(409, "ResourceWorkspaceLinkedElsewhereError");
    assert_eq!(err["resourceDomainId"], domain.as_str());
    link(&api, &domain, "nobody", "k1").expect_error(404, "ResourceWorkspaceNotFoundError");
    api.post_empty(&format!("/v1/resource-domains/{other}/fence"))
        .expect(200);
    put_workspace(&api, "ws2", &[], None);
    let err = link(&api, &other, "ws2", "k1").expect_error(409, "ResourceDomainNotActiveError");
    assert_eq!(err["state"], "fenced");
    daemon
        .client_with(Some(support::OTHER_KEY))
        .get("/v1/workspaces/ws")
        .expect_error(404, "ResourceWorkspaceNotFoundError");

    let link_path = format!("/v1/resource-domains/{domain}/workspace-links/ws");
    let refusals: Vec<(&str, &str, Value, &str)> = vec![
        (
            "PUT",
            "/v1/workspaces/bad%20id",
            json!({"containers": [], "selector": null}),
            "path.workspaceId must be 1 to 128",
        ),
        (
            "PUT",
            "/v1/workspaces/ws",
            json!({"containers": ["no spaces"], "selector": null}),
            "body.containers[0] must be a container name",
        ),
        (
            "PUT",
            "/v1/workspaces/ws",
            json!({"containers": [], "selector": {"label": "no-equals"}}),
            "body.selector.label must be a label",
        ),
        (
            "PUT",
            "/v1/workspaces/ws",
            json!({"containers": [], "selector": "k=v"}),
            "body.selector must be an object",
        ),
        (
            "POST",
            "/v1/workspaces/ws/leases",
            json!({"ttlSeconds": 0}),
            "body.ttlSeconds must be an integer between 1 and 86400",
        ),
        (
            "POST",
            "/v1/workspaces/ws/leases",
            json!({"ttlSeconds": 86401}),
            "body.ttlSeconds must be an integer between 1 and 86400",
        ),
        (
            "PUT",
            &link_path,
            json!({"worktreeKey": "has space"}),
            "body.worktreeKey must be 1 to 128",
        ),
    ];
    for (method, path, body, expected) in refusals {
        let err = api
            .raw(method, path, Some(body.to_string().into_bytes()), &[])
            .expect_error(400, "RequestRefusedError");
        assert!(
            err["message"].as_str().unwrap().contains(expected),
            "{method} {path}: {err}"
        );
    }
}

#[test]
fn an_instance_nothing_reaches_stops_for_idle_and_a_use_up_wakes_it() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let idle = |alias: &str, key: &str| {
        let mut s = who_spec(alias, Some(key), alias);
        s["idleStopAfterSeconds"] = json!(3);
        s
    };
    // "alone" has no workspace of its key; "watched" is reached by a running container of a
    // workspace linked with k1; "leased" by a lease of a workspace linked with k2.
    let (alone, watched, leased) = (
        idle("alone", "k0"),
        idle("watched", "k1"),
        idle("leased", "k2"),
    );
    api.up(&domain, "watched", &watched, "use").expect(200);
    api.up(&domain, "leased", &leased, "use").expect(200);
    let executor = workspace_container(&daemon, "exec", &[]);
    put_workspace(&api, "ws-k1", &[&executor], None);
    link(&api, &domain, "ws-k1", "k1").expect(200);
    put_workspace(&api, "ws-k2", &[], None);
    let lease = api
        .post("/v1/workspaces/ws-k2/leases", json!({"ttlSeconds": 8}))
        .expect(200);
    let lease_id = lease["leaseId"].as_str().unwrap().to_owned();
    assert!(lease_id.starts_with("lse:"));
    link(&api, &domain, "ws-k2", "k2").expect(200);
    api.up(&domain, "alone", &alone, "use").expect(200);

    let stopped = api.wait_for(
        &domain,
        "alone",
        Duration::from_secs(30),
        "stopped for idle",
        |i| i["state"]["kind"] == "stopped",
    );
    assert_eq!(stopped["stopReason"], json!({"kind": "idle"}));
    assert_eq!(stopped["state"]["reason"], json!({"kind": "idle"}));
    assert_eq!(stopped["desired"], "stopped");

    // While the lease is renewed and the container runs, both stay up well past their idle time.
    for _ in 0..6 {
        api.post_empty(&format!("/v1/workspaces/ws-k2/leases/{lease_id}/renew"))
            .expect(200);
        std::thread::sleep(Duration::from_secs(1));
    }
    for key in ["leased", "watched"] {
        let i = api.instance(&domain, key);
        assert_eq!(i["state"]["kind"], "running", "{key} is reached: {i}");
        assert!(i["lastReachedAt"].is_string(), "{key}: {i}");
    }
    // The lease expires: "leased" stops for idle.
    api.wait_for(
        &domain,
        "leased",
        Duration::from_secs(30),
        "stopped after its lease",
        |i| i["state"]["kind"] == "stopped" && i["stopReason"] == json!({"kind": "idle"}),
    );
    // A use up wakes an idle-stopped instance.
    let woken = api.up(&domain, "alone", &alone, "use").expect(200);
    assert_eq!(woken["desired"], "running");
    api.wait_state(&domain, "alone", "running", READY);
    assert_eq!(api.instance(&domain, "watched")["state"]["kind"], "running");
}
