//! A private HTTP cache for GET responses, per credential.
//!
//! GitHub marks API responses `Cache-Control: private, max-age=60, s-maxage=60` and sends an
//! `ETag`. Within `max-age` a response is reused without asking; after that it is revalidated
//! with `If-None-Match`, and a `304 Not Modified` — which does not count against the rate limit
//! — renews it. This is what makes ARC's List Runners cost scale with scopes, not runners.
//! `private` is fine here: the cache belongs to one credential (GitHub's responses `Vary` on
//! `Authorization`), which is also why one cache is shared by every user of that credential.
//! The cache is bounded; the entry closest to expiry is evicted first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;

use crate::clock::add;

/// The directives of a `Cache-Control` header that matter to a private cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `max-age`, if present.
    pub max_age: Option<Duration>,
    /// `no-store`: never keep the response.
    pub no_store: bool,
    /// `no-cache`: keep it but revalidate every time.
    pub no_cache: bool,
}

impl CacheControl {
    /// Parses a `Cache-Control` value. Unknown directives (`private`, `s-maxage`, …) are
    /// ignored; `s-maxage` is for shared caches only.
    pub fn parse(value: &str) -> Self {
        let mut out = Self::default();
        for directive in value.split(',') {
            let directive = directive.trim();
            let (name, arg) = match directive.split_once('=') {
                Some((n, a)) => (n.trim(), Some(a.trim().trim_matches('"'))),
                None => (directive, None),
            };
            match name.to_ascii_lowercase().as_str() {
                "max-age" => {
                    out.max_age = arg.and_then(|a| a.parse().ok()).map(Duration::from_secs)
                }
                "no-store" => out.no_store = true,
                "no-cache" => out.no_cache = true,
                _ => {}
            }
        }
        out
    }

    /// How long a response stays fresh, given its `Age` header.
    pub fn lifetime(&self, age: Duration) -> Duration {
        if self.no_cache {
            return Duration::ZERO;
        }
        self.max_age.unwrap_or_default().saturating_sub(age)
    }
}

/// What a response says about its own freshness: `Cache-Control` and `Age`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Freshness {
    pub control: CacheControl,
    pub age: Duration,
}

impl Freshness {
    fn lifetime(&self) -> Duration {
        self.control.lifetime(self.age)
    }
}

/// A stored response.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub etag: Option<String>,
    pub body: Arc<[u8]>,
    /// The `Link` header (pagination) of the stored response.
    pub link: Option<String>,
    pub fresh_until: Timestamp,
}

impl Entry {
    pub(crate) fn is_fresh(&self, now: Timestamp) -> bool {
        now < self.fresh_until
    }
}

/// The cache proper, keyed by full request URL.
#[derive(Debug)]
pub(crate) struct ResponseCache {
    entries: Mutex<HashMap<String, Entry>>,
    capacity: usize,
}

impl ResponseCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            capacity,
        }
    }

    pub(crate) fn get(&self, url: &str) -> Option<Entry> {
        self.entries.lock().expect("cache lock").get(url).cloned()
    }

    /// Stores a 200 response if it may be reused: not `no-store`, and either fresh for a while
    /// or revalidatable by ETag.
    pub(crate) fn store(
        &self,
        url: &str,
        freshness: Freshness,
        etag: Option<String>,
        link: Option<String>,
        body: Arc<[u8]>,
        now: Timestamp,
    ) {
        let lifetime = freshness.lifetime();
        if freshness.control.no_store || (lifetime.is_zero() && etag.is_none()) {
            self.invalidate(url);
            return;
        }
        let mut entries = self.entries.lock().expect("cache lock");
        if entries.len() >= self.capacity && !entries.contains_key(url) {
            let victim = entries
                .iter()
                .min_by_key(|(_, e)| e.fresh_until)
                .map(|(k, _)| k.clone());
            if let Some(victim) = victim {
                entries.remove(&victim);
            }
        }
        entries.insert(
            url.to_owned(),
            Entry {
                etag,
                body,
                link,
                fresh_until: add(now, lifetime),
            },
        );
    }

    /// Renews a stored response after a `304 Not Modified`; returns it.
    pub(crate) fn revalidated(
        &self,
        url: &str,
        freshness: Freshness,
        now: Timestamp,
    ) -> Option<Entry> {
        let mut entries = self.entries.lock().expect("cache lock");
        let entry = entries.get_mut(url)?;
        entry.fresh_until = add(now, freshness.lifetime());
        Some(entry.clone())
    }

    pub(crate) fn invalidate(&self, url: &str) {
        self.entries.lock().expect("cache lock").remove(url);
    }

    /// Drops every entry whose URL starts with `prefix` (a collection changed).
    pub(crate) fn invalidate_prefix(&self, prefix: &str) {
        self.entries
            .lock()
            .expect("cache lock")
            .retain(|url, _| !url.starts_with(prefix));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn fr(header: &str, age: u64) -> Freshness {
        Freshness {
            control: CacheControl::parse(header),
            age: Duration::from_secs(age),
        }
    }

    fn body() -> Arc<[u8]> {
        Arc::from(&b"{}"[..])
    }

    #[test]
    fn parses_githubs_header() {
        let c = CacheControl::parse("private, max-age=60, s-maxage=60");
        assert_eq!(c.max_age, Some(Duration::from_secs(60)));
        assert!(!c.no_store && !c.no_cache);
        assert!(CacheControl::parse("no-store").no_store);
        assert!(CacheControl::parse("No-Cache").no_cache);
        assert_eq!(
            CacheControl::parse("max-age=\"5\"").max_age,
            Some(Duration::from_secs(5))
        );
        assert_eq!(CacheControl::parse("max-age=x").max_age, None);
    }

    #[test]
    fn fresh_for_max_age_minus_age() {
        let cache = ResponseCache::new(10);
        let etag = Some("\"e\"".to_owned());
        cache.store("u", fr("private, max-age=60", 10), etag, None, body(), t(0));
        let e = cache.get("u").unwrap();
        assert!(e.is_fresh(t(49)));
        assert!(!e.is_fresh(t(50)));
    }

    #[test]
    fn revalidation_renews_freshness() {
        let cache = ResponseCache::new(10);
        let etag = Some("W/\"e\"".to_owned());
        cache.store("u", fr("max-age=60", 0), etag, None, body(), t(0));
        let e = cache.revalidated("u", fr("max-age=60", 0), t(100)).unwrap();
        assert!(e.is_fresh(t(159)));
        assert_eq!(e.etag.as_deref(), Some("W/\"e\""));
        assert!(
            cache
                .revalidated("other", fr("max-age=60", 0), t(100))
                .is_none()
        );
    }

    #[test]
    fn no_store_and_unvalidatable_responses_are_not_kept() {
        let cache = ResponseCache::new(10);
        let etag = Some("e".to_owned());
        cache.store(
            "a",
            fr("no-store, max-age=60", 0),
            etag.clone(),
            None,
            body(),
            t(0),
        );
        cache.store("b", fr("", 0), None, None, body(), t(0));
        assert_eq!(cache.len(), 0);
        // no-cache with an ETag: kept, but stale at once, so always revalidated.
        cache.store("c", fr("no-cache", 0), etag, None, body(), t(0));
        assert!(!cache.get("c").unwrap().is_fresh(t(0)));
    }

    #[test]
    fn bounded_and_prefix_invalidation() {
        let cache = ResponseCache::new(2);
        cache.store("x/1", fr("max-age=60", 0), None, None, body(), t(0));
        cache.store("x/2", fr("max-age=60", 0), None, None, body(), t(10));
        cache.store("y/1", fr("max-age=60", 0), None, None, body(), t(20));
        assert_eq!(cache.len(), 2);
        assert!(
            cache.get("x/1").is_none(),
            "the entry closest to expiry goes first"
        );
        cache.invalidate_prefix("x/");
        assert_eq!(cache.len(), 1);
    }
}
