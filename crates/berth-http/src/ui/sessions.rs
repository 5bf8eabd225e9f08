//! Sign-in codes and session tokens for the web page.
//!
//! The page holds no ambient credential: a cookie would be sent to every port of the loopback
//! address, host endpoints of other people's images among them. Instead a service key asks for
//! a sign-in code (good for [`CODE_TTL`], one use), the page trades it for a session token
//! (good for [`TOKEN_TTL`], until signed out), and sends that as a bearer. A token acts as the
//! key that asked for its code: it sees that key's domains and no other.
//!
//! Codes and tokens live only in memory and only as their sha256: a daemon restart signs every
//! page out. Neither ever reaches a log.
//!
//! Each key holds at most [`MAX_CODES_PER_KEY`] codes and [`MAX_TOKENS_PER_KEY`] tokens; beyond
//! that, that key's oldest goes first. No key's asking ever evicts another key's code or token.
//! There is no separate global bound: an owner is always the hash of a service key the daemon
//! was started with (only a service key may ask for a code), so what is held is at most the
//! number of keys times these limits.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use berth_core::time::Timestamp;
use sha2::{Digest, Sha256};

/// How long a sign-in code is good for.
pub const CODE_TTL: Duration = Duration::from_secs(120);
/// How long a session token is good for.
pub const TOKEN_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// The most sign-in codes one key holds at once: beyond it, that key's oldest goes first.
pub const MAX_CODES_PER_KEY: usize = 16;
/// The most session tokens one key holds at once: beyond it, that key's oldest session is
/// signed out.
pub const MAX_TOKENS_PER_KEY: usize = 64;

/// What a code or a token stands for.
#[derive(Debug, Clone)]
struct Grant {
    /// The hash of the service key that asked for it.
    owner: String,
    /// When it stops working, on the monotonic clock.
    expires: Instant,
    /// The order it was handed out in: the oldest of a key goes first.
    serial: u64,
}

#[derive(Default)]
struct Held {
    codes: HashMap<[u8; 32], Grant>,
    tokens: HashMap<[u8; 32], Grant>,
    /// The next grant's serial.
    next_serial: u64,
}

/// A secret handed out, with when it expires.
pub struct Issued {
    /// The secret: 32 random bytes, hex.
    pub secret: String,
    /// When it expires, on the wall clock.
    pub expires_at: Timestamp,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Issued(expires {})", self.expires_at)
    }
}

/// The sign-in codes and session tokens this daemon handed out.
#[derive(Default)]
pub struct UiSessions {
    held: Mutex<Held>,
}

impl std::fmt::Debug for UiSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        write!(
            f,
            "UiSessions({} codes, {} tokens)",
            held.codes.len(),
            held.tokens.len()
        )
    }
}

/// The sha256 of a presented secret: what is kept and looked up.
pub fn secret_hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

fn fresh_secret() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    hex::encode(bytes)
}

/// Holds a new secret for `owner`, first dropping what expired and, when `owner` already holds
/// `per_key`, `owner`'s oldest: never another owner's.
fn insert(
    map: &mut HashMap<[u8; 32], Grant>,
    serial: &mut u64,
    owner: &str,
    ttl: Duration,
    per_key: usize,
) -> Issued {
    let now = Instant::now();
    map.retain(|_, g| g.expires > now);
    let mut own: Vec<([u8; 32], u64)> = map
        .iter()
        .filter(|(_, g)| g.owner == owner)
        .map(|(k, g)| (*k, g.serial))
        .collect();
    if own.len() >= per_key {
        own.sort_by_key(|(_, serial)| *serial);
        for (k, _) in &own[..=own.len() - per_key] {
            map.remove(k);
        }
    }
    *serial += 1;
    let secret = fresh_secret();
    map.insert(
        secret_hash(&secret),
        Grant {
            owner: owner.to_owned(),
            expires: now + ttl,
            serial: *serial,
        },
    );
    Issued {
        secret,
        expires_at: Timestamp::now().plus(ttl),
    }
}

impl UiSessions {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new sign-in code for the key whose hash is `owner`.
    pub fn issue_code(&self, owner: &str) -> Issued {
        let mut guard = self.held();
        let held = &mut *guard;
        insert(
            &mut held.codes,
            &mut held.next_serial,
            owner,
            CODE_TTL,
            MAX_CODES_PER_KEY,
        )
    }

    /// Trades a code for a session token: the code is spent whether or not it was still good.
    pub fn redeem(&self, code: &str) -> Option<Issued> {
        let mut guard = self.held();
        let held = &mut *guard;
        let grant = held.codes.remove(&secret_hash(code))?;
        if grant.expires <= Instant::now() {
            return None;
        }
        Some(insert(
            &mut held.tokens,
            &mut held.next_serial,
            &grant.owner,
            TOKEN_TTL,
            MAX_TOKENS_PER_KEY,
        ))
    }

    /// The owner a session token acts for, while it is good.
    pub fn check(&self, token: &str) -> Option<String> {
        let h = secret_hash(token);
        let mut held = self.held();
        let grant = held.tokens.get(&h)?;
        if grant.expires <= Instant::now() {
            held.tokens.remove(&h);
            return None;
        }
        Some(grant.owner.clone())
    }

    /// Revokes a session token; `true` if it was held.
    pub fn revoke(&self, token_hash: &[u8; 32]) -> bool {
        self.held().tokens.remove(token_hash).is_some()
    }

    #[cfg(test)]
    fn expire_all(&self) {
        let past = Instant::now() - Duration::from_secs(1);
        let mut guard = self.held();
        let held = &mut *guard;
        for g in held.codes.values_mut().chain(held.tokens.values_mut()) {
            g.expires = past;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_is_good_once_and_its_token_acts_for_the_owner_until_revoked() {
        let s = UiSessions::default();
        let code = s.issue_code("owner-a");
        assert_eq!(code.secret.len(), 64);
        let token = s.redeem(&code.secret).expect("a fresh code");
        assert!(s.redeem(&code.secret).is_none(), "a code is good once");
        assert_eq!(s.check(&token.secret).as_deref(), Some("owner-a"));
        assert!(s.check(&code.secret).is_none(), "a code is no token");
        assert!(s.check("nope").is_none());
        assert!(s.revoke(&secret_hash(&token.secret)));
        assert!(s.check(&token.secret).is_none());
        assert!(!format!("{s:?}{code:?}").contains(&code.secret));
    }

    #[test]
    fn expired_codes_and_tokens_do_not_work() {
        let s = UiSessions::default();
        let code = s.issue_code("o");
        let spare = s.issue_code("o");
        let token = s.redeem(&code.secret).unwrap();
        s.expire_all();
        assert!(s.redeem(&spare.secret).is_none());
        assert!(s.check(&token.secret).is_none());
    }

    #[test]
    fn a_key_holds_a_bounded_number_of_codes_and_its_oldest_goes_first() {
        let s = UiSessions::default();
        let first = s.issue_code("o");
        let second = s.issue_code("o");
        for _ in 0..MAX_CODES_PER_KEY - 1 {
            s.issue_code("o");
        }
        assert_eq!(s.held().codes.len(), MAX_CODES_PER_KEY);
        assert!(s.redeem(&first.secret).is_none(), "the oldest went first");
        assert!(s.redeem(&second.secret).is_some(), "the rest are kept");
    }

    #[test]
    fn a_key_holds_a_bounded_number_of_sessions_and_its_oldest_is_signed_out_first() {
        let s = UiSessions::default();
        let session = |owner: &str| s.redeem(&s.issue_code(owner).secret).unwrap();
        let first = session("o");
        let second = session("o");
        for _ in 0..MAX_TOKENS_PER_KEY - 1 {
            session("o");
        }
        assert_eq!(s.held().tokens.len(), MAX_TOKENS_PER_KEY);
        assert!(s.check(&first.secret).is_none(), "the oldest went first");
        assert_eq!(s.check(&second.secret).as_deref(), Some("o"));
    }

    #[test]
    fn one_keys_flood_of_codes_and_sessions_never_evicts_another_keys() {
        let s = UiSessions::default();
        let a_session = s.redeem(&s.issue_code("a").secret).unwrap();
        let a_code = s.issue_code("a");
        for _ in 0..10 * (MAX_CODES_PER_KEY + MAX_TOKENS_PER_KEY) {
            let b = s.issue_code("b");
            s.redeem(&b.secret).unwrap();
            s.issue_code("b");
        }
        {
            let held = s.held();
            let of =
                |m: &HashMap<[u8; 32], Grant>, o: &str| m.values().filter(|g| g.owner == o).count();
            assert_eq!(of(&held.codes, "b"), MAX_CODES_PER_KEY);
            assert_eq!(of(&held.tokens, "b"), MAX_TOKENS_PER_KEY);
            assert_eq!(held.codes.len(), MAX_CODES_PER_KEY + 1);
            assert_eq!(held.tokens.len(), MAX_TOKENS_PER_KEY + 1);
        }
        assert_eq!(s.check(&a_session.secret).as_deref(), Some("a"));
        let a_token = s
            .redeem(&a_code.secret)
            .expect("a's pending code still works");
        assert_eq!(s.check(&a_token.secret).as_deref(), Some("a"));
    }
}
