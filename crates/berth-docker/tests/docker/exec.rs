use std::time::{Duration, Instant};

use berth_core::runtime::{ExecRequest, Runtime, RuntimeError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{self, Scope};

const MIB: usize = 1 << 20;

#[tokio::test]
async fn exec_streams_stdin_in_and_returns_stdout_stderr_and_exit_code() {
    let rt = common::runtime().await;
    let scope = Scope::new("exec-io");
    let (facts, _) = scope.running(&rt, common::BUSYBOX).await;

    let out = common::exec(
        &rt,
        &facts.id,
        &["sh", "-c", "cat; echo err >&2; exit 3"],
        None,
        Duration::from_secs(10),
        MIB,
        b"hello",
    )
    .await;
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(out.stdout, b"hello");
    assert_eq!(out.stderr, b"err\n");
    assert!(!out.truncated);
    assert!(!out.timed_out);

    // 8 MiB of input streams through without being held whole: `wc` counts every byte.
    let request = ExecRequest {
        argv: vec!["wc".to_owned(), "-c".to_owned()],
        user: None,
        timeout: Duration::from_secs(30),
        max_output: 4096,
        cancel: Default::default(),
    };
    let input = tokio::io::repeat(b'x').take(8 * MIB as u64);
    let out = rt
        .exec(&facts.id, request, Box::pin(input))
        .await
        .expect("the exec runs");
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (8 * MIB).to_string()
    );

    // A command that stops reading early ends all the same, its input cut off.
    let request = ExecRequest {
        argv: vec!["head".to_owned(), "-c".to_owned(), "5".to_owned()],
        user: None,
        timeout: Duration::from_secs(30),
        max_output: 4096,
        cancel: Default::default(),
    };
    let input = tokio::io::repeat(b'y').take(8 * MIB as u64);
    let out = rt
        .exec(&facts.id, request, Box::pin(input))
        .await
        .expect("the exec runs");
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, b"yyyyy");

    // A command that closes its output first still gets the input that comes later.
    let (mut writer, reader) = tokio::io::duplex(64);
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        writer
            .write_all(b"late input")
            .await
            .expect("the input is written");
    });
    let request = ExecRequest {
        argv: vec![
            "sh".to_owned(),
            "-c".to_owned(),
            "exec >&- 2>&-; cat > /tmp/late-input".to_owned(),
        ],
        user: None,
        timeout: Duration::from_secs(10),
        max_output: 4096,
        cancel: Default::default(),
    };
    let out = rt
        .exec(&facts.id, request, Box::pin(reader))
        .await
        .expect("the exec runs");
    late.await.expect("the writer ran");
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let written = common::exec(
        &rt,
        &facts.id,
        &["cat", "/tmp/late-input"],
        None,
        Duration::from_secs(10),
        4096,
        b"",
    )
    .await;
    assert_eq!(written.stdout, b"late input");

    // A command that reads nothing ends all the same.
    let out = common::exec(
        &rt,
        &facts.id,
        &["true"],
        None,
        Duration::from_secs(10),
        16,
        b"ignored",
    )
    .await;
    assert_eq!(out.exit_code, Some(0));

    let mut times = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let out = common::exec(
            &rt,
            &facts.id,
            &["true"],
            None,
            Duration::from_secs(10),
            16,
            b"",
        )
        .await;
        times.push(started.elapsed());
        assert_eq!(out.exit_code, Some(0));
    }
    eprintln!("exec round trips of `true`: {times:?}");
}

#[tokio::test]
async fn exec_keeps_exactly_the_last_max_output_bytes() {
    let rt = common::runtime().await;
    let scope = Scope::new("exec-tail");
    let (facts, _) = scope.running(&rt, common::BUSYBOX).await;

    // 393216 lines of 8 bytes: exactly 3 MiB.
    let started = Instant::now();
    let out = common::exec(
        &rt,
        &facts.id,
        &["seq", "1000000", "1393215"],
        None,
        Duration::from_secs(60),
        MIB,
        b"",
    )
    .await;
    eprintln!("3 MiB of output took {:?}", started.elapsed());
    assert_eq!(out.exit_code, Some(0));
    assert!(out.truncated);
    let expected: String = (1_262_144..=1_393_215).map(|n| format!("{n}\n")).collect();
    assert_eq!(expected.len(), MIB);
    assert_eq!(out.stdout.len(), MIB);
    assert!(
        out.stdout == expected.as_bytes(),
        "the last MiB, byte for byte"
    );
    assert!(out.stderr.is_empty());
}

#[tokio::test]
async fn an_exec_past_its_timeout_is_killed_with_its_children() {
    let rt = common::runtime().await;
    let scope = Scope::new("exec-timeout");
    let (facts, _) = scope.running(&rt, common::BUSYBOX).await;

    // The shell waits for `sleep`, a child of its own.
    let started = Instant::now();
    let out = common::exec(
        &rt,
        &facts.id,
        &["sh", "-c", "echo begun; sleep 60; echo never"],
        None,
        Duration::from_secs(1),
        4096,
        b"",
    )
    .await;
    let took = started.elapsed();
    eprintln!("a 1 s exec timeout returned after {took:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(out.timed_out);
    assert_eq!(out.exit_code, None);
    assert_eq!(out.stdout, b"begun\n");
    let ps = common::processes(&rt, &facts.id).await;
    assert!(!ps.contains("sleep"), "no sleep is left:\n{ps}");
    assert!(!ps.contains("echo begun"), "no shell is left:\n{ps}");

    // As root, blocked on a stdin that stays open, with a background child that left the
    // session: it is found as a descendant.
    let (_writer, reader) = tokio::io::duplex(64);
    let request = ExecRequest {
        argv: vec![
            "sh".to_owned(),
            "-c".to_owned(),
            "setsid sleep 61 & cat".to_owned(),
        ],
        user: Some("0".to_owned()),
        timeout: Duration::from_secs(1),
        max_output: 4096,
        cancel: Default::default(),
    };
    let out = rt
        .exec(&facts.id, request, Box::pin(reader))
        .await
        .expect("the exec runs");
    assert!(out.timed_out, "{out:?}");
    let ps = common::processes(&rt, &facts.id).await;
    assert!(!ps.contains("sleep 61"), "no sleep is left:\n{ps}");
    assert!(!ps.contains("cat"), "no cat is left:\n{ps}");
}

#[tokio::test]
async fn dropping_an_exec_kills_its_command() {
    let rt = common::runtime().await;
    let scope = Scope::new("exec-drop");
    let (facts, _) = scope.running(&rt, common::BUSYBOX).await;
    // Blocked on a stdin that stays open, with a child in a session of its own: closing the
    // stdin before the kill would end `cat` and orphan the child where it cannot be found.
    let (_writer, reader) = tokio::io::duplex(64);
    let request = ExecRequest {
        argv: vec![
            "sh".to_owned(),
            "-c".to_owned(),
            "setsid sleep 62 & cat".to_owned(),
        ],
        user: None,
        timeout: Duration::from_secs(120),
        max_output: 4096,
        cancel: Default::default(),
    };
    let abandoned = tokio::time::timeout(
        Duration::from_millis(800),
        rt.exec(&facts.id, request, Box::pin(reader)),
    )
    .await;
    assert!(
        abandoned.is_err(),
        "the exec was still running when dropped"
    );

    let started = Instant::now();
    loop {
        let ps = common::processes(&rt, &facts.id).await;
        if !ps.contains("sleep 62") && !ps.contains("cat") {
            eprintln!("an abandoned exec was gone after {:?}", started.elapsed());
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the abandoned exec still runs:\n{ps}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn exec_runs_as_the_requested_user() {
    let rt = common::runtime().await;
    let scope = Scope::new("exec-user");
    let (facts, _) = scope.running(&rt, common::BUSYBOX).await;
    let ten = Duration::from_secs(10);
    let app = common::exec(&rt, &facts.id, &["id", "-u"], Some("app"), ten, 64, b"").await;
    assert_eq!(app.stdout, b"1000\n");
    let root = common::exec(&rt, &facts.id, &["id", "-u"], Some("0"), ten, 64, b"").await;
    assert_eq!(root.stdout, b"0\n");
}

#[tokio::test]
async fn a_missing_binary_is_an_exit_code_not_an_error() {
    let rt = common::runtime().await;
    let scope = Scope::new("exec-missing");
    let (facts, _) = scope.running(&rt, common::BUSYBOX).await;
    let out = common::exec(
        &rt,
        &facts.id,
        &["/no/such/binary", "arg"],
        None,
        Duration::from_secs(10),
        4096,
        b"",
    )
    .await;
    assert!(
        matches!(out.exit_code, Some(126 | 127)),
        "exit code {:?}, stdout {:?}, stderr {:?}",
        out.exit_code,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.timed_out);
}

/// Waits (bounded) until a process whose argv holds `marker` runs in the container.
async fn wait_running(rt: &berth_docker::DockerRuntime, container: &str, marker: &str) {
    let started = Instant::now();
    while !common::processes(rt, container).await.contains(marker) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{marker} never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_cancelled_exec_is_killed_before_it_answers() {
    let rt = common::runtime().await;
    let scope = Scope::new("exec-cancel");
    let (facts, _) = scope.running(&rt, common::BUSYBOX).await;
    let (_writer, reader) = tokio::io::duplex(64);
    let cancel = tokio_util::sync::CancellationToken::new();
    let request = ExecRequest {
        argv: vec![
            "sh".to_owned(),
            "-c".to_owned(),
            "setsid sleep 63 & cat".to_owned(),
        ],
        user: None,
        timeout: Duration::from_secs(120),
        max_output: 4096,
        cancel: cancel.clone(),
    };
    let (answer, ()) = tokio::join!(rt.exec(&facts.id, request, Box::pin(reader)), async {
        wait_running(&rt, &facts.id, "sleep 63").await;
        cancel.cancel();
    });
    assert!(
        matches!(&answer, Err(RuntimeError::Cancelled(m)) if m.contains("killed")),
        "{answer:?}"
    );
    let ps = common::processes(&rt, &facts.id).await;
    assert!(!ps.contains("sleep 63") && !ps.contains("cat"), "{ps}");
}

#[tokio::test]
async fn stdin_that_fails_to_read_kills_the_command_before_it_answers() {
    let rt = common::runtime().await;
    let scope = Scope::new("exec-broken");
    let (facts, _) = scope.running(&rt, common::BUSYBOX).await;
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(1);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let request = ExecRequest {
        argv: vec![
            "sh".to_owned(),
            "-c".to_owned(),
            "cat >/dev/null; sleep 64".to_owned(),
        ],
        user: None,
        timeout: Duration::from_secs(120),
        max_output: 4096,
        cancel: Default::default(),
    };
    let stdin = Box::pin(tokio_util::io::StreamReader::new(stream));
    let (answer, ()) = tokio::join!(rt.exec(&facts.id, request, stdin), async {
        tx.send(Ok(bytes::Bytes::from_static(b"some stdin")))
            .await
            .unwrap();
        wait_running(&rt, &facts.id, "sleep 64").await;
        tx.send(Err(std::io::Error::other("the client went away")))
            .await
            .unwrap();
    });
    assert!(
        matches!(&answer, Err(RuntimeError::Cancelled(m)) if m.contains("caller went away")),
        "{answer:?}"
    );
    let ps = common::processes(&rt, &facts.id).await;
    assert!(!ps.contains("sleep 64") && !ps.contains("cat"), "{ps}");
}
