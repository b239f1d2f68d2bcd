//! Who a web request is: one-time tokens, sessions and the scrape token.
//!
//! HTTP has no peer credentials, so the web view borrows the control socket's: `streamline
//! web` asks the daemon (`Request::Web`, on a connection whose uid the kernel vouches
//! for) for a token bound to that user, and prints the URL carrying it, as Jupyter does.
//! Opening the URL redeems the token once for a session (a cookie of this daemon's port,
//! `HttpOnly; SameSite=Strict`); the token is then gone. A session acts as its user and
//! sees what `ps` shows that user. `/metrics` also takes the scrape token, written at start
//! to a file only root can read: it sees every run, as root's `ps` does.
//!
//! Owns: the tables of tokens and sessions, their lifetimes and bounds. Every secret is 32
//! bytes from the kernel's random source (`/dev/urandom`), in hex.

use crate::policy::Cred;
use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a token waits to be redeemed.
pub const TOKEN_LIFE: Duration = Duration::from_secs(600);
/// How long a session lives without a request.
pub const SESSION_IDLE: Duration = Duration::from_secs(12 * 3600);
/// Tokens waiting per user (the oldest goes first): asking many times grows nothing.
pub const TOKENS_PER_USER: usize = 8;
/// Sessions at most, all users together (the least recently used goes first).
pub const SESSIONS_MAX: usize = 256;

/// A fresh secret: 32 random bytes in hex.
pub fn secret() -> std::io::Result<String> {
    let mut b = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

#[derive(Default)]
struct Tables {
    /// Token -> (its user, when issued).
    tokens: HashMap<String, (Cred, Instant)>,
    /// Session -> (its user, last used).
    sessions: HashMap<String, (Cred, Instant)>,
}

/// The web view's tokens and sessions.
pub struct Sessions {
    t: Mutex<Tables>,
    /// The scrape token (`/metrics` as root sees it).
    scrape: String,
}

/// Who a request is, as far as the web view knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    /// A session's user.
    User(Cred),
    /// The holder of the scrape token: `/metrics` of every run, nothing else.
    Scraper,
}

impl Sessions {
    pub fn new(scrape: String) -> Sessions {
        Sessions {
            t: Mutex::new(Tables::default()),
            scrape,
        }
    }

    pub fn scrape_token(&self) -> &str {
        &self.scrape
    }

    /// A one-time token for `who`.
    pub fn issue(&self, who: &Cred) -> std::io::Result<String> {
        let tok = secret()?;
        let mut t = self.t.lock().expect("not poisoned");
        t.tokens.retain(|_, (_, at)| at.elapsed() < TOKEN_LIFE);
        let mut mine: Vec<(String, Instant)> = t
            .tokens
            .iter()
            .filter(|(_, (c, _))| c.uid == who.uid)
            .map(|(k, (_, at))| (k.clone(), *at))
            .collect();
        mine.sort_by_key(|(_, at)| *at);
        while mine.len() >= TOKENS_PER_USER {
            let (k, _) = mine.remove(0);
            t.tokens.remove(&k);
        }
        t.tokens.insert(tok.clone(), (who.clone(), Instant::now()));
        Ok(tok)
    }

    /// Redeem `token` (once) for a new session of its user: the session's id.
    pub fn redeem(&self, token: &str) -> Option<String> {
        let mut t = self.t.lock().expect("not poisoned");
        let (cred, at) = t.tokens.remove(token)?;
        if at.elapsed() >= TOKEN_LIFE {
            return None;
        }
        let id = secret().ok()?;
        t.sessions
            .retain(|_, (_, used)| used.elapsed() < SESSION_IDLE);
        while t.sessions.len() >= SESSIONS_MAX {
            let oldest = t
                .sessions
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => t.sessions.remove(&k),
                None => break,
            };
        }
        t.sessions.insert(id.clone(), (cred, Instant::now()));
        Some(id)
    }

    /// The user of session `id`, if it lives (and it is used now).
    pub fn session(&self, id: &str) -> Option<Cred> {
        let mut t = self.t.lock().expect("not poisoned");
        let s = t.sessions.get_mut(id)?;
        if s.1.elapsed() >= SESSION_IDLE {
            t.sessions.remove(id);
            return None;
        }
        s.1 = Instant::now();
        Some(s.0.clone())
    }

    /// Who a bearer credential is: a session, or the scrape token.
    pub fn bearer(&self, secret: &str) -> Option<Who> {
        if !secret.is_empty() && secret == self.scrape {
            return Some(Who::Scraper);
        }
        self.session(secret).map(Who::User)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(uid: u32) -> Cred {
        Cred {
            uid,
            gid: uid,
            groups: vec![uid],
        }
    }

    #[test]
    fn a_token_opens_one_session_of_its_user_once() {
        let s = Sessions::new(secret().unwrap());
        let t = s.issue(&cred(65534)).unwrap();
        assert_eq!(t.len(), 64);
        let id = s.redeem(&t).expect("redeemed");
        assert_eq!(s.session(&id), Some(cred(65534)));
        assert_eq!(s.redeem(&t), None, "a token is good once");
        assert_eq!(s.session(&t), None, "a token is no session");
        assert_eq!(s.bearer(&id), Some(Who::User(cred(65534))));
        assert_eq!(s.bearer("nope"), None);
    }

    #[test]
    fn the_scrape_token_is_only_the_scraper() {
        let scrape = secret().unwrap();
        let s = Sessions::new(scrape.clone());
        assert_eq!(s.bearer(&scrape), Some(Who::Scraper));
        assert_eq!(s.session(&scrape), None);
        assert_eq!(s.redeem(&scrape), None);
        assert_eq!(s.bearer(""), None);
    }

    #[test]
    fn tokens_waiting_per_user_are_bounded() {
        let s = Sessions::new(secret().unwrap());
        let first = s.issue(&cred(7)).unwrap();
        for _ in 0..TOKENS_PER_USER {
            s.issue(&cred(7)).unwrap();
        }
        let other = s.issue(&cred(8)).unwrap();
        assert_eq!(s.redeem(&first), None, "the oldest went first");
        assert!(s.redeem(&other).is_some(), "another user's is untouched");
        assert_eq!(
            s.t.lock().unwrap().tokens.len(),
            TOKENS_PER_USER,
            "uid 7's newest remain"
        );
    }
}
