use std::collections::HashMap;

use berth_core::ownership::LABEL_STORE;
use berth_core::runtime::{LABEL_MANAGED, LABEL_PREFIX, Runtime, RuntimeError};
use bollard::models::NetworkCreateRequest;

use crate::common::{self, Scope};

#[tokio::test]
async fn ensure_network_makes_a_labelled_bridge_once_and_refuses_a_foreign_one() {
    let rt = common::runtime().await;
    let scope = Scope::new("networks");
    let docker = common::docker();
    let labels = common::labels();

    let name = scope.name("net");
    rt.ensure_network(&name, &labels)
        .await
        .expect("the network is made");
    rt.ensure_network(&name, &labels)
        .await
        .expect("the network is adopted again");
    let network = docker
        .inspect_network(&name, None)
        .await
        .expect("it exists");
    assert_eq!(network.driver.as_deref(), Some("bridge"));
    let found = network.labels.unwrap_or_default();
    assert_eq!(found.get(LABEL_MANAGED).map(String::as_str), Some("1"));
    assert_eq!(
        found.get(LABEL_PREFIX).map(String::as_str),
        Some(common::prefix())
    );

    // Many at once: exactly one network of the name, and every caller content.
    let racing = scope.name("race");
    let results =
        futures_util::future::join_all((0..4).map(|_| rt.ensure_network(&racing, &labels))).await;
    for result in results {
        result.expect("each racer accepts the one network");
    }
    let same_name = docker
        .list_networks(Some(bollard::query_parameters::ListNetworksOptions {
            filters: Some(HashMap::from([("name".to_owned(), vec![racing.clone()])])),
        }))
        .await
        .expect("networks are listed")
        .into_iter()
        .filter(|n| n.name.as_deref() == Some(racing.as_str()))
        .count();
    assert_eq!(same_name, 1);

    let foreign = scope.name("foreign");
    docker
        .create_network(NetworkCreateRequest {
            name: foreign.clone(),
            driver: Some("bridge".to_owned()),
            ..Default::default()
        })
        .await
        .expect("a foreign network is made");
    let err = rt
        .ensure_network(&foreign, &labels)
        .await
        .expect_err("it is not berth's");
    let RuntimeError::Foreign(message) = &err else {
        panic!("expected Foreign, got {err:?}");
    };
    assert_eq!(
        message,
        &format!("a network named {foreign} exists that berth did not create; remove or rename it")
    );

    let theirs = scope.name("theirs");
    let mut their_labels = labels.clone();
    their_labels.insert(LABEL_PREFIX.to_owned(), "another-berth".to_owned());
    rt.ensure_network(&theirs, &their_labels)
        .await
        .expect("their network is made");
    let err = rt
        .ensure_network(&theirs, &labels)
        .await
        .expect_err("it is another berth's");
    assert!(matches!(err, RuntimeError::Foreign(_)), "{err:?}");

    // Another store's under the same prefix is not adopted; one made before berth labelled its
    // store is, when asked with this berth's prefix.
    let mut mine = labels.clone();
    mine.insert(LABEL_STORE.to_owned(), "bst:mine".to_owned());
    let mut other_store = mine.clone();
    other_store.insert(LABEL_STORE.to_owned(), "bst:theirs".to_owned());
    let shared = scope.name("other-store");
    rt.ensure_network(&shared, &other_store)
        .await
        .expect("the other store's network is made");
    let err = rt
        .ensure_network(&shared, &mine)
        .await
        .expect_err("it is another store's");
    assert!(matches!(err, RuntimeError::Foreign(_)), "{err:?}");
    rt.ensure_network(&name, &mine)
        .await
        .expect("an unlabelled network of this berth's is adopted");
}

/// Two networks of one name, as a create cut off by a crash and the restart's create can leave
/// on Docker 20.10: the name is ambiguous until berth makes them one again.
#[tokio::test]
async fn two_networks_of_one_name_are_made_one_when_both_are_berths() {
    let rt = common::runtime().await;
    let scope = Scope::new("netdup");
    let docker = common::docker();
    let labels = common::labels();
    let same_name = |name: String| {
        let docker = docker.clone();
        async move {
            docker
                .list_networks(Some(bollard::query_parameters::ListNetworksOptions {
                    filters: Some(HashMap::from([("name".to_owned(), vec![name.clone()])])),
                }))
                .await
                .expect("networks are listed")
                .into_iter()
                .filter(|n| n.name.as_deref() == Some(name.as_str()))
                .count()
        }
    };
    // The typed create sends no `CheckDuplicate`, so the engine makes a second network.
    let create = |name: String, labels: HashMap<String, String>| {
        let docker = docker.clone();
        async move {
            docker
                .create_network(NetworkCreateRequest {
                    name,
                    driver: Some("bridge".to_owned()),
                    labels: Some(labels),
                    ..Default::default()
                })
                .await
                .expect("a network is made");
        }
    };
    let ours: HashMap<String, String> = labels.clone().into_iter().collect();

    let name = scope.name("twice");
    create(name.clone(), ours.clone()).await;
    create(name.clone(), ours.clone()).await;
    if same_name(name.clone()).await < 2 {
        // This engine refuses a duplicate name itself (API 1.44 and later): nothing to mend.
        return;
    }
    rt.ensure_network(&name, &labels)
        .await
        .expect("berth's two networks are made one");
    assert_eq!(same_name(name.clone()).await, 1);
    rt.ensure_network(&name, &labels)
        .await
        .expect("and adopted as before");

    // One of them not berth's: nothing is removed, and berth says what to do.
    let mixed = scope.name("mixed");
    create(mixed.clone(), ours.clone()).await;
    create(mixed.clone(), HashMap::new()).await;
    let err = rt
        .ensure_network(&mixed, &labels)
        .await
        .expect_err("a foreign network of the name is left alone");
    assert!(
        matches!(&err, RuntimeError::Foreign(m) if m.contains("remove all but one")),
        "{err:?}"
    );
    assert_eq!(same_name(mixed).await, 2);
}
