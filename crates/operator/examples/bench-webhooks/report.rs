//! The webhook benchmark's report: pure arithmetic over what one run observed ([`Observed`]),
//! into the results file's [`Report`], the per-job records and the summary printed at the end.
//!
//! Contract: nothing here reads a clock or waits (the machine's CPU count is all it reads of
//! the world); each latency names the clock it was measured on (the report's `clocks`), and a
//! job counts as completed only with the planned conclusion and not interrupted.

use std::collections::{BTreeMap, HashMap};

use ghsim::accounting::{JobTimes, replacement_gaps};
use ghsim::world::JobStatus;
use jiff::Timestamp;
use serde::Serialize;

use super::common::{Latency, round_us, secs};
use super::proxy::Proxied;
use super::{Args, Observed, Usage};

const WALL_CLOCK: &str = "system real-time clock of this process (ns resolution); ghsim runs in \
                          it and reads the same clock";
const MONOTONIC_CLOCK: &str = "monotonic clock (Instant) of this process";

/// The results file (`bench/results/webhooks.json`).
#[derive(Debug, Serialize)]
pub struct Report {
    benchmark: &'static str,
    setup: Setup,
    /// Which clock each kind of figure comes from.
    clocks: BTreeMap<&'static str, &'static str>,
    load: Load,
    pub jobs: Jobs,
    /// Seconds, per job; `count` says how many jobs had both ends.
    latency_seconds: Latencies,
    webhook_server: WebhookServer,
    github_api: GitHubApi,
    apiserver_writes: ApiserverWrites,
    /// How late the pod watch saw each pod after its creation: `seen - creationTimestamp`,
    /// where the timestamp is truncated to the second, so each value is an upper bound (and
    /// at most one second above the true lag).
    pod_watch_lag_upper_bound_seconds: Latency,
    usage: Usage,
    /// Where the per-job records went (not committed).
    per_job_records: &'static str,
    /// How a pool at `maxReplicas` with jobs waiting serves them (see [`Saturation`]).
    saturation: Saturation,
}

/// A pool at `maxReplicas` with jobs waiting: how fast a finished runner's place serves the
/// next job. Figures need at least `maxReplicas` jobs started; `None` otherwise.
///
/// Pairing: at the cap, the k-th job to complete frees the place in which the
/// (`maxReplicas` + k)-th job to start runs. The pair is a replacement only if that job was
/// already queued when the place was freed (otherwise the gap is the wait for demand, not for
/// a runner).
#[derive(Debug, Serialize)]
pub struct Saturation {
    /// k-th completion → (`maxReplicas` + k)-th start, over pairs whose job was waiting.
    replacement_gap_seconds: Latency,
    /// The same stack's own floor for a replacement: a runner pod first seen by the watch →
    /// its runner registered, over the runners that ran a job.
    pod_seen_to_registered_seconds: Latency,
    /// `replacement_gap_seconds.p95 / pod_seen_to_registered_seconds.p95` (goal ≤ 1.5).
    gap_p95_over_pod_start_p95: Option<f64>,
    /// Busy runner-seconds ÷ (`maxReplicas` × seconds), from the `maxReplicas`-th start to the
    /// last start (the pool full, jobs waiting). An oracle that knew every job's end would
    /// have the next runner ready at it: 1.0.
    utilization: Option<f64>,
    /// Runner pods that ran no job: created for demand that was gone (with the default
    /// scale-down delay also the warm pool kept after the last job).
    runner_pods_without_a_job: usize,
    /// `runner_pods_without_a_job` per job queued (goal ≤ 0.01 with a scale-down delay of 0).
    over_provisioned_per_job: f64,
    /// When each of those pods was first seen, in seconds from the run's start (the same clock
    /// as `jobs.json`), to tell where in the run they were made.
    runner_pods_without_a_job_seen_at: Vec<f64>,
}

/// Writes (anything but GET, LIST and WATCH) the apiserver served while the jobs were queued
/// and drained: from every component (Hangar, nodesim's kubelets, the scheduler, the
/// garbage collector), since each costs the control plane alike.
#[derive(Debug, Serialize)]
struct ApiserverWrites {
    total: u64,
    per_job: f64,
    /// Per job, by `VERB resource[/subresource]`, largest first.
    per_job_by_request: Vec<(String, f64)>,
    /// Hangar's own share (its `rest_client_requests_total`, whole run including setup), per
    /// job, by `METHOD resource[/subresource]`, largest first.
    by_hangar_per_job_by_request: Vec<(String, f64)>,
    /// Reads (GET, LIST, WATCH) from every component, per job, by `VERB resource`, largest
    /// first: not writes, but each costs the apiserver a request too.
    reads_per_job_by_request: Vec<(String, f64)>,
}

#[derive(Debug, Serialize)]
struct Setup {
    rate_per_second: f64,
    seconds: u64,
    job_seconds: f64,
    nodes: usize,
    max_replicas: u32,
    machine_cpus: usize,
    autoscaler: &'static str,
    controller: &'static str,
}

#[derive(Debug, Serialize)]
struct Load {
    jobs_queued: usize,
    /// From the first job queued to the last.
    queueing_seconds: f64,
    /// Jobs per second actually queued.
    achieved_rate_per_second: f64,
    /// From the last job queued until the last completed.
    drain_seconds: f64,
}

#[derive(Debug, Serialize)]
pub struct Jobs {
    pub queued: usize,
    /// Completed with the planned conclusion (`success`), not interrupted.
    pub completed: usize,
    pub all_completed: bool,
    /// Jobs whose runner went away while running them (ghsim's accounting; must be 0).
    pub interrupted: u64,
    never_started: usize,
    /// Runner pods the watch saw: more than jobs means runners that never got one.
    runner_pods_created: usize,
    /// Jobs whose runner ran on a pod created before the job's queued delivery arrived.
    served_by_an_earlier_pod: usize,
}

#[derive(Debug, Serialize)]
struct Latencies {
    delivery_to_pod_created: Latency,
    delivery_to_runner_registered: Latency,
    delivery_to_job_assigned: Latency,
    delivery_to_job_started: Latency,
    delivery_to_pod_created_first_in_first_out: Latency,
    /// The end points of `bench-floor`'s `job_to_pod_seen`: a job's instant to a pod for it,
    /// sender lag and webhook server included. The knee sweep reads its p99.
    job_queued_to_pod_created_first_in_first_out: Latency,
    job_queued_to_delivery: Latency,
    job_queued_to_started: Latency,
}

#[derive(Debug, Serialize)]
struct WebhookServer {
    /// `workflow_job` deliveries ghsim sent (through the proxy).
    deliveries: usize,
    /// Of those, answered 2xx: signatures verified and the delivery accepted.
    answered_2xx: usize,
    /// Answers by `event/action status` (`none` = no answer).
    answers: BTreeMap<String, usize>,
    /// 2xx answers per second from the first delivery's arrival to the last answer. ghsim,
    /// like GitHub, has several deliveries on their way at once (`DELIVERIES_IN_FLIGHT`), so
    /// this is the offered load unless the server is the bottleneck.
    answered_2xx_per_second: f64,
    /// 2xx answers completed while jobs were being queued, per second of that time.
    answered_2xx_per_second_while_queueing: f64,
    /// Most 2xx answers completed in one second of the run (counted from its start).
    peak_2xx_in_one_second: usize,
    /// Deliveries per second a one-at-a-time sender could get at the measured answer times
    /// (deliveries / sum of answer latencies): the headroom.
    one_at_a_time_capacity_per_second: f64,
    answer_latency_seconds: Latency,
    /// The controller's own counters and histogram sums, scraped at the end.
    controller_metrics: BTreeMap<String, f64>,
}

#[derive(Debug, Serialize)]
struct GitHubApi {
    /// REST calls made with the controller's token over the whole run.
    calls: u64,
    calls_per_job: f64,
    /// Calls charged to the primary rate-limit budget (304s are free).
    rate_limit_cost: u64,
    by_endpoint: BTreeMap<String, u64>,
}

/// One job's times, in seconds from the run's start (`t0`).
#[derive(Debug, Serialize)]
pub struct JobRecord {
    id: u64,
    runner: Option<String>,
    queued: f64,
    delivered: Option<f64>,
    pod_seen: Option<f64>,
    pod_creation_timestamp: Option<f64>,
    registered: Option<f64>,
    assigned: Option<f64>,
    started: Option<f64>,
    completed: Option<f64>,
    interrupted: bool,
}

/// The [`Saturation`] figures of one run, from ghsim's job records, the pods the watch saw and
/// the runners' registrations.
fn saturation(max_replicas: u32, o: &Observed) -> Saturation {
    let cap = max_replicas as usize;
    let times: Vec<JobTimes> = o.accounting.jobs.iter().map(|j| j.times_unix).collect();
    let gaps = replacement_gaps(&times, cap);
    let mut starts: Vec<Timestamp> = o.jobs.iter().filter_map(|j| j.started_at).collect();
    starts.sort();
    let ran: std::collections::HashSet<&str> = o
        .jobs
        .iter()
        .filter_map(|j| j.runner_name.as_deref())
        .collect();
    let pod_start: Vec<f64> = o
        .pods
        .iter()
        .filter(|(name, _)| ran.contains(name.as_str()))
        .filter_map(|(name, pod)| Some(secs(pod.seen, *o.registered.get(name)?)))
        .collect();
    let utilization = match (starts.get(cap.saturating_sub(1)), starts.last()) {
        (Some(from), Some(to)) if cap > 0 && to > from => {
            let window = secs(*from, *to);
            let busy: f64 = o
                .jobs
                .iter()
                .filter_map(|j| {
                    let start = j.started_at?.max(*from);
                    let end = j.completed_at.unwrap_or(*to).min(*to);
                    Some(secs(start, end).max(0.0))
                })
                .sum();
            Some(round_us(busy / (window * cap as f64)))
        }
        _ => None,
    };
    let mut idle_seen_at: Vec<f64> = o
        .pods
        .iter()
        .filter(|(name, _)| !ran.contains(name.as_str()))
        .map(|(_, pod)| round_us(secs(o.t0, pod.seen)))
        .collect();
    idle_seen_at.sort_by(f64::total_cmp);
    let without_a_job = idle_seen_at.len();
    let replacement_gap_seconds = Latency::of(
        "k-th job completed (ghsim's completed_at), with jobs waiting",
        "(maxReplicas + k)-th job started (started_at)",
        WALL_CLOCK,
        gaps,
    );
    let pod_seen_to_registered_seconds = Latency::of(
        "runner pod first seen by the watch",
        "its runner registered (ghsim's registered_at)",
        WALL_CLOCK,
        pod_start,
    );
    let gap_p95_over_pod_start_p95 = match (
        replacement_gap_seconds.p95,
        pod_seen_to_registered_seconds.p95,
    ) {
        (Some(gap), Some(start)) if start > 0.0 => Some(round_us(gap / start)),
        _ => None,
    };
    Saturation {
        replacement_gap_seconds,
        pod_seen_to_registered_seconds,
        gap_p95_over_pod_start_p95,
        utilization,
        runner_pods_without_a_job: without_a_job,
        runner_pods_without_a_job_seen_at: idle_seen_at,
        over_provisioned_per_job: if o.jobs.is_empty() {
            0.0
        } else {
            round_us(without_a_job as f64 / o.jobs.len() as f64)
        },
    }
}

/// The report and the per-job records of one run.
pub fn summarize(args: &Args, o: &Observed) -> (Report, Vec<JobRecord>) {
    // The first arrival of each job's `queued` delivery.
    let mut queued_delivery: HashMap<u64, Timestamp> = HashMap::new();
    for d in &o.deliveries {
        if d.event == "workflow_job"
            && d.action.as_deref() == Some("queued")
            && let Some(job) = d.job_id
        {
            queued_delivery.entry(job).or_insert(d.arrived);
        }
    }

    let (mut to_pod, mut to_registered, mut to_assigned) = (vec![], vec![], vec![]);
    let (mut to_started, mut to_delivery, mut queue_time) = (vec![], vec![], vec![]);
    let mut records = Vec::with_capacity(o.jobs.len());
    let mut earlier_pod = 0;
    let at = |t: Timestamp| round_us(secs(o.t0, t));
    for job in &o.jobs {
        let delivered = queued_delivery.get(&job.id).copied();
        let pod = job.runner_name.as_ref().and_then(|r| o.pods.get(r));
        let registered = job
            .runner_name
            .as_ref()
            .and_then(|r| o.registered.get(r))
            .copied();
        if let Some(delivered) = delivered {
            to_delivery.push(secs(job.created_at, delivered));
            if let Some(pod) = pod {
                let latency = secs(delivered, pod.seen);
                earlier_pod += usize::from(latency < 0.0);
                to_pod.push(latency);
            }
            if let Some(registered) = registered {
                to_registered.push(secs(delivered, registered));
            }
            if let Some(assigned) = job.assigned_at {
                to_assigned.push(secs(delivered, assigned));
            }
            if let Some(started) = job.started_at {
                to_started.push(secs(delivered, started));
            }
        }
        if let Some(started) = job.started_at {
            queue_time.push(secs(job.created_at, started));
        }
        records.push(JobRecord {
            id: job.id,
            runner: job.runner_name.clone(),
            queued: at(job.created_at),
            delivered: delivered.map(at),
            pod_seen: pod.map(|p| at(p.seen)),
            pod_creation_timestamp: pod.and_then(|p| p.created).map(at),
            registered: registered.map(at),
            assigned: job.assigned_at.map(at),
            started: job.started_at.map(at),
            completed: job.completed_at.map(at),
            interrupted: job.interrupted,
        });
    }

    // Pods in creation order serving deliveries in arrival order, as the controller's
    // `hangar_webhook_delivery_to_pod_seconds` pairs them.
    let mut arrivals: Vec<Timestamp> = queued_delivery.values().copied().collect();
    arrivals.sort();
    let mut pods_seen: Vec<Timestamp> = o.pods.values().map(|p| p.seen).collect();
    pods_seen.sort();
    let fifo = arrivals
        .iter()
        .zip(&pods_seen)
        .map(|(d, p)| secs(*d, *p))
        .collect();
    let mut queued: Vec<Timestamp> = o.jobs.iter().map(|j| j.created_at).collect();
    queued.sort();
    let queued_fifo = queued
        .iter()
        .zip(&pods_seen)
        .map(|(q, p)| secs(*q, *p))
        .collect();
    let watch_lag = o
        .pods
        .values()
        .filter_map(|p| Some(secs(p.created?, p.seen)))
        .collect();

    let latency_seconds = Latencies {
        delivery_to_pod_created: Latency::of(
            "queued delivery arrives at the webhook server (proxy)",
            "the pod of the runner that ran the job is first seen by a pod watch",
            WALL_CLOCK,
            to_pod,
        ),
        delivery_to_runner_registered: Latency::of(
            "queued delivery arrives at the webhook server (proxy)",
            "the runner that ran the job registers (ghsim's registered_at)",
            WALL_CLOCK,
            to_registered,
        ),
        delivery_to_job_assigned: Latency::of(
            "queued delivery arrives at the webhook server (proxy)",
            "ghsim assigns the job to a runner (assigned_at; the runner picks it up next)",
            WALL_CLOCK,
            to_assigned,
        ),
        delivery_to_job_started: Latency::of(
            "queued delivery arrives at the webhook server (proxy)",
            "the runner picks the job up (ghsim's started_at)",
            WALL_CLOCK,
            to_started,
        ),
        delivery_to_pod_created_first_in_first_out: Latency::of(
            "n-th queued delivery to arrive",
            "n-th runner pod seen by the watch (whichever job it ran)",
            WALL_CLOCK,
            fifo,
        ),
        job_queued_to_pod_created_first_in_first_out: Latency::of(
            "n-th job queued in ghsim (created_at)",
            "n-th runner pod seen by the watch (whichever job it ran)",
            WALL_CLOCK,
            queued_fifo,
        ),
        job_queued_to_delivery: Latency::of(
            "job queued in ghsim (created_at)",
            "its queued delivery arrives at the webhook server (ghsim's sender lag)",
            WALL_CLOCK,
            to_delivery,
        ),
        job_queued_to_started: Latency::of(
            "job queued in ghsim (created_at)",
            "the runner picks the job up (started_at): GitHub's queue time",
            WALL_CLOCK,
            queue_time,
        ),
    };

    let webhook_server = webhook_server(o);
    let mut by_endpoint = BTreeMap::new();
    let (mut calls, mut cost) = (0, 0);
    for row in o
        .accounting
        .api_calls
        .iter()
        .filter(|r| r.credential == "pat:controller")
    {
        *by_endpoint.entry(row.endpoint.clone()).or_default() += row.calls;
        calls += row.calls;
        cost += row.charged;
    }
    let queued = o.jobs.len();
    let completed = o
        .jobs
        .iter()
        .filter(|j| {
            j.status == JobStatus::Completed
                && j.conclusion.as_deref() == Some("success")
                && !j.interrupted
        })
        .count();
    let queueing_seconds = o.queueing.as_secs_f64();
    let report = Report {
        benchmark: "webhooks",
        setup: Setup {
            rate_per_second: args.load.rate,
            seconds: args.load.seconds,
            job_seconds: args.load.job_ms as f64 / 1000.0,
            nodes: args.load.nodes,
            max_replicas: args.max_replicas,
            machine_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            autoscaler: if args.pull {
                "ephemeral RunnerDeployment from 0; HRA minReplicas 0, metric \
                 TotalNumberOfQueuedAndInProgressWorkflowRuns, scale-down delay as --scale-down-delay-seconds"
            } else {
                "ephemeral RunnerDeployment from 0; HRA minReplicas 0, scaleUpTriggers \
                 workflowJob (30m), scale-down delay as --scale-down-delay-seconds"
            },
            controller: match args.controller {
                crate::Measured::Hangar => {
                    "hangar run --webhook-addr (release build), webhook secret, default \
                     --webhook-batch-interval 250ms and GitHub client cache"
                }
                crate::Measured::Arc => {
                    "actions-runner-controller v0.27.6: manager (--sync-period 1m, its chart's \
                     default) and github-webhook-server, webhook secret, ARC's CRDs"
                }
            },
        },
        clocks: BTreeMap::from([
            ("latency_seconds", WALL_CLOCK),
            ("webhook_server.answer_latency_seconds", MONOTONIC_CLOCK),
            (
                "pod_watch_lag_upper_bound_seconds",
                "watch arrival on the real-time clock minus Kubernetes' creationTimestamp \
                 (whole seconds)",
            ),
            (
                "load, usage",
                "monotonic clock; CPU from /proc (USER_HZ ticks)",
            ),
        ]),
        load: Load {
            jobs_queued: queued,
            queueing_seconds: round_us(queueing_seconds),
            achieved_rate_per_second: if queueing_seconds > 0.0 && queued > 1 {
                round_us((queued - 1) as f64 / queueing_seconds)
            } else {
                0.0
            },
            drain_seconds: round_us(o.draining.as_secs_f64()),
        },
        jobs: Jobs {
            queued,
            completed,
            all_completed: o.drained && completed == queued,
            interrupted: o.accounting.jobs_summary.interrupted,
            never_started: o.jobs.iter().filter(|j| j.started_at.is_none()).count(),
            runner_pods_created: o.pods.len(),
            served_by_an_earlier_pod: earlier_pod,
        },
        latency_seconds,
        webhook_server,
        github_api: GitHubApi {
            calls,
            calls_per_job: if queued > 0 {
                round_us(calls as f64 / queued as f64)
            } else {
                0.0
            },
            rate_limit_cost: cost,
            by_endpoint,
        },
        apiserver_writes: {
            let total: u64 = o.apiserver_writes.values().sum();
            let per_job = |n: u64| {
                if queued > 0 {
                    round_us(n as f64 / queued as f64)
                } else {
                    0.0
                }
            };
            // Per job, by `VERB resource`, largest first.
            let by_request = |counts: &BTreeMap<(String, String), u64>| {
                let mut rows: Vec<(String, f64)> = counts
                    .iter()
                    .map(|((verb, resource), n)| (format!("{verb} {resource}"), per_job(*n)))
                    .collect();
                rows.sort_by(|a, b| b.1.total_cmp(&a.1));
                rows
            };
            let mut by_hangar: BTreeMap<String, u64> = BTreeMap::new();
            for (series, n) in &o.hangar_metrics {
                let Some(labels) = series.strip_prefix("rest_client_requests_total{") else {
                    continue;
                };
                let label = |name: &str| {
                    labels.split(',').find_map(|kv| {
                        kv.strip_prefix(name)?
                            .strip_prefix("=\"")?
                            .trim_end_matches('}')
                            .strip_suffix('"')
                    })
                };
                let (Some(method), Some(resource)) = (label("method"), label("resource")) else {
                    continue;
                };
                if method != "GET" {
                    *by_hangar.entry(format!("{method} {resource}")).or_default() += *n as u64;
                }
            }
            let mut by_hangar: Vec<(String, f64)> = by_hangar
                .into_iter()
                .map(|(k, n)| (k, per_job(n)))
                .collect();
            by_hangar.sort_by(|a, b| b.1.total_cmp(&a.1));
            ApiserverWrites {
                total,
                per_job: per_job(total),
                per_job_by_request: by_request(&o.apiserver_writes),
                by_hangar_per_job_by_request: by_hangar,
                reads_per_job_by_request: by_request(&o.apiserver_reads),
            }
        },
        pod_watch_lag_upper_bound_seconds: Latency::of(
            "creationTimestamp (whole seconds)",
            "first seen by the watch",
            "watch arrival: real-time clock; creationTimestamp: the apiserver's, truncated",
            watch_lag,
        ),
        usage: Usage {
            machine_cpu_busy_while_queueing: round_us(o.usage.machine_cpu_busy_while_queueing),
            controller_cpus_while_queueing: round_us(o.usage.controller_cpus_while_queueing),
            bench_process_cpus_while_queueing: round_us(o.usage.bench_process_cpus_while_queueing),
            controller_cpu_seconds: o.usage.controller_cpu_seconds,
            controller_peak_rss_mib: round_us(o.usage.controller_peak_rss_mib),
            control_plane_cpu_seconds_per_job: o.usage.control_plane_cpu_seconds_per_job.clone(),
        },
        per_job_records: "target/bench-webhooks/jobs.json",
        saturation: saturation(args.max_replicas, o),
    };
    (report, records)
}

/// The webhook server's answers, from the proxy's log.
fn webhook_server(o: &Observed) -> WebhookServer {
    let jobs: Vec<&Proxied> = o
        .deliveries
        .iter()
        .filter(|d| d.event == "workflow_job")
        .collect();
    let mut answers = BTreeMap::new();
    for d in &jobs {
        let status = d
            .status
            .map_or_else(|| "none".to_owned(), |s| s.to_string());
        let key = format!(
            "{}/{} {status}",
            d.event,
            d.action.as_deref().unwrap_or("-")
        );
        *answers.entry(key).or_default() += 1;
    }
    let ok: Vec<&&Proxied> = jobs
        .iter()
        .filter(|d| d.status.is_some_and(|s| (200..300).contains(&s)))
        .collect();
    // Answer completion times, in seconds from t0.
    let done: Vec<f64> = ok
        .iter()
        .map(|d| secs(o.t0, d.arrived) + d.answer.as_secs_f64())
        .collect();
    let first = jobs.iter().map(|d| secs(o.t0, d.arrived)).reduce(f64::min);
    let last = done.iter().copied().reduce(f64::max);
    let rate = match (first, last) {
        (Some(first), Some(last)) if last > first => ok.len() as f64 / (last - first),
        _ => 0.0,
    };
    let mut per_second: BTreeMap<i64, usize> = BTreeMap::new();
    for t in &done {
        *per_second.entry(t.floor() as i64).or_default() += 1;
    }
    let queueing = o.queueing.as_secs_f64();
    let while_queueing = done.iter().filter(|t| **t <= queueing).count();
    let busy: f64 = jobs.iter().map(|d| d.answer.as_secs_f64()).sum();
    WebhookServer {
        deliveries: jobs.len(),
        answered_2xx: ok.len(),
        answers,
        answered_2xx_per_second: round_us(rate),
        answered_2xx_per_second_while_queueing: if queueing > 0.0 {
            round_us(while_queueing as f64 / queueing)
        } else {
            0.0
        },
        peak_2xx_in_one_second: per_second.values().copied().max().unwrap_or(0),
        one_at_a_time_capacity_per_second: if busy > 0.0 {
            round_us(jobs.len() as f64 / busy)
        } else {
            0.0
        },
        answer_latency_seconds: Latency::of(
            "the proxy forwards a workflow_job delivery",
            "hangar's answer has been read in full",
            MONOTONIC_CLOCK,
            jobs.iter().map(|d| d.answer.as_secs_f64()).collect(),
        ),
        controller_metrics: o
            .hangar_metrics
            .iter()
            .filter(|(series, _)| !series.starts_with("rest_client_requests_total"))
            .map(|(series, value)| (series.clone(), *value))
            .collect(),
    }
}

/// The one-paragraph summary printed at the end.
pub fn summary(r: &Report) -> String {
    let l = &r.latency_seconds;
    // Milliseconds below a second, seconds above.
    let human = |v: Option<f64>| match v {
        None => "-".to_owned(),
        Some(s) if s.abs() < 1.0 => format!("{:.0} ms", s * 1000.0),
        Some(s) => format!("{s:.1} s"),
    };
    let line = |name: &str, x: &Latency| {
        format!(
            "{name} p50 {} / p95 {} / p99 {} / max {}",
            human(x.p50),
            human(x.p95),
            human(x.p99),
            human(x.max)
        )
    };
    let w = &r.webhook_server;
    format!(
        "webhooks: {queued} jobs of {job:.1} s queued at {rate:.1}/s (asked {asked}/s) for \
         {secs:.0} s on {cpus} CPUs; {completed} completed{all}, {interrupted} interrupted, \
         drained {drain:.1} s after the last was queued. From the queued delivery: {pod}; {reg}; \
         {assigned}; ghsim's sender was {lag} behind at p99. Webhook server: {ok} of {sent} \
         deliveries answered 2xx ({per_s:.1}/s while jobs were queued, peak {peak} in one \
         second), answer latency \
         p50 {answer50:.1} ms / p99 {answer99:.1} ms. GitHub API: {calls} calls with the controller's token ({per_job:.3} per \
         job). Apiserver: {writes:.1} writes per job. CPU while queueing: machine {busy:.0}% busy, controller {ctl:.2} CPUs, bench \
         process {bench:.2} CPUs. Saturation (pool at {max}): {gap}, {gaps} replacements; pod \
         seen -> registered p95 {start}; gap p95 / that {ratio}; utilization {util}; {idle} runner \
         pods ran no job.",
        max = r.setup.max_replicas,
        gap = line("replacement gap", &r.saturation.replacement_gap_seconds),
        gaps = r.saturation.replacement_gap_seconds.count,
        start = human(r.saturation.pod_seen_to_registered_seconds.p95),
        ratio = r
            .saturation
            .gap_p95_over_pod_start_p95
            .map_or("-".to_owned(), |x| format!("{x:.2}")),
        util = r
            .saturation
            .utilization
            .map_or("-".to_owned(), |x| format!("{x:.3}")),
        idle = r.saturation.runner_pods_without_a_job,
        queued = r.jobs.queued,
        job = r.setup.job_seconds,
        rate = r.load.achieved_rate_per_second,
        asked = r.setup.rate_per_second,
        secs = r.load.queueing_seconds,
        cpus = r.setup.machine_cpus,
        completed = r.jobs.completed,
        all = if r.jobs.all_completed {
            " (all)"
        } else {
            " (NOT all)"
        },
        interrupted = r.jobs.interrupted,
        drain = r.load.drain_seconds,
        pod = line("pod created", &l.delivery_to_pod_created),
        reg = line("runner registered", &l.delivery_to_runner_registered),
        assigned = line("job assigned", &l.delivery_to_job_assigned),
        lag = human(l.job_queued_to_delivery.p99),
        ok = w.answered_2xx,
        sent = w.deliveries,
        per_s = w.answered_2xx_per_second_while_queueing,
        peak = w.peak_2xx_in_one_second,
        answer50 = w.answer_latency_seconds.p50.unwrap_or(0.0) * 1000.0,
        answer99 = w.answer_latency_seconds.p99.unwrap_or(0.0) * 1000.0,
        calls = r.github_api.calls,
        per_job = r.github_api.calls_per_job,
        writes = r.apiserver_writes.per_job,
        busy = r.usage.machine_cpu_busy_while_queueing * 100.0,
        ctl = r.usage.controller_cpus_while_queueing,
        bench = r.usage.bench_process_cpus_while_queueing,
    )
}
