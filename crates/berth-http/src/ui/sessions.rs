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

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use berth_core::time::Timestamp;
use sha2::{Digest, Sha256};

/// How long a sign-in code is good for.
pub const CODE_TTL: Duration = Duration::from_secs(120);
/// How long a session token is good for.
pub const TOKEN_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// The most codes, and the most tokens, held at once: the oldest goes first beyond it.
const MAX_HELD: usize = 256;

/// What a code or a token stands for.
#[derive(Debug, Clone)]
struct Grant {
    /// The hash of the service key that asked for it.
    owner: String,
    /// When it stops working, on the monotonic clock.
    expires: Instant,
}

#[derive(Default)]
struct Held {
    codes: HashMap<[u8; 32], Grant>,
    tokens: HashMap<[u8; 32], Grant>,
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

fn insert(map: &mut HashMap<[u8; 32], Grant>, owner: &str, ttl: Duration) -> Issued {
    let now = Instant::now();
    map.retain(|_, g| g.expires > now);
    while map.len() >= MAX_HELD {
        let Some(oldest) = map.iter().min_by_key(|(_, g)| g.expires).map(|(k, _)| *k) else {
            break;
        };
        map.remove(&oldest);
    }
    let secret = fresh_secret();
    map.insert(
        secret_hash(&secret),
        Grant {
            owner: owner.to_owned(),
            expires: now + ttl,
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
        insert(&mut self.held().codes, owner, CODE_TTL)
    }

    /// Trades a code for a session token: the code is spent whether or not it was still good.
    pub fn redeem(&self, code: &str) -> Option<Issued> {
        let mut held = self.held();
        let grant = held.codes.remove(&secret_hash(code))?;
        if grant.expires <= Instant::now() {
            return None;
        }
        Some(insert(&mut held.tokens, &grant.owner, TOKEN_TTL))
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
    fn the_number_held_is_bounded() {
        let s = UiSessions::default();
        let first = s.issue_code("o");
        for _ in 0..MAX_HELD {
            s.issue_code("o");
        }
        assert!(s.held().codes.len() <= MAX_HELD);
        assert!(s.redeem(&first.secret).is_none(), "the oldest went first");
    }
}
