//! Template hashes: short, stable names for "which version of the template made this".
//!
//! Owners carry the `runner-template-hash` label; a RunnerDeployment creates a new
//! RunnerReplicaSet when its template's hash changes, and owner sync retires owners whose hash
//! differs from the desired one. The hash is FNV-1a (32 bit) over a canonical serialization of
//! the template, written with Kubernetes' "safe" alphabet (no vowels, no look-alike digits) so it
//! never spells words and is valid in names and label values.

/// Kubernetes' `SafeEncodeString` alphabet.
pub(crate) const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// FNV-1a, 32 bit.
pub fn fnv1a32(data: &[u8]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in data {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// Encodes each decimal digit-byte of `s` through the safe alphabet, as Kubernetes does.
fn safe_encode(s: &str) -> String {
    s.bytes()
        .map(|b| ALPHABET[usize::from(b) % ALPHABET.len()] as char)
        .collect()
}

/// The template hash of a canonical serialization (callers serialize with sorted keys).
pub fn template_hash(canonical: &[u8]) -> String {
    safe_encode(&fnv1a32(canonical).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a32_matches_reference_vectors() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn hash_is_stable_safe_and_sensitive() {
        let a = template_hash(br#"{"repository":"o/r"}"#);
        assert_eq!(a, template_hash(br#"{"repository":"o/r"}"#));
        assert_ne!(a, template_hash(br#"{"repository":"o/s"}"#));
        assert!(a.bytes().all(|b| ALPHABET.contains(&b)), "{a}");
        assert!(!a.is_empty() && a.len() <= 10);
    }
}
