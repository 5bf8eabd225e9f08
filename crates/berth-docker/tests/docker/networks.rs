use std::collections::HashMap;

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
}
