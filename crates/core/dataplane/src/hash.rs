//! The one stable hash of the system: 64-bit FNV-1a. Stable across runs, processes and
//! machines (unlike std's `RandomState`), so what it names or splits agrees everywhere:
//! shared-prefix names (`control::prefix`), flow hashes (`filters::packet::flow_hash`),
//! the `hash` split and `dedup`'s memory of contents. Not a defence against chosen inputs.

const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    fnv1a_extend(OFFSET, bytes)
}

/// FNV-1a of what hashed to `h`, followed by `bytes` (hash pieces without joining them).
pub fn fnv1a_extend(h: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(h, |h, &b| (h ^ b as u64).wrapping_mul(PRIME))
}

/// The hash of nothing, to start [`fnv1a_extend`] from.
pub const FNV1A_EMPTY: u64 = OFFSET;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_and_pieces_agree_with_the_whole() {
        // Reference values of 64-bit FNV-1a.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv1a_extend(fnv1a(b"foo"), b"bar"), fnv1a(b"foobar"));
        assert_eq!(fnv1a_extend(FNV1A_EMPTY, b"x"), fnv1a(b"x"));
    }
}
