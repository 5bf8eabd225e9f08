//! The engine as the tests look at it: through the `docker` CLI, and the cleanup by prefix.

use std::process::Command;

use serde_json::Value;

/// Containers, networks and volumes, by name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DockerObjects {
    pub containers: Vec<String>,
    pub networks: Vec<String>,
    pub volumes: Vec<String>,
}

impl DockerObjects {
    /// Whether there is none of any kind.
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty() && self.networks.is_empty() && self.volumes.is_empty()
    }
}

/// Whether `name` is one of `prefix`'s objects: `<prefix>-…`, or `prefix` itself (a leading `/`,
/// as Docker's API writes container names, is ignored). Docker's own name filters are regular
/// expressions that match anywhere, so the exact test is done here.
pub fn named_with(name: &str, prefix: &str) -> bool {
    name.trim_start_matches('/')
        .strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

/// The names `docker args...` prints, one a line.
fn names(args: &[&str]) -> Result<Vec<String>, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("docker {args:?} could not run: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "docker {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// The containers, networks and volumes named with `prefix` ([`named_with`]), or why Docker
/// could not list them.
pub fn docker_objects(prefix: &str) -> Result<DockerObjects, String> {
    let mine = |names: Vec<String>| -> Vec<String> {
        names
            .into_iter()
            .filter(|n| named_with(n, prefix))
            .collect()
    };
    Ok(DockerObjects {
        containers: mine(names(&["ps", "-a", "--format", "{{.Names}}"])?),
        networks: mine(names(&["network", "ls", "--format", "{{.Name}}"])?),
        volumes: mine(names(&["volume", "ls", "--format", "{{.Name}}"])?),
    })
}

/// Removes every container, network and volume named with `prefix` ([`named_with`]): a test
/// daemon's objects, or a run's. Containers go first (a network or volume in use cannot), with
/// `rm -f -v`: `-v` removes only a container's anonymous volumes (the one the engine gives each
/// `VOLUME` of a test's own plain Postgres or Redis container), never a named one, and berth's
/// own containers have none. Nothing named otherwise is touched. What could not be removed is
/// left; [`docker_objects`] tells what is.
pub fn remove_docker_objects(prefix: &str) {
    let mine = |args: &[&str]| -> Vec<String> {
        names(args)
            .unwrap_or_default()
            .into_iter()
            .filter(|n| named_with(n, prefix))
            .collect()
    };
    let containers = mine(&["ps", "-a", "--format", "{{.Names}}"]);
    if !containers.is_empty() {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v"])
            .args(&containers)
            .output();
    }
    let networks = mine(&["network", "ls", "--format", "{{.Name}}"]);
    if !networks.is_empty() {
        let _ = Command::new("docker")
            .args(["network", "rm"])
            .args(&networks)
            .output();
    }
    let volumes = mine(&["volume", "ls", "--format", "{{.Name}}"]);
    if !volumes.is_empty() {
        let _ = Command::new("docker")
            .args(["volume", "rm", "-f"])
            .args(&volumes)
            .output();
    }
}

/// The argv of every process in a container, as busybox `ps -o args` prints them.
pub fn processes(container: &str) -> String {
    docker(&["exec", container, "ps", "-o", "args"])
}

/// `docker inspect` of an object, as JSON.
pub fn docker_inspect(kind: &str, name: &str) -> Option<Value> {
    let out = Command::new("docker")
        .args([kind, "inspect", name])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    v.as_array()?.first().cloned()
}

/// Runs `docker args...`, panicking on failure, and returns stdout.
pub fn docker(args: &[&str]) -> String {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    assert!(
        out.status.success(),
        "docker {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Names of containers whose name starts with `prefix`, but for the holders of volumes
/// (containers labelled `berth.holds`, created and never started): what runs or ran.
pub fn containers_named(prefix: &str) -> Vec<String> {
    docker(&[
        "ps",
        "-a",
        "--format",
        "{{.Names}}\t{{.Label \"berth.holds\"}}",
    ])
    .lines()
    .filter_map(|line| match line.split_once('\t') {
        Some((name, "")) => Some(name),
        Some(_) => None,
        None => Some(line),
    })
    .filter(|n| n.starts_with(prefix))
    .map(str::to_owned)
    .collect()
}

/// Names of the containers labelled with instance id `id`.
pub fn containers_labelled(id: &str) -> Vec<String> {
    docker(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=berth.instance={id}"),
        "--format",
        "{{.Names}}",
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

/// Names of the containers of an instance (as the API answers it).
pub fn containers_of(instance: &Value) -> Vec<String> {
    containers_labelled(
        instance["resourceInstanceId"]
            .as_str()
            .expect("an instance id"),
    )
}

/// The one container of an instance; panics unless there is exactly one.
pub fn container_of(instance: &Value) -> String {
    let names = containers_of(instance);
    assert_eq!(
        names.len(),
        1,
        "exactly one container for {}: {names:?}",
        instance["resourceInstanceId"]
    );
    names[0].clone()
}

/// What `GET /who` on `<host>:8080` answers from inside `container`, or None when it cannot.
/// The name is resolved with busybox's own DNS client (`nslookup`), through Docker's embedded
/// DNS, and the request sent with `nc`: a static busybox's `wget` cannot use the C library's
/// resolver.
pub fn who_from(container: &str, host: &str) -> Option<String> {
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

/// Removes every local image whose `repository@digest` starts with `prefix`
/// (`127.0.0.1:5000/scope/`; ending in `@`, one repository exactly). Tests run at once, so a
/// test names only its own repositories: an image another test has just pulled, removed before
/// its container starts, fails that instance's image evidence.
pub fn remove_local_images(prefix: &str) {
    let listed = std::process::Command::new("docker")
        .args([
            "images",
            "--digests",
            "--format",
            "{{.Repository}}@{{.Digest}}",
        ])
        .output();
    if let Ok(listed) = listed {
        for line in String::from_utf8_lossy(&listed.stdout).lines() {
            if line.starts_with(prefix) {
                let _ = std::process::Command::new("docker")
                    .args(["rmi", "-f", line])
                    .output();
            }
        }
    }
}

/// Removes the local images under its prefix ([`remove_local_images`]) when dropped, however
/// the test ends; made before the daemon, it is dropped after the daemon's containers are gone.
pub struct LocalImages(pub String);

impl Drop for LocalImages {
    fn drop(&mut self) {
        remove_local_images(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_under_the_prefix_are_ours() {
        assert!(named_with("/berth-bench-1a2b-raw-up-1", "berth-bench-1a2b"));
        assert!(named_with(
            "berth-bench-1a2b-0123456789ab",
            "berth-bench-1a2b"
        ));
        assert!(named_with("berth-bench-1a2b", "berth-bench-1a2b"));
        assert!(!named_with("berth-bench-1a2bc-x", "berth-bench-1a2b"));
        assert!(!named_with("x-berth-bench-1a2b-y", "berth-bench-1a2b"));
    }
}
