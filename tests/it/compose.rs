//! `berth init --from`: Compose files in the styles of real projects (tests/fixtures/compose/),
//! and real projects' own (shipped in Debian's documentation, unpacked by scripts/fixtures),
//! converted into berth.toml, each image pinned from what the fixture registry serves under its
//! tag, with every key left out named and why; then `berth up` runs what they describe.

use berth_testkit as support;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use support::tagging::{Target, push_tag};
use support::{Daemon, KEY, LocalImages, busybox_image, fixture};

/// A fresh git repository holding a copy of the fixture directory `name`.
fn repo_with(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    support::git_init(dir.path());
    let from = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/compose")
        .join(name);
    let out = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", from.display()))
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    dir
}

/// `berth args...` in `dir` with `env` (REGISTRY and friends), against `url`: exit code,
/// stdout, stderr. The variables the fixtures interpolate are unset unless `env` sets them.
fn berth(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    url: Option<&str>,
) -> (i32, String, String) {
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .current_dir(dir)
        .env("DOCKER_CONFIG", empty.path())
        .env("BERTH_URL", url.unwrap_or("http://127.0.0.1:9"))
        .env("BERTH_SERVICE_KEYS", KEY)
        .env("USER", "tester")
        .env_remove("COMPOSE_PROFILES")
        .env_remove("REGISTRY")
        .env_remove("DB_USER")
        .env_remove("DB_PASSWORD")
        .env_remove("DB_PORT")
        .env_remove("POSTGRES_DB")
        .envs(env.iter().copied())
        .output()
        .expect("berth runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The registry prefix of this run's own repositories (`REGISTRY` in the fixtures).
fn registry() -> String {
    format!(
        "{}/{}",
        fixture("BERTH_TEST_REGISTRY"),
        support::run_prefix().to_lowercase()
    )
}

/// Puts `source` (a fixture image) under `REGISTRY/name:tag`; answers its digest.
fn tag(source: &str, name: &str, tag: &str) -> String {
    let repository = format!("{}/{name}", support::run_prefix().to_lowercase());
    push_tag(source, &Target::fixture_registry(), &repository, tag)
}

/// What the command left out, as `(place, why)`, from its closing list.
fn left_out(out: &str) -> Vec<(String, String)> {
    out.lines()
        .skip_while(|l| !l.starts_with("left out "))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| {
            let (place, why) = l.trim().split_once(": ").expect("PLACE: WHY");
            (place.to_owned(), why.to_owned())
        })
        .collect()
}

fn places(left: &[(String, String)]) -> BTreeSet<&str> {
    left.iter().map(|(p, _)| p.as_str()).collect()
}

fn why<'a>(left: &'a [(String, String)], place: &str) -> &'a str {
    left.iter()
        .find(|(p, _)| p == place)
        .map(|(_, w)| w.as_str())
        .unwrap_or_else(|| panic!("{place} is not named in {left:#?}"))
}

const HOST_PATH: &str = "a host path: refused by berth's contract: an instance mounts named volumes only, never a host path or the Docker socket";

#[test]
fn a_web_apps_compose_file_converts_and_up_runs_its_database_and_cache() {
    let registry = registry();
    let pg = tag(&fixture("BERTH_TEST_POSTGRES_IMAGE"), "postgres", "16");
    let redis = tag(&fixture("BERTH_TEST_REDIS_IMAGE"), "redis", "7");
    let repo = repo_with("webapp");
    let env = [("REGISTRY", registry.as_str())];

    // No path: compose.yaml at the top of the repository.
    let (code, out, err) = berth(repo.path(), &["init", "--from"], &env, None);
    assert_eq!(code, 0, "{out}{err}");
    let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    for line in [
        "[instances.db]\n".to_owned(),
        format!("image = \"{registry}/postgres:16@{pg}\"\n"),
        "env = { POSTGRES_USER = \"shop\", POSTGRES_PASSWORD = \"dev\", POSTGRES_DB = \"shop_development\" }\n".to_owned(),
        "volumes = { pgdata = \"/var/lib/postgresql/data\" }\n".to_owned(),
        "ready = { exec = [\"sh\", \"-c\", \"pg_isready -U shop -d shop_development -h 127.0.0.1\"] }\n".to_owned(),
        "[instances.db.connect]\nDB_ADDR = \"{host}:{port:5432}\"\n".to_owned(),
        "[instances.cache]\n".to_owned(),
        format!("image = \"{registry}/redis:7@{redis}\"\n"),
        "command = [\"redis-server\", \"--appendonly\", \"yes\"]\n".to_owned(),
        "volumes = { redis-data = \"/data\" }\n".to_owned(),
        "ready = { exec = [\"redis-cli\", \"ping\"] }\n".to_owned(),
        "CACHE_ADDR = \"{host}:{port:6379}\"\n".to_owned(),
    ] {
        assert!(file.contains(&line), "{line} in\n{file}");
    }
    assert!(!file.contains("[instances.web]"), "{file}");

    // Everything left out is named, and why.
    let left = left_out(&out);
    assert_eq!(
        places(&left),
        BTreeSet::from([
            "name",
            "x-restart",
            "services.web",
            "services.db.restart",
            "services.db.container_name",
            "services.db.volumes[1]",
            "services.db.ports",
            "services.db.healthcheck.interval/timeout/retries",
            "services.cache.restart",
            "services.cache.ports",
        ]),
        "{out}"
    );
    assert!(
        why(&left, "services.web").starts_with("it is built from a Dockerfile and names no image")
    );
    assert_eq!(why(&left, "services.db.volumes[1]"), HOST_PATH);
    assert!(
        why(&left, "services.db.ports").starts_with("the host ports (5432->5432) are not kept")
    );
    assert!(
        why(&left, "services.cache.ports").starts_with("the host ports (6379->6379) are not kept")
    );

    // berth up runs what the file described, and berth env connects to it. Only this test's
    // repositories are removed afterwards: another test's, removed while it starts, would fail
    // its image evidence.
    let _pulled = [
        LocalImages(format!("{registry}/postgres@")),
        LocalImages(format!("{registry}/redis@")),
    ];
    let daemon = Daemon::start();
    let (code, out, err) = berth(
        repo.path(),
        &["up", "--timeout", "3m"],
        &[],
        Some(&daemon.base),
    );
    assert_eq!(code, 0, "{out}{err}\n{}", daemon.log_tail(40));
    assert_eq!(out.matches("running").count(), 2, "{out}");
    let (code, out, err) = berth(repo.path(), &["env"], &[], Some(&daemon.base));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("export DB_ADDR='127.0.0.1:"), "{out}");
    assert!(out.contains("export CACHE_ADDR='127.0.0.1:"), "{out}");
    let (code, out, err) = berth(
        repo.path(),
        &[
            "exec",
            "db",
            "--",
            "psql",
            "-U",
            "shop",
            "-d",
            "shop_development",
            "-tAc",
            "select 40 + 2",
        ],
        &[],
        Some(&daemon.base),
    );
    assert_eq!((code, out.trim()), (0, "42"), "{err}");
    let (code, out, err) = berth(
        repo.path(),
        &[
            "exec",
            "cache",
            "--",
            "redis-cli",
            "config",
            "get",
            "appendonly",
        ],
        &[],
        Some(&daemon.base),
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("yes"),
        "the command from the Compose file runs: {out}"
    );
}

#[test]
fn a_platform_file_with_profiles_env_files_and_long_ports_converts_naming_every_key_it_drops() {
    let registry = registry();
    let image = busybox_image();
    for (name, t) in [
        ("postgres", "15-alpine"),
        ("rabbitmq", "3-management"),
        ("mailcatcher", "latest"),
        ("adminer", "4"),
        ("worker", "latest"),
    ] {
        tag(&image, name, t);
    }
    let repo = repo_with("platform");
    let env = [("REGISTRY", registry.as_str())];

    // Without the tools profile: adminer is named, not converted.
    let (code, out, err) = berth(
        repo.path(),
        &["init", "--from", "docker-compose.yml"],
        &env,
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    for line in [
        "[instances.postgres]\n",
        // The env file first, then `environment` over it; `- POSTGRES_DB` takes the env file's.
        "env = { TZ = \"UTC\", POSTGRES_DB = \"platform\", LOG_LEVEL = \"debug\", POSTGRES_PASSWORD = \"secret\", PGDATA = \"/var/lib/postgresql/data/pgdata\" }\n",
        "volumes = { db-data = \"/var/lib/postgresql/data\" }\n",
        "ready = { exec = [\"pg_isready\", \"-U\", \"postgres\"] }\n",
        "[instances.rabbitmq]\n",
        "ready = { exec = [\"sh\", \"-c\", \"rabbitmq-diagnostics -q ping\"] }\n",
        "RABBITMQ_ADDR = \"{host}:{port:5672}\"\nRABBITMQ_ADDR_15672 = \"{host}:{port:15672}\"\n",
        "# From the Compose service \"Mail.Catcher\".\n[instances.mail-catcher]\n",
        "ready = { tcp = 1025 }\n",
    ] {
        assert!(file.contains(line), "{line} in\n{file}");
    }
    assert!(
        !file.contains("[instances.adminer]") && !file.contains("[instances.worker]"),
        "{file}"
    );
    let left = left_out(&out);
    assert_eq!(
        places(&left),
        BTreeSet::from([
            "version",
            "networks",
            "services.postgres.networks",
            "services.postgres.deploy",
            "services.postgres.logging",
            "services.rabbitmq.hostname",
            "services.rabbitmq.stop_grace_period",
            "services.rabbitmq.networks",
            "services.rabbitmq.ports",
            "services.rabbitmq.healthcheck.interval",
            "services.Mail.Catcher",
            "services.Mail.Catcher.tmpfs",
            "services.adminer.profiles",
            "services.worker",
        ]),
        "{out}"
    );
    assert_eq!(
        why(&left, "services.adminer.profiles"),
        "the service is in profile tools only, and none of them was asked for: `--profile tools` converts it"
    );
    assert!(why(&left, "services.worker").starts_with("berth needs a ready check"));
    assert_eq!(
        why(&left, "services.postgres.networks"),
        "refused by berth's contract: an instance joins only the networks berth gives it, never the host's"
    );

    // With it, adminer is converted too (a new file: init never overwrites one).
    std::fs::remove_file(repo.path().join("berth.toml")).unwrap();
    let (code, out, err) = berth(
        repo.path(),
        &["init", "--from", "docker-compose.yml", "--profile", "tools"],
        &env,
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    assert!(
        file.contains("[instances.adminer]\n") && file.contains("ready = { tcp = 8080 }\n"),
        "{file}"
    );
    assert!(
        !places(&left_out(&out)).contains("services.adminer.profiles"),
        "{out}"
    );
}

#[test]
fn every_key_the_contract_refuses_is_named_with_the_contracts_sentence() {
    let registry = registry();
    tag(&busybox_image(), "agent", "1.2");
    let repo = repo_with("unsafe");
    let (code, out, err) = berth(
        repo.path(),
        &["init", "--from", "compose.yml"],
        &[("REGISTRY", registry.as_str())],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let left = left_out(&out);
    let contract = |sentence: &str| format!("refused by berth's contract: {sentence}");
    for (place, expected) in [
        (
            "services.agent.privileged",
            contract("berth never runs an instance privileged"),
        ),
        (
            "services.agent.cap_add",
            contract("berth adds no capability to an instance"),
        ),
        (
            "services.agent.network_mode",
            contract("an instance joins only the networks berth gives it, never the host's"),
        ),
        (
            "services.agent.pid",
            contract("an instance shares no namespace with the host or another container"),
        ),
        (
            "services.agent.devices",
            contract("an instance gets no device"),
        ),
        (
            "services.agent.security_opt",
            contract("an instance's security options are berth's"),
        ),
        (
            "services.agent.volumes[0]",
            format!(
                "the Docker socket: {}",
                contract(
                    "an instance mounts named volumes only, never a host path or the Docker socket"
                )
            ),
        ),
        ("services.agent.volumes[1]", HOST_PATH.to_owned()),
        ("services.agent.volumes[2]", HOST_PATH.to_owned()),
    ] {
        assert_eq!(why(&left, place), expected, "{place}");
    }
    assert_eq!(
        places(&left),
        BTreeSet::from([
            "services.agent.privileged",
            "services.agent.cap_add",
            "services.agent.network_mode",
            "services.agent.pid",
            "services.agent.devices",
            "services.agent.security_opt",
            "services.agent.volumes[0]",
            "services.agent.volumes[1]",
            "services.agent.volumes[2]",
            "services.agent.entrypoint",
            "services.agent.ports",
            "services.agent.x-team",
        ]),
        "{out}"
    );
    // Both port lines: the udp one and the host port of the tcp one.
    assert!(
        out.contains("8125/udp: berth's host endpoints are tcp"),
        "{out}"
    );
    // What remains is what the contract allows: the image, the named volume, the tcp port.
    let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
    let instance = file.split("[instances.agent]\n").nth(1).expect("the agent");
    assert!(
        instance.contains("volumes = { state = \"/var/lib/agent\" }\nready = { tcp = 8126 }\n"),
        "{file}"
    );
    for refused in [
        "privileged",
        "docker.sock",
        "/host",
        "NET_ADMIN",
        "entrypoint",
    ] {
        assert!(!file.contains(refused), "{refused} in {file}");
    }
}

#[test]
fn a_refused_conversion_writes_nothing_and_says_why() {
    // A repository with no tags in it (this run's others push theirs elsewhere).
    let registry = format!("{}/nothing-here", registry());
    let repo = repo_with("webapp");
    let target = repo.path().join("berth.toml");
    // A tag the registry does not have: nothing is written, the service's image is named.
    let (code, out, err) = berth(
        repo.path(),
        &["init", "--from"],
        &[("REGISTRY", &registry)],
        None,
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("services.db.image") && err.contains("has no tag 16"),
        "{err}"
    );
    assert!(!target.exists());

    // A variable the file requires (`${VAR:?message}`) and nobody set.
    std::fs::write(
        repo.path().join("compose.yaml"),
        "services:\n  db:\n    image: ${IMAGE:?set IMAGE to the database image}\n    ports: [\"5432\"]\n",
    )
    .unwrap();
    let (code, _, err) = berth(repo.path(), &["init", "--from"], &[], None);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("IMAGE must be set: set IMAGE to the database image"),
        "{err}"
    );
    assert!(!target.exists());

    // Nothing berth can run: every service named, and no file.
    std::fs::write(
        repo.path().join("compose.yaml"),
        "services:\n  app:\n    build: .\n  job:\n    image: busybox\n",
    )
    .unwrap();
    let (code, _, err) = berth(repo.path(), &["init", "--from"], &[], None);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("has no service berth can run, so nothing was written")
            && err.contains("services.app: it is built from a Dockerfile")
            && err.contains("services.job: berth needs a ready check"),
        "{err}"
    );
    assert!(!target.exists());

    // No Compose file at all.
    std::fs::remove_file(repo.path().join("compose.yaml")).unwrap();
    let (code, _, err) = berth(repo.path(), &["init", "--from"], &[], None);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("found no Compose file at the top of the repository (compose.yaml, compose.yml, docker-compose.yaml, docker-compose.yml)"),
        "{err}"
    );

    // An existing berth.toml is never overwritten.
    std::fs::write(&target, "# mine\n").unwrap();
    let (code, _, err) = berth(repo.path(), &["init", "--from", "x.yaml"], &[], None);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("berth.toml already exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "# mine\n");
}

/// A fresh git repository holding the real project's Compose file at `path` (under the
/// Debian documentation scripts/fixtures unpacked) as `docker-compose.yml`.
fn repo_with_real(path: &str) -> tempfile::TempDir {
    let real = Path::new(&fixture("BERTH_TEST_COMPOSE_REAL")).join(path);
    let dir = tempfile::tempdir().unwrap();
    support::git_init(dir.path());
    std::fs::copy(&real, dir.path().join("docker-compose.yml"))
        .unwrap_or_else(|e| panic!("{}: {e} (run scripts/fixtures)", real.display()));
    dir
}

#[test]
fn real_projects_compose_files_convert_and_up_runs_miniflux_s_database() {
    // Docker Hub is out of CI's reach: the names the files use are served by this run's
    // registry under a mirror prefix (`--mirror`), the databases by the Postgres fixture and
    // every other image by a stand-in (the busybox fixture, httpd on 8080).
    let registry = registry();
    let hub = format!("{registry}/hub");
    let pg = tag(
        &fixture("BERTH_TEST_POSTGRES_IMAGE"),
        "hub/postgres",
        "latest",
    );
    for name in ["miniflux/miniflux", "patroni", "nginx", "locustio/locust"] {
        tag(&busybox_image(), &format!("hub/{name}"), "latest");
    }
    let init = |repo: &Path| {
        berth(
            repo,
            &["init", "--from", "docker-compose.yml", "--mirror", &hub],
            &[],
            None,
        )
    };

    // Miniflux, from newsboat's contrib: list environments, a named volume, depends_on.
    let miniflux = repo_with_real("usr/share/doc/newsboat/contrib/miniflux/docker-compose.yml");
    let (code, out, err) = init(miniflux.path());
    assert_eq!(code, 0, "{out}{err}");
    let file = std::fs::read_to_string(miniflux.path().join("berth.toml")).unwrap();
    for line in [
        "[instances.miniflux]\n".to_owned(),
        "ready = { tcp = 8080 }\n".to_owned(),
        "[instances.db]\n".to_owned(),
        format!("image = \"{hub}/postgres:latest@{pg}\"\n"),
        "volumes = { miniflux-db = \"/var/lib/postgresql/data\" }\n".to_owned(),
        "POSTGRES_USER = \"miniflux\"".to_owned(),
        // No healthcheck and no port: the check `berth add postgres` gives.
        "pg_isready".to_owned(),
    ] {
        assert!(file.contains(&line), "{line} in\n{file}");
    }
    let left = left_out(&out);
    assert!(
        places(&left).contains("services.miniflux.depends_on"),
        "{out}"
    );
    assert!(places(&left).contains("services.miniflux.ports"), "{out}");

    let _pulled = LocalImages(format!("{hub}/"));
    let daemon = Daemon::start();
    let (code, out, err) = berth(
        miniflux.path(),
        &["up", "db", "--timeout", "3m"],
        &[],
        Some(&daemon.base),
    );
    assert_eq!(code, 0, "{out}{err}\n{}", daemon.log_tail(40));
    let (code, out, err) = berth(
        miniflux.path(),
        &[
            "exec",
            "db",
            "--",
            "psql",
            "-U",
            "miniflux",
            "-tAc",
            "select current_user",
        ],
        &[],
        Some(&daemon.base),
    );
    assert_eq!((code, out.trim()), (0, "miniflux"), "{err}");

    // Patroni's example cluster: `<<: *etcd` merge keys, container names, hostnames, a
    // network, services with neither a port nor a healthcheck, and an env file its
    // documentation does not ship.
    let patroni = repo_with_real("usr/share/doc/patroni/examples/docker-compose.yml");
    let (code, out, err) = init(patroni.path());
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("services.haproxy") && err.contains("docker/patroni.env"),
        "the missing env file is named: {err}"
    );
    assert!(!patroni.path().join("berth.toml").exists());
    std::fs::create_dir(patroni.path().join("docker")).unwrap();
    std::fs::write(
        patroni.path().join("docker/patroni.env"),
        "PATRONI_RESTAPI_USERNAME=admin\n",
    )
    .unwrap();
    let (code, out, err) = init(patroni.path());
    assert_eq!(code, 0, "{out}{err}");
    let file = std::fs::read_to_string(patroni.path().join("berth.toml")).unwrap();
    for line in [
        "[instances.haproxy]\n",
        "command = [\"haproxy\"]\n",
        // The env file, then the service's own environment over it.
        "PATRONI_RESTAPI_USERNAME = \"admin\"",
        "PATRONI_SCOPE = \"demo\"",
        "ready = { tcp = 5000 }\n",
    ] {
        assert!(file.contains(line), "{line} in\n{file}");
    }
    let left = left_out(&out);
    // etcd2 and patroni1 take their image from `<<: *etcd` and `<<: *haproxy_env`'s
    // neighbours: left out for their missing ready check, not for a missing image.
    for name in [
        "etcd1", "etcd2", "etcd3", "patroni1", "patroni2", "patroni3",
    ] {
        assert!(
            why(&left, &format!("services.{name}")).contains("no healthcheck and no port"),
            "{out}"
        );
    }
    for place in [
        "networks",
        "services.haproxy.container_name",
        "services.haproxy.hostname",
        "services.haproxy.networks",
    ] {
        assert!(places(&left).contains(place), "{place} in {out}");
    }

    // Hug's nginx example: a service built from a Dockerfile, and host paths.
    let hug = repo_with_real("usr/share/doc/python3-hug/examples/docker_nginx/docker-compose.yml");
    let (code, out, err) = init(hug.path());
    assert_eq!(code, 0, "{out}{err}");
    let left = left_out(&out);
    assert!(why(&left, "services.api").starts_with("it is built from a Dockerfile"));
    assert_eq!(why(&left, "services.nginx.volumes[0]"), HOST_PATH);
    assert_eq!(why(&left, "services.nginx.volumes[1]"), HOST_PATH);
    let file = std::fs::read_to_string(hug.path().join("berth.toml")).unwrap();
    assert!(
        file.contains("[instances.nginx]\n") && file.contains("ready = { tcp = 80 }"),
        "{file}"
    );

    // Locust's example: string commands, host paths, and a worker with no port.
    let locust =
        repo_with_real("usr/share/doc/python3-locust/examples/docker-compose/docker-compose.yml");
    let (code, out, err) = init(locust.path());
    assert_eq!(code, 0, "{out}{err}");
    let file = std::fs::read_to_string(locust.path().join("berth.toml")).unwrap();
    assert!(
        file.contains(
            "command = [\"-f\", \"/mnt/locust/locustfile.py\", \"--master\", \"-H\", \"http://master:8089\"]"
        ),
        "{file}"
    );
    let left = left_out(&out);
    assert!(
        why(&left, "services.worker").contains("no healthcheck and no port"),
        "{out}"
    );
    assert_eq!(why(&left, "services.master.volumes[0]"), HOST_PATH);

    // Tornado's blog demo is in Compose's first file format, which Compose no longer reads.
    let blog = repo_with_real("usr/share/doc/python-tornado-doc/examples/blog/docker-compose.yml");
    let (code, out, err) = init(blog.path());
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("Compose's first file format"), "{err}");
    assert!(!blog.path().join("berth.toml").exists());
}
