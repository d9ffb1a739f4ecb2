//! Hostile input, generated: a property/fuzz run on the stable toolchain against the request
//! paths that take input from outside — the GitHub webhook server, the admission webhooks and
//! the decoding of every CRD kind. Run it with `cargo xtask fuzz` (a release build); the
//! counts go to `bench/results/fuzz.json`.
//!
//! Each target ([`webhook`], [`admission`], [`crd`]) makes inputs by mutating real ones (the
//! `@octokit/webhooks-examples` payloads, reviews of runner pods and of the ARC manifests in
//! `examples/`), drives the real handlers in-process (`serve::answer` and the servers' own
//! routers, so body limits, headers, signatures and JSON decoding all run) and checks the
//! properties its module lists, by class of input. For every input of every target, also:
//!
//! - **no panic**: counted by a panic hook (a panic in a task the handler spawned counts too)
//!   and caught per input;
//! - **bounded allocation**: the peak of live heap bytes while the input is handled, above what
//!   was live before, stays below `ALLOC_FACTOR × input size + ALLOC_BASE` (a counting global
//!   allocator; the runtime is single-threaded, so every allocation is the input's).
//!
//! Randomness: the run prints its seed first; input `i` of a target is a pure function of
//! (seed, target, i), so `--seed S` replays the run, and `--from I --inputs 1` regenerates one
//! input (handled by a fresh server: the webhook dedup memory of the inputs before it is not
//! rebuilt). Time is tokio's paused clock, so nothing depends on the machine's speed. On a
//! violation the run prints the seed, target, index and property, writes the input to
//! `target/fuzz/`, and exits non-zero.

#[path = "fuzz/admission.rs"]
mod admission;
#[path = "fuzz/crd.rs"]
mod crd;
#[path = "fuzz/http.rs"]
mod http;
#[path = "fuzz/mutate.rs"]
mod mutate;
#[path = "fuzz/webhook.rs"]
mod webhook;

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context as _;
use clap::Parser;
use futures::FutureExt as _;
use peak_alloc::PeakAlloc;
use serde::Serialize;
use serde_json::{Value, json};

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// Allowed heap growth per input byte while it is handled: a JSON document becomes a tree of
/// values, then typed structs, each several times the size of its text.
const ALLOC_FACTOR: usize = 64;
/// Allowed heap growth per input on top of that: buffers, the router, a reservation write.
const ALLOC_BASE: usize = 8 * 1024 * 1024;

static PANICS: AtomicU64 = AtomicU64::new(0);
static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

#[derive(Debug, Parser)]
#[command(about = "Hostile-input property run against the webhook, admission and CRD paths")]
struct Args {
    /// Seed of the run (random when absent; printed first either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Inputs per target.
    #[arg(long, default_value_t = 1_000_000)]
    inputs: u64,
    /// Index of the first input (with `--inputs 1`: regenerate one input of a run).
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Which target: webhook, admission, crd or all.
    #[arg(long, default_value = "all")]
    target: String,
    /// Results file (relative to the workspace root).
    #[arg(long, default_value = "bench/results/fuzz.json")]
    out: PathBuf,
}

/// A property a target checks, and on which inputs.
#[derive(Clone, Copy, Debug)]
pub struct Property {
    pub name: &'static str,
    pub checked_on: &'static str,
}

/// Properties every target checks on every input.
const EVERY_INPUT: &[Property] = &[
    Property {
        name: "no_panic",
        checked_on: "every input",
    },
    Property {
        name: "bounded_allocation",
        checked_on: "every input: peak heap growth while handling it <= 64 x its size + 8 MiB",
    },
];

/// A property that did not hold.
#[derive(Debug)]
pub struct Violation {
    pub property: &'static str,
    pub detail: String,
}

impl Violation {
    pub fn new(property: &'static str, detail: impl std::fmt::Display) -> Self {
        Self {
            property,
            detail: detail.to_string(),
        }
    }
}

/// The properties checked on one input, and what a violation should say about the answer.
#[derive(Debug, Default)]
pub struct Checked {
    pub properties: Vec<&'static str>,
    /// The answer, for the violation's detail.
    pub context: String,
}

impl Checked {
    /// Records that `property` was checked; a violation when it does not hold.
    pub fn expect(&mut self, property: &'static str, holds: bool) -> Result<(), Violation> {
        self.properties.push(property);
        if holds {
            Ok(())
        } else {
            Err(Violation::new(property, &self.context))
        }
    }
}

/// What one input got.
#[derive(Debug)]
pub struct Outcome {
    pub class: &'static str,
    /// HTTP status (0 where there is none).
    pub status: u16,
    pub kind: mutate::Kind,
    pub checked: Checked,
}

/// A target as the harness drives it.
trait Target {
    type Input;
    const NAME: &'static str;
    const PROPERTIES: &'static [Property];
    fn seeds(&self) -> usize;
    fn generate(&self, index: u64) -> Self::Input;
    fn size(input: &Self::Input) -> usize;
    /// The input for the failure files: a description and the raw bytes.
    fn dump(input: &Self::Input) -> (Value, Vec<u8>);
    async fn check(&self, input: &Self::Input) -> Result<Outcome, Violation>;
}

impl Target for webhook::Webhook {
    type Input = webhook::Input;
    const NAME: &'static str = "webhook";
    const PROPERTIES: &'static [Property] = webhook::PROPERTIES;
    fn seeds(&self) -> usize {
        self.examples()
    }
    fn generate(&self, index: u64) -> Self::Input {
        self.generate(index)
    }
    fn size(input: &Self::Input) -> usize {
        input.http.size()
    }
    fn dump(input: &Self::Input) -> (Value, Vec<u8>) {
        (input.http.describe(), input.http.body.clone())
    }
    async fn check(&self, input: &Self::Input) -> Result<Outcome, Violation> {
        self.check(input).await
    }
}

impl Target for admission::AdmissionTarget {
    type Input = admission::Input;
    const NAME: &'static str = "admission";
    const PROPERTIES: &'static [Property] = admission::PROPERTIES;
    fn seeds(&self) -> usize {
        self.seeds()
    }
    fn generate(&self, index: u64) -> Self::Input {
        self.generate(index)
    }
    fn size(input: &Self::Input) -> usize {
        input.http.size()
    }
    fn dump(input: &Self::Input) -> (Value, Vec<u8>) {
        (input.http.describe(), input.http.body.clone())
    }
    async fn check(&self, input: &Self::Input) -> Result<Outcome, Violation> {
        self.check(input).await
    }
}

impl Target for crd::Crd {
    type Input = crd::Input;
    const NAME: &'static str = "crd";
    const PROPERTIES: &'static [Property] = crd::PROPERTIES;
    fn seeds(&self) -> usize {
        self.seeds()
    }
    fn generate(&self, index: u64) -> Self::Input {
        self.generate(index)
    }
    fn size(input: &Self::Input) -> usize {
        input.bytes.len()
    }
    fn dump(input: &Self::Input) -> (Value, Vec<u8>) {
        (
            json!({"decoded_as": input.as_kind, "example": input.file}),
            input.bytes.clone(),
        )
    }
    async fn check(&self, input: &Self::Input) -> Result<Outcome, Violation> {
        self.check(input)
    }
}

/// Counts of one property.
#[derive(Debug, Serialize)]
struct PropertyCount {
    name: &'static str,
    checked_on: &'static str,
    inputs: u64,
    violations: u64,
}

/// What a target's run found.
#[derive(Debug, Serialize)]
struct TargetResults {
    inputs: u64,
    /// Real inputs the generator mutates.
    seeds: usize,
    seconds: f64,
    inputs_per_second: f64,
    /// Class of input → answer (HTTP status, or "-" where there is none) → count.
    by_class: BTreeMap<&'static str, BTreeMap<String, u64>>,
    /// How the inputs were made.
    by_mutation: BTreeMap<&'static str, u64>,
    properties: Vec<PropertyCount>,
    /// Largest heap growth while handling one input, the input's index and size.
    max_peak_heap_bytes: usize,
    max_peak_input_index: u64,
    max_peak_input_bytes: usize,
    /// Heap live after the target's run minus before it (the dedup memory, caches).
    heap_growth_over_run_bytes: i64,
    violation: Option<String>,
}

#[derive(Debug, Serialize)]
struct Results {
    note: &'static str,
    command: String,
    seed: u64,
    first_index: u64,
    inputs_per_target: u64,
    body_limit_bytes: usize,
    allocation_bound: String,
    targets: BTreeMap<&'static str, TargetResults>,
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    let args = Args::parse();
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    println!("fuzz: seed {seed}");
    let targets: Vec<&'static str> = match args.target.as_str() {
        "all" => vec!["webhook", "admission", "crd"],
        "webhook" => vec!["webhook"],
        "admission" => vec!["admission"],
        "crd" => vec!["crd"],
        other => anyhow::bail!("unknown target {other}: webhook, admission, crd or all"),
    };
    std::panic::set_hook(Box::new(|info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        *LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()) = info.to_string();
    }));
    // One thread: every allocation the counter sees is the current input's. Paused time: the
    // webhook writer's pauses cost nothing and the run does not depend on the machine.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    let root = workspace_root();
    let mut results = BTreeMap::new();
    for target in targets {
        let found = runtime.block_on(async {
            match target {
                "webhook" => run(&webhook::Webhook::new(seed)?, seed, &args, &root).await,
                "admission" => {
                    run(&admission::AdmissionTarget::new(seed)?, seed, &args, &root).await
                }
                _ => run(&crd::Crd::new(seed)?, seed, &args, &root).await,
            }
        })?;
        results.insert(target, found);
    }
    let failed = results.values().any(|r| r.violation.is_some());
    let report = Results {
        note: "cargo xtask fuzz (release build, one thread, tokio paused time); see \
               crates/operator/examples/fuzz.rs for the properties and classes",
        command: format!(
            "cargo xtask fuzz -- --seed {seed} --inputs {} --target {}",
            args.inputs, args.target
        ),
        seed,
        first_index: args.from,
        inputs_per_target: args.inputs,
        body_limit_bytes: http::BODY_LIMIT,
        allocation_bound: format!("{ALLOC_FACTOR} x input bytes + {ALLOC_BASE} bytes"),
        targets: results,
    };
    let out = if args.out.is_absolute() {
        args.out.clone()
    } else {
        root.join(&args.out)
    };
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("failed to write {}", out.display()))?;
    println!("fuzz: results in {}", out.display());
    if failed {
        println!("fuzz: seed {seed}: FAILED");
        return Ok(std::process::ExitCode::FAILURE);
    }
    println!("fuzz: seed {seed}: every property held");
    Ok(std::process::ExitCode::SUCCESS)
}

/// Runs `args.inputs` inputs of `target`, stopping at the first violation.
async fn run<T: Target>(
    target: &T,
    seed: u64,
    args: &Args,
    root: &Path,
) -> anyhow::Result<TargetResults> {
    let started = Instant::now();
    let live_before = ALLOC.current_usage();
    let mut by_class: BTreeMap<&'static str, BTreeMap<String, u64>> = BTreeMap::new();
    let mut by_mutation = BTreeMap::new();
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let (mut max_peak, mut max_peak_index, mut max_peak_size) = (0, 0, 0);
    let mut violation = None;
    let mut done = 0;
    for index in args.from..args.from.saturating_add(args.inputs) {
        let input = target.generate(index);
        let size = T::size(&input);
        let panics = PANICS.load(Ordering::SeqCst);
        ALLOC.reset_peak_usage();
        let base = ALLOC.current_usage();
        let result = AssertUnwindSafe(target.check(&input)).catch_unwind().await;
        let peak = ALLOC.peak_usage().saturating_sub(base);
        done += 1;
        if peak > max_peak {
            (max_peak, max_peak_index, max_peak_size) = (peak, index, size);
        }
        let bound = ALLOC_FACTOR.saturating_mul(size).saturating_add(ALLOC_BASE);
        let found = if PANICS.load(Ordering::SeqCst) != panics || result.is_err() {
            let message = LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()).clone();
            Err(Violation::new("no_panic", message))
        } else if peak > bound {
            Err(Violation::new(
                "bounded_allocation",
                format!(
                    "peak heap growth {peak} bytes for an input of {size} bytes (bound {bound})"
                ),
            ))
        } else {
            result.unwrap_or_else(|_| unreachable!("a panic is handled above"))
        };
        match found {
            Ok(outcome) => {
                let answer = if outcome.status == 0 {
                    "-".to_owned()
                } else {
                    outcome.status.to_string()
                };
                *by_class
                    .entry(outcome.class)
                    .or_default()
                    .entry(answer)
                    .or_default() += 1;
                *by_mutation.entry(outcome.kind.name()).or_insert(0) += 1;
                for p in outcome.checked.properties {
                    *counts.entry(p).or_default() += 1;
                }
            }
            Err(v) => {
                let at = save_failure::<T>(root, seed, index, &input, &v)?;
                let text = format!(
                    "{} violated by input {index} (seed {seed}): {}; input in {}; replay with \
                     `cargo xtask fuzz -- --seed {seed} --target {} --from {index} --inputs 1`",
                    v.property,
                    v.detail,
                    at.display(),
                    T::NAME
                );
                println!("fuzz: {}: VIOLATION: {text}", T::NAME);
                violation = Some((v.property, text));
                break;
            }
        }
        if done % 100_000 == 0 {
            println!(
                "fuzz: {} {done}/{} ({:.0} inputs/s)",
                T::NAME,
                args.inputs,
                done as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    for p in EVERY_INPUT {
        counts.insert(p.name, done);
    }
    let properties = EVERY_INPUT
        .iter()
        .chain(T::PROPERTIES)
        .map(|p| PropertyCount {
            name: p.name,
            checked_on: p.checked_on,
            inputs: counts.get(p.name).copied().unwrap_or(0),
            violations: u64::from(violation.as_ref().is_some_and(|(name, _)| *name == p.name)),
        })
        .collect();
    println!(
        "fuzz: {} {done} inputs in {seconds:.1}s, max heap growth {max_peak} bytes (input {max_peak_index}, {max_peak_size} bytes)",
        T::NAME
    );
    Ok(TargetResults {
        inputs: done,
        seeds: target.seeds(),
        seconds: (seconds * 10.0).round() / 10.0,
        inputs_per_second: (done as f64 / seconds).round(),
        by_class,
        by_mutation,
        properties,
        max_peak_heap_bytes: max_peak,
        max_peak_input_index: max_peak_index,
        max_peak_input_bytes: max_peak_size,
        heap_growth_over_run_bytes: ALLOC.current_usage() as i64 - live_before as i64,
        violation: violation.map(|(_, text)| text),
    })
}

/// Writes the failing input to `target/fuzz/<target>-<seed>-<index>.{json,body}`.
fn save_failure<T: Target>(
    root: &Path,
    seed: u64,
    index: u64,
    input: &T::Input,
    violation: &Violation,
) -> anyhow::Result<PathBuf> {
    let dir = root.join("target/fuzz");
    std::fs::create_dir_all(&dir)?;
    let stem = dir.join(format!("{}-{seed}-{index}", T::NAME));
    let (description, bytes) = T::dump(input);
    let record = json!({
        "target": T::NAME, "seed": seed, "index": index,
        "property": violation.property, "detail": violation.detail,
        "input": description,
    });
    std::fs::write(
        stem.with_extension("json"),
        serde_json::to_string_pretty(&record)?,
    )?;
    std::fs::write(stem.with_extension("body"), bytes)?;
    Ok(stem.with_extension("json"))
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_owned)
        .unwrap_or_default()
}

/// Every object of the five kinds in `examples/*.yaml` (not `examples/invalid/`), with its
/// file name, as the JSON the apiserver would hand on.
pub fn example_objects() -> anyhow::Result<Vec<(String, Value)>> {
    let dir = workspace_root().join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("failed to read {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut objects = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc)
                .with_context(|| format!("failed to parse {name}"))?;
            if value["apiVersion"] == "actions.summerwind.dev/v1alpha1" {
                objects.push((name.clone(), value));
            }
        }
    }
    anyhow::ensure!(!objects.is_empty(), "no examples in {}", dir.display());
    Ok(objects)
}
