//! How the engine's failures become [`RuntimeError`]s.

use std::time::Duration;

use berth_core::runtime::RuntimeError;
use bollard::errors::Error;

/// The HTTP status of an engine refusal, if the error is one.
pub(crate) fn status(err: &Error) -> Option<u16> {
    match err {
        Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// The engine's own message of a refusal, or the error's text.
pub(crate) fn message(err: &Error) -> String {
    match err {
        Error::DockerResponseServerError { message, .. } => message.clone(),
        Error::DockerStreamError { error } => error.clone(),
        other => other.to_string(),
    }
}

/// True when the engine itself could not be reached or stopped answering.
pub(crate) fn is_connection(err: &Error) -> bool {
    matches!(
        err,
        Error::HyperLegacyError { .. }
            | Error::HyperResponseError { .. }
            | Error::IOError { .. }
            | Error::SocketNotFoundError(_)
            | Error::RequestTimeoutError
    )
}

/// Maps an engine error about `what` (a phrase such as `container berth-x`): 404 is
/// `NotFound(what)`, 409 `Conflict` with the engine's sentence, a connection failure
/// `Unavailable`, anything else `Engine`.
pub(crate) fn map(err: Error, what: &str) -> RuntimeError {
    map_redacted(err, what, &[])
}

/// Like [`map`], with every occurrence of each of `secrets` (environment values, exec
/// arguments) taken out of the engine's message first.
pub(crate) fn map_redacted(err: Error, what: &str, secrets: &[&str]) -> RuntimeError {
    if is_connection(&err) {
        return RuntimeError::Unavailable(format!("while working on {what}: {err}"));
    }
    match err {
        Error::DockerResponseServerError {
            status_code: 404, ..
        } => RuntimeError::NotFound(what.to_owned()),
        Error::DockerResponseServerError {
            status_code: 409,
            message,
        } => RuntimeError::Conflict(redact(&message, secrets)),
        Error::DockerResponseServerError {
            status_code,
            message,
        } => RuntimeError::Engine(format!(
            "{} ({what}, HTTP {status_code})",
            redact(&message, secrets)
        )),
        other => RuntimeError::Engine(format!("{} ({what})", redact(&other.to_string(), secrets))),
    }
}

/// The shortest secret that is taken out of messages: shorter strings are too common in the
/// engine's own words (`1`, `on`) to be told apart from them.
const MIN_SECRET: usize = 4;

/// `message` with each secret of at least [`MIN_SECRET`] bytes replaced by `[redacted]`.
pub(crate) fn redact(message: &str, secrets: &[&str]) -> String {
    let mut out = message.to_owned();
    let mut secrets: Vec<&str> = secrets
        .iter()
        .copied()
        .filter(|s| s.len() >= MIN_SECRET)
        .collect();
    // Longest first, so a secret containing another is taken out whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in secrets {
        if out.contains(secret) {
            out = out.replace(secret, "[redacted]");
        }
    }
    out
}

/// A duration as a person writes it: `10m`, `30s`, `1.5s`, `500ms`.
pub(crate) fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms >= 60_000 && ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms >= 1000 && ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else if ms >= 1000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_statuses_to_runtime_errors() {
        let refusal = |status_code, message: &str| Error::DockerResponseServerError {
            status_code,
            message: message.to_owned(),
        };
        assert!(matches!(
            map(refusal(404, "No such container: x"), "container x"),
            RuntimeError::NotFound(what) if what == "container x"
        ));
        assert!(matches!(
            map(refusal(409, "name in use"), "container x"),
            RuntimeError::Conflict(m) if m == "name in use"
        ));
        assert!(matches!(
            map(refusal(500, "boom"), "container x"),
            RuntimeError::Engine(m) if m == "boom (container x, HTTP 500)"
        ));
        assert!(matches!(
            map(Error::RequestTimeoutError, "container x"),
            RuntimeError::Unavailable(_)
        ));
    }

    #[test]
    fn redacts_secrets_longest_first() {
        let message = "bad value hunter22 and hunter2 and on";
        assert_eq!(
            redact(message, &["hunter2", "hunter22", "on"]),
            "bad value [redacted] and [redacted] and on"
        );
        let err = Error::DockerResponseServerError {
            status_code: 400,
            message: "invalid env PASSWORD=s3cret-value".to_owned(),
        };
        let mapped = map_redacted(err, "container x", &["s3cret-value"]).to_string();
        assert!(!mapped.contains("s3cret"), "{mapped}");
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human(Duration::from_secs(600)), "10m");
        assert_eq!(human(Duration::from_secs(30)), "30s");
        assert_eq!(human(Duration::from_millis(1500)), "1.5s");
        assert_eq!(human(Duration::from_millis(500)), "500ms");
    }
}
