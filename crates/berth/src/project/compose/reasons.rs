//! Why each thing `berth init --from` leaves out of berth.toml is left out: the contract's own
//! sentence for what it refuses (`FORBIDDEN_SPEC_FIELDS`), and for the rest what berth does
//! instead.

use berth_core::spec::FORBIDDEN_SPEC_FIELDS;

pub const CONTRACT_MOUNTS: &str = "binds";

/// The contract's sentence for a forbidden spec field.
pub fn contract(field: &str) -> String {
    FORBIDDEN_SPEC_FIELDS
        .iter()
        .find(|(f, _)| *f == field)
        .map(|(_, why)| format!("refused by berth's contract: {why}"))
        .unwrap_or_else(|| format!("refused by berth's contract ({field})"))
}

/// Why a Compose file's own networks (top-level or a service's) are not made.
pub fn networks_why() -> String {
    "berth makes no network a Compose file names: it puts a project's instances on a network \
     of its own, where each reaches the others by its instance name"
        .to_owned()
}

/// Why a service key berth does not map is left out.
pub fn why_left_out(key: &str) -> String {
    if key == "networks" {
        return networks_why();
    }
    let contract_field = match key {
        "privileged" => Some("privileged"),
        "cap_add" => Some("cap_add"),
        "network_mode" | "net" => Some("network_mode"),
        "devices" | "device_cgroup_rules" | "gpus" => Some("devices"),
        "pid" => Some("pid"),
        "ipc" => Some("ipc"),
        "uts" => Some("uts"),
        "userns_mode" => Some("usernsMode"),
        "security_opt" => Some("security_opt"),
        "volumes_from" => Some("mounts"),
        "extra_hosts" | "dns" | "dns_opt" | "dns_search" | "mac_address" => Some("network"),
        _ => None,
    };
    if let Some(field) = contract_field {
        return contract(field);
    }
    let own = match key {
        "container_name" => "berth names an instance's container itself",
        "hostname" | "domainname" | "links" => {
            "linked containers reach an instance by its alias (its name in berth.toml)"
        }
        "restart" => "berth restarts an instance whose process ends, with back-off",
        "depends_on" => "berth starts each instance on its own; `berth up` waits for all of them",
        "labels" | "annotations" => "berth labels the containers it makes itself",
        "logging" => "berth keeps an instance's output: `berth logs NAME`",
        "user" => "berth.toml has no user: the image's user runs the command",
        "expose" => {
            "berth gives a host endpoint to each port the image exposes and to the tcp ready port"
        }
        "deploy" | "mem_limit" | "memswap_limit" | "mem_reservation" | "cpus" | "cpu_shares"
        | "cpu_quota" | "cpuset" | "mem_swappiness" | "oom_score_adj" | "oom_kill_disable"
        | "pids_limit" | "blkio_config" | "scale" => {
            "berth.toml sets limits with cpu and memory (1 core and 512MiB unless written)"
        }
        "secrets" => {
            "berth mounts no secret file: a *_FILE variable that read one becomes a reference to a variable"
        }
        "configs" => "berth.toml has no configs: an instance mounts named volumes only",
        "tmpfs" | "shm_size" => "berth.toml has no tmpfs: an instance writes to its own layer",
        "stop_signal" | "stop_grace_period" => "berth stops an instance with the image's signal",
        "pull_policy" | "platform" => "berth pulls the pinned digest for the engine's platform",
        "init" => "berth runs every instance with an init process",
        "read_only" => "berth.toml has no read-only root",
        "extends" => "berth reads this file alone: a service extended from another is not merged",
        "healthcheck" => "its test is neither CMD nor CMD-SHELL",
        _ if key.starts_with("x-") => "an extension field: nothing in berth.toml reads it",
        _ => "berth.toml has no such field",
    };
    own.to_owned()
}
