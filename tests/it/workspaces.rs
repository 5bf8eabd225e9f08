//! Workspaces, links and aliases, and idle stop, against real containers resolving real DNS.

use berth_testkit as support;

use std::time::Duration;

use berth_client::{ClientError, ContainerRef, LinkView, SelectorRequest, WorkspaceRequest};
use serde_json::{Value, json};
use support::{
    Client, Daemon, block_on, busybox_image, docker, domain_id, json_of, refused, spec, who_from,
};

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

/// The label by which a container consents to be an executor of the caller's workspace `ws`.
fn consent(api: &Client, ws: &str) -> String {
    let me = block_on(api.api().whoami()).expect("whoami");
    format!("berth.workspace={}/{ws}", me.key_id)
}

/// What the engine's DNS and network let a container reach: berth has no event for it.
fn eventually(what: &str, timeout: Duration, f: impl FnMut() -> bool) {
    support::wait_until(timeout, what, f);
}

fn put_workspace(api: &Client, id: &str, containers: &[&str], selector: Option<&str>) -> Value {
    let request = WorkspaceRequest {
        containers: containers
            .iter()
            .map(|c| ContainerRef((*c).to_owned()))
            .collect(),
        selector: selector.map(|l| SelectorRequest {
            label: l.to_owned(),
        }),
    };
    json_of(&block_on(api.api().put_workspace(id, &request)).expect("a workspace"))
}

fn link(api: &Client, domain: &str, workspace: &str, key: &str) -> Result<LinkView, ClientError> {
    block_on(api.api().link(&domain_id(domain), workspace, key))
}

/// `GET /v1/workspaces/{id}` through the typed client, as JSON for the assertions.
fn workspace(api: &Client, id: &str) -> Value {
    json_of(&block_on(api.api().workspace(id)).expect("the workspace"))
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
    let one = workspace_container(&daemon, "one", &[&consent(&api, "ws-one")]);
    let two = workspace_container(&daemon, "two", &[&consent(&api, "ws-two")]);
    let stranger = workspace_container(&daemon, "stranger", &[]);
    put_workspace(&api, "ws-one", &[&one], None);
    put_workspace(&api, "ws-two", &[&two], None);

    let linked = json_of(&link(&api, &domain, "ws-one", "k1").expect("a link"));
    assert_eq!(
        linked,
        json!({"workspaceId": "ws-one", "worktreeKey": "k1", "attachedExecutors": 1})
    );
    link(&api, &domain, "ws-two", "k2").expect("a link");

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

    let ws = workspace(&api, "ws-one");
    assert_eq!(ws["consentLabel"], consent(&api, "ws-one").as_str());
    assert_eq!(ws["notAttached"], json!([]));
    assert_eq!(ws["resourceDomainId"], domain.as_str());
    assert_eq!(ws["worktreeKey"], "k1");
    assert_eq!(ws["executors"][0]["kind"], "container");
    assert_eq!(ws["executors"][0]["name"], one.as_str());
    assert_eq!(ws["executors"][0]["running"], true);

    // Relinking with another key moves its executors to that key's view.
    let again = link(&api, &domain, "ws-one", "k2").expect("a link");
    assert_eq!(again.attached_executors, 1);
    eventually("ws-one now reaches k2's db", READY, || {
        who_from(&one, "db").as_deref() == Some("db-k2")
    });

    // Deleting the workspace detaches it.
    block_on(api.api().delete_workspace("ws-one")).expect("a delete");
    eventually("ws-one reaches nothing", READY, || {
        who_from(&one, "db").is_none()
    });
    refused(
        block_on(api.api().workspace("ws-one")),
        404,
        "ResourceWorkspaceNotFoundError",
    );
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
    let one = workspace_container(&daemon, "one", &[&consent(&api, "ws-one")]);
    let three = workspace_container(&daemon, "three", &[&consent(&api, "ws-three")]);
    put_workspace(&api, "ws-one", &[&one], None);
    put_workspace(&api, "ws-three", &[&three], None);
    link(&api, &domain, "ws-one", "k1").expect("a link");
    link(&api, &domain, "ws-three", "k3").expect("a link");
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
    let linked = link(&api, &domain, "ws-sel", "k1").expect("a link");
    assert_eq!(linked.attached_executors, 0);
    let late = workspace_container(&daemon, "late", &[&label, &consent(&api, "ws-sel")]);
    eventually("the late container resolves db", READY, || {
        who_from(&late, "db").as_deref() == Some("db-k1")
    });
    let ws = workspace(&api, "ws-sel");
    assert_eq!(ws["executors"].as_array().unwrap().len(), 1, "{ws}");
}

#[test]
fn links_answer_their_errors_and_bad_input_is_refused_with_its_place() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let other = api.create_domain("other");
    put_workspace(&api, "ws", &[], None);
    link(&api, &domain, "ws", "k1").expect("a link");
    let err = refused(
        link(&api, &other, "ws", "k1"),
        409,
        "ResourceWorkspaceLinkedElsewhereError",
    );
    assert_eq!(err["resourceDomainId"], domain.as_str());
    refused(
        link(&api, &domain, "nobody", "k1"),
        404,
        "ResourceWorkspaceNotFoundError",
    );
    block_on(api.api().fence(&domain_id(&other))).expect("a fence");
    put_workspace(&api, "ws2", &[], None);
    let err = refused(
        link(&api, &other, "ws2", "k1"),
        409,
        "ResourceDomainNotActiveError",
    );
    assert_eq!(err["state"], "fenced");
    refused(
        block_on(
            daemon
                .client_with(Some(support::OTHER_KEY))
                .api()
                .workspace("ws"),
        ),
        404,
        "ResourceWorkspaceNotFoundError",
    );

    // Raw on purpose: each body is one no client would send.

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
    let executor = workspace_container(&daemon, "exec", &[&consent(&api, "ws-k1")]);
    put_workspace(&api, "ws-k1", &[&executor], None);
    link(&api, &domain, "ws-k1", "k1").expect("a link");
    put_workspace(&api, "ws-k2", &[], None);
    let lease = block_on(api.api().create_lease("ws-k2", 8)).expect("a lease");
    let lease_id = lease.lease_id;
    assert!(lease_id.starts_with("lse:"));
    link(&api, &domain, "ws-k2", "k2").expect("a link");
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
    let mut watch = api.watch(&domain);
    for _ in 0..6 {
        block_on(api.api().renew_lease("ws-k2", &lease_id)).expect("a renewal");
        // A negative check, bounded on purpose (a renewal a second, for twice the idle time):
        // there is no event for "not stopped", only none that shows either one stopping.
        watch.never(Duration::from_secs(1), "a reached instance stopped", |i| {
            ["leased", "watched"].contains(&i["key"].as_str().unwrap_or_default())
                && (i["desired"] != "running" || i["state"]["kind"] == "stopped")
        });
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

/// The networks a container is attached to, as the engine says.
fn networks_of(container: &str) -> Vec<String> {
    let facts = support::docker_inspect("container", container).expect("the container exists");
    let mut names: Vec<String> = facts["NetworkSettings"]["Networks"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Whether two containers share a network, as the engine says.
fn share_a_network(a: &str, b: &str) -> bool {
    let theirs = networks_of(b);
    networks_of(a).iter().any(|n| theirs.contains(n))
}

#[test]
fn another_key_naming_or_selecting_a_keys_container_gets_nothing_attached() {
    let daemon = Daemon::start();
    let a = daemon.client();
    let b = daemon.client_with(Some(support::OTHER_KEY));
    let domain_a = a.create_domain("shop");
    let domain_b = b.create_domain("evil");
    a.up(
        &domain_a,
        "db@feat",
        &who_spec("db", Some("feat"), "a"),
        "use",
    )
    .expect(200);
    b.up(
        &domain_b,
        "db@feat",
        &who_spec("db", Some("feat"), "b"),
        "use",
    )
    .expect(200);
    a.wait_state(&domain_a, "db@feat", "running", READY);
    let b_db = support::container_of(&b.wait_state(&domain_b, "db@feat", "running", READY));

    // B registers first, naming A's container before it exists and selecting its label.
    let dev_a = format!("{}-devA", daemon.prefix);
    let label = format!("dev.berth.owner={}", daemon.prefix);
    let by_name = put_workspace(&b, "wsEvil", &[&dev_a], None);
    assert_eq!(by_name["executors"], json!([]));
    link(&b, &domain_b, "wsEvil", "feat").expect("a link");
    put_workspace(&b, "wsSel", &[], Some(&label));
    link(&b, &domain_b, "wsSel", "feat").expect("a link");

    // A creates its container consenting to its own ide-1, and links it.
    let created = workspace_container(&daemon, "devA", &[&label, &consent(&a, "ide-1")]);
    assert_eq!(created, dev_a);
    put_workspace(&a, "ide-1", &[&dev_a], None);
    let linked = link(&a, &domain_a, "ide-1", "feat").expect("a link");
    assert_eq!(linked.attached_executors, 1);
    eventually("devA reaches A's db", READY, || {
        who_from(&dev_a, "db").as_deref() == Some("a")
    });

    // B registers again, by name and by selector, now that devA exists, and links again.
    put_workspace(&b, "wsEvil", &[&dev_a], None);
    let again = link(&b, &domain_b, "wsEvil", "feat").expect("a link");
    assert_eq!(again.attached_executors, 0, "{again:?}");
    let again = link(&b, &domain_b, "wsSel", "feat").expect("a link");
    assert_eq!(again.attached_executors, 0, "{again:?}");
    // Even selecting A's own consent label (a key id is no secret) takes nothing.
    put_workspace(&b, "wsCopy", &[], Some(&consent(&a, "ide-1")));
    let again = link(&b, &domain_b, "wsCopy", "feat").expect("a link");
    assert_eq!(again.attached_executors, 0, "{again:?}");
    for ws in ["wsEvil", "wsSel", "wsCopy"] {
        let view = workspace(&b, ws);
        assert_eq!(view["executors"], json!([]), "{ws}: {view}");
    }
    // B's view of wsEvil says only that nothing by that name consents to B's workspace.
    let view = workspace(&b, "wsEvil");
    let reason = view["notAttached"][0]["reason"].as_str().unwrap();
    assert_eq!(view["notAttached"][0]["container"], dev_a.as_str());
    assert!(
        reason.contains(view["consentLabel"].as_str().unwrap()),
        "{reason}"
    );
    assert!(!reason.contains(&consent(&a, "ide-1")), "{reason}");

    // The engine: devA shares no network with B's instance, and its one answer for db is A's.
    assert!(
        !share_a_network(&dev_a, &b_db),
        "devA {:?} and B's db {:?} share a network",
        networks_of(&dev_a),
        networks_of(&b_db)
    );
    for _ in 0..5 {
        assert_eq!(who_from(&dev_a, "db").as_deref(), Some("a"));
    }
    // B's workspaces are not A's: deleting them leaves devA where it is.
    let before = networks_of(&dev_a);
    block_on(b.api().delete_workspace("wsEvil")).expect("a delete");
    block_on(b.api().delete_workspace("wsSel")).expect("a delete");
    assert_eq!(networks_of(&dev_a), before);

    // A container recreated under the name without the label is not attached again.
    support::docker(&["rm", "-f", &dev_a]);
    workspace_container(&daemon, "devA", &[&label]);
    let view = workspace(&a, "ide-1");
    assert_eq!(view["executors"], json!([]), "{view}");
    assert_eq!(view["notAttached"][0]["container"], dev_a.as_str());
    link(&a, &domain_a, "ide-1", "feat").expect("a link");
    assert_eq!(networks_of(&dev_a), vec!["bridge".to_owned()]);
}

#[test]
fn workspace_ids_are_per_key_and_answers_do_not_tell_another_keys() {
    let daemon = Daemon::start();
    let a = daemon.client();
    let b = daemon.client_with(Some(support::OTHER_KEY));
    assert_ne!(
        block_on(a.api().whoami()).expect("whoami").key_id,
        block_on(b.api().whoami()).expect("whoami").key_id
    );
    // B takes ide-1 first; A still makes its own.
    put_workspace(&b, "ide-1", &["b-dev"], None);
    let mine = put_workspace(&a, "ide-1", &["a-dev"], None);
    assert_eq!(mine["containers"], json!(["a-dev"]));
    assert_ne!(mine["consentLabel"], workspace(&b, "ide-1")["consentLabel"]);
    assert_eq!(workspace(&b, "ide-1")["containers"], json!(["b-dev"]));
    let lease = block_on(a.api().create_lease("ide-1", 60)).expect("a lease");
    let lease_id = lease.lease_id.as_str();
    // B cannot touch A's lease through its own ide-1.
    refused(
        block_on(b.api().renew_lease("ide-1", lease_id)),
        404,
        "ResourceWorkspaceLeaseNotFoundError",
    );
    let listed = |c: &Client| block_on(c.api().workspaces()).expect("the workspaces");
    assert_eq!(listed(&a).len(), 1);
    assert_eq!(listed(&b)[0].containers, vec!["b-dev".to_owned()]);

    // An id only A has answers B exactly as an id nobody has.
    put_workspace(&a, "only-a", &[], None);
    let theirs = refused(
        block_on(b.api().workspace("only-a")),
        404,
        "ResourceWorkspaceNotFoundError",
    );
    let nobody = refused(
        block_on(b.api().workspace("nobody")),
        404,
        "ResourceWorkspaceNotFoundError",
    );
    assert_eq!(
        theirs["message"].as_str().unwrap().replace("only-a", "ID"),
        nobody["message"].as_str().unwrap().replace("nobody", "ID")
    );
    // B deleting its ide-1 leaves A's.
    block_on(b.api().delete_workspace("ide-1")).expect("a delete");
    let still = workspace(&a, "ide-1");
    assert_eq!(still["containers"], json!(["a-dev"]));
    assert_eq!(still["executors"][0]["leaseId"], lease_id);
}

#[test]
fn an_instance_of_berths_is_never_an_executor() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let other = api.create_domain("other");
    let instance = api
        .up(&domain, "db", &who_spec("db", None, "db"), "use")
        .expect(200);
    api.wait_state(&domain, "db", "running", READY);
    let container = support::container_of(&instance);
    let before = networks_of(&container);
    // Named, selected by berth's own label, and even with the workspace's consent label in
    // the selector: none of it makes an instance an executor.
    // A container that claims to be berth's is refused the same, consent label or not.
    let posing = workspace_container(
        &daemon,
        "posing",
        &["berth.managed=1", &consent(&api, "ws")],
    );
    let view = put_workspace(&api, "ws", &[&container, &posing], Some("berth.managed=1"));
    assert_eq!(view["executors"], json!([]), "{view}");
    assert_eq!(view["notAttached"][0]["container"], container.as_str());
    assert_eq!(view["notAttached"][1]["container"], posing.as_str());
    let linked = link(&api, &other, "ws", "k1").expect("a link");
    assert_eq!(linked.attached_executors, 0);
    let view = workspace(&api, "ws");
    assert_eq!(view["executors"], json!([]), "{view}");
    assert_eq!(networks_of(&container), before);
    assert_eq!(networks_of(&posing), vec!["bridge".to_owned()]);
}
