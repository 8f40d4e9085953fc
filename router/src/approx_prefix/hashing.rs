//! Prefix block hashes of a tokenized prompt, bit-identical to upstream's.
//!
//! Upstream: `requestcontrol/dataproducer/prefixhash/hashing.go` (`GetBlockHashes`,
//! `computeBlockHashes`, `getKVCacheBlocksFromTokens`, `HashBlock.Hash`), which uses
//! `cespare/xxhash/v2` — XXH64 with seed 0 everywhere (`Sum64`, `New`, `Reset`), so its streaming
//! writes equal one XXH64 of the concatenated bytes:
//! - a prompt is cut into consecutive chunks of `b` tokens, the trailing partial chunk kept;
//! - a chunk's content digest is XXH64 of its tokens' 4-byte little-endian bytes;
//! - the chain seed is XXH64(model name bytes ‖ cache salt bytes);
//! - block `i`'s hash is XXH64(LE64(digest_i) ‖ LE64(hash_{i−1})), at most `max_blocks` per prompt.

use xxhash_rust::xxh64::{Xxh64, xxh64};

/// Tokens converted to bytes per streaming write (a stack buffer, so hashing never allocates).
const TOKENS_PER_WRITE: usize = 64;

/// The chain seed: XXH64 of the model name's bytes followed by the cache salt's bytes.
pub fn chain_seed(model: &str, cache_salt: &[u8]) -> u64 {
    let mut h = Xxh64::new(0);
    h.update(model.as_bytes());
    h.update(cache_salt);
    h.digest()
}

/// A chunk's content digest: XXH64 of its tokens as 4-byte little-endian words (0 for no tokens,
/// as upstream's `HashBlock.Hash`).
pub fn block_digest(tokens: &[u32]) -> u64 {
    if tokens.is_empty() {
        return 0;
    }
    let mut bytes = [0u8; TOKENS_PER_WRITE * 4];
    if tokens.len() <= TOKENS_PER_WRITE {
        // The usual block: one-shot XXH64 over its bytes (the same value as streaming them).
        for (slot, token) in bytes.chunks_exact_mut(4).zip(tokens) {
            slot.copy_from_slice(&token.to_le_bytes());
        }
        return xxh64(&bytes[..tokens.len() * 4], 0);
    }
    let mut h = Xxh64::new(0);
    for part in tokens.chunks(TOKENS_PER_WRITE) {
        for (slot, token) in bytes.chunks_exact_mut(4).zip(part) {
            slot.copy_from_slice(&token.to_le_bytes());
        }
        h.update(&bytes[..part.len() * 4]);
    }
    h.digest()
}

/// The next link of the chain: XXH64(LE64(`digest`) ‖ LE64(`previous`)).
pub fn chain_link(digest: u64, previous: u64) -> u64 {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&digest.to_le_bytes());
    bytes[8..].copy_from_slice(&previous.to_le_bytes());
    xxh64(&bytes, 0)
}

/// The chunks a prompt is hashed in: `block_size` tokens each, the trailing partial chunk kept;
/// none for an empty prompt or a zero block size.
pub fn blocks(tokens: &[u32], block_size: usize) -> std::slice::Chunks<'_, u32> {
    let tokens = if block_size == 0 { &[][..] } else { tokens };
    tokens.chunks(block_size.max(1))
}

/// A prompt's block content digests made ahead of routing, off the simulation's thread: valid
/// only for the block size and per-prompt block cap they were made for, which the producer checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptDigests {
    block_size: u32,
    max_blocks: usize,
    digests: Box<[u64]>,
}

impl PromptDigests {
    /// The content digests of `tokens`' first `max_blocks` chunks of `block_size` tokens.
    pub fn of(tokens: &[u32], block_size: u32, max_blocks: usize) -> PromptDigests {
        let digests = blocks(tokens, block_size as usize).take(max_blocks).map(block_digest).collect();
        PromptDigests { block_size, max_blocks, digests }
    }

    /// The digests, if they were made for `block_size` and `max_blocks`.
    pub fn made_for(&self, block_size: u32, max_blocks: usize) -> Option<&[u64]> {
        (self.block_size == block_size && self.max_blocks == max_blocks).then_some(&*self.digests)
    }
}

/// Append one prompt's chained block hashes (at most `max_blocks`) to `out`; returns how many.
pub fn append_block_hashes(
    seed: u64,
    tokens: &[u32],
    block_size: usize,
    max_blocks: usize,
    out: &mut Vec<u64>,
) -> usize {
    append_chain(seed, blocks(tokens, block_size).take(max_blocks).map(block_digest), out)
}

/// Append the chain of `digests` from `seed` to `out`; returns how many links.
pub fn append_chain(seed: u64, digests: impl Iterator<Item = u64>, out: &mut Vec<u64>) -> usize {
    let mut previous = seed;
    let mut count = 0;
    for digest in digests {
        previous = chain_link(digest, previous);
        out.push(previous);
        count += 1;
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(tokens: &[u32], block_size: usize) -> Vec<Vec<u32>> {
        blocks(tokens, block_size).map(<[u32]>::to_vec).collect()
    }

    fn hashes(model: &str, salt: &[u8], tokens: &[u32], block_size: usize) -> Vec<u64> {
        let mut out = Vec::new();
        append_block_hashes(chain_seed(model, salt), tokens, block_size, usize::MAX, &mut out);
        out
    }

    /// The XXH64 reference vectors (seed 0) pin the crate call: empty, short and ≥ 32-byte paths.
    #[test]
    fn xxh64_reference_vectors() {
        assert_eq!(xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"abc", 0), 0x44BC_2CF5_AD77_0999);
        assert_eq!(xxh64(b"Nobody inspects the spammish repetition", 0), 0xFBCE_A83C_8A37_8BF1);
    }

    /// upstream: prefixhash/hashing_test.go::TestGetKVCacheBlocksFromTokens (cases EvenSplit,
    /// TrailingPartialBlock, EmptyTokens, NonPositiveBlockSize)
    #[test]
    fn get_kv_cache_blocks_from_tokens() {
        assert_eq!(collect(&[1, 2, 3, 4, 5, 6, 7, 8], 4), vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8]]);
        assert_eq!(
            collect(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 4),
            vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8], vec![9, 10]]
        );
        assert!(collect(&[], 4).is_empty());
        assert!(collect(&[1, 2, 3], 0).is_empty());
    }

    /// upstream: prefixhash/hashing_test.go::TestKVCacheBlock_Hash (identical tokens hash alike,
    /// different tokens differ, empty blocks hash to 0 alike)
    #[test]
    fn kv_cache_block_hash() {
        assert_eq!(block_digest(&[1, 2]), block_digest(&[1, 2]));
        assert_ne!(block_digest(&[1, 2]), block_digest(&[1, 3]));
        assert_eq!(block_digest(&[]), 0);
    }

    /// Exact values from an independent XXH64 (a from-the-spec Python implementation checked
    /// against the reference vectors): seeds with and without salt, a digest, and whole chains,
    /// the last with 64-token (256-byte) blocks as the default floor makes them. Upstream's tests
    /// assert no hash values, only counts and (in)equalities.
    #[test]
    fn hashes_match_an_independent_implementation() {
        assert_eq!(chain_seed("m", b""), 0xba2e_5670_83a2_b2e8);
        assert_eq!(chain_seed("m", b"salt"), 0xd915_48f6_0ba1_9b9b);
        assert_eq!(block_digest(&[1, 2]), 0xcd3d_4c87_1ee4_183a);
        assert_eq!(hashes("m", b"", &[1, 2, 3, 4], 2), vec![0xbdea_da20_7194_3583, 0x7aac_fb53_1261_b051]);
        assert_eq!(
            hashes("m", b"salt", &[1, 2, 3, 4], 2),
            vec![0x6b0e_68c5_4f9c_eac3, 0xf143_3d4f_f41f_4429]
        );
        assert_eq!(
            hashes("model", b"", &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 4),
            vec![0x2180_99d0_a830_1208, 0xa5b3_3e7f_56eb_f885, 0xa2aa_1c66_66cb_1c34]
        );
        let long: Vec<u32> = (1..=192).collect();
        assert_eq!(
            hashes("test-model", b"", &long, 64),
            vec![0x30dc_65b8_a97d_ceac, 0x2aed_ede5_aa61_b73e, 0x8e59_d93b_9d04_73ff]
        );
    }

    /// A block longer than one stack-buffer write digests as one XXH64 over all its bytes.
    #[test]
    fn long_blocks_digest_as_one_pass() {
        let tokens: Vec<u32> = (0..1000).map(|i| i * 7 + 3).collect();
        let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        assert_eq!(block_digest(&tokens), xxh64(&bytes, 0));
    }

    /// Digests made ahead chain to the same hashes as the prompt, and serve only the block size
    /// and cap they were made for.
    #[test]
    fn digests_made_ahead_chain_as_the_prompt() {
        let tokens: Vec<u32> = (0..150).map(|i| i * 31 + 7).collect();
        let seed = chain_seed("m", b"");
        let ahead = PromptDigests::of(&tokens, 64, 2);
        let digests = ahead.made_for(64, 2).expect("made for 64 tokens, two blocks");
        assert_eq!(digests, [block_digest(&tokens[..64]), block_digest(&tokens[64..128])]);
        let (mut chained, mut hashed) = (vec![], vec![]);
        append_chain(seed, digests.iter().copied(), &mut chained);
        append_block_hashes(seed, &tokens, 64, 2, &mut hashed);
        assert_eq!(chained, hashed);
        assert_eq!(ahead.made_for(32, 2), None);
        assert_eq!(ahead.made_for(64, 3), None);
        let whole = PromptDigests::of(&tokens, 64, usize::MAX);
        assert_eq!(whole.made_for(64, usize::MAX).map(<[u64]>::len), Some(3));
    }

    /// The cap stops each chain after `max_blocks` hashes; a zero cap hashes nothing.
    #[test]
    fn cap_truncates_the_chain() {
        let seed = chain_seed("m", b"");
        let mut out = vec![];
        assert_eq!(append_block_hashes(seed, &[1, 2, 3, 4, 5], 1, 3, &mut out), 3);
        assert_eq!(out, hashes("m", b"", &[1, 2, 3], 1));
        assert_eq!(append_block_hashes(seed, &[1, 2, 3], 1, 0, &mut out), 0);
        assert_eq!(out.len(), 3);
    }
}
