//! Webhook rules: delivery → operation, trigger eligibility, target selection.

use std::cell::RefCell;
use std::time::Duration;

use super::mins;
use crate::autoscaler::reservations::ScaleOp;
use crate::autoscaler::webhook::*;
use crate::scope::RunnerScope;

#[test]
fn workflow_job_actions_map_to_operations() {
    use IgnoreReason::*;
    use JobOutcome::{Ignore, Scale};
    /// name, action, conclusion, runner_id, outcome
    type Row = (
        &'static str,
        &'static str,
        Option<&'static str>,
        Option<u64>,
        JobOutcome,
    );
    #[rustfmt::skip]
    let table: &[Row] = &[
        ("queued reserves",                        "queued",      None,              None,     Scale(ScaleOp::Up)),
        ("failure releases",                       "completed",   Some("failure"),   Some(7),  Scale(ScaleOp::Down)),
        ("success with a runner releases",         "completed",   Some("success"),   Some(7),  Scale(ScaleOp::Down)),
        ("cancelled before a runner releases",     "completed",   Some("cancelled"), None,     Scale(ScaleOp::Down)),
        ("timed out releases",                     "completed",   Some("timed_out"), Some(7),  Scale(ScaleOp::Down)),
        ("no conclusion releases",                 "completed",   None,              None,     Scale(ScaleOp::Down)),
        ("skipped is ignored",                     "completed",   Some("skipped"),   None,     Ignore(Skipped)),
        ("success without a runner is ignored",    "completed",   Some("success"),   None,     Ignore(CompletedWithoutRunner)),
        ("in_progress is ignored",                 "in_progress", None,              Some(7),  Ignore(OtherAction("in_progress".into()))),
        ("waiting is ignored",                     "waiting",     None,              None,     Ignore(OtherAction("waiting".into()))),
    ];
    for (name, action, conclusion, runner_id, expected) in table {
        assert_eq!(
            workflow_job_operation(action, *conclusion, *runner_id),
            *expected,
            "{name}"
        );
    }
}

#[test]
fn any_workflow_job_trigger_takes_part_and_gives_the_duration() {
    let check_run = TriggerView {
        check_run: Some(CheckRunFilter::default()),
        duration: Some(mins(5)),
        ..TriggerView::default()
    };
    #[rustfmt::skip]
    let table: &[(&str, Vec<TriggerView>, Option<Duration>)] = &[
        ("one workflowJob trigger",               vec![TriggerView::workflow_job(Some(mins(30)))], Some(mins(30))),
        ("no trigger",                            vec![],                                             None),
        ("only another event",                    vec![check_run.clone()],                            None),
        ("workflowJob beside another event",      vec![check_run.clone(), TriggerView::workflow_job(Some(mins(20)))], Some(mins(20))),
        ("the first workflowJob trigger counts",  vec![TriggerView::workflow_job(Some(mins(7))), TriggerView::workflow_job(None)], Some(mins(7))),
        ("unset means ten minutes",               vec![TriggerView::workflow_job(None)],              Some(mins(10))),
        ("zero means ten minutes",                vec![TriggerView::workflow_job(Some(Duration::ZERO))], Some(mins(10))),
    ];
    for (name, triggers, expected) in table {
        assert_eq!(job_trigger_duration(triggers), *expected, "{name}");
    }
}

fn repo(
    id: &'static str,
    owner: &str,
    name: &str,
    labels: &[&str],
) -> TargetCandidate<&'static str> {
    TargetCandidate {
        id,
        scope: RunnerScope::Repository {
            owner: owner.into(),
            name: name.into(),
        },
        group: None,
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        triggers: vec![TriggerView::workflow_job(None)],
    }
}

fn org(
    id: &'static str,
    org: &str,
    group: Option<&str>,
    labels: &[&str],
) -> TargetCandidate<&'static str> {
    TargetCandidate {
        id,
        scope: RunnerScope::Organization(org.into()),
        group: group.map(str::to_owned),
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        triggers: vec![TriggerView::workflow_job(None)],
    }
}

fn ent(
    id: &'static str,
    ent: &str,
    group: Option<&str>,
    labels: &[&str],
) -> TargetCandidate<&'static str> {
    TargetCandidate {
        id,
        scope: RunnerScope::Enterprise(ent.into()),
        group: group.map(str::to_owned),
        labels: labels.iter().map(|l| (*l).to_owned()).collect(),
        triggers: vec![TriggerView::workflow_job(None)],
    }
}

const ORIGIN: JobOrigin<'static> = JobOrigin {
    owner: "acme",
    repository: "app",
    owner_is_user: false,
    enterprise: Some("megacorp"),
};

fn labels(v: &[&str]) -> Vec<String> {
    v.iter().map(|l| (*l).to_owned()).collect()
}

fn pick(
    origin: &JobOrigin<'_>,
    job: &[&str],
    candidates: &[TargetCandidate<&'static str>],
) -> Option<(&'static str, MatchTier)> {
    let labels = labels(job);
    select_target(origin, Demand::Job(&labels), candidates, |_| true)
        .target
        .map(|(c, tier)| (c.id, tier))
}

#[test]
fn repository_runners_beat_organization_runners() {
    let candidates = [
        org("org", "acme", None, &["linux"]),
        repo("repo", "acme", "app", &["linux"]),
    ];
    assert_eq!(
        pick(&ORIGIN, &["self-hosted", "linux"], &candidates),
        Some(("repo", MatchTier::Repository))
    );
}

#[test]
fn repository_runners_without_the_labels_fall_through_to_the_organization() {
    let candidates = [
        repo("repo", "acme", "app", &["windows"]),
        org("org", "acme", None, &["linux"]),
    ];
    assert_eq!(
        pick(&ORIGIN, &["linux"], &candidates),
        Some(("org", MatchTier::Organization))
    );
}

#[test]
fn another_repositorys_runners_never_match() {
    let candidates = [repo("other", "acme", "lib", &["linux"])];
    assert_eq!(pick(&ORIGIN, &["linux"], &candidates), None);
}

#[test]
fn user_repositories_only_match_repository_runners() {
    let user = JobOrigin {
        owner_is_user: true,
        enterprise: None,
        ..ORIGIN
    };
    let candidates = [org("org", "acme", None, &["linux"])];
    assert_eq!(pick(&user, &["linux"], &candidates), None);
    let candidates = [repo("repo", "acme", "app", &["linux"])];
    assert_eq!(
        pick(&user, &["linux"], &candidates),
        Some(("repo", MatchTier::Repository))
    );
}

#[test]
fn the_organizations_default_group_comes_before_its_runner_groups() {
    let candidates = [
        org("grouped", "acme", Some("gpu"), &["linux"]),
        org("default", "acme", None, &["linux"]),
    ];
    assert_eq!(
        pick(&ORIGIN, &["linux"], &candidates),
        Some(("default", MatchTier::Organization))
    );
}

#[test]
fn a_runner_group_matches_only_if_visible_to_the_repository() {
    let candidates = [
        org("hidden", "acme", Some("secret"), &["linux"]),
        org("shared", "acme", Some("shared"), &["linux"]),
    ];
    let asked = RefCell::new(Vec::new());
    let linux = labels(&["linux"]);
    let picked = select_target(&ORIGIN, Demand::Job(&linux), &candidates, |g| {
        asked
            .borrow_mut()
            .push((g.owner_kind, g.owner.to_owned(), g.name.to_owned()));
        g.name == "shared"
    });
    assert_eq!(
        picked.target.map(|(c, tier)| (c.id, tier)),
        Some(("shared", MatchTier::OrganizationGroup("shared".into())))
    );
    assert_eq!(
        asked.into_inner(),
        vec![
            (GroupOwner::Organization, "acme".into(), "secret".into()),
            (GroupOwner::Organization, "acme".into(), "shared".into()),
        ]
    );
}

#[test]
fn visibility_is_not_asked_for_groups_whose_labels_do_not_match() {
    let candidates = [org("grouped", "acme", Some("gpu"), &["gpu"])];
    let linux = labels(&["linux"]);
    let picked = select_target(&ORIGIN, Demand::Job(&linux), &candidates, |_| {
        panic!("visibility asked for a group that cannot take the job")
    });
    assert!(picked.target.is_none());
}

#[test]
fn an_empty_group_name_is_the_default_group() {
    let candidates = [org("default", "acme", Some(""), &["linux"])];
    assert_eq!(
        pick(&ORIGIN, &["linux"], &candidates),
        Some(("default", MatchTier::Organization))
    );
}

#[test]
fn enterprise_runners_come_after_the_organizations_groups() {
    let candidates = [
        ent("ent", "megacorp", None, &["linux"]),
        org("org-group", "acme", Some("g"), &["linux"]),
    ];
    assert_eq!(
        pick(&ORIGIN, &["linux"], &candidates),
        Some(("org-group", MatchTier::OrganizationGroup("g".into())))
    );
    let candidates = [
        ent("ent-group", "megacorp", Some("eg"), &["linux"]),
        ent("ent", "megacorp", None, &["linux"]),
    ];
    assert_eq!(
        pick(&ORIGIN, &["linux"], &candidates),
        Some(("ent", MatchTier::Enterprise))
    );
    let candidates = [ent("ent-group", "megacorp", Some("eg"), &["linux"])];
    assert_eq!(
        pick(&ORIGIN, &["linux"], &candidates),
        Some(("ent-group", MatchTier::EnterpriseGroup("eg".into())))
    );
}

#[test]
fn enterprise_runners_need_the_delivery_to_name_the_enterprise() {
    let without = JobOrigin {
        enterprise: None,
        ..ORIGIN
    };
    let candidates = [ent("ent", "megacorp", None, &["linux"])];
    assert_eq!(pick(&without, &["linux"], &candidates), None);
    let other = JobOrigin {
        enterprise: Some("othercorp"),
        ..ORIGIN
    };
    assert_eq!(pick(&other, &["linux"], &candidates), None);
}

#[test]
fn another_organizations_runners_never_match() {
    let candidates = [org("other", "globex", None, &["linux"])];
    assert_eq!(pick(&ORIGIN, &["linux"], &candidates), None);
}

#[test]
fn names_compare_ignoring_case() {
    let candidates = [repo("repo", "ACME", "App", &["linux"])];
    assert_eq!(
        pick(&ORIGIN, &["Linux"], &candidates),
        Some(("repo", MatchTier::Repository))
    );
    let candidates = [ent("ent", "MegaCorp", None, &["linux"])];
    assert_eq!(
        pick(&ORIGIN, &["linux"], &candidates),
        Some(("ent", MatchTier::Enterprise))
    );
}

#[test]
fn within_a_tier_the_first_matching_candidate_wins() {
    let candidates = [
        org("a", "acme", None, &["windows"]),
        org("b", "acme", None, &["linux"]),
        org("c", "acme", None, &["linux"]),
    ];
    assert_eq!(
        pick(&ORIGIN, &["linux"], &candidates),
        Some(("b", MatchTier::Organization))
    );
}

#[test]
fn a_job_no_runner_set_can_take_matches_nothing() {
    let candidates = [
        repo("repo", "acme", "app", &["linux"]),
        org("org", "acme", None, &["linux"]),
        ent("ent", "megacorp", None, &["linux"]),
    ];
    assert_eq!(pick(&ORIGIN, &["linux", "arm64"], &candidates), None);
}

#[test]
fn a_job_for_an_autoscaler_without_a_workflow_job_trigger_matches_nothing() {
    let mut only_push = repo("push", "acme", "app", &["linux"]);
    only_push.triggers = vec![TriggerView {
        push: true,
        ..TriggerView::default()
    }];
    assert_eq!(pick(&ORIGIN, &["linux"], &[only_push]), None);
}

#[test]
fn several_autoscalers_fitting_a_job_in_its_tier_are_reported_and_the_first_takes_it() {
    let candidates = [
        org("a", "acme", None, &["linux"]),
        org("b", "acme", None, &["linux"]),
        org("c", "acme", None, &["windows"]),
    ];
    let linux = labels(&["linux"]);
    let selection = select_target(&ORIGIN, Demand::Job(&linux), &candidates, |_| true);
    assert_eq!(
        selection.target.map(|(c, tier)| (c.id, tier)),
        Some(("a", MatchTier::Organization))
    );
    let reported: Vec<_> = selection
        .ambiguous
        .iter()
        .map(|a| {
            (
                a.tier.clone(),
                a.candidates.iter().map(|c| c.id).collect::<Vec<_>>(),
            )
        })
        .collect();
    assert_eq!(reported, vec![(MatchTier::Organization, vec!["a", "b"])]);
    assert_eq!(selection.grant, None);
}

#[test]
fn globs_match_as_actions_filters_do() {
    #[rustfmt::skip]
    let table: &[(&str, &str, bool)] = &[
        ("build",       "build",        true),
        ("build",       "build-linux",  false),
        ("build*",      "build-linux",  true),
        ("build*",      "build",        true),
        ("*linux",      "build-linux",  true),
        ("*linux",      "linux-build",  false),
        ("b*l*x",       "build-linux",  true),
        ("b*l*x",       "build-linuxy", false),
        ("*",           "",             true),
        ("*-*",         "a-b",          true),
        ("ab*b",        "ab",           false),
        ("!build*",     "test",         true),
        ("!build*",     "build-linux",  false),
        ("",            "",             false),
        ("!",           "anything",     false),
    ];
    for (pattern, text, expected) in table {
        assert_eq!(
            glob_match(pattern, text),
            *expected,
            "{pattern:?} vs {text:?}"
        );
    }
}

fn check_run_trigger(f: CheckRunFilter) -> TriggerView {
    TriggerView {
        check_run: Some(f),
        ..TriggerView::default()
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

const CREATED_QUEUED_BUILD: RepoEvent<'static> = RepoEvent::CheckRun {
    action: "created",
    status: "queued",
    name: "build-linux",
};

#[test]
fn check_run_triggers_filter_on_action_status_name_and_repository() {
    let f = |types: &[&str], status: Option<&str>, names: &[&str], repos: &[&str]| {
        check_run_trigger(CheckRunFilter {
            types: strings(types),
            status: status.map(str::to_owned),
            names: strings(names),
            repositories: strings(repos),
        })
    };
    #[rustfmt::skip]
    let table: &[(&str, TriggerView, bool)] = &[
        ("no conditions",                      f(&[], None, &[], &[]),                             true),
        ("the action listed",                  f(&["created"], None, &[], &[]),                    true),
        ("another action",                     f(&["completed"], None, &[], &[]),                  false),
        ("the status",                         f(&[], Some("queued"), &[], &[]),                   true),
        ("an empty status is unset",           f(&[], Some(""), &[], &[]),                         true),
        ("another status",                     f(&[], Some("completed"), &[], &[]),                false),
        ("a name glob",                        f(&[], None, &["build-*"], &[]),                    true),
        ("any of the name globs",              f(&[], None, &["test", "*linux"], &[]),              true),
        ("no name glob",                       f(&[], None, &["test*"], &[]),                      false),
        ("the repository by name",             f(&[], None, &[], &["App"]),                         true),
        ("the repository by full name",        f(&[], None, &[], &["acme/app"]),                    true),
        ("another owner's repository",         f(&[], None, &[], &["globex/app"]),                  false),
        ("another repository",                 f(&[], None, &[], &["lib"]),                         false),
        ("name and repository both needed",    f(&[], None, &["build-*"], &["lib"]),                false),
        ("everything at once",                 f(&["created"], Some("queued"), &["build-*"], &["app"]), true),
    ];
    for (name, trigger, expected) in table {
        let grant = event_grant(
            std::slice::from_ref(trigger),
            &CREATED_QUEUED_BUILD,
            "acme",
            "app",
        );
        assert_eq!(grant.is_some(), *expected, "{name}");
    }
}

#[test]
fn pull_request_triggers_filter_on_action_and_base_branch_and_push_triggers_on_nothing() {
    let opened_main = RepoEvent::PullRequest {
        action: "opened",
        base_branch: "main",
    };
    let pr = |types: &[&str], branches: &[&str]| TriggerView {
        pull_request: Some(PullRequestFilter {
            types: strings(types),
            branches: strings(branches),
        }),
        ..TriggerView::default()
    };
    let push = TriggerView {
        push: true,
        ..TriggerView::default()
    };
    #[rustfmt::skip]
    let table: &[(&str, TriggerView, RepoEvent<'_>, bool)] = &[
        ("no conditions",              pr(&[], &[]),                             opened_main,     true),
        ("the action and branch",      pr(&["opened", "synchronize"], &["main"]), opened_main,     true),
        ("another action",             pr(&["closed"], &[]),                     opened_main,     false),
        ("another base branch",        pr(&[], &["release"]),                    opened_main,     false),
        ("a push trigger",             push.clone(),                             RepoEvent::Push, true),
        ("a push is not a PR",         pr(&[], &[]),                             RepoEvent::Push, false),
        ("a PR is not a push",         push.clone(),                             opened_main,     false),
        ("workflowJob reacts to none", TriggerView::workflow_job(None),          RepoEvent::Push, false),
        ("a check run is not a push",  check_run_trigger(CheckRunFilter::default()), RepoEvent::Push, false),
    ];
    for (name, trigger, event, expected) in table {
        let grant = event_grant(std::slice::from_ref(trigger), event, "acme", "app");
        assert_eq!(grant.is_some(), *expected, "{name}");
    }
}

#[test]
fn the_first_matching_entry_gives_amount_and_duration() {
    let triggers = [
        TriggerView::workflow_job(Some(mins(30))),
        TriggerView {
            check_run: Some(CheckRunFilter {
                names: strings(&["deploy"]),
                ..CheckRunFilter::default()
            }),
            amount: Some(5),
            ..TriggerView::default()
        },
        TriggerView {
            check_run: Some(CheckRunFilter::default()),
            amount: Some(3),
            duration: Some(mins(2)),
            ..TriggerView::default()
        },
        TriggerView {
            check_run: Some(CheckRunFilter::default()),
            amount: Some(9),
            ..TriggerView::default()
        },
    ];
    assert_eq!(
        event_grant(&triggers, &CREATED_QUEUED_BUILD, "acme", "app"),
        Some(EventGrant {
            trigger: 2,
            replicas: 3,
            duration: mins(2),
        })
    );
    #[rustfmt::skip]
    let amounts: &[(Option<i32>, u32)] = &[(None, 1), (Some(0), 1), (Some(-2), 1), (Some(4), 4)];
    for (amount, replicas) in amounts {
        let trigger = TriggerView {
            push: true,
            amount: *amount,
            ..TriggerView::default()
        };
        let grant = event_grant(&[trigger], &RepoEvent::Push, "acme", "app").unwrap();
        assert_eq!(
            (grant.replicas, grant.duration),
            (*replicas, mins(10)),
            "amount {amount:?}"
        );
    }
}

fn with_triggers(
    mut c: TargetCandidate<&'static str>,
    triggers: Vec<TriggerView>,
) -> TargetCandidate<&'static str> {
    c.triggers = triggers;
    c
}

fn push_trigger(amount: i32) -> TriggerView {
    TriggerView {
        push: true,
        amount: Some(amount),
        ..TriggerView::default()
    }
}

/// The target (id, tier, replicas granted) and the ambiguous tiers (with their ids).
type Picked = (
    Option<(&'static str, MatchTier, u32)>,
    Vec<(MatchTier, Vec<&'static str>)>,
);

fn pick_event(
    origin: &JobOrigin<'_>,
    event: &RepoEvent<'_>,
    candidates: &[TargetCandidate<&'static str>],
) -> Picked {
    let selection = select_target(origin, Demand::Event(event), candidates, |_| true);
    let target = selection
        .target
        .map(|(c, tier)| (c.id, tier, selection.grant.expect("a grant").replicas));
    let ambiguous = selection
        .ambiguous
        .iter()
        .map(|a| (a.tier.clone(), a.candidates.iter().map(|c| c.id).collect()))
        .collect();
    (target, ambiguous)
}

#[test]
fn an_event_scales_the_only_matching_repository_autoscaler_before_organization_ones() {
    let candidates = [
        with_triggers(org("org", "acme", None, &[]), vec![push_trigger(1)]),
        with_triggers(repo("repo", "acme", "app", &[]), vec![push_trigger(2)]),
        // Labels play no part for events.
        with_triggers(repo("other", "acme", "lib", &[]), vec![push_trigger(3)]),
    ];
    assert_eq!(
        pick_event(&ORIGIN, &RepoEvent::Push, &candidates),
        (Some(("repo", MatchTier::Repository, 2)), vec![])
    );
}

#[test]
fn an_ambiguous_tier_is_reported_and_skipped_for_the_next() {
    let candidates = [
        with_triggers(repo("r1", "acme", "app", &[]), vec![push_trigger(1)]),
        with_triggers(repo("r2", "acme", "app", &[]), vec![push_trigger(1)]),
        with_triggers(org("org", "acme", None, &[]), vec![push_trigger(4)]),
    ];
    assert_eq!(
        pick_event(&ORIGIN, &RepoEvent::Push, &candidates),
        (
            Some(("org", MatchTier::Organization, 4)),
            vec![(MatchTier::Repository, vec!["r1", "r2"])]
        )
    );
    // Ambiguous everywhere: nothing scales, and both tiers are reported.
    let candidates = [
        with_triggers(repo("r1", "acme", "app", &[]), vec![push_trigger(1)]),
        with_triggers(repo("r2", "acme", "app", &[]), vec![push_trigger(1)]),
        with_triggers(org("o1", "acme", None, &[]), vec![push_trigger(1)]),
        with_triggers(org("o2", "acme", None, &[]), vec![push_trigger(1)]),
    ];
    assert_eq!(
        pick_event(&ORIGIN, &RepoEvent::Push, &candidates),
        (
            None,
            vec![
                (MatchTier::Repository, vec!["r1", "r2"]),
                (MatchTier::Organization, vec!["o1", "o2"]),
            ]
        )
    );
}

#[test]
fn an_autoscaler_with_two_matching_entries_counts_once() {
    let candidates = [with_triggers(
        repo("repo", "acme", "app", &[]),
        vec![push_trigger(2), push_trigger(5)],
    )];
    assert_eq!(
        pick_event(&ORIGIN, &RepoEvent::Push, &candidates),
        (Some(("repo", MatchTier::Repository, 2)), vec![])
    );
}

#[test]
fn a_user_repositorys_event_only_reaches_repository_autoscalers() {
    let user = JobOrigin {
        owner_is_user: true,
        enterprise: None,
        ..ORIGIN
    };
    let candidates = [with_triggers(
        org("org", "acme", None, &[]),
        vec![push_trigger(1)],
    )];
    assert_eq!(
        pick_event(&user, &RepoEvent::Push, &candidates),
        (None, vec![])
    );
}

#[test]
fn an_event_reaches_only_visible_runner_groups_one_tier_per_group() {
    let candidates = [
        with_triggers(
            org("hidden", "acme", Some("secret"), &[]),
            vec![push_trigger(1)],
        ),
        with_triggers(
            org("g1", "acme", Some("shared"), &[]),
            vec![push_trigger(1)],
        ),
        with_triggers(
            org("g2", "acme", Some("Shared"), &[]),
            vec![push_trigger(1)],
        ),
        with_triggers(
            org("solo", "acme", Some("solo"), &[]),
            vec![push_trigger(6)],
        ),
    ];
    let asked = RefCell::new(Vec::new());
    let selection = select_target(&ORIGIN, Demand::Event(&RepoEvent::Push), &candidates, |g| {
        asked.borrow_mut().push(g.name.to_owned());
        g.name != "secret"
    });
    assert_eq!(
        selection.target.map(|(c, tier)| (c.id, tier)),
        Some(("solo", MatchTier::OrganizationGroup("solo".into())))
    );
    assert_eq!(selection.grant.map(|g| g.replicas), Some(6));
    assert_eq!(
        asked.into_inner(),
        vec!["secret".to_owned(), "shared".into(), "solo".into()],
        "each group is asked about once, in the candidates' order"
    );
}

#[test]
fn triggers_that_can_never_match_are_named() {
    let check_run = |f: CheckRunFilter| TriggerView {
        check_run: Some(f),
        ..TriggerView::default()
    };
    let problems = trigger_problems(&[
        TriggerView::workflow_job(None),
        TriggerView::default(),
        check_run(CheckRunFilter {
            types: strings(&["created", "queued"]),
            status: Some("done".into()),
            names: strings(&["build", ""]),
            ..CheckRunFilter::default()
        }),
        TriggerView {
            pull_request: Some(PullRequestFilter {
                types: strings(&["opened", "open"]),
                branches: vec![],
            }),
            ..TriggerView::default()
        },
        TriggerView {
            push: true,
            ..TriggerView::default()
        },
    ]);
    let kinds: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 5, "{kinds:#?}");
    assert_eq!(problems[0], TriggerProblem::NoEvent { index: 1 });
    assert!(
        matches!(&problems[1], TriggerProblem::UnknownAction { index: 2, field: "checkRun", action, .. } if action == "queued")
    );
    assert!(
        matches!(&problems[2], TriggerProblem::UnknownStatus { index: 2, status, .. } if status == "done")
    );
    assert_eq!(problems[3], TriggerProblem::EmptyName { index: 2 });
    assert!(
        matches!(&problems[4], TriggerProblem::UnknownAction { index: 3, field: "pullRequest", action, .. } if action == "open")
    );
    assert!(kinds[0].contains("scaleUpTriggers[1] names no githubEvent"));
    assert!(
        trigger_problems(&[]).is_empty(),
        "no triggers: metrics alone"
    );
}
