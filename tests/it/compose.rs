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
            "services.web.depends_on",
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
        // The env file named, not copied (`berth up` reads it), `environment` over it; `-
        // POSTGRES_DB` takes the env file's.
        "env_file = [\"config/shared.env\"]\nenv = { POSTGRES_PASSWORD = \"secret\", PGDATA = \"/var/lib/postgresql/data/pgdata\" }\n",
        "volumes = { db-data = \"/var/lib/postgresql/data\" }\n",
        "ready = { exec = [\"pg_isready\", \"-U\", \"postgres\"] }\n",
        "[instances.rabbitmq]\n",
        "ready = { exec = [\"sh\", \"-c\", \"rabbitmq-diagnostics -q ping\"] }\n",
        "RABBITMQ_ADDR = \"{host}:{port:5672}\"\nRABBITMQ_ADDR_15672 = \"{host}:{port:15672}\"\n",
        "# From the Compose service \"Mail.Catcher\".\n[instances.mail-catcher]\n",
        "ready = { tcp = 1025 }\n",
        // No healthcheck and no port: the first port its image EXPOSEs (the stand-in's 8080).
        "[instances.worker]\n",
        "command = [\"python\", \"-m\", \"worker\"]\nready = { tcp = 8080 }\n",
    ] {
        assert!(file.contains(line), "{line} in\n{file}");
    }
    assert!(!file.contains("[instances.adminer]"), "{file}");
    let left = left_out(&out);
    assert_eq!(
        places(&left),
        BTreeSet::from([
            "version",
            "networks",
            "services.postgres.networks",
            "services.postgres.deploy",
            "services.postgres.logging",
            "services.postgres.env_file",
            "services.rabbitmq.hostname",
            "services.rabbitmq.stop_grace_period",
            "services.rabbitmq.networks",
            "services.rabbitmq.ports",
            "services.rabbitmq.healthcheck.interval",
            "services.Mail.Catcher.tmpfs",
            "services.adminer.profiles",
            "services.worker",
            "services.worker.user",
            "services.worker.working_dir",
        ]),
        "{out}"
    );
    assert_eq!(
        why(&left, "services.adminer.profiles"),
        "the service is in profile tools only, and none of them was asked for: `--profile tools` converts it"
    );
    assert_eq!(
        why(&left, "services.worker"),
        "it has no healthcheck and no port: its ready check is a tcp connection to 8080, the first port its image EXPOSEs (8080)"
    );
    assert_eq!(
        why(&left, "services.postgres.networks"),
        "berth makes no network a Compose file names: it puts a project's instances on a network of its own, where each reaches the others by its instance name"
    );
    assert_eq!(
        why(&left, "services.postgres.env_file"),
        "./config/postgres.local.env does not exist and is not required: berth.toml does not name it"
    );
    // The rename is stated, with the rule and what follows from it.
    assert!(
        out.contains("renamed 1 service(s): an instance's name is lower case")
            && out.contains("\n  Mail.Catcher -> mail-catcher\n"),
        "{out}"
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
            && err.contains("services.job.image: left out, its image cannot be read"),
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
    // Without the env file, the services that read it are left out, each naming it, and the
    // rest is written.
    let (code, out, err) = init(patroni.path());
    assert_eq!(code, 0, "{out}{err}");
    let left = left_out(&out);
    for name in ["haproxy", "patroni1", "patroni2", "patroni3"] {
        assert_eq!(
            why(&left, &format!("services.{name}")),
            "its env_file docker/patroni.env does not exist (a file each deployment writes?): write it, or leave the service out with `--only`"
        );
    }
    let file = std::fs::read_to_string(patroni.path().join("berth.toml")).unwrap();
    assert!(
        file.contains("[instances.etcd1]") && !file.contains("[instances.haproxy]"),
        "{file}"
    );
    std::fs::remove_file(patroni.path().join("berth.toml")).unwrap();
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
        // The env file named (never copied), then the service's own environment over it.
        "env_file = [\"docker/patroni.env\"]",
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

/// One file of the corpus: what `init --from` must convert and leave out, and which of its
/// databases `berth up` must run.
struct Case {
    dir: &'static str,
    file: &'static str,
    args: &'static [&'static str],
    instances: &'static [&'static str],
    left: &'static [&'static str],
    up: &'static [&'static str],
    /// Variables `berth up` is given (the values the file's secrets stood for).
    up_env: &'static [(&'static str, &'static str)],
}

/// How many instances a berth.toml has.
fn tables(file: &str) -> usize {
    file.lines()
        .filter(|l| l.starts_with("[instances.") && !l.ends_with(".connect]"))
        .count()
}

/// Every value of the env files and `.env` files in a fixture directory (and of its secret
/// files), of six characters or more.
fn env_values(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != ".git" {
                    stack.push(path);
                }
                continue;
            }
            if !(name.starts_with(".env") || name.ends_with(".env") || name.ends_with(".txt")) {
                continue;
            }
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let line = line.trim().trim_start_matches("export ");
                let value = match line.split_once('=') {
                    Some((_, v)) => v,
                    None if name.ends_with(".txt") => line,
                    None => continue,
                };
                let value = value.trim_matches('"').trim_matches('\'');
                if value.len() >= 6 && !line.starts_with('#') {
                    out.push(value.to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn a_corpus_of_real_projects_shapes_converts_and_up_runs_each_database() {
    let registry = registry();
    // A mirror root of its own: another test removes what it pulled under `hub/` when it ends,
    // which would take the local references this test's instances run on.
    let hub = format!("{registry}/corpus-hub");
    let pg_image = fixture("BERTH_TEST_POSTGRES_IMAGE");
    let redis_image = fixture("BERTH_TEST_REDIS_IMAGE");
    let pg = tag(&pg_image, "corpus-hub/postgres", "13");
    for t in ["14-alpine", "15", "16", "16-alpine"] {
        tag(&pg_image, "corpus-hub/postgres", t);
    }
    for t in ["6-alpine", "7", "7-alpine"] {
        tag(&redis_image, "corpus-hub/redis", t);
    }
    // The platform file's Postgres is only converted (its own test tags the stand-in too).
    for (name, t) in [
        ("postgres", "15-alpine"),
        ("corpus-hub/memcached", "1.6-alpine"),
        ("corpus-hub/clickhouse/clickhouse-server", "24.3-alpine"),
        ("plausible/community-edition", "v2"),
        ("workflow", "1"),
        ("tracker/web", "23"),
    ] {
        tag(&busybox_image(), name, t);
    }
    let digest = pg.strip_prefix("sha256:").unwrap().to_owned();
    let cases = [
        Case {
            dir: "analytics",
            file: "compose.yml",
            args: &[],
            instances: &[
                "plausible-db",
                "plausible-events-db",
                "plausible-cache",
                "plausible",
            ],
            left: &[
                "services.plausible_db.restart",
                "services.plausible_db.healthcheck.retries/start_period",
                "services.plausible_db.environment.POSTGRES_PASSWORD",
                "services.plausible_events_db",
                "services.plausible_events_db.restart",
                "services.plausible_events_db.ulimits",
                "services.plausible.depends_on",
                "services.plausible.ports",
                "volumes.db-data",
            ],
            up: &["plausible-db", "plausible-cache"],
            up_env: &[],
        },
        Case {
            dir: "social",
            file: "docker-compose.yml",
            args: &[],
            instances: &["db", "redis"],
            left: &[
                "x-app",
                "networks",
                "services.db.restart",
                "services.db.shm_size",
                "services.db.networks",
                "services.redis.restart",
                "services.redis.networks",
                "services.web",
                "services.web.depends_on",
                "services.web.restart",
                "services.web.networks",
                "services.streaming",
                "services.streaming.restart",
                "services.streaming.networks",
            ],
            up: &["db", "redis"],
            up_env: &[],
        },
        Case {
            dir: "workflow",
            file: "docker-compose.yml",
            args: &[],
            instances: &["postgres", "redis", "workflow", "worker"],
            left: &[
                "version",
                "x-shared",
                "services.postgres.restart",
                "services.postgres.healthcheck.interval/timeout/retries",
                "services.postgres.environment",
                "services.redis.restart",
                "services.workflow.restart",
                "services.workflow.depends_on",
                "services.workflow.ports",
                "services.worker",
                "services.worker.restart",
                "services.worker.depends_on",
            ],
            up: &["postgres", "redis"],
            up_env: &[],
        },
        Case {
            dir: "secrets",
            file: "compose.yaml",
            args: &[],
            instances: &["db", "cache"],
            left: &[
                "services.backend",
                "services.backend.depends_on",
                "services.db.restart",
                "services.db.environment.POSTGRES_PASSWORD_FILE",
                "services.db.environment.POSTGRES_PASSWORD",
                "services.db.secrets",
                "services.db.healthcheck.interval",
                "services.db.expose",
                "services.cache.environment.REDIS_PASSWORD_FILE",
                "services.cache.secrets",
            ],
            up: &["db", "cache"],
            up_env: &[
                ("POSTGRES_PASSWORD", "given-at-up-1"),
                ("REDIS_SECRET", "given-at-up-2"),
            ],
        },
        Case {
            dir: "tracker",
            file: "docker-compose.yaml",
            args: &[],
            instances: &["web-2", "web", "worker", "cron", "memcached", "postgres"],
            left: &[
                "x-defaults",
                "networks",
                "services.Web.restart",
                "services.Web.networks",
                "services.Web.ports",
                "services.web.build",
                "services.web.restart",
                "services.web.networks",
                "services.worker.restart",
                "services.worker.networks",
                "services.cron.restart",
                "services.cron.networks",
                "services.agent.image",
                "services.agent.privileged",
                "services.agent.pid",
                "services.relay.image",
                "services.memcached.restart",
                "services.memcached.networks",
                "services.postgres.restart",
                "services.postgres.networks",
                "volumes.tracker-data",
            ],
            up: &["postgres"],
            up_env: &[],
        },
        Case {
            dir: "platform",
            file: "docker-compose.yml",
            args: &["--only", "postgres"],
            instances: &["postgres"],
            left: &[
                "version",
                "networks",
                "services.postgres.networks",
                "services.postgres.deploy",
                "services.postgres.logging",
                "services.postgres.env_file",
                "services.rabbitmq",
                "services.Mail.Catcher",
                "services.adminer",
                "services.worker",
            ],
            up: &[],
            up_env: &[],
        },
    ];
    let mut repos = Vec::new();
    for case in &cases {
        let repo = repo_with(case.dir);
        let mut args = vec!["init", "--from", case.file, "--mirror", &hub];
        args.extend(case.args);
        let (code, out, err) = berth(
            repo.path(),
            &args,
            &[
                ("REGISTRY", registry.as_str()),
                ("PG_DIGEST", digest.as_str()),
            ],
            None,
        );
        assert_eq!(code, 0, "{}: {out}{err}", case.dir);
        let file = std::fs::read_to_string(repo.path().join("berth.toml")).unwrap();
        for name in case.instances {
            assert!(
                file.contains(&format!("[instances.{name}]\n")),
                "{}: {name} in\n{file}",
                case.dir
            );
        }
        assert_eq!(
            tables(&file),
            case.instances.len(),
            "{}: only these instances: {file}",
            case.dir
        );
        let left = left_out(&out);
        assert_eq!(
            places(&left),
            case.left.iter().copied().collect::<BTreeSet<_>>(),
            "{}: {out}",
            case.dir
        );
        for value in env_values(repo.path()) {
            assert!(
                !file.contains(&value),
                "{}: {value:?} from an env file is in berth.toml:\n{file}",
                case.dir
            );
        }
        repos.push(repo);
    }

    // What each file says, beyond its lists.
    let read = |i: usize| std::fs::read_to_string(repos[i].path().join("berth.toml")).unwrap();
    let analytics = read(0);
    for line in [
        "env = { POSTGRES_PASSWORD = \"${POSTGRES_PASSWORD}\", POSTGRES_DB = \"plausible_db\" }",
        "DATABASE_URL = \"postgres://postgres:${POSTGRES_PASSWORD}@plausible_db:5432/plausible_db\"",
        "SECRET_KEY_BASE = \"${SECRET_KEY_BASE}\"",
        "BASE_URL = \"http://localhost:8000\"",
        "DATABASE_URL = \"postgres://postgres@{host}:{port:5432}/plausible_db\"",
        "REDIS_URL = \"redis://{host}:{port:6379}\"",
    ] {
        assert!(analytics.contains(line), "{line} in\n{analytics}");
    }
    assert!(
        analytics.contains("[instances.plausible-events-db]\nimage = ")
            && analytics.contains(
                "volumes = { event-data = \"/var/lib/clickhouse\" }\nready = { tcp = 8080 }\n"
            ),
        "a service with no port takes the first its image EXPOSEs: {analytics}"
    );
    let workflow = read(2);
    for line in [
        "env_file = [\"workflow.env\"]",
        "POSTGRES_USER = \"${POSTGRES_USER}\"",
        // Made by the file's own default alone: the value.
        "POSTGRES_DB = \"workflow\" }",
        "ready = { exec = [\"sh\", \"-c\", \"pg_isready -h localhost -U ${POSTGRES_USER} -d ${POSTGRES_DB:-workflow}\"] }",
    ] {
        assert!(workflow.contains(line), "{line} in\n{workflow}");
    }
    let secrets = read(3);
    assert!(
        secrets.contains("POSTGRES_PASSWORD = \"${POSTGRES_PASSWORD}\"")
            && secrets.contains("REDIS_PASSWORD = \"${REDIS_SECRET}\"")
            && !secrets.contains("_FILE"),
        "{secrets}"
    );
    let tracker = read(4);
    assert!(
        tracker.contains(&format!("image = \"{hub}/postgres:13@{pg}\"")),
        "a pinned image is read through the mirror too: {tracker}"
    );
    assert!(
        tracker.contains("# From the Compose service \"Web\".\n[instances.web-2]"),
        "{tracker}"
    );
    let platform = read(5);
    assert!(
        platform.contains("env_file = [\"config/shared.env\"]"),
        "{platform}"
    );

    // Every Postgres and Redis runs from the mirror's images, with the variables berth.toml
    // refers to read from .env and the shell at `up`.
    let _pulled = LocalImages(format!("{hub}/"));
    let daemon = Daemon::start();
    for (case, repo) in cases.iter().zip(&repos) {
        if case.up.is_empty() {
            continue;
        }
        let mut args = vec!["up"];
        args.extend(case.up);
        args.extend(["--timeout", "3m"]);
        let (code, out, err) = berth(repo.path(), &args, case.up_env, Some(&daemon.base));
        assert_eq!(code, 0, "{}: {out}{err}\n{}", case.dir, daemon.log_tail(40));
        for name in case.up {
            assert!(
                out.lines()
                    .any(|l| l.contains(name) && l.contains("running")),
                "{}: {name} running in {out}",
                case.dir
            );
        }
    }
    // The secret given at `up` reached the container, and no file of berth's holds it.
    let (code, out, err) = berth(
        repos[3].path(),
        &["exec", "db", "--", "sh", "-c", "echo $POSTGRES_PASSWORD"],
        &[
            ("POSTGRES_PASSWORD", "given-at-up-1"),
            ("REDIS_SECRET", "x"),
        ],
        Some(&daemon.base),
    );
    assert_eq!((code, out.trim()), (0, "given-at-up-1"), "{err}");
    let (code, out, err) = berth(
        repos[0].path(),
        &[
            "exec",
            "plausible-db",
            "--",
            "sh",
            "-c",
            "echo $POSTGRES_PASSWORD",
        ],
        &[],
        Some(&daemon.base),
    );
    assert_eq!((code, out.trim()), (0, "dotenv-pg-secret-1"), "{err}");
}

/// `berth init --from FILE` in `dir`, killed if it has not ended within 60 s: exit code (None
/// when it was killed), stdout, stderr.
fn init_bounded(dir: &Path, file: &str) -> (Option<i32>, String, String) {
    let empty = tempfile::tempdir().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["init", "--from", file])
        .current_dir(dir)
        .env("DOCKER_CONFIG", empty.path())
        .env("BERTH_URL", "http://127.0.0.1:9")
        .env_remove("COMPOSE_PROFILES")
        .env_remove("BERTH_IMAGE_MIRROR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("berth runs");
    let (out, by_itself) = support::wait_exit(child, std::time::Duration::from_secs(60));
    (
        by_itself.then(|| out.status.code().unwrap_or(-1)),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn hostile_compose_files_are_refused_by_name_within_bounds_and_printed_escaped() {
    let hex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let image = format!(
        "{}/pinned/app:1@sha256:{hex}",
        fixture("BERTH_TEST_REGISTRY")
    );
    let repo = tempfile::tempdir().unwrap();
    support::git_init(repo.path());
    let dir = repo.path();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("secret.env"),
        "FAKE_AWS_SECRET_ACCESS_KEY=outside-secret-value\n",
    )
    .unwrap();
    let fifo = dir.join("fifo.env");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.env")).unwrap();
    std::fs::write(dir.join("huge.env"), "A=1\n".repeat(100_000)).unwrap();
    std::fs::write(
        dir.join("bad.env"),
        "GOOD=1\nthis line holds a secret-ish-text\n",
    )
    .unwrap();

    // Each env file that cannot be read leaves its service out, named, and nothing of what it
    // holds is printed; the service that reads none is written.
    let outside_path = outside.path().join("secret.env");
    let compose = format!(
        "services:\n  ok:\n    image: {image}\n    ports: [\"80\"]\n  shadow:\n    image: {image}\n    ports: [\"80\"]\n    env_file: /etc/shadow\n  outside:\n    image: {image}\n    ports: [\"80\"]\n    env_file: {}\n  up:\n    image: {image}\n    ports: [\"80\"]\n    env_file: ../../x.env\n  fifo:\n    image: {image}\n    ports: [\"80\"]\n    env_file: fifo.env\n  zero:\n    image: {image}\n    ports: [\"80\"]\n    env_file: zero.env\n  huge:\n    image: {image}\n    ports: [\"80\"]\n    env_file: huge.env\n  bad:\n    image: {image}\n    ports: [\"80\"]\n    env_file: bad.env\n",
        outside_path.display()
    );
    std::fs::write(dir.join("compose.yaml"), compose).unwrap();
    let (code, out, err) = init_bounded(dir, "compose.yaml");
    assert_eq!(code, Some(0), "{out}{err}");
    let left = left_out(&out);
    let outside_why = "is outside the repository: berth reads env files inside it only";
    assert!(why(&left, "services.shadow").contains(&format!("/etc/shadow {outside_why}")));
    assert!(
        why(&left, "services.outside")
            .contains(&format!("{} {outside_why}", outside_path.display()))
    );
    assert!(why(&left, "services.up").contains(&format!("../../x.env {outside_why}")));
    assert!(
        why(&left, "services.fifo").contains("fifo.env is not a regular file (a fifo)"),
        "{out}"
    );
    assert!(
        why(&left, "services.zero").contains(&format!("zero.env {outside_why}")),
        "a link out of the repository is outside it: {out}"
    );
    assert!(
        why(&left, "services.huge").contains("huge.env has 400000 bytes, more than the 262144"),
        "{out}"
    );
    assert!(
        why(&left, "services.bad").contains("bad.env: its variable number 2 is not NAME=VALUE"),
        "{out}"
    );
    let shadow = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    for text in [&out, &err] {
        assert!(!text.contains("outside-secret-value") && !text.contains("secret-ish"));
        for line in shadow.lines().filter(|l| l.len() > 8) {
            assert!(!text.contains(line), "a line of /etc/shadow is printed");
        }
    }
    let file = std::fs::read_to_string(dir.join("berth.toml")).unwrap();
    assert!(
        file.contains("[instances.ok]\n") && tables(&file) == 1,
        "{file}"
    );
    std::fs::remove_file(dir.join("berth.toml")).unwrap();

    // Terminal controls and bidi characters in a service key are printed escaped.
    std::fs::write(
        dir.join("compose.yaml"),
        format!(
            "services:\n  \"web\\e]0;TITLE\\a\\e[8m\\u202e\":\n    image: {image}\n    ports: [\"80\"]\n    privileged: true\n"
        ),
    )
    .unwrap();
    let (code, out, err) = init_bounded(dir, "compose.yaml");
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("services.web\\u{1b}]0;TITLE\\u{7}\\u{1b}[8m\\u{202e}.privileged"),
        "{out}"
    );
    assert!(
        out.contains("web\\u{1b}]0;TITLE\\u{7}\\u{1b}[8m\\u{202e} -> web-0-title-8m"),
        "{out}"
    );
    for c in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!out.contains(c) && !err.contains(c), "{c:?} printed raw");
    }
    std::fs::remove_file(dir.join("berth.toml")).unwrap();

    // Files that are not regular, too large, nested too deep, or aliases expanding without
    // end: each refused by name, within the bound, writing nothing.
    std::fs::write(dir.join("big.yaml"), "#".repeat(5 * 1024 * 1024)).unwrap();
    std::fs::write(
        dir.join("deep.yaml"),
        format!(
            "services:\n  a: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("dashes.yaml"),
        format!(
            "services:\n  a:\n    command:\n      {}x\n",
            "- ".repeat(100_000)
        ),
    )
    .unwrap();
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    bomb.push_str("services:\n  a:\n    image: x\n    command: *a11\n");
    std::fs::write(dir.join("bomb.yaml"), bomb).unwrap();
    let fifo_compose = dir.join("fifo.yaml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo_compose)
            .status()
            .unwrap()
            .success()
    );
    for (file, expected) in [
        (
            "fifo.yaml",
            "fifo.yaml is not a regular file (a fifo)".to_owned(),
        ),
        (
            "/dev/zero",
            "/dev/zero is not a regular file (a device)".to_owned(),
        ),
        (
            "/etc",
            "/etc is not a regular file (a directory)".to_owned(),
        ),
        (
            "big.yaml",
            "big.yaml has 5242880 bytes, more than the 4194304 berth reads".to_owned(),
        ),
        (
            "deep.yaml",
            "deep.yaml: line 2 nests more than 64 `[` or `{`".to_owned(),
        ),
        (
            "dashes.yaml",
            "dashes.yaml: line 4 nests more than 64 lists".to_owned(),
        ),
        (
            "bomb.yaml",
            "bomb.yaml is not YAML: repetition limit exceeded".to_owned(),
        ),
    ] {
        let (code, out, err) = init_bounded(dir, file);
        assert_eq!(
            code,
            Some(1),
            "{file} ends by itself and refuses: {out}{err}"
        );
        assert!(err.contains(&expected), "{file}: {err}");
        assert!(!dir.join("berth.toml").exists(), "{file}");
    }
}
