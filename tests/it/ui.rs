//! The web page at `/ui/`, driven in a real headless Chromium through chromedriver (Debian's
//! `chromium` and `chromium-driver`) against a real daemon and Docker engine.
//!
//! The page is never waited on by sleeping: a wait runs in the page and resolves on the DOM
//! mutation that makes its condition true (a `MutationObserver`), or fails at its bound. The one
//! bounded wait for something that must NOT happen (a periodic request) says so.
//! Screenshots of the main views go to `target/ui-screenshots/`.

use berth_testkit as support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::key::Key;
use fantoccini::{Client as WebDriver, ClientBuilder, Locator};
use serde_json::{Value, json};
use support::{
    Client, Daemon, KEY, OTHER_KEY, block_on, busybox_image, docker_inspect, domain_id, echo_image,
    spec, wait_until,
};

const READY: Duration = Duration::from_secs(120);
/// How long a wait in the page may take before it fails.
const PAGE: Duration = Duration::from_secs(60);

/// Runs before any script of every page: records console errors, uncaught errors, CSP
/// violations and every fetch the page makes, for the assertions below.
const HOOKS: &str = r#"
(() => {
  const w = window;
  w.__berthTest = { errors: [], csp: [], fetches: [], copied: [] };
  // What the page puts on the clipboard (headless Chromium's own asks for a permission).
  if (navigator.clipboard) {
    navigator.clipboard.writeText = (text) => {
      w.__berthTest.copied.push(String(text));
      return Promise.resolve();
    };
  }
  const error = console.error;
  console.error = function (...args) {
    w.__berthTest.errors.push(args.map(String).join(' '));
    return error.apply(this, args);
  };
  w.addEventListener('error', (e) => w.__berthTest.errors.push('uncaught: ' + e.message));
  w.addEventListener('unhandledrejection', (e) =>
    w.__berthTest.errors.push('unhandled rejection: ' + String(e.reason && e.reason.message || e.reason)));
  document.addEventListener('securitypolicyviolation', (e) =>
    w.__berthTest.csp.push(e.violatedDirective + ' ' + e.blockedURI));
  const fetch = w.fetch;
  w.fetch = function (input, init) {
    w.__berthTest.fetches.push(String(input && input.url || input));
    return fetch.apply(this, arguments);
  };
})();
"#;

/// chromedriver on a free loopback port, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    fn start() -> Driver {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let binary =
            std::env::var("BERTH_TEST_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let mut child = Command::new(&binary)
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("{binary} does not start ({e}): tests/it/ui.rs needs Debian's chromium and chromium-driver")
            });
        // chromedriver says when it listens.
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        loop {
            line.clear();
            let n = out.read_line(&mut line).expect("chromedriver's output");
            assert!(n > 0, "chromedriver ended before it listened");
            if line.contains("started successfully") {
                break;
            }
        }
        // Keep reading so chromedriver never blocks on a full pipe.
        std::thread::spawn(move || for _ in out.lines() {});
        Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session.
struct Browser {
    wd: WebDriver,
    driver: Driver,
    session: String,
    http: reqwest::blocking::Client,
}

impl Browser {
    fn start() -> Browser {
        let driver = Driver::start();
        let mut caps = serde_json::Map::new();
        let mut args = vec![
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1400,1000",
            "--no-first-run",
        ];
        // Chromium refuses to run its sandbox as root, which CI containers are.
        if unsafe { libc::geteuid() } == 0 {
            args.push("--no-sandbox");
        }
        let mut options = json!({"args": args});
        if let Ok(binary) = std::env::var("BERTH_TEST_CHROMIUM") {
            options["binary"] = json!(binary);
        }
        caps.insert("goog:chromeOptions".into(), options);
        caps.insert("goog:loggingPrefs".into(), json!({"browser": "ALL"}));
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let wd = block_on(async {
            ClientBuilder::new(connector)
                .capabilities(caps)
                .connect(&driver.url)
                .await
        })
        .expect("a Chromium session through chromedriver");
        let session = block_on(wd.session_id())
            .expect("a session id")
            .expect("a session id");
        let browser = Browser {
            wd,
            driver,
            session,
            http: reqwest::blocking::Client::new(),
        };
        browser.cdp(
            "Page.addScriptToEvaluateOnNewDocument",
            json!({"source": HOOKS}),
        );
        block_on(
            browser
                .wd
                .update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
                    Some(Duration::from_secs(120)),
                    Some(Duration::from_secs(60)),
                    Some(Duration::from_secs(0)),
                )),
        )
        .expect("timeouts");
        browser
    }

    /// A Chrome DevTools command through chromedriver.
    fn cdp(&self, cmd: &str, params: Value) -> Value {
        let url = format!(
            "{}/session/{}/goog/cdp/execute",
            self.driver.url, self.session
        );
        let answer: Value = self
            .http
            .post(url)
            .json(&json!({"cmd": cmd, "params": params}))
            .send()
            .and_then(|r| r.json())
            .unwrap_or_else(|e| panic!("{cmd}: {e}"));
        assert!(answer["value"].get("error").is_none(), "{cmd}: {answer}");
        answer["value"].clone()
    }

    /// The browser's console log since it was last read (chromedriver's log endpoint).
    fn console(&self) -> Vec<Value> {
        let url = format!("{}/session/{}/se/log", self.driver.url, self.session);
        let answer: Value = self
            .http
            .post(url)
            .json(&json!({"type": "browser"}))
            .send()
            .and_then(|r| r.json())
            .expect("the browser log");
        answer["value"].as_array().cloned().unwrap_or_default()
    }

    fn goto(&self, url: &str) {
        block_on(self.wd.goto(url)).unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    fn js(&self, script: &str) -> Value {
        block_on(self.wd.execute(script, vec![])).unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// Waits in the page until `condition` (a JavaScript expression) holds, on each change of
    /// the DOM, for at most [`PAGE`].
    fn wait(&self, condition: &str, what: &str) {
        let script = format!(
            r#"
            const done = arguments[arguments.length - 1];
            const check = () => {{ try {{ return !!({condition}); }} catch (e) {{ return false; }} }};
            if (check()) {{ done(true); return; }}
            let timer = null;
            const observer = new MutationObserver(() => {{
              if (check()) {{ observer.disconnect(); clearTimeout(timer); done(true); }}
            }});
            observer.observe(document, {{ subtree: true, childList: true, attributes: true, characterData: true }});
            timer = setTimeout(() => {{ observer.disconnect(); done(false); }}, {ms});
            "#,
            ms = PAGE.as_millis()
        );
        let met = block_on(self.wd.execute_async(&script, vec![]))
            .unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
        if met != json!(true) {
            let text = self.js("return document.body.innerText");
            panic!("the page did not show {what} within {PAGE:?}; it shows:\n{text}");
        }
    }

    /// The rendered text of the first element `selector` matches, found and read in one step
    /// in the page (a row the page renders again between a find and a read would be stale).
    fn text(&self, selector: &str) -> String {
        let script = "const el = document.querySelector(arguments[0]); \
                      return el === null ? null : el.innerText;";
        let found = block_on(self.wd.execute(script, vec![json!(selector)]))
            .unwrap_or_else(|e| panic!("{selector}: {e}"));
        match found {
            Value::String(text) => text,
            other => panic!("no element matches {selector} ({other})"),
        }
    }

    fn click(&self, selector: &str) {
        let el = block_on(self.wd.find(Locator::Css(selector)))
            .unwrap_or_else(|e| panic!("{selector}: {e}"));
        block_on(el.click()).unwrap_or_else(|e| panic!("click {selector}: {e}"));
    }

    /// Presses a key where the focus is.
    fn press(&self, key: Key) {
        let el = block_on(self.wd.active_element()).expect("a focused element");
        block_on(el.send_keys(&key.to_string())).expect("a key press");
    }

    /// Types `text` into the field at `selector`, after clearing it.
    fn fill(&self, selector: &str, text: &str) {
        let el = block_on(self.wd.find(Locator::Css(selector)))
            .unwrap_or_else(|e| panic!("{selector}: {e}"));
        block_on(el.clear()).unwrap_or_else(|e| panic!("clear {selector}: {e}"));
        block_on(el.send_keys(text)).unwrap_or_else(|e| panic!("type into {selector}: {e}"));
    }

    fn active_attr(&self, name: &str) -> Option<String> {
        self.js(&format!(
            "return document.activeElement && document.activeElement.getAttribute({name:?})"
        ))
        .as_str()
        .map(str::to_owned)
    }

    /// A screenshot without the passing toast (for the docs).
    fn screenshot_quiet(&self, name: &str) {
        self.js("document.getElementById('toast').hidden = true; return null");
        self.screenshot(name);
        self.js("document.getElementById('toast').hidden = false; return null");
    }

    fn screenshot(&self, name: &str) {
        let png = block_on(self.wd.screenshot()).expect("a screenshot");
        let dir = screenshots();
        std::fs::create_dir_all(&dir).expect("the screenshot directory");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("a screenshot file");
    }

    /// The axe-core audit of the page as it is: its serious and critical findings.
    fn audit(&self) -> Vec<Value> {
        let path = support::fixture("BERTH_TEST_AXE_JS");
        let axe = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{path}: {e}; scripts/fixtures fetches axe-core from PyPI's axe-selenium-python")
        });
        block_on(self.wd.execute(&format!("{axe}\n;return true;"), vec![])).expect("axe loads");
        let found = block_on(self.wd.execute_async(
            r#"const done = arguments[arguments.length - 1];
               axe.run(document, { resultTypes: ['violations'] })
                 .then((r) => done(r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
                   nodes: v.nodes.map((n) => n.target.join(' ')) }))))
                 .catch((e) => done([{ id: 'axe-failed', impact: 'critical', help: String(e) }]));"#,
            vec![],
        ))
        .expect("axe runs");
        found
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|v| v["impact"] == "serious" || v["impact"] == "critical")
            .collect()
    }

    /// What the hooks recorded: console errors, CSP violations, fetches.
    fn recorded(&self) -> Value {
        self.js("return window.__berthTest")
    }

    /// Asserts the page logged no error and violated no CSP directive, by its own hooks and by
    /// the browser's log.
    fn assert_clean(&self, view: &str) {
        let recorded = self.recorded();
        assert_eq!(recorded["errors"], json!([]), "{view}: console errors");
        assert_eq!(recorded["csp"], json!([]), "{view}: CSP violations");
        let severe: Vec<Value> = self
            .console()
            .into_iter()
            .filter(|e| e["level"] == "SEVERE" || e["level"] == "WARNING")
            // Chromium cancels a request in flight when the host's interfaces change, and
            // the engine adds and removes veth interfaces as containers start and stop (the
            // tests' helpers among them): that is the machine's, not the page's.
            .filter(|e| {
                !e["message"]
                    .as_str()
                    .is_some_and(|m| m.ends_with("net::ERR_NETWORK_CHANGED"))
            })
            .collect();
        assert!(severe.is_empty(), "{view}: the browser logged {severe:?}");
    }

    fn close(self) {
        let _ = block_on(self.wd.close());
    }
}

fn screenshots() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots")
}

/// A sign-in link for `key`.
fn sign_in_link(client: &Client) -> String {
    let link = client.answer(|c| c.sign_in_link()).expect(200);
    assert!(link["expiresAt"].is_string(), "{link}");
    link["url"].as_str().expect("a url").to_owned()
}

fn code_of(url: &str) -> String {
    url.split_once("#code=")
        .expect("a code in the fragment")
        .1
        .to_owned()
}

#[test]
fn a_page_signed_in_by_a_link_shows_a_domain_live_and_acts_from_the_keyboard() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    let mut web = spec(&busybox_image(), "web");
    web["worktreeKey"] = json!("feature-a");
    api.up(&domain, "web", &web, "person").expect(200);
    let mut cache = spec(&echo_image(), "cache");
    cache["ready"] = json!({"kind": "tcp", "port": 7000});
    cache["volumes"] = json!([]);
    api.up(&domain, "cache", &cache, "person").expect(200);
    api.wait_state(&domain, "web", "running", READY);
    api.wait_state(&domain, "cache", "running", READY);

    // Sign in with a link; its code leaves the address bar and works once.
    let link = sign_in_link(&api);
    assert!(
        link.starts_with(&format!("{}/ui/#code=", daemon.base)),
        "{link}"
    );
    let browser = Browser::start();
    browser.goto(&link);
    browser.wait(
        "document.querySelector('h1') && document.querySelector('h1').textContent === 'Projects'",
        "the projects",
    );
    let address = block_on(browser.wd.current_url())
        .expect("the url")
        .to_string();
    assert!(
        !address.contains("code"),
        "the code left the address bar: {address}"
    );
    let code = code_of(&link);
    support::refused(
        api.call(|c| c.create_session(&code)),
        401,
        "UiSignInCodeInvalidError",
    );
    browser.wait("document.querySelector('a.card.domain')", "the domain card");
    assert!(browser.text("ul.domains").contains("shop"));
    browser.screenshot("projects");
    let findings = browser.audit();
    assert!(findings.is_empty(), "projects: {findings:#?}");

    // The domain: its instances grouped by worktree, the shared ones apart, in one request.
    browser.click("a.card.domain");
    browser.wait(
        "document.querySelector('tr[data-key=\"web\"] [data-state=\"running\"]') && document.querySelector('tr[data-key=\"cache\"] [data-state=\"running\"]')",
        "web and cache running",
    );
    let page = browser.text("main");
    assert!(page.contains("worktree feature-a"), "{page}");
    assert!(page.contains("Shared by every worktree"), "{page}");
    browser.wait(
        "document.querySelector('tr[data-key=\"cache\"] .endpoint code')",
        "cache's host endpoint",
    );
    let endpoint = browser.text("tr[data-key=\"cache\"] .endpoint code");
    assert!(endpoint.starts_with("127.0.0.1:"), "{endpoint}");
    let fetched: Vec<String> =
        serde_json::from_value(browser.recorded()["fetches"].clone()).expect("the fetches");
    let lists = fetched
        .iter()
        .filter(|u| u.contains("/summary") || u.ends_with("/instances"))
        .count();
    assert_eq!(lists, 1, "one request for the list: {fetched:?}");
    assert!(
        !fetched.iter().any(|u| u.contains("/instances/")),
        "no request per instance: {fetched:?}"
    );
    browser.wait(
        "document.querySelector('#sizes-note button')",
        "the volume sizes measured",
    );
    browser.screenshot("domain");
    browser.cdp(
        "Emulation.setEmulatedMedia",
        json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
    );
    browser.screenshot("domain-dark");
    let findings = browser.audit();
    assert!(findings.is_empty(), "domain, dark: {findings:#?}");
    browser.cdp("Emulation.setEmulatedMedia", json!({"features": []}));
    let findings = browser.audit();
    assert!(findings.is_empty(), "domain: {findings:#?}");

    // An up through the API appears, and reaches running, without a reload.
    browser.js("window.__sameDocument = true; return null");
    let mut jobs = spec(&busybox_image(), "jobs");
    jobs["volumes"] = json!([]);
    api.up(&domain, "jobs", &jobs, "person").expect(200);
    browser.wait(
        "document.querySelector('tr[data-key=\"jobs\"] [data-state=\"running\"]')",
        "jobs running",
    );
    assert_eq!(
        browser.js("return window.__sameDocument === true"),
        json!(true)
    );
    // Its first running asks once for its host endpoints: wait for them, so the quiet span
    // below starts after that request, not before it.
    browser.wait(
        "document.querySelector('tr[data-key=\"jobs\"] .endpoint code')",
        "jobs' host endpoint",
    );

    // Nothing changes: the page asks nothing. A bounded wait for what must NOT happen.
    let before = browser.recorded()["fetches"]
        .as_array()
        .map(Vec::len)
        .unwrap();
    let span = block_on(browser.wd.execute_async(
        r#"const done = arguments[arguments.length - 1];
           const start = performance.now();
           setTimeout(() => done({
             fetches: window.__berthTest.fetches.length,
             resources: performance.getEntriesByType('resource').filter((e) => e.startTime >= start).map((e) => e.name),
           }), 6000);"#,
        vec![],
    ))
    .expect("the quiet span");
    assert_eq!(
        span["fetches"],
        json!(before),
        "no request while nothing changes"
    );
    assert_eq!(
        span["resources"],
        json!([]),
        "no resource loaded while nothing changes"
    );

    // Stop jobs with the keyboard alone: Tab to its Stop button, press Enter.
    let container = support::container_of(&api.instance(&domain, "jobs"));
    browser.js("document.querySelector('main h1').focus(); return null");
    let mut presses = 0;
    while browser.active_attr("data-action").as_deref() != Some("stop:jobs") {
        browser.press(Key::Tab);
        presses += 1;
        assert!(presses < 80, "Tab never reached jobs' Stop button");
    }
    browser.press(Key::Enter);
    wait_until(READY, "jobs' container stopped", || {
        docker_inspect("container", &container).is_some_and(|c| c["State"]["Running"] == false)
    });
    browser.wait(
        "document.querySelector('tr[data-key=\"jobs\"] [data-state=\"stopped\"]')",
        "jobs stopped",
    );
    assert!(
        browser
            .text("tr[data-key=\"jobs\"]")
            .contains("by the web page")
    );
    // The focus stays on the row's action: Start now.
    assert_eq!(
        browser.active_attr("data-action").as_deref(),
        Some("start:jobs")
    );

    // The instance page: its logs follow what the container writes after the page opened.
    browser.click("tr[data-key=\"web\"] a.key");
    browser.wait("document.querySelector('#logs')", "web's logs");
    browser.wait(
        "document.querySelector('#log-status').textContent.startsWith('Following')",
        "the logs following",
    );
    let marker = format!("ui-log-line-{}", std::process::id());
    api.exec(
        &domain,
        "web",
        &["sh", "-c", &format!("echo {marker} > /proc/1/fd/1")],
        None,
        30_000,
        b"",
    )
    .expect(200);
    browser.wait(
        &format!("document.querySelector('#logs').textContent.includes('{marker}')"),
        "the log line",
    );
    browser.wait(
        "document.querySelector('dl.details') && document.querySelector('#releases-h')",
        "web's details",
    );

    // Its snapshots: one taken through the API appears when its copy's event says it is done,
    // without a reload.
    browser.wait(
        "document.querySelector('#snapshots-h') && \
         document.querySelector('#snapshots-h').parentElement.textContent.includes('No snapshot yet')",
        "web's empty snapshot list",
    );
    block_on(
        api.api()
            .snapshot(&support::domain_id(&domain), "web", "before-ui"),
    )
    .expect("a snapshot");
    browser.wait(
        "[...document.querySelectorAll('#snapshots-h ~ div tbody tr')].some((tr) => \
         tr.textContent.includes('before-ui') && tr.textContent.includes('ready'))",
        "the snapshot, ready, on the page",
    );
    browser.screenshot("instance");
    let findings = browser.audit();
    assert!(findings.is_empty(), "instance: {findings:#?}");

    // No cookie, ever.
    let cookies = block_on(browser.wd.get_all_cookies()).expect("the cookies");
    assert!(cookies.is_empty(), "{cookies:?}");
    assert_eq!(browser.js("return document.cookie"), json!(""));
    browser.assert_clean("the whole visit");

    // The page's files carry the CSP, and no response sets a cookie.
    let page = reqwest::blocking::get(format!("{}/ui/", daemon.base)).expect("the page");
    let csp = page.headers()["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("script-src 'self'") && csp.contains("default-src 'none'"));
    assert!(page.headers().get("set-cookie").is_none());
    browser.close();
    // No code or token reached the log.
    let log = daemon.log_text();
    assert!(!log.contains(&code_of(&link)), "the code is in the log");
}

/// Runs `argv` in an instance and answers its trimmed standard output.
fn exec_ok(api: &Client, domain: &str, key: &str, argv: &[&str]) -> String {
    let result = api.exec(domain, key, argv, None, 60_000, b"").expect(200);
    assert_eq!(result["exitCode"], 0, "{argv:?}: {result}");
    result["stdout"].as_str().unwrap().trim().to_owned()
}

#[test]
fn an_instance_page_shows_sizes_connect_string_last_failure_and_origin_and_restores_branches_and_rolls_back()
 {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("shop");

    // db fails first (its image's digest is not in the registry), then runs: its failure is
    // kept after it recovers.
    let registry = support::fixture("BERTH_TEST_REGISTRY");
    let missing = format!(
        "{registry}/berth-fixtures/busybox@sha256:{}",
        "0".repeat(64)
    );
    let mut db = spec(&missing, "db");
    api.up(&domain, "db", &db, "person").expect(200);
    let failed = api.wait_state(&domain, "db", "failed", READY);
    let failure = failed["state"]["message"]
        .as_str()
        .expect("a failure's message")
        .to_owned();
    // A database-like service on 5432 (busybox's httpd there), with its user and database in
    // the env, and a password that must never reach the page.
    db = spec(&busybox_image(), "db");
    db["command"] = json!(["httpd", "-f", "-p", "5432", "-h", "/www"]);
    db["ready"] = json!({"kind": "tcp", "port": 5432});
    db["env"] = json!({"POSTGRES_USER": "app", "POSTGRES_DB": "shop", "POSTGRES_PASSWORD": "not-on-the-page"});
    api.up(&domain, "db", &db, "person").expect(200);
    let first = api.wait_state(&domain, "db", "running", READY);
    let first_digest = first["specDigest"].as_str().unwrap().to_owned();
    exec_ok(
        &api,
        &domain,
        "db",
        &["sh", "-c", "echo v1 > /srv/data/note"],
    );
    let did = domain_id(&domain);
    let summary = api.answer(|c| c.summary(&did)).expect(200);
    let entry = summary["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["instance"]["key"] == "db")
        .expect("db in the summary")
        .clone();
    assert_eq!(entry["lastFailure"]["message"], json!(failure), "{entry}");
    assert_eq!(entry["branchedFrom"], Value::Null, "{entry}");
    let host_port = entry["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["port"] == 5432)
        .expect("db's 5432 endpoint")["hostPort"]
        .as_u64()
        .unwrap();
    let connect = format!("postgres://app:PASSWORD@127.0.0.1:{host_port}/shop");
    let failure_start: String = failure.chars().take(40).collect();

    let browser = Browser::start();
    browser.goto(&sign_in_link(&api));
    browser.wait("document.querySelector('a.card.domain')", "the domain card");
    browser.click("a.card.domain");

    // The domain: db's connect string from its env (no password), its last failure with its
    // time, and its volume's size from one request besides the summary.
    browser.wait(
        "document.querySelector('tr[data-key=\"db\"] [data-state=\"running\"]')",
        "db running",
    );
    browser.wait(
        "document.querySelector('tr[data-key=\"db\"] li[data-volume=\"data\"] .size')",
        "db's volume size",
    );
    // The engine refuses a disk-usage report while another runs (another test's daemon may be
    // asking): an unmeasured size is asked for again with Measure again, a few times.
    let size = "document.querySelector('tr[data-key=\"db\"] li[data-volume=\"data\"] .size').dataset.bytes";
    let mut bytes = browser.js(&format!("return {size}"));
    for _ in 0..5 {
        if bytes != json!("") {
            break;
        }
        let measured = browser
            .js("return document.querySelector('#sizes-note time').getAttribute('datetime')");
        let measured = measured.as_str().expect("when the sizes were measured");
        browser.click("#sizes-note button");
        browser.wait(
            &format!(
                "document.querySelector('#sizes-note time') && \
                 document.querySelector('#sizes-note time').getAttribute('datetime') !== '{measured}'"
            ),
            "the sizes measured again",
        );
        bytes = browser.js(&format!("return {size}"));
    }
    let bytes: u64 = bytes
        .as_str()
        .and_then(|b| b.parse().ok())
        .unwrap_or_else(|| panic!("a measured size: {bytes}"));
    assert!(bytes >= 3, "the volume holds a file of 3 bytes: {bytes}");
    let row = browser.text("tr[data-key=\"db\"]");
    assert!(row.contains(&connect), "{row}");
    assert!(!row.contains("not-on-the-page"), "{row}");
    assert!(row.contains("Last failure"), "{row}");
    assert!(row.contains(&failure_start), "{row}\n{failure}");
    assert_eq!(
        browser.js(
            "return !!document.querySelector('tr[data-key=\"db\"] button[aria-label=\"Copy connect string for db port 5432\"]')"
        ),
        json!(true),
        "a copy button for the connect string"
    );
    // The password is masked on the screen and copied whole (this key may exec in the domain).
    browser
        .click("tr[data-key=\"db\"] button[aria-label=\"Copy connect string for db port 5432\"]");
    browser.wait(
        "window.__berthTest.copied.length > 0",
        "the connect string copied",
    );
    let full = format!("postgres://app:not-on-the-page@127.0.0.1:{host_port}/shop");
    assert_eq!(browser.recorded()["copied"], json!([full]));
    let shown = browser.text("body");
    assert!(!shown.contains("not-on-the-page"), "{shown}");
    let fetched: Vec<String> =
        serde_json::from_value(browser.recorded()["fetches"].clone()).expect("the fetches");
    assert_eq!(
        fetched.iter().filter(|u| u.contains("/summary")).count(),
        1,
        "{fetched:?}"
    );
    assert_eq!(
        fetched
            .iter()
            .filter(|u| u.contains("/volume-usage"))
            .count(),
        1,
        "one request for the sizes: {fetched:?}"
    );
    assert!(
        !fetched.iter().any(|u| u.contains("/instances/")),
        "{fetched:?}"
    );

    // db's page: the same, and its snapshots, taken from the form.
    browser.click("tr[data-key=\"db\"] a.key");
    browser.wait(
        "document.querySelector('#snapshot-name')",
        "the snapshot form",
    );
    browser.wait(
        "document.querySelector('#last-failure')",
        "db's last failure",
    );
    assert!(browser.text("#last-failure").contains(&failure_start));
    assert!(browser.text("dl.details").contains("not a branch"));
    browser.fill("#snapshot-name", "v1");
    browser.press(Key::Enter);
    browser.wait(
        "[...document.querySelectorAll('tr[data-snapshot=\"v1\"]')].some((tr) => tr.textContent.includes('ready'))",
        "the snapshot v1, ready",
    );
    let did = domain_id(&domain);
    let snapshots = api
        .call(|c| c.snapshots(&did, Some("db")))
        .expect("the snapshots");
    let v1 = snapshots
        .iter()
        .find(|s| s.name == "v1")
        .expect("v1 through the API")
        .snapshot_id
        .as_str()
        .to_owned();

    // Restore it over newer contents: the confirmation says what is kept.
    exec_ok(
        &api,
        &domain,
        "db",
        &["sh", "-c", "echo v2 > /srv/data/note"],
    );
    browser.click("tr[data-snapshot=\"v1\"] [data-action^=\"restore:\"]");
    browser.wait(
        "document.querySelector('#confirm[open]')",
        "the restore's confirmation",
    );
    let confirmation = browser.text("#confirm-body");
    assert!(
        confirmation.contains("kept first, as a before-restore snapshot"),
        "{confirmation}"
    );
    browser.click("#confirm-ok");
    browser.wait(
        "document.querySelector('#copy-status').textContent === 'The restore is done.'",
        "the restore done, from the copy's events",
    );
    browser.wait(
        "[...document.querySelectorAll('tr[data-snapshot]')].some((tr) => tr.dataset.snapshot.startsWith('before-restore-'))",
        "the before-restore snapshot listed",
    );
    api.settled(&domain, "db", &["running"], READY);
    assert_eq!(
        exec_ok(&api, &domain, "db", &["cat", "/srv/data/note"]),
        "v1"
    );
    // The logs follow the container the restore started.
    browser.wait(
        "document.querySelector('#log-status').textContent.startsWith('Following')",
        "the logs following the restarted container",
    );
    browser.js("document.querySelector('#snapshots-h').scrollIntoView(); return null");
    browser.screenshot_quiet("instance-snapshots");

    // Branch a new instance from the snapshot, in its own worktree, from the page.
    browser.click("tr[data-snapshot=\"v1\"] [data-action^=\"branch:\"]");
    browser.wait("document.querySelector('#branch[open]')", "the branch form");
    browser.fill("#branch-key", "db-fix");
    browser.fill("#branch-worktree", "fix");
    let findings = browser.audit();
    assert!(findings.is_empty(), "the branch form: {findings:#?}");
    // Enter in a field branches.
    browser.press(Key::Enter);
    browser.wait(
        "document.querySelector('#copy-status').textContent.startsWith('The branch db-fix is done')",
        "the branch done, from the copy's events",
    );
    api.wait_state(&domain, "db-fix", "running", READY);
    assert_eq!(
        exec_ok(&api, &domain, "db-fix", &["cat", "/srv/data/note"]),
        "v1"
    );
    let fix = api.instance(&domain, "db-fix");
    assert_eq!(fix["worktreeKey"], "fix", "{fix}");
    browser.click("#copy-status a");
    browser.wait(
        "document.querySelector('h1') && document.querySelector('h1').textContent === 'db-fix' && \
         document.querySelector('#origin')",
        "db-fix's page with its origin",
    );
    let origin = browser.text("#origin");
    assert!(
        origin.contains("branched from snapshot v1 of db"),
        "{origin}"
    );
    let details = browser.text("dl.details");
    assert!(details.contains("snapshot v1 of db"), "{details}");
    let summary = api.answer(|c| c.summary(&did)).expect(200);
    let fix = summary["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["instance"]["key"] == "db-fix")
        .expect("db-fix in the summary");
    assert_eq!(fix["branchedFrom"]["snapshotId"], json!(v1), "{fix}");
    assert_eq!(fix["branchedFrom"]["snapshotName"], "v1", "{fix}");
    assert_eq!(fix["branchedFrom"]["state"], "done", "{fix}");
    browser.js("window.scrollTo(0, 0); return null");
    browser.screenshot_quiet("instance-branch");
    let findings = browser.audit();
    assert!(findings.is_empty(), "db-fix: {findings:#?}");

    // A second release of db, then a rollback from its page: it runs the first spec again.
    db["env"]["GREETING"] = json!("second release");
    api.up(&domain, "db", &db, "person").expect(200);
    api.wait_for(&domain, "db", READY, "db's second release running", |i| {
        i["specDigest"] != json!(first_digest) && i["state"]["kind"] == "running"
    });
    browser.goto(&format!("{}/ui/#/d/{domain}/i/db", daemon.base));
    browser.wait(
        "document.querySelectorAll('table.releases tbody tr').length === 2",
        "db's two releases",
    );
    // With the keyboard alone: Tab to Roll back, Enter; the confirmation starts on Cancel, so
    // Tab to Roll back there and Enter.
    browser.js("document.querySelector('main h1').focus(); return null");
    let mut presses = 0;
    while browser.active_attr("data-action").as_deref() != Some("rollback:db") {
        browser.press(Key::Tab);
        presses += 1;
        assert!(presses < 40, "Tab never reached db's Roll back button");
    }
    browser.press(Key::Enter);
    browser.wait(
        "document.querySelector('#confirm[open]')",
        "the rollback's confirmation",
    );
    assert!(
        browser
            .text("#confirm-body")
            .contains("Every volume is kept")
    );
    assert_eq!(browser.active_attr("id").as_deref(), Some("confirm-cancel"));
    browser.press(Key::Tab);
    assert_eq!(browser.active_attr("id").as_deref(), Some("confirm-ok"));
    browser.press(Key::Enter);
    let back = api.wait_for(&domain, "db", READY, "db back on its first release", |i| {
        i["specDigest"] == json!(first_digest) && i["state"]["kind"] == "running"
    });
    assert_eq!(back["specDigest"], json!(first_digest));
    let short = first_digest.trim_start_matches("sha256:")[..12].to_owned();
    browser.wait(
        &format!(
            "[...document.querySelectorAll('table.releases tbody tr')].some((tr) => \
             tr.textContent.includes('{short}') && tr.textContent.includes('current')) && \
             document.querySelector('dl.details').textContent.includes('{short}')"
        ),
        "the first release current on the page",
    );
    assert_eq!(
        exec_ok(&api, &domain, "db", &["cat", "/srv/data/note"]),
        "v1"
    );
    browser.js("window.scrollTo(0, 0); return null");
    browser.screenshot_quiet("instance-actions");
    let findings = browser.audit();
    assert!(findings.is_empty(), "db: {findings:#?}");
    browser.cdp(
        "Emulation.setEmulatedMedia",
        json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
    );
    browser.screenshot_quiet("instance-dark");
    let findings = browser.audit();
    assert!(findings.is_empty(), "db, dark: {findings:#?}");
    browser.cdp("Emulation.setEmulatedMedia", json!({"features": []}));

    // Back on the project: db-fix says where it came from, and its volume is measured too.
    browser.click("#crumbs a[href^=\"#/d/\"]");
    browser.wait(
        "document.querySelector('tr[data-key=\"db-fix\"] li[data-volume=\"data\"] .size') && \
         document.querySelector('tr[data-key=\"db\"] li[data-volume=\"data\"] .size')",
        "both volumes' sizes",
    );
    let row = browser.text("tr[data-key=\"db-fix\"]");
    assert!(row.contains("branched from snapshot v1 of db"), "{row}");
    browser.screenshot_quiet("domain-actions");
    let findings = browser.audit();
    assert!(findings.is_empty(), "the project: {findings:#?}");
    let cookies = block_on(browser.wd.get_all_cookies()).expect("the cookies");
    assert!(cookies.is_empty(), "{cookies:?}");
    browser.assert_clean("the instance page's actions");
    browser.close();
}

#[test]
fn another_keys_session_sees_none_of_the_first_keys_domains_and_sign_out_revokes() {
    let daemon = Daemon::start_logging(&["--runtime", "none"], "trace");
    let first = daemon.client();
    let domain = first.create_domain("first-key-project");
    let other = daemon.client_with(Some(OTHER_KEY));
    assert_ne!(KEY, OTHER_KEY);

    let browser = Browser::start();
    // The sign-in form takes a service key too: the other key's.
    browser.goto(&format!("{}/ui/", daemon.base));
    browser.wait("document.querySelector('#key')", "the sign-in form");
    browser.screenshot("sign-in");
    let findings = browser.audit();
    assert!(findings.is_empty(), "sign-in: {findings:#?}");
    let input = block_on(browser.wd.find(Locator::Css("#key"))).expect("the key field");
    block_on(input.send_keys(OTHER_KEY)).expect("typing");
    browser.press(Key::Enter);
    browser.wait(
        "document.querySelector('.empty') && document.querySelector('h1').textContent === 'Projects'",
        "the empty state",
    );
    let page = browser.text("main");
    assert!(!page.contains("first-key-project"), "{page}");
    assert!(
        page.contains("berth up"),
        "the empty state says what to run: {page}"
    );
    browser.screenshot("projects-empty");
    // Its token, asked directly, does not reach the first key's domain either.
    let token = browser.js("return sessionStorage.getItem('berth.session')");
    let token = token.as_str().expect("a session token").to_owned();
    let as_page = Client::new(&daemon.base, Some(&token));
    let did = domain_id(&domain);
    support::refused(
        as_page.call(|c| c.summary(&did)),
        403,
        "ResourceDomainForbiddenError",
    );
    assert_eq!(as_page.call(|c| c.domains()).expect("the domains"), vec![]);
    // A session cannot ask for sign-in links of its own.
    support::refused(
        as_page.call(|c| c.sign_in_link()),
        403,
        "UiServiceKeyRequiredError",
    );
    browser.goto(&format!("{}/ui/#/d/{domain}", daemon.base));
    browser.wait(
        "document.querySelector('h1') && document.querySelector('h1').textContent === 'Not found'",
        "the refusal",
    );
    assert!(!browser.text("main").contains("first-key-project"));

    // Signing out revokes the token.
    browser.click("#sign-out");
    browser.wait("document.querySelector('#key')", "the sign-in form again");
    support::refused(as_page.call(|c| c.domains()), 401, "UnauthorizedError");
    assert_eq!(
        browser.js("return sessionStorage.getItem('berth.session')"),
        Value::Null
    );
    let cookies = block_on(browser.wd.get_all_cookies()).expect("the cookies");
    assert!(cookies.is_empty(), "{cookies:?}");
    assert_eq!(browser.recorded()["csp"], json!([]), "CSP violations");
    let link = sign_in_link(&other);
    let log = daemon.log_text();
    assert!(!log.contains(&token) && !log.contains(&code_of(&link)));
    browser.close();
}

#[test]
fn berth_ui_prints_or_opens_a_link_that_signs_in_once() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let berth = |args: &[&str], env: &[(&str, &str)]| {
        let out = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args(args)
            .env("BERTH_URL", &daemon.base)
            .env("BERTH_SERVICE_KEYS", KEY)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("berth runs");
        assert!(out.status.success(), "{out:?}");
        out
    };
    let printed = berth(&["ui", "--print"], &[]);
    let url = String::from_utf8(printed.stdout).expect("text");
    let url = url.trim();
    assert!(
        url.starts_with(&format!("{}/ui/#code=", daemon.base)),
        "{url}"
    );
    let anonymous = Client::new(&daemon.base, None);
    let code = code_of(url);
    let session = anonymous.answer(|c| c.create_session(&code)).expect(200);
    let token = session["token"].as_str().expect("a token");
    assert!(session["expiresAt"].is_string());
    Client::new(&daemon.base, Some(token))
        .call(|c| c.domains())
        .expect("the session's domains");
    support::refused(
        anonymous.call(|c| c.create_session(&code)),
        401,
        "UiSignInCodeInvalidError",
    );
    // Raw on purpose: a code no client would send.
    anonymous
        .post("/v1/ui/sessions", json!({"code": 7}))
        .expect_error(400, "RequestRefusedError");

    // Without --print, the link goes to $BROWSER.
    let dir = tempfile::tempdir().expect("a directory");
    let opener = dir.path().join("opener");
    let seen = dir.path().join("seen");
    std::fs::write(
        &opener,
        format!("#!/bin/sh\nprintf '%s' \"$1\" > '{}'\n", seen.display()),
    )
    .expect("the opener");
    Command::new("chmod")
        .args(["755"])
        .arg(&opener)
        .status()
        .expect("chmod");
    let opened = berth(&["ui"], &[("BROWSER", opener.to_str().unwrap())]);
    assert!(
        opened.stdout.is_empty(),
        "the link is not printed when opened"
    );
    let link = std::fs::read_to_string(&seen).expect("the opener got the link");
    assert!(
        link.starts_with(&format!("{}/ui/#code=", daemon.base)),
        "{link}"
    );
    let code = code_of(&link);
    anonymous
        .call(|c| c.create_session(&code))
        .expect("a session");
}

#[test]
fn a_link_from_berth_ui_in_a_repository_signs_in_and_shows_that_project() {
    let daemon = Daemon::start_with(&["--runtime", "none"]);
    let api = daemon.client();
    api.create_domain("other");
    let domain = api.create_domain("shop");
    // What `berth ui` opens in a repository whose domain exists (tests/it/cli.rs checks the
    // command's side): the link, then the project to show.
    let link = format!("{}&open=d/{domain}", sign_in_link(&api));
    let browser = Browser::start();
    browser.goto(&link);
    browser.wait(
        "document.querySelector('h1') && document.querySelector('h1').textContent === 'shop'",
        "the project's page",
    );
    let address = block_on(browser.wd.current_url())
        .expect("the url")
        .to_string();
    assert!(
        address.ends_with(&format!("/ui/#/d/{domain}")),
        "the page shows the project, and the code left the address bar: {address}"
    );
    // An `open` that is no project's page is not followed: the list shows.
    browser.goto("about:blank");
    browser.goto(&format!("{}&open=javascript:alert(1)", sign_in_link(&api)));
    browser.wait(
        "document.querySelector('h1') && document.querySelector('h1').textContent === 'Projects'",
        "the projects",
    );
    browser.close();
}

#[test]
fn a_page_signed_in_with_a_read_and_link_key_shows_no_button_its_key_may_not_use() {
    const IDE_KEY: &str = "test-key-ide-plugin-cccccccc";
    let grants = format!(
        "[keys.{}]\nactsFor = \"{}\"\ncapabilities = [\"read\", \"workspaces:link\"]\n",
        support::key_id(IDE_KEY),
        support::key_id(KEY)
    );
    let daemon = support::Launch::new()
        .keys(&[KEY, IDE_KEY])
        .grants(&grants)
        .start();
    let api = daemon.client();
    let domain = api.create_domain("shop");
    api.up(&domain, "web", &spec(&busybox_image(), "web"), "person")
        .expect(200);
    api.wait_state(&domain, "web", "running", READY);
    block_on(
        api.api()
            .snapshot(&support::domain_id(&domain), "web", "before"),
    )
    .expect("a snapshot");

    let ide = daemon.client_with(Some(IDE_KEY));
    let browser = Browser::start();
    browser.goto(&format!("{}&open=d/{domain}", sign_in_link(&ide)));
    browser.wait(
        "document.querySelector('tr[data-key=\"web\"] [data-state=\"running\"]')",
        "web running on the plugin's page",
    );
    let none = |selector: &str| {
        let found = browser.js(&format!(
            "return document.querySelectorAll('{selector}').length"
        ));
        assert_eq!(found, json!(0), "{selector} on a read-and-link page");
    };
    none("[data-action^=\"stop:\"], [data-action^=\"start:\"]");
    browser.goto(&format!("{}/ui/#/d/{domain}/i/web", daemon.base));
    browser.wait(
        "[...document.querySelectorAll('tr[data-snapshot=\"before\"]')].some((tr) => tr.textContent.includes('ready'))",
        "the instance page with its snapshot, ready",
    );
    none("[data-action^=\"stop:\"], [data-action^=\"archive:\"], [data-action^=\"rollback:\"]");
    none("[data-action^=\"snapshot:\"], [data-action^=\"restore:\"], [data-action^=\"branch:\"]");
    browser.screenshot("read-and-link");
    let findings = browser.audit();
    assert!(findings.is_empty(), "read-and-link page: {findings:#?}");

    // The page's session acts as the plugin's key, grants and all, not as the key it acts for.
    let token = browser.js("return sessionStorage.getItem('berth.session')");
    let as_page = Client::new(&daemon.base, Some(token.as_str().expect("a session token")));
    let did = domain_id(&domain);
    let refused = support::refused(
        as_page.call(|c| c.stop(&did, "web", "the web page")),
        403,
        "ServiceKeyCapabilityMissingError",
    );
    assert_eq!(refused["capability"], "instances:lifecycle");
    assert_eq!(api.instance(&domain, "web")["state"]["kind"], "running");
    browser.close();
}

#[test]
fn worktrees_are_labelled_by_branch_and_a_removed_one_says_so() {
    let daemon = Daemon::start();
    let api = daemon.client();
    // Named as the CLI names a repository's domain: the hash of its path stays off the page.
    let domain = api.create_domain("shop 1a2b3c4d");
    let id = support::domain_id(&domain);
    let worktree = tempfile::tempdir().expect("a worktree's directory");
    std::fs::write(worktree.path().join(".git"), "gitdir: /elsewhere\n").expect("its .git");
    let told = block_on(api.api().put_worktree(
        &id,
        "fix-login-9f8e7d6c",
        &berth_client::WorktreeRequest {
            path: worktree.path().to_string_lossy().into_owned(),
            branch: Some("fix/login".to_owned()),
        },
    ))
    .expect("the worktree told of");
    assert!(told.watched && told.ended_at.is_none(), "{told:?}");
    // A second generation's key, as the CLI makes after an archive.
    let mut web = spec(&busybox_image(), "web");
    web["worktreeKey"] = json!("fix-login-9f8e7d6c");
    web["volumes"] = json!([]);
    let key = "web.2@fix-login-9f8e7d6c";
    api.up(&domain, key, &web, "person").expect(200);
    api.wait_state(&domain, key, "running", READY);

    let browser = Browser::start();
    browser.goto(&sign_in_link(&api));
    browser.wait("document.querySelector('a.card.domain')", "the domain card");
    assert_eq!(browser.text("a.card.domain .name"), "shop");
    browser.click("a.card.domain");
    let row = format!("tr[data-key=\"{key}\"]");
    browser.wait(
        &format!("document.querySelector('{row} [data-state=\"running\"]')"),
        "web running",
    );
    let page = browser.text("main");
    assert!(page.contains("worktree fix/login"), "{page}");
    assert_eq!(browser.text(&format!("{row} a.key")), "web");
    for hash in ["1a2b3c4d", "9f8e7d6c", "web.2"] {
        assert!(!page.contains(hash), "{hash} on the page: {page}");
    }

    // The worktree goes (as `git worktree remove` takes its directory): berth stops its
    // instance, and the page says why, live.
    drop(worktree);
    let stopped = api.wait_state(&domain, key, "stopped", READY);
    assert_eq!(
        stopped["stopReason"]["by"], "berth: its worktree was removed",
        "{stopped}"
    );
    assert!(stopped["worktree"]["endedAt"].is_string(), "{stopped}");
    browser.wait(
        "[...document.querySelectorAll('h2')].some((h) => h.textContent.includes('fix/login') && h.textContent.includes('removed'))",
        "the removed worktree's heading",
    );
    let findings = browser.audit();
    assert!(findings.is_empty(), "a removed worktree: {findings:#?}");
    browser.close();
}

#[test]
fn the_pools_section_shows_each_pools_ready_and_leased_instances_live() {
    let daemon = Daemon::start();
    let api = daemon.client();
    let domain = api.create_domain("pools");
    api.post(
        &format!("/v1/resource-domains/{domain}/pools"),
        json!({"name": "web", "spec": spec(&busybox_image(), "web"), "from": {"template": true}, "size": 1}),
    )
    .expect(201);

    let browser = Browser::start();
    browser.goto(&sign_in_link(&api));
    browser.wait("document.querySelector('a.card.domain')", "the domain card");
    browser.click("a.card.domain");
    // Columns: the pool's name, from, size, ready, being made, leased, note.
    let cell = |n: usize| {
        format!("document.querySelector('tr[data-pool=\"web\"] > :nth-child({n})')?.textContent")
    };
    browser.wait(
        &format!("{} === '1'", cell(4)),
        "the pool's one instance ready, live",
    );
    assert_eq!(
        browser.text("tr[data-pool=\"web\"] > :nth-child(2)"),
        "template"
    );
    assert_eq!(browser.text("tr[data-pool=\"web\"] > :nth-child(3)"), "1");

    // A lease takes it: the page counts it leased, live, and the pool makes another.
    let lease = api
        .post(
            &format!("/v1/resource-domains/{domain}/pools/web/leases"),
            json!({}),
        )
        .expect(201);
    assert_eq!(lease["instance"]["state"]["kind"], "running", "{lease}");
    browser.wait(&format!("{} === '1'", cell(6)), "the lease counted, live");
    browser.wait(&format!("{} === '1'", cell(4)), "the pool refilled, live");
    let findings = browser.audit();
    assert!(findings.is_empty(), "the pools section: {findings:#?}");
    browser.close();
    // Deleting the pool ends its lease and removes what it made.
    block_on(api.api().delete_pool(&domain_id(&domain), "web")).expect("the pool deleted");
}
