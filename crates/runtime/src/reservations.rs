//! The compare-and-swap write of an autoscaler's `spec.capacityReservations`, shared by
//! everything that writes reservations: the HRA controller (pruning expired ones), the GitHub
//! webhook server and the pull recovery (adding them).
//!
//! Contract: a write replaces the list only if it is still the list the writer read, so two
//! writers never lose each other's reservations; a conflict ([`is_conflict`]) means re-read and
//! decide again.

use hangar_api::HorizontalRunnerAutoscaler;
use hangar_api::horizontal_runner_autoscaler::CapacityReservation;
use kube::ResourceExt;
use kube::api::Patch;
use serde_json::json;

/// A JSON patch replacing `spec.capacityReservations` of `hra` (as read) with `new`, that fails
/// if the list changed since: a compare-and-swap on exactly this field, so the controller's own
/// status writes never make it conflict. Without a stored list, the object's `resourceVersion`
/// is compared instead.
pub fn reservations_patch(
    hra: &HorizontalRunnerAutoscaler,
    new: &[CapacityReservation],
) -> Patch<serde_json::Value> {
    const PATH: &str = "/spec/capacityReservations";
    let ops = match &hra.spec.capacity_reservations {
        Some(old) => json!([
            {"op": "test", "path": PATH, "value": old},
            {"op": "replace", "path": PATH, "value": new},
        ]),
        None => json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": hra.resource_version()},
            {"op": "add", "path": PATH, "value": new},
        ]),
    };
    Patch::Json(serde_json::from_value(ops).expect("a well-formed JSON patch"))
}

/// A failed compare-and-swap: 409, or 422 for a failed JSON-patch `test`.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 || s.code == 422)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hra(reservations: Option<serde_json::Value>) -> HorizontalRunnerAutoscaler {
        let mut spec = json!({});
        if let Some(r) = reservations {
            spec["capacityReservations"] = r;
        }
        serde_json::from_value(json!({
            "apiVersion": "actions.summerwind.dev/v1alpha1",
            "kind": "HorizontalRunnerAutoscaler",
            "metadata": {"name": "a", "namespace": "ci", "resourceVersion": "7"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn ops(patch: Patch<serde_json::Value>) -> serde_json::Value {
        match patch {
            Patch::Json(p) => serde_json::to_value(p).unwrap(),
            _ => panic!("not a JSON patch"),
        }
    }

    #[test]
    fn a_stored_list_is_replaced_only_if_unchanged() {
        let old = json!([{"name": "r1", "replicas": 1}]);
        let new: Vec<CapacityReservation> =
            serde_json::from_value(json!([{"name": "r2", "replicas": 2}])).unwrap();
        let ops = ops(reservations_patch(&hra(Some(old.clone())), &new));
        assert_eq!(ops[0]["op"], "test");
        assert_eq!(ops[0]["path"], "/spec/capacityReservations");
        assert_eq!(ops[0]["value"], old);
        assert_eq!(ops[1]["op"], "replace");
        assert_eq!(ops[1]["value"][0]["name"], "r2");
    }

    #[test]
    fn without_a_list_the_resource_version_is_compared() {
        let ops = ops(reservations_patch(&hra(None), &[]));
        assert_eq!(ops[0]["op"], "test");
        assert_eq!(ops[0]["path"], "/metadata/resourceVersion");
        assert_eq!(ops[0]["value"], "7");
        assert_eq!(ops[1]["op"], "add");
        assert_eq!(ops[1]["path"], "/spec/capacityReservations");
    }
}
