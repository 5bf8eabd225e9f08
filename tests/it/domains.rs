//! Resource domains, auth and request refusals over real HTTP against a real daemon.

use berth_testkit as support;

use serde_json::{Value, json};
use support::{Daemon, OTHER_KEY};

const UNKNOWN_DOMAIN: &str = "rdm:00000000-0000-4000-8000-000000000000";

#[test]
fn domains_are_created_listed_fetched_fenced_and_unfenced() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let created = api
        .post("/v1/resource-domains", json!({"name": "shop"}))
        .expect(200);
    let id = created["resourceDomainId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("rdm:"));
    assert_eq!(created["name"], "shop");
    assert_eq!(created["state"], "active");
    let created_at = created["createdAt"].as_str().unwrap();
    assert!(
        created_at.ends_with('Z') && created_at.len() == 24,
        "{created_at}"
    );
    assert_eq!(
        created.as_object().unwrap().len(),
        4,
        "exactly the contract's fields: {created}"
    );

    let second = api.create_domain("billing");
    let list = api.get("/v1/resource-domains").expect(200);
    let ids: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["resourceDomainId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![id.as_str(), second.as_str()]);

    assert_eq!(
        api.get(&format!("/v1/resource-domains/{id}")).expect(200),
        created
    );
    let fenced = api
        .post_empty(&format!("/v1/resource-domains/{id}/fence"))
        .expect(200);
    assert_eq!(fenced["state"], "fenced");
    assert_eq!(
        api.get(&format!("/v1/resource-domains/{id}")).expect(200)["state"],
        "fenced"
    );
    let active = api
        .post(&format!("/v1/resource-domains/{id}/unfence"), json!({}))
        .expect(200);
    assert_eq!(active["state"], "active");
}

#[test]
fn every_v1_route_needs_a_known_service_key() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let id = daemon.client().create_domain("shop");
    for client in [
        daemon.client_with(None),
        daemon.client_with(Some("not-a-key-xxxxxxxxxxxx")),
    ] {
        client
            .get("/v1/resource-domains")
            .expect_error(401, "UnauthorizedError");
        client
            .get(&format!("/v1/resource-domains/{id}"))
            .expect_error(401, "UnauthorizedError");
        client
            .post("/v1/resource-domains", json!({"name": "x"}))
            .expect_error(401, "UnauthorizedError");
        client
            .get("/v1/openapi.json")
            .expect_error(401, "UnauthorizedError");
    }
    // Health needs no key.
    assert_eq!(
        daemon.client_with(None).get("/healthz").expect(200)["status"],
        "ok"
    );
}

#[test]
fn a_domain_belongs_to_the_key_that_created_it() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let id = daemon.client().create_domain("mine");
    let other = daemon.client_with(Some(OTHER_KEY));
    other
        .get(&format!("/v1/resource-domains/{id}"))
        .expect_error(403, "ResourceDomainForbiddenError");
    other
        .post_empty(&format!("/v1/resource-domains/{id}/fence"))
        .expect_error(403, "ResourceDomainForbiddenError");
    other
        .get(&format!("/v1/resource-domains/{id}/instances"))
        .expect_error(403, "ResourceDomainForbiddenError");
    assert_eq!(
        other.get("/v1/resource-domains").expect(200)["items"],
        json!([])
    );
    // Nothing the other key did changed the domain.
    assert_eq!(
        daemon
            .client()
            .get(&format!("/v1/resource-domains/{id}"))
            .expect(200)["state"],
        "active"
    );
}

#[test]
fn unknown_domains_are_not_found() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    api.get(&format!("/v1/resource-domains/{UNKNOWN_DOMAIN}"))
        .expect_error(404, "ResourceDomainNotFoundError");
    api.post_empty(&format!("/v1/resource-domains/{UNKNOWN_DOMAIN}/fence"))
        .expect_error(404, "ResourceDomainNotFoundError");
    api.get(&format!(
        "/v1/resource-domains/{UNKNOWN_DOMAIN}/instances/db"
    ))
    .expect_error(404, "ResourceDomainNotFoundError");
}

#[test]
fn requests_that_do_not_decode_are_refused_naming_the_place_and_write_nothing() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let id = api.create_domain("shop");
    let bad_key = format!("/v1/resource-domains/{id}/instances/Not_A_Key");
    let bad_query = format!("/v1/resource-domains/{id}/instances?archived=maybe");
    let fence = format!("/v1/resource-domains/{id}/fence");
    let cases: Vec<(&str, &str, Option<&[u8]>, &str)> = vec![
        (
            "POST",
            "/v1/resource-domains",
            Some(b"{not json"),
            "body is not valid JSON",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(b""),
            "body must be a JSON object",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(b"[]"),
            "body must be an object",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(br#"{"name": 5}"#),
            "body.name must be a string",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(br#"{"name": ""}"#),
            "body.name must be a string of 1 to 200 characters",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(br#"{"name": "a", "owner": "b"}"#),
            "body.owner is not an allowed key",
        ),
        (
            "POST",
            "/v1/resource-domains",
            Some(br#"{}"#),
            "body.name is missing",
        ),
        (
            "GET",
            "/v1/resource-domains/not-an-id",
            None,
            "path.resourceDomainId must be a resource domain id (rdm:<uuid>)",
        ),
        (
            "GET",
            "/v1/resource-domains/rin:00000000-0000-4000-8000-000000000000",
            None,
            "path.resourceDomainId must be a resource domain id",
        ),
        (
            "GET",
            &bad_key,
            None,
            "path.key must be 1 to 128 lower-case letters",
        ),
        ("GET", &bad_query, None, "query.archived must be one of"),
        (
            "POST",
            &fence,
            Some(br#"{"x": 1}"#),
            "body must be empty or {}",
        ),
    ];
    for (method, path, body, expected) in cases {
        let answer = api.raw(method, path, body.map(<[u8]>::to_vec), &[]);
        let err = answer.expect_error(400, "RequestRefusedError");
        let message = err["message"].as_str().unwrap();
        assert!(
            message.contains(expected),
            "{method} {path}: {message:?} should contain {expected:?}"
        );
    }
    // A refused value is never echoed.
    let answer = api.raw(
        "POST",
        "/v1/resource-domains",
        Some(br#"{"name": 5, "hunter2": "x"}"#.to_vec()),
        &[],
    );
    let err = answer.expect_error(400, "RequestRefusedError");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("body.hunter2 is not an allowed key")
    );
    let answer = api.raw(
        "POST",
        "/v1/resource-domains",
        Some(br#"{"name": ["hunter3"]}"#.to_vec()),
        &[],
    );
    assert!(!answer.body.to_string().contains("hunter3"));
    // Only the one valid create happened.
    assert_eq!(
        api.get("/v1/resource-domains").expect(200)["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_request_naming_a_foreign_host_is_refused() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    for host in [
        "evil.example",
        "evil.example:2378",
        "127.0.0.1.evil.example",
    ] {
        api.raw("GET", "/v1/resource-domains", None, &[("host", host)])
            .expect_error(403, "HostNotAllowedError");
        api.raw(
            "POST",
            "/v1/resource-domains",
            Some(br#"{"name":"x"}"#.to_vec()),
            &[("host", host)],
        )
        .expect_error(403, "HostNotAllowedError");
    }
    api.raw(
        "GET",
        "/v1/resource-domains",
        None,
        &[("host", "localhost:2378")],
    )
    .expect(200);
    assert_eq!(
        api.get("/v1/resource-domains").expect(200)["items"],
        json!([])
    );
}

#[test]
fn domains_survive_a_daemon_restart() {
    let mut daemon = Daemon::start_with(&["--runtime", "none"]);
    let id = daemon.client().create_domain("kept");
    daemon
        .client()
        .post_empty(&format!("/v1/resource-domains/{id}/fence"))
        .expect(200);
    daemon.restart();
    let domain = daemon
        .client()
        .get(&format!("/v1/resource-domains/{id}"))
        .expect(200);
    assert_eq!(domain["name"], "kept");
    assert_eq!(domain["state"], "fenced");
}

#[test]
fn instance_routes_say_when_no_runtime_is_configured() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let id = api.create_domain("shop");
    let image = format!("127.0.0.1:5000/x/busybox@sha256:{}", "0".repeat(64));
    let err = api
        .up(&id, "db", &support::spec(&image, "db"), "use")
        .expect_error(409, "ResourceRuntimeUnsupportedError");
    assert_eq!(err["runtime"], "no container runtime");
    assert_eq!(
        api.get(&format!("/v1/resource-domains/{id}/instances"))
            .expect(200)["items"],
        json!([])
    );
}

#[test]
fn the_openapi_document_lists_every_route() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let doc = daemon.client().get("/v1/openapi.json").expect(200);
    let paths: &serde_json::Map<String, Value> = doc["paths"].as_object().unwrap();
    for (path, method) in [
        ("/healthz", "get"),
        ("/v1/openapi.json", "get"),
        ("/v1/resource-domains", "post"),
        ("/v1/resource-domains", "get"),
        ("/v1/resource-domains/{resourceDomainId}", "get"),
        ("/v1/resource-domains/{resourceDomainId}/fence", "post"),
        ("/v1/resource-domains/{resourceDomainId}/unfence", "post"),
        ("/v1/resource-domains/{resourceDomainId}/archive", "post"),
        ("/v1/resource-domains/{resourceDomainId}/instances", "get"),
        (
            "/v1/resource-domains/{resourceDomainId}/instances/{key}",
            "get",
        ),
        (
            "/v1/resource-domains/{resourceDomainId}/instances/{key}/up",
            "post",
        ),
        (
            "/v1/resource-domains/{resourceDomainId}/instances/{key}/stop",
            "post",
        ),
        (
            "/v1/resource-domains/{resourceDomainId}/instances/{key}/archive",
            "post",
        ),
        (
            "/v1/resource-domains/{resourceDomainId}/instances/{key}/start",
            "post",
        ),
        ("/v1/resource-domains/{resourceDomainId}/summary", "get"),
        ("/v1/resource-domains/{resourceDomainId}/templates", "get"),
        (
            "/v1/resource-domains/{resourceDomainId}/templates/{templateId}",
            "delete",
        ),
        ("/v1/ui/sign-in-links", "post"),
        ("/v1/ui/sessions", "post"),
        ("/v1/ui/sessions/current", "delete"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} missing from {:?}",
            paths.keys()
        );
    }
    assert!(doc["components"]["schemas"]["InstanceView"].is_object());
}
