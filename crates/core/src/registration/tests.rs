//! Registration rules: one row per branch, plus precedence rows.

use super::*;

const MIN: Duration = Duration::from_secs(30 * 60);

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

#[test]
fn a_token_is_handed_out_only_while_it_lasts_the_minimum() {
    let now = t(10_000);
    let rows = [
        ("an hour left", t(10_000 + 3600), MIN, true),
        ("exactly the minimum left", t(10_000 + 1800), MIN, true),
        ("a second short", t(10_000 + 1799), MIN, false),
        ("expired", t(10_000 - 3600), MIN, false),
        ("expiring now, no minimum", now, Duration::ZERO, true),
        ("expired, no minimum", t(9_999), Duration::ZERO, false),
    ];
    for (claim, expires_at, min_ttl, fresh) in rows {
        assert_eq!(token_fresh(expires_at, now, min_ttl), fresh, "{claim}");
    }
}

#[test]
fn a_conflict_replaces_an_idle_orphan_and_never_a_busy_runner() {
    let idle = Some(Existing { id: 7, busy: false });
    let busy = Some(Existing { id: 7, busy: true });
    let rows = [
        (
            "idle orphan: delete, ask again",
            idle,
            1,
            OnConflict::DeleteThenGenerate(7),
        ),
        (
            "idle orphan, second try",
            idle,
            2,
            OnConflict::DeleteThenGenerate(7),
        ),
        (
            "idle orphan, last try: give up",
            idle,
            MAX_GENERATE_ATTEMPTS,
            OnConflict::GiveUp,
        ),
        (
            "busy: refuse, touch nothing",
            busy,
            1,
            OnConflict::RefuseBusy(7),
        ),
        (
            "busy outranks the attempt limit",
            busy,
            MAX_GENERATE_ATTEMPTS,
            OnConflict::RefuseBusy(7),
        ),
        (
            "gone meanwhile: ask again",
            None,
            1,
            OnConflict::GenerateAgain,
        ),
        (
            "gone, last try: give up",
            None,
            MAX_GENERATE_ATTEMPTS,
            OnConflict::GiveUp,
        ),
    ];
    for (claim, existing, attempt, want) in rows {
        assert_eq!(on_conflict(existing, attempt), want, "{claim}");
    }
}
