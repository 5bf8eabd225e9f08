//! Decoding with canned bytes: the events stream and the wait answer (routes a daemon may not
//! have yet), and the instance view in each of its states.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;

use super::*;
use bytes::Bytes;
use futures_util::stream;

fn instance_json(kind_state: serde_json::Value) -> serde_json::Value {
    json!({
        "resourceInstanceId": "rin:0a1b2c3d-0000-4000-8000-000000000000",
        "key": "db",
        "alias": "db",
        "worktreeKey": null,
        "specDigest": "sha256:ab",
        "desired": "running",
        "stopReason": null,
        "state": kind_state,
        "observedAt": "2026-11-29T18:10:03.123Z",
        "startedAt": "2026-11-29T18:10:02.901Z",
        "lastReachedAt": null,
        "volumes": [{"name": "data", "dockerName": "berth-x-db.vol.data"}]
    })
}

/// The domain the fake daemons' paths name.
fn domain() -> DomainId {
    DomainId::parse("rdm:0a1b2c3d-0000-4000-8000-000000000001").unwrap()
}

#[test]
fn every_state_decodes_with_its_kind_and_time() {
    let at = "2026-11-29T18:10:03.123Z";
    let cases = [
        (json!({"kind": "not-started"}), "not-started", None),
        (
            json!({"kind": "starting", "since": at}),
            "starting",
            Some(at),
        ),
        (json!({"kind": "running", "since": at}), "running", Some(at)),
        (
            json!({"kind": "stopped", "at": at, "reason": {"kind": "person", "by": "ada"}}),
            "stopped",
            Some(at),
        ),
        (
            json!({"kind": "stopped", "at": at, "reason": {"kind": "idle"}}),
            "stopped",
            Some(at),
        ),
        (
            json!({"kind": "exited", "at": at, "exitCode": null}),
            "exited",
            Some(at),
        ),
        (
            json!({"kind": "failed", "at": at, "message": "no image"}),
            "failed",
            Some(at),
        ),
        (json!({"kind": "archived", "at": at}), "archived", Some(at)),
        (json!({"kind": "hibernating", "at": at}), "unknown", None),
    ];
    for (state, kind, time) in cases {
        let i: InstanceView = serde_json::from_value(instance_json(state.clone())).unwrap();
        assert_eq!(i.state.kind(), kind, "{state}");
        assert_eq!(
            i.state.time(),
            time.map(|t| Timestamp::parse(t).unwrap()),
            "{state}"
        );
    }
    let i: InstanceView = serde_json::from_value(instance_json(
        json!({"kind": "exited", "at": at, "exitCode": 3}),
    ))
    .unwrap();
    assert_eq!(
        i.state,
        InstanceState::Exited {
            at: Timestamp::parse(at).unwrap(),
            exit_code: Some(3)
        }
    );
    // What the client sends back out (`berth ps --json`) is the daemon's shape.
    let state = json!({"kind": "stopped", "at": at, "reason": {"kind": "person", "by": "ada"}});
    let i: InstanceView = serde_json::from_value(instance_json(state.clone())).unwrap();
    assert_eq!(serde_json::to_value(&i).unwrap(), instance_json(state));
}

#[test]
fn a_wait_answer_decodes() {
    let body = json!({
        "instance": instance_json(json!({"kind": "running", "since": "2026-11-29T18:10:03.123Z"})),
        "generation": 4,
        "observedGeneration": 4,
        "timedOut": false
    });
    let w: WaitAnswer = serde_json::from_slice(body.to_string().as_bytes()).unwrap();
    assert_eq!(w.generation, 4);
    assert_eq!(w.observed_generation, 4);
    assert!(!w.timed_out);
    assert_eq!(w.instance.state.kind(), "running");
    // A missing field is an error, not a default.
    let mut partial = body.clone();
    partial.as_object_mut().unwrap().remove("timedOut");
    assert!(serde_json::from_value::<WaitAnswer>(partial).is_err());
}

async fn events_of(chunks: Vec<&'static [u8]>) -> Vec<Result<DomainEvent, String>> {
    let bytes = stream::iter(chunks.into_iter().map(|c| Ok(Bytes::from_static(c))));
    decode_events(bytes, "GET /events".into())
        .map(|r| r.map_err(|e| e.to_string()))
        .collect()
        .await
}

#[tokio::test]
async fn an_event_stream_decodes_instances_resyncs_and_skips_heartbeats() {
    let instance = instance_json(json!({"kind": "starting", "since": "2026-11-29T18:10:03.123Z"}));
    let data = json!({"instance": instance, "generation": 2, "observedGeneration": 1}).to_string();
    let text = format!(
        ": hello\r\n\r\nevent: resync\r\nid: run7-10\r\ndata: {{}}\r\n\r\n: heartbeat\r\nevent: instance\r\nid: run7-11\r\ndata: {data}\r\n\r\nevent: something-new\r\ndata: 1\r\n\r\n"
    );
    let text: &'static str = Box::leak(text.into_boxed_str());
    // Cut into uneven chunks, CRLFs split among them.
    let bytes = text.as_bytes();
    let chunks: Vec<&'static [u8]> = bytes.chunks(7).collect();
    let events = events_of(chunks).await;
    let expected_instance: InstanceView = serde_json::from_value(instance).unwrap();
    assert_eq!(
        events,
        vec![
            Ok(DomainEvent::Resync {
                id: "run7-10".into()
            }),
            Ok(DomainEvent::Instance {
                id: "run7-11".into(),
                instance: Box::new(expected_instance),
                generation: 2,
                observed_generation: 1
            }),
        ]
    );
}

#[tokio::test]
async fn an_instance_event_split_over_data_lines_decodes_and_a_bad_one_is_an_error() {
    let events = events_of(vec![
        b"event: instance\nid: r-1\ndata: {\"instance\":\n",
        b"data: null, \"generation\": 1, \"observedGeneration\": 1}\n\n",
    ])
    .await;
    assert_eq!(events.len(), 1);
    let err = events[0].as_ref().unwrap_err();
    assert!(err.contains("an instance event"), "{err}");
    assert!(err.contains("does not decode"), "{err}");
}

#[tokio::test]
async fn a_failed_request_is_the_stream_s_one_item() {
    // Nothing listens on port 9 of loopback.
    let client = Client::new("http://127.0.0.1:9", "k").unwrap();
    let items: Vec<_> = client.events(&DomainId::new(), Some("r-1")).collect().await;
    assert_eq!(items.len(), 1);
    assert!(matches!(items[0], Err(ClientError::Unreachable { .. })));
}

#[test]
fn path_segments_are_encoded() {
    assert_eq!(seg("rdm:0a-1"), "rdm:0a-1");
    assert_eq!(seg("db@main.2"), "db@main.2");
    assert_eq!(seg("a/b?c"), "a%2Fb%3Fc");
    assert_eq!(seg(".."), "...");
    assert_eq!(
        instance_path(&domain(), "../x", "/up"),
        "/v1/resource-domains/rdm:0a1b2c3d-0000-4000-8000-000000000001/instances/..%2Fx/up"
    );
}

#[test]
fn the_key_never_shows_in_debug() {
    let client = Client::new("http://127.0.0.1:1", "secret-key-123").unwrap();
    let shown = format!("{client:?}");
    assert!(!shown.contains("secret-key-123"), "{shown}");
}

/// A one-route-table HTTP server on loopback: answers each request with `answer(path)` and
/// closes the connection. Returns its base URL and the paths it was asked, in order.
async fn fake_daemon(
    answer: fn(&str) -> (u16, String),
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = asked.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&head);
            let path = text.split(' ').nth(1).unwrap_or("").to_owned();
            log.lock().unwrap().push(path.clone());
            let (status, body) = answer(&path);
            let reply = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes()).await;
        }
    });
    (base, asked)
}

fn running_instance() -> String {
    instance_json(json!({"kind": "running", "since": "2026-11-29T18:10:03.123Z"})).to_string()
}

#[tokio::test]
async fn wait_for_state_falls_back_to_polling_on_a_daemon_without_the_wait_route() {
    let (base, asked) = fake_daemon(|path| {
        if path.contains("/wait?") {
            (
                404,
                r#"{"_tag":"RouteNotFoundError","message":"no route answers that path"}"#.into(),
            )
        } else {
            (200, running_instance())
        }
    })
    .await;
    let client = Client::new(&base, "k").unwrap();
    let settled = client
        .wait_for_state(
            &domain(),
            "db",
            &["running"],
            Duration::from_secs(5),
            |_| true,
        )
        .await
        .unwrap();
    assert!(!settled.timed_out);
    assert_eq!(settled.instance.state.kind(), "running");
    let asked = asked.lock().unwrap().clone();
    assert_eq!(
        asked,
        vec![
            "/v1/resource-domains/rdm:0a1b2c3d-0000-4000-8000-000000000001/instances/db/wait?for=running&timeoutMs=2000".to_owned(),
            "/v1/resource-domains/rdm:0a1b2c3d-0000-4000-8000-000000000001/instances/db".to_owned(),
        ]
    );
}

#[tokio::test]
async fn wait_for_state_uses_the_wait_route_when_there_is_one() {
    let (base, asked) = fake_daemon(|path| {
        if path.contains("/wait?") {
            let instance: serde_json::Value = serde_json::from_str(&running_instance()).unwrap();
            (
                200,
                json!({"instance": instance, "generation": 3, "observedGeneration": 3, "timedOut": false})
                    .to_string(),
            )
        } else {
            (500, "{}".into())
        }
    })
    .await;
    let client = Client::new(&base, "k").unwrap();
    // `seen` refusing the state matters only when polling: the route's answer stands.
    let settled = client
        .wait_for_state(
            &domain(),
            "db",
            &["running", "failed"],
            Duration::from_secs(5),
            |_| false,
        )
        .await
        .unwrap();
    assert!(!settled.timed_out);
    assert_eq!(asked.lock().unwrap().len(), 1);
    assert!(asked.lock().unwrap()[0].ends_with("/wait?for=running,failed&timeoutMs=2000"));
}

#[tokio::test]
async fn an_instance_that_is_not_there_is_an_error_not_a_fallback() {
    let (base, _) = fake_daemon(|_| {
        (
            404,
            r#"{"_tag":"ResourceInstanceNotFoundError","message":"no instance db"}"#.into(),
        )
    })
    .await;
    let client = Client::new(&base, "k").unwrap();
    let err = client
        .wait_for_state(
            &domain(),
            "db",
            &["running"],
            Duration::from_secs(5),
            |_| true,
        )
        .await
        .unwrap_err();
    assert!(err.is("ResourceInstanceNotFoundError"), "{err:?}");
    assert_eq!(err.status(), Some(404));
}

#[test]
fn a_rollout_its_evidence_and_an_image_release_decode_and_encode_back() {
    let digest = format!("sha256:{}", "a".repeat(64));
    let rollout = json!({
        "plan": {
            "policy": "immutable-digest", "rolloutId": "rol:1", "rolloutGeneration": 3,
            "releaseId": "irl:1", "registryHost": "docker.io", "repository": "library/postgres",
            "requestedDigest": digest,
            "digestPinnedImageReference": format!("docker.io/library/postgres@{digest}"),
            "manifestMediaType": "application/vnd.oci.image.index.v1+json",
            "createdAt": 1_700_000_000_000_i64, "mode": "rollback", "rollbackOfRolloutId": "rol:0",
            "targetScope": {"targetClusterIds": ["brp:1"], "targetNodeNames": ["host"],
                "replicasPerNode": 1, "requiredReplicaCount": 1}
        },
        "status": {
            "rolloutId": "rol:1", "rolloutGeneration": 3, "expectedDigest": digest,
            "status": "rolling-back", "requiredReplicaCount": 1, "observedReplicaCount": 0,
            "healthyReplicaCount": 0, "verifiedReplicaCount": 0, "failedReplicaCount": 0,
            "updatedAt": 1_700_000_000_001_i64,
            "reporters": [{"reporterId": "brp:1", "reporterSessionId": "brs:1",
                "clusterId": "brp:1", "reporterNodeNames": ["host"], "rolloutId": "rol:1",
                "rolloutGeneration": 3, "reportSequence": 1, "reportedAt": 1_700_000_000_001_i64,
                "requiredReplicaCount": 1, "observedReplicaCount": 0, "healthyReplicaCount": 0,
                "verifiedReplicaCount": 0, "failedReplicaCount": 0}]
        }
    });
    let typed: RolloutView = serde_json::from_value(rollout.clone()).unwrap();
    assert_eq!(typed.status.status, RolloutStatus::RollingBack);
    assert_eq!(typed.status.reporters[0].report_sequence, 1);
    assert_eq!(serde_json::to_value(&typed).unwrap(), rollout);

    let evidence = json!({
        "verificationStatus": "mismatched", "mismatchReason": "registry-digest-inconsistent",
        "rolloutId": "rol:1", "rolloutGeneration": 3, "expectedDigest": digest,
        "serviceImageReference": format!("postgres@{digest}"), "observedAt": 1_700_000_000_002_i64
    });
    let typed: RuntimeEvidence = serde_json::from_value(evidence.clone()).unwrap();
    assert_eq!(
        typed.mismatch_reason,
        Some(MismatchReason::RegistryDigestInconsistent)
    );
    assert_eq!(serde_json::to_value(&typed).unwrap(), evidence);

    let release = json!({"id": "irl:1", "data": {
        "serviceId": "rin:1", "imageId": "docker.io/library/postgres", "registryHost": "docker.io",
        "repository": "library/postgres", "registryRootDigest": digest,
        "digestPinnedImageReference": format!("docker.io/library/postgres@{digest}"),
        "manifestMediaType": "application/vnd.oci.image.index.v1+json", "observedTags": ["16"],
        "firstObservedAt": 1, "lastObservedAt": 2, "observationCount": 2, "acceptedAt": 2
    }});
    let typed: ImageReleaseView = serde_json::from_value(release.clone()).unwrap();
    assert_eq!(typed.data.accepted_at, Some(2));
    assert_eq!(serde_json::to_value(&typed).unwrap(), release);

    let report = json!({
        "reporterId": "brp:1/n2", "reportedAt": 1_700_000_000_003_i64,
        "envelope": {"rolloutId": "rol:1", "rolloutGeneration": 3,
            "reporterSessionId": "brs:1/n2", "reportSequence": 2,
            "reporterCapabilities": {"immutableImageDeploymentVersion": 1},
            "reporterNodeIds": ["n2"], "reporterNodeNames": ["n2"]},
        "observedReplicaCount": 1, "healthyReplicaCount": 1, "verifiedReplicaCount": 1,
        "failedReplicaCount": 0, "mismatchReason": "stale-rollout-report"
    });
    let typed: RolloutReportView = serde_json::from_value(report.clone()).unwrap();
    assert_eq!(typed.envelope.reporter_node_ids, ["n2".to_owned()]);
    assert_eq!(serde_json::to_value(&typed).unwrap(), report);
}

#[tokio::test]
async fn start_and_sign_out_ask_their_routes() {
    let (base, asked) = fake_daemon(|path| {
        if path.ends_with("/start") {
            (200, running_instance())
        } else {
            (204, String::new())
        }
    })
    .await;
    let client = Client::new(&base, "k").unwrap();
    let started = client.start(&domain(), "db@main").await.unwrap();
    assert_eq!(started.state.kind(), "running");
    client.sign_out().await.unwrap();
    assert_eq!(
        asked.lock().unwrap().clone(),
        vec![
            "/v1/resource-domains/rdm:0a1b2c3d-0000-4000-8000-000000000001/instances/db@main/start"
                .to_owned(),
            "/v1/ui/sessions/current".to_owned(),
        ]
    );
}
