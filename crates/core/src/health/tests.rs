//! Runner health, branch by branch.

use std::time::{Duration, SystemTime};

use super::*;

const LIMITS: Thresholds = Thresholds {
    registration: Duration::from_secs(600),
    pending: Duration::from_secs(600),
    node_not_ready: Duration::from_secs(300),
    offline: Duration::from_secs(300),
    crash_loop_restarts: 3,
    failed_runner_backoff: Duration::from_secs(10),
};

/// Minute `m` of the test's timeline.
fn at(m: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + m * 60)
}

/// A pod created at minute 0, running, Ready since minute 1, registered and online.
fn working() -> Observed {
    Observed {
        created: at(0),
        phase: PodPhase::Running,
        finished: false,
        unschedulable: None,
        node_not_ready: None,
        waiting: None,
        last_termination: None,
        restarts: 0,
        ready_since: Some(at(1)),
        registered: true,
        github: GitHubState::Online,
        rejected: None,
    }
}

/// A pod created at minute 0 that is not running yet.
fn pending() -> Observed {
    Observed {
        phase: PodPhase::Pending,
        ready_since: None,
        registered: false,
        github: GitHubState::Unknown,
        ..working()
    }
}

fn rejection() -> Rejection {
    Rejection {
        image: "ghcr.io/actions/actions-runner:2.311.0".into(),
        version: "2.311.0".into(),
        minimum: "2.329.0".into(),
    }
}

#[test]
fn each_state_is_classified_as_the_module_says() {
    use Health::*;
    let unschedulable = Observed {
        unschedulable: Some((at(0), "0/3 nodes are available".into())),
        ..pending()
    };
    let pulling = Observed {
        waiting: Some(Waiting::ImagePull("ImagePullBackOff".into())),
        ..pending()
    };
    let misconfigured = Observed {
        waiting: Some(Waiting::Config("CreateContainerConfigError".into())),
        ..pending()
    };
    let unregistered = Observed {
        registered: false,
        github: GitHubState::Unknown,
        ..working()
    };
    let crash_looping = |restarts| Observed {
        waiting: Some(Waiting::CrashLoop),
        last_termination: Some(Termination::Exited(1)),
        restarts,
        ..working()
    };
    let oom_looping = Observed {
        waiting: Some(Waiting::CrashLoop),
        last_termination: Some(Termination::OomKilled),
        restarts: 1,
        ..working()
    };
    let node_down = Observed {
        node_not_ready: Some(at(2)),
        ..working()
    };
    let offline = Observed {
        github: GitHubState::Offline(at(3)),
        ..working()
    };
    let busy = |o: Observed| Observed {
        github: GitHubState::Busy,
        ..o
    };
    #[rustfmt::skip]
    let table: Vec<(&str, Observed, u64, Health)> = vec![
        ("registered and online",                working(),                 30, Healthy),
        ("registered, GitHub not asked",         Observed { github: GitHubState::Unknown, ..working() }, 30, Healthy),
        ("scheduling, within the limit",         pending(),                  5,  Starting),
        ("pending for no stated reason, past the limit", pending(),          11, Stuck(super::Stuck::NotStarted)),
        ("unschedulable, within the limit",      unschedulable.clone(),      9,  Starting),
        ("unschedulable past the limit",         unschedulable.clone(),      11, Stuck(super::Stuck::Unschedulable("0/3 nodes are available".into()))),
        ("image pull failing, within the limit", pulling.clone(),            9,  Starting),
        ("image pull failing past the limit",    pulling.clone(),            11, Stuck(super::Stuck::ImagePull("ImagePullBackOff".into()))),
        ("container config error past the limit", misconfigured,            11, Stuck(super::Stuck::Config("CreateContainerConfigError".into()))),
        ("ready, registering within the limit",  unregistered.clone(),       10, Starting),
        ("ready, never registered",              unregistered.clone(),       12, Stuck(super::Stuck::NeverRegistered)),
        ("crash loop below the restart limit",   crash_looping(2),           5,  Healthy),
        ("crash loop at the restart limit",      crash_looping(3),           5,  Dead(super::Dead::CrashLoop(3))),
        ("OOM-killed and restarting",            oom_looping.clone(),        5,  Dead(super::Dead::OomKilled)),
        ("finished",                             Observed { finished: true, last_termination: Some(Termination::Exited(0)), ..working() }, 5, Healthy),
        ("finished by an OOM kill",              Observed { finished: true, last_termination: Some(Termination::OomKilled), ..working() }, 5, Dead(super::Dead::OomKilled)),
        ("finished with a failing exit code",    Observed { finished: true, last_termination: Some(Termination::Exited(1)), ..working() }, 5, Dead(super::Dead::Failed(1))),
        ("finished, how unknown",                Observed { finished: true, last_termination: None, ..working() }, 5, Healthy),
        ("node NotReady within the limit",       node_down.clone(),          6,  Healthy),
        ("node NotReady past the limit",         node_down.clone(),          8,  Dead(super::Dead::NodeNotReady)),
        ("offline within the limit",             offline.clone(),            7,  Healthy),
        ("offline past the limit",               offline.clone(),            9,  Dead(super::Dead::Offline)),
        ("offline while the pod is not running", Observed { phase: PodPhase::Unknown, ..offline.clone() }, 9, Healthy),
        ("rejected by GitHub",                   Observed { rejected: Some(rejection()), ..working() }, 1, Rejected(rejection())),
        // A busy runner is never anything but healthy: nothing may lead to killing it.
        ("busy, node NotReady",                  busy(node_down),            60, Healthy),
        ("busy, OOM-killed sidecar story",       busy(oom_looping),          60, Healthy),
        ("busy, offline since long",             busy(offline),              60, Healthy),
        ("busy and rejected",                    busy(Observed { rejected: Some(rejection()), ..working() }), 60, Healthy),
    ];
    for (name, observed, minute, expected) in table {
        assert_eq!(classify(&observed, &LIMITS, at(minute)), expected, "{name}");
    }
}

#[test]
fn only_working_and_starting_runners_count_as_capacity() {
    assert!(Health::Healthy.is_capacity());
    assert!(Health::Starting.is_capacity());
    assert!(!Health::Stuck(Stuck::NeverRegistered).is_capacity());
    assert!(!Health::Dead(Dead::Offline).is_capacity());
    assert!(!Health::Rejected(rejection()).is_capacity());
}

#[test]
fn reasons_are_distinct_camel_case_words() {
    let all = [
        Health::Healthy,
        Health::Starting,
        Health::Stuck(Stuck::Unschedulable(String::new())),
        Health::Stuck(Stuck::ImagePull(String::new())),
        Health::Stuck(Stuck::Config(String::new())),
        Health::Stuck(Stuck::NeverRegistered),
        Health::Stuck(Stuck::NotStarted),
        Health::Dead(Dead::OomKilled),
        Health::Dead(Dead::CrashLoop(3)),
        Health::Dead(Dead::Failed(1)),
        Health::Dead(Dead::NodeNotReady),
        Health::Dead(Dead::Offline),
        Health::Rejected(rejection()),
    ];
    let reasons: std::collections::BTreeSet<&str> = all.iter().map(Health::reason).collect();
    assert_eq!(reasons.len(), all.len());
    assert!(
        reasons
            .iter()
            .all(|r| r.chars().all(|c| c.is_ascii_alphanumeric())
                && r.starts_with(|c: char| c.is_ascii_uppercase()))
    );
}

#[test]
fn the_runner_version_is_read_from_either_images_tag() {
    #[rustfmt::skip]
    let cases = [
        ("ghcr.io/actions/actions-runner:2.329.0",                      Some("2.329.0")),
        ("summerwind/actions-runner:v2.311.0-ubuntu-22.04",             Some("2.311.0")),
        ("registry.local:5000/runners/actions-runner:2.330.1@sha256:ab", Some("2.330.1")),
        ("summerwind/actions-runner:latest",                            None),
        ("summerwind/actions-runner",                                   None),
        ("registry.local:5000/actions-runner",                          None),
        ("actions-runner:2.329",                                        None),
        ("actions-runner@sha256:abcdef",                                None),
    ];
    for (image, version) in cases {
        assert_eq!(image_runner_version(image), version, "{image}");
    }
}

#[test]
fn versions_below_the_minimum_are_rejected_part_by_part_as_numbers() {
    let refused = |version: &str| {
        let image = format!("ghcr.io/actions/actions-runner:{version}");
        super::rejection(&image, "2.329.0")
    };
    for version in ["2.311.0", "2.99.0", "1.999.999"] {
        let rejection = refused(version).expect(version);
        assert_eq!(rejection.version, version);
        assert_eq!(rejection.minimum, "2.329.0");
        assert_eq!(
            rejection.image,
            format!("ghcr.io/actions/actions-runner:{version}")
        );
    }
    for version in ["2.329.0", "2.1000.0", "3.0.0", "latest"] {
        assert_eq!(refused(version), None, "{version}");
    }
}

#[test]
fn an_offline_runner_keeps_the_time_it_was_first_seen_offline() {
    use GitHubState::*;
    let offline = Offline(at(1));
    #[rustfmt::skip]
    let cases = [
        (Unknown, Some((false, false)), Offline(at(5))),
        (Online,  Some((false, false)), Offline(at(5))),
        (offline, Some((false, false)), offline),
        (offline, Some((true, false)),  Online),
        (offline, Some((true, true)),   Busy),
        (Online,  Some((false, true)),  Busy),
        (offline, None,                 Unknown),
    ];
    for (before, listed, after) in cases {
        assert_eq!(
            before.after(listed, at(5)),
            after,
            "{before:?} then {listed:?}"
        );
    }
}

#[test]
fn every_trouble_is_described_and_only_template_trouble_comes_with_the_template() {
    use super::{Dead, Stuck};
    #[rustfmt::skip]
    let cases: Vec<(Health, bool, &str)> = vec![
        (Health::Stuck(Stuck::Unschedulable("0/3 nodes are available".into())), true, "0/3 nodes are available"),
        (Health::Stuck(Stuck::ImagePull("ImagePullBackOff".into())), true, "image cannot be pulled (ImagePullBackOff)"),
        (Health::Stuck(Stuck::Config("CreateContainerConfigError".into())), true, "cannot be created"),
        (Health::Stuck(Stuck::NeverRegistered), false, "never registered"),
        (Health::Stuck(Stuck::NotStarted), false, "not started"),
        (Health::Dead(Dead::OomKilled), true, "OOM-killed"),
        (Health::Dead(Dead::CrashLoop(4)), true, "4 restarts"),
        (Health::Dead(Dead::Failed(3)), true, "exited with code 3"),
        (Health::Dead(Dead::NodeNotReady), false, "NotReady"),
        (Health::Dead(Dead::Offline), false, "offline"),
        (Health::Rejected(rejection()), true, "version 2.311.0 of image ghcr.io/actions/actions-runner:2.311.0 (the minimum is 2.329.0)"),
    ];
    for (health, with_template, words) in cases {
        assert_eq!(health.comes_with_template(), with_template, "{health:?}");
        assert!(
            health.describe().contains(words),
            "{health:?}: {}",
            health.describe()
        );
    }
    assert_eq!(Health::Healthy.describe(), "");
    assert!(!Health::Starting.comes_with_template());
}
