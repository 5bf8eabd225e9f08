use super::*;
use crate::migrations::MIGRATIONS;
use berth_domain::ids::{DomainId, InstanceId};
use berth_domain::model::{Desired, Domain, DomainState, Instance, InstanceState, Workspace};
use berth_domain::spec::Spec;
use berth_domain::testing::db_instance;
use berth_domain::time::Timestamp;
use rusqlite::Connection;

fn domain(owner: &str) -> Domain {
    Domain {
        resource_domain_id: DomainId::new(),
        name: "project".into(),
        state: DomainState::Active,
        created_at: Timestamp::now(),
        owner: owner.into(),
    }
}

#[tokio::test]
async fn domains_round_trip_and_are_listed_per_owner() {
    let store = Store::in_memory().unwrap();
    let mine = domain("a");
    let stored = mine.clone();
    store
        .write(move |tx| tx.insert_domain(&stored))
        .await
        .unwrap();
    store
        .write(|tx| tx.insert_domain(&domain("b")))
        .await
        .unwrap();
    assert_eq!(store.domains_of("a"), vec![mine.clone()]);
    let id = mine.resource_domain_id.clone();
    store
        .write(move |tx| tx.set_domain_state(&id, DomainState::Fenced))
        .await
        .unwrap();
    // The in-memory view answers what was committed, as SQLite does.
    let read = store.domain(&mine.resource_domain_id).unwrap();
    assert_eq!(read.state, DomainState::Fenced);
    let id = mine.resource_domain_id.clone();
    let from_sqlite = store.read(move |tx| tx.domain(&id)).await.unwrap();
    assert_eq!(from_sqlite, Some(read));
}

#[tokio::test]
async fn a_failed_write_changes_nothing() {
    let store = Store::in_memory().unwrap();
    let d = domain("a");
    let result: Result<(), StoreError> = store
        .write(move |tx| {
            tx.insert_domain(&d)?;
            Err(StoreError::Corrupt("refused".into()))
        })
        .await;
    assert!(result.is_err());
    assert!(store.domains_of("a").is_empty());
    assert!(
        store
            .read(|tx| tx.domains_of("a"))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_change_is_published_and_one_of_observed_at_alone_is_not() {
    let store = Store::in_memory().unwrap();
    let d = domain("a");
    let domain_id = d.resource_domain_id.clone();
    store.write(move |tx| tx.insert_domain(&d)).await.unwrap();
    let instance = db_instance(&domain_id);
    let stored = instance.clone();
    store
        .write(move |tx| tx.insert_instance(&stored))
        .await
        .unwrap();
    let (mut feed, _, _) = store.watch().subscribe(&domain_id, None);

    let mut obs = Observation::of(&instance);
    obs.observed_at = Timestamp::from_millis(2);
    let only_time = obs.clone();
    store
        .write(move |tx| tx.record_observation(&only_time))
        .await
        .unwrap();
    assert!(feed.try_recv().is_err(), "observedAt alone is no change");

    obs.state = InstanceState::Starting {
        since: Timestamp::from_millis(3),
    };
    store
        .write(move |tx| tx.record_observation(&obs))
        .await
        .unwrap();
    let event = feed.try_recv().expect("a change of state is published");
    let change = event.change.instance().unwrap();
    assert_eq!(change.instance.state.kind(), "starting");
    assert_eq!(change.observed_generation, 1);

    // A failure is kept, with its time, after the instance recovers; a later one replaces it.
    async fn last(store: &Store, id: &InstanceId) -> Option<LastFailure> {
        let id = id.clone();
        store.read(move |tx| tx.last_failure(&id)).await.unwrap()
    }
    let id = instance.id.clone();
    assert_eq!(last(&store, &id).await, None, "never failed");
    for (at, state) in [
        (
            4,
            InstanceState::Failed {
                at: Timestamp::from_millis(4),
                message: "the first".into(),
            },
        ),
        (
            5,
            InstanceState::Running {
                since: Timestamp::from_millis(5),
            },
        ),
    ] {
        let mut obs = Observation::of(&instance);
        obs.observed_at = Timestamp::from_millis(at);
        obs.state = state;
        store
            .write(move |tx| tx.record_observation(&obs))
            .await
            .unwrap();
    }
    assert_eq!(
        last(&store, &id).await,
        Some(LastFailure {
            message: "the first".into(),
            at: Timestamp::from_millis(4),
        })
    );
    let mut obs = Observation::of(&instance);
    obs.state = InstanceState::Failed {
        at: Timestamp::from_millis(6),
        message: "the second".into(),
    };
    store
        .write(move |tx| tx.record_observation(&obs))
        .await
        .unwrap();
    assert_eq!(last(&store, &id).await.unwrap().message, "the second");
}

#[tokio::test]
async fn a_write_that_panics_leaves_the_store_working() {
    let store = Store::in_memory().unwrap();
    let result: Result<(), StoreError> = store
        .write(|tx| {
            tx.insert_domain(&domain("a"))?;
            panic!("a bug in a write");
        })
        .await;
    assert!(matches!(result, Err(StoreError::Closed)));
    assert!(store.domains_of("a").is_empty());
    store
        .write(|tx| tx.insert_domain(&domain("a")))
        .await
        .unwrap();
    assert_eq!(store.domains_of("a").len(), 1);
}

#[tokio::test]
async fn workspaces_are_per_key_and_migration_5_keeps_their_owners() {
    let conn = Connection::open_in_memory().unwrap();
    for sql in &MIGRATIONS[..4] {
        conn.execute_batch(sql).unwrap();
    }
    conn.pragma_update(None, "user_version", 4).unwrap();
    conn.execute_batch(
        "INSERT INTO workspaces (id, owner, containers, selector, created_at)
             VALUES ('ide-1', 'a', '[\"dev\"]', NULL, 1);
         INSERT INTO leases (id, workspace_id, ttl_ms, expires_at)
             VALUES ('lse:1', 'ide-1', 1000, 2);",
    )
    .unwrap();
    let store = Store::init(conn, None).unwrap();
    let kept = store
        .read(|tx| tx.workspace("a", "ide-1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.containers, vec!["dev".to_owned()]);
    let leases = |owner: &'static str| store.read(move |tx| tx.leases(owner, "ide-1"));
    assert_eq!(leases("a").await.unwrap().len(), 1);
    assert!(
        store
            .read(|tx| tx.workspace("b", "ide-1"))
            .await
            .unwrap()
            .is_none()
    );
    let theirs = Workspace {
        owner: "b".into(),
        containers: vec![],
        ..kept.clone()
    };
    store
        .write(move |tx| tx.put_workspace(&theirs))
        .await
        .unwrap();
    assert_eq!(
        store.read(|tx| tx.workspace("a", "ide-1")).await.unwrap(),
        Some(kept)
    );
    assert!(leases("b").await.unwrap().is_empty());
    store
        .write(|tx| tx.delete_workspace("b", "ide-1"))
        .await
        .unwrap();
    assert_eq!(leases("a").await.unwrap().len(), 1);
}

#[tokio::test]
async fn the_schema_and_the_view_survive_reopening_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("berth.db");
    let d = domain("a");
    let stored = d.clone();
    Store::open(&path)
        .unwrap()
        .write(move |tx| tx.insert_domain(&stored))
        .await
        .unwrap();
    let again = Store::open(&path).unwrap();
    assert_eq!(again.domains_of("a"), vec![d.clone()]);
    assert_eq!(again.read(|tx| tx.domains_of("a")).await.unwrap(), vec![d]);
}

#[tokio::test]
async fn an_archived_instances_host_ports_are_kept_for_its_keys_next_generation() {
    let store = Store::in_memory().unwrap();
    let d = domain("a");
    let domain_id = d.resource_domain_id.clone();
    store.write(move |tx| tx.insert_domain(&d)).await.unwrap();
    let instance = |key: &str, alias: &str, desired: Desired| {
        let base = db_instance(&domain_id);
        Instance {
            key: key.into(),
            spec: Spec {
                alias: alias.into(),
                worktree_key: Some("wt".into()),
                ..base.spec.clone()
            },
            desired,
            ..base
        }
    };
    let (first, next, other) = (
        instance("db@wt", "db", Desired::Archived),
        instance("db@wt.2", "db", Desired::Running),
        instance("cache@wt", "cache", Desired::Running),
    );
    let endpoint = StoredEndpoint {
        port: 80,
        host_port: 40001,
        wanted_host_port: None,
    };
    let (f, n, o, dom) = (
        first.clone(),
        next.clone(),
        other.clone(),
        domain_id.clone(),
    );
    store
        .write(move |tx| {
            tx.insert_instance(&f)?;
            tx.insert_instance(&n)?;
            tx.insert_instance(&o)?;
            assert!(tx.insert_endpoint(&f, &endpoint)?);
            assert_eq!(tx.released_host_port(&dom, "db@wt.2", 80)?, None);
            tx.release_endpoints(&f.id)?;
            assert!(tx.endpoints(&f.id)?.is_empty());
            // The next generation of the key gets the port; another name passes over it.
            assert_eq!(tx.released_host_port(&dom, "db@wt.2", 80)?, Some(40001));
            assert_eq!(tx.released_host_port(&dom, "db@wt.2", 81)?, None);
            assert_eq!(tx.released_host_port(&dom, "cache@wt", 80)?, None);
            assert!(!tx.host_port_spoken_for(&dom, "db@wt.2", 40001)?);
            assert!(tx.host_port_spoken_for(&dom, "cache@wt", 40001)?);
            // Once the next generation has it, it is that endpoint's and no longer remembered.
            assert!(tx.insert_endpoint(&n, &endpoint)?);
            assert_eq!(tx.released_host_port(&dom, "db@wt.3", 80)?, None);
            assert!(tx.host_port_spoken_for(&dom, "cache@wt", 40001)?);
            // An archived domain gets no new instance: nothing of its ports is kept.
            tx.release_endpoints(&n.id)?;
            assert_eq!(tx.released_host_port(&dom, "db@wt.3", 80)?, Some(40001));
            tx.set_domain_state(&dom, DomainState::Archived)?;
            tx.release_endpoints(&o.id)?;
            assert_eq!(tx.released_host_port(&dom, "db@wt.3", 80)?, None);
            assert!(!tx.host_port_spoken_for(&dom, "cache@wt", 40001)?);
            Ok::<_, StoreError>(())
        })
        .await
        .unwrap();
}

/// A reconcile that read an instance before a copy switched its volumes writes its observation
/// after the switch: held (the copy's reconcile of its instance), the volumes the store has
/// stay; an ordinary observation writes what it read, which is why the hold uses the other.
#[tokio::test]
async fn a_held_observation_keeps_the_volumes_a_copy_switched_to() {
    let store = Store::in_memory().unwrap();
    let d = domain("a");
    let domain_id = d.resource_domain_id.clone();
    store.write(move |tx| tx.insert_domain(&d)).await.unwrap();
    let mut instance = db_instance(&domain_id);
    let volume = |docker_name: &str| berth_domain::model::InstanceVolume {
        name: "data".into(),
        docker_name: docker_name.into(),
        mount_path: "/data".into(),
    };
    instance.volumes = vec![volume("old")];
    instance.kept = instance.volumes.clone();
    let stored = instance.clone();
    store
        .write(move |tx| tx.insert_instance(&stored))
        .await
        .unwrap();

    // The reconcile reads the instance, then the copy switches its volumes.
    let mut read_before = Observation::of(&store.instance_by_id(&instance.id).unwrap());
    read_before.state = InstanceState::Starting {
        since: Timestamp::from_millis(5),
    };
    let (id, new) = (instance.id.clone(), vec![volume("new")]);
    store
        .write(move |tx| tx.set_volume_tag(&id, "c1", &new, &new))
        .await
        .unwrap();

    store.record_held_observation(&read_before).await.unwrap();
    let now = store.instance_by_id(&instance.id).unwrap();
    assert_eq!(now.volumes, vec![volume("new")], "the switch stays");
    assert_eq!(now.state.kind(), "starting", "the observation is written");

    store.record_observation(&read_before).await.unwrap();
    let now = store.instance_by_id(&instance.id).unwrap();
    assert_eq!(
        now.volumes,
        vec![volume("old")],
        "an ordinary observation writes the volumes it read"
    );
}
