//! The names of the objects that carry a runner's registration credential.
//!
//! Contract: pure functions of the owner's name. Controllers create the objects under these
//! names and admission finds them by them, so both take them from here.

/// The name of a Runner's or a StatefulSet's registration Secret.
pub fn registration_secret_name(owner: &str) -> String {
    format!("{owner}-registration")
}

/// The name of the only pod of a StatefulSet of one replica (a RunnerSet's runner).
pub fn pod_name(stateful_set: &str) -> String {
    format!("{stateful_set}-0")
}

/// The name of an owner's registration-only placeholder runner.
pub fn placeholder_name(owner: &str) -> String {
    format!("{owner}-registration-only")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_secret_is_named_after_its_owner() {
        assert_eq!(registration_secret_name("x-abc"), "x-abc-registration");
        assert_eq!(pod_name("x-abc"), "x-abc-0");
        assert_eq!(placeholder_name("rd"), "rd-registration-only");
    }
}
