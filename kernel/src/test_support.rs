//! What the kernel's data-structure tests share.

/// A small deterministic generator (xorshift64) for data-structure tests, which need varied
/// inputs, not model draws; `seed` must not be zero.
pub(crate) fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}
