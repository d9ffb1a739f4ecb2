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

fn job_trigger(duration: Option<Duration>) -> TriggerView {
    TriggerView {
        workflow_job: true,
        duration,
    }
}

#[test]
fn only_a_single_workflow_job_trigger_takes_part() {
    assert_eq!(
        job_trigger_duration(&[job_trigger(Some(mins(30)))]),
        Ok(mins(30))
    );
    assert_eq!(job_trigger_duration(&[]), Err(TriggerError::NoTrigger));
    assert_eq!(
        job_trigger_duration(&[job_trigger(None), job_trigger(None)]),
        Err(TriggerError::TooManyTriggers(2))
    );
    assert_eq!(
        job_trigger_duration(&[TriggerView::default()]),
        Err(TriggerError::NotWorkflowJob)
    );
}

#[test]
fn an_unset_or_zero_duration_means_ten_minutes() {
    assert_eq!(job_trigger_duration(&[job_trigger(None)]), Ok(mins(10)));
    assert_eq!(
        job_trigger_duration(&[job_trigger(Some(Duration::ZERO))]),
        Ok(mins(10))
    );
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
    select_target(origin, &labels(job), candidates, |_| true).map(|(c, tier)| (c.id, tier))
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
    let picked = select_target(&ORIGIN, &labels(&["linux"]), &candidates, |g| {
        asked
            .borrow_mut()
            .push((g.owner_kind, g.owner.to_owned(), g.name.to_owned()));
        g.name == "shared"
    });
    assert_eq!(
        picked.map(|(c, tier)| (c.id, tier)),
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
    let picked = select_target(&ORIGIN, &labels(&["linux"]), &candidates, |_| {
        panic!("visibility asked for a group that cannot take the job")
    });
    assert!(picked.is_none());
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
