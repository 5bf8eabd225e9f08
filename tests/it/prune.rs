//! `berth df` and `berth prune`: where a repository's disk goes, and giving it back. Worktrees
//! are made with `git worktree add`, branch main's data, write and restore, and are removed with
//! `git worktree remove`; prune then frees what they took, while main's data and snapshots, and
//! every layer a kept unit stands on, stay.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use support::Daemon;

use crate::cli::{Run, berth, git, repo};
use berth_testkit as support;

const READY: Duration = Duration::from_secs(120);
/// The worktrees made and removed around main's.
const WORKTREES: usize = 10;

/// A worktree-scoped `db` with a volume, and a shared `cache` with one: the fixture busybox.
fn project() -> String {
    let image = support::busybox_image();
    format!(
        r#"[instances.db]
image = "{image}"
scope = "worktree"
volumes = {{ data = "/srv/data" }}
ready = {{ tcp = 8080 }}

[instances.cache]
image = "{image}"
scope = "shared"
volumes = {{ data = "/srv/data" }}
ready = {{ tcp = 8080 }}
"#
    )
}

/// Writes `mib` MiB of random bytes, and `text` in `/srv/data/x`, into `name` of `dir`'s
/// worktree.
fn write(daemon: &Daemon, dir: &Path, name: &str, mib: u32, text: &str) {
    let script = format!(
        "head -c {} /dev/urandom > /srv/data/blob-{text} && echo {text} > /srv/data/x && sync",
        mib * 1024 * 1024
    );
    berth(daemon, dir, &["exec", name, "--", "sh", "-c", &script]).ok();
}

fn read(daemon: &Daemon, dir: &Path) -> String {
    berth(daemon, dir, &["exec", "db", "--", "cat", "/srv/data/x"])
        .ok()
        .stdout
        .trim()
        .to_owned()
}

fn volume_exists(name: &str) -> bool {
    std::process::Command::new("docker")
        .args(["volume", "inspect", name])
        .output()
        .expect("docker runs")
        .status
        .success()
}

fn domain_of(daemon: &Daemon) -> String {
    daemon.client().get("/v1/resource-domains").expect(200)["items"][0]["resourceDomainId"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn items_of<'a>(df: &'a Value, worktree: &str) -> Vec<&'a Value> {
    df["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["worktreeKey"] == worktree)
        .collect()
}

fn key_of_db(run: &Run) -> String {
    run.json()
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "db")
        .and_then(|i| i["key"].as_str())
        .unwrap()
        .to_owned()
}

#[test]
fn prune_frees_what_removed_worktrees_took_and_keeps_main_and_all_it_stands_on() {
    let daemon = Daemon::start();
    let repo = repo(&project());
    let api = daemon.client();
    let main_key = key_of_db(&berth(&daemon, &repo.main, &["up", "--json"]).ok());
    write(&daemon, &repo.main, "db", 1, "main");
    berth(&daemon, &repo.main, &["snapshot", "db", "main-snap"]).ok();

    // Ten worktrees, each made with `git worktree add`: each branches main's data, writes, and
    // restores main's snapshot once (which keeps what it replaced as a before-restore
    // snapshot). Every other one starts empty instead, and writes.
    let worktrees: Vec<std::path::PathBuf> = (1..=WORKTREES)
        .map(|n| {
            let dir = repo.main.parent().unwrap().join(format!("shop-task-{n}"));
            git(
                &repo.main,
                &["worktree", "add", "-q", dir.to_str().unwrap()],
            );
            let dir = dir.canonicalize().unwrap();
            if n % 2 == 1 {
                berth(&daemon, &dir, &["branch", "db", "--from", "main"]).ok();
                write(&daemon, &dir, "db", 1, &format!("task-{n}"));
                berth(&daemon, &dir, &["restore", "db", "main-snap"]).ok();
                assert_eq!(read(&daemon, &dir), "main");
            } else {
                berth(&daemon, &dir, &["up", "db"]).ok();
                write(&daemon, &dir, "db", 1, &format!("task-{n}"));
            }
            dir
        })
        .collect();

    let domain = domain_of(&daemon);
    let trees = support::block_on(api.api().worktrees(&support::domain_id(&domain))).unwrap();
    let key_at = |dir: &Path| {
        trees
            .iter()
            .find(|t| t.path == dir.to_string_lossy())
            .map(|t| t.worktree_key.clone())
            .unwrap_or_else(|| panic!("no worktree at {}: {trees:#?}", dir.display()))
    };
    let keys: Vec<String> = worktrees.iter().map(|d| key_at(d)).collect();
    let before = berth(&daemon, &repo.main, &["df", "--json"]).ok().json();
    let gone_units: Vec<&Value> = keys.iter().flat_map(|k| items_of(&before, k)).collect();
    // Ten instances and the before-restore snapshots of the half that restored.
    assert_eq!(gone_units.len(), 15, "{before:#}");
    let their_volumes: BTreeSet<String> = gone_units
        .iter()
        .flat_map(|i| i["volumes"].as_array().unwrap())
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    let their_bytes: u64 = gone_units
        .iter()
        .map(|i| i["bytes"].as_u64().expect("measured"))
        .sum();
    assert!(their_bytes >= 10 * 1024 * 1024, "{their_bytes}: {before:#}");
    // Its total agrees with the engine's own figures (`docker system df -v`) for the domain's
    // volumes that hold data (not an overlay's mount, whose data is its `.up` and layers).
    let engine = engine_volume_bytes(&domain);
    let storage: u64 = engine
        .iter()
        .filter(|(name, _)| !engine.contains_key(&format!("{name}.up")))
        .map(|(_, bytes)| bytes)
        .sum();
    let total = before["totalBytes"].as_u64().expect("measured");
    assert!(
        storage.abs_diff(total) * 20 <= total.max(1),
        "berth df says {total}, the engine {storage}: {engine:#?}"
    );
    // The table for people: by worktree, by unit, with the layers they share.
    let table = berth(&daemon, &repo.main, &["df"]).ok();
    assert!(
        table.stdout.contains("WORKTREE") && table.stdout.contains("main (this)"),
        "{table:?}"
    );

    // Every one goes with `git worktree remove`; berth notices each and stops its instance.
    for dir in &worktrees {
        git(
            &repo.main,
            &["worktree", "remove", "--force", dir.to_str().unwrap()],
        );
    }
    for key in &keys {
        let db = format!("db@{}", key.to_lowercase());
        api.wait_state(&domain, &db, "stopped", READY);
    }

    // Without a terminal to ask on, prune lists what it would do and refuses.
    let asked = berth(&daemon, &repo.main, &["prune"]);
    assert_eq!(asked.code, 1, "{asked:?}");
    assert!(
        asked.stdout.contains("its worktree was removed") && asked.stderr.contains("--yes"),
        "{asked:?}"
    );
    // A dry run lists the same and removes nothing.
    let plan = berth(&daemon, &repo.main, &["prune", "--dry-run", "--json"])
        .ok()
        .json();
    assert_eq!(plan["dryRun"], true);
    let reasons: BTreeSet<&str> = plan["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, BTreeSet::from(["worktree-ended"]), "{plan:#}");
    assert_eq!(plan["actions"].as_array().unwrap().len(), 15, "{plan:#}");
    assert!(their_volumes.iter().all(|v| volume_exists(v)));

    let done = berth(&daemon, &repo.main, &["prune", "--yes", "--json"])
        .ok()
        .json();
    assert_eq!(done["dryRun"], false);
    let freed = done["freedBytes"].as_u64().expect("measured");
    // At least 95% of what the removed worktrees held (and what only they stood on).
    assert!(
        freed * 100 >= their_bytes * 95,
        "freed {freed} of {their_bytes}: {done:#}"
    );
    for volume in their_volumes {
        assert!(!volume_exists(&volume), "{volume} is still there");
    }

    // Main's data and snapshot are untouched, and every volume a kept unit holds is there.
    assert_eq!(read(&daemon, &repo.main), "main");
    let main = api.instance(&domain, &main_key);
    assert_eq!(main["state"]["kind"], "running", "{main:#}");
    let after = berth(&daemon, &repo.main, &["df", "--json"]).ok().json();
    for key in &keys {
        assert!(
            items_of(&after, key)
                .iter()
                .all(|i| i["kind"] == "archived" && i["volumes"] == serde_json::json!([])),
            "{after:#}"
        );
    }
    let snap = after["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "snapshot" && i["name"] == "main-snap")
        .unwrap_or_else(|| panic!("main's snapshot is gone: {after:#}"));
    for item in after["items"].as_array().unwrap() {
        for v in item["volumes"].as_array().unwrap() {
            assert!(volume_exists(v.as_str().unwrap()), "{v} of {item:#}");
        }
    }
    assert!(!snap["volumes"].as_array().unwrap().is_empty(), "{snap:#}");
    let restored = berth(
        &daemon,
        &repo.main,
        &["restore", "db", "main-snap", "--json"],
    )
    .ok();
    assert_eq!(restored.json()["instance"]["state"]["kind"], "running");
    assert_eq!(read(&daemon, &repo.main), "main");

    // Nothing is left to prune of those worktrees.
    let again = berth(&daemon, &repo.main, &["prune", "--dry-run", "--json"])
        .ok()
        .json();
    assert!(
        again["actions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["reason"] != "worktree-ended"),
        "{again:#}"
    );
}

#[test]
fn retention_keeps_the_newest_before_restore_snapshots_and_archived_data_its_days() {
    let daemon = Daemon::start();
    let repo = repo(&project());
    berth(&daemon, &repo.main, &["up"]).ok();
    write(&daemon, &repo.main, "db", 1, "v1");
    berth(&daemon, &repo.main, &["snapshot", "db", "base"]).ok();
    for n in 0..3 {
        write(&daemon, &repo.main, "db", 1, &format!("r{n}"));
        berth(&daemon, &repo.main, &["restore", "db", "base"]).ok();
    }
    let snapshots = || -> Vec<String> {
        berth(&daemon, &repo.main, &["snapshots", "--json"])
            .ok()
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let listed = snapshots();
    let before_restore: Vec<&String> = listed
        .iter()
        .filter(|n| n.starts_with("before-restore-"))
        .collect();
    assert_eq!(before_restore.len(), 3, "{listed:?}");
    let newest = before_restore[0].clone();

    let report = berth(
        &daemon,
        &repo.main,
        &["prune", "--yes", "--keep-before-restore", "1", "--json"],
    )
    .ok()
    .json();
    let pruned: Vec<&str> = report["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["reason"].as_str().unwrap())
        .collect();
    assert_eq!(pruned, ["before-restore-past-count"; 2], "{report:#}");
    let left = snapshots();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(
        left.contains(&newest) && left.contains(&"base".to_owned()),
        "{left:?}"
    );
    assert_eq!(read(&daemon, &repo.main), "v1");

    // An archived instance's data stays its days, then goes with the next prune.
    write(&daemon, &repo.main, "cache", 1, "cached");
    let archived = berth(&daemon, &repo.main, &["archive", "cache", "--json"]).ok();
    let volume = archived.json()[0]["volumes"][0]["dockerName"]
        .as_str()
        .unwrap_or_else(|| panic!("{archived:?}"))
        .to_owned();
    let young = berth(
        &daemon,
        &repo.main,
        &["prune", "--yes", "--keep-archived-days", "1", "--json"],
    )
    .ok()
    .json();
    assert!(young["actions"].as_array().unwrap().is_empty(), "{young:#}");
    assert!(volume_exists(&volume));
    let plan = berth(
        &daemon,
        &repo.main,
        &["prune", "--dry-run", "--keep-archived-days", "0"],
    )
    .ok();
    assert!(
        plan.stdout.contains("archived longer than kept") && plan.stdout.contains("would free"),
        "{plan:?}"
    );
    berth(
        &daemon,
        &repo.main,
        &["prune", "--yes", "--keep-archived-days", "0"],
    )
    .ok();
    assert!(!volume_exists(&volume), "{volume} is still there");
    let domain = domain_of(&daemon);
    let gone = daemon
        .client()
        .get(&format!(
            "/v1/resource-domains/{domain}/instances?archived=true"
        ))
        .expect(200);
    let cache = gone["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["key"] == "cache")
        .unwrap_or_else(|| panic!("{gone:#}"));
    assert_eq!(cache["volumes"], serde_json::json!([]), "{cache:#}");
    assert_eq!(read(&daemon, &repo.main), "v1");

    // berth.toml's [retention] is what a prune keeps when its flags do not say; at 0, a
    // restore keeps no before-restore snapshot at all.
    let file = repo.main.join("berth.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        format!("[retention]\nkeep-before-restore = 0\n\n{text}"),
    )
    .unwrap();
    let plan = berth(&daemon, &repo.main, &["prune", "--dry-run", "--json"])
        .ok()
        .json();
    let would: Vec<&str> = plan["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(would, [newest.as_str()], "{plan:#}");
    write(&daemon, &repo.main, "db", 1, "replaced");
    let restored = berth(&daemon, &repo.main, &["restore", "db", "base"]).ok();
    assert!(restored.stdout.contains("is not kept"), "{restored:?}");
    assert_eq!(read(&daemon, &repo.main), "v1");
    assert_eq!(snapshots(), left, "no before-restore snapshot was kept");
}

#[test]
fn a_prune_killed_in_the_middle_is_finished_by_the_next_and_loses_nothing_kept() {
    let mut daemon = Daemon::start();
    let repo = repo(&project());
    berth(&daemon, &repo.main, &["up", "db"]).ok();
    write(&daemon, &repo.main, "db", 1, "v1");
    berth(&daemon, &repo.main, &["snapshot", "db", "base"]).ok();
    for n in 0..4 {
        write(&daemon, &repo.main, "db", 1, &format!("r{n}"));
        berth(&daemon, &repo.main, &["restore", "db", "base"]).ok();
    }
    let plan = berth(
        &daemon,
        &repo.main,
        &["prune", "--dry-run", "--keep-before-restore", "0", "--json"],
    )
    .ok()
    .json();
    let doomed: Vec<String> = plan["removedVolumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(plan["actions"].as_array().unwrap().len(), 4, "{plan:#}");
    assert!(!doomed.is_empty(), "{plan:#}");

    // The daemon dies (SIGKILL) as soon as the prune has removed its first volume, or after
    // it ended, whichever the race gives: the next prune must finish either way.
    let base = daemon.base.clone();
    let pruning = std::thread::spawn(move || {
        let client = support::Client::new(&base, Some(support::KEY));
        support::block_on(client.api().prune(
            &support::domain_id(&domain_of_at(&client)),
            &berth_client::PruneRequest {
                dry_run: false,
                keep_before_restore: Some(0),
                keep_archived_days: None,
            },
        ))
    });
    support::wait_until(READY, "the prune's first removal", || {
        doomed.iter().any(|v| !volume_exists(v)) || pruning.is_finished()
    });
    daemon.kill9();
    let _ = pruning.join();
    daemon.start_again();

    berth(
        &daemon,
        &repo.main,
        &["prune", "--yes", "--keep-before-restore", "0"],
    )
    .ok();
    for volume in &doomed {
        assert!(!volume_exists(volume), "{volume} is still there");
    }
    let names: Vec<String> = berth(&daemon, &repo.main, &["snapshots", "--json"])
        .ok()
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["base"], "{names:?}");
    let after = berth(&daemon, &repo.main, &["df", "--json"]).ok().json();
    for item in after["items"].as_array().unwrap() {
        for v in item["volumes"].as_array().unwrap() {
            assert!(volume_exists(v.as_str().unwrap()), "{v} of {item:#}");
        }
    }
    let domain = domain_of(&daemon);
    daemon.client().settled(
        &domain,
        &key_of_main(&daemon, &repo.main),
        &["running"],
        READY,
    );
    assert_eq!(read(&daemon, &repo.main), "v1");
    berth(&daemon, &repo.main, &["restore", "db", "base"]).ok();
    assert_eq!(read(&daemon, &repo.main), "v1");
}

/// The engine's size of each volume of `domain` (by its `berth.domain` label), from
/// `docker system df -v`, whose sizes are decimal and rounded to four digits.
fn engine_volume_bytes(domain: &str) -> std::collections::BTreeMap<String, u64> {
    let out = std::process::Command::new("docker")
        .args(["system", "df", "-v", "--format", "{{json .Volumes}}"])
        .output()
        .expect("docker runs");
    let volumes: Vec<Value> = serde_json::from_slice(&out.stdout).expect("the engine's JSON");
    let label = format!("berth.domain={domain}");
    volumes
        .iter()
        .filter(|v| {
            v["Labels"]
                .as_str()
                .unwrap_or("")
                .split(',')
                .any(|l| l == label)
        })
        .map(|v| {
            let size = v["Size"].as_str().unwrap_or("0B");
            let digits = size.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            let unit = &size[digits.len()..];
            let scale = match unit {
                "B" => 1.0,
                "kB" => 1e3,
                "MB" => 1e6,
                "GB" => 1e9,
                "TB" => 1e12,
                other => panic!("a size unit {other:?} in {size:?}"),
            };
            let bytes = digits.parse::<f64>().expect("a size") * scale;
            (v["Name"].as_str().unwrap().to_owned(), bytes as u64)
        })
        .collect()
}

fn domain_of_at(client: &support::Client) -> String {
    client.get("/v1/resource-domains").expect(200)["items"][0]["resourceDomainId"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn key_of_main(daemon: &Daemon, dir: &Path) -> String {
    key_of_db(&berth(daemon, dir, &["ps", "--json"]).ok())
}

#[test]
fn a_snapshot_others_stand_on_is_deleted_its_layers_kept_while_they_do_then_pruned() {
    let daemon = Daemon::start();
    let repo = repo(&project());
    berth(&daemon, &repo.main, &["up", "db"]).ok();
    write(&daemon, &repo.main, "db", 1, "base");
    berth(&daemon, &repo.main, &["snapshot", "db", "base"]).ok();
    // A worktree's db branched from the snapshot stands on its layer.
    let dir = repo.main.parent().unwrap().join("shop-fix");
    git(
        &repo.main,
        &["worktree", "add", "-q", dir.to_str().unwrap()],
    );
    let dir = dir.canonicalize().unwrap();
    berth(&daemon, &dir, &["branch", "db", "--from", "base"]).ok();
    assert_eq!(read(&daemon, &dir), "base");

    // `snapshots rm` deletes it, says what stays and why, and asks nobody to remove a volume.
    let rm = berth(&daemon, &repo.main, &["snapshots", "rm", "base"]).ok();
    assert!(
        rm.stdout.contains("deleted snapshot base")
            && rm.stdout.contains("stay, as layers of db@")
            && !rm.stdout.contains("docker volume rm"),
        "{rm:?}"
    );
    let listed = berth(&daemon, &repo.main, &["snapshots", "--json"])
        .ok()
        .json();
    assert_eq!(listed, serde_json::json!([]), "{listed:#}");
    // The branch and main keep every byte; `df` lists the layers as a deleted snapshot's.
    assert_eq!(read(&daemon, &dir), "base");
    assert_eq!(read(&daemon, &repo.main), "base");
    let df = berth(&daemon, &repo.main, &["df", "--json"]).ok().json();
    let orphan: Vec<&Value> = df["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "orphan")
        .collect();
    assert_eq!(orphan.len(), 1, "{df:#}");
    assert_eq!(orphan[0]["name"], "base", "{df:#}");
    assert_eq!(orphan[0]["frees"], 0, "others stand on it: {df:#}");
    let layers: Vec<String> = orphan[0]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    assert!(layers.iter().all(|v| volume_exists(v)), "{layers:?}");
    // While anything stands on them, no prune takes them.
    let plan = berth(&daemon, &repo.main, &["prune", "--dry-run", "--json"])
        .ok()
        .json();
    assert!(
        plan["actions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|a| a["kind"] != "orphan"),
        "{plan:#}"
    );

    // Once both instances are archived and their data pruned, the layers go with them.
    berth(&daemon, &dir, &["archive", "db"]).ok();
    berth(&daemon, &repo.main, &["archive", "db"]).ok();
    let report = berth(
        &daemon,
        &repo.main,
        &["prune", "--yes", "--keep-archived-days", "0", "--json"],
    )
    .ok()
    .json();
    let kinds: BTreeSet<&str> = report["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains("orphan"), "{report:#}");
    assert!(
        layers.iter().all(|v| !volume_exists(v)),
        "{layers:?} are still there"
    );
    let after = berth(&daemon, &repo.main, &["df", "--json"]).ok().json();
    assert!(
        after["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["kind"] != "orphan"),
        "{after:#}"
    );
}
