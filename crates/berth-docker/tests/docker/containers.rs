use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use berth_core::runtime::{Mount, Runtime, RuntimeError};
use bollard::models::MountType;

use crate::common::{self, Scope};

const SECRET: &str = "s3cret-value-that-must-not-leak";

#[tokio::test]
async fn a_container_created_from_a_plan_is_hardened() {
    let rt = common::runtime().await;
    let scope = Scope::new("hardened");
    let docker = common::docker();
    let image = common::image(common::VOLUME);
    let facts = rt.ensure_image(&image).await.expect("the image is ready");
    let network = scope.name("net");
    rt.ensure_network(&network, &common::labels())
        .await
        .expect("the network is made");
    let volume = scope.name("data");
    rt.ensure_volume(&volume, &common::labels())
        .await
        .expect("the volume is made");

    let mut plan = scope.plan("c", &image, &network);
    plan.command = Some(vec![
        "httpd".to_owned(),
        "-f".to_owned(),
        "-p".to_owned(),
        "8080".to_owned(),
        "-h".to_owned(),
        "/www".to_owned(),
    ]);
    plan.env = BTreeMap::from([("BERTH_SECRET".to_owned(), SECRET.to_owned())]);
    plan.mounts = vec![Mount {
        volume: volume.clone(),
        path: "/data".to_owned(),
    }];
    plan.nano_cpus = 250_000_000;
    plan.memory_bytes = 48 << 20;
    plan.aliases = vec!["db".to_owned(), "primary".to_owned()];
    plan.labels
        .insert("berth.instance".to_owned(), "i-1".to_owned());
    plan.stop_timeout = Duration::from_secs(3);

    let id = rt
        .create_container(&plan)
        .await
        .expect("the container is created");
    let found = docker
        .inspect_container(&id, None)
        .await
        .expect("it is inspected");
    assert_eq!(
        found.name.as_deref(),
        Some(format!("/{}", plan.name).as_str())
    );
    assert_eq!(found.image.as_deref(), Some(facts.image_id.as_str()));

    let host = found.host_config.expect("a host config");
    assert_eq!(host.privileged, Some(false));
    assert!(
        host.cap_add.unwrap_or_default().is_empty(),
        "no added capability"
    );
    let security = host.security_opt.unwrap_or_default();
    assert!(
        security.iter().any(|o| o.starts_with("no-new-privileges")),
        "{security:?}"
    );
    assert_eq!(host.init, Some(true));
    assert!(host.binds.unwrap_or_default().is_empty(), "no bind");
    let mounts = host.mounts.unwrap_or_default();
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    assert_eq!(mounts[0].typ, Some(MountType::VOLUME));
    assert_eq!(mounts[0].source.as_deref(), Some(volume.as_str()));
    assert_eq!(mounts[0].target.as_deref(), Some("/data"));
    assert_eq!(host.nano_cpus, Some(250_000_000));
    assert_eq!(host.memory, Some(48 << 20));
    assert_eq!(host.network_mode.as_deref(), Some(network.as_str()));
    assert!(
        host.port_bindings.unwrap_or_default().is_empty(),
        "no published port"
    );
    assert_ne!(host.publish_all_ports, Some(true));
    assert_eq!(host.pid_mode.as_deref().unwrap_or_default(), "");
    assert!(host.devices.unwrap_or_default().is_empty());

    let config = found.config.expect("a config");
    assert_eq!(config.cmd, plan.command);
    assert_eq!(
        config.entrypoint, None,
        "the image's entrypoint is untouched"
    );
    assert_eq!(config.stop_timeout, Some(3));
    assert!(
        config
            .env
            .unwrap_or_default()
            .contains(&format!("BERTH_SECRET={SECRET}"))
    );
    let labels = config.labels.unwrap_or_default();
    for (key, value) in &plan.labels {
        assert_eq!(labels.get(key), Some(value), "label {key}");
    }

    let networks = found
        .network_settings
        .and_then(|n| n.networks)
        .unwrap_or_default();
    assert_eq!(networks.keys().collect::<Vec<_>>(), vec![&network]);
    let aliases = networks[&network].aliases.clone().unwrap_or_default();
    for alias in &plan.aliases {
        assert!(aliases.contains(alias), "{aliases:?}");
    }

    // It runs, with only the named volume mounted (the image's VOLUME is covered by it).
    rt.start_container(&id).await.expect("the container starts");
    let running = docker
        .inspect_container(&id, None)
        .await
        .expect("it is inspected");
    let mounted = running.mounts.unwrap_or_default();
    assert_eq!(mounted.len(), 1, "{mounted:?}");
    assert_eq!(mounted[0].typ.as_deref(), Some("volume"));
    assert_eq!(mounted[0].name.as_deref(), Some(volume.as_str()));
    let no_new_privs = common::exec(
        &rt,
        &id,
        &["sh", "-c", "grep NoNewPrivs /proc/self/status"],
        None,
        Duration::from_secs(10),
        4096,
        b"",
    )
    .await;
    assert_eq!(
        String::from_utf8_lossy(&no_new_privs.stdout)
            .split_whitespace()
            .last(),
        Some("1")
    );

    // Removing the container leaves its volume alone.
    rt.remove_container(&id)
        .await
        .expect("the container is removed");
    docker
        .inspect_volume(&volume)
        .await
        .expect("the volume is still there");
}

#[tokio::test]
async fn creating_a_container_whose_name_is_taken_is_a_conflict() {
    let rt = common::runtime().await;
    let scope = Scope::new("conflict");
    let image = common::image(common::BUSYBOX);
    rt.ensure_image(&image).await.expect("the image is ready");
    let network = scope.name("net");
    rt.ensure_network(&network, &common::labels())
        .await
        .expect("the network is made");
    let mut plan = scope.plan("c", &image, &network);
    plan.env = BTreeMap::from([("BERTH_SECRET".to_owned(), SECRET.to_owned())]);

    rt.create_container(&plan)
        .await
        .expect("the first create succeeds");
    let err = rt
        .create_container(&plan)
        .await
        .expect_err("the name is taken");
    let RuntimeError::Conflict(message) = &err else {
        panic!("expected Conflict, got {err:?}");
    };
    assert!(message.contains(&plan.name), "{message}");
    assert!(
        !format!("{err} {err:?}").contains(SECRET),
        "no environment value in errors"
    );

    // The engine looks for a container's network only when it starts it: a missing one is
    // NotFound then, and names the network.
    let missing = scope.name("no-such-net");
    let mut lost = scope.plan("lost", &image, &missing);
    lost.env = plan.env.clone();
    let lost_id = rt
        .create_container(&lost)
        .await
        .expect("the create does not check");
    let err = rt
        .start_container(&lost_id)
        .await
        .expect_err("the network is missing");
    assert!(
        !format!("{err} {err:?}").contains(SECRET),
        "no environment value in errors"
    );
    assert!(
        matches!(&err, RuntimeError::NotFound(m) if m.contains(&missing)),
        "{err:?}"
    );
}

#[tokio::test]
async fn start_stop_and_remove_are_idempotent_and_inspect_and_list_follow() {
    let rt = common::runtime().await;
    let scope = Scope::new("lifecycle");
    let image = common::image(common::BUSYBOX);
    rt.ensure_image(&image).await.expect("the image is ready");
    let network = scope.name("net");
    rt.ensure_network(&network, &common::labels())
        .await
        .expect("the network is made");
    let plan = scope.plan("c", &image, &network);
    let id = rt
        .create_container(&plan)
        .await
        .expect("the container is created");

    let created = rt
        .inspect_container(&plan.name)
        .await
        .unwrap()
        .expect("it exists");
    assert_eq!(created.id, id);
    assert_eq!(created.name, plan.name);
    assert!(!created.running);
    assert_eq!(created.exit_code, None, "it never ran");
    assert_eq!(created.started_at, None);
    assert_eq!(created.finished_at, None);
    assert!(created.addresses.is_empty());
    assert_eq!(
        created.labels,
        plan.labels
            .clone()
            .into_iter()
            .chain(
                // The image's own labels come along.
                [("berth.test-fixture".to_owned(), "1".to_owned())]
            )
            .collect()
    );

    rt.start_container(&id).await.expect("it starts");
    rt.start_container(&id)
        .await
        .expect("starting a running container is fine");
    let running = rt
        .inspect_container(&plan.name)
        .await
        .unwrap()
        .expect("it exists");
    assert!(running.running);
    assert_eq!(running.exit_code, None);
    assert!(running.started_at.is_some());
    assert!(running.addresses.contains_key(&network), "{running:?}");

    let listed = rt
        .list_containers(common::prefix())
        .await
        .expect("it is listed");
    let entry = listed
        .iter()
        .find(|c| c.name == plan.name)
        .expect("the list holds the container");
    assert_eq!(entry.id, id);
    assert!(entry.running);
    assert_eq!(entry.labels, running.labels);
    assert_eq!(entry.addresses, running.addresses);
    assert_eq!(entry.image_id, running.image_id);
    assert_eq!(entry.exit_code, None, "exit codes come from inspect");

    let started = Instant::now();
    rt.stop_container(&id, Duration::from_secs(5))
        .await
        .expect("it stops");
    eprintln!(
        "stopping a busybox httpd under init took {:?}",
        started.elapsed()
    );
    rt.stop_container(&id, Duration::from_secs(5))
        .await
        .expect("stopping a stopped container is fine");
    let stopped = rt
        .inspect_container(&plan.name)
        .await
        .unwrap()
        .expect("it exists");
    assert!(!stopped.running);
    assert!(stopped.exit_code.is_some(), "{stopped:?}");
    assert!(stopped.finished_at.is_some());
    let listed = rt
        .list_containers(common::prefix())
        .await
        .expect("it is listed");
    assert!(listed.iter().any(|c| c.name == plan.name && !c.running));

    rt.remove_container(&id).await.expect("it is removed");
    rt.remove_container(&id)
        .await
        .expect("removing it again is fine");
    assert_eq!(rt.inspect_container(&plan.name).await.unwrap(), None);
    assert!(matches!(
        rt.start_container(&id).await,
        Err(RuntimeError::NotFound(_))
    ));
}
