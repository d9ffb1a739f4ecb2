//! Waiting for something that happens asynchronously: poll a check until it holds, or give up
//! after a time limit and say what was awaited.
//!
//! | entry point | check | on timeout | clock |
//! |---|---|---|---|
//! | [`eventually`] | async, `Option<T>`, every [`POLL`] | panics with what | real time |
//! | [`eventually_described`] | async, `Option<T>`, every `poll` | panics with what and `describe`'s account | tokio's (pausable) |
//! | [`eventually_of`] | as above, `poll` and account from a [`Describe`] subject | panics likewise | tokio's |
//! | [`try_eventually`] | async, `Option<T>`, every `poll` | [`TimedOut`] (for `anyhow` callers) | tokio's |
//! | [`until`] | sync, `bool`, every `poll` | [`TimedOut`]; else how long it took | tokio's |
//!
//! Tokio's clock is real time unless a test pauses it; then a wait's limit is virtual too.
//!
//! A check runs once more at the limit's edge only if the previous poll came before it: the
//! limit bounds the wait, not one slow check.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often [`eventually`] polls.
pub const POLL: Duration = Duration::from_millis(200);

/// What was awaited, and for how long, when it did not happen in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timed out after {after:?} waiting for {what}")]
pub struct TimedOut {
    /// What was awaited.
    pub what: String,
    /// The time limit.
    pub after: Duration,
}

/// Polls `check` every [`POLL`] until it returns `Some`, or panics with `what` after
/// `timeout` (real time).
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < until,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `check` every `poll` until it returns `Some`; on timeout (tokio's clock, so paused
/// time counts), panics with `what` and what `describe` says (the state of the test's
/// objects).
pub async fn eventually_described<T, F, Fut, D, DFut>(
    what: &str,
    timeout: Duration,
    poll: Duration,
    describe: D,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
    D: FnOnce() -> DFut,
    DFut: Future<Output = String>,
{
    let until = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() >= until {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                describe().await
            );
        }
        tokio::time::sleep(poll).await;
    }
}

/// A test's world that can account for itself when a wait times out.
pub trait Describe {
    /// How often waits on this subject poll.
    const POLL: Duration = POLL;

    /// The state of the test's objects, for a failure message.
    fn describe(&self) -> impl Future<Output = String>;
}

/// [`eventually_described`] on `subject`: polls every `S::POLL`, and on timeout panics with
/// `what` and `subject.describe()`.
pub async fn eventually_of<S, T, F, Fut>(subject: &S, what: &str, timeout: Duration, check: F) -> T
where
    S: Describe,
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_described(what, timeout, S::POLL, || subject.describe(), check).await
}

/// Polls `check` every `poll` until it returns `Some`; [`TimedOut`] after `timeout`.
pub async fn try_eventually<T, F, Fut>(
    what: &str,
    timeout: Duration,
    poll: Duration,
    mut check: F,
) -> Result<T, TimedOut>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() > until {
            return Err(TimedOut {
                what: what.to_owned(),
                after: timeout,
            });
        }
        tokio::time::sleep(poll).await;
    }
}

/// Polls the synchronous `check` every `poll` until it is true; how long that took, or
/// [`TimedOut`] after `limit`.
pub async fn until(
    what: &str,
    limit: Duration,
    poll: Duration,
    mut check: impl FnMut() -> bool,
) -> Result<Duration, TimedOut> {
    let started = tokio::time::Instant::now();
    loop {
        if check() {
            return Ok(started.elapsed());
        }
        if started.elapsed() > limit {
            return Err(TimedOut {
                what: what.to_owned(),
                after: limit,
            });
        }
        tokio::time::sleep(poll).await;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test]
    async fn a_check_that_comes_true_yields_its_value() {
        let polls = Cell::new(0);
        let v = eventually("the third poll", 10 * POLL, || {
            polls.set(polls.get() + 1);
            let n = polls.get();
            async move { (n == 3).then_some(n) }
        })
        .await;
        assert_eq!(v, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 1ms waiting for nothing")]
    async fn a_check_that_never_holds_panics_with_what_was_awaited() {
        eventually("nothing", MS, || async { None::<()> }).await;
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "waiting for the sky\nit is blue")]
    async fn a_described_wait_says_what_the_world_looks_like() {
        let describe = || async { "it is blue".to_owned() };
        eventually_described("the sky", POLL, MS, describe, || async { None::<()> }).await;
    }

    struct Sky;

    impl Describe for Sky {
        const POLL: Duration = Duration::from_secs(7);

        async fn describe(&self) -> String {
            "still blue".to_owned()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_subject_sets_the_poll_interval() {
        let started = tokio::time::Instant::now();
        let polls = Cell::new(0);
        eventually_of(&Sky, "two polls", Duration::from_secs(60), || {
            polls.set(polls.get() + 1);
            let done = polls.get() == 2;
            async move { done.then_some(()) }
        })
        .await;
        assert_eq!(started.elapsed(), Duration::from_secs(7));
    }

    #[tokio::test(start_paused = true)]
    async fn until_counts_virtual_time_when_it_is_paused() {
        let err = until("never", Duration::from_secs(600), POLL, || false)
            .await
            .unwrap_err();
        assert_eq!(err.after, Duration::from_secs(600));
    }

    #[tokio::test]
    async fn try_and_until_report_a_timeout_as_an_error() {
        let err = try_eventually("never", MS, MS, || async { None::<()> })
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "timed out after 1ms waiting for never");
        assert_eq!(
            try_eventually("now", MS, MS, || async { Some(1) }).await,
            Ok(1)
        );
        let err = until("never", MS, MS, || false).await.unwrap_err();
        assert_eq!(err.what, "never");
        let mut left = 3;
        let took = until("three polls", Duration::from_secs(5), MS, || {
            left -= 1;
            left == 0
        })
        .await
        .unwrap();
        assert!(took >= 2 * MS, "{took:?}");
    }
}
