//! GitHub's rate limits, read from response headers, and the per-credential gate.
//!
//! Facts (github-api.md §5): every response carries `x-ratelimit-{limit,remaining,used,reset,
//! resource}`; the primary budget is per credential per hour. An exhausted budget answers
//! 403/429 with `x-ratelimit-remaining: 0` (wait for `x-ratelimit-reset`); a secondary limit
//! answers 403/429 with `retry-after` seconds, or with neither header, in which case GitHub asks
//! for at least a minute. "Continuing to make requests while you are rate limited may result in
//! the banning of your integration", so the gate remembers the block and the client sends
//! nothing for that credential until it ends.

use std::time::Duration;

use jiff::Timestamp;
use reqwest::header::HeaderMap;

use crate::clock::add;
use crate::error::RateLimitKind;
use crate::models::RateLimit;

/// How long to stay away after a secondary limit that names no time ("wait at least one minute").
pub const DEFAULT_SECONDARY_WAIT: Duration = Duration::from_secs(60);

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// The budget in a response's `x-ratelimit-*` headers, if all numeric ones are present.
pub fn parse_budget(headers: &HeaderMap) -> Option<RateLimit> {
    let limit = header_u64(headers, "x-ratelimit-limit")?;
    let remaining = header_u64(headers, "x-ratelimit-remaining")?;
    let reset = header_u64(headers, "x-ratelimit-reset")?;
    let used = header_u64(headers, "x-ratelimit-used").unwrap_or(limit.saturating_sub(remaining));
    let resource = headers
        .get("x-ratelimit-resource")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("core")
        .to_owned();
    Some(RateLimit {
        limit,
        remaining,
        used,
        reset: Timestamp::from_second(i64::try_from(reset).ok()?).ok()?,
        resource,
    })
}

/// Whether an error response is a rate limit, and until when to stay away. `None` means a
/// plain 403 (a missing permission) or any other status.
pub fn classify(
    status: u16,
    headers: &HeaderMap,
    message: &str,
    now: Timestamp,
) -> Option<(RateLimitKind, Timestamp)> {
    if status != 403 && status != 429 {
        return None;
    }
    let remaining = header_u64(headers, "x-ratelimit-remaining");
    let kind = if remaining == Some(0) {
        RateLimitKind::Primary
    } else {
        RateLimitKind::Secondary
    };
    // GitHub's documented order: retry-after first, then the reset of an exhausted budget.
    if let Some(seconds) = header_u64(headers, "retry-after") {
        return Some((kind, add(now, Duration::from_secs(seconds))));
    }
    if remaining == Some(0) {
        let reset = header_u64(headers, "x-ratelimit-reset")
            .and_then(|s| Timestamp::from_second(i64::try_from(s).ok()?).ok())
            .filter(|reset| *reset > now)
            .unwrap_or_else(|| add(now, DEFAULT_SECONDARY_WAIT));
        return Some((RateLimitKind::Primary, reset));
    }
    let lower = message.to_ascii_lowercase();
    if status == 429 || lower.contains("rate limit") {
        return Some((RateLimitKind::Secondary, add(now, DEFAULT_SECONDARY_WAIT)));
    }
    None
}

/// The rate-limit state of one credential: its latest budget and any block in force.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    budget: Option<RateLimit>,
    block: Option<(RateLimitKind, Timestamp)>,
}

impl Gate {
    /// Records the budget of a fresh response.
    pub(crate) fn observe(&mut self, budget: Option<RateLimit>) {
        if budget.is_some() {
            self.budget = budget;
        }
    }

    /// Blocks the credential until `until` (a later block wins).
    pub(crate) fn block(&mut self, kind: RateLimitKind, until: Timestamp) {
        match self.block {
            Some((_, current)) if current >= until => {}
            _ => self.block = Some((kind, until)),
        }
    }

    /// The block in force at `now`: an explicit one, or an exhausted budget whose window has
    /// not reset yet (sending would only earn another 403).
    pub(crate) fn blocked(&self, now: Timestamp) -> Option<(RateLimitKind, Timestamp)> {
        if let Some((kind, until)) = self.block
            && until > now
        {
            return Some((kind, until));
        }
        match &self.budget {
            Some(b) if b.remaining == 0 && b.reset > now => Some((RateLimitKind::Primary, b.reset)),
            _ => None,
        }
    }

    pub(crate) fn budget(&self) -> Option<RateLimit> {
        self.budget.clone()
    }
}

#[cfg(test)]
mod tests {
    use reqwest::header::{HeaderName, HeaderValue};

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn budget_from_real_headers() {
        let h = headers(&[
            ("X-RateLimit-Limit", "5000"),
            ("X-RateLimit-Remaining", "4962"),
            ("X-RateLimit-Reset", "1658208999"),
            ("X-RateLimit-Used", "38"),
            ("X-RateLimit-Resource", "core"),
        ]);
        let b = parse_budget(&h).unwrap();
        assert_eq!((b.limit, b.remaining, b.used), (5000, 4962, 38));
        assert_eq!(b.reset, t(1_658_208_999));
        assert_eq!(b.resource, "core");
    }

    #[test]
    fn budget_needs_the_numbers() {
        assert_eq!(
            parse_budget(&headers(&[("x-ratelimit-limit", "5000")])),
            None
        );
        assert_eq!(
            parse_budget(&headers(&[
                ("x-ratelimit-limit", "x"),
                ("x-ratelimit-remaining", "1"),
                ("x-ratelimit-reset", "1"),
            ])),
            None
        );
    }

    #[test]
    fn retry_after_wins() {
        let h = headers(&[("retry-after", "30"), ("x-ratelimit-remaining", "12")]);
        assert_eq!(
            classify(403, &h, "You have exceeded a secondary rate limit", t(1000)),
            Some((RateLimitKind::Secondary, t(1030)))
        );
    }

    #[test]
    fn exhausted_budget_waits_for_reset() {
        let h = headers(&[
            ("x-ratelimit-remaining", "0"),
            ("x-ratelimit-reset", "5000"),
        ]);
        assert_eq!(
            classify(403, &h, "API rate limit exceeded for user ID 1.", t(1000)),
            Some((RateLimitKind::Primary, t(5000)))
        );
        // A reset in the past (clock skew) still keeps us away for a minute.
        let h = headers(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "10")]);
        assert_eq!(
            classify(429, &h, "", t(1000)),
            Some((RateLimitKind::Primary, t(1060)))
        );
    }

    #[test]
    fn secondary_without_headers_waits_a_minute() {
        let h = headers(&[("x-ratelimit-remaining", "100")]);
        assert_eq!(
            classify(403, &h, "You have exceeded a secondary rate limit.", t(0)),
            Some((RateLimitKind::Secondary, t(60)))
        );
        assert_eq!(
            classify(429, &HeaderMap::new(), "", t(0)),
            Some((RateLimitKind::Secondary, t(60)))
        );
    }

    #[test]
    fn plain_forbidden_is_not_a_limit() {
        let h = headers(&[("x-ratelimit-remaining", "100")]);
        assert_eq!(
            classify(403, &h, "Resource not accessible by integration", t(0)),
            None
        );
        assert_eq!(classify(500, &h, "rate limit", t(0)), None);
    }

    #[test]
    fn gate_blocks_until_the_later_time_and_on_exhausted_budget() {
        let mut gate = Gate::default();
        gate.block(RateLimitKind::Secondary, t(100));
        gate.block(RateLimitKind::Secondary, t(50));
        assert_eq!(
            gate.blocked(t(60)),
            Some((RateLimitKind::Secondary, t(100)))
        );
        assert_eq!(gate.blocked(t(100)), None);
        gate.observe(Some(RateLimit {
            limit: 10,
            remaining: 0,
            used: 10,
            reset: t(500),
            resource: "core".into(),
        }));
        assert_eq!(gate.blocked(t(200)), Some((RateLimitKind::Primary, t(500))));
        assert_eq!(gate.blocked(t(500)), None);
    }
}
