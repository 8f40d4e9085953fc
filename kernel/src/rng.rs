//! Named random substreams.
//!
//! Every random draw in a run comes from a [`Substream`] named `(component, purpose, entity)`,
//! e.g. `("client/chat", "arrival", "")` or `("client/chat", "output-tokens", "req-17")`. A
//! substream's state depends only on the run seed and its name, so:
//!
//! - two runs that differ only in configuration give the same request the same inputs (common
//!   random numbers);
//! - adding a new draw, or a new stream, never shifts any other stream.
//!
//! # The seeding rule (fixed; changing it changes every result)
//!
//! The 32-byte ChaCha8 key is SHA-256 of this canonical byte encoding:
//!
//! ```text
//! "blis-actor/substream/v1"            (23 ASCII bytes, the domain tag)
//! seed                                  (u64, little-endian)
//! len(component) component              (u64 little-endian byte length, then UTF-8 bytes)
//! len(purpose)   purpose
//! len(entity)    entity
//! ```
//!
//! The stream is `rand_chacha::ChaCha8Rng::from_seed(key)`. Conversions to floating point are
//! defined here too (not borrowed from `rand`'s distributions), and logarithms come from `libm`,
//! so a draw is the same on every platform and across `rand` releases.

use rand::{Rng, RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};

/// The domain tag that starts every substream's canonical encoding.
pub const DOMAIN_TAG: &[u8; 23] = b"blis-actor/substream/v1";

/// The 32-byte ChaCha key of the substream `(component, purpose, entity)` under `seed`.
pub fn substream_key(seed: u64, component: &str, purpose: &str, entity: &str) -> [u8; 32] {
    substream_key_of_parts(seed, component, purpose, &[entity])
}

/// [`substream_key`] of the entity that is `entity_parts` concatenated, without building it.
fn substream_key_of_parts(seed: u64, component: &str, purpose: &str, entity_parts: &[&str]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(DOMAIN_TAG);
    hasher.update(seed.to_le_bytes());
    for name in [component, purpose] {
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
    }
    let entity_len: usize = entity_parts.iter().map(|part| part.len()).sum();
    hasher.update((entity_len as u64).to_le_bytes());
    for part in entity_parts {
        hasher.update(part.as_bytes());
    }
    hasher.finalize().into()
}

/// The source of all substreams of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streams {
    seed: u64,
}

impl Streams {
    /// The substreams of a run with this seed.
    pub const fn new(seed: u64) -> Streams {
        Streams { seed }
    }

    /// The run seed.
    pub const fn seed(self) -> u64 {
        self.seed
    }

    /// The substream `(component, purpose, entity)`, from its first draw.
    pub fn stream(self, component: &str, purpose: &str, entity: &str) -> Substream {
        self.stream_of_parts(component, purpose, &[entity])
    }

    /// The substream whose entity is `entity_parts` concatenated (the same stream as
    /// [`Streams::stream`] of that entity): names made per request need no string built.
    pub fn stream_of_parts(self, component: &str, purpose: &str, entity_parts: &[&str]) -> Substream {
        Substream {
            rng: ChaCha8Rng::from_seed(substream_key_of_parts(self.seed, component, purpose, entity_parts)),
        }
    }
}

/// The words [`Substream::extend_below`] draws at a time.
const BULK_WORDS: usize = 128;

/// One named stream of random draws.
#[derive(Clone, Debug)]
pub struct Substream {
    rng: ChaCha8Rng,
}

impl Substream {
    /// 64 uniformly random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// Uniform on `[0, 1)`, with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform on `(0, 1]`: safe to take the logarithm of.
    pub fn unit_open_at_zero(&mut self) -> f64 {
        1.0 - self.unit()
    }

    /// Uniform on `0..n` without bias (Lemire's multiply-and-reject). `n` must be positive.
    ///
    /// A draw is accepted when the low half of its product with `n` is at least
    /// `2^64 mod n`; that remainder (a division) is only computed when the low half is below
    /// `n`, since it is always below `n` — the same draws are accepted either way.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Substream::below needs a positive bound");
        let mut product = u128::from(self.next_u64()) * u128::from(n);
        if (product as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (product as u64) < threshold {
                product = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (product >> 64) as u64
    }

    /// `count` draws uniform on `0..n`, appended to `into`, each from one 32-bit word by
    /// Lemire's multiply-and-reject on 32 bits: a word is accepted when the low half of its
    /// product with `n` is at least `2^32 mod n`, and the draw is the high half. The words are
    /// taken [`BULK_WORDS`] at a time, never more than the draws still owed, so the stream
    /// ends where drawing them one at a time would leave it (a prompt's token ids are most of
    /// a client's work, and a 32-bit word is half the stream a 64-bit one costs). `n` must be
    /// positive.
    pub fn extend_below(&mut self, n: u32, count: usize, into: &mut Vec<u32>) {
        assert!(n > 0, "Substream::extend_below needs a positive bound");
        let threshold = n.wrapping_neg() % n;
        into.reserve(count);
        let mut words = [0u32; BULK_WORDS];
        let mut owed = count;
        while owed > 0 {
            let batch = &mut words[..owed.min(BULK_WORDS)];
            // The words `next_u32` would give, in order.
            self.rng.fill(batch);
            // A word is rejected with probability below n / 2^32, so the batch is first taken
            // whole; only a batch with a rejection is taken again, word by word.
            let start = into.len();
            let mut rejected = false;
            into.extend(batch.iter().map(|&word| {
                let product = u64::from(word) * u64::from(n);
                rejected |= (product as u32) < threshold;
                (product >> 32) as u32
            }));
            if rejected {
                into.truncate(start);
                for &word in batch.iter() {
                    let product = u64::from(word) * u64::from(n);
                    if (product as u32) >= threshold {
                        into.push((product >> 32) as u32);
                    }
                }
            }
            owed -= into.len() - start;
        }
    }

    /// Exponentially distributed with the given mean (inverse transform, `libm::log`).
    pub fn exponential(&mut self, mean: f64) -> f64 {
        -libm::log(self.unit_open_at_zero()) * mean
    }

    /// Standard normal (Marsaglia's polar method; the second value of each pair is dropped, so
    /// a draw's count of uniforms depends only on the stream).
    pub fn standard_normal(&mut self) -> f64 {
        loop {
            let u = 2.0 * self.unit() - 1.0;
            let v = 2.0 * self.unit() - 1.0;
            let s = u * u + v * v;
            if s > 0.0 && s < 1.0 {
                return u * libm::sqrt(-2.0 * libm::log(s) / s);
            }
        }
    }

    /// Gamma with the given shape and scale (Marsaglia and Tsang's method; shapes below 1 by
    /// the boost `Gamma(k) = Gamma(k + 1) · U^(1/k)`).
    pub fn gamma(&mut self, shape: f64, scale: f64) -> f64 {
        if shape < 1.0 {
            let boost = libm::pow(self.unit_open_at_zero(), 1.0 / shape);
            return self.gamma(shape + 1.0, scale) * boost;
        }
        let d = shape - 1.0 / 3.0;
        let c = 1.0 / libm::sqrt(9.0 * d);
        loop {
            let x = self.standard_normal();
            let v = 1.0 + c * x;
            if v <= 0.0 {
                continue;
            }
            let v = v * v * v;
            let u = self.unit_open_at_zero();
            if libm::log(u) < 0.5 * x * x + d - d * v + d * libm::log(v) {
                return d * v * scale;
            }
        }
    }

    /// Weibull with the given shape and scale (inverse transform).
    pub fn weibull(&mut self, shape: f64, scale: f64) -> f64 {
        scale * libm::pow(-libm::log(self.unit_open_at_zero()), 1.0 / shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeding_rule_is_fixed() {
        // A change to this value changes every result of every run: it must be deliberate.
        // The key is reproducible outside Rust: Python's hashlib over the documented encoding
        // gives the same digest.
        let key = substream_key(42, "client/chat", "arrival", "");
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let mut stream = Streams::new(42).stream("client/chat", "arrival", "");
        assert_eq!(hex.len(), 64);
        assert_eq!(
            (hex, stream.next_u64()),
            (
                "7ab60a7607449501b9ac6ccaabbd9734198227d73680f02b4620e531a79fc8a2".to_owned(),
                8017763393691023137
            )
        );
    }

    #[test]
    fn a_stream_named_in_parts_is_the_stream_of_the_whole_name() {
        let streams = Streams::new(7);
        let cases: [&[&str]; 4] =
            [&["r-12", "/", "n0", "/", "3"], &["r-12/n0/3"], &["", "r-12/n0", "", "/3"], &[]];
        for parts in cases {
            let whole = parts.concat();
            let mut by_parts = streams.stream_of_parts("client/a", "prompt-tokens", parts);
            let mut by_whole = streams.stream("client/a", "prompt-tokens", &whole);
            assert_eq!(by_parts.next_u64(), by_whole.next_u64(), "{parts:?}");
        }
        // The parts are one entity: moving a boundary between them keeps the stream, moving
        // one into the purpose changes it.
        let mut joined = streams.stream_of_parts("c", "p", &["ab", "c"]);
        let mut moved = streams.stream_of_parts("c", "pab", &["c"]);
        assert_ne!(joined.next_u64(), moved.next_u64());
    }

    #[test]
    fn names_are_encoded_unambiguously() {
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        assert_ne!(substream_key(1, "ab", "c", ""), substream_key(1, "a", "bc", ""));
        assert_ne!(substream_key(1, "a", "", "b"), substream_key(1, "a", "b", ""));
        assert_ne!(substream_key(1, "a", "b", "c"), substream_key(2, "a", "b", "c"));
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut s = Streams::new(7).stream("test", "below", "");
        let mut seen = [0u32; 5];
        for _ in 0..10_000 {
            seen[s.below(5) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| (1_800..2_200).contains(&c)), "{seen:?}");
    }

    #[test]
    fn below_accepts_exactly_the_draws_of_the_plain_multiply_and_reject() {
        // The plain form computes the threshold on every call; the same stream must give the
        // same values and leave the stream in the same place, for small bounds and for bounds
        // that reject often (just above 2^63 about half of all draws are rejected).
        for n in [1, 2, 5, 128_256, 1 << 32, (1 << 63) + 1, u64::MAX] {
            let mut fast = Streams::new(11).stream("test", "below", &n.to_string());
            let mut plain = fast.clone();
            for _ in 0..2_000 {
                let threshold = n.wrapping_neg() % n;
                let expected = loop {
                    let product = u128::from(plain.next_u64()) * u128::from(n);
                    if (product as u64) >= threshold {
                        break (product >> 64) as u64;
                    }
                };
                assert_eq!(fast.below(n), expected, "n = {n}");
            }
            assert_eq!(fast.next_u64(), plain.next_u64(), "n = {n}");
        }
    }

    /// One draw below `n` from one 32-bit word, as [`Substream::extend_below`] defines it.
    fn below_from_one_word(stream: &mut Substream, n: u32) -> u32 {
        loop {
            let product = u64::from(stream.rng.next_u32()) * u64::from(n);
            if (product as u32) >= n.wrapping_neg() % n {
                return (product >> 32) as u32;
            }
        }
    }

    #[test]
    fn extend_below_gives_the_draws_of_one_word_each_one_at_a_time() {
        // Counts across the batch size, from an odd offset into the generator's block; bounds
        // just above 2^31 reject about half of all words, so batches with rejections (which
        // owe words to the next batch) are exercised too.
        for n in [1, 7, 128_256, (1 << 31) + 1, u32::MAX - 1, u32::MAX] {
            for count in [0, 1, 127, 128, 129, 512, 1_000] {
                let mut bulk = Streams::new(5).stream("test", "extend-below", &n.to_string());
                bulk.rng.next_u32();
                let mut single = bulk.clone();
                let mut drawn = vec![9];
                bulk.extend_below(n, count, &mut drawn);
                let expected: Vec<u32> = std::iter::once(9)
                    .chain((0..count).map(|_| below_from_one_word(&mut single, n)))
                    .collect();
                assert_eq!(drawn, expected, "n = {n}, count = {count}");
                assert_eq!(bulk.next_u64(), single.next_u64(), "n = {n}, count = {count}");
            }
        }
    }

    #[test]
    fn extend_below_is_uniform_over_a_small_bound() {
        // 70,000 draws below 7: each value's count within 5 standard deviations of 10,000.
        let mut stream = Streams::new(8).stream("test", "extend-below-uniform", "");
        let mut drawn = Vec::new();
        stream.extend_below(7, 70_000, &mut drawn);
        let mut counts = [0u32; 7];
        for &value in &drawn {
            counts[value as usize] += 1;
        }
        for count in counts {
            assert!(count.abs_diff(10_000) < 5 * 93, "{counts:?}");
        }
    }

    #[test]
    fn unit_draws_stay_in_their_intervals() {
        let mut s = Streams::new(3).stream("test", "unit", "");
        for _ in 0..10_000 {
            let u = s.unit();
            assert!((0.0..1.0).contains(&u));
            let v = s.unit_open_at_zero();
            assert!(v > 0.0 && v <= 1.0);
        }
    }
}
