//! Service keys and the Host guard.
//!
//! Every `/v1` route needs `Authorization: Bearer <service key>`, or a web page's session token
//! that acts for one (see [`crate::ui::sessions`]). Keys are held only as their
//! sha256; a presented key is hashed and compared with every known hash in constant time. A
//! domain belongs to the hash of the key that created it (or of the key its grants entry acts
//! for). Keys never reach a log; what each may do is [`crate::grants`].
//!
//! The Host guard refuses a request whose `Host` names anything but a loopback host or the
//! listen address: a web page the developer visits cannot rebind its own name to 127.0.0.1 and
//! drive berth from the browser. A request with more than one `Host` header (RFC 9112 section
//! 3.2 answers it 400), or whose target is in absolute form (`GET http://host/path`) naming a
//! host that is not allowed, is refused with `RequestRefusedError` before any route: the
//! target's authority is what an HTTP/1.1 server must go by, so it is checked as well as the
//! `Host` header, and both must be allowed. Both are parsed strictly as an authority
//! ([`HostAuthority::parse`]): a suffix test on the text would let `evil.com/.localhost` pass,
//! and a link built from it would name evil.com.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, HOST};
use axum::middleware::Next;
use axum::response::Response;
use berth_core::consent::key_id;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::error::ApiError;
use crate::grants::{KeyConfig, KeyGrants};
use crate::ui::sessions::UiSessions;

/// Who is calling: the hash of the key whose domains they work on, and what they may do.
/// Made once per key; each request's copy shares its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Hex sha256 of the service key that owns the domains and workspaces the caller works
    /// on: the presented key's own, or the one its grants entry acts for.
    pub owner: Arc<str>,
    /// Hex sha256 of the presented key (or of the key a web page's session was signed in
    /// with): what a web page's session acts as.
    pub key: Arc<str>,
    /// What the key may do.
    pub grants: Arc<KeyGrants>,
}

/// A key this berth accepts, and the caller it stands for.
struct KnownKey {
    hash: [u8; 32],
    caller: Caller,
}

/// The service keys this berth accepts, with what each may do.
#[derive(Clone)]
pub struct ServiceKeys {
    keys: Arc<Vec<KnownKey>>,
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
        write!(f, "ServiceKeys({} keys)", self.keys.len())
    }
}

fn hash(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

impl ServiceKeys {
    /// Accepts exactly these keys, each owning its own domains and free to do everything.
    pub fn new<I: IntoIterator<Item = S>, S: AsRef<str>>(keys: I) -> Self {
        let keys = keys
            .into_iter()
            .map(|k| {
                let hash = hash(k.as_ref());
                let hex: Arc<str> = hex::encode(hash).into();
                KnownKey {
                    hash,
                    caller: Caller {
                        owner: hex.clone(),
                        key: hex,
                        grants: Arc::new(KeyGrants::unrestricted()),
                    },
                }
            })
            .collect();
        Self {
            keys: Arc::new(keys),
            sessions: Arc::default(),
        }
    }

    /// These keys with the grants file's entries applied. An entry must name one of the keys
    /// by its public id, once; one that acts for another key must name a key that acts for
    /// none. The error is a sentence naming the entry.
    pub fn configured(self, entries: Vec<KeyConfig>) -> Result<Self, String> {
        let ids: Vec<String> = self.keys.iter().map(|k| key_id(&k.caller.key)).collect();
        let find = |id: &str| ids.iter().position(|known| known == id);
        let mut seen = std::collections::BTreeSet::new();
        let mut keys: Vec<KnownKey> = self
            .keys
            .iter()
            .map(|k| KnownKey {
                hash: k.hash,
                caller: k.caller.clone(),
            })
            .collect();
        let acting: Vec<String> = entries
            .iter()
            .filter(|e| e.acts_for.is_some())
            .map(|e| e.key_id.clone())
            .collect();
        for entry in entries {
            let Some(at) = find(&entry.key_id) else {
                return Err(format!(
                    "keys.{}: no service key of this daemon has that id (a key's id is what \
                     `GET /v1/whoami` answers with it)",
                    entry.key_id
                ));
            };
            if !seen.insert(at) {
                return Err(format!(
                    "keys.{}: the key is named twice; give each key one entry",
                    entry.key_id
                ));
            }
            if let Some(other) = &entry.acts_for {
                let Some(other_at) = find(other) else {
                    return Err(format!(
                        "keys.{}.acts-for: no service key of this daemon has the id {other}",
                        entry.key_id
                    ));
                };
                if other_at == at || acting.contains(other) {
                    return Err(format!(
                        "keys.{}.acts-for: must name another key that acts for no one",
                        entry.key_id
                    ));
                }
                keys[at].caller.owner = keys[other_at].caller.key.clone();
            }
            keys[at].caller.grants = Arc::new(entry.grants);
        }
        Ok(Self {
            keys: Arc::new(keys),
            sessions: self.sessions,
        })
    }

    /// The web page's sign-in codes and session tokens.
    pub fn sessions(&self) -> &UiSessions {
        &self.sessions
    }

    /// The caller a presented key stands for, when it is one of ours.
    pub fn check(&self, presented: &str) -> Option<Caller> {
        let h = hash(presented);
        // Compare with every key so the time taken says nothing about which one matched.
        let mut at = u64::MAX;
        for (i, known) in self.keys.iter().enumerate() {
            at.conditional_assign(&(i as u64), known.hash.ct_eq(&h));
        }
        self.keys
            .get(usize::try_from(at).ok()?)
            .map(|k| k.caller.clone())
    }

    /// The caller for the key whose hex sha256 is `key_hash` (a web page's session acts as it).
    fn caller_by_hash(&self, key_hash: &str) -> Option<Caller> {
        self.keys
            .iter()
            .find(|k| &*k.caller.key == key_hash)
            .map(|k| k.caller.clone())
    }

    /// The caller a request's `Authorization: Bearer` names: a known service key, or a web
    /// page's session token, which acts as the key it was signed in with, grants and all (the
    /// request is then marked with [`SessionAuth`]). Anything else is `Unauthorized`.
    pub fn caller_of(&self, req: &mut Request) -> Result<Caller, ApiError> {
        let presented = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or(ApiError::Unauthorized)?;
        if let Some(caller) = self.check(presented) {
            return Ok(caller);
        }
        let caller = self
            .sessions
            .check(presented)
            .and_then(|key| self.caller_by_hash(&key))
            .ok_or(ApiError::Unauthorized)?;
        let token_hash = crate::ui::sessions::secret_hash(presented);
        req.extensions_mut().insert(SessionAuth { token_hash });
        Ok(caller)
    }
}

/// The host of a `Host` header or a request target's authority, as berth judges it: an IP
/// address or a DNS name (lower case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostName {
    /// An IPv4 address (dotted quad) or an IPv6 literal (`[...]`).
    Ip(IpAddr),
    /// A name made of DNS labels (letters, digits and inner hyphens, 1 to 63 each), lower case.
    Name(String),
}

/// A `Host` header value or a target's authority parsed strictly: a host and an optional port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostAuthority {
    /// The host.
    pub host: HostName,
    /// The port, 1 to 65535, when one is given.
    pub port: Option<u16>,
}

impl std::fmt::Display for HostAuthority {
    /// The authority again, in its plain form (`localhost:2378`, `[::1]:2378`), for a link.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            HostName::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            HostName::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostName::Name(name) => f.write_str(name)?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

impl HostAuthority {
    /// Parses `text` as an authority (RFC 3986, what the `http` crate's [`Authority`] takes),
    /// then holds it to more: no user info; a host that is an IPv4 address, an IPv6 literal in
    /// brackets or a name of DNS labels; and a port, when there is one, of 1 to 65535 digits'
    /// worth. Anything else (`evil.example/.localhost`, `#`, `?`, `\`, `localhost:0`,
    /// `localhost:99999999999`, an empty port) is `None`.
    ///
    /// [`Authority`]: axum::http::uri::Authority
    pub fn parse(text: &str) -> Option<Self> {
        // The http crate's parser first: it stops at `/`, `?` and `#` and refuses what no URI
        // may carry (`\`, spaces, controls), so only a whole authority gets past it.
        let authority: axum::http::uri::Authority = text.parse().ok()?;
        let text = authority.as_str();
        if text.contains('@') {
            return None;
        }
        let (host, after) = if let Some(rest) = text.strip_prefix('[') {
            let (address, after) = rest.split_once(']')?;
            let ip: std::net::Ipv6Addr = address.parse().ok()?;
            (HostName::Ip(IpAddr::V6(ip)), after)
        } else {
            let (host, after) = text.split_at(text.find(':').unwrap_or(text.len()));
            let host = host.to_ascii_lowercase();
            let name = if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
                HostName::Ip(IpAddr::V4(ip))
            } else if is_dns_name(&host) {
                HostName::Name(host)
            } else {
                return None;
            };
            (name, after)
        };
        let port = match after {
            "" => None,
            _ => {
                let digits = after.strip_prefix(':')?;
                if digits.is_empty()
                    || digits.len() > 5
                    || !digits.bytes().all(|b| b.is_ascii_digit())
                {
                    return None;
                }
                match digits.parse::<u16>() {
                    Ok(0) | Err(_) => return None,
                    Ok(port) => Some(port),
                }
            }
        };
        Some(Self { host, port })
    }
}

/// Whether `name` is made of DNS labels: each 1 to 63 letters, digits and hyphens, neither
/// starting nor ending with a hyphen; 253 characters at most, with no empty label (so no
/// leading, trailing or doubled dot).
fn is_dns_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// The hosts a request may name.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    extra: Arc<Vec<HostName>>,
}

impl AllowedHosts {
    /// Loopback names, plus `extra` hosts (the listen address, configured names): each an IP
    /// address (an IPv6 one with or without brackets) or a name of DNS labels. One that is
    /// neither can never match a request, and is left out (see [`AllowedHosts::configured`]).
    pub fn new(extra: Vec<String>) -> Self {
        Self {
            extra: Arc::new(extra.iter().filter_map(|h| Self::configured(h)).collect()),
        }
    }

    /// A configured host (`--allowed-hosts`, the listen address) as the guard compares it;
    /// `None` for one that is neither an IP address nor a name of DNS labels.
    pub fn configured(host: &str) -> Option<HostName> {
        // `--allowed-hosts a, b` is a list people write with spaces.
        let host = host.trim();
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Some(HostName::Ip(ip));
        }
        let name = host.to_ascii_lowercase();
        is_dns_name(&name).then_some(HostName::Name(name))
    }

    /// Whether a `Host` header value (with or without a port) is allowed: it parses strictly
    /// as an authority ([`HostAuthority::parse`]), and its host is a loopback address,
    /// `localhost`, a name under `.localhost`, or one of the extra hosts.
    pub fn allows(&self, host_header: &str) -> bool {
        HostAuthority::parse(host_header).is_some_and(|a| self.allows_host(&a.host))
    }

    fn allows_host(&self, host: &HostName) -> bool {
        let loopback = match host {
            HostName::Ip(ip) => ip.is_loopback(),
            // A DNS name already: every label before `.localhost` is a label.
            HostName::Name(name) => name == "localhost" || name.ends_with(".localhost"),
        };
        loopback || self.extra.contains(host)
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
                "the request target's authority must be a loopback host (localhost, a name \
                 under .localhost, 127.0.0.1, [::1]) or the address berth listens on, without \
                 user info and with an optional port of 1 to 65535; send the path alone \
                 (origin form) or an absolute URL naming such a host",
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

    /// Whether a target's authority is allowed: an allowed host (user info never parses).
    fn allows_authority(&self, authority: &axum::http::uri::Authority) -> bool {
        self.allows(authority.as_str())
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
    fn a_grants_entry_limits_its_key_and_may_act_for_another() {
        use berth_api::capabilities::Capability;
        let id = |k: &str| key_id(&hex::encode(hash(k)));
        let entry = |k: &str, acts_for: Option<&str>| KeyConfig {
            key_id: id(k),
            acts_for: acts_for.map(id),
            grants: KeyGrants::restricted([Capability::Read], []),
        };
        let keys = ServiceKeys::new(["developer-key", "ide-plugin-key"])
            .configured(vec![entry("ide-plugin-key", Some("developer-key"))])
            .unwrap();
        let dev = keys.check("developer-key").unwrap();
        let ide = keys.check("ide-plugin-key").unwrap();
        assert!(!dev.grants.is_restricted());
        assert!(ide.grants.is_restricted());
        assert_eq!(
            ide.owner, dev.owner,
            "the plugin works on the developer's domains"
        );
        assert_ne!(ide.key, dev.key, "but stays a key of its own");
        assert_eq!(keys.caller_by_hash(&ide.key), Some(ide));

        let keys = || ServiceKeys::new(["developer-key", "ide-plugin-key"]);
        let unknown = KeyConfig {
            key_id: "0123456789ab".into(),
            ..entry("developer-key", None)
        };
        assert!(
            keys()
                .configured(vec![unknown])
                .unwrap_err()
                .contains("keys.0123456789ab")
        );
        let twice = vec![entry("developer-key", None), entry("developer-key", None)];
        assert!(
            keys()
                .configured(twice)
                .unwrap_err()
                .contains("named twice")
        );
        let itself = vec![entry("developer-key", Some("developer-key"))];
        assert!(keys().configured(itself).unwrap_err().contains("acts-for"));
        let chain = vec![
            entry("developer-key", Some("ide-plugin-key")),
            entry("ide-plugin-key", Some("developer-key")),
        ];
        assert!(
            keys()
                .configured(chain)
                .unwrap_err()
                .contains("acts for no one")
        );
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

    #[test]
    fn the_host_is_parsed_as_an_authority_and_a_suffix_or_a_port_out_of_range_does_not_pass() {
        let hosts = AllowedHosts::new(vec!["192.0.2.7".into(), "dev.example".into()]);
        for bad in [
            // What follows the authority in a URL, or cannot be in one, ends the name early in
            // a browser: each of these would make a link to evil.com.
            "evil.com/.localhost",
            "evil.com#.localhost",
            "evil.com?.localhost",
            "evil.com\\.localhost",
            "evil.com/.localhost:2378",
            "evil.com:80/.localhost",
            "evil.com%2f.localhost",
            "evil.com@x.localhost",
            "user@localhost",
            "user:pass@127.0.0.1:2378",
            // Ports: 1 to 65535, digits only, none empty.
            "localhost:99999999999",
            "localhost:65536",
            "localhost:0",
            "localhost:00000",
            "localhost:",
            "localhost:+80",
            "localhost:80:80",
            "127.0.0.1:0",
            "[::1]:0",
            "[::1]:65536",
            // Names under .localhost are DNS labels.
            ".localhost",
            "..localhost",
            "a..localhost",
            "-a.localhost",
            "a-.localhost",
            "a_b.localhost",
            "a b.localhost",
            "localhost.",
            "x.localhost.",
            // Addresses.
            "127.1",
            "0x7f.0.0.1",
            "[127.0.0.1]",
            "[::ffff:127.0.0.1]",
            "::1",
            "192.0.2.8",
            "evil.dev.example",
        ] {
            assert!(!hosts.allows(bad), "{bad}");
        }
        for ok in [
            "localhost",
            "localhost:1",
            "localhost:65535",
            "Localhost:2378",
            "app.localhost",
            "a-b.c1.localhost:8080",
            "127.0.0.1",
            "127.0.0.1:2378",
            "127.255.255.254:80",
            "[::1]",
            "[0:0:0:0:0:0:0:1]:2378",
            "192.0.2.7",
            "192.0.2.7:2378",
            "dev.example:2378",
            "DEV.example",
        ] {
            assert!(hosts.allows(ok), "{ok}");
        }
        // Configured hosts are IP addresses or DNS names; an IPv6 one with or without brackets.
        let v6 = AllowedHosts::new(vec!["::".into(), "[fd00::1]".into(), "bad/name".into()]);
        assert!(v6.allows("[::]:2378"));
        assert!(v6.allows("[fd00::1]:2378"));
        assert!(!v6.allows("bad/name"));
        assert_eq!(AllowedHosts::configured("bad/name"), None);
        assert_eq!(AllowedHosts::configured("dev.example:2378"), None);
        assert_eq!(
            AllowedHosts::configured(" Dev.Example"),
            Some(HostName::Name("dev.example".into()))
        );
    }

    #[test]
    fn an_allowed_host_is_written_back_as_the_plain_authority() {
        for (text, plain) in [
            ("LOCALHOST:2378", "localhost:2378"),
            ("app.localhost", "app.localhost"),
            ("127.0.0.1:2378", "127.0.0.1:2378"),
            ("[0:0:0:0:0:0:0:1]:2378", "[::1]:2378"),
        ] {
            let parsed = HostAuthority::parse(text).unwrap();
            assert_eq!(parsed.to_string(), plain);
        }
        assert_eq!(
            HostAuthority::parse("localhost:2378").unwrap(),
            HostAuthority {
                host: HostName::Name("localhost".into()),
                port: Some(2378),
            }
        );
        assert_eq!(HostAuthority::parse("evil.com/.localhost"), None);
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
            "http://localhost:99999999999/healthz",
            "http://localhost:0/healthz",
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
