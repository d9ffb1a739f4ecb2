//! The `FieldsHonored` condition: what a RunnerDeployment, RunnerReplicaSet, RunnerSet or Runner
//! sets that Hangar stores but does not act on (`hangar_api::ignored`), said where `kubectl
//! describe` shows it.
//!
//! Contract: an object with such fields gets a False `FieldsHonored` condition (reason
//! `FieldsIgnored`) naming each field and its alternative, and one Warning event
//! `FieldsIgnored` when the condition starts saying so (not on every reconcile). Once the
//! fields are gone the condition turns True; an object that never set one gets no condition at
//! all. Objects a Hangar owner created (a deployment's replica sets, a replica set's Runners)
//! are not checked: their owner reports the same fields once instead of once per runner.

use hangar_api::ignored::{IgnoredField, summary};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::conditions::{Desired, kind, reason};
use crate::context::Context;

/// The `FieldsHonored` condition to merge for an object with ignored `fields` and `current`
/// conditions (see the module docs); publishes the Warning event when it turns False or its
/// list changes.
pub fn fields_honored(
    ctx: &Context,
    object: ObjectReference,
    current: &[Condition],
    fields: &[IgnoredField],
) -> Option<Desired> {
    let had = current.iter().find(|c| c.type_ == kind::FIELDS_HONORED);
    let uid = object.uid.clone().unwrap_or_default();
    if fields.is_empty() {
        ctx.said_once.forget(&uid, reason::FIELDS_IGNORED);
        return had.map(|_| {
            Desired::yes(
                kind::FIELDS_HONORED,
                reason::FIELDS_HONORED,
                "every field set is acted on",
            )
        });
    }
    let message = summary(fields);
    let said = had.is_some_and(|c| c.status == "False" && c.message == message);
    if !said && ctx.said_once.first(&uid, reason::FIELDS_IGNORED, &message) {
        ctx.event(object, true, reason::FIELDS_IGNORED, message.clone());
    }
    Some(Desired::no(
        kind::FIELDS_HONORED,
        reason::FIELDS_IGNORED,
        message,
    ))
}
