use std::collections::HashMap;
use std::time::{Duration, Instant};

use berth_core::ownership::LABEL_STORE;
use berth_core::runtime::{LABEL_COPY, LABEL_PREFIX, LABEL_VOLUME, Mount, Runtime, RuntimeError};
use bollard::models::VolumeCreateRequest;

use crate::common::{self, Scope};

#[tokio::test]
async fn ensure_volume_twice_is_fine_and_a_volume_with_foreign_labels_is_foreign() {
    let rt = common::runtime().await;
    let scope = Scope::new("volume-labels");
    let docker = common::docker();

    let name = scope.name("data");
    let mut labels = common::labels();
    labels.insert(LABEL_VOLUME.to_owned(), "data".to_owned());
    rt.ensure_volume(&name, &labels)
        .await
        .expect("the volume is made");
    rt.ensure_volume(&name, &labels)
        .await
        .expect("the volume is adopted again");
    let volume = docker
        .inspect_volume(&name)
        .await
        .expect("the volume exists");
    for (key, value) in &labels {
        assert_eq!(volume.labels.get(key), Some(value), "label {key}");
    }

    // Asked again with other berth labels: the volume keeps its own, and is not adopted.
    let mut other = labels.clone();
    other.insert(LABEL_VOLUME.to_owned(), "other".to_owned());
    let err = rt
        .ensure_volume(&name, &other)
        .await
        .expect_err("its labels differ");
    let RuntimeError::Foreign(message) = &err else {
        panic!("expected Foreign, got {err:?}");
    };
    assert!(message.contains(&name), "{message}");
    assert!(message.contains("will not adopt it"), "{message}");

    // A volume someone else made under the name.
    let foreign = scope.name("foreign");
    docker
        .create_volume(VolumeCreateRequest {
            name: Some(foreign.clone()),
            labels: Some(HashMap::from([("owner".to_owned(), "someone".to_owned())])),
            ..Default::default()
        })
        .await
        .expect("a foreign volume is made");
    let err = rt
        .ensure_volume(&foreign, &labels)
        .await
        .expect_err("it is not berth's");
    assert!(
        matches!(&err, RuntimeError::Foreign(m) if m.contains(&foreign)),
        "{err:?}"
    );

    // And one made by another berth.
    let theirs = scope.name("theirs");
    let mut their_labels = labels.clone();
    their_labels.insert(LABEL_PREFIX.to_owned(), "another-berth".to_owned());
    rt.ensure_volume(&theirs, &their_labels)
        .await
        .expect("their volume is made");
    let err = rt
        .ensure_volume(&theirs, &labels)
        .await
        .expect_err("it is another berth's");
    assert!(
        matches!(&err, RuntimeError::Foreign(m) if m.contains(LABEL_PREFIX)),
        "{err:?}"
    );

    // Another store's under the same prefix is not adopted; one made before berth labelled
    // its store (no `berth.store`) is, when its other labels are this berth's.
    let mut mine = labels.clone();
    mine.insert(LABEL_STORE.to_owned(), "bst:mine".to_owned());
    let other_store = scope.name("other-store");
    let mut their_store = mine.clone();
    their_store.insert(LABEL_STORE.to_owned(), "bst:theirs".to_owned());
    rt.ensure_volume(&other_store, &their_store)
        .await
        .expect("the other store's volume is made");
    let err = rt
        .ensure_volume(&other_store, &mine)
        .await
        .expect_err("it is another store's");
    assert!(
        matches!(&err, RuntimeError::Foreign(m) if m.contains(LABEL_STORE)),
        "{err:?}"
    );
    rt.ensure_volume(&name, &mine)
        .await
        .expect("an unlabelled volume of this berth's is adopted");
}

#[tokio::test]
async fn volume_bytes_reports_at_least_the_size_of_a_1_mib_file() {
    let rt = common::runtime().await;
    let scope = Scope::new("volume-bytes");
    let image = common::image(common::VOLUME);
    rt.ensure_image(&image)
        .await
        .expect("the volume image is ready");
    let network = scope.name("net");
    rt.ensure_network(&network, &common::labels())
        .await
        .expect("the network is made");
    let volume = scope.name("data");
    rt.ensure_volume(&volume, &common::labels())
        .await
        .expect("the volume is made");

    let mut plan = scope.plan("c", &image, &network);
    plan.mounts = vec![Mount {
        volume: volume.clone(),
        path: "/data".to_owned(),
    }];
    let id = rt
        .create_container(&plan)
        .await
        .expect("the container is created");
    rt.start_container(&id).await.expect("the container starts");
    let out = common::exec(
        &rt,
        &id,
        &[
            "sh",
            "-c",
            "head -c 1048576 /dev/zero > /data/one-mib && sync",
        ],
        None,
        Duration::from_secs(20),
        4096,
        b"",
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{out:?}");

    let missing = scope.name("never-made");
    let started = Instant::now();
    let sizes = rt
        .volume_bytes(&[volume.clone(), missing.clone()])
        .await
        .expect("the sizes are read");
    eprintln!("volume_bytes took {:?}", started.elapsed());
    let size = sizes[&volume].expect("the volume is measured");
    assert!(size >= 1 << 20, "{size} bytes");
    assert_eq!(sizes[&missing], None);

    // Concurrent calls are serialised rather than refused by the engine.
    let (a, b) = tokio::join!(
        rt.volume_bytes(std::slice::from_ref(&volume)),
        rt.volume_bytes(std::slice::from_ref(&volume))
    );
    assert!(a.expect("first")[&volume].is_some_and(|s| s >= 1 << 20));
    assert!(b.expect("second")[&volume].is_some_and(|s| s >= 1 << 20));
}

/// Runs `sh -c script` in a throwaway busybox container with `volume` at /d; its stdout.
pub(crate) fn in_volume(image: &str, volume: &str, script: &str) -> String {
    let out = std::process::Command::new("docker")
        .args([
            "run",
            "--rm",
            "-v",
            &format!("{volume}:/d"),
            image,
            "sh",
            "-c",
            script,
        ])
        .output()
        .expect("docker runs");
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The engine's events of `filters` from `since` (Unix seconds) until now.
async fn events_since(
    since: i64,
    filters: HashMap<String, Vec<String>>,
) -> Vec<bollard::models::EventMessage> {
    use futures_util::StreamExt;
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1;
    let options = bollard::query_parameters::EventsOptions {
        since: Some(since.to_string()),
        until: Some(until.to_string()),
        filters: Some(filters),
    };
    let events: Vec<_> = common::docker().events(Some(options)).collect().await;
    events
        .into_iter()
        .map(|e| e.expect("an engine event"))
        .collect()
}

/// The engine's record of what happened to container `name` since `since` (Unix seconds):
/// its event actions, in order.
async fn container_actions(name: &str, since: i64) -> Vec<String> {
    let filters = HashMap::from([
        ("type".to_owned(), vec!["container".to_owned()]),
        ("container".to_owned(), vec![name.to_owned()]),
    ]);
    events_since(since, filters)
        .await
        .into_iter()
        .filter(|e| {
            e.actor
                .as_ref()
                .and_then(|a| a.attributes.as_ref())
                .and_then(|a| a.get("name"))
                .is_some_and(|n| n == name)
        })
        .filter_map(|e| e.action)
        .collect()
}

#[tokio::test]
async fn a_copy_keeps_owners_modes_links_and_empty_dirs_both_ways_and_only_a_labelled_volume_is_removed()
 {
    use berth_core::runtime::CopyPlan;
    let rt = common::runtime().await;
    let scope = Scope::new("volume-copy");
    let image = common::image(common::BUSYBOX);
    rt.ensure_image(&image).await.expect("the image is ready");
    let reference = image.as_str().to_owned();
    let bare = common::image(common::BARE);
    rt.ensure_image(&bare).await.expect("the image is ready");

    let (from, to, to_archive) = (scope.name("from"), scope.name("to"), scope.name("to-tar"));
    let mut labels = common::labels();
    labels.insert(LABEL_COPY.to_owned(), "cpy:test".to_owned());
    rt.create_volume(&from, &labels).await.expect("made");
    rt.create_volume(&to, &labels).await.expect("made");
    rt.create_volume(&to_archive, &labels).await.expect("made");
    let again = rt.create_volume(&to, &labels).await;
    assert!(matches!(again, Err(RuntimeError::Conflict(_))), "{again:?}");
    // Times of files and directories too (not of the symlink: busybox's cp does not keep it).
    let listing = "cd /d && stat -c '%n %u %g %a %F %h' . * && stat -c '%n %Y' . f empty \
                   && readlink link && cat f";
    in_volume(
        &reference,
        &from,
        "cd /d && echo secret > f && chown 1234:5678 f && chmod 0640 f && ln -s f link \
         && ln f hard && mkdir empty && chmod 1777 empty && mkfifo pipe \
         && touch -d 2020-01-01 f && chown 42:43 /d && chmod 0700 /d \
         && head -c 3000000 /dev/urandom > big",
    );
    let expected = in_volume(&reference, &from, listing);
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - 1;

    // A running container the copy freezes while the bytes move.
    let frozen_name = scope.name("frozen");
    let out = std::process::Command::new("docker")
        .args([
            "run",
            "-d",
            "--name",
            &frozen_name,
            &reference,
            "sleep",
            "600",
        ])
        .output()
        .expect("docker runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frozen_id = String::from_utf8_lossy(&out.stdout).trim().to_owned();

    // An image with `cp` (busybox): the copy runs it in a helper, once the source is frozen,
    // and counts no bytes.
    let plan = CopyPlan {
        helper: scope.name("copy"),
        image: reference.clone(),
        from: from.clone(),
        to: to.clone(),
        labels: labels.clone(),
        freeze: Some(frozen_id.clone()),
    };
    let copied = rt
        .copy_volume(&plan, &|_| {})
        .await
        .expect("the copy with the image's cp");
    assert_eq!(copied.bytes, 0, "cp does not count what it copies");
    assert!(copied.frozen.is_some(), "{copied:?}");
    let actions = container_actions(&frozen_name, since).await;
    assert_eq!(
        actions,
        ["create", "start", "pause", "unpause"],
        "frozen once, thawed"
    );
    let state = common::docker()
        .inspect_container(&frozen_id, None)
        .await
        .expect("inspect")
        .state
        .expect("a state");
    assert_eq!(state.paused, Some(false));
    assert_eq!(state.running, Some(true));
    assert_eq!(in_volume(&reference, &to, listing), expected);
    let ran = container_actions(&format!("{}-c", plan.helper), since).await;
    assert!(
        ran.iter().any(|a| a == "start"),
        "the cp helper ran: {ran:?}"
    );
    assert!(
        ran.iter().any(|a| a.starts_with("exec_start: cp -a")),
        "cp ran in it: {ran:?}"
    );
    assert!(
        ran.iter().any(|a| a == "destroy"),
        "and is removed: {ran:?}"
    );

    // An image with no shell and no tools (bare): through the archive API, nothing runs, and
    // the progress counts every byte.
    let seen = std::sync::Mutex::new(0u64);
    let archive_plan = CopyPlan {
        helper: scope.name("copy-tar"),
        image: bare.as_str().to_owned(),
        from: from.clone(),
        to: to_archive.clone(),
        labels: labels.clone(),
        freeze: None,
    };
    let moved = rt
        .copy_volume(&archive_plan, &|bytes| {
            let mut seen = seen.lock().unwrap();
            assert!(bytes >= *seen, "progress only moves forward");
            *seen = bytes;
        })
        .await
        .expect("the copy through the archive API");
    assert_eq!(moved.frozen, None, "nothing to freeze");
    let moved = moved.bytes;
    assert!(moved > 3_000_000, "{moved}");
    assert_eq!(*seen.lock().unwrap(), moved);
    assert_eq!(in_volume(&reference, &to_archive, listing), expected);
    for helper in ["-c", "-r", "-w"] {
        let name = format!("{}{helper}", archive_plan.helper);
        let actions = container_actions(&name, since).await;
        assert!(
            !actions.iter().any(|a| a == "start"),
            "nothing ran in {name}: {actions:?}"
        );
        if helper != "-c" {
            assert!(actions.iter().any(|a| a == "create"), "{name}: {actions:?}");
        }
        assert!(
            common::docker()
                .inspect_container(&name, None)
                .await
                .is_err(),
            "helper {name} is removed"
        );
    }

    // Only a volume carrying the label named is removed.
    let refused = rt.remove_volume(&to, LABEL_COPY, "cpy:other").await;
    assert!(
        matches!(refused, Err(RuntimeError::Foreign(_))),
        "{refused:?}"
    );
    assert!(rt.volume_labels(&to).await.unwrap().is_some());
    rt.remove_volume(&to, LABEL_COPY, "cpy:test")
        .await
        .expect("removed");
    assert!(rt.volume_labels(&to).await.unwrap().is_none());
    rt.remove_volume(&to, LABEL_COPY, "cpy:test")
        .await
        .expect("gone already is fine");
}

/// Where the engine mounted volumes into container `name` since `since`: its volume `mount`
/// events' destinations (a tmpfs mount makes none).
async fn volume_destinations(name: &str, since: i64) -> Vec<String> {
    let of = |kind: &str| HashMap::from([("type".to_owned(), vec![kind.to_owned()])]);
    let ids: Vec<String> = events_since(since, of("container"))
        .await
        .into_iter()
        .filter(|e| e.action.as_deref() == Some("create"))
        .filter_map(|e| e.actor)
        .filter(|a| {
            a.attributes
                .as_ref()
                .and_then(|at| at.get("name"))
                .is_some_and(|n| n == name)
        })
        .filter_map(|a| a.id)
        .collect();
    assert!(!ids.is_empty(), "container {name} was made");
    events_since(since, of("volume"))
        .await
        .into_iter()
        .filter(|e| e.action.as_deref() == Some("mount"))
        .filter_map(|e| e.actor.and_then(|a| a.attributes))
        .filter(|at| at.get("container").is_some_and(|c| ids.contains(c)))
        .filter_map(|at| at.get("destination").cloned())
        .collect()
}

#[tokio::test]
async fn a_copy_helper_of_an_image_with_a_volume_mounts_only_the_two_volumes_and_leaves_no_anonymous_one()
 {
    use berth_core::runtime::CopyPlan;
    let rt = common::runtime().await;
    let scope = Scope::new("volume-shadow");
    // The image declares `VOLUME /data`: a helper made from it without a mount there would get
    // an anonymous volume, left behind when the helper goes.
    let image = common::image(common::VOLUME);
    rt.ensure_image(&image).await.expect("the image is ready");
    let reference = image.as_str().to_owned();
    let (from, to) = (scope.name("from"), scope.name("to"));
    let mut labels = common::labels();
    labels.insert(LABEL_COPY.to_owned(), "cpy:shadow".to_owned());
    rt.create_volume(&from, &labels).await.expect("made");
    rt.create_volume(&to, &labels).await.expect("made");
    in_volume(&reference, &from, "echo kept > /d/f");
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        - 1;
    let plan = CopyPlan {
        helper: scope.name("copy"),
        image: reference.clone(),
        from: from.clone(),
        to: to.clone(),
        labels: labels.clone(),
        freeze: None,
    };
    rt.copy_volume(&plan, &|_| {}).await.expect("the copy");
    assert_eq!(in_volume(&reference, &to, "cat /d/f"), "kept");
    let mut destinations = volume_destinations(&format!("{}-c", plan.helper), since).await;
    destinations.sort();
    assert_eq!(
        destinations,
        ["/berth-copy/from/data", "/berth-copy/to/data"],
        "the helper mounted its two volumes and nothing at /data"
    );
    for name in [&from, &to] {
        rt.remove_volume(name, LABEL_COPY, "cpy:shadow")
            .await
            .expect("removed");
    }
}

/// Every volume the runtime makes is held by a container that never runs, so the engine
/// refuses to remove it and a prune skips it; a removal by berth releases the holder first; a
/// holder removed by hand is made again by the sweep, which holds only its own store's
/// volumes.
#[tokio::test]
async fn a_volume_berth_makes_is_held_until_berth_removes_it_and_the_sweep_holds_it_again() {
    let rt = common::runtime().await;
    let scope = Scope::new("volume-holders");
    let docker = common::docker();
    let store = format!("bst:{}", scope.name("store"));
    let mut labels = common::labels();
    labels.insert(LABEL_STORE.to_owned(), store.clone());
    labels.insert(LABEL_COPY.to_owned(), "cpy:held".to_owned());

    let made = scope.name("made");
    rt.create_volume(&made, &labels).await.expect("made fresh");
    let ensured = scope.name("ensured");
    rt.ensure_volume(&ensured, &labels).await.expect("ensured");
    for volume in [&made, &ensured] {
        let holder = berth_docker::holders::name_of(volume);
        let inspected = docker
            .inspect_container(&holder, None)
            .await
            .unwrap_or_else(|e| panic!("{volume} has no holder: {e}"));
        assert_eq!(
            inspected
                .state
                .and_then(|s| s.status)
                .map(|s| s.to_string()),
            Some("created".to_owned())
        );
        let removed = docker
            .remove_volume(
                volume,
                None::<bollard::query_parameters::RemoveVolumeOptions>,
            )
            .await;
        assert!(removed.is_err(), "the engine removed held volume {volume}");
    }

    // The sweep: a holder removed by hand is made again; another store's volume is left.
    common::remove(&["rm", "-f", &berth_docker::holders::name_of(&made)]);
    let mut other = common::labels();
    other.insert(LABEL_STORE.to_owned(), "bst:another".to_owned());
    let theirs = scope.name("theirs");
    docker
        .create_volume(VolumeCreateRequest {
            name: Some(theirs.clone()),
            labels: Some(other.into_iter().collect()),
            ..Default::default()
        })
        .await
        .expect("another store's volume");
    let holdings = rt
        .hold_volumes(common::prefix(), &store)
        .await
        .expect("a sweep");
    assert_eq!(holdings.made, vec![made.clone()]);
    assert!(holdings.held.contains_key(&made) && holdings.held.contains_key(&ensured));
    assert!(!holdings.held.contains_key(&theirs));
    assert!(holdings.unheld.is_empty(), "{:?}", holdings.unheld);

    // berth's own removal releases the holder first.
    rt.remove_volume(&made, LABEL_COPY, "cpy:held")
        .await
        .expect("removed");
    assert!(rt.volume_labels(&made).await.unwrap().is_none());
    assert!(
        docker
            .inspect_container(&berth_docker::holders::name_of(&made), None)
            .await
            .is_err(),
        "the holder went with its volume"
    );
}
