//! The precise index's own block keys: FNV-1a-64 over the canonical CBOR of each block.
//!
//! Upstream: `pkg/kvcache/kvblock/token_processor.go` (`NewChunkedTokenDatabase`, `getInitHash`,
//! `hash`, `prefixHashes`, `chunkTokens`, `TokensToKVBlockKeys`) and
//! `preciseprefixcache/blockkeys.go::foldCacheSalt`. A key is
//! `FNV-1a-64(CBOR([parent, tokens, extra]))` in `fxamacker/cbor`'s canonical mode: the seed is
//! `FNV-1a-64(hashSeed)`, a model's root is the hash of `[seed, null, model]` (a nil token slice
//! encodes as null), tokens are cut into whole blocks (a trailing partial block is dropped), and
//! `extra` is null or, on block 0 of a salted request, the one-entry list `[{"Hash": salt}]`.
//! Both sides compute keys this way — the request side from the prompt, the event side from a
//! `BlockStored` event's token ids — so they agree whatever the engine's own hash.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64 bits.
#[inline]
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

/// A CBOR head (major type and argument) in its shortest form, as canonical CBOR requires.
#[inline]
fn head(major: u8, value: u64, out: &mut Vec<u8>) {
    let m = major << 5;
    match value {
        0..=23 => out.push(m | value as u8),
        24..=0xff => out.extend_from_slice(&[m | 24, value as u8]),
        0x100..=0xffff => {
            out.push(m | 25);
            out.extend_from_slice(&(value as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(m | 26);
            out.extend_from_slice(&(value as u32).to_be_bytes());
        }
        _ => {
            out.push(m | 27);
            out.extend_from_slice(&value.to_be_bytes());
        }
    }
}

const CBOR_NULL: u8 = 0xf6;

/// The third element of a block's hashed triple.
#[derive(Clone, Copy, Debug)]
enum Extra<'a> {
    /// No extra keys (CBOR null).
    None,
    /// The model name of the root hash (a CBOR text string).
    Model(&'a str),
    /// A cache salt folded into block 0 (`[{"Hash": salt}]`).
    Salt(&'a [u8]),
}

/// The token processor: block size and seed, with an encoding buffer reused across blocks.
#[derive(Clone, Debug)]
pub struct TokenProcessor {
    block_size: usize,
    init_hash: u64,
    scratch: Vec<u8>,
}

impl TokenProcessor {
    /// A processor cutting `block_size`-token blocks (positive) seeded with `hash_seed`.
    pub fn new(block_size: u32, hash_seed: &str) -> TokenProcessor {
        TokenProcessor {
            block_size: block_size.max(1) as usize,
            init_hash: fnv1a(hash_seed.as_bytes()),
            scratch: Vec::new(),
        }
    }

    /// The block size, tokens.
    pub fn block_size(&self) -> u32 {
        self.block_size as u32
    }

    fn hash(&mut self, parent: u64, tokens: Option<&[u32]>, extra: Extra) -> u64 {
        let out = &mut self.scratch;
        out.clear();
        out.push(0x83);
        head(0, parent, out);
        match tokens {
            None => out.push(CBOR_NULL),
            Some(tokens) => {
                head(4, tokens.len() as u64, out);
                for &t in tokens {
                    head(0, u64::from(t), out);
                }
            }
        }
        match extra {
            Extra::None => out.push(CBOR_NULL),
            Extra::Model(model) => {
                head(3, model.len() as u64, out);
                out.extend_from_slice(model.as_bytes());
            }
            Extra::Salt(salt) => {
                // A one-element array of the struct MMHash{Hash}, which CBOR writes as a map.
                out.extend_from_slice(&[0x81, 0xa1, 0x64]);
                out.extend_from_slice(b"Hash");
                head(3, salt.len() as u64, out);
                out.extend_from_slice(salt);
            }
        }
        fnv1a(out)
    }

    /// The root of `model`'s chains (`getInitHash`).
    pub fn root(&mut self, model: &str) -> u64 {
        self.hash(self.init_hash, None, Extra::Model(model))
    }

    /// Append the keys of `tokens`' whole blocks to `out`, chaining from `parent` (the model's
    /// root when `None`); `cache_salt`, when not empty, taints block 0. Returns how many.
    pub fn append_keys(
        &mut self,
        parent: Option<u64>,
        tokens: &[u32],
        model: &str,
        cache_salt: &[u8],
        out: &mut Vec<u64>,
    ) -> usize {
        let blocks = tokens.len() / self.block_size;
        if blocks == 0 {
            return 0;
        }
        let mut prefix = match parent {
            Some(p) => p,
            None => self.root(model),
        };
        for (i, chunk) in tokens.chunks_exact(self.block_size).enumerate() {
            let extra = if i == 0 && !cache_salt.is_empty() { Extra::Salt(cache_salt) } else { Extra::None };
            prefix = self.hash(prefix, Some(chunk), extra);
            out.push(prefix);
        }
        blocks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn a_block_is_hashed_over_its_canonical_cbor_triple() {
        let mut p = TokenProcessor::new(2, "");
        // [7, [1, 300], null]: 0x83, 0x07, 0x82 0x01 0x19 0x01 0x2c, 0xf6.
        let expected = fnv1a(&[0x83, 0x07, 0x82, 0x01, 0x19, 0x01, 0x2c, 0xf6]);
        let mut out = Vec::new();
        assert_eq!(
            p.append_keys(Some(7), &[1, 300, 5], "m", &[], &mut out),
            1,
            "the partial block is dropped"
        );
        assert_eq!(out, vec![expected]);
        // The root of model "m": [FNV(""), null, "m"].
        let mut root = vec![0x83, 0x1b];
        root.extend_from_slice(&FNV_OFFSET.to_be_bytes());
        root.extend_from_slice(&[0xf6, 0x61, b'm']);
        assert_eq!(p.root("m"), fnv1a(&root));
    }
}
