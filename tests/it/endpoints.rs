//! Host endpoints: a stable loopback port per service port, proxied by berth, that wakes an idle
//! instance on the first connection and counts as reach while open.

use berth_testkit as support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{Client, Daemon, Launch, busybox_image, echo_image, spec};

const READY: Duration = Duration::from_secs(60);

fn endpoints(api: &Client, domain: &str, key: &str) -> Value {
    let domain = support::domain_id(domain);
    api.answer(|c| c.endpoints(&domain, key)).expect(200)
}

/// A person's stop, by Ada, through the typed client.
fn stop(api: &Client, domain: &str, key: &str) {
    let domain = support::domain_id(domain);
    api.call(|c| c.stop(&domain, key, "Ada")).expect("a stop");
}

fn host_port(api: &Client, domain: &str, key: &str, port: u16) -> u16 {
    let items = endpoints(api, domain, key);
    let e = items
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["port"] == port)
        .unwrap_or_else(|| panic!("no endpoint for {port}: {items}"));
    assert_eq!(e["host"], "127.0.0.1");
    e["hostPort"].as_u64().unwrap() as u16
}

/// `GET /` through an endpoint; the body, and the time to the first byte.
fn http_get(host_port: u16) -> (String, Duration) {
    let started = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", host_port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut first = [0u8; 1];
    s.read_exact(&mut first).expect("a first byte");
    let to_first_byte = started.elapsed();
    let mut rest = String::new();
    s.read_to_string(&mut rest).unwrap();
    (format!("{}{rest}", first[0] as char), to_first_byte)
}

fn idle_spec(image: &str, alias: &str, port: u16, idle: u64) -> Value {
    let mut s = spec(image, alias);
    s["ready"] = json!({"kind": "tcp", "port": port});
    s["idleStopAfterSeconds"] = json!(idle);
    s
}

#[test]
fn an_instance_keeps_its_host_port_across_stop_spec_change_and_restart() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let mut s = spec(&busybox_image(), "web");
    api.up(&domain, "web", &s, "use").expect(200);
    api.wait_state(&domain, "web", "running", READY);
    let port = host_port(&api, &domain, "web", 8080);
    assert!(http_get(port).0.contains("berth fixture"));

    stop(&api, &domain, "web");
    api.wait_state(&domain, "web", "stopped", READY);
    api.up(&domain, "web", &s, "person").expect(200);
    api.wait_state(&domain, "web", "running", READY);
    assert_eq!(
        host_port(&api, &domain, "web", 8080),
        port,
        "the same port after a stop and start"
    );

    s["env"]["GREETING"] = json!("changed");
    api.up(&domain, "web", &s, "use").expect(200);
    api.wait_for(&domain, "web", READY, "running the new spec", |i| {
        i["state"]["kind"] == "running"
    });
    assert_eq!(
        host_port(&api, &domain, "web", 8080),
        port,
        "the same port after a spec change"
    );

    daemon.restart();
    let api = daemon.client();
    assert_eq!(
        host_port(&api, &domain, "web", 8080),
        port,
        "the same port after a daemon restart"
    );
    api.wait_state(&domain, "web", "running", READY);
    assert!(
        http_get(port).0.contains("berth fixture"),
        "and it still proxies"
    );

    api.up(&domain, "other", &spec(&busybox_image(), "other"), "use")
        .expect(200);
    api.wait_state(&domain, "other", "running", READY);
    assert_ne!(
        host_port(&api, &domain, "other", 8080),
        port,
        "two instances never share a port"
    );
}

fn archive(api: &Client, domain: &str, key: &str) {
    let domain = support::domain_id(domain);
    api.call(|c| c.archive(&domain, key)).expect("an archive");
}

fn endpoint_of(api: &Client, domain: &str, key: &str, port: u16) -> Value {
    endpoints(api, domain, key)
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["port"] == port)
        .cloned()
        .unwrap_or_else(|| panic!("no endpoint for {port} of {key}"))
}

#[test]
fn the_next_generation_of_a_key_keeps_its_host_port_unless_it_is_taken() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let s = spec(&busybox_image(), "web");
    let key = "web@shop-1a2b3c4d";
    api.up(&domain, key, &s, "person").expect(200);
    api.wait_state(&domain, key, "running", READY);
    let port = host_port(&api, &domain, key, 8080);
    assert_eq!(
        endpoint_of(&api, &domain, key, 8080)["previousHostPort"],
        Value::Null
    );

    // Archived, then up again under the key's next generation: the same host port, and it
    // proxies to the new container.
    archive(&api, &domain, key);
    let next = format!("{key}.2");
    api.up(&domain, &next, &s, "person").expect(200);
    api.wait_state(&domain, &next, "running", READY);
    let kept = endpoint_of(&api, &domain, &next, 8080);
    assert_eq!(
        kept["hostPort"], port,
        "the next generation keeps the port: {kept}"
    );
    assert_eq!(kept["previousHostPort"], Value::Null);
    assert!(http_get(port).0.contains("berth fixture"));

    // Another name never gets it, even once it is free: it is kept for its own name.
    archive(&api, &domain, &next);
    api.up(&domain, "other", &spec(&busybox_image(), "other"), "use")
        .expect(200);
    api.wait_state(&domain, "other", "running", READY);
    assert_ne!(host_port(&api, &domain, "other", 8080), port);

    // Something else holds the port now: the third generation gets another, and says which
    // one it had.
    let holder = std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
    let third = format!("{key}.3");
    api.up(&domain, &third, &s, "person").expect(200);
    api.wait_state(&domain, &third, "running", READY);
    let moved = endpoint_of(&api, &domain, &third, 8080);
    assert_ne!(moved["hostPort"], port, "{moved}");
    assert_eq!(moved["previousHostPort"], port, "{moved}");
    let new_port = moved["hostPort"].as_u64().unwrap() as u16;
    assert!(http_get(new_port).0.contains("berth fixture"));
    drop(holder);
}

#[test]
fn a_connection_wakes_an_idle_stopped_instance() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(
        &domain,
        "web",
        &idle_spec(&busybox_image(), "web", 8080, 2),
        "use",
    )
    .expect(200);
    api.wait_state(&domain, "web", "running", READY);
    let port = host_port(&api, &domain, "web", 8080);
    let stopped = api.wait_state(&domain, "web", "stopped", READY);
    assert_eq!(stopped["stopReason"], json!({"kind": "idle"}));

    let (body, to_first_byte) = http_get(port);
    assert!(body.contains("berth fixture"), "{body}");
    eprintln!("connect to first byte through a waking endpoint: {to_first_byte:?}");
    let instance = api.instance(&domain, "web");
    assert_eq!(instance["desired"], "running");
    assert_eq!(instance["state"]["kind"], "running");
}

#[test]
fn an_exec_wakes_an_idle_stopped_instance_and_a_persons_stop_is_kept() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(
        &domain,
        "web",
        &idle_spec(&busybox_image(), "web", 8080, 2),
        "use",
    )
    .expect(200);
    api.wait_state(&domain, "web", "running", READY);
    let stopped = api.wait_state(&domain, "web", "stopped", READY);
    assert_eq!(stopped["stopReason"], json!({"kind": "idle"}));

    // As a connection would: the exec wakes it, waits for it to run, and runs.
    let result = api
        .exec(&domain, "web", &["echo", "awake"], None, 60_000, b"")
        .expect(200);
    assert_eq!(result["exitCode"], 0, "{result}");
    assert_eq!(result["stdout"], "awake\n");
    let instance = api.instance(&domain, "web");
    assert_eq!(instance["desired"], "running");
    assert_eq!(instance["state"]["kind"], "running");

    // A person's stop is theirs: the exec is refused, naming the state, and wakes nothing.
    stop(&api, &domain, "web");
    api.wait_state(&domain, "web", "stopped", READY);
    api.exec(&domain, "web", &["true"], None, 60_000, b"")
        .expect_error(409, "ResourceInstanceNotRunningError");
    let i = api.settled(&domain, "web", &["stopped"], READY);
    assert_eq!(i["stopReason"], json!({"kind": "person", "by": "Ada"}));
}

#[test]
fn a_person_stopped_instance_closes_connections_promptly_and_stays_stopped() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(&domain, "web", &spec(&busybox_image(), "web"), "use")
        .expect(200);
    api.wait_state(&domain, "web", "running", READY);
    let port = host_port(&api, &domain, "web", 8080);
    stop(&api, &domain, "web");
    api.wait_state(&domain, "web", "stopped", READY);

    let started = Instant::now();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("the endpoint still listens");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "closed promptly, after {:?}",
        started.elapsed()
    );
    // The endpoint closing the connection is berth's answer to it; once berth has acted on
    // the latest request, the instance is still stopped by the person.
    let i = api.settled(&domain, "web", &["stopped"], READY);
    assert_eq!(i["desired"], "stopped");
    assert_eq!(i["stopReason"], json!({"kind": "person", "by": "Ada"}));
}

#[test]
fn an_open_connection_keeps_the_instance_from_idle_stop_until_it_closes() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(
        &domain,
        "echo",
        &idle_spec(&echo_image(), "echo", 7000, 2),
        "use",
    )
    .expect(200);
    api.wait_state(&domain, "echo", "running", READY);
    let port = host_port(&api, &domain, "echo", 7000);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut watch = api.watch(&domain);
    for i in 0..6 {
        let line = format!("ping {i}\n");
        s.write_all(line.as_bytes()).unwrap();
        let mut back = vec![0u8; line.len()];
        s.read_exact(&mut back).unwrap();
        assert_eq!(back, line.as_bytes());
        // A negative check, bounded on purpose: for three times its idle time, no event may
        // show the instance stopping while the connection is open. There is no event for
        // "not stopped"; the window is the point of the test.
        watch.never(
            Duration::from_secs(1),
            "an instance with an open connection stopped",
            |i| {
                i["key"] == "echo" && (i["desired"] != "running" || i["state"]["kind"] != "running")
            },
        );
    }
    assert_eq!(
        api.instance(&domain, "echo")["state"]["kind"],
        "running",
        "an open connection is reach"
    );
    drop(s);
    let stopped = api.wait_state(&domain, "echo", "stopped", Duration::from_secs(30));
    assert_eq!(stopped["stopReason"], json!({"kind": "idle"}));
}

#[test]
fn two_hundred_concurrent_connections_each_echo_their_own_bytes() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    // The echo server forks a process per connection: give it room for 200 at once.
    let mut s = idle_spec(&echo_image(), "echo", 7000, 3600);
    s["limits"] = json!({"cpuMillicores": 2000, "memoryBytes": 536870912});
    api.up(&domain, "echo", &s, "use").expect(200);
    api.wait_state(&domain, "echo", "running", READY);
    let port = host_port(&api, &domain, "echo", 7000);
    let workers: Vec<_> = (0..200)
        .map(|i| {
            std::thread::spawn(move || {
                let payload: Vec<u8> = (0..4096u32).map(|j| ((i * 31 + j) % 251) as u8).collect();
                let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                s.write_all(&payload).unwrap();
                s.shutdown(Shutdown::Write).unwrap();
                let mut back = Vec::new();
                s.read_to_end(&mut back).unwrap();
                assert!(
                    back == payload,
                    "connection {i} got {} bytes back, not its own 4096",
                    back.len()
                );
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a connection failed");
    }
}

#[test]
fn a_stored_port_another_program_holds_is_named_unavailable_until_berth_binds_it() {
    let mut daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("squat");
    api.up(&domain, "web", &spec(&busybox_image(), "web"), "use")
        .expect(200);
    api.wait_state(&domain, "web", "running", READY);
    let port = host_port(&api, &domain, "web", 8080);

    // Another program takes the stored port while berth is down (an old daemon still draining,
    // or anyone on the machine).
    daemon.stop();
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port))
        .expect("the stored port is free once berth has stopped");
    daemon.start_again();
    let api = daemon.client();
    support::wait_until(READY, "berth finding its stored port taken", || {
        daemon
            .log_text()
            .contains("the host endpoint's port is taken")
    });
    api.wait_state(&domain, "web", "running", READY);
    // Listed as unavailable, with the sentence naming the port: never as a place to connect.
    let items = endpoints(&api, &domain, "web");
    let held = items
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["port"] == 8080)
        .unwrap_or_else(|| panic!("the held endpoint is not named: {items}"));
    let why = held["unavailable"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!("another program holds 127.0.0.1:{port}")),
        "{items}"
    );

    // Once the port is free, berth binds it again and advertises it.
    drop(squatter);
    support::wait_until(READY, "berth binding its freed port", || {
        endpoints(&api, &domain, "web")
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["port"] == 8080 && e.get("unavailable").is_none())
    });
    assert_eq!(host_port(&api, &domain, "web", 8080), port, "the same port");
    assert!(http_get(port).0.contains("berth fixture"));
}

/// Sends `len` bytes through an endpoint of the echo fixture, closes the sending half, and
/// checks that every byte comes back in order.
fn echo_through(port: u16, len: usize) {
    let payload: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut reader = s.try_clone().unwrap();
    let read = std::thread::spawn(move || {
        let mut back = Vec::new();
        reader.read_to_end(&mut back).unwrap();
        back
    });
    s.write_all(&payload).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let back = read.join().unwrap();
    assert!(
        back == payload,
        "{} bytes came back, not the {len} sent",
        back.len()
    );
}

/// The splice path (the default), the copy path (`--endpoint-splice off`, the path the
/// proxy takes where the kernel refuses a splice) and a relay that never spins
/// (`--endpoint-spin 0s`) behave alike: a connection to an idle-stopped instance wakes it and
/// gets its first byte, megabytes come back whole, and an open connection is reach.
#[test]
fn the_endpoint_wakes_echoes_and_counts_reach_spliced_copied_and_without_spinning() {
    for args in [
        &[][..],
        &["--endpoint-splice", "off"][..],
        &["--endpoint-spin", "0s"][..],
    ] {
        let daemon = Daemon::start_with(args);
        let api = daemon.client();
        let domain = api.create_domain("shop");
        api.up(
            &domain,
            "echo",
            &idle_spec(&echo_image(), "echo", 7000, 2),
            "use",
        )
        .expect(200);
        api.wait_state(&domain, "echo", "running", READY);
        let port = host_port(&api, &domain, "echo", 7000);
        let stopped = api.wait_state(&domain, "echo", "stopped", READY);
        assert_eq!(stopped["stopReason"], json!({"kind": "idle"}), "{args:?}");

        // The wake: the first byte is answered once the instance runs.
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
        s.write_all(b"first\n").unwrap();
        let mut back = [0u8; 6];
        s.read_exact(&mut back)
            .expect("the first bytes back after the wake");
        assert_eq!(&back, b"first\n", "{args:?}");
        assert_eq!(api.instance(&domain, "echo")["state"]["kind"], "running");

        echo_through(port, 16 << 20);

        // Reach: past its idle time, no event shows the instance stopping while the
        // connection is open (bounded on purpose: there is no event for "not stopped").
        let mut watch = api.watch(&domain);
        watch.never(
            Duration::from_secs(4),
            "an instance with an open connection stopped",
            |i| {
                i["key"] == "echo" && (i["desired"] != "running" || i["state"]["kind"] != "running")
            },
        );
        s.write_all(b"still\n").unwrap();
        s.read_exact(&mut back).unwrap();
        assert_eq!(&back, b"still\n", "{args:?}");
        drop(s);
        let stopped = api.wait_state(&domain, "echo", "stopped", Duration::from_secs(30));
        assert_eq!(stopped["stopReason"], json!({"kind": "idle"}), "{args:?}");
    }
}

/// A spin past 10ms is refused by name before the daemon writes anything: it would hold a core
/// for nothing a relay waits on.
#[test]
fn an_endpoint_spin_past_ten_milliseconds_is_refused_by_name_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data_dir = tmp.path().join("data");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "--listen", "127.0.0.1:0", "--runtime", "none"])
        .args(["--endpoint-spin", "1s"])
        .arg("--data-dir")
        .arg(&data_dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--endpoint-spin") && stderr.contains("must be at most 10ms"),
        "{stderr}"
    );
    assert!(!data_dir.exists(), "a refused start made {data_dir:?}");
}

/// Raises this test process's own soft limit on descriptors to at least `want` (within its
/// hard limit): it holds a thousand sockets of its own.
fn allow_descriptors(want: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write one live rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < want {
            assert!(
                limit.rlim_max >= want,
                "this test holds {want} descriptors; the hard limit is {}",
                limit.rlim_max
            );
            limit.rlim_cur = want;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
}

/// `GET path` of the daemon on a connection of its own, bounded by `within`: the status line.
fn answers_within(base: &str, path: &str, key: Option<&str>, within: Duration) -> String {
    let address = base.trim_start_matches("http://");
    let started = Instant::now();
    let mut s = TcpStream::connect(address).expect("connect to the API");
    s.set_read_timeout(Some(within)).unwrap();
    let auth = key.map_or(String::new(), |k| format!("Authorization: Bearer {k}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer)
        .unwrap_or_else(|e| panic!("GET {path} did not answer within {within:?}: {e}"));
    assert!(
        started.elapsed() < within,
        "GET {path} took {:?}",
        started.elapsed()
    );
    answer.lines().next().unwrap_or_default().to_owned()
}

/// A connection through the endpoint that carries bytes both ways: the echo comes back.
fn echoes(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut back = [0u8; 4];
    stream.write_all(b"ping").is_ok() && stream.read_exact(&mut back).is_ok() && &back == b"ping"
}

/// 1,000 connections to one endpoint of a daemon whose descriptor limit is 1,024, soft and hard
/// (berth raises its soft limit to the hard one at start, so the hard one is what is lowered):
/// the endpoint takes the connections that leave the reserve free, closes the others at once
/// and logs the burst once; `/healthz` and a GET answer throughout, and once the connections
/// close the endpoint takes new ones again.
#[test]
fn a_thousand_connections_to_an_endpoint_leave_the_api_answering_under_a_limit_of_1024() {
    allow_descriptors(4096);
    // The daemon runs under `ulimit -n 1024` (soft and hard), set by a shell that then execs it.
    let dir = tempfile::tempdir().unwrap();
    let wrapper = dir.path().join("berth-1024");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nulimit -n 1024 || exit 1\nexec '{}' \"$@\"\n",
            support::berth_binary().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let daemon = Launch::new().binary(&wrapper).start();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", daemon.pid())).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>();
    assert_eq!(open_files[3..5], ["1024", "1024"], "{limits}");
    let log = daemon.log_text();
    assert!(
        log.contains("descriptor limit") && log.contains("open_descriptors_limit=1024"),
        "{log}"
    );

    let api = daemon.client();
    let domain = api.create_domain("shop");
    // The echo server forks a process per connection: room for the ones berth takes.
    let mut s = idle_spec(&echo_image(), "echo", 7000, 3600);
    s["limits"] = json!({"cpuMillicores": 2000, "memoryBytes": 536870912});
    api.up(&domain, "echo", &s, "use").expect(200);
    api.wait_state(&domain, "echo", "running", READY);
    let port = host_port(&api, &domain, "echo", 7000);
    let instance = format!("/v1/resource-domains/{domain}/instances/echo");
    let bound = Duration::from_secs(5);

    let mut open = Vec::with_capacity(1000);
    for i in 0..1000 {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("connection {i} to the endpoint: {e}"));
        if i == 0 {
            assert!(echoes(&mut stream), "the first connection is relayed");
        }
        open.push(stream);
        if i % 50 == 49 {
            let health = answers_within(&daemon.base, "/healthz", None, bound);
            assert!(
                health.contains(" 200 "),
                "after {} connections: {health}",
                i + 1
            );
            let got = answers_within(&daemon.base, &instance, Some(support::KEY), bound);
            assert!(got.contains(" 200 "), "after {} connections: {got}", i + 1);
        }
    }
    // The last one was over the share: closed at once, not left hanging.
    let last = open.last_mut().unwrap();
    last.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut byte = [0u8; 1];
    match last.read(&mut byte) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the 1,000th connection was not closed at once: {other:?}"),
    }
    // The ones taken still carry bytes.
    assert!(echoes(&mut open[1]), "the second connection is relayed");
    let log = daemon.log_text();
    let refusals = log.matches("endpoint connections are refused").count();
    assert!(
        (1..=3).contains(&refusals),
        "the burst is logged once (a minute), not per connection: {refusals} lines"
    );
    assert!(!log.contains("Too many open files"), "{log}");

    // Once they close, the endpoint takes connections again.
    drop(open);
    support::wait_until(
        Duration::from_secs(30),
        "a new connection is relayed",
        || TcpStream::connect(("127.0.0.1", port)).is_ok_and(|mut s| echoes(&mut s)),
    );
    assert!(
        daemon
            .log_text()
            .contains("endpoint connections are taken again")
    );
    let health = answers_within(&daemon.base, "/healthz", None, bound);
    assert!(health.contains(" 200 "), "{health}");
}
