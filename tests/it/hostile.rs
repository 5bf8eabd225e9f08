//! Hostile callers over real HTTP: random unicode, NUL and very long strings in every string
//! field and path parameter; bodies over the size limit; clients that send their headers too
//! slowly; requests without a key or naming a foreign host, as a web page in a browser on the
//! same machine would send them; and the key file's mode.
//!
//! Whatever arrives, the daemon answers without a 5xx, and every 4xx carries `_tag` and a
//! message that names the place it refuses.

use berth_testkit as support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};
use support::{Answer, Client, Daemon, KEY, OTHER_KEY};

const UNKNOWN_DOMAIN: &str = "rdm:00000000-0000-4000-8000-000000000000";

/// Strings a hostile caller sends: any unicode, control characters and NUL, path tricks,
/// near-misses of valid values, and long ones.
fn hostile_string(longest: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<String>(),
        2 => "[\\x00-\\x1f\\x7f]{1,12}",
        2 => "[a-zA-Z0-9._@:/%?#-]{1,24}",
        1 => "\\PC{1,64}",
        1 => Just("\0".to_owned()),
        1 => Just("../../../etc/passwd".to_owned()),
        1 => Just("%2e%2e%2f%00".to_owned()),
        1 => Just("rdm:00000000-0000-4000-8000-000000000000\0".to_owned()),
        1 => Just("lse:00000000-0000-4000-8000-000000000000".to_owned()),
        1 => Just(" ".to_owned()),
        1 => (1..longest).prop_map(|n| "\u{1F6A2}".repeat(n)),
        1 => (1..longest).prop_map(|n| "\u{0}x".repeat(n / 2 + 1)),
    ]
}

/// Any JSON value a field might be sent as.
fn hostile_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        (-5i64..100_000).prop_map(|n| json!(n)),
        hostile_string(20_000).prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((hostile_string(64), inner), 0..4)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Percent-encodes every byte but the unreserved ones, so the string arrives as one parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A request the fuzzer sends.
#[derive(Debug, Clone)]
struct Request {
    method: &'static str,
    path: String,
    body: Option<Vec<u8>>,
    /// A string the answer must not quote (a value sent in the request), if any.
    sent: Option<String>,
}

/// Where the fuzzer puts its value: a body field of each route that takes one, or one path
/// parameter of each route.
#[derive(Debug, Clone, Copy)]
enum Place {
    DomainName,
    StopBy,
    WorkspaceContainer,
    WorkspaceSelector,
    WorkspaceBody,
    LeaseTtl,
    LinkKey,
    UpCause,
    UpSpecField,
    PathDomain,
    PathKey,
    PathWorkspace,
    PathLease,
    PathLinkWorkspace,
}

const PLACES: [Place; 14] = [
    Place::DomainName,
    Place::StopBy,
    Place::WorkspaceContainer,
    Place::WorkspaceSelector,
    Place::WorkspaceBody,
    Place::LeaseTtl,
    Place::LinkKey,
    Place::UpCause,
    Place::UpSpecField,
    Place::PathDomain,
    Place::PathKey,
    Place::PathWorkspace,
    Place::PathLease,
    Place::PathLinkWorkspace,
];

const SPEC_FIELDS: [&str; 9] = [
    "alias",
    "worktreeKey",
    "image",
    "command",
    "env",
    "volumes",
    "limits",
    "ready",
    "idleStopAfterSeconds",
];

fn up_spec() -> Value {
    json!({
        "alias": "web",
        "worktreeKey": null,
        "image": format!("127.0.0.1:5000/x/busybox@sha256:{}", "0".repeat(64)),
        "command": null,
        "env": {"A": "b"},
        "volumes": [{"name": "data", "mountPath": "/srv/data"}],
        "limits": {"cpuMillicores": 250, "memoryBytes": 67108864},
        "ready": {"kind": "tcp", "port": 8080},
        "idleStopAfterSeconds": 3600
    })
}

fn request(domain: &str, place: Place, text: String, value: Value, pick: usize) -> Request {
    let body = |v: Value| Some(v.to_string().into_bytes());
    let inst = format!("/v1/resource-domains/{domain}/instances/web");
    let some_value = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        _ => None,
    };
    let field = if pick.is_multiple_of(2) {
        Value::String(text.clone())
    } else {
        value.clone()
    };
    let sent = some_value(&field);
    let post = |path: String, b: Value| Request {
        method: "POST",
        path,
        body: body(b),
        sent: sent.clone(),
    };
    let put = |path: String, b: Value| Request {
        method: "PUT",
        path,
        body: body(b),
        sent: sent.clone(),
    };
    let in_path = |method: &'static str, path: String, b: Option<Value>| Request {
        method,
        path,
        body: b.and_then(body),
        sent: Some(text.clone()),
    };
    let p = encode(&text);
    match place {
        Place::DomainName => post("/v1/resource-domains".into(), json!({"name": field})),
        Place::StopBy => post(format!("{inst}/stop"), json!({"by": field})),
        Place::WorkspaceContainer => put(
            "/v1/workspaces/ws".into(),
            json!({"containers": ["ok", field], "selector": null}),
        ),
        Place::WorkspaceSelector => put(
            "/v1/workspaces/ws".into(),
            json!({"containers": [], "selector": {"label": field}}),
        ),
        Place::WorkspaceBody => Request {
            method: "PUT",
            path: "/v1/workspaces/ws".into(),
            body: body(value.clone()),
            sent: some_value(&value),
        },
        Place::LeaseTtl => post(
            "/v1/workspaces/ws/leases".into(),
            json!({"ttlSeconds": field}),
        ),
        Place::LinkKey => put(
            format!("/v1/resource-domains/{domain}/workspace-links/ws"),
            json!({"worktreeKey": field}),
        ),
        Place::UpCause => post(
            format!("{inst}/up"),
            json!({"spec": up_spec(), "cause": field}),
        ),
        Place::UpSpecField => {
            let mut spec = up_spec();
            spec[SPEC_FIELDS[pick % SPEC_FIELDS.len()]] = field;
            post(format!("{inst}/up"), json!({"spec": spec, "cause": "use"}))
        }
        Place::PathDomain => {
            let routes = [
                ("GET", format!("/v1/resource-domains/{p}"), None),
                ("POST", format!("/v1/resource-domains/{p}/fence"), None),
                ("POST", format!("/v1/resource-domains/{p}/archive"), None),
                ("GET", format!("/v1/resource-domains/{p}/instances"), None),
                (
                    "POST",
                    format!("/v1/resource-domains/{p}/instances/web/stop"),
                    Some(json!({"by": "x"})),
                ),
            ];
            let (m, path, b) = routes[pick % routes.len()].clone();
            in_path(m, path, b)
        }
        Place::PathKey => {
            let routes = [
                (
                    "GET",
                    format!("/v1/resource-domains/{domain}/instances/{p}"),
                    None,
                ),
                (
                    "POST",
                    format!("/v1/resource-domains/{domain}/instances/{p}/up"),
                    Some(json!({"spec": up_spec(), "cause": "use"})),
                ),
                (
                    "POST",
                    format!("/v1/resource-domains/{domain}/instances/{p}/stop"),
                    Some(json!({"by": "x"})),
                ),
                (
                    "POST",
                    format!("/v1/resource-domains/{domain}/instances/{p}/archive"),
                    None,
                ),
            ];
            let (m, path, b) = routes[pick % routes.len()].clone();
            in_path(m, path, b)
        }
        Place::PathWorkspace => {
            let routes = [
                ("GET", format!("/v1/workspaces/{p}"), None),
                ("DELETE", format!("/v1/workspaces/{p}"), None),
                (
                    "PUT",
                    format!("/v1/workspaces/{p}"),
                    Some(json!({"containers": [], "selector": null})),
                ),
                (
                    "POST",
                    format!("/v1/workspaces/{p}/leases"),
                    Some(json!({"ttlSeconds": 5})),
                ),
            ];
            let (m, path, b) = routes[pick % routes.len()].clone();
            in_path(m, path, b)
        }
        Place::PathLease => {
            let routes = [
                ("POST", format!("/v1/workspaces/ws/leases/{p}/renew"), None),
                ("DELETE", format!("/v1/workspaces/ws/leases/{p}"), None),
            ];
            let (m, path, b) = routes[pick % routes.len()].clone();
            in_path(m, path, b)
        }
        Place::PathLinkWorkspace => in_path(
            "PUT",
            format!("/v1/resource-domains/{domain}/workspace-links/{p}"),
            Some(json!({"worktreeKey": "main"})),
        ),
    }
}

/// True when `text` is a plain name an answer may legitimately hold (an id, a key).
#[test]
fn name_lengths_count_characters_and_bidi_or_zero_width_characters_are_refused_writing_nothing() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let ship = "\u{1F6A2}";
    // A domain name is 1 to 200 characters, each a Unicode scalar value: 200 emoji (400 UTF-16
    // units) are a name, 201 `é` (201 units) are not.
    for name in [ship.repeat(100), ship.repeat(200), "\u{e9}".repeat(200)] {
        let created = api
            .post("/v1/resource-domains", json!({ "name": name }))
            .expect(200);
        assert_eq!(created["name"], json!(name));
    }
    for name in [ship.repeat(201), "\u{e9}".repeat(201)] {
        let err = api
            .post("/v1/resource-domains", json!({ "name": name }))
            .expect_error(400, "RequestRefusedError");
        assert_eq!(
            err["message"],
            "body.name must be a string of 1 to 200 characters"
        );
    }
    let listed = || api.get("/v1/resource-domains").expect(200)["items"].clone();
    let domains = listed();
    assert_eq!(domains.as_array().unwrap().len(), 3);
    let domain = domains[0]["resourceDomainId"].as_str().unwrap().to_owned();

    // Characters that reorder what is shown, or take no width, make one name look like
    // another: refused in every name, by the field's place, never quoting it.
    const BIDI: &str = "must not contain bidirectional controls (U+061C, U+200E, U+200F, \
                        U+202A to U+202E, U+2066 to U+2069)";
    const ZERO_WIDTH: &str =
        "must not contain zero-width characters (U+200B to U+200D, U+2060, U+FEFF)";
    let instance = format!("/v1/resource-domains/{domain}/instances/web");
    for (bad, expected) in [
        ("shop\u{202e}gnp.exe", BIDI),
        ("\u{2066}shop\u{2069}", BIDI),
        ("sh\u{200f}op", BIDI),
        ("\u{61c}shop", BIDI),
        ("sh\u{200b}op", ZERO_WIDTH),
        ("shop\u{200d}", ZERO_WIDTH),
        ("\u{feff}shop", ZERO_WIDTH),
        ("sh\u{2060}op", ZERO_WIDTH),
    ] {
        for (path, body, place) in [
            (
                "/v1/resource-domains".to_owned(),
                json!({ "name": bad }),
                "body.name",
            ),
            (format!("{instance}/stop"), json!({ "by": bad }), "body.by"),
            (
                format!("{instance}/snapshots"),
                json!({ "name": bad }),
                "body.name",
            ),
            (
                format!("{instance}/rollback"),
                json!({"idempotencyKey": bad, "expectedSpecDigest": format!("sha256:{}", "0".repeat(64))}),
                "body.idempotencyKey",
            ),
        ] {
            let err = api
                .post(&path, body)
                .expect_error(400, "RequestRefusedError");
            assert_eq!(
                err["message"],
                format!("{place} {expected}"),
                "{path} {bad:?}"
            );
            assert!(!err.to_string().contains("shop"), "{err}");
        }
    }
    assert_eq!(listed(), domains, "a refused request writes nothing");
}

fn plain(text: &str) -> bool {
    text.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-._@:".contains(c))
}

/// What every answer to a hostile request must be.
fn check(req: &Request, answer: &Answer) -> Result<(), TestCaseError> {
    let what = format!("{} {}", req.method, &req.path[..req.path.len().min(200)]);
    prop_assert!(
        answer.status < 500,
        "{what}: {} {}",
        answer.status,
        answer.body
    );
    if answer.status < 400 {
        return Ok(());
    }
    let tag = answer.body["_tag"].as_str().unwrap_or_default();
    let message = answer.body["message"].as_str().unwrap_or_default();
    prop_assert!(!tag.is_empty(), "{what}: no _tag in {}", answer.body);
    prop_assert!(!message.is_empty(), "{what}: no message in {}", answer.body);
    match tag {
        "RequestRefusedError" => {
            // Problems are joined with "; ", which a sentence may hold too: the message must open
            // with a place.
            prop_assert!(
                ["body", "path.", "query.", "frame"]
                    .iter()
                    .any(|place| message.starts_with(place)),
                "{what}: a refusal that names no place: {message:?}"
            );
        }
        "ResourceInstanceSpecRefusedError" => {
            let refusals = answer.body["refusals"].as_array();
            prop_assert!(
                refusals.is_some_and(|r| !r.is_empty()),
                "{what}: {}",
                answer.body
            );
            for r in refusals.into_iter().flatten() {
                let reason = r["reason"].as_str().unwrap_or_default();
                if r["field"] == "spec" {
                    prop_assert!(
                        reason.starts_with("spec"),
                        "{what}: a spec refusal that names no place: {reason:?}"
                    );
                }
            }
        }
        _ => {}
    }
    if let Some(sent) = &req.sent
        && sent.chars().count() >= 8
        && !plain(sent)
    {
        let text = answer.body.to_string();
        let quoted = serde_json::to_string(sent).expect("a string");
        prop_assert!(
            !text.contains(quoted.trim_matches('"')),
            "{what}: the answer quotes what was sent: {}",
            &text[..text.len().min(400)]
        );
    }
    Ok(())
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn hostile_strings_in_every_field_and_path_parameter_get_a_tagged_4xx_naming_the_place() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let domain = api.create_domain("hostile");
    api.raw(
        "PUT",
        "/v1/workspaces/ws",
        Some(br#"{"containers": [], "selector": null}"#.to_vec()),
        &[],
    )
    .expect(200);
    let lease = api
        .post("/v1/workspaces/ws/leases", json!({"ttlSeconds": 60}))
        .expect(200);
    assert!(lease["leaseId"].as_str().unwrap().starts_with("lse:"));

    let strategy = (
        prop::sample::select(&PLACES[..]),
        prop_oneof![3 => hostile_string(512), 1 => hostile_string(100_000)],
        hostile_value(),
        any::<usize>(),
    );
    let started = Instant::now();
    let sent = std::sync::atomic::AtomicUsize::new(0);
    runner(600)
        .run(&strategy, |(place, text, value, pick)| {
            let is_path = matches!(
                place,
                Place::PathDomain
                    | Place::PathKey
                    | Place::PathWorkspace
                    | Place::PathLease
                    | Place::PathLinkWorkspace
            );
            // A path longer than the HTTP layer reads is answered by it with a 414, as
            // `a_json_body_over_one_mebibyte_is_refused` checks.
            let text: String = if is_path {
                text.chars().take(2_000).collect()
            } else {
                text
            };
            let req = request(&domain, place, text, value, pick);
            let answer = api.raw(req.method, &req.path, req.body.clone(), &[]);
            sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            check(&req, &answer)
        })
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "hostile: {} requests in {:?}",
        sent.into_inner(),
        started.elapsed()
    );

    // The daemon is still whole: it answers, and nothing it was sent made it panic.
    assert_eq!(api.get("/healthz").expect(200)["status"], "ok");
    assert_eq!(
        api.get(&format!("/v1/resource-domains/{domain}"))
            .expect(200)["name"],
        "hostile"
    );
    assert!(
        !daemon.log_text().contains("panicked"),
        "{}",
        daemon.log_text()
    );
}

#[test]
fn methods_a_route_does_not_have_get_a_tagged_answer() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let domain = api.create_domain("shop");
    for (method, path) in [
        ("DELETE", "/v1/resource-domains".to_owned()),
        ("PUT", format!("/v1/resource-domains/{domain}")),
        ("GET", format!("/v1/resource-domains/{domain}/fence")),
        ("PATCH", "/v1/workspaces/ws".to_owned()),
        ("POST", "/healthz".to_owned()),
    ] {
        let answer = api.raw(method, &path, None, &[]);
        assert_eq!(answer.status, 405, "{method} {path}: {}", answer.body);
        assert_eq!(
            answer.body["_tag"], "MethodNotAllowedError",
            "{method} {path}"
        );
        assert!(
            answer.body["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    // A path no route has stays a 404.
    api.get("/v1/nothing-here")
        .expect_error(404, "RouteNotFoundError");
}

#[test]
fn every_route_in_the_openapi_document_needs_a_known_service_key() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let doc = daemon.client().get("/v1/openapi.json").expect(200);
    let paths = doc["paths"].as_object().expect("paths");
    let (basic, cookie) = (format!("Basic {KEY}"), format!("key={KEY}"));
    let (mut checked, mut open) = (0, 0);
    for (template, item) in paths {
        let path = template
            .replace("{resourceDomainId}", UNKNOWN_DOMAIN)
            .replace("{key}", "web")
            .replace("{workspaceId}", "ws")
            .replace("{leaseId}", "lse:00000000-0000-4000-8000-000000000000");
        for method in item.as_object().unwrap().keys() {
            let method = method.to_uppercase();
            if template == "/healthz" {
                assert_eq!(method, "GET");
                continue;
            }
            assert!(template.starts_with("/v1/"), "{template}");
            // The one route without a key: trading a web page's single-use sign-in code for
            // a session. It says so in the document, and it is checked in tests/it/ui.rs.
            let security = &item[method.to_lowercase().as_str()]["security"];
            if security == &serde_json::json!([{}]) || security == &serde_json::json!([]) {
                assert_eq!(
                    (template.as_str(), method.as_str()),
                    ("/v1/ui/sessions", "POST")
                );
                open += 1;
                continue;
            }
            for headers in [
                vec![],
                vec![("authorization", "Bearer ")],
                vec![("authorization", "Bearer not-a-key-xxxxxxxxxxxxxxxx")],
                vec![("authorization", basic.as_str())],
                vec![("authorization", KEY)],
                vec![("cookie", cookie.as_str())],
                vec![("x-api-key", KEY)],
            ] {
                let answer =
                    daemon
                        .client_with(None)
                        .raw(&method, &path, Some(b"{}".to_vec()), &headers);
                answer.expect_error(401, "UnauthorizedError");
            }
            // Nor in the query string.
            daemon
                .client_with(None)
                .raw(
                    &method,
                    &format!("{path}?key={KEY}"),
                    Some(b"{}".to_vec()),
                    &[],
                )
                .expect_error(401, "UnauthorizedError");
            checked += 1;
        }
    }
    assert!(checked >= 20, "every /v1 route of the document: {checked}");
    assert_eq!(open, 1, "only the sign-in code's exchange takes no key");
}

/// One raw HTTP/1.1 exchange: what the daemon answers to `request`, as text.
fn raw_exchange(daemon: &Daemon, request: &str) -> String {
    let address: SocketAddr = daemon
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("the daemon's address");
    let mut stream = TcpStream::connect(address).expect("a connection");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

#[test]
fn pages_in_a_browser_on_the_same_machine_cannot_drive_berth() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    // DNS rebinding: the page's own name now resolves to 127.0.0.1, and the browser sends it
    // as the Host. Refused even with a key, and for health too.
    for host in [
        "rebind.attacker.example",
        "rebind.attacker.example:2378",
        "localhost.attacker.example",
        "127.0.0.1.nip.example",
        "[::1].attacker.example",
        "0x7f000001",
        // A suffix test on the text would pass these, and the sign-in link would name
        // evil.example as its host; parsed as an authority, none is one.
        "evil.example/.localhost",
        "evil.example#.localhost",
        "evil.example?.localhost",
        "evil.example\\.localhost",
        "localhost:99999999999",
        "localhost:0",
    ] {
        api.raw("GET", "/v1/resource-domains", None, &[("host", host)])
            .expect_error(403, "HostNotAllowedError");
        api.raw("GET", "/healthz", None, &[("host", host)])
            .expect_error(403, "HostNotAllowedError");
        api.raw("POST", "/v1/ui/sign-in-links", None, &[("host", host)])
            .expect_error(403, "HostNotAllowedError");
    }
    // No Host at all (HTTP/1.0) is refused too.
    let answer = raw_exchange(
        &daemon,
        &format!("GET /v1/resource-domains HTTP/1.0\r\nAuthorization: Bearer {KEY}\r\n\r\n"),
    );
    assert!(
        answer.starts_with("HTTP/1.0 403") || answer.starts_with("HTTP/1.1 403"),
        "{answer}"
    );
    assert!(answer.contains("HostNotAllowedError"), "{answer}");

    // CSRF: a form or fetch() from a page can POST a "simple" body without custom headers, so
    // without the key; berth refuses it and allows no origin to read any answer.
    let page = daemon.client_with(None);
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ] {
        let answer = page.raw(
            "POST",
            "/v1/resource-domains",
            Some(br#"{"name":"csrf"}"#.to_vec()),
            &[
                ("content-type", content_type),
                ("origin", "https://attacker.example"),
            ],
        );
        answer.expect_error(401, "UnauthorizedError");
    }
    // A preflight for a request with the key is not granted.
    let preflight = raw_exchange(
        &daemon,
        "OPTIONS /v1/resource-domains HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://attacker.example\r\n\
         Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization, content-type\r\n\
         Connection: close\r\n\r\n",
    );
    let status: u16 = preflight[9..12].parse().expect("a status");
    assert!(!(200..300).contains(&status), "{preflight}");
    assert!(
        !preflight
            .to_ascii_lowercase()
            .contains("access-control-allow"),
        "{preflight}"
    );
    assert_eq!(
        api.get("/v1/resource-domains").expect(200)["items"],
        json!([]),
        "nothing was created"
    );
}

/// The status and JSON body of a raw answer.
fn status_and_body(answer: &str) -> (u16, Value) {
    let status = answer
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a status line: {answer:?}"));
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn two_host_headers_or_a_target_naming_a_foreign_host_are_refused_before_any_route() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let address = daemon.address();
    let refused = |request: String, what: &str| {
        let answer = raw_exchange(&daemon, &request);
        let (status, body) = status_and_body(&answer);
        assert_eq!(status, 400, "{answer}");
        assert_eq!(body["_tag"], "RequestRefusedError", "{answer}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains(what), "{answer}");
        assert!(
            !message.contains("evil"),
            "the value is not quoted: {answer}"
        );
    };
    // Two Host headers (RFC 9112 section 3.2): refused whichever comes first, on health and on
    // a route behind a key alike.
    for (first, second) in [
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.1", "evil.example"),
        ("evil.example", "127.0.0.1"),
    ] {
        for path in ["/healthz", "/v1/resource-domains"] {
            refused(
                format!(
                    "GET {path} HTTP/1.1\r\nHost: {first}\r\nAuthorization: Bearer {KEY}\r\n\
                     Host: {second}\r\nConnection: close\r\n\r\n"
                ),
                "header.host",
            );
        }
    }
    // An absolute-form target is judged by its authority, not by the Host header beside it.
    for target in [
        "http://evil.example/healthz".to_owned(),
        "http://evil.example:2378/healthz".to_owned(),
        format!("http://evil.example@{address}/healthz"),
        "http://evil.example/v1/resource-domains".to_owned(),
    ] {
        refused(
            format!(
                "GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n\
                 Connection: close\r\n\r\n"
            ),
            "request target",
        );
    }
    // Refused before any route: a create aimed at a foreign authority creates nothing.
    refused(
        format!(
            "POST http://evil.example/v1/resource-domains HTTP/1.1\r\nHost: {address}\r\n\
             Authorization: Bearer {KEY}\r\nContent-Type: application/json\r\n\
             Content-Length: 15\r\nConnection: close\r\n\r\n{{\"name\":\"abs\"}}"
        ),
        "request target",
    );
    // An absolute-form target naming berth's own address keeps working.
    for target in [
        format!("http://{address}/healthz"),
        "http://localhost/healthz".to_owned(),
    ] {
        let answer = raw_exchange(
            &daemon,
            &format!("GET {target} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
        );
        let (status, body) = status_and_body(&answer);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(body["status"], "ok", "{answer}");
    }
    let answer = raw_exchange(
        &daemon,
        &format!(
            "GET http://{address}/v1/resource-domains HTTP/1.1\r\nHost: {address}\r\n\
             Authorization: Bearer {KEY}\r\nConnection: close\r\n\r\n"
        ),
    );
    let (status, body) = status_and_body(&answer);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(body["items"], json!([]), "nothing was created: {answer}");
    assert!(
        !daemon.log_text().contains("evil"),
        "no log line quotes the host"
    );
}

/// The code in a sign-in link's fragment.
fn code_of(link: &Value) -> String {
    let url = link["url"].as_str().expect("a link");
    url.split_once("#code=").expect("a code").1.to_owned()
}

#[test]
fn one_keys_flood_of_sign_in_links_and_sessions_signs_no_other_key_out() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let a = daemon.client();
    let b = daemon.client_with(Some(OTHER_KEY));
    let anonymous = daemon.client_with(None);
    let session = |code: String| {
        let session = anonymous
            .post("/v1/ui/sessions", json!({"code": code}))
            .expect(200);
        session["token"].as_str().expect("a token").to_owned()
    };
    let a_token = session(code_of(&a.post_empty("/v1/ui/sign-in-links").expect(200)));
    let a_pending = code_of(&a.post_empty("/v1/ui/sign-in-links").expect(200));
    // Key B asks 300 links and opens a session with each, and asks 300 more it leaves unused.
    let mut b_tokens = Vec::new();
    for _ in 0..300 {
        b_tokens.push(session(code_of(
            &b.post_empty("/v1/ui/sign-in-links").expect(200),
        )));
        b.post_empty("/v1/ui/sign-in-links").expect(200);
    }
    // A's session still acts for A, and A's unused link still opens a session.
    Client::new(&daemon.base, Some(&a_token))
        .get("/v1/resource-domains")
        .expect(200);
    let a_second = session(a_pending);
    Client::new(&daemon.base, Some(&a_second))
        .get("/v1/resource-domains")
        .expect(200);
    // B's flood evicted B's own oldest sessions (its limit is 64), and kept its newest.
    Client::new(&daemon.base, Some(&b_tokens[0]))
        .get("/v1/resource-domains")
        .expect_error(401, "UnauthorizedError");
    Client::new(&daemon.base, Some(b_tokens.last().unwrap()))
        .get("/v1/resource-domains")
        .expect(200);
}

#[test]
fn a_json_body_over_one_mebibyte_is_refused() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let big = "x".repeat(1024 * 1024);
    let bodies = [
        (
            "POST",
            "/v1/resource-domains".to_owned(),
            json!({"name": big}),
        ),
        (
            "PUT",
            "/v1/workspaces/ws".to_owned(),
            json!({"containers": [], "selector": {"label": format!("a={big}")}}),
        ),
        (
            "POST",
            format!("/v1/resource-domains/{domain}/instances/web/stop"),
            json!({"by": big}),
        ),
        (
            "POST",
            format!("/v1/resource-domains/{domain}/instances/web/up"),
            json!({"spec": {"env": {"A": big}}, "cause": "use"}),
        ),
    ];
    for (method, path, body) in bodies {
        let err = api
            .raw(method, &path, Some(body.to_string().into_bytes()), &[])
            .expect_error(400, "RequestRefusedError");
        assert!(
            err["message"]
                .as_str()
                .unwrap()
                .contains("body is larger than berth accepts (1 MiB)"),
            "{method} {path}: {err}"
        );
    }
    // Without a length up front (chunked), the limit holds all the same.
    let body = json!({"name": big}).to_string().into_bytes();
    let err = api
        .post_stream("/v1/resource-domains", std::io::Cursor::new(body))
        .expect_error(400, "RequestRefusedError");
    assert!(err["message"].as_str().unwrap().contains("1 MiB"), "{err}");
    // Just under the limit, the body is read and judged on what it says.
    let under = json!({"name": "x".repeat(1024 * 1024 - 100)});
    let err = api
        .post("/v1/resource-domains", under)
        .expect_error(400, "RequestRefusedError");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("body.name must be a string of 1 to 200")
    );
    // A request head larger than the HTTP layer reads is answered by it, with no 5xx.
    let answer = raw_exchange(
        &daemon,
        &format!(
            "GET /v1/workspaces/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n\r\n",
            "a".repeat(70_000)
        ),
    );
    assert!(
        answer.starts_with("HTTP/1.1 414"),
        "{}",
        &answer[..answer.len().min(200)]
    );
    assert!(
        api.get("/v1/resource-domains").expect(200)["items"]
            .as_array()
            .unwrap()
            .len()
            == 1
    );
}

#[test]
fn a_client_that_sends_its_headers_too_slowly_is_disconnected() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let address: SocketAddr = daemon
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("the daemon's address");
    // Many connections that never send a byte, and one that dribbles a header byte a second.
    let idle: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(address).expect("a connection"))
        .collect();
    let started = Instant::now();
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let dribbled = sent.clone();
    let dribbler = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(address).expect("a connection");
        stream
            .set_read_timeout(Some(Duration::from_millis(1000)))
            .unwrap();
        let head = format!(
            "GET /v1/resource-domains HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\nX-Slow: {}",
            "a".repeat(100)
        );
        for byte in head.bytes() {
            if stream.write_all(&[byte]).is_err() {
                break;
            }
            dribbled.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 256];
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => panic!(
                    "the daemon answered a request it never finished reading: {:?}",
                    String::from_utf8_lossy(&buf[..n])
                ),
                Err(_) => {}
            }
            if started.elapsed() > Duration::from_secs(30) {
                break;
            }
        }
        started.elapsed()
    });
    // Meanwhile, others are served: once the slow client is a few bytes (seconds) in.
    support::wait_until(Duration::from_secs(10), "the slow client dribbling", || {
        sent.load(std::sync::atomic::Ordering::SeqCst) >= 3
    });
    let api = daemon.client();
    api.get("/v1/resource-domains").expect(200);
    let dropped_after = dribbler.join().expect("the slow client");
    eprintln!("slowloris: dropped after {dropped_after:?}");
    assert!(
        dropped_after >= Duration::from_secs(8) && dropped_after <= Duration::from_secs(15),
        "the slow client was dropped after {dropped_after:?}"
    );
    for mut stream in idle {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(
            stream
                .read(&mut buf)
                .expect("the daemon closes, not the timeout"),
            0,
            "a connection that sent nothing is closed"
        );
    }
    api.get("/v1/resource-domains").expect(200);
}

/// Starts `berth serve` without `BERTH_SERVICE_KEYS`, so it uses the key file in `data_dir`,
/// logging at trace level.
fn serve_with_key_file(data_dir: &std::path::Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "--listen", "127.0.0.1:0", "--runtime", "none"])
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("BERTH_SERVICE_KEYS")
        .env("RUST_LOG", "trace")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the berth binary starts")
}

#[test]
fn the_generated_key_file_is_private_never_logged_and_a_readable_one_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let mut child = serve_with_key_file(&data_dir);
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("berth listening on ")
        .expect(&line)
        .to_owned();
    let key_file = data_dir.join("service-key");
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the key file is mode {mode:o}");
    let key = std::fs::read_to_string(&key_file)
        .unwrap()
        .trim()
        .to_owned();
    assert!(key.len() >= 32, "a long random key");
    let api = Client::new(&base, Some(&key));
    api.get("/v1/resource-domains").expect(200);
    api.post("/v1/resource-domains", json!({"name": "x"}))
        .expect(200);
    let mut stderr = child.stderr.take().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    // Not even at trace level does a log line carry the key.
    let mut log = String::new();
    stderr.read_to_string(&mut log).unwrap();
    assert!(log.contains("TRACE") || log.contains("DEBUG"), "{log}");
    assert!(!log.contains(&key), "the key reached the log");

    // A key file others can read is not used: the daemon says how to fix it and stops.
    std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = serve_with_key_file(&data_dir)
        .wait_with_output()
        .expect("the daemon ends");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("chmod 600"), "{stderr}");
    assert!(!stderr.contains(&key), "the key is never printed");
}

#[test]
fn control_characters_in_berths_own_names_are_refused_naming_the_field() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let expected = "must not contain control characters (U+0000 to U+001F, U+007F to U+009F)";
    for bad in [
        "a\u{0}b",
        "tab\there",
        "line\nbreak",
        "\u{1b}[31mred",
        "del\u{7f}",
        "\u{1f}",
        "next\u{85}line",
        "\u{9b}31mred",
    ] {
        let err = api
            .post("/v1/resource-domains", json!({"name": bad}))
            .expect_error(400, "RequestRefusedError");
        assert_eq!(err["message"], format!("body.name {expected}"), "{bad:?}");
        let err = api
            .post(
                &format!("/v1/resource-domains/{domain}/instances/web/rollback"),
                json!({"idempotencyKey": bad, "expectedSpecDigest": format!("sha256:{}", "0".repeat(64))}),
            )
            .expect_error(400, "RequestRefusedError");
        assert_eq!(
            err["message"],
            format!("body.idempotencyKey {expected}"),
            "{bad:?}"
        );
        let err = api
            .raw("GET", &format!("/v1/workspaces/{}", encode(bad)), None, &[])
            .expect_error(400, "RequestRefusedError");
        assert!(
            err["message"]
                .as_str()
                .unwrap()
                .starts_with("path.workspaceId must be"),
            "{bad:?}: {err}"
        );
    }
    // Other characters are names like any: accents, symbols, emoji.
    api.post(
        "/v1/resource-domains",
        json!({"name": "café \u{1F6A2} ünïcode"}),
    )
    .expect(200);
    let names: Vec<Value> = api.get("/v1/resource-domains").expect(200)["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("shop"), json!("café \u{1F6A2} ünïcode")]);
}

#[test]
fn a_json_body_with_a_key_twice_is_refused_at_every_depth_on_every_route_without_naming_it() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let inst = format!("/v1/resource-domains/{domain}/instances/web");
    let spec = up_spec().to_string();
    let spec_with = |field: &str, dup: &str| spec.replacen(&format!("\"{field}\":"), dup, 1);
    let digest = format!("sha256:{}", "0".repeat(64));
    // (method, path, body, the place the refusal names)
    let cases: Vec<(&str, String, String, &str)> = vec![
        (
            "POST",
            "/v1/resource-domains".into(),
            r#"{"name":"a","name":"b"}"#.into(),
            "body",
        ),
        (
            "POST",
            format!("{inst}/up"),
            format!(r#"{{"spec":{spec},"cause":"use","cause":"person"}}"#),
            "body",
        ),
        (
            "POST",
            format!("{inst}/up"),
            format!(
                r#"{{"spec":{},"cause":"use"}}"#,
                spec_with(
                    "env",
                    r#""env":{"SECRET_TOKEN_NAME":"1","SECRET_TOKEN_NAME":"2"},"x":"#
                )
            ),
            "body.spec.env",
        ),
        (
            "POST",
            format!("{inst}/up"),
            format!(
                r#"{{"spec":{},"cause":"use"}}"#,
                spec_with(
                    "limits",
                    r#""limits":{"cpuMillicores":250,"cpuMillicores":500,"memoryBytes":67108864},"x":"#
                )
            ),
            "body.spec.limits",
        ),
        (
            "POST",
            format!("{inst}/up"),
            format!(
                r#"{{"spec":{},"cause":"use"}}"#,
                spec_with(
                    "volumes",
                    r#""volumes":[{"name":"data","name":"other","mountPath":"/srv/data"}],"x":"#
                )
            ),
            "body.spec.volumes[0]",
        ),
        (
            "POST",
            format!("{inst}/up"),
            format!(
                r#"{{"spec":{},"cause":"use"}}"#,
                spec_with("alias", r#""alias":"web","alias":"#)
            ),
            "body.spec",
        ),
        (
            "POST",
            format!("{inst}/stop"),
            r#"{"by":"ada","by":"bob"}"#.into(),
            "body",
        ),
        (
            "POST",
            format!("{inst}/rollback"),
            format!(
                r#"{{"idempotencyKey":"k","expectedSpecDigest":"{digest}","idempotencyKey":"k"}}"#
            ),
            "body",
        ),
        (
            "PUT",
            "/v1/workspaces/ws".into(),
            r#"{"containers":[],"selector":{"label":"a=b","label":"c=d"}}"#.into(),
            "body.selector",
        ),
        (
            "POST",
            "/v1/workspaces/ws/leases".into(),
            r#"{"ttlSeconds":5,"ttlSeconds":6}"#.into(),
            "body",
        ),
        (
            "PUT",
            format!("/v1/resource-domains/{domain}/workspace-links/ws"),
            r#"{"worktreeKey":"main","worktreeKey":"main"}"#.into(),
            "body",
        ),
    ];
    for (method, path, body, place) in &cases {
        let err = api
            .raw(method, path, Some(body.clone().into_bytes()), &[])
            .expect_error(400, "RequestRefusedError");
        assert_eq!(
            err["message"],
            format!("{place} has a duplicate key"),
            "{method} {path} {body}"
        );
        assert!(!err.to_string().contains("SECRET_TOKEN_NAME"), "{err}");
    }
    // Routes that take no payload refuse one with a key twice like any other.
    api.raw(
        "POST",
        &format!("/v1/resource-domains/{domain}/fence"),
        Some(br#"{"a":1,"a":1}"#.to_vec()),
        &[],
    )
    .expect_error(400, "RequestRefusedError");
    // The exec frame too.
    let mut body = br#"{"argv":["true"],"user":null,"timeoutMs":5000,"argv":["sh"]}"#.to_vec();
    body.push(b'\n');
    let err = api
        .raw("POST", &format!("{inst}/exec"), Some(body), &[])
        .expect_error(400, "RequestRefusedError");
    assert_eq!(err["message"], "frame has a duplicate key");
    // Nothing was written.
    let domains = api.get("/v1/resource-domains").expect(200)["items"].clone();
    assert_eq!(domains.as_array().unwrap().len(), 1, "{domains}");
    assert_eq!(domains[0]["state"], "active");
    api.get("/v1/workspaces/ws")
        .expect_error(404, "ResourceWorkspaceNotFoundError");
}

/// Sends raw bytes and reads the answer to the end (the daemon closes).
fn raw_bytes(daemon: &Daemon, request: &[u8]) -> String {
    let address: SocketAddr = daemon
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("the daemon's address");
    let mut stream = TcpStream::connect(address).expect("a connection");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn every_answer_berth_gives_to_a_strange_header_carries_a_tag_and_the_http_layer_refuses_the_rest()
{
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    // Control characters in a header value: the HTTP layer (hyper) refuses the request head
    // before berth sees it, with a bare 400 and a closed connection (docs/security.md).
    for bad in [&b"a\x00b"[..], b"a\x01b", b"a\x1fb", b"a\x7fb"] {
        let mut request = format!(
            "GET /v1/resource-domains HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\nX-Note: "
        )
        .into_bytes();
        request.extend_from_slice(bad);
        request.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
        let answer = raw_bytes(&daemon, &request);
        assert!(answer.starts_with("HTTP/1.1 400 "), "{bad:?}: {answer}");
        assert!(!answer.contains("items"), "{bad:?}: {answer}");
    }
    // Bytes past ASCII in a header value reach berth, and every answer it gives is tagged.
    let head = |extra: &[u8], host: &[u8], auth: &[u8]| {
        let mut r = b"POST /v1/resource-domains HTTP/1.1\r\nHost: ".to_vec();
        r.extend_from_slice(host);
        r.extend_from_slice(b"\r\nAuthorization: ");
        r.extend_from_slice(auth);
        r.extend_from_slice(b"\r\n");
        r.extend_from_slice(extra);
        r.extend_from_slice(b"Content-Length: 13\r\nConnection: close\r\n\r\n{\"name\":\"x\"}\n");
        r
    };
    let bearer = format!("Bearer {KEY}").into_bytes();
    let mut bad_bearer = bearer.clone();
    bad_bearer.push(0xff);
    for (request, status, tag) in [
        (
            head(b"", b"127.0.0.1\xff", &bearer),
            403,
            "HostNotAllowedError",
        ),
        (
            head(b"", b"127.0.0.1", &bad_bearer),
            401,
            "UnauthorizedError",
        ),
        (
            head(b"", b"127.0.0.1", b"Bearer \xfe\xff"),
            401,
            "UnauthorizedError",
        ),
    ] {
        let answer = raw_bytes(&daemon, &request);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status} ")),
            "{answer}"
        );
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        let body: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{answer}"));
        assert_eq!(body["_tag"], tag, "{answer}");
    }
    // A header berth does not read, with such bytes, changes nothing.
    let answer = raw_bytes(
        &daemon,
        &head(
            b"X-Note: caf\xe9\r\nContent-Type: application/json\xff\r\n",
            b"127.0.0.1",
            &bearer,
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
    // A chunked body that breaks off mid-way is berth's to refuse, and it says so with a tag.
    let answer = raw_bytes(
        &daemon,
        format!(
            "POST /v1/resource-domains HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n\
             Transfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\n"
        )
        .as_bytes(),
    );
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(
        answer.contains(r#""_tag":"RequestRefusedError""#),
        "{answer}"
    );
    assert!(answer.contains("body could not be read"), "{answer}");
    assert_eq!(
        api.get("/v1/resource-domains").expect(200)["items"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn query_parameters_are_typed_and_every_bad_one_is_named() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let list = format!("/v1/resource-domains/{domain}/instances");
    for (query, message) in [
        (
            "archived=yes",
            "query.archived must be one of \"true\", \"false\"",
        ),
        (
            "archived",
            "query.archived must be one of \"true\", \"false\"",
        ),
        (
            "archived=true&archived=false",
            "query.archived is given twice",
        ),
        (
            "archived=%00",
            "query.archived must be one of \"true\", \"false\"",
        ),
    ] {
        let err = api
            .get(&format!("{list}?{query}"))
            .expect_error(400, "RequestRefusedError");
        assert_eq!(err["message"], message, "{query}");
    }
    assert_eq!(
        api.get(&format!("{list}?archived=true&other=1"))
            .expect(200)["items"],
        json!([])
    );
    assert_eq!(
        api.get(&format!("{list}?archived=f%61lse")).expect(200)["items"],
        json!([])
    );
    // Every problem at once, none quoted.
    let err = api
        .get(&format!(
            "{list}/web/logs?tail=secret-tail-value&follow=secret-follow-value"
        ))
        .expect_error(400, "RequestRefusedError");
    assert_eq!(
        err["message"],
        "query.tail must be an integer between 0 and 100000; query.follow must be one of \"true\", \"false\""
    );
    assert!(!err.to_string().contains("secret"));
    let err = api
        .get(&format!("{list}/web/logs?tail=100001"))
        .expect_error(400, "RequestRefusedError");
    assert_eq!(
        err["message"],
        "query.tail must be an integer between 0 and 100000"
    );
    // Well-formed, the question goes on to the instance (there is none).
    api.get(&format!("{list}/web/logs?tail=0&follow=false"))
        .expect_error(404, "ResourceInstanceNotFoundError");
}

#[test]
fn the_openapi_document_describes_the_spec_and_the_queries_in_full() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let doc = daemon.client().get("/v1/openapi.json").expect(200);
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["UpRequest"]["properties"]["spec"]["$ref"],
        "#/components/schemas/ResourceInstanceSpec"
    );
    let spec = &schemas["ResourceInstanceSpec"];
    assert_eq!(spec["additionalProperties"], false);
    let mut required: Vec<&str> = spec["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort_unstable();
    assert_eq!(
        required,
        [
            "alias",
            "command",
            "env",
            "idleStopAfterSeconds",
            "image",
            "limits",
            "ready",
            "volumes",
            "worktreeKey"
        ]
    );
    let p = &spec["properties"];
    assert_eq!(p["alias"]["pattern"], "^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$");
    assert!(
        p["image"]["pattern"]
            .as_str()
            .unwrap()
            .ends_with("@sha256:[0-9a-f]{64}$")
    );
    assert_eq!(p["limits"]["properties"]["cpuMillicores"]["minimum"], 10);
    assert_eq!(
        p["limits"]["properties"]["memoryBytes"]["minimum"],
        16 * 1024 * 1024
    );
    assert_eq!(p["volumes"]["maxItems"], 16);
    assert!(p["env"]["propertyNames"]["pattern"].is_string());
    let kinds: Vec<&Value> = p["ready"]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["properties"]["kind"]["enum"][0])
        .collect();
    assert_eq!(kinds, [&json!("tcp"), &json!("exec")]);
    // The example is one the daemon accepts as a spec: up answers past decoding (here, that no
    // runtime is configured), not with a refusal.
    let example = &schemas["UpRequest"]["example"];
    assert_eq!(example["spec"], spec["example"]);
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.post(
        &format!("/v1/resource-domains/{domain}/instances/web/up"),
        example.clone(),
    )
    .expect_error(409, "ResourceRuntimeUnsupportedError");
    // Query parameters are typed.
    let list =
        &doc["paths"]["/v1/resource-domains/{resourceDomainId}/instances"]["get"]["parameters"];
    let archived = list
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "archived")
        .expect("archived");
    assert_eq!(archived["in"], "query");
    assert_eq!(archived["required"], false);
    assert!(
        archived["schema"].to_string().contains("boolean"),
        "{archived}"
    );
}
