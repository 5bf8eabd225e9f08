use std::time::{Duration, Instant};

use berth_core::runtime::Runtime;
use berth_core::spec::Ready;

use crate::common::{self, Scope};

#[tokio::test]
async fn a_tcp_probe_is_true_on_a_running_httpd_and_false_after_stop() {
    let rt = common::runtime().await;
    let scope = Scope::new("probe-tcp");
    let (facts, plan) = scope.running(&rt, common::BUSYBOX).await;
    let ready = Ready::Tcp { port: 8080 };
    let budget = Duration::from_secs(5);

    // httpd may need a moment after the start.
    let started = Instant::now();
    let mut up = false;
    while !up && started.elapsed() < Duration::from_secs(10) {
        up = rt
            .probe(&facts, &plan.network, &ready, budget)
            .await
            .expect("the probe runs");
        if !up {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert!(up, "httpd accepts connections on 8080");
    let closed = Ready::Tcp { port: 8081 };
    assert!(
        !rt.probe(&facts, &plan.network, &closed, budget)
            .await
            .unwrap()
    );
    assert!(
        !rt.probe(&facts, "some-other-network", &ready, budget)
            .await
            .unwrap(),
        "no address on that network"
    );

    rt.stop_container(&facts.id, Duration::from_secs(5))
        .await
        .expect("it stops");
    // The old address (from facts read before the stop) no longer answers; the probe gives up
    // after its short connect timeout rather than the seconds such a connect can hang.
    let started = Instant::now();
    assert!(
        !rt.probe(&facts, &plan.network, &ready, budget)
            .await
            .unwrap()
    );
    let took = started.elapsed();
    assert!(took < Duration::from_millis(1500), "took {took:?}");
    let stopped = rt
        .inspect_container(&plan.name)
        .await
        .unwrap()
        .expect("it exists");
    assert!(
        !rt.probe(&stopped, &plan.network, &ready, budget)
            .await
            .unwrap()
    );
}

#[tokio::test]
async fn an_exec_probe_is_true_when_its_command_exits_0() {
    let rt = common::runtime().await;
    let scope = Scope::new("probe-exec");
    let (facts, plan) = scope.running(&rt, common::BUSYBOX).await;
    let budget = Duration::from_secs(5);
    let argv = |script: &str| vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()];

    let ok = Ready::Exec {
        argv: argv("test -f /www/index.html && [ \"$(id -u)\" = 1000 ]"),
        user: Some("app".to_owned()),
    };
    let started = Instant::now();
    assert!(rt.probe(&facts, &plan.network, &ok, budget).await.unwrap());
    eprintln!("an exec probe took {:?}", started.elapsed());
    let failing = Ready::Exec {
        argv: argv("exit 1"),
        user: None,
    };
    assert!(
        !rt.probe(&facts, &plan.network, &failing, budget)
            .await
            .unwrap()
    );

    let slow = Ready::Exec {
        argv: argv("sleep 30"),
        user: None,
    };
    let started = Instant::now();
    assert!(
        !rt.probe(&facts, &plan.network, &slow, Duration::from_millis(500))
            .await
            .unwrap()
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let ps = common::processes(&rt, &facts.id).await;
    assert!(
        !ps.contains("sleep"),
        "the timed-out probe was killed:\n{ps}"
    );

    rt.stop_container(&facts.id, Duration::from_secs(5))
        .await
        .expect("it stops");
    assert!(
        !rt.probe(&facts, &plan.network, &ok, budget).await.unwrap(),
        "a stopped container is not ready"
    );
}
