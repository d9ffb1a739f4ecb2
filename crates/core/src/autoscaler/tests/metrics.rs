//! Metrics: parsing, `PercentageRunnersBusy` math, job counting and the evaluation protocol.

use crate::autoscaler::metrics::*;
use crate::scope::RunnerScope;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

// ---- parse_decimal ----

#[test]
fn unset_or_empty_decimals_are_unset() {
    assert_eq!(parse_decimal(MetricField::ScaleUpFactor, None), Ok(None));
    assert_eq!(
        parse_decimal(MetricField::ScaleUpFactor, Some("")),
        Ok(None)
    );
}

#[test]
fn decimals_in_the_forms_the_schema_allows_parse() {
    for (text, value) in [
        ("0.75", 0.75),
        ("2", 2.0),
        ("+1.5", 1.5),
        (".5", 0.5),
        ("5.", 5.0),
        ("1e-1", 0.1),
        ("0", 0.0),
    ] {
        assert_eq!(
            parse_decimal(MetricField::ScaleUpThreshold, Some(text)),
            Ok(Some(value)),
            "{text}"
        );
    }
}

#[test]
fn non_numbers_negatives_and_non_finite_values_are_rejected_with_the_field_name() {
    for text in ["abc", "-0.5", "inf", "NaN", " 0.5", "0,5", "50%"] {
        let err = parse_decimal(MetricField::ScaleDownFactor, Some(text)).unwrap_err();
        assert_eq!(
            err,
            MetricError::InvalidDecimal {
                field: MetricField::ScaleDownFactor,
                value: text.into()
            }
        );
        assert!(err.to_string().contains("scaleDownFactor"), "{err}");
    }
}

// ---- BusyPolicy ----

fn busy_metric() -> Metric {
    Metric::new(MetricKind::PercentageRunnersBusy)
}

#[test]
fn busy_policy_defaults_are_arcs() {
    let p = BusyPolicy::from_metric(&busy_metric()).unwrap();
    assert_eq!(
        p,
        BusyPolicy {
            scale_up_threshold: 0.8,
            scale_down_threshold: 0.3,
            up: Step::Factor(1.3),
            down: Step::Factor(0.7),
        }
    );
}

#[test]
fn a_factor_with_an_adjustment_is_an_error_in_either_direction() {
    let up = Metric {
        scale_up_factor: Some(2.0),
        scale_up_adjustment: Some(1),
        ..busy_metric()
    };
    assert_eq!(
        BusyPolicy::from_metric(&up),
        Err(MetricError::FactorAndAdjustment {
            direction: Direction::Up
        })
    );
    let down = Metric {
        scale_down_factor: Some(0.5),
        scale_down_adjustment: Some(1),
        ..busy_metric()
    };
    let err = BusyPolicy::from_metric(&down).unwrap_err();
    assert_eq!(
        err.to_string(),
        "metrics[]: scaleDownFactor and scaleDownAdjustment are mutually exclusive: set only one \
         of them"
    );
}

#[test]
fn a_zero_adjustment_counts_as_unset_even_next_to_a_factor() {
    let m = Metric {
        scale_up_factor: Some(2.0),
        scale_up_adjustment: Some(0),
        ..busy_metric()
    };
    assert_eq!(BusyPolicy::from_metric(&m).unwrap().up, Step::Factor(2.0));
}

#[test]
fn a_negative_adjustment_is_an_error() {
    let m = Metric {
        scale_down_adjustment: Some(-2),
        ..busy_metric()
    };
    assert_eq!(
        BusyPolicy::from_metric(&m),
        Err(MetricError::NegativeAdjustment {
            field: MetricField::ScaleDownAdjustment,
            value: -2
        })
    );
}

#[test]
fn busy_suggestions_follow_thresholds_factors_and_adjustments() {
    let defaults = BusyPolicy::from_metric(&busy_metric()).unwrap();
    let adjust = BusyPolicy {
        up: Step::Adjustment(2),
        down: Step::Adjustment(3),
        ..defaults
    };
    let custom = BusyPolicy {
        scale_up_threshold: 0.5,
        scale_down_threshold: 0.1,
        up: Step::Factor(2.0),
        down: Step::Factor(0.5),
    };
    use Direction::{Down, Up};
    /// name, policy, replicas before, busy, suggested replicas, direction
    type Row = (&'static str, BusyPolicy, u32, u32, u32, Option<Direction>);
    #[rustfmt::skip]
    let table: &[Row] = &[
        // name,                                       policy,   before, busy, replicas, direction
        ("at the up threshold: ceil(5 * 1.3)",          defaults, 5,  4, 7,  Some(Up)),
        ("all busy: ceil(2 * 1.3)",                     defaults, 2,  2, 3,  Some(Up)),
        ("between thresholds: hold",                    defaults, 4,  3, 4,  None),
        ("at the down threshold: hold",                 defaults, 10, 3, 10, None),
        ("below the down threshold: floor(4 * 0.7)",    defaults, 4,  1, 2,  Some(Down)),
        ("idle single runner: floor(0.7) = 0",          defaults, 1,  0, 0,  Some(Down)),
        ("adjustment up adds",                          adjust,   5,  5, 7,  Some(Up)),
        ("adjustment down subtracts",                   adjust,   5,  0, 2,  Some(Down)),
        ("adjustment down stops at zero",               adjust,   2,  0, 0,  Some(Down)),
        ("nothing desired, nothing busy: stays zero",   defaults, 0,  0, 0,  Some(Down)),
        ("nothing desired but busy: one runner",        defaults, 0,  2, 1,  Some(Up)),
        ("nothing desired but busy: adjustment adds",   adjust,   0,  2, 2,  Some(Up)),
        ("exact products are not rounded up: 100*1.1",  BusyPolicy { up: Step::Factor(1.1), ..defaults }, 100, 90, 110, Some(Up)),
        ("exact products are not rounded down: 10*0.7", defaults, 10, 0, 7,  Some(Down)),
        ("custom thresholds: 0.5 busy scales up",       custom,   4,  2, 8,  Some(Up)),
        ("custom thresholds: 0.25 busy holds",          custom,   4,  1, 4,  None),
        ("custom thresholds: 0 busy scales down",       custom,   4,  0, 2,  Some(Down)),
    ];
    for (name, policy, before, busy, replicas, direction) in table {
        let s = policy.suggest(*before, *before, *busy);
        assert_eq!((s.replicas, s.direction), (*replicas, *direction), "{name}");
    }
}

// ---- count_busy ----

fn runner(name: &str, busy: bool) -> GitHubRunner {
    GitHubRunner {
        name: name.into(),
        busy,
    }
}

#[test]
fn busy_counts_the_targets_busy_runners_only() {
    let obs = RunnerObservation {
        target_runners: strings(&["a", "b", "c"]),
        github_runners: vec![
            runner("a", true),
            runner("b", false),
            runner("other-set", true),
        ],
        failing_unregistration: vec![],
        unhealthy: vec![],
    };
    assert_eq!(count_busy(&obs), 1);
}

#[test]
fn busy_counts_pods_whose_unregistration_failed_once_each() {
    let obs = RunnerObservation {
        target_runners: strings(&["a", "b", "c"]),
        github_runners: vec![runner("a", true), runner("b", false)],
        // a: busy and failing (once); b: idle per a stale list but failing; c: not listed.
        failing_unregistration: strings(&["a", "b", "c"]),
        unhealthy: vec![],
    };
    assert_eq!(count_busy(&obs), 3);
}

#[test]
fn unhealthy_runners_are_no_capacity_so_broken_pods_do_not_starve_a_scale_up() {
    // 4 desired: 2 busy, 2 whose image cannot be pulled. Counted as capacity they make the
    // pool look half idle (hold); they are none, so the pool is full and grows.
    let mut obs = busy_runners(2, 4);
    obs.unhealthy = strings(&["r2", "r3", "not-a-target-runner"]);
    let busy = count_busy(&obs);
    let capacity = healthy_capacity(&obs, 4, busy);
    assert_eq!(capacity, 2);
    let policy = BusyPolicy::from_metric(&busy_metric()).unwrap();
    let s = policy.suggest(4, capacity, busy);
    assert_eq!(
        (s.replicas, s.direction),
        (6, Some(Direction::Up)),
        "4 × 1.3, rounded up"
    );
    assert_eq!(
        policy.suggest(4, 4, busy).direction,
        None,
        "as ARC counts them"
    );
    // A runner GitHub shows busy is capacity whatever its pod looks like.
    obs.unhealthy = strings(&["r0", "r1", "r2", "r3"]);
    assert_eq!(healthy_capacity(&obs, 4, busy), 2);
}

// ---- workflow_run_repositories ----

#[test]
fn repository_runners_count_their_own_repository_and_ignore_repository_names() {
    let scope = RunnerScope::Repository {
        owner: "o".into(),
        name: "r".into(),
    };
    let m = Metric {
        repository_names: strings(&["x"]),
        ..Metric::new(MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns)
    };
    assert_eq!(
        workflow_run_repositories(&scope, &m),
        Ok(vec![RepositoryRef {
            owner: "o".into(),
            name: "r".into()
        }])
    );
}

#[test]
fn organization_runners_count_the_listed_repositories() {
    let scope = RunnerScope::Organization("org".into());
    let m = Metric {
        repository_names: strings(&["a", "b"]),
        ..Metric::new(MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns)
    };
    let repos = workflow_run_repositories(&scope, &m).unwrap();
    assert_eq!(
        repos,
        vec![
            RepositoryRef {
                owner: "org".into(),
                name: "a".into()
            },
            RepositoryRef {
                owner: "org".into(),
                name: "b".into()
            },
        ]
    );
}

#[test]
fn organization_runners_without_repository_names_are_an_error() {
    let scope = RunnerScope::Organization("org".into());
    let m = Metric::new(MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns);
    assert_eq!(
        workflow_run_repositories(&scope, &m),
        Err(MetricError::MissingRepositoryNames {
            organization: "org".into()
        })
    );
}

#[test]
fn repository_names_with_an_owner_or_empty_are_an_error() {
    let scope = RunnerScope::Organization("org".into());
    for name in ["org/a", ""] {
        let m = Metric {
            repository_names: strings(&[name]),
            ..Metric::new(MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns)
        };
        assert_eq!(
            workflow_run_repositories(&scope, &m),
            Err(MetricError::MalformedRepositoryName(name.into()))
        );
    }
}

#[test]
fn enterprise_runners_cannot_count_workflow_runs() {
    let scope = RunnerScope::Enterprise("ent".into());
    let m = Metric {
        repository_names: strings(&["a"]),
        ..Metric::new(MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns)
    };
    assert!(matches!(
        workflow_run_repositories(&scope, &m),
        Err(MetricError::EnterpriseScope { .. })
    ));
}

// ---- count_jobs ----

fn job(status: &str, labels: &[&str]) -> WorkflowJob {
    WorkflowJob {
        id: 1,
        run_attempt: 1,
        status: JobStatus::from_github(status),
        labels: strings(labels),
        created_at: None,
    }
}

#[test]
fn job_statuses_map_from_githubs_strings() {
    assert_eq!(JobStatus::from_github("queued"), JobStatus::Queued);
    assert_eq!(JobStatus::from_github("in_progress"), JobStatus::InProgress);
    assert_eq!(JobStatus::from_github("completed"), JobStatus::Completed);
    assert_eq!(JobStatus::from_github("waiting"), JobStatus::Other);
}

#[test]
fn counts_queued_and_in_progress_jobs_the_runners_can_take() {
    let labels = strings(&["linux", "gpu"]);
    let runs = vec![
        WorkflowRun {
            jobs: vec![
                job("queued", &["self-hosted", "linux"]),
                job("in_progress", &["Self-Hosted", "LINUX", "gpu"]),
                job("completed", &["linux"]),
                job("waiting", &["linux"]),
            ],
        },
        WorkflowRun {
            jobs: vec![
                job("queued", &["self-hosted", "windows"]),
                job("queued", &[]),
            ],
        },
        WorkflowRun { jobs: vec![] },
    ];
    assert_eq!(
        count_jobs(&runs, &labels),
        JobCounts {
            queued: 1,
            in_progress: 1,
            runs_without_jobs: 1,
            unmatched: 2,
        }
    );
}

#[test]
fn a_job_asking_only_for_self_hosted_matches_any_runner() {
    let runs = vec![WorkflowRun {
        jobs: vec![job("queued", &["self-hosted"])],
    }];
    assert_eq!(count_jobs(&runs, &[]).total(), 1);
}

// ---- suggest_replicas ----

fn repo_scope() -> RunnerScope {
    RunnerScope::Repository {
        owner: "o".into(),
        name: "r".into(),
    }
}

fn busy_runners(n: usize, of: usize) -> RunnerObservation {
    let names: Vec<String> = (0..of).map(|i| format!("r{i}")).collect();
    RunnerObservation {
        github_runners: names
            .iter()
            .enumerate()
            .map(|(i, name)| runner(name, i < n))
            .collect(),
        target_runners: names,
        failing_unregistration: vec![],
        unhealthy: vec![],
    }
}

fn queued_runs(n: usize) -> Vec<WorkflowRun> {
    (0..n)
        .map(|_| WorkflowRun {
            jobs: vec![job("queued", &["self-hosted"])],
        })
        .collect()
}

fn run_ref(id: u64) -> RunRef {
    RunRef {
        repository: RepositoryRef {
            owner: "o".into(),
            name: "r".into(),
        },
        id,
        updated_at: None,
        status: JobStatus::Queued,
    }
}

/// Observations as a driver leaves them once it has listed `runs` and the jobs of each.
fn observed_runs(runs: Vec<WorkflowRun>) -> Observations {
    Observations {
        workflow_runs: Some((0..runs.len() as u64).map(run_ref).collect()),
        run_jobs: runs,
        ..Observations::default()
    }
}

/// Runs the protocol as a driver does, serving run `i`'s jobs from `runs[i]`: the answer and
/// the IDs of the runs whose jobs were asked for.
fn drive(max_replicas: Option<u32>, runs: &[WorkflowRun]) -> (Suggestion, Vec<u64>) {
    let scope = repo_scope();
    let labels = vec!["self-hosted".to_owned()];
    let target = MetricTarget {
        scope: &scope,
        runner_labels: &labels,
        replicas: Some(1),
        max_replicas,
    };
    let mut observed = Observations::default();
    let mut asked = vec![];
    for _ in 0..=runs.len() + 1 {
        match suggest_replicas(&[queued_metric()], &target, &observed).unwrap() {
            Evaluation::Ready(s) => return (s, asked),
            Evaluation::Needs(Needed::WorkflowRuns { .. }) => {
                observed.workflow_runs = Some((0..runs.len() as u64).map(run_ref).collect());
            }
            Evaluation::Needs(Needed::Jobs { run }) => {
                asked.push(run.id);
                observed.run_jobs.push(runs[run.id as usize].clone());
            }
            Evaluation::Needs(other) => panic!("asked for {other:?}"),
        }
    }
    panic!("no answer after every run was listed: asked for {asked:?}");
}

#[test]
fn counting_jobs_stops_once_they_reach_twice_max_replicas() {
    let (s, asked) = drive(Some(3), &queued_runs(10));
    assert_eq!(asked, [0, 1, 2, 3, 4, 5], "jobs listed of runs {asked:?}");
    assert_eq!(s.replicas, Some(6));
    assert_eq!(
        s.counted_jobs,
        Some(6),
        "the lone queued-runs metric counts jobs"
    );
    assert_eq!(
        s.detail,
        "6 queued and 0 in-progress matching jobs in 6 of 10 runs (counting stops at twice \
         maxReplicas)"
    );
}

#[test]
fn every_run_is_counted_while_the_count_stays_below_max_replicas() {
    let mut runs = queued_runs(2);
    runs.push(WorkflowRun {
        jobs: vec![job("queued", &["gpu"])],
    });
    runs.push(WorkflowRun { jobs: vec![] });
    for max in [Some(3), None] {
        let (s, asked) = drive(max, &runs);
        assert_eq!(asked, [0, 1, 2, 3], "max {max:?}");
        assert_eq!(s.replicas, Some(2), "max {max:?}");
        assert_eq!(s.detail, "2 queued and 0 in-progress matching jobs");
    }
}

#[test]
fn max_replicas_zero_costs_no_listing() {
    let (s, asked) = drive(Some(0), &queued_runs(4));
    assert!(asked.is_empty(), "{asked:?}");
    // A single metric's zero means minReplicas, which maxReplicas 0 caps at 0.
    assert_eq!(s.replicas, None);
}

fn queued_metric() -> Metric {
    Metric::new(MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns)
}

fn evaluate(
    metrics: &[Metric],
    replicas: Option<u32>,
    observed: &Observations,
) -> Result<Evaluation, MetricError> {
    let scope = repo_scope();
    let target = MetricTarget {
        scope: &scope,
        runner_labels: &[],
        replicas,
        max_replicas: None,
    };
    suggest_replicas(metrics, &target, observed)
}

fn ready(e: Result<Evaluation, MetricError>) -> Suggestion {
    match e {
        Ok(Evaluation::Ready(s)) => s,
        other => panic!("expected an answer, got {other:?}"),
    }
}

#[test]
fn no_metrics_means_no_suggestion() {
    let s = ready(evaluate(&[], Some(3), &Observations::default()));
    assert_eq!(s, Suggestion::none());
}

#[test]
fn more_than_two_metrics_are_an_error() {
    let three = vec![busy_metric(), queued_metric(), queued_metric()];
    assert_eq!(
        evaluate(&three, None, &Observations::default()),
        Err(MetricError::TooManyMetrics(3))
    );
}

#[test]
fn two_metrics_in_another_order_are_an_error_before_anything_is_observed() {
    for pair in [
        vec![queued_metric(), busy_metric()],
        vec![busy_metric(), busy_metric()],
        vec![queued_metric(), queued_metric()],
    ] {
        let err = evaluate(&pair, None, &Observations::default()).unwrap_err();
        assert!(
            matches!(err, MetricError::InvalidCombination { .. }),
            "{err}"
        );
    }
}

#[test]
fn percentage_runners_busy_asks_for_runners_first() {
    assert_eq!(
        evaluate(&[busy_metric()], Some(2), &Observations::default()),
        Ok(Evaluation::Needs(Needed::Runners))
    );
}

#[test]
fn an_invalid_busy_metric_fails_before_asking_for_runners() {
    let bad = Metric {
        scale_up_factor: Some(2.0),
        scale_up_adjustment: Some(1),
        ..busy_metric()
    };
    assert!(evaluate(&[bad], Some(2), &Observations::default()).is_err());
}

#[test]
fn percentage_runners_busy_answers_from_the_target_replicas() {
    let observed = Observations {
        runners: Some(busy_runners(4, 4)),
        ..Observations::default()
    };
    let s = ready(evaluate(&[busy_metric()], Some(4), &observed));
    assert_eq!(s.replicas, Some(6));
    assert_eq!(s.metric, Some(MetricKind::PercentageRunnersBusy));
    assert_eq!(s.detail, "4 of 4 runners busy, scale up to 6");
}

#[test]
fn unset_target_replicas_count_as_one() {
    let observed = Observations {
        runners: Some(busy_runners(1, 1)),
        ..Observations::default()
    };
    let s = ready(evaluate(&[busy_metric()], None, &observed));
    assert_eq!(s.replicas, Some(2)); // ceil(1 * 1.3)
}

#[test]
fn a_single_metric_suggesting_zero_means_min_replicas() {
    let observed = Observations {
        runners: Some(busy_runners(0, 1)),
        ..Observations::default()
    };
    let s = ready(evaluate(&[busy_metric()], Some(1), &observed));
    assert_eq!((s.replicas, s.metric), (None, None));
    assert!(s.detail.contains("suggests no runners"), "{}", s.detail);
}

#[test]
fn queued_jobs_ask_for_the_repositories_runs() {
    assert_eq!(
        evaluate(&[queued_metric()], Some(1), &Observations::default()),
        Ok(Evaluation::Needs(Needed::WorkflowRuns {
            repositories: vec![RepositoryRef {
                owner: "o".into(),
                name: "r".into()
            }]
        }))
    );
}

#[test]
fn queued_jobs_suggest_one_runner_each() {
    let observed = observed_runs(queued_runs(3));
    let s = ready(evaluate(&[queued_metric()], Some(1), &observed));
    assert_eq!(s.replicas, Some(3));
}

#[test]
fn the_fallback_is_consulted_only_when_the_first_metric_suggests_zero() {
    let both = [busy_metric(), queued_metric()];
    // The first suggests 6: no workflow runs are needed.
    let observed = Observations {
        runners: Some(busy_runners(4, 4)),
        ..Observations::default()
    };
    assert_eq!(ready(evaluate(&both, Some(4), &observed)).replicas, Some(6));

    // The first suggests 0: the runs are asked for, then used.
    let mut observed = Observations {
        runners: Some(busy_runners(0, 1)),
        ..Observations::default()
    };
    assert!(matches!(
        evaluate(&both, Some(1), &observed),
        Ok(Evaluation::Needs(Needed::WorkflowRuns { .. }))
    ));
    observed = Observations {
        runners: observed.runners,
        ..observed_runs(queued_runs(2))
    };
    let s = ready(evaluate(&both, Some(1), &observed));
    assert_eq!(
        (s.replicas, s.metric),
        (
            Some(2),
            Some(MetricKind::TotalNumberOfQueuedAndInProgressWorkflowRuns)
        )
    );
}

#[test]
fn the_fallbacks_zero_is_used_as_is() {
    let observed = Observations {
        runners: Some(busy_runners(0, 1)),
        ..observed_runs(vec![])
    };
    let s = ready(evaluate(
        &[busy_metric(), queued_metric()],
        Some(1),
        &observed,
    ));
    assert_eq!(s.replicas, Some(0));
}
