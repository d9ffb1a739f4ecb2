//! Rollout decisions: one row per branch, plus precedence rows.

use super::*;

const SYNC: Duration = Duration::from_secs(600);

/// A set `name` with `spec` replicas and (runners, ready) in its status.
fn set(name: &str, spec: Option<i32>, runners: i32, ready: i32) -> SetView {
    SetView {
        name: name.into(),
        spec_replicas: spec,
        status_replicas: runners,
        ready,
        available: ready,
        deleting: false,
    }
}

fn deleting(s: SetView) -> SetView {
    SetView {
        deleting: true,
        ..s
    }
}

/// A deployment wanting `replicas` whose newest set "new" has `newest_ready` ready runners.
fn input(replicas: i32, newest_ready: i32, sets: Vec<SetView>) -> RolloutInput {
    RolloutInput {
        newest: "new".into(),
        replicas,
        newest_ready,
        newest_replicas: newest_ready,
        sets,
        sync_period: SYNC,
    }
}

/// (claim, input, scale_to_zero, delete, requeue)
type Row = (
    &'static str,
    RolloutInput,
    &'static [&'static str],
    &'static [&'static str],
    Duration,
);

#[test]
fn older_sets_drain_only_after_the_newest_is_ready() {
    let s5 = ROLLOUT_REQUEUE;
    let rows: Vec<Row> = vec![
        (
            "rolled out: every old set with replicas is scaled to 0",
            input(
                2,
                2,
                vec![
                    set("new", Some(2), 2, 2),
                    set("a", Some(2), 2, 2),
                    set("b", None, 1, 1),
                ],
            ),
            &["a", "b"],
            &[],
            s5,
        ),
        (
            "more than ready enough counts as rolled out",
            input(2, 3, vec![set("a", Some(1), 1, 1)]),
            &["a"],
            &[],
            s5,
        ),
        (
            "not rolled out: no old set is scaled, look again soon",
            input(
                2,
                1,
                vec![set("new", Some(2), 2, 1), set("a", Some(2), 2, 2)],
            ),
            &[],
            &[],
            s5,
        ),
        (
            "old set at 0 without runners is deleted",
            input(
                2,
                2,
                vec![set("new", Some(2), 2, 2), set("a", Some(0), 0, 0)],
            ),
            &[],
            &["a"],
            SYNC,
        ),
        (
            "old set at 0 already being deleted is left alone",
            input(2, 2, vec![deleting(set("a", Some(0), 0, 0))]),
            &[],
            &[],
            s5,
        ),
        (
            "old set at 0 still draining waits",
            input(2, 2, vec![set("a", Some(0), 1, 0)]),
            &[],
            &[],
            s5,
        ),
        (
            "only the newest: sync period",
            input(2, 2, vec![set("new", Some(2), 2, 2)]),
            &[],
            &[],
            SYNC,
        ),
        (
            "the newest is never scaled or deleted, even at 0 without runners",
            input(0, 0, vec![set("new", Some(0), 0, 0)]),
            &[],
            &[],
            SYNC,
        ),
        (
            "a drained set is deleted while another is scaled: both in one pass",
            input(1, 1, vec![set("a", Some(0), 0, 0), set("b", Some(1), 1, 1)]),
            &["b"],
            &["a"],
            s5,
        ),
        (
            "an old set being deleted with replicas is still scaled once rolled out",
            input(1, 1, vec![deleting(set("a", Some(1), 1, 1))]),
            &["a"],
            &[],
            s5,
        ),
    ];
    for (claim, i, scale, delete, requeue) in rows {
        let p = plan(&i);
        let names = |v: &[String]| v.to_vec();
        let want = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            names(&p.scale_to_zero),
            want(scale),
            "{claim}: scale_to_zero"
        );
        assert_eq!(names(&p.delete), want(delete), "{claim}: delete");
        assert_eq!(p.requeue, requeue, "{claim}: requeue");
    }
}

#[test]
fn counts_sum_over_all_sets_and_updated_is_the_newest() {
    let i = RolloutInput {
        newest: "new".into(),
        replicas: 3,
        newest_ready: 1,
        newest_replicas: 2,
        sets: vec![
            SetView {
                available: 1,
                ..set("new", Some(3), 2, 1)
            },
            set("a", Some(3), 3, 3),
        ],
        sync_period: SYNC,
    };
    assert_eq!(
        plan(&i).counts,
        Counts {
            desired: 3,
            replicas: 5,
            ready: 4,
            available: 4,
            updated: 2,
            old_sets: 1,
        }
    );
}
