//! What the tests share: fixtures, names, the runtime, and the cleanup guard.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use berth_core::image::PinnedImage;
use berth_core::runtime::{
    ContainerFacts, ContainerPlan, ExecOutcome, ExecRequest, LABEL_MANAGED, LABEL_PREFIX, Labels,
    Runtime,
};
use berth_docker::{DockerConfig, DockerRuntime};

/// The fixture image with a busybox httpd on 8080.
pub const BUSYBOX: &str = "BERTH_TEST_BUSYBOX_IMAGE";
/// The same, with `VOLUME /data`.
pub const VOLUME: &str = "BERTH_TEST_VOLUME_IMAGE";
/// A TCP echo server on 7000 (only the image test uses it, so it may remove its reference).
pub const ECHO: &str = "BERTH_TEST_ECHO_IMAGE";
/// The echo server alone: no shell, no `cp`, no tools at all.
pub const BARE: &str = "BERTH_TEST_BARE_IMAGE";

/// A fixture variable; a test cannot run without it.
pub fn fixture(var: &str) -> String {
    match std::env::var(var) {
        Ok(value) if !value.is_empty() => value,
        _ => panic!(
            "{var} is not set: berth-docker's tests need the fixture registry and images; run \
             scripts/test, which prepares the fixtures"
        ),
    }
}

/// A fixture image, parsed.
pub fn image(var: &str) -> PinnedImage {
    let text = fixture(var);
    PinnedImage::parse(&text)
        .unwrap_or_else(|e| panic!("{var}={text} is not a pinned image reference: {e}"))
}

/// This run's prefix: `BERTH_TEST_PREFIX`, or `berth-t` and 8 random hex digits.
pub fn prefix() -> &'static str {
    static PREFIX: OnceLock<String> = OnceLock::new();
    PREFIX.get_or_init(|| match std::env::var("BERTH_TEST_PREFIX") {
        Ok(prefix) if !prefix.is_empty() => prefix,
        _ => {
            let mut bytes = [0u8; 4];
            getrandom::fill(&mut bytes).expect("the system has no random source");
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("berth-t{hex}")
        }
    })
}

/// A runtime on the engine; a test cannot run without one.
pub async fn runtime() -> DockerRuntime {
    DockerRuntime::connect(DockerConfig::default())
        .await
        .unwrap_or_else(|e| {
            panic!("berth-docker's tests need a running Docker engine, and it could not be reached: {e}")
        })
}

/// bollard itself, to look at what the runtime made.
pub fn docker() -> bollard::Docker {
    bollard::Docker::connect_with_defaults()
        .unwrap_or_else(|e| panic!("berth-docker's tests need a running Docker engine: {e}"))
}

/// The labels every test object carries.
pub fn labels() -> Labels {
    Labels::from([
        (LABEL_MANAGED.to_owned(), "1".to_owned()),
        (LABEL_PREFIX.to_owned(), prefix().to_owned()),
    ])
}

/// One test's names, and the guard that removes every container, network and volume carrying
/// them when the test ends, passed or failed.
pub struct Scope {
    base: String,
}

impl Scope {
    pub fn new(test: &str) -> Self {
        assert!(!test.contains('.'), "a test scope name has no '.'");
        Self {
            base: format!("{}-drv-{test}.", prefix()),
        }
    }

    /// `<prefix>-drv-<test>.<what>`.
    pub fn name(&self, what: &str) -> String {
        format!("{}{what}", self.base)
    }

    /// A plan for a small container of `image` on `network`.
    pub fn plan(&self, what: &str, image: &PinnedImage, network: &str) -> ContainerPlan {
        ContainerPlan {
            name: self.name(what),
            image: image.as_str().to_owned(),
            command: None,
            env: BTreeMap::new(),
            mounts: Vec::new(),
            nano_cpus: 500_000_000,
            memory_bytes: 64 << 20,
            network: network.to_owned(),
            aliases: vec!["svc".to_owned()],
            labels: labels(),
            stop_timeout: Duration::from_secs(2),
        }
    }

    /// Pulls `image_var`, makes the scope's network, and creates and starts one container.
    pub async fn running(
        &self,
        rt: &DockerRuntime,
        image_var: &str,
    ) -> (ContainerFacts, ContainerPlan) {
        let image = image(image_var);
        rt.ensure_image(&image)
            .await
            .expect("the fixture image is pulled");
        let network = self.name("net");
        rt.ensure_network(&network, &labels())
            .await
            .expect("the network is made");
        let plan = self.plan("c", &image, &network);
        let id = rt
            .create_container(&plan)
            .await
            .expect("the container is created");
        rt.start_container(&id).await.expect("the container starts");
        let facts = rt
            .inspect_container(&plan.name)
            .await
            .expect("the container is inspected")
            .expect("the container exists");
        assert!(facts.running, "the container runs");
        (facts, plan)
    }
}

/// Names of `kind` objects (`container`, `network`, `volume`) starting with `base`. Docker's
/// name filter matches anywhere in the name, so the prefix is checked here.
fn names(kind: &str, base: &str) -> Vec<String> {
    let filter = format!("name={base}");
    let args: Vec<&str> = match kind {
        "container" => vec!["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"],
        other => vec![other, "ls", "--filter", &filter, "--format", "{{.Name}}"],
    };
    match Command::new("docker").args(&args).output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim().trim_start_matches('/').to_owned())
            .filter(|n| n.starts_with(base))
            .collect(),
        Err(e) => {
            eprintln!("cleanup: could not run docker to list {kind}s: {e}");
            Vec::new()
        }
    }
}

/// Ids of the networks whose names start with `base`.
fn network_ids(base: &str) -> Vec<String> {
    let filter = format!("name={base}");
    let args = [
        "network",
        "ls",
        "--filter",
        &filter,
        "--format",
        "{{.ID}} {{.Name}}",
    ];
    match Command::new("docker").args(args).output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().split_once(' '))
            .filter(|(_, name)| name.starts_with(base))
            .map(|(id, _)| id.to_owned())
            .collect(),
        Err(e) => {
            eprintln!("cleanup: could not run docker to list networks: {e}");
            Vec::new()
        }
    }
}

pub fn remove(args: &[&str]) {
    match Command::new("docker").args(args).output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => eprintln!(
            "cleanup: docker {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => eprintln!("cleanup: could not run docker {}: {e}", args.join(" ")),
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        // Containers first: a network or volume in use cannot be removed. Only this test's own
        // objects, which all start with its base name.
        for name in names("container", &self.base) {
            remove(&["rm", "-f", &name]);
        }
        // By id: should a race have made two networks of one name, the name is ambiguous.
        for id in network_ids(&self.base) {
            remove(&["network", "rm", &id]);
        }
        for name in names("volume", &self.base) {
            remove(&["volume", "rm", &name]);
        }
    }
}

/// Runs `argv` in a container with `stdin`.
pub async fn exec(
    rt: &DockerRuntime,
    container: &str,
    argv: &[&str],
    user: Option<&str>,
    timeout: Duration,
    max_output: usize,
    stdin: &'static [u8],
) -> ExecOutcome {
    let request = ExecRequest {
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        user: user.map(str::to_owned),
        timeout,
        max_output,
        cancel: Default::default(),
    };
    rt.exec(container, request, Box::pin(stdin))
        .await
        .unwrap_or_else(|e| panic!("the exec of {argv:?} failed: {e}"))
}

/// The container's process list, as busybox `ps` prints it.
pub async fn processes(rt: &DockerRuntime, container: &str) -> String {
    let out = exec(
        rt,
        container,
        &["ps"],
        Some("0"),
        Duration::from_secs(10),
        1 << 16,
        b"",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "ps runs: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}
