//! The engine as the tests look at it: through the `docker` CLI, and the cleanup by prefix.

use std::process::Command;

use serde_json::Value;

/// Removes every container, network and volume whose name starts with `prefix` (test objects).
pub fn remove_docker_objects(prefix: &str) {
    let list = |args: &[&str]| -> Vec<String> {
        Command::new("docker")
            .args(args)
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mine = |names: Vec<String>| -> Vec<String> {
        names
            .into_iter()
            .filter(|n| n.starts_with(&format!("{prefix}-")) || n == prefix)
            .collect()
    };
    let containers = mine(list(&["ps", "-a", "--format", "{{.Names}}"]));
    if !containers.is_empty() {
        let _ = Command::new("docker")
            .args(["rm", "-f"])
            .args(&containers)
            .output();
    }
    let networks = mine(list(&["network", "ls", "--format", "{{.Name}}"]));
    if !networks.is_empty() {
        let _ = Command::new("docker")
            .args(["network", "rm"])
            .args(&networks)
            .output();
    }
    let volumes = mine(list(&["volume", "ls", "--format", "{{.Name}}"]));
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

/// Names of containers whose name starts with `prefix`.
pub fn containers_named(prefix: &str) -> Vec<String> {
    docker(&["ps", "-a", "--format", "{{.Names}}"])
        .lines()
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
