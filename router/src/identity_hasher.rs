//! A hasher that passes a 64-bit key through: the prefix indexes' keys are already hash
//! outputs (XXH64, FNV-1a, SHA-256 tails), so hashing them again only costs time.

use std::hash::Hasher;

/// Hashes a key that is already a hash by identity.
#[derive(Default)]
pub(crate) struct IdentityHasher(u64);

impl Hasher for IdentityHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
