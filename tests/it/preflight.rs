//! The preflight of an `up` on the real Docker engine: a good spec, a refused spec, a missing
//! image, an image the registry serves but the engine lacks, and a spec that would replace the
//! container, each with what it reports; and none of them writes to the store or the engine.

use berth_testkit as support;

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use support::registry::RegistryProxy;
use support::{Client, Daemon, busybox_image, domain_id, json_of, spec};

const READY: Duration = Duration::from_secs(60);

fn instance_path(domain: &str, key: &str) -> String {
    format!("/v1/resource-domains/{domain}/instances/{key}")
}

fn preflight(api: &Client, domain: &str, key: &str, spec: &Value) -> Value {
    let request = berth_client::UpRequest {
        spec: spec.clone(),
        cause: berth_client::UpCause::Person,
        template: false,
    };
    let domain = domain_id(domain);
    api.answer(|c| c.preflight(&domain, key, &request))
        .expect(200)
}

fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report}"))
}

/// What the store holds, as the API reads it: the domains, every instance (archived too) with
/// its releases, rollouts and endpoints; `observedAt` left out (the reconciler refreshes it).
fn store_contents(api: &Client, domain: &str) -> Value {
    let mut all = vec![api.answer(|c| c.domains()).expect(200)];
    let domain = domain_id(domain);
    for archived in [false, true] {
        let list = api
            .call(|c| c.instances(&domain, archived))
            .expect("the instances");
        for instance in list {
            let key = instance.key.clone();
            let mut instance = json_of(&instance);
            instance.as_object_mut().unwrap().remove("observedAt");
            all.push(instance);
            all.push(api.answer(|c| c.releases(&domain, &key)).expect(200));
            all.push(api.answer(|c| c.rollouts(&domain, &key)).expect(200));
            all.push(api.answer(|c| c.endpoints(&domain, &key)).expect(200));
        }
    }
    Value::Array(all)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs_f64()
}

/// The engine's events between `since` and `until` that name any of `names`: the daemon's
/// prefix (its containers, volumes and networks carry it in their names) and the images the
/// preflights asked about.
fn engine_events(since: f64, until: f64, names: &[&str]) -> Vec<String> {
    let out = Command::new("docker")
        .args(["events", "--since", &format!("{since:.3}")])
        .args(["--until", &format!("{until:.3}")])
        .args([
            "--format",
            "{{.Type}} {{.Action}} {{.Actor.ID}} {{json .Actor.Attributes}}",
        ])
        .output()
        .expect("docker events runs");
    assert!(out.status.success(), "docker events failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| names.iter().any(|n| l.contains(n)))
        .map(str::to_owned)
        .collect()
}

fn image_is_local(image: &str) -> bool {
    let reference = match image.split_once('@') {
        Some((name, digest)) => {
            // `name:tag@digest` is looked up as `name@digest`, as berth does.
            let name = match name.rsplit_once(':') {
                Some((n, tag)) if !tag.contains('/') => n,
                _ => name,
            };
            format!("{name}@{digest}")
        }
        None => image.to_owned(),
    };
    Command::new("docker")
        .args(["image", "inspect", &reference])
        .output()
        .expect("docker runs")
        .status
        .success()
}

#[test]
fn a_preflight_reports_what_an_up_would_do_and_writes_nothing() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("preflight");
    let good = spec(&busybox_image(), "db");
    api.up_ok(&domain, "db", &good, "person");
    let running = api.wait_state(&domain, "db", "running", READY);
    let proxy = RegistryProxy::start("preflight");
    let elsewhere = proxy.image(&busybox_image());
    assert!(
        !image_is_local(&elsewhere),
        "the proxy's image starts absent"
    );

    let before = store_contents(&api, &domain);
    let typed = |report: &Value| -> berth_client::PreflightReport {
        serde_json::from_value(report.clone()).expect("a report the client decodes")
    };
    let since = unix_now();

    // A good spec for a new instance: every check passes, everything is made.
    let fresh = preflight(&api, &domain, "cache", &spec(&busybox_image(), "cache"));
    assert_eq!(fresh["ok"], true, "{fresh}");
    assert_eq!(
        serde_json::to_value(typed(&fresh)).unwrap(),
        fresh,
        "exactly the client's fields"
    );
    assert_eq!(fresh["wouldCreate"], true);
    assert_eq!(fresh["wouldReplace"], false);
    assert!(fresh["specDigest"].as_str().unwrap().starts_with("sha256:"));
    for name in ["spec", "domain", "instance", "alias", "image"] {
        assert_eq!(check(&fresh, name)["ok"], true, "{name}: {fresh}");
    }
    assert_eq!(fresh["refusals"], json!([]));
    assert_eq!(fresh["image"]["local"], true);
    assert!(
        fresh["image"]["imageId"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(
        fresh["alias"],
        json!({"alias": "cache", "scope": "the whole domain", "holder": null})
    );
    let volumes = fresh["volumes"].as_array().unwrap();
    assert_eq!(volumes.len(), 1, "{fresh}");
    assert_eq!(volumes[0]["name"], "data");
    assert_eq!(volumes[0]["action"], "create");
    assert!(
        volumes[0]["dockerName"]
            .as_str()
            .unwrap()
            .starts_with(&daemon.prefix)
    );
    assert_eq!(
        fresh["endpoints"],
        json!([{"port": 8080, "hostPort": null}])
    );
    assert_eq!(fresh["container"]["exists"], false);
    assert_eq!(fresh["container"]["action"], "create");

    // The running instance's own spec again: nothing to replace, its volume and port reused.
    let same = preflight(&api, &domain, "db", &good);
    assert_eq!(same["ok"], true, "{same}");
    assert_eq!(same["wouldCreate"], false);
    assert_eq!(same["wouldReplace"], false);
    assert_eq!(same["container"]["action"], "keep");
    assert_eq!(same["volumes"][0]["action"], "reuse");
    assert_eq!(
        same["volumes"][0]["dockerName"],
        running["volumes"][0]["dockerName"]
    );
    assert!(same["endpoints"][0]["hostPort"].is_u64(), "{same}");

    // A changed environment: the container would be replaced, and the report says why.
    let mut changed = good.clone();
    changed["env"]["GREETING"] = json!("bonjour");
    let replace = preflight(&api, &domain, "db", &changed);
    assert_eq!(replace["ok"], true, "{replace}");
    assert_eq!(replace["wouldReplace"], true);
    assert_eq!(replace["container"]["exists"], true);
    assert_eq!(replace["container"]["action"], "replace");
    assert_eq!(replace["container"]["reasons"], json!(["env"]));
    assert_ne!(replace["specDigest"], running["specDigest"]);

    // A refused spec: the refusal by field, nothing else looked at.
    let mut privileged = spec(&busybox_image(), "bad");
    privileged["privileged"] = json!(true);
    let refused = preflight(&api, &domain, "bad", &privileged);
    assert_eq!(refused["ok"], false);
    assert_eq!(check(&refused, "spec")["ok"], false);
    assert_eq!(refused["refusals"][0]["field"], "privileged", "{refused}");
    assert_eq!(refused["image"], Value::Null);
    assert_eq!(refused["specDigest"], Value::Null);

    // An alias another instance holds: the check the up would refuse with.
    let taken = preflight(&api, &domain, "other", &spec(&busybox_image(), "db"));
    assert_eq!(taken["ok"], false);
    let alias = check(&taken, "alias");
    assert_eq!(alias["ok"], false);
    assert!(alias["message"].as_str().unwrap().contains("db"), "{alias}");
    assert_eq!(taken["alias"]["holder"], "db");

    // A digest the registry lacks: neither local nor pullable.
    let a = busybox_image();
    let absent = format!(
        "{}@sha256:{}",
        a.rsplit_once('@').unwrap().0,
        "e".repeat(64)
    );
    let missing = preflight(&api, &domain, "gone", &spec(&absent, "gone"));
    assert_eq!(missing["ok"], false, "{missing}");
    assert_eq!(check(&missing, "image")["ok"], false);
    assert_eq!(missing["image"]["local"], false);
    assert_eq!(missing["image"]["pullable"], false);
    assert!(missing["image"]["message"].is_string());

    // An image its registry serves and the engine lacks: pullable, and not pulled.
    let remote = preflight(&api, &domain, "remote", &spec(&elsewhere, "remote"));
    assert_eq!(remote["ok"], true, "{remote}");
    assert_eq!(remote["image"]["local"], false);
    assert_eq!(remote["image"]["pullable"], true);
    assert!(remote["image"]["registryMediaType"].is_string(), "{remote}");

    let until = unix_now();
    let after = store_contents(&api, &domain);
    assert_eq!(before, after, "the store is as it was");
    let absent_digest = "e".repeat(64);
    let events = engine_events(
        since,
        until,
        &[&daemon.prefix, &proxy.host(), &absent_digest],
    );
    assert!(events.is_empty(), "the engine saw nothing: {events:?}");
    assert!(!image_is_local(&elsewhere), "nothing was pulled");
    assert!(!image_is_local(&absent));
    let did = domain_id(&domain);
    let instances = api.call(|c| c.instances(&did, false)).expect("a list");
    assert_eq!(instances.len(), 1);
}

#[test]
fn a_preflight_in_an_unknown_domain_or_with_a_bad_body_is_an_error() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("preflight");
    // Raw on purpose: a body without its cause, which no client sends.
    let answer = api.post(
        &format!("{}/preflight", instance_path(&domain, "db")),
        json!({"spec": spec(&busybox_image(), "db")}),
    );
    let body = answer.expect(400);
    assert!(body.to_string().contains("body.cause"), "{body}");
    // The route, its body and its answers are in the document.
    let doc = api.call(|c| c.openapi()).expect("the document");
    let op =
        &doc["paths"]["/v1/resource-domains/{resourceDomainId}/instances/{key}/preflight"]["post"];
    assert!(op["requestBody"].to_string().contains("UpRequest"), "{op}");
    assert!(
        op["responses"]["200"]
            .to_string()
            .contains("PreflightReport"),
        "{op}"
    );
    for status in ["400", "403", "404"] {
        assert!(
            op["responses"][status].to_string().contains("ErrorBody"),
            "{status}: {op}"
        );
    }
    let schema = &doc["components"]["schemas"]["PreflightReport"]["properties"];
    for field in [
        "ok",
        "wouldCreate",
        "wouldReplace",
        "checks",
        "image",
        "volumes",
        "alias",
        "endpoints",
        "container",
    ] {
        assert!(schema[field].is_object(), "{field}: {schema}");
    }
    let unknown = "rdm:00000000-0000-4000-8000-000000000000";
    api.post(
        &format!("{}/preflight", instance_path(unknown, "db")),
        json!({"spec": spec(&busybox_image(), "db"), "cause": "use"}),
    )
    .expect(404);
}

/// A registry that takes the connection and never answers stalls no preflight: past the
/// daemon's `--preflight-step-timeout`, the image check fails naming the step that stalled.
#[test]
fn a_registry_that_never_answers_fails_the_image_check_naming_the_step_in_time() {
    let daemon = support::Launch::new()
        .args(&["--preflight-step-timeout", "2s"])
        .start();
    let api = daemon.client();
    let domain = api.create_domain("stalled");
    // Accepts connections (the kernel's backlog) and never reads or writes.
    let stalled = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = stalled.local_addr().unwrap().port();
    let image = format!("127.0.0.1:{port}/stalled/image@sha256:{}", "ab".repeat(32));
    let report = preflight(&api, &domain, "web", &spec(&image, "web"));
    let image_check = check(&report, "image");
    assert_eq!(image_check["ok"], false, "{report}");
    let message = image_check["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("the registry's manifest of {image}"))
            && message.contains("did not answer within 2 s"),
        "{message}"
    );
    assert_eq!(report["ok"], false);
    drop(stalled);
}
