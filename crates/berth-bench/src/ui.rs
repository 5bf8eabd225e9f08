//! The web page's first render of a domain with 200 instances, measured in a real headless
//! Chromium (Debian's `chromium` and `chromium-driver`) with the Performance API.
//!
//! 200 busybox instances run in a domain of their own. Chromium, signed in once through a
//! sign-in link, loads `/ui/#/d/<domain>` afresh for each sample (from `about:blank`, so every
//! file and request is made again; the session token stays in the tab's sessionStorage). The
//! figure is the page's `berth:domain-rendered` mark, which it sets once the 200 rows are in
//! the document: milliseconds from the start of the navigation, by the page's own clock. The
//! baseline is, in the same load, when the last byte of the one summary request arrived: the
//! daemon and the network's share, which no page could beat. The ratio says what the page adds
//! on top; the target is absolute: at most 1 s.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use berth_client::DomainId;
use fantoccini::ClientBuilder;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

use crate::api::small_spec;
use crate::context::Ctx;
use crate::progress;
use crate::report::{Figure, Row, Stat, Target, number};
use crate::stats::median;

pub const NAME: &str = "ui_first_render_200_instances";
const INSTANCES: usize = 200;
const SETUP_CONCURRENCY: usize = 16;
const SETUP_TIMEOUT: Duration = Duration::from_secs(600);
/// The issue's bound on the first render, in ms.
const TARGET_MS: f64 = 1000.0;

/// chromedriver on a free port, killed when dropped.
struct Driver {
    _child: tokio::process::Child,
    url: String,
}

async fn start_driver() -> anyhow::Result<Driver> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let binary = std::env::var("BERTH_TEST_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
    let mut child = tokio::process::Command::new(&binary)
        .arg(format!("--port={port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| {
            format!(
                "{binary} does not start: the ui figure needs Debian's chromium and chromium-driver"
            )
        })?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    loop {
        match lines.next_line().await? {
            Some(line) if line.contains("started successfully") => break,
            Some(_) => {}
            None => bail!("chromedriver ended before it listened"),
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(Driver {
        _child: child,
        url: format!("http://127.0.0.1:{port}"),
    })
}

async fn set_up(ctx: &Ctx, domain: &DomainId) -> anyhow::Result<f64> {
    let started = Instant::now();
    let mut ups = futures_util::stream::iter((0..INSTANCES).map(|i| {
        let key = format!("ui-{i:03}");
        async move {
            ctx.api
                .up(domain, &key, &small_spec(&ctx.image, &key))
                .await
        }
    }))
    .buffer_unordered(SETUP_CONCURRENCY);
    while let Some(up) = ups.next().await {
        up?;
    }
    loop {
        let list = ctx.api.list(domain).await?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let n = items
            .iter()
            .filter(|i| i["state"]["kind"] == "running")
            .count();
        progress::step(NAME, n, INSTANCES);
        if n == INSTANCES {
            break;
        }
        if let Some(failed) = items.iter().find(|i| i["state"]["kind"] == "failed") {
            bail!("an instance failed while setting up: {failed}");
        }
        if started.elapsed() > SETUP_TIMEOUT {
            bail!("only {n} of {INSTANCES} instances were running after {SETUP_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Waits for the page's render mark and reads the load's timings.
const MEASURE: &str = r#"
const done = arguments[arguments.length - 1];
const read = () => {
  const mark = performance.getEntriesByName('berth:domain-rendered')[0];
  const fetches = performance.getEntriesByType('resource')
    .filter((e) => e.initiatorType === 'fetch' && e.startTime <= mark.startTime);
  const summary = fetches.find((e) => e.name.endsWith('/summary'));
  done({
    rendered: mark.startTime,
    summaryEnd: summary ? summary.responseEnd : null,
    summaryBytes: summary ? summary.encodedBodySize : null,
    summaryStart: summary ? summary.startTime : null,
    summaryQueued: summary ? summary.requestStart - summary.startTime : null,
    summaryServer: summary ? summary.responseStart - summary.requestStart : null,
    requests: fetches.map((e) => new URL(e.name).pathname),
    rows: document.querySelectorAll('tbody tr[data-key]').length,
  });
};
if (performance.getEntriesByName('berth:domain-rendered').length) { read(); return; }
const timer = setTimeout(() => done(null), 60000);
new PerformanceObserver((list, observer) => {
  if (list.getEntriesByName('berth:domain-rendered').length) { observer.disconnect(); clearTimeout(timer); read(); }
}).observe({ type: 'mark', buffered: true });
"#;

pub async fn run(ctx: &Ctx, samples: usize) -> anyhow::Result<Figure> {
    let domain = ctx.api.create_domain("berth-bench-ui").await?;
    progress::line(&format!(
        "{NAME}: starting {INSTANCES} instances, {SETUP_CONCURRENCY} ups at a time"
    ));
    let setup = set_up(ctx, &domain).await?;
    let outcome = measure(ctx, &domain, samples).await;
    // The 200 go before the next figure; their volumes (none) and containers are the run's.
    let _ = ctx.api.archive_domain(&domain).await;
    let (rendered, summary_end, notes) = outcome?;
    let mut figure = Figure {
        rows: vec![Row {
            name: NAME.to_owned(),
            unit: "ms",
            berth: Stat::of_samples(&rendered),
            baseline: "summary-response-end",
            base: Stat::of_samples(&summary_end),
            target: Some(Target::ValueAtMost(TARGET_MS)),
        }],
        notes: vec![format!(
            "{INSTANCES} busybox instances in one domain (no volume, 10 millicores, 16 MiB, tcp \
             ready), upped {SETUP_CONCURRENCY} requests at a time: every one was running after \
             {setup:.1} s (not a figure)."
        )],
    };
    figure.notes.extend(notes);
    Ok(figure)
}

async fn measure(
    ctx: &Ctx,
    domain: &DomainId,
    samples: usize,
) -> anyhow::Result<(Vec<f64>, Vec<f64>, Vec<String>)> {
    let driver = start_driver().await?;
    let mut args = vec![
        "--headless=new",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--no-first-run",
    ];
    if unsafe { libc::geteuid() } == 0 {
        args.push("--no-sandbox");
    }
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".into(), json!({"args": args}));
    let wd = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .context("a Chromium session through chromedriver")?;
    let result = async {
        wd.update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
            Some(Duration::from_secs(90)),
            Some(Duration::from_secs(120)),
            Some(Duration::from_secs(0)),
        ))
        .await?;
        let link = ctx.api.sign_in_link().await?;
        let url = link.as_str();
        wd.goto(url).await?;
        let page = url.split_once('#').map_or(url, |(page, _)| page);
        let target = format!("{page}#/d/{domain}");
        let (mut rendered, mut summary_end) = (Vec::new(), Vec::new());
        let (mut starts, mut queued, mut server) = (Vec::new(), Vec::new(), Vec::new());
        let mut last: Value = Value::Null;
        // One load to warm the daemon and the browser's caches of nothing (no-cache), not kept.
        for i in 0..=samples {
            wd.goto("about:blank").await?;
            wd.goto(&target).await?;
            let m = wd.execute_async(MEASURE, vec![]).await?;
            if m.is_null() {
                let text = wd
                    .execute("return document.body.innerText.slice(0, 2000)", vec![])
                    .await
                    .unwrap_or_default();
                bail!("the page did not render the domain within 60 s; it shows: {text}");
            }
            if m["rows"] != json!(INSTANCES) {
                bail!("the page rendered {} rows, not {INSTANCES}", m["rows"]);
            }
            if i > 0 {
                rendered.push(m["rendered"].as_f64().unwrap_or(f64::NAN));
                summary_end.push(m["summaryEnd"].as_f64().unwrap_or(f64::NAN));
                starts.push(m["summaryStart"].as_f64().unwrap_or(f64::NAN));
                queued.push(m["summaryQueued"].as_f64().unwrap_or(f64::NAN));
                server.push(m["summaryServer"].as_f64().unwrap_or(f64::NAN));
                progress::step(NAME, i, samples);
            }
            last = m;
        }
        let requests = last["requests"].as_array().cloned().unwrap_or_default();
        let max = |v: &[f64]| v.iter().copied().fold(f64::NAN, f64::max);
        let notes = vec![
            format!(
                "Where the summary request's time went (median / slowest of the {samples}): \
                 issued {} / {} ms after the navigation's start, waiting for a connection {} / \
                 {} ms, the daemon's answer's first byte {} / {} ms after the request was sent.",
                number(median(&starts)),
                number(max(&starts)),
                number(median(&queued)),
                number(max(&queued)),
                number(median(&server)),
                number(max(&server)),
            ),
            format!(
                "{samples} loads of `/ui/#/d/<domain>` from `about:blank` in headless Chromium \
                 (after one not kept), each fetching the page's files and data again. The value \
                 is the page's `berth:domain-rendered` mark (the 200 rows in the document), from \
                 the navigation's start; the baseline is, in the same loads, the end of the \
                 summary response: median {} ms, so the page's own work after its data arrived \
                 took {} ms (median of the differences: {} ms).",
                number(median(&summary_end)),
                number(median(&rendered) - median(&summary_end)),
                number(median(
                    &rendered
                        .iter()
                        .zip(&summary_end)
                        .map(|(r, s)| r - s)
                        .collect::<Vec<_>>()
                )),
            ),
            format!(
                "Requests the page made before the mark, in the last load: {} ({}); the summary \
                 answer was {} KB of JSON. The event stream opens after the first render.",
                requests.len(),
                requests
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|p| format!("`{}`", p.replace(domain.as_str(), "<domain>")))
                    .collect::<Vec<_>>()
                    .join(", "),
                number(last["summaryBytes"].as_f64().unwrap_or(f64::NAN) / 1000.0),
            ),
        ];
        Ok::<_, anyhow::Error>((rendered, summary_end, notes))
    }
    .await;
    let _ = wd.close().await;
    drop(driver);
    result
}
