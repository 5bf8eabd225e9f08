//! Capabilities per key (docs/security.md, "Capabilities"): an IDE plugin's read-and-link key
//! lists, watches and links, and is refused everything else with a 403 naming the capability,
//! on every route of the OpenAPI document; a per-domain grant; a grants file that names no key
//! of the daemon stops it at start. A key the grants file does not name may do everything: the
//! rest of the suite runs with such keys, unchanged.

use berth_testkit as support;

use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use support::{
    Client, Daemon, KEY, Launch, OTHER_KEY, block_on, busybox_image, domain_id, key_id as id, spec,
};

const READY: Duration = Duration::from_secs(60);
const IDE_KEY: &str = "test-key-ide-plugin-cccccccc";
const TOOL_KEY: &str = "test-key-teammate-tool-dddd";

/// A grants file in a directory of its own (kept alive by the returned guard), for the tests
/// that start a daemon on a file it must refuse.
fn grants_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("grants.toml");
    std::fs::write(&path, text).expect("the grants file");
    (dir, path)
}

/// The developer's key (no entry: everything), an IDE plugin's (read and link, acting for the
/// developer's domains) and a teammate's tool (read, and start/stop in one domain by name).
fn daemon_with_grants(shop: &str) -> Daemon {
    let text = format!(
        "[keys.{ide}]\nactsFor = \"{dev}\"\ncapabilities = [\"read\", \"workspaces:link\"]\n\n\
         [keys.{tool}]\nactsFor = \"{dev}\"\ncapabilities = [\"read\"]\n\
         serviceDeploymentGrants = [{{ serviceId = \"{shop}\", capabilities = [\"instances:lifecycle\"] }}]\n",
        ide = id(IDE_KEY),
        tool = id(TOOL_KEY),
        dev = id(KEY),
    );
    Launch::new()
        .keys(&[KEY, IDE_KEY, TOOL_KEY, OTHER_KEY])
        .grants(&text)
        .start()
}

/// `path` with every `{param}` replaced by a value of the right form.
fn fill(path: &str, domain: &str) -> String {
    path.replace("{resourceDomainId}", domain)
        .replace("{key}", "db")
        .replace("{snapshotId}", "snp:00000000-0000-4000-8000-000000000001")
        .replace("{rolloutId}", "rol:00000000-0000-4000-8000-000000000002")
        .replace("{templateId}", "0123456789ab")
        .replace("{workspaceId}", "ide-1")
        .replace("{leaseId}", "lea:00000000-0000-4000-8000-000000000003")
        .replace("{name}", "pg")
}

#[test]
fn a_read_and_link_key_lists_watches_and_links_and_is_refused_every_other_route_with_the_capability()
 {
    let daemon = daemon_with_grants("shop");
    let dev = daemon.client();
    let ide = daemon.client_with(Some(IDE_KEY));
    let domain = dev.create_domain("shop");
    dev.up_ok(&domain, "db", &spec(&busybox_image(), "db"), "use");
    dev.wait_state(&domain, "db", "running", READY);

    // Who the plugin is: the developer's key id (it acts for that key), read and link only.
    let me = ide.answer(|c| c.whoami()).expect(200);
    assert_eq!(me["keyId"], json!(id(KEY)), "{me}");
    assert_eq!(me["restricted"], json!(true), "{me}");
    assert_eq!(
        me["capabilities"],
        json!(["read", "workspaces:link"]),
        "{me}"
    );
    let everything = dev.answer(|c| c.whoami()).expect(200);
    assert_eq!(everything["restricted"], json!(false), "{everything}");
    assert_eq!(
        everything["capabilities"].as_array().map(Vec::len),
        Some(11)
    );

    // It lists, gets and watches the developer's instances...
    let domains = ide.call(|c| c.domains()).expect("the domains");
    assert!(
        domains
            .iter()
            .any(|d| d.resource_domain_id.as_str() == domain),
        "{domains:?}"
    );
    assert_eq!(ide.instance(&domain, "db")["state"]["kind"], "running");
    let first = block_on(async {
        Box::pin(ide.api().events(&domain_id(&domain), None))
            .next()
            .await
            .expect("an event")
            .expect("the stream opens")
    });
    assert!(
        matches!(first, berth_client::DomainEvent::Instance { .. }),
        "the stream starts with the instances: {first:?}"
    );
    // ...and links its workspace.
    let workspace = berth_client::WorkspaceRequest {
        containers: vec![],
        selector: None,
    };
    ide.call(|c| c.put_workspace("ide-1", &workspace))
        .expect("a workspace");
    let did = domain_id(&domain);
    ide.call(|c| c.link(&did, "ide-1", "feature-x"))
        .expect("a link");

    // Every route of the document declares what it needs; each one the plugin lacks answers
    // 403 naming it, for the domain that exists and for one that does not alike.
    let doc = dev.call(|c| c.openapi()).expect("the document");
    let allowed = ["none", "read", "workspaces:link"];
    let nowhere = "rdm:00000000-0000-4000-8000-0000000000ff";
    let mut refused = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        if !path.starts_with("/v1/") || path == "/v1/ui/sessions" {
            continue; // /healthz and trading a sign-in code take no key
        }
        for (method, operation) in item.as_object().expect("a path item") {
            let method = method.to_ascii_uppercase();
            let Some(capability) = operation["x-berth-capability"].as_str() else {
                panic!(
                    "{method} {path} declares no capability (crates/berth-http/src/capabilities.rs)"
                );
            };
            if allowed.contains(&capability) {
                continue;
            }
            let body = matches!(method.as_str(), "POST" | "PUT").then(|| b"{}".to_vec());
            let answer = ide.raw(&method, &fill(path, &domain), body.clone(), &[]);
            let error = answer.expect_error(403, "ServiceKeyCapabilityMissingError");
            assert_eq!(
                error["capability"],
                json!(capability),
                "{method} {path}: {error}"
            );
            let elsewhere = ide
                .raw(&method, &fill(path, nowhere), body, &[])
                .expect_error(403, "ServiceKeyCapabilityMissingError");
            assert_eq!(
                elsewhere, error,
                "{method} {path}: a refusal must not tell whether the domain exists"
            );
            refused.push(capability.to_owned());
        }
    }
    for family in [
        "instances:exec",
        "instances:lifecycle",
        "instances:archive",
        "data:snapshot",
        "deployment:rollback-route",
        "deployment:promote-route",
        "deployment:create-greenfield",
        "deployment:preflight",
        "domains:create",
    ] {
        assert!(
            refused.iter().any(|c| c == family),
            "no route needing {family} was tried: {refused:?}"
        );
    }
    // Nothing the refused calls named happened.
    let db = dev.instance(&domain, "db");
    assert_eq!(db["state"]["kind"], "running", "{db}");
    assert_eq!(
        dev.call(|c| c.snapshots(&did, None))
            .expect("the snapshots"),
        vec![]
    );
}

#[test]
fn a_grant_for_one_domain_allows_there_and_nowhere_else() {
    let daemon = daemon_with_grants("shop");
    let dev = daemon.client();
    let tool = daemon.client_with(Some(TOOL_KEY));
    let shop = dev.create_domain("shop");
    let blog = dev.create_domain("blog");
    for domain in [&shop, &blog] {
        dev.up_ok(domain, "db", &spec(&busybox_image(), "db"), "use");
        dev.wait_state(domain, "db", "running", READY);
    }
    let me = tool.answer(|c| c.whoami()).expect(200);
    assert_eq!(
        me["serviceDeploymentGrants"],
        json!([{"serviceId": "shop", "capabilities": ["instances:lifecycle"]}]),
        "{me}"
    );
    let stop = |domain: &str| {
        let domain = domain_id(domain);
        tool.call(|c| c.stop(&domain, "db", "the teammate's tool"))
    };
    let refused = support::refused(stop(&blog), 403, "ServiceKeyCapabilityMissingError");
    assert_eq!(refused["capability"], "instances:lifecycle");
    assert_eq!(dev.instance(&blog, "db")["state"]["kind"], "running");
    stop(&shop).expect("a stop");
    dev.wait_state(&shop, "db", "stopped", READY);
    // Exec is granted nowhere (raw: the point is the route's capability, before any frame).
    tool.post(
        &format!("/v1/resource-domains/{shop}/instances/db/exec"),
        json!({"argv": ["true"]}),
    )
    .expect_error(403, "ServiceKeyCapabilityMissingError");
}

#[test]
fn a_grant_by_id_matches_that_domain_and_never_a_domain_named_like_the_id() {
    // The domain the grant names by id exists before the grants file does: a first daemon on
    // the same data directory makes it.
    let data = tempfile::tempdir().expect("a data directory");
    let prefix = support::daemon_prefix();
    let granted = {
        let first = Launch::new().prefix(&prefix).data_dir(data.path()).start();
        first.client().create_domain("shop")
    };
    // The tool may create domains, and create and exec in the granted domain, by its id.
    let text = format!(
        "[keys.{tool}]\nactsFor = \"{dev}\"\ncapabilities = [\"read\", \"domains:create\"]\n\
         serviceDeploymentGrants = [{{ serviceId = \"{granted}\", capabilities = \
         [\"deployment:create-greenfield\", \"instances:exec\"] }}]\n",
        tool = id(TOOL_KEY),
        dev = id(KEY),
    );
    let daemon = Launch::new()
        .prefix(&prefix)
        .data_dir(data.path())
        .keys(&[KEY, TOOL_KEY])
        .grants(&text)
        .start();
    let tool = daemon.client_with(Some(TOOL_KEY));

    // A domain *named* like the granted id: the tool may make it, and gains nothing there.
    let lookalike = tool.create_domain(&granted);
    assert_ne!(lookalike, granted);
    let refused = tool
        .up(&lookalike, "db", &spec(&busybox_image(), "db"), "use")
        .expect_error(403, "ServiceKeyCapabilityMissingError");
    assert_eq!(
        refused["capability"], "deployment:create-greenfield",
        "{refused}"
    );
    let refused = tool
        .post(
            &format!("/v1/resource-domains/{lookalike}/instances/db/exec"),
            json!({"argv": ["true"]}),
        )
        .expect_error(403, "ServiceKeyCapabilityMissingError");
    assert_eq!(refused["capability"], "instances:exec", "{refused}");

    // The granted domain, by its id: both allowed.
    tool.up_ok(&granted, "db", &spec(&busybox_image(), "db"), "use");
    tool.wait_state(&granted, "db", "running", READY);
    let ran = tool
        .exec(&granted, "db", &["true"], None, 30_000, b"")
        .expect(200);
    assert_eq!(ran["exitCode"], 0, "{ran}");
}

#[test]
fn a_grants_file_naming_no_key_of_the_daemon_or_writable_by_others_stops_it_at_start() {
    let (_dir, path) = grants_file("[keys.0123456789ab]\ncapabilities = [\"read\"]\n");
    let err = Launch::new()
        .args(&["--grants", path.to_str().unwrap()])
        .try_start()
        .err()
        .expect("the daemon refuses the grants file");
    assert!(
        err.contains("keys.0123456789ab: no service key of this daemon has that id"),
        "{err}"
    );

    let (_dir, path) = grants_file(&format!("[keys.{}]\ncapabilities = [\"read\"]\n", id(KEY)));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = Launch::new()
        .args(&["--grants", path.to_str().unwrap()])
        .try_start()
        .err()
        .expect("the daemon refuses a grants file others may change");
    assert!(err.contains("chmod go-w"), "{err}");
}

#[test]
fn the_cli_names_the_missing_capability_and_where_it_is_granted() {
    let daemon = daemon_with_grants("shop");
    let out = std::process::Command::new(support::berth_binary())
        .args(["whoami", "--url", &daemon.base])
        .env("BERTH_SERVICE_KEYS", IDE_KEY)
        .output()
        .expect("berth whoami runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("read, workspaces:link"), "{text}");
    assert!(text.contains("grants file limits this key"), "{text}");

    let out = std::process::Command::new(support::berth_binary())
        .args(["domains", "--url", &daemon.base])
        .env("BERTH_SERVICE_KEYS", IDE_KEY)
        .output()
        .expect("berth domains runs");
    assert!(out.status.success(), "reading is granted");

    let out = std::process::Command::new(support::berth_binary())
        .args(["doctor", "--url", &daemon.base])
        .env("BERTH_SERVICE_KEYS", IDE_KEY)
        .output()
        .expect("berth doctor runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("the grants file limits it to read, workspaces:link"),
        "{said}"
    );

    // `berth up` in a fresh repository would create its domain: the plugin's key may not.
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("agent");
    std::fs::create_dir(&repo).unwrap();
    support::git_init(&repo);
    std::fs::write(
        repo.join("berth.toml"),
        format!(
            "[instances.web]\nimage = \"{}\"\nready = {{ tcp = 8080 }}\n",
            busybox_image()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(support::berth_binary())
        .args(["up", "--url", &daemon.base])
        .current_dir(&repo)
        .env("BERTH_SERVICE_KEYS", IDE_KEY)
        .env_remove("BERTH_DATA_DIR")
        .output()
        .expect("berth up runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("lacks the capability `domains:create`")
            && said.contains("grants file")
            && said.contains("berth whoami"),
        "{said}"
    );
    let client: Client = daemon.client();
    let domains = client.call(|c| c.domains()).expect("the domains");
    assert!(
        !domains.iter().any(|d| d.name.contains("agent")),
        "nothing was created: {domains:?}"
    );
}
