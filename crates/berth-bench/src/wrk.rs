//! wrk as a second load generator for the GET figure: a C program with its own event loops, so
//! the rate it reaches is not bounded by this process's HTTP client and JSON parsing.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};

/// What one wrk run reported.
#[derive(Debug, Clone, PartialEq)]
pub struct WrkRun {
    /// `Requests/sec:`, wrk's answered requests over the run's length.
    pub rate: f64,
    /// Requests answered, from `N requests in …`.
    pub requests: u64,
    /// Answers that were not 2xx or 3xx (wrk counts them in the rate).
    pub non_success: u64,
    /// Connect, read, write errors and timeouts.
    pub socket_errors: u64,
    /// The latency distribution's median and 99th percentile, in milliseconds.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

/// Whether `wrk` is on the `PATH`.
pub fn available() -> bool {
    std::process::Command::new("wrk")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// `wrk -t2 -c<connections> -d<duration> --latency [-H <header>] <url>`.
pub async fn run(
    url: &str,
    header: Option<&str>,
    connections: usize,
    duration: Duration,
) -> anyhow::Result<WrkRun> {
    let mut command = tokio::process::Command::new("wrk");
    command
        .arg("-t2")
        .arg(format!("-c{connections}"))
        .arg(format!("-d{}s", duration.as_secs().max(1)))
        .arg("--latency");
    if let Some(header) = header {
        command.arg("-H").arg(header);
    }
    let out = command
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .context("running wrk")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "wrk failed ({}): {}{}",
            out.status,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse(&text)
}

/// A wrk latency such as `635.91us`, `1.12ms` or `1.05s`, in milliseconds.
fn latency_ms(text: &str) -> Option<f64> {
    let (number, scale) = if let Some(n) = text.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000.0)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|n| n * scale)
}

/// Reads wrk's report.
pub fn parse(text: &str) -> anyhow::Result<WrkRun> {
    let mut rate = None;
    let mut requests = None;
    let mut non_success = 0;
    let mut socket_errors = 0;
    let (mut p50_ms, mut p99_ms) = (None, None);
    for line in text.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("Requests/sec:") {
            rate = v.trim().parse::<f64>().ok();
        } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
            non_success = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("Socket errors:") {
            // `connect 0, read 0, write 0, timeout 0`
            socket_errors = v
                .split(',')
                .filter_map(|part| part.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum();
        } else if let Some(v) = line.strip_prefix("50%") {
            p50_ms = latency_ms(v.trim());
        } else if let Some(v) = line.strip_prefix("99%") {
            p99_ms = latency_ms(v.trim());
        } else if line.contains(" requests in ") {
            requests = line
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok());
        }
    }
    Ok(WrkRun {
        rate: rate.ok_or_else(|| anyhow!("wrk printed no Requests/sec: {text}"))?,
        requests: requests.ok_or_else(|| anyhow!("wrk printed no request count: {text}"))?,
        non_success,
        socket_errors,
        p50_ms,
        p99_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = "Running 5s test @ http://127.0.0.1:41234/healthz
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.02ms  512.33us  20.11ms   88.10%
    Req/Sec    31.20k     2.11k   35.01k    71.00%
  Latency Distribution
     50%  935.00us
     75%    1.21ms
     90%    1.62ms
     99%    2.90ms
  310412 requests in 5.00s, 40.26MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 7
Requests/sec:  62071.33
Transfer/sec:      8.05MB
";

    #[test]
    fn a_report_is_read() {
        let run = parse(REPORT).unwrap();
        assert_eq!(run.rate, 62071.33);
        assert_eq!(run.requests, 310412);
        assert_eq!(run.non_success, 7);
        assert_eq!(run.socket_errors, 3);
        assert!((run.p50_ms.unwrap() - 0.935).abs() < 1e-9);
        assert_eq!(run.p99_ms, Some(2.9));
        assert!(parse("Running 5s test").is_err());
    }

    #[test]
    fn latencies_carry_their_units() {
        assert_eq!(latency_ms("2.00s"), Some(2000.0));
        assert_eq!(latency_ms("12.50ms"), Some(12.5));
        assert_eq!(latency_ms("abc"), None);
    }
}
