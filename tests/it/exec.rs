//! The raw exec route against real containers: stdin streamed, output tails, timeouts that
//! kill, users, refusals, and no argv or stdin in the daemon's log.

use berth_testkit as support;

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Daemon, busybox_image, docker, spec};

const READY: Duration = Duration::from_secs(60);

/// A daemon with one running busybox instance `box`.
fn running_box(daemon: &Daemon) -> (Client, String) {
    let api = daemon.client();
    let domain = api.create_domain("exec");
    api.up(&domain, "box", &spec(&busybox_image(), "box"), "use")
        .expect(200);
    api.wait_state(&domain, "box", "running", READY);
    (api, domain)
}

fn container(daemon: &Daemon) -> String {
    let names = support::containers_named(&daemon.prefix);
    assert_eq!(names.len(), 1, "{names:?}");
    names[0].clone()
}

#[test]
fn stdin_goes_in_and_stdout_stderr_and_the_exit_code_come_back() {
    let daemon = Daemon::start();
    let (api, domain) = running_box(&daemon);
    let result = api
        .exec(
            &domain,
            "box",
            &["sh", "-c", "cat; echo err >&2; exit 3"],
            None,
            10_000,
            b"hello",
        )
        .expect(200);
    assert_eq!(
        result,
        json!({"exitCode": 3, "stdout": "hello", "stderr": "err\n", "truncated": false, "timedOut": false})
    );
}

/// `size` bytes of stdin, produced 64 KiB at a time as they are sent.
fn streamed_stdin(
    size: u64,
) -> impl futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    futures_util::stream::unfold(size, |remaining| async move {
        let n = remaining.min(64 * 1024);
        (n > 0).then(|| {
            let chunk = bytes::Bytes::from(vec![b'x'; n as usize]);
            (Ok(chunk), remaining - n)
        })
    })
}

#[test]
fn a_hundred_mebibytes_of_stdin_stream_through_with_bounded_memory() {
    const SIZE: u64 = 100 * 1024 * 1024;
    // What the daemon may grow by while streaming: far less than the stdin it carries.
    const BOUND_KIB: u64 = 48 * 1024;
    let daemon = Daemon::start();
    let (api, domain) = running_box(&daemon);
    let before = daemon.rss_kib();
    let peak = Arc::new(AtomicU64::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done, pid) = (peak.clone(), done.clone(), daemon.pid());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status"))
                    && let Some(kib) = status
                        .lines()
                        .find_map(|l| l.strip_prefix("VmRSS:"))
                        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                {
                    peak.fetch_max(kib, Ordering::SeqCst);
                }
                // The sampling period of the memory probe, not a wait for berth.
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let frame = berth_client::ExecFrame {
        argv: vec!["wc".to_owned(), "-c".to_owned()],
        user: None,
        timeout_ms: 120_000,
    };
    let did = support::domain_id(&domain);
    let result = api
        .answer(|c| c.exec(&did, "box", &frame, streamed_stdin(SIZE)))
        .expect(200);
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    assert_eq!(result["exitCode"], 0);
    assert_eq!(result["stdout"].as_str().unwrap().trim(), SIZE.to_string());
    let growth = peak.load(Ordering::SeqCst).saturating_sub(before);
    assert!(
        growth < BOUND_KIB,
        "the daemon grew by {growth} KiB streaming {SIZE} bytes (bound {BOUND_KIB} KiB)"
    );
}

#[test]
fn output_beyond_one_mebibyte_keeps_exactly_its_tail() {
    let daemon = Daemon::start();
    let (api, domain) = running_box(&daemon);
    // 3 MiB of numbered lines, so the tail can be checked byte for byte.
    let mut input = Vec::new();
    let mut i = 0u64;
    while input.len() < 3 * 1024 * 1024 {
        input.extend_from_slice(format!("{i:08}\n").as_bytes());
        i += 1;
    }
    let result = api
        .exec(&domain, "box", &["cat"], None, 60_000, &input)
        .expect(200);
    let stdout = result["stdout"].as_str().unwrap().as_bytes();
    assert_eq!(stdout.len(), 1024 * 1024);
    assert_eq!(stdout, &input[input.len() - 1024 * 1024..]);
    assert_eq!(result["truncated"], true);
    assert_eq!(result["exitCode"], 0);
}

#[test]
fn a_command_past_its_timeout_is_killed_inside_the_container() {
    let daemon = Daemon::start();
    let (api, domain) = running_box(&daemon);
    let started = Instant::now();
    let result = api
        .exec(&domain, "box", &["sh", "-c", "sleep 60"], None, 1000, b"")
        .expect(200);
    let took = started.elapsed();
    assert_eq!(result["timedOut"], true);
    assert_eq!(result["exitCode"], Value::Null);
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    let ps = docker(&["exec", &container(&daemon), "ps", "-o", "args"]);
    assert!(!ps.contains("sleep 60"), "nothing left running: {ps}");
}

#[test]
fn a_command_runs_as_the_user_it_names() {
    let daemon = Daemon::start();
    let (api, domain) = running_box(&daemon);
    let result = api
        .exec(&domain, "box", &["id", "-u"], Some("app"), 10_000, b"")
        .expect(200);
    assert_eq!(result["stdout"], "1000\n");
    let result = api
        .exec(&domain, "box", &["id", "-u"], None, 10_000, b"")
        .expect(200);
    assert_eq!(result["stdout"], "0\n");
}

#[test]
fn a_missing_binary_is_an_exit_code_not_a_server_error() {
    let daemon = Daemon::start();
    let (api, domain) = running_box(&daemon);
    let result = api
        .exec(&domain, "box", &["no-such-binary"], None, 10_000, b"")
        .expect(200);
    let code = result["exitCode"].as_i64().unwrap();
    assert!(code == 126 || code == 127, "{result}");
    let text = format!("{}{}", result["stdout"], result["stderr"]);
    assert!(text.contains("no-such-binary"), "{result}");
}

#[test]
fn neither_argv_nor_stdin_reaches_the_log_at_trace_level() {
    let daemon = Daemon::start_logging(&[], "trace");
    let (api, domain) = running_box(&daemon);
    let result = api
        .exec(
            &domain,
            "box",
            &["sh", "-c", "cat >/dev/null; echo ok", "argv-secret-7f3a"],
            None,
            10_000,
            b"stdin-secret-91c2",
        )
        .expect(200);
    assert_eq!(result["stdout"], "ok\n");
    api.exec(
        &domain,
        "box",
        &["argv-secret-7f3a"],
        Some("bad user"),
        10_000,
        b"stdin-secret-91c2",
    )
    .expect_error(400, "RequestRefusedError");
    // The log has caught up with both requests once it holds the refusal's answer (the only
    // 400 of this daemon).
    support::wait_until(Duration::from_secs(10), "the refusal in the log", || {
        daemon.log_text().contains("status=400")
    });
    let log = daemon.log_text();
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "the log is at trace level"
    );
    for line in log.lines().filter(|l| l.contains("secret-")) {
        eprintln!("LEAK: {}", &line[..line.len().min(400)]);
    }
    assert!(
        !log.contains("argv-secret-7f3a"),
        "argv leaked into the log"
    );
    assert!(
        !log.contains("stdin-secret-91c2"),
        "stdin leaked into the log"
    );
}

#[test]
fn refusals_answer_their_status_and_tag() {
    let daemon = Daemon::start();
    let (api, domain) = running_box(&daemon);
    let path = format!("/v1/resource-domains/{domain}/instances/box/exec");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (vec![b'{'; 64 * 1024 + 1], "at most 65536 bytes"),
        (
            br#"{"argv":["true"],"user":null,"timeoutMs":1000}"#.to_vec(),
            "must end with a newline",
        ),
        (b"{nope\n".to_vec(), "frame must be one line of JSON"),
        (
            b"{\"argv\":[],\"user\":null,\"timeoutMs\":1000}\n".to_vec(),
            "frame.argv must have 1 to 4096 items",
        ),
        (
            b"{\"argv\":[\"true\"],\"user\":null,\"timeoutMs\":10}\n".to_vec(),
            "frame.timeoutMs must be an integer between 1000 and 21600000",
        ),
        (
            b"{\"argv\":[\"true\"],\"user\":null,\"timeoutMs\":1000,\"tty\":true}\n".to_vec(),
            "frame.tty is not an allowed key",
        ),
    ];
    for (body, expected) in cases {
        let err = api
            .raw("POST", &path, Some(body), &[])
            .expect_error(400, "RequestRefusedError");
        assert!(
            err["message"].as_str().unwrap().contains(expected),
            "{err} should say {expected:?}"
        );
    }
    api.exec(&domain, "nope", &["true"], None, 1000, b"")
        .expect_error(404, "ResourceInstanceNotFoundError");
    let did = support::domain_id(&domain);
    api.call(|c| c.stop(&did, "box", "Ada")).expect("a stop");
    api.wait_state(&domain, "box", "stopped", READY);
    let err = api
        .exec(&domain, "box", &["true"], None, 1000, b"")
        .expect_error(409, "ResourceInstanceNotRunningError");
    assert!(err["message"].as_str().unwrap().contains("not running"));
}

/// Whether a process whose argv holds `marker` runs in the container.
fn runs(container: &str, marker: &str) -> bool {
    support::processes(container).contains(marker)
}

#[test]
fn a_client_that_goes_away_mid_stdin_has_its_command_killed_at_once() {
    let daemon = Daemon::start();
    let (_api, domain) = running_box(&daemon);
    let container = container(&daemon);
    // Stdin never ends, and the command would run for an hour: only the client's going away
    // can end it.
    let argv = ["sh", "-c", "cat >/dev/null; sleep 3600", "exec-gone-7c1d"];
    let connection = daemon.open_exec(&domain, "box", &argv, 3_600_000);
    support::wait_until(Duration::from_secs(30), "the exec starting", || {
        runs(&container, "exec-gone-7c1d")
    });
    drop(connection);
    support::wait_until(
        Duration::from_secs(10),
        "the exec being killed after its client went away",
        || !runs(&container, "exec-gone-7c1d") && !runs(&container, "sleep 3600"),
    );
}

#[test]
fn a_client_that_goes_away_after_its_stdin_ended_has_its_command_killed_too() {
    let daemon = Daemon::start();
    let (_api, domain) = running_box(&daemon);
    let container = container(&daemon);
    let argv = ["sh", "-c", "sleep 3600; true", "exec-gone-e5a0"];
    let mut connection = daemon.open_exec(&domain, "box", &argv, 3_600_000);
    // The last chunk: the body is whole, and the client waits for the answer.
    std::io::Write::write_all(&mut connection, b"0\r\n\r\n").unwrap();
    support::wait_until(Duration::from_secs(30), "the exec starting", || {
        runs(&container, "exec-gone-e5a0")
    });
    drop(connection);
    support::wait_until(
        Duration::from_secs(10),
        "the exec being killed after its client went away",
        || !runs(&container, "exec-gone-e5a0") && !runs(&container, "sleep 3600"),
    );
}

/// Reads one response from `stream`: its head, then as many body bytes as its
/// `content-length` says.
fn read_response(stream: &mut std::net::TcpStream) -> (String, String) {
    let head = support::read_head(stream);
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no content-length in {head}"));
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).expect("the response body");
    (head, String::from_utf8(body).unwrap())
}

#[test]
fn a_command_that_ends_before_its_stdin_does_answers_and_the_rest_is_read_not_reset() {
    use std::io::Write;
    let daemon = Daemon::start();
    let (_api, domain) = running_box(&daemon);
    let argv = ["sh", "-c", "head -c 3; exit 3"];
    let mut connection = daemon.open_exec(&domain, "box", &argv, 60_000);
    connection.write_all(b"3\r\nabc\r\n").unwrap();
    let (head, body) = read_response(&mut connection);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let result: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(result["exitCode"], 3, "{result}");
    assert_eq!(result["stdout"], "abc", "{result}");
    // The client goes on sending the stdin it had: 32 MiB the command never reads. Had the
    // daemon closed the connection with these bytes unread, the kernel would reset it and
    // these writes would fail.
    let chunk = vec![b'x'; 1024 * 1024];
    let size = format!("{:x}\r\n", chunk.len());
    for _ in 0..32 {
        connection
            .write_all(size.as_bytes())
            .expect("stdin after the answer");
        connection
            .write_all(&chunk)
            .expect("stdin after the answer");
        connection
            .write_all(b"\r\n")
            .expect("stdin after the answer");
    }
    connection.write_all(b"0\r\n\r\n").unwrap();
    // The whole body read, the connection serves the next request.
    let next = format!(
        "GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n",
        daemon.address()
    );
    connection.write_all(next.as_bytes()).unwrap();
    let (head, _) = read_response(&mut connection);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
}
