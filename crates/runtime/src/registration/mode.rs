//! How RunnerSet pods get their registration credential, shared by the RunnerSet controller
//! (which builds their StatefulSets) and the pod admission webhook (which injects it).
//!
//! Contract: data and naming only. The mode is chosen once at start-up from the command line:
//! the pod webhook when this process serves it, else a Secret per StatefulSet.

use super::names::registration_secret_name;

/// How RunnerSet pods get their registration credential (the RunnerSet controller's module
/// documentation tells both ways).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunnerSetRegistration {
    /// The controller creates a Secret per StatefulSet (`<statefulset>-registration`): the
    /// fallback when this process does not serve the pod admission webhook.
    #[default]
    StatefulSetSecret,
    /// The pod admission webhook served by this process injects the credential, the runner
    /// name and `restartPolicy: Never` into each pod (`hangar run --admission-addr`).
    PodWebhook,
}

/// The annotation (on a RunnerSet or its pod template; on the pods in webhook mode) that makes
/// its runners register with JIT configurations, value [`JIT`].
pub const REGISTRATION_ANNOTATION: &str = "hangar.dev/registration";

/// The value of [`REGISTRATION_ANNOTATION`] selecting JIT configurations.
pub const JIT: &str = "jit";

/// Where a StatefulSet's pod gets its registration credential from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodCredential {
    /// The StatefulSet's own registration Secret, written by the controller.
    Secret {
        /// The Secret's name.
        name: String,
        /// It holds a JIT configuration (else a registration token).
        jit: bool,
        /// The runner a JIT configuration was generated for.
        runner_id: Option<u64>,
    },
    /// The pod admission webhook; `jit` asks it for a JIT configuration per pod.
    Webhook {
        /// Register with a JIT configuration (else a registration token).
        jit: bool,
    },
}

impl PodCredential {
    /// The credential of a new StatefulSet `stateful_set` in `mode`.
    pub fn for_mode(mode: RunnerSetRegistration, stateful_set: &str, jit: bool) -> Self {
        match mode {
            RunnerSetRegistration::StatefulSetSecret => Self::Secret {
                name: registration_secret_name(stateful_set),
                jit,
                runner_id: None,
            },
            RunnerSetRegistration::PodWebhook => Self::Webhook { jit },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_decides_where_the_credential_comes_from() {
        use RunnerSetRegistration::*;
        let cases = [
            (
                StatefulSetSecret,
                false,
                PodCredential::Secret {
                    name: "x-abc-registration".into(),
                    jit: false,
                    runner_id: None,
                },
            ),
            (
                StatefulSetSecret,
                true,
                PodCredential::Secret {
                    name: "x-abc-registration".into(),
                    jit: true,
                    runner_id: None,
                },
            ),
            (PodWebhook, false, PodCredential::Webhook { jit: false }),
            (PodWebhook, true, PodCredential::Webhook { jit: true }),
        ];
        for (mode, jit, want) in cases {
            assert_eq!(
                PodCredential::for_mode(mode, "x-abc", jit),
                want,
                "{mode:?} {jit}"
            );
        }
        assert_eq!(RunnerSetRegistration::default(), StatefulSetSecret);
    }
}
