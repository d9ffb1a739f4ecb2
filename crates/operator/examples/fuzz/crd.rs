//! The CRD target: decoding every kind's objects the way the controllers receive them (JSON
//! from the apiserver into the `hangar-api` types), then the checks that run on a decoded
//! spec: the admission validation of the four runner kinds, and an autoscaler's trigger
//! durations, scheduled overrides and metrics as its controller reads them.
//!
//! Seeds: every object in `examples/` (all five kinds), mutated ([`super::mutate`]).
//!
//! Classes and what each must get:
//! - `decoded`: the object encodes and decodes to an equal object (nothing the types keep is
//!   lost or changed by a round trip), and validation and the autoscaler's computations return;
//! - `refused`: a decode error, nothing more;
//! - unchanged examples must decode, and those of the four runner kinds pass validation (they
//!   apply unchanged to a cluster).

use hangar::admission::validate::{
    validate_runner, validate_runner_deployment, validate_runner_replica_set, validate_runner_set,
};
use std::time::{Duration, SystemTime};

use hangar::controllers::hra::{metric_of, reservation_of, scheduled_overrides};
use hangar_api::{
    HorizontalRunnerAutoscaler, Runner, RunnerDeployment, RunnerReplicaSet, RunnerSet,
};
use hangar_core::autoscaler::metrics::Suggestion;
use hangar_core::autoscaler::{DesiredInput, desired_replicas};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::mutate::{self, Kind};
use super::{Checked, Outcome, Property, Violation, example_objects};

/// What this target checks, for the results file.
pub const PROPERTIES: &[Property] = &[
    Property {
        name: "decoded_round_trips",
        checked_on: "inputs that decode as their kind",
    },
    Property {
        name: "example_decodes_and_validates",
        checked_on: "unchanged examples (validation: the admission checks of the four runner kinds)",
    },
];

/// The target.
pub struct Crd {
    objects: Vec<(String, Value)>,
    seed: u64,
}

/// A generated object.
pub struct Input {
    pub kind: Kind,
    /// The example's kind: what the controllers decode it as (the apiserver has routed it by
    /// its kind).
    pub as_kind: String,
    pub file: String,
    pub bytes: Vec<u8>,
}

impl Crd {
    /// Seeds from `examples/`.
    pub fn new(seed: u64) -> anyhow::Result<Self> {
        let objects = example_objects()?;
        for kind in [
            "Runner",
            "RunnerReplicaSet",
            "RunnerDeployment",
            "RunnerSet",
            "HorizontalRunnerAutoscaler",
        ] {
            anyhow::ensure!(
                objects.iter().any(|(_, o)| o["kind"] == kind),
                "examples/ has no {kind}"
            );
        }
        Ok(Self { objects, seed })
    }

    /// How many objects seed the generator.
    pub fn seeds(&self) -> usize {
        self.objects.len()
    }

    /// Input `index`.
    pub fn generate(&self, index: u64) -> Input {
        let mut rng = mutate::input_rng(self.seed, "crd", index);
        let (file, object) = &self.objects[rng.usize(0..self.objects.len())];
        let (kind, bytes) = mutate::mutated_document(&mut rng, object);
        Input {
            kind,
            as_kind: object["kind"].as_str().unwrap_or_default().to_owned(),
            file: file.clone(),
            bytes,
        }
    }

    /// Decodes and checks `input`.
    pub fn check(&self, input: &Input) -> Result<Outcome, Violation> {
        let mut checked = Checked {
            context: format!("{} decoded as {}", input.file, input.as_kind),
            ..Checked::default()
        };
        let result = match input.as_kind.as_str() {
            "Runner" => decode::<Runner>(&input.bytes, &mut checked, |o| {
                validate_runner(&o.spec).is_ok()
            }),
            "RunnerReplicaSet" => decode::<RunnerReplicaSet>(&input.bytes, &mut checked, |o| {
                validate_runner_replica_set(&o.spec).is_ok()
            }),
            "RunnerDeployment" => decode::<RunnerDeployment>(&input.bytes, &mut checked, |o| {
                validate_runner_deployment(&o.spec).is_ok()
            }),
            "RunnerSet" => decode::<RunnerSet>(&input.bytes, &mut checked, |o| {
                validate_runner_set(&o.spec).is_ok()
            }),
            // An example autoscaler may lack what its controller needs (ARC's docs leave out
            // maxReplicas): that is an InvalidSpec condition, not a decoding problem.
            _ => decode::<HorizontalRunnerAutoscaler>(&input.bytes, &mut checked, |o| {
                autoscaler_reads(o);
                true
            }),
        }?;
        let class = match result {
            Some(valid) => {
                if input.kind == Kind::Pristine {
                    checked.expect("example_decodes_and_validates", valid)?;
                }
                "decoded"
            }
            None => {
                if input.kind == Kind::Pristine {
                    checked.expect("example_decodes_and_validates", false)?;
                }
                "refused"
            }
        };
        Ok(Outcome {
            class,
            status: 0,
            kind: input.kind,
            checked,
        })
    }
}

/// Decodes `bytes` as `K`; when it decodes, checks that encoding and decoding it again gives
/// the same object, and returns whether `valid` holds for it.
fn decode<K: DeserializeOwned + Serialize + PartialEq>(
    bytes: &[u8],
    checked: &mut Checked,
    valid: impl Fn(&K) -> bool,
) -> Result<Option<bool>, Violation> {
    let Ok(object) = serde_json::from_slice::<K>(bytes) else {
        return Ok(None);
    };
    let again = serde_json::to_value(&object)
        .and_then(serde_json::from_value::<K>)
        .map_err(|e| Violation::new("decoded_round_trips", e))?;
    checked.expect("decoded_round_trips", again == object)?;
    Ok(Some(valid(&object)))
}

/// What the autoscaler controller computes from a decoded spec alone, each step of which must
/// return rather than panic: trigger durations, metrics, scheduled overrides, stored
/// reservations, and the desired replica count from them (as `controllers::hra` assembles it,
/// with no metric suggestion and a fixed `now`). Whether each returns an error is not judged.
fn autoscaler_reads(hra: &HorizontalRunnerAutoscaler) {
    let spec = &hra.spec;
    for trigger in spec.scale_up_triggers.iter().flatten() {
        let _ = trigger.parsed_duration();
    }
    for (i, metric) in spec.metrics.iter().flatten().enumerate() {
        let _ = metric_of(i, metric);
    }
    let Ok(overrides) = scheduled_overrides(spec.scheduled_overrides.as_deref().unwrap_or(&[]))
    else {
        return;
    };
    let reservations = spec
        .capacity_reservations
        .iter()
        .flatten()
        .map(reservation_of)
        .collect();
    let status = hra.status.clone().unwrap_or_default();
    let input = DesiredInput {
        min_replicas: spec.min_replicas,
        max_replicas: spec.max_replicas,
        scale_down_delay_seconds: spec.scale_down_delay_seconds_after_scale_out,
        default_scale_down_delay: Duration::from_secs(600),
        scheduled_overrides: overrides,
        suggestion: Suggestion::none(),
        reservations,
        previous_desired: status.desired_replicas.and_then(|d| u32::try_from(d).ok()),
        last_scale_out: status
            .last_successful_scale_out_time
            .as_ref()
            .map(|t| SystemTime::from(t.0)),
        ephemeral: false,
        now: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    };
    let _ = desired_replicas(&input);
}
