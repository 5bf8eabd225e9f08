use berth_core::runtime::{Runtime, RuntimeError};
use berth_docker::{DockerConfig, DockerRuntime};

use crate::common;

/// A loopback port nothing listens on.
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port is free");
    listener.local_addr().expect("the port is known").port()
}

#[tokio::test]
async fn an_unreachable_engine_is_unavailable_with_what_to_check() {
    for host in [
        "unix:///nonexistent/berth/docker.sock".to_owned(),
        format!("tcp://127.0.0.1:{}", closed_port()),
    ] {
        let err = DockerRuntime::connect_to(&host, DockerConfig::default())
            .await
            .expect_err("nothing answers there");
        let RuntimeError::Unavailable(message) = &err else {
            panic!("{host}: expected Unavailable, got {err:?}");
        };
        assert!(message.contains(&host), "{message}");
        assert!(
            message.contains("check that Docker is running"),
            "{message}"
        );
        assert!(message.contains("DOCKER_HOST"), "{message}");
        assert!(message.contains("/var/run/docker.sock"), "{message}");
    }
}

#[tokio::test]
async fn the_engine_on_this_machine_answers() {
    let rt = common::runtime().await;
    assert_eq!(rt.kind(), "docker");
    assert_eq!(rt.config(), &DockerConfig::default());
    assert_eq!(
        DockerConfig::default().pull_timeout,
        std::time::Duration::from_secs(600)
    );
}
