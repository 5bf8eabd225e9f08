//! Tags in, digests out, end to end: `berth add`, `berth init --with` and `berth pin` against
//! real registries (the fixture registry, and one that wants a password), with the real binary
//! in a real git repository.

use berth_testkit as support;

use std::path::Path;
use std::process::Command;

use support::auth_registry::AuthRegistry;
use support::tagging::{Target, push_tag};
use support::token_registry::{self, Realm, TokenRegistry};
use support::{Daemon, KEY, LocalImages, busybox_image, fixture};

/// A fresh git repository with no berth.toml.
fn fresh_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    support::git_init(dir.path());
    dir
}

/// `berth args...` in `dir`: its exit code, stdout and stderr. `docker_config` is the
/// `DOCKER_CONFIG` folder (default: an empty one, so the user's own never counts).
fn berth(
    dir: &Path,
    args: &[&str],
    docker_config: Option<&Path>,
    url: Option<&str>,
) -> (i32, String, String) {
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .current_dir(dir)
        .env("DOCKER_CONFIG", docker_config.unwrap_or(empty.path()))
        .env("BERTH_URL", url.unwrap_or("http://127.0.0.1:9"))
        .env("BERTH_SERVICE_KEYS", KEY)
        .env_remove("BERTH_IMAGE_MIRROR")
        .output()
        .expect("berth runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A repository name of this test's own on the fixture registry.
fn scope(name: &str) -> String {
    format!("{}/{name}", support::run_prefix().to_lowercase())
}

#[test]
fn add_pins_what_the_registry_serves_and_pin_follows_the_tag_keeping_the_file() {
    let registry = fixture("BERTH_TEST_REGISTRY");
    let repository = scope("app");
    let first = push_tag(
        &busybox_image(),
        &Target::fixture_registry(),
        &repository,
        "1",
    );
    let repo = fresh_repo();
    let tagged = format!("{registry}/{repository}:1");
    let (code, out, err) = berth(
        repo.path(),
        &["add", "app", &tagged, "--port", "8080"],
        None,
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    assert!(
        file.contains(&format!("image = \"{tagged}@{first}\"")),
        "{file}"
    );
    assert!(file.contains("ready = { tcp = 8080 }"), "{file}");

    // A comment of the user's own, then the tag moves to another image.
    let edited = file.replace("ready = {", "# ours, kept\nready = {");
    std::fs::write(repo.path().join("berth.toml"), &edited).unwrap();
    let second = push_tag(
        &fixture("BERTH_TEST_ECHO_IMAGE"),
        &Target::fixture_registry(),
        &repository,
        "1",
    );
    assert_ne!(first, second);
    let (code, out, err) = berth(repo.path(), &["pin", "--json"], None, None);
    assert_eq!(code, 0, "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["items"][0]["from"], first.as_str());
    assert_eq!(report["items"][0]["to"], second.as_str());
    assert_eq!(report["items"][0]["changed"], true);
    let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    assert_eq!(
        file,
        edited.replace(&first, &second),
        "only the digest changed"
    );
    let (code, out, _) = berth(repo.path(), &["pin"], None, None);
    assert_eq!(code, 0);
    assert!(out.contains("unchanged"), "{out}");

    // Refusals name what is wrong and write nothing.
    let before = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    for (args, says) in [
        (
            vec!["add", "app", tagged.as_str(), "--port", "1"],
            "already has instances.app",
        ),
        (
            vec![
                "add",
                "other",
                &format!("{registry}/{repository}:nope"),
                "--port",
                "1",
            ],
            "has no tag nope",
        ),
        // A misspelt image is said to be missing, not asked for a port.
        (
            vec!["add", "other", &format!("{registry}/{repository}:nope")],
            "has no tag nope",
        ),
        (
            vec!["add", "other", "Bad/Name:1", "--port", "1"],
            "lower-case",
        ),
        (
            vec!["add", "other", "127.0.0.1:9/x:1", "--port", "1"],
            "could not reach the registry 127.0.0.1:9",
        ),
        (vec!["init"], "already exists"),
    ] {
        let (code, out, err) = berth(repo.path(), &args, None, None);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        assert!(err.contains(says), "{args:?}: {err}");
        let after = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
        assert_eq!(after, before, "{args:?} wrote to berth.toml");
    }

    // No preset and no --port: the image's one EXPOSEd port (the echo fixture's 7000, read
    // from its config in the registry) is its ready check, and berth says so.
    let (code, out, err) = berth(
        repo.path(),
        &["add", "echo", &format!("{registry}/{repository}:1")],
        None,
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("exposes one tcp port, 7000"), "{err}");
    let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    let added = &file[file.find("[instances.echo]").expect("instances.echo added")..];
    assert!(added.contains("ready = { tcp = 7000 }"), "{file}");
    assert!(added.contains(&second), "{file}");
}

#[test]
fn a_registry_that_wants_a_password_is_read_with_the_docker_configs_credentials() {
    let registry = AuthRegistry::start();
    let pushed = push_tag(&busybox_image(), &registry.target(), "team/app", "2");
    let repo = fresh_repo();
    let tagged = format!("{}/team/app:2", registry.address());
    let (code, _, err) = berth(
        repo.path(),
        &["add", "app", &tagged, "--port", "8080"],
        None,
        None,
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("wants credentials")
            && err.contains(&format!("docker login {}", registry.address())),
        "{err}"
    );
    assert!(
        !repo.path().join("berth.toml").exists(),
        "a refused add wrote a file"
    );

    let config = registry.docker_config();
    let (code, out, err) = berth(
        repo.path(),
        &["add", "app", &tagged, "--port", "8080"],
        Some(config.path()),
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    assert!(file.contains(&format!("{tagged}@{pushed}")), "{file}");
    assert!(
        !out.contains(support::auth_registry::PASSWORD)
            && !err.contains(support::auth_registry::PASSWORD)
    );

    // Wrong credentials are said to be refused.
    let wrong = tempfile::tempdir().unwrap();
    std::fs::write(
        wrong.path().join("config.json"),
        format!(
            r#"{{"auths": {{"{}": {{"auth": "YmVydGgtdGVzdDp3cm9uZw=="}}}}}}"#,
            registry.address()
        ),
    )
    .unwrap();
    let (code, _, err) = berth(repo.path(), &["pin", "app"], Some(wrong.path()), None);
    assert_eq!(code, 1);
    assert!(err.contains("refused the credentials"), "{err}");
}

#[test]
fn init_with_postgres_and_redis_then_up_runs_both_with_no_digest_typed() {
    let registry = fixture("BERTH_TEST_REGISTRY");
    let mirror = format!("{registry}/{}", support::run_prefix().to_lowercase());
    let pg = push_tag(
        &fixture("BERTH_TEST_POSTGRES_IMAGE"),
        &Target::fixture_registry(),
        &scope("postgres"),
        "17",
    );
    let redis = push_tag(
        &fixture("BERTH_TEST_REDIS_IMAGE"),
        &Target::fixture_registry(),
        &scope("redis"),
        "7",
    );
    let repo = fresh_repo();
    let (code, out, err) = berth(
        repo.path(),
        &["init", "--with", "postgres,redis", "--mirror", &mirror],
        None,
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    assert!(
        file.contains(&format!("{mirror}/postgres:17@{pg}")),
        "{file}"
    );
    assert!(
        file.contains(&format!("{mirror}/redis:7@{redis}")),
        "{file}"
    );

    // Only this test's two repositories: the run's other tests pull theirs under the same
    // mirror, and removing one of theirs while it starts fails its image evidence.
    let _pulled = [
        LocalImages(format!("{mirror}/postgres@")),
        LocalImages(format!("{mirror}/redis@")),
    ];
    let daemon = Daemon::start();
    let (code, out, err) = berth(
        repo.path(),
        &["up", "--timeout", "3m"],
        None,
        Some(&daemon.base),
    );
    assert_eq!(code, 0, "{out}{err}\n{}", daemon.log_tail(40));
    assert_eq!(out.matches("running").count(), 2, "{out}");
    let (code, out, err) = berth(repo.path(), &["env"], None, Some(&daemon.base));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("DATABASE_URL='postgres://postgres:dev@127.0.0.1:"),
        "{out}"
    );
    assert!(out.contains("REDIS_URL='redis://127.0.0.1:"), "{out}");
    let (code, out, err) = berth(
        repo.path(),
        &[
            "exec",
            "postgres",
            "--user",
            "postgres",
            "--",
            "psql",
            "-tAc",
            "select 40 + 2",
        ],
        None,
        Some(&daemon.base),
    );
    assert_eq!((code, out.trim()), (0, "42"), "{err}");
}

#[test]
fn unknown_presets_are_named_with_the_known_ones() {
    let repo = fresh_repo();
    let (code, _, err) = berth(
        repo.path(),
        &["init", "--with", "postgres,cassandra"],
        None,
        None,
    );
    assert_eq!(code, 1);
    assert!(err.contains("\"cassandra\" is not a service berth knows; it knows postgres, redis, mailpit, mysql, mongo"), "{err}");
    assert!(!repo.path().join("berth.toml").exists());
}

#[test]
fn outdated_lists_a_moved_tag_and_promote_runs_it_then_pins_the_file() {
    let registry = fixture("BERTH_TEST_REGISTRY");
    let repository = scope("served");
    let first = push_tag(
        &busybox_image(),
        &Target::fixture_registry(),
        &repository,
        "2",
    );
    let _pulled = LocalImages(format!("{registry}/{repository}"));
    let repo = fresh_repo();
    let tagged = format!("{registry}/{repository}:2");
    let (code, out, err) = berth(
        repo.path(),
        &["add", "web", &tagged, "--port", "8080"],
        None,
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let daemon = Daemon::start();
    let url = Some(daemon.base.as_str());
    let (code, out, err) = berth(repo.path(), &["up", "--timeout", "2m"], None, url);
    assert_eq!(code, 0, "{out}{err}\n{}", daemon.log_tail(40));

    let (code, out, err) = berth(repo.path(), &["outdated"], None, url);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("every tagged instance runs what its tag names now"),
        "{out}"
    );
    let (code, _, err) = berth(repo.path(), &["promote", "web"], None, url);
    assert_eq!(code, 1);
    assert!(err.contains("web is up to date"), "{err}");

    // The tag moves: listed, not run, and the file keeps its pin until a promotion.
    let second = push_tag(
        &fixture("BERTH_TEST_VOLUME_IMAGE"),
        &Target::fixture_registry(),
        &repository,
        "2",
    );
    let before = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    let (code, out, err) = berth(repo.path(), &["outdated", "--json"], None, url);
    assert_eq!(code, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    let item = &listed["items"][0];
    assert_eq!(item["name"], "web", "{listed}");
    assert_eq!(item["outdated"], true, "{listed}");
    assert_eq!(item["running"], format!("{tagged}@{first}"), "{listed}");
    assert_eq!(
        item["release"]["data"]["registryRootDigest"],
        second.as_str()
    );
    let (code, out, _) = berth(repo.path(), &["outdated"], None, url);
    assert_eq!(code, 0);
    assert!(out.contains("web") && out.contains(&second[..19]), "{out}");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("berth.toml")).unwrap(),
        before
    );

    let (code, out, err) = berth(repo.path(), &["promote", "web", "--json"], None, url);
    assert_eq!(code, 0, "{out}{err}\n{}", daemon.log_tail(40));
    let done: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(done["rollout"]["status"]["status"], "succeeded", "{done}");
    assert_eq!(done["rollout"]["plan"]["mode"], "promotion", "{done}");
    assert_eq!(done["pinned"], true, "{done}");
    assert_eq!(done["instance"]["state"]["kind"], "running", "{done}");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("berth.toml")).unwrap(),
        before.replace(&first, &second),
        "only the pin changed"
    );
    let (code, out, _) = berth(repo.path(), &["outdated"], None, url);
    assert_eq!(code, 0);
    assert!(
        out.contains("every tagged instance runs what its tag names now"),
        "{out}"
    );
}

#[test]
fn a_password_registry_is_pulled_observed_and_promoted_with_the_docker_configs_credentials() {
    let registry = AuthRegistry::start();
    let first = push_tag(&busybox_image(), &registry.target(), "team/svc", "3");
    let config = registry.docker_config();
    let repo = fresh_repo();
    let tagged = format!("{}/team/svc:3", registry.address());
    let (code, out, err) = berth(
        repo.path(),
        &["add", "svc", &tagged, "--port", "8080"],
        Some(config.path()),
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let _pulled = LocalImages(format!("{}/team/svc", registry.address()));
    // The daemon reads the same Docker config: the engine pulls with its credentials, and
    // observation reads the tag with them.
    let daemon = Daemon::start_with_env(&[("DOCKER_CONFIG", config.path().to_str().unwrap())]);
    let url = Some(daemon.base.as_str());
    let (code, out, err) = berth(repo.path(), &["up", "--timeout", "2m"], None, url);
    assert_eq!(code, 0, "{out}{err}\n{}", daemon.log_tail(40));

    let second = push_tag(
        &fixture("BERTH_TEST_VOLUME_IMAGE"),
        &registry.target(),
        "team/svc",
        "3",
    );
    let (code, out, err) = berth(repo.path(), &["outdated", "--json"], None, url);
    assert_eq!(code, 0, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["items"][0]["outdated"], true, "{listed}");
    let (code, out, err) = berth(repo.path(), &["promote", "svc", "--json"], None, url);
    assert_eq!(code, 0, "{out}{err}\n{}", daemon.log_tail(40));
    let done: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(done["rollout"]["status"]["status"], "succeeded", "{done}");
    let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    assert!(
        file.contains(&format!("{tagged}@{second}")) && !file.contains(&first),
        "{file}"
    );
    let log = daemon.log_tail(400);
    assert!(
        !log.contains(support::auth_registry::PASSWORD),
        "the daemon logged the password"
    );
}

/// `berth args...` in `dir` as [`berth`] runs it, and the largest resident memory the process
/// had, in KiB (its parent's rusage of its children: berth is its only child).
fn berth_measured(dir: &Path, args: &[&str], docker_config: &Path) -> (i32, String, u64) {
    // The peak is read by a small parent of berth's own (python3), not by this test process:
    // Linux counts into a child's `ru_maxrss` the peak of the memory it was forked or spawned
    // from, and this process is as large as every test running beside it has made it.
    const MEASURE: &str = "import resource, subprocess, sys\n\
        code = subprocess.run(sys.argv[1:]).returncode\n\
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n\
        sys.stderr.write(f'\\nberth-peak-kib={peak}\\n')\n\
        sys.exit(code if code >= 0 else 1)\n";
    let out = Command::new("python3")
        .args(["-c", MEASURE, env!("CARGO_BIN_EXE_berth")])
        .args(args)
        .current_dir(dir)
        .env("DOCKER_CONFIG", docker_config)
        .env("BERTH_URL", "http://127.0.0.1:9")
        .env("BERTH_SERVICE_KEYS", KEY)
        .env_remove("BERTH_IMAGE_MIRROR")
        .stdout(std::process::Stdio::null())
        .output()
        .expect("python3 runs berth");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let (text, peak) = err
        .rsplit_once("\nberth-peak-kib=")
        .unwrap_or_else(|| panic!("no peak measured: {err}"));
    let peak: u64 = peak.trim().parse().expect("a peak in KiB");
    (out.status.code().unwrap_or(-1), text.to_owned(), peak)
}

/// The daemon's `observe` of an instance's tag.
fn observe(
    client: &support::Client,
    domain: &str,
    key: &str,
) -> Result<Vec<berth_client::ImageReleaseView>, berth_client::ClientError> {
    let domain = support::domain_id(domain);
    client.call(|c| c.observe_image_releases(&domain, key))
}

#[test]
fn the_cli_reads_a_registry_with_caps_withholds_credentials_from_a_plain_http_realm_elsewhere_and_hashes_the_tag()
 {
    let repo = fresh_repo();
    let empty = tempfile::tempdir().unwrap();

    // A token realm that streams 1 GiB: the error names the cap, and berth stays small.
    let huge = TokenRegistry::start(token_registry::Options {
        realm: Realm::Huge(1 << 30),
        ..Default::default()
    });
    let tagged = format!("{}/team/app:1", huge.address());
    let args = ["add", "app", tagged.as_str(), "--port", "8080"];
    let (code, err, max_rss_kib) = berth_measured(repo.path(), &args, empty.path());
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("token answer") && err.contains("is larger than 1 MiB"),
        "{err}"
    );
    assert!(
        max_rss_kib < 100 * 1024,
        "berth add reached {max_rss_kib} KiB resident reading a 1 GiB token answer"
    );
    assert!(huge.large_bytes_sent() < 64 << 20);

    // A plain-http realm on another host gets no credentials, and the refusal says so.
    let elsewhere = TokenRegistry::start(token_registry::Options {
        realm_on_other_host: true,
        realm: Realm::CredentialsOnly,
        ..Default::default()
    });
    let config = elsewhere.docker_config();
    let tagged = format!("{}/team/app:1", elsewhere.address());
    let (code, _, err) = berth(
        repo.path(),
        &["add", "app", &tagged, "--port", "8080"],
        Some(config.path()),
        None,
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "the registry's token realm {} is another host over plain http, so berth did not \
             send your Docker config's credentials to it (it sent none)",
            elsewhere.realm_origin()
        )),
        "{err}"
    );
    assert!(!err.contains("has none for it"), "{err}");
    assert!(!err.contains(support::auth_registry::PASSWORD));
    assert!(elsewhere.realm_requests() >= 1);
    assert_eq!(elsewhere.realm_requests_with_credentials(), 0);

    // A Docker-Content-Digest header that is not the bytes' digest pins nothing.
    let lying = TokenRegistry::start(token_registry::Options {
        manifest: token_registry::Manifest::WrongDigestHeader,
        ..Default::default()
    });
    let tagged = format!("{}/team/app:1", lying.address());
    let (code, _, err) = berth(
        repo.path(),
        &["add", "app", &tagged, "--port", "8080"],
        None,
        None,
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&lying.wrong_digest()) && err.contains(&lying.manifest_digest()),
        "{err}"
    );
    assert!(!repo.path().join("berth.toml").exists());

    // The honest one is pinned to its bytes' digest.
    let honest = TokenRegistry::start(token_registry::Options::default());
    let tagged = format!("{}/team/app:1", honest.address());
    let (code, out, err) = berth(
        repo.path(),
        &["add", "app", &tagged, "--port", "8080"],
        None,
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    assert!(
        file.contains(&format!("{tagged}@{}", honest.manifest_digest())),
        "{file}"
    );
}

#[test]
fn the_daemons_observe_reads_with_caps_withholds_credentials_and_records_only_a_hashed_digest() {
    let huge = TokenRegistry::start(token_registry::Options {
        realm: Realm::Huge(1 << 30),
        ..Default::default()
    });
    let elsewhere = TokenRegistry::start(token_registry::Options {
        realm_on_other_host: true,
        realm: Realm::CredentialsOnly,
        ..Default::default()
    });
    let lying = TokenRegistry::start(token_registry::Options {
        manifest: token_registry::Manifest::WrongDigestHeader,
        ..Default::default()
    });
    let honest = TokenRegistry::start(token_registry::Options::default());
    // The daemon's Docker config has credentials for the registry whose realm is elsewhere.
    let config = elsewhere.docker_config();
    let daemon = Daemon::start_with_env(&[("DOCKER_CONFIG", config.path().to_str().unwrap())]);
    let client = daemon.client();
    let domain = client.create_domain("observe");
    // Each instance pins a digest its registry does not serve by digest: the engine's pull
    // fails at once (it never reads a realm), and observation reads the tag.
    let pinned = format!("sha256:{}", "1".repeat(64));
    for (key, registry) in [
        ("huge", &huge),
        ("elsewhere", &elsewhere),
        ("lying", &lying),
        ("honest", &honest),
    ] {
        let image = format!("{}/team/app:1@{pinned}", registry.address());
        client
            .up(&domain, key, &support::spec(&image, key), "person")
            .expect(200);
    }

    let before = daemon.rss_kib();
    let e = support::refused(
        observe(&client, &domain, "huge"),
        502,
        "ResourceImageRegistryError",
    );
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("token answer") && message.contains("is larger than 1 MiB"),
        "{e}"
    );
    let after = daemon.rss_kib();
    assert!(
        after < 100 * 1024,
        "the daemon is {after} KiB resident (was {before} KiB) after a 1 GiB token answer"
    );
    assert!(huge.large_bytes_sent() < 64 << 20);

    let e = support::refused(
        observe(&client, &domain, "elsewhere"),
        502,
        "ResourceImageRegistryError",
    );
    assert!(
        e["message"].as_str().unwrap().contains(&format!(
            "token realm {} is another host over plain http, so berth did not send your \
             Docker config's credentials to it",
            elsewhere.realm_origin()
        )),
        "{e}"
    );
    assert_eq!(elsewhere.realm_requests_with_credentials(), 0);

    let did = support::domain_id(&domain);
    let releases = |key: &str| {
        let releases = client
            .call(|c| c.image_releases(&did, key))
            .expect("the image releases");
        serde_json::Value::Array(releases.iter().map(support::json_of).collect())
    };
    let recorded = |key: &str, digest: &str| {
        releases(key)
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["data"]["registryRootDigest"] == digest)
    };
    let e = support::refused(
        observe(&client, &domain, "lying"),
        502,
        "ResourceImageRegistryError",
    );
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains(&lying.wrong_digest()) && message.contains(&lying.manifest_digest()),
        "{e}"
    );
    assert!(
        !recorded("lying", &lying.wrong_digest()),
        "{}",
        releases("lying")
    );
    assert!(
        !recorded("lying", &lying.manifest_digest()),
        "{}",
        releases("lying")
    );

    observe(&client, &domain, "honest").expect("an observe");
    assert!(
        recorded("honest", &honest.manifest_digest()),
        "{}",
        releases("honest")
    );
    let log = daemon.log_tail(400);
    assert!(!log.contains(support::auth_registry::PASSWORD));
}
