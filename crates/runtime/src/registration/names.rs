//! The names of the objects that carry a runner's registration credential.
//!
//! Contract: pure functions of the owner's name. Controllers create the objects under these
//! names and admission finds them by them, so both take them from here.

/// The name of a Runner's or a StatefulSet's registration Secret.
pub fn registration_secret_name(owner: &str) -> String {
    format!("{owner}-registration")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registration_secret_is_named_after_its_owner() {
        assert_eq!(registration_secret_name("x-abc"), "x-abc-registration");
    }
}
