//! Progress on stderr: a line per phase, and a sample counter that a terminal shows in place
//! and a log gets only once, at its end.

use std::io::{IsTerminal, Write};

/// A line about what the run is doing.
pub fn line(what: &str) {
    eprintln!("berth-bench: {what}");
}

/// Sample `done` of `total` of figure `name` is measured.
pub fn step(name: &str, done: usize, total: usize) {
    let mut err = std::io::stderr().lock();
    if err.is_terminal() {
        let _ = write!(err, "\rberth-bench: {name}: {done}/{total}");
        if done == total {
            let _ = writeln!(err);
        }
    } else if done == total {
        let _ = writeln!(err, "berth-bench: {name}: {total} samples");
    }
}
