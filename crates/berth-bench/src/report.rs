//! Figures as lines and tables, the machine they were measured on, and the rewrite of the
//! results in docs/benchmarks.md.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, bail};
use bollard::Docker;

/// A summary of one side of a comparison.
#[derive(Debug, Clone)]
pub struct Stat {
    /// How many samples (or requests) it summarises.
    pub n: usize,
    /// The figure's value: the median of the samples, or the named percentile, or the rate.
    pub value: f64,
    /// The 90th percentile, where the figure has one.
    pub p90: Option<f64>,
}

impl Stat {
    /// Per-sample figures: the median and the 90th percentile of `values`.
    pub fn of_samples(values: &[f64]) -> Stat {
        Stat {
            n: values.len(),
            value: crate::stats::median(values),
            p90: Some(crate::stats::quantile(values, 0.9)),
        }
    }
}

/// What a figure is hoped to be: its ratio to the baseline at most, or below, a bound; or, for a
/// figure where more is better (a rate), at least a bound.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    AtMost(f64),
    Below(f64),
    AtLeast(f64),
    /// berth's value itself (not the ratio) at most this, in the row's unit.
    ValueAtMost(f64),
}

impl Target {
    fn met(self, ratio: f64) -> bool {
        match self {
            Target::AtMost(bound) | Target::ValueAtMost(bound) => ratio <= bound,
            Target::Below(bound) => ratio < bound,
            Target::AtLeast(bound) => ratio >= bound,
        }
    }

    fn bound(self) -> f64 {
        match self {
            Target::AtMost(b) | Target::Below(b) | Target::AtLeast(b) | Target::ValueAtMost(b) => b,
        }
    }

    fn describe(self) -> String {
        match self {
            Target::AtMost(b) => format!("≤ {b:.2}x"),
            Target::Below(b) => format!("< {b:.2}x"),
            Target::AtLeast(b) => format!("≥ {b:.2}x"),
            Target::ValueAtMost(b) => format!("≤ {}", number(b)),
        }
    }
}

/// berth against one baseline.
#[derive(Debug, Clone)]
pub struct Row {
    /// The figure, e.g. `up_to_running_busybox_tcp`.
    pub name: String,
    /// `ms` or `req/s`.
    pub unit: &'static str,
    pub berth: Stat,
    /// The baseline's name, e.g. `raw-bollard`.
    pub baseline: &'static str,
    pub base: Stat,
    pub target: Option<Target>,
}

impl Row {
    /// berth's value over the baseline's.
    pub fn ratio(&self) -> f64 {
        self.berth.value / self.base.value
    }

    /// `name value unit ratio baseline`: the line a script reads.
    pub fn line(&self) -> String {
        format!(
            "{} {} {} {:.2}x {}",
            self.name,
            number(self.berth.value),
            self.unit,
            self.ratio(),
            self.baseline
        )
    }

    /// Whether the target is met, and by how much it is missed when not.
    pub fn verdict(&self) -> String {
        let Some(target) = self.target else {
            return "none".to_owned();
        };
        if let Target::ValueAtMost(bound) = target {
            let value = self.berth.value;
            return if value <= bound {
                format!("{} {}: met", target.describe(), self.unit)
            } else {
                let over = (value / bound - 1.0) * 100.0;
                format!(
                    "{} {}: **missed** by {over:.0}%",
                    target.describe(),
                    self.unit
                )
            };
        }
        let ratio = self.ratio();
        if target.met(ratio) {
            format!("{}: met", target.describe())
        } else if let Target::AtLeast(bound) = target {
            let under = (1.0 - ratio / bound) * 100.0;
            format!("{}: **missed** by {under:.0}%", target.describe())
        } else {
            let over = (ratio / target.bound() - 1.0) * 100.0;
            format!("{}: **missed** by {over:.0}%", target.describe())
        }
    }
}

/// One figure's rows and the notes that explain them.
#[derive(Debug, Clone, Default)]
pub struct Figure {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

/// A value with as many decimals as it needs to be read at a glance.
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        "n/a".to_owned()
    } else if v >= 1000.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The median of the values that are there, as [`number`] writes it, for a note.
pub fn median_of(values: impl Iterator<Item = Option<f64>>) -> String {
    let values: Vec<f64> = values.flatten().collect();
    number(crate::stats::median(&values))
}

fn with_unit(v: Option<f64>, unit: &str) -> String {
    match v {
        Some(v) => format!("{} {unit}", number(v)),
        None => "".to_owned(),
    }
}

/// The figure's results as a Markdown table, then its notes.
pub fn table(figure: &Figure) -> String {
    let mut out = String::new();
    out.push_str(
        "| figure | berth | berth p90 | baseline | baseline value | baseline p90 | ratio | target |\n\
         | --- | ---: | ---: | --- | ---: | ---: | ---: | --- |\n",
    );
    for row in &figure.rows {
        let _ = writeln!(
            out,
            "| `{}` (n={}) | {} | {} | {} (n={}) | {} | {} | {:.2}x | {} |",
            row.name,
            row.berth.n,
            with_unit(Some(row.berth.value), row.unit),
            with_unit(row.berth.p90, row.unit),
            row.baseline,
            row.base.n,
            with_unit(Some(row.base.value), row.unit),
            with_unit(row.base.p90, row.unit),
            row.ratio(),
            row.verdict()
        );
    }
    if !figure.notes.is_empty() {
        out.push('\n');
        for note in &figure.notes {
            let _ = writeln!(out, "- {note}");
        }
    }
    out
}

/// Where and when a run happened.
#[derive(Debug, Clone)]
pub struct Machine {
    pub date: String,
    pub cpus: usize,
    pub cpu_model: String,
    pub memory: String,
    pub kernel: String,
    pub docker: String,
    pub commit: String,
    /// The load averages (1, 5 and 15 minutes) when the run started, if the kernel says.
    pub load: Option<String>,
}

impl Machine {
    pub async fn describe(docker: &Docker) -> Machine {
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_owned())
            .unwrap_or_else(|| "unknown CPU".to_owned());
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            })
            .map_or_else(
                || "unknown".to_owned(),
                |kib| format!("{:.1} GiB", kib / 1024.0 / 1024.0),
            );
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|k| k.trim().to_owned())
            .unwrap_or_else(|_| "unknown".to_owned());
        let docker = match docker.version().await {
            Ok(v) => format!(
                "{} (API {})",
                v.version.unwrap_or_else(|| "?".to_owned()),
                v.api_version.unwrap_or_else(|| "?".to_owned())
            ),
            Err(_) => "unknown".to_owned(),
        };
        Machine {
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            cpus,
            cpu_model,
            memory,
            kernel,
            docker,
            commit: commit(),
            load: load_average().map(|(one, five, fifteen)| {
                format!("{} {} {}", number(one), number(five), number(fifteen))
            }),
        }
    }

    pub fn sentence(&self) -> String {
        let load = match &self.load {
            Some(load) => format!(", load average {load} at the start"),
            None => String::new(),
        };
        format!(
            "{} CPUs ({}), {} memory, Linux {}, Docker {}{load}",
            self.cpus, self.cpu_model, self.memory, self.kernel, self.docker
        )
    }
}

/// The machine's load averages over 1, 5 and 15 minutes (runnable and uninterruptible tasks,
/// from `/proc/loadavg`): on a shared machine, how busy it was besides this run.
pub fn load_average() -> Option<(f64, f64, f64)> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some((fields.next()??, fields.next()??, fields.next()??))
}

/// The checked-out commit, and whether the tree has changes on top of it.
fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(hash) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash} with uncommitted changes")
            } else {
                hash
            }
        }
        None => "an unknown commit".to_owned(),
    }
}

/// Replaces the text between `<!-- bench:KEY:begin -->` and `<!-- bench:KEY:end -->` in `doc`.
pub fn replace_block(doc: &str, key: &str, body: &str) -> anyhow::Result<String> {
    let begin = format!("<!-- bench:{key}:begin -->");
    let end = format!("<!-- bench:{key}:end -->");
    let Some(start) = doc.find(&begin) else {
        bail!("no {begin} marker");
    };
    let inner = start + begin.len();
    let Some(stop) = doc[inner..].find(&end).map(|i| inner + i) else {
        bail!("no {end} marker after {begin}");
    };
    Ok(format!(
        "{}\n{}\n{}",
        &doc[..inner],
        body.trim_end(),
        &doc[stop..]
    ))
}

/// Rewrites each figure's block in the document at `path`.
pub fn write_doc(
    path: &Path,
    machine: &Machine,
    command: &str,
    figures: &[(&str, Figure)],
) -> anyhow::Result<()> {
    let mut doc = std::fs::read_to_string(path)
        .with_context(|| format!("reading {} (pass --no-write to skip it)", path.display()))?;
    for (key, figure) in figures {
        let body = format!(
            "Measured {} on {}; berth at {}; `{command}`.\n\n{}",
            machine.date,
            machine.sentence(),
            machine.commit,
            table(figure)
        );
        doc = replace_block(&doc, key, &body)
            .with_context(|| format!("updating {}", path.display()))?;
    }
    std::fs::write(path, doc).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(berth: f64, base: f64, target: Option<Target>) -> Row {
        Row {
            name: "f".to_owned(),
            unit: "ms",
            berth: Stat {
                n: 3,
                value: berth,
                p90: Some(berth),
            },
            baseline: "b",
            base: Stat {
                n: 3,
                value: base,
                p90: None,
            },
            target,
        }
    }

    #[test]
    fn lines_carry_value_unit_ratio_and_baseline() {
        assert_eq!(row(310.24, 287.0, None).line(), "f 310.2 ms 1.08x b");
        assert_eq!(row(0.4219, 1.0, None).line(), "f 0.422 ms 0.42x b");
    }

    #[test]
    fn verdicts_say_by_how_much_a_target_is_missed() {
        assert_eq!(
            row(110.0, 100.0, Some(Target::AtMost(1.15))).verdict(),
            "≤ 1.15x: met"
        );
        assert_eq!(
            row(138.0, 100.0, Some(Target::AtMost(1.15))).verdict(),
            "≤ 1.15x: **missed** by 20%"
        );
        assert_eq!(
            row(100.0, 100.0, Some(Target::Below(1.0))).verdict(),
            "< 1.00x: **missed** by 0%"
        );
        assert_eq!(row(1.0, 1.0, None).verdict(), "none");
        assert_eq!(
            row(80.0, 100.0, Some(Target::AtLeast(0.7))).verdict(),
            "≥ 0.70x: met"
        );
        assert_eq!(
            row(35.0, 100.0, Some(Target::AtLeast(0.7))).verdict(),
            "≥ 0.70x: **missed** by 50%"
        );
    }

    #[test]
    fn a_block_is_replaced_between_its_markers_only() {
        let doc = "a\n<!-- bench:up:begin -->\nold\n<!-- bench:up:end -->\nb\n\
                   <!-- bench:exec:begin -->\nkeep\n<!-- bench:exec:end -->\n";
        let new = replace_block(doc, "up", "new\n").unwrap();
        assert_eq!(
            new,
            "a\n<!-- bench:up:begin -->\nnew\n<!-- bench:up:end -->\nb\n\
             <!-- bench:exec:begin -->\nkeep\n<!-- bench:exec:end -->\n"
        );
        assert!(replace_block(doc, "get", "x").is_err());
    }
}
