//! `up → running` for the Postgres fixture, on a fresh and on an existing volume, against the
//! testcontainers crate and Compose on the same image.
//!
//! Six ways take turns in each round: berth with a tcp ready check on 5432 (Postgres is ready
//! when it takes TCP connections; the entrypoint's init server listens on the Unix socket only),
//! learning `running` from the wait route; berth with the `pg_isready` exec check a Compose user
//! would write (in the notes only); the testcontainers crate waiting for the server's "ready to
//! accept connections" line as its Postgres module does, once with berth's limits, once with
//! none (its default) and once with berth's limits on a network of its own (berth's instances
//! are on their domain's network, reached by alias: the engine's DNS for it costs a start); and
//! Debian's `docker-compose` 1.29 with a
//! healthcheck every second, polled every 500 ms after `up -d` (what Compose v2's `--wait`
//! does; 1.29 has no `--wait`). After each sample, untimed, every way reads its container's log
//! to say how long Postgres itself took, so the notes can split each total into the engine and
//! tool before Postgres runs, Postgres's own start, and the time until the tool noticed.

mod figure;
mod timeline;
mod ways;

pub use figure::*;
pub(crate) use ways::testcontainers_fresh_ms;
