//! Service keys and the Host guard.
//!
//! Every `/v1` route needs `Authorization: Bearer <service key>`, or a web page's session token
//! that acts for one (see [`crate::ui::sessions`]). Keys are held only as their
//! sha256; a presented key is hashed and compared with every known hash in constant time. A
//! domain belongs to the hash of the key that created it. Keys never reach a log.
//!
//! The Host guard refuses a request whose `Host` names anything but a loopback host or the
//! listen address: a web page the developer visits cannot rebind its own name to 127.0.0.1 and
//! drive berth from the browser.

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

/// Refuses a request whose `Host` is not allowed.
pub async fn guard_host(
    State(hosts): State<AllowedHosts>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    let allowed = req
        .headers()
        .get(HOST)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|h| hosts.allows(h));
    if !allowed {
        return Err(ApiError::HostNotAllowed);
    }
    Ok(next.run(req).await)
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
}
