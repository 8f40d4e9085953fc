//! Block hashes: vLLM's chained hash of each full block of a request's tokens.
//!
//! vLLM 0.15.1 hashes block `i` as `H((parent, tuple(tokens of block i), extra_keys))`, the
//! parent of block 0 being `NONE_HASH`. We use its `sha256_cbor` variant — SHA-256 of the
//! canonical CBOR encoding — with `NONE_HASH = sha256_cbor("0")` (what `PYTHONHASHSEED=0` gives),
//! so hashes (and the KV events that carry them) equal a vLLM configured that way, byte for byte.
//! Extra keys (LoRA, multimodal, cache salt) are not modelled; their slot is CBOR null.
//!
//! The prefix cache itself is keyed by a cheaper chained hash of the same content, a
//! [`BlockKey`]: XXH3-128 of the parent's key and the block's token ids. Two blocks have equal
//! keys exactly when their chains of tokens are equal, except with probability about 2⁻¹²⁸ per
//! pair — the same guarantee vLLM's SHA-256 gives, in practice — so hits are vLLM's. SHA-256 is
//! computed only for the hashes that leave the engine (KV events), and only when they are
//! recorded.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::xxh3_128;

/// A block's identity in the prefix cache: XXH3-128 over its parent's key (little-endian) and
/// its token ids (each 4 bytes, little-endian); the first block's parent key is 0.
pub type BlockKey = u128;

/// A 32-byte block hash.
pub type BlockHash = [u8; 32];

/// `NONE_HASH`: the parent of every request's first block, `sha256(cbor("0"))`.
pub fn none_hash() -> BlockHash {
    Sha256::digest([0x61, 0x30]).into()
}

/// The value vLLM puts in KV events for a hash (with `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`,
/// its default): the last 8 bytes, big-endian.
pub fn event_value(hash: &BlockHash) -> u64 {
    u64::from_be_bytes(hash[24..].try_into().expect("32-byte hashes have a last 8 bytes"))
}

fn cbor_head(major: u8, value: u64, out: &mut Vec<u8>) {
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

/// The hash of a block of `tokens` whose predecessor hashed to `parent`.
pub fn hash_block(parent: &BlockHash, tokens: &[u32], scratch: &mut Vec<u8>) -> BlockHash {
    scratch.clear();
    scratch.push(0x83); // an array of three: parent, tokens, extra keys
    cbor_head(2, 32, scratch); // a byte string of 32
    scratch.extend_from_slice(parent);
    cbor_head(4, tokens.len() as u64, scratch); // an array of the block's tokens
    for &token in tokens {
        cbor_head(0, u64::from(token), scratch);
    }
    scratch.push(0xf6); // null: no extra keys
    Sha256::digest(&scratch[..]).into()
}

/// The key of a block of `tokens` whose predecessor's key is `parent`.
pub fn key_block(parent: BlockKey, tokens: &[u32], scratch: &mut Vec<u8>) -> BlockKey {
    if let Ok(block) = <&[u32; 16]>::try_from(tokens) {
        // vLLM's default block size, on the stack: copies of a known size, inlined.
        let mut bytes = [0u8; 16 + 4 * 16];
        bytes[..16].copy_from_slice(&parent.to_le_bytes());
        for (at, token) in bytes[16..].chunks_exact_mut(4).zip(block) {
            at.copy_from_slice(&token.to_le_bytes());
        }
        return xxh3_128(&bytes);
    }
    scratch.clear();
    scratch.reserve(16 + 4 * tokens.len());
    scratch.extend_from_slice(&parent.to_le_bytes());
    if cfg!(target_endian = "little") {
        // The ids' own bytes are their little-endian bytes: one copy.
        scratch.extend_from_slice(bytemuck::cast_slice(tokens));
    } else {
        for &token in tokens {
            scratch.extend_from_slice(&token.to_le_bytes());
        }
    }
    xxh3_128(scratch)
}

/// Extend `keys` with the keys of every full block of `tokens` not keyed yet.
pub fn extend_keys(keys: &mut Vec<BlockKey>, tokens: &[u32], block_size: usize, scratch: &mut Vec<u8>) {
    extend_keys_of_halves(keys, tokens, &[], block_size, scratch);
}

/// [`extend_keys`] over the tokens `head` then `tail`, held apart (a request's prompt and its
/// outputs so far); a block spanning both is gathered.
pub fn extend_keys_of_halves(
    keys: &mut Vec<BlockKey>,
    head: &[u32],
    tail: &[u32],
    block_size: usize,
    scratch: &mut Vec<u8>,
) {
    let full = (head.len() + tail.len()) / block_size;
    for i in keys.len()..full {
        let (start, end) = (i * block_size, (i + 1) * block_size);
        let parent = if i == 0 { 0 } else { keys[i - 1] };
        let key = if end <= head.len() {
            key_block(parent, &head[start..end], scratch)
        } else if start >= head.len() {
            key_block(parent, &tail[start - head.len()..end - head.len()], scratch)
        } else {
            let spanning: Vec<u32> = head[start..].iter().chain(&tail[..end - head.len()]).copied().collect();
            key_block(parent, &spanning, scratch)
        };
        keys.push(key);
    }
}

/// The keys of every full block of a request's prompt and planned outputs for one block size,
/// made ahead of the request (on the thread that drew its token ids, off the simulation's), so
/// the scheduler copies them instead of hashing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeysAhead {
    block_size: u32,
    keys: Arc<[BlockKey]>,
}

impl KeysAhead {
    /// The keys of `prompt` followed by `output`, in blocks of `block_size` (positive).
    pub fn of(prompt: &[u32], output: &[u32], block_size: u32) -> KeysAhead {
        let mut keys = Vec::with_capacity((prompt.len() + output.len()) / block_size as usize);
        extend_keys_of_halves(&mut keys, prompt, output, block_size as usize, &mut Vec::new());
        KeysAhead { block_size, keys: keys.into() }
    }

    /// The keys, if they were made for `block_size` over `tokens` tokens.
    pub(crate) fn keys_for(&self, block_size: usize, tokens: usize) -> Option<&Arc<[BlockKey]>> {
        (self.block_size as usize == block_size && self.keys.len() == tokens / block_size)
            .then_some(&self.keys)
    }
}

/// Extend `hashes` with the hashes of every full block of `tokens` not hashed yet.
pub fn extend_hashes(hashes: &mut Vec<BlockHash>, tokens: &[u32], block_size: usize, scratch: &mut Vec<u8>) {
    let full = tokens.len() / block_size;
    for i in hashes.len()..full {
        let parent = if i == 0 { none_hash() } else { hashes[i - 1] };
        let hash = hash_block(&parent, &tokens[i * block_size..(i + 1) * block_size], scratch);
        hashes.push(hash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_hash_is_sha256_of_the_cbor_string_zero() {
        let hex: String = none_hash().iter().map(|b| format!("{b:02x}")).collect();
        assert!(hex.starts_with("4e1195df"), "{hex}");
    }

    #[test]
    fn tokens_encode_as_cbor_unsigned_integers() {
        let mut out = Vec::new();
        for (value, bytes) in [
            (0u64, vec![0x00]),
            (23, vec![0x17]),
            (24, vec![0x18, 24]),
            (255, vec![0x18, 0xff]),
            (20_000, vec![0x19, 0x4e, 0x20]),
            (128_255, vec![0x1a, 0x00, 0x01, 0xf4, 0xff]),
        ] {
            out.clear();
            cbor_head(0, value, &mut out);
            assert_eq!(out, bytes, "{value}");
        }
    }

    #[test]
    fn only_full_blocks_are_hashed_and_hashes_chain() {
        let mut scratch = Vec::new();
        let mut hashes = Vec::new();
        let tokens: Vec<u32> = (0..37).collect();
        extend_hashes(&mut hashes, &tokens, 16, &mut scratch);
        assert_eq!(hashes.len(), 2);
        let mut other = Vec::new();
        let mut changed = tokens.clone();
        changed[3] = 99;
        extend_hashes(&mut other, &changed, 16, &mut scratch);
        assert_ne!(hashes[0], other[0]);
        assert_ne!(hashes[1], other[1], "a change in block 0 changes every later hash");
    }

    #[test]
    fn a_key_is_xxh3_128_of_the_parent_key_and_the_token_ids_little_endian() {
        let tokens = [1u32, 0x0102_0304, u32::MAX];
        let parent: BlockKey = 0x0011_2233_4455_6677_8899_aabb_ccdd_eeff;
        let mut bytes = parent.to_le_bytes().to_vec();
        tokens.iter().for_each(|t| bytes.extend_from_slice(&t.to_le_bytes()));
        let mut scratch = vec![7u8; 3];
        assert_eq!(key_block(parent, &tokens, &mut scratch), xxh3_128(&bytes));
        assert_eq!(
            key_block(0, &[], &mut scratch),
            xxh3_128(&[0u8; 16]),
            "an empty block keys its parent alone"
        );
        // A block of vLLM's default size takes the path on the stack, others the buffer: the
        // same bytes.
        for size in [15u32, 16, 17, 32] {
            let block: Vec<u32> = (0..size).map(|i| 0x0101_0101 * i + 7).collect();
            let mut bytes = parent.to_le_bytes().to_vec();
            block.iter().for_each(|t| bytes.extend_from_slice(&t.to_le_bytes()));
            assert_eq!(key_block(parent, &block, &mut scratch), xxh3_128(&bytes), "{size} tokens");
        }
    }

    #[test]
    fn keys_chain_like_hashes_and_only_full_blocks_get_one() {
        let mut scratch = Vec::new();
        let tokens: Vec<u32> = (0..37).collect();
        let mut keys = Vec::new();
        extend_keys(&mut keys, &tokens[..20], 16, &mut scratch);
        assert_eq!(keys.len(), 1);
        extend_keys(&mut keys, &tokens, 16, &mut scratch);
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[1], key_block(keys[0], &tokens[16..32], &mut scratch));
        // The same block after another parent is another block.
        assert_ne!(key_block(0, &tokens[16..32], &mut scratch), keys[1]);
        let mut changed = tokens.clone();
        changed[3] = 99;
        let mut other = Vec::new();
        extend_keys(&mut other, &changed, 16, &mut scratch);
        assert_ne!((keys[0], keys[1]), (other[0], other[1]));
    }
}
