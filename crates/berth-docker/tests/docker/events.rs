use std::time::Duration;

use berth_core::runtime::{ContainerChange, LABEL_PREFIX, Runtime, RuntimeEvent};

use crate::common::{self, Scope};

#[tokio::test]
async fn watch_sends_resync_then_the_lifecycle_events_of_a_container() {
    let rt = common::runtime().await;
    let scope = Scope::new("events");
    let image = common::image(common::BUSYBOX);
    rt.ensure_image(&image).await.expect("the image is ready");
    let network = scope.name("net");
    rt.ensure_network(&network, &common::labels())
        .await
        .expect("the network is made");

    let mut events = rt.watch(common::prefix());
    let mut first = async || {
        tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("the watcher speaks within 10 s")
    };
    assert_eq!(
        first().await,
        Some(RuntimeEvent::Reachable {
            engine: rt.host().to_owned()
        })
    );
    assert_eq!(first().await, Some(RuntimeEvent::Resync));

    let plan = scope.plan("c", &image, &network);
    let id = rt
        .create_container(&plan)
        .await
        .expect("the container is created");
    rt.start_container(&id).await.expect("it starts");

    // Other tests' containers share the prefix: follow this one by name.
    let mut next = async |wanted: &[ContainerChange]| loop {
        let event = tokio::time::timeout(Duration::from_secs(15), events.recv())
            .await
            .unwrap_or_else(|_| panic!("no {wanted:?} event within 15 s"))
            .expect("the watcher runs");
        if let RuntimeEvent::Container {
            name,
            labels,
            change,
        } = event
            && name == plan.name
        {
            assert_eq!(
                labels.get(LABEL_PREFIX).map(String::as_str),
                Some(common::prefix())
            );
            assert_eq!(labels.get("name"), None, "engine attributes are not labels");
            if wanted.contains(&change) {
                return change;
            }
        }
    };
    assert_eq!(
        next(&[ContainerChange::Started]).await,
        ContainerChange::Started
    );
    rt.remove_container(&id).await.expect("it is removed");
    let ended = next(&[ContainerChange::Ended, ContainerChange::Destroyed]).await;
    if ended == ContainerChange::Ended {
        assert_eq!(
            next(&[ContainerChange::Destroyed]).await,
            ContainerChange::Destroyed
        );
    }
}
