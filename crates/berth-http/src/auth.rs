//! Service keys and the Host guard.
//!
//! Every `/v1` route needs `Authorization: Bearer <service key>`, or a web page's session token
//! that acts for one (see [`crate::ui::sessions`]). Keys are held only as their
//! sha256; a presented key is hashed and compared with every known hash in constant time. A
//! domain belongs to the hash of the key that created it. Keys never reach a log.
//!
//! The Host guard refuses a request whose `Host` names anything but a loopback host or the
//! listen address: a web page the developer visits cannot rebind its own name to 127.0.0.1 and
//! drive berth from the browser. A request with more than one `Host` header (RFC 9112 section
//! 3.2 answers it 400), or whose target is in absolute form (`GET http://host/path`) naming a
//! host that is not allowed, is refused with `RequestRefusedError` before any route: the
//! target's authority is what an HTTP/1.1 server must go by, so it is checked as well as the
//! `Host` header, and both must be allowed.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, HOST};
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;
use crate::ui::sessions::UiSessions;

/// Who is calling: the hash of their service key, which owns the domains it creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Hex sha256 of the service key.
    pub owner: String,
}

/// The service keys this berth accepts.
#[derive(Clone)]
pub struct ServiceKeys {
    hashes: Arc<Vec<[u8; 32]>>,
    /// The web page's sign-in codes and session tokens, which act for these keys.
    sessions: Arc<UiSessions>,
}

/// Present on a request that a web page's session token authenticated (not a service key):
/// the hash of that token, so signing out can revoke it.
#[derive(Debug, Clone)]
pub struct SessionAuth {
    /// sha256 of the token.
    pub token_hash: [u8; 32],
}

impl std::fmt::Debug for ServiceKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ServiceKeys({} keys)", self.hashes.len())
    }
}

fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

impl ServiceKeys {
    /// Accepts exactly these keys.
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<str>>(keys: I) -> Self {
        Self {
            hashes: Arc::new(keys.into_iter().map(|k| hash(k.as_ref())).collect()),
            sessions: Arc::default(),
        }
    }

    /// The web page's sign-in codes and session tokens.
    pub fn sessions(&self) -> &UiSessions {
        &self.sessions
    }

    /// The caller a presented key stands for, when it is one of ours.
    pub fn check(&self, presented: &str) -> Option<Caller> {
        let h = hash(presented);
        // Compare with every key so the time taken says nothing about which one matched.
        let matched = self
            .hashes
            .iter()
            .fold(subtle::Choice::from(0), |acc, known| acc | known.ct_eq(&h));
        bool::from(matched).then(|| Caller {
            owner: hex::encode(h),
        })
    }
}

/// Requires a known service key and hands the [`Caller`] to the route.
pub async fn require_key(
    State(keys): State<ServiceKeys>,
    mut req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let presented = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|k| k.trim().to_owned());
    let caller = match presented.as_deref() {
        Some(k) => match keys.check(k) {
            Some(caller) => caller,
            // Not a key: perhaps a web page's session token, which acts as the key it came from.
            None => {
                let owner = keys.sessions.check(k).ok_or(ApiError::Unauthorized)?;
                req.extensions_mut().insert(SessionAuth {
                    token_hash: crate::ui::sessions::secret_hash(k),
                });
                Caller { owner }
            }
        },
        None => return Err(ApiError::Unauthorized),
    };
    req.extensions_mut().insert(caller);
    Ok(next.run(req).await)
}

/// The hosts a request may name.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    extra: Arc<Vec<String>>,
}

impl AllowedHosts {
    /// Loopback names, plus `extra` host names (the listen address, configured names).
    pub fn new(extra: Vec<String>) -> Self {
        Self {
            extra: Arc::new(extra.into_iter().map(|h| h.to_ascii_lowercase()).collect()),
        }
    }

    /// Whether a `Host` header value (with or without a port) is allowed.
    pub fn allows(&self, host_header: &str) -> bool {
        let host = host_header.trim().to_ascii_lowercase();
        let name = if let Some(rest) = host.strip_prefix('[') {
            // [::1]:2378, and nothing may follow but the port.
            match rest.split_once(']') {
                Some((address, "")) => address.to_owned(),
                Some((address, port))
                    if port.len() > 1
                        && port.starts_with(':')
                        && port[1..].chars().all(|c| c.is_ascii_digit()) =>
                {
                    address.to_owned()
                }
                _ => return false,
            }
        } else {
            match host.rsplit_once(':') {
                Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name.to_owned(),
                _ => host.clone(),
            }
        };
        if name == "localhost" || name.ends_with(".localhost") {
            return true;
        }
        if let Ok(ip) = name.parse::<IpAddr>()
            && ip.is_loopback()
        {
            return true;
        }
        self.extra.contains(&name)
    }
}

impl AllowedHosts {
    /// Whether a request's head names only allowed hosts: exactly one allowed `Host` header
    /// and, when the target is in absolute form (or authority form), an allowed authority.
    /// The refusal never quotes what was sent.
    pub fn judge(&self, req: &axum::http::request::Parts) -> Result<(), ApiError> {
        let mut host = req.headers.get_all(HOST).iter();
        let first = host.next();
        if host.next().is_some() {
            return Err(ApiError::refused(
                "header.host must be sent once; this request has more than one Host header",
            ));
        }
        if let Some(authority) = req.uri.authority()
            && !self.allows_authority(authority)
        {
            return Err(ApiError::refused(
                "the request target's host must be a loopback host (localhost, 127.0.0.1, \
                 [::1]) or the address berth listens on; send the path alone (origin form) or \
                 an absolute URL naming such a host",
            ));
        }
        let allowed = first
            .and_then(|v| v.to_str().ok())
            .is_some_and(|h| self.allows(h));
        if !allowed {
            return Err(ApiError::HostNotAllowed);
        }
        Ok(())
    }

    /// Whether a target's authority is allowed: no user info, and an allowed host.
    fn allows_authority(&self, authority: &axum::http::uri::Authority) -> bool {
        !authority.as_str().contains('@') && self.allows(authority.as_str())
    }
}

/// Refuses a request whose `Host`, or absolute-form target, is not allowed, or that has more
/// than one `Host` header (see [`AllowedHosts::judge`]).
pub async fn guard_host(
    State(hosts): State<AllowedHosts>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    hosts.judge(&parts)?;
    Ok(next.run(Request::from_parts(parts, body)).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_keys_are_callers_and_the_owner_is_the_key_hash() {
        let keys = ServiceKeys::new(["alpha", "beta"]);
        let a = keys.check("alpha").unwrap();
        assert_eq!(a.owner.len(), 64);
        assert_ne!(keys.check("beta").unwrap(), a);
        assert!(keys.check("gamma").is_none());
        assert!(keys.check("").is_none());
        assert!(!format!("{keys:?}").contains("alpha"));
    }

    #[test]
    fn loopback_hosts_and_the_listen_address_are_allowed_and_nothing_else() {
        let hosts = AllowedHosts::new(vec!["192.0.2.7".into()]);
        for ok in [
            "localhost",
            "localhost:2378",
            "127.0.0.1:2378",
            "127.1.2.3",
            "[::1]:2378",
            "LOCALHOST",
            "192.0.2.7:2378",
            "x.localhost",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:2378",
            "127.0.0.1.evil.example",
            "localhost.evil",
            "[::2]:80",
            "[::1].evil.example",
            "[::1]evil",
            "[::1]:80x",
            "[::1",
            "",
        ] {
            assert!(!hosts.allows(bad), "{bad}");
        }
    }

    fn head(target: &str, hosts: &[&str]) -> axum::http::request::Parts {
        let mut req = axum::http::Request::get(target);
        for h in hosts {
            req = req.header(HOST, *h);
        }
        req.body(()).unwrap().into_parts().0
    }

    fn tag_and_message(e: ApiError) -> (u16, String, String) {
        let response = axum::response::IntoResponse::into_response(e);
        let status = response.status().as_u16();
        let body = futures_util::FutureExt::now_or_never(axum::body::to_bytes(
            response.into_body(),
            usize::MAX,
        ))
        .unwrap()
        .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        (
            status,
            body["_tag"].as_str().unwrap().to_owned(),
            body["message"].as_str().unwrap().to_owned(),
        )
    }

    #[test]
    fn one_allowed_host_and_an_allowed_absolute_target_pass() {
        let hosts = AllowedHosts::new(vec!["192.0.2.7".into()]);
        for (target, host) in [
            ("/healthz", "127.0.0.1:2378"),
            ("http://127.0.0.1:2378/healthz", "127.0.0.1:2378"),
            ("http://localhost/v1/resource-domains?x=1", "127.0.0.1"),
            ("http://[::1]:2378/healthz", "[::1]:2378"),
            ("http://192.0.2.7:2378/healthz", "192.0.2.7:2378"),
            ("*", "localhost"),
        ] {
            assert!(hosts.judge(&head(target, &[host])).is_ok(), "{target}");
        }
    }

    #[test]
    fn two_host_headers_are_refused_without_quoting_them() {
        let hosts = AllowedHosts::new(vec![]);
        for pair in [
            ["127.0.0.1", "127.0.0.1"],
            ["127.0.0.1", "evil.example"],
            ["evil.example", "127.0.0.1"],
        ] {
            let e = hosts.judge(&head("/healthz", &pair)).unwrap_err();
            let (status, tag, message) = tag_and_message(e);
            assert_eq!((status, tag.as_str()), (400, "RequestRefusedError"));
            assert!(message.contains("header.host"), "{message}");
            assert!(!message.contains("evil"), "{message}");
        }
        let three = head("/healthz", &["localhost", "localhost", "localhost"]);
        assert!(hosts.judge(&three).is_err());
    }

    #[test]
    fn an_absolute_target_naming_a_foreign_host_is_refused_whatever_the_host_header_says() {
        let hosts = AllowedHosts::new(vec![]);
        for target in [
            "http://evil.example/healthz",
            "http://evil.example:2378/healthz",
            "https://127.0.0.1.evil.example/healthz",
            "http://127.0.0.1@evil.example/healthz",
            "http://evil.example@127.0.0.1/healthz",
            "http://[::2]/healthz",
        ] {
            let e = hosts.judge(&head(target, &["127.0.0.1"])).unwrap_err();
            let (status, tag, message) = tag_and_message(e);
            assert_eq!(
                (status, tag.as_str()),
                (400, "RequestRefusedError"),
                "{target}"
            );
            assert!(message.contains("request target"), "{message}");
            assert!(!message.contains("evil"), "{message}");
        }
        // An allowed target does not excuse a foreign or missing Host header.
        let e = hosts
            .judge(&head("http://127.0.0.1/healthz", &["evil.example"]))
            .unwrap_err();
        assert!(matches!(e, ApiError::HostNotAllowed));
        let e = hosts
            .judge(&head("http://127.0.0.1/healthz", &[]))
            .unwrap_err();
        assert!(matches!(e, ApiError::HostNotAllowed));
    }
}
