//! A multimodal checkpoint's encoder towers (`vision_config`, `audio_config`), sized for memory.
//!
//! Text requests never run an encoder, so it costs no step time; its weights still sit in GPU
//! memory beside the text model's and shrink the KV cache. A tower is sized as a stack of
//! transformer blocks: per block four `width × width` attention projections and a two-matrix
//! MLP of `intermediate` (a gated MLP's third matrix, the patch embedding and the projector are
//! left out: together under 10% of a tower, and a tower under 10% of a model).

use blis_contracts::FieldError;
use serde::Deserialize;

/// The fields of an encoder tower's config that size it.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct EncoderConfig {
    /// Block width (SigLIP, CLIP, Qwen2.5-VL).
    pub hidden_size: Option<u32>,
    /// Block width (Qwen2-VL, where `hidden_size` is the projector's output).
    pub embed_dim: Option<u32>,
    /// MLP width.
    pub intermediate_size: Option<u32>,
    /// MLP width as a multiple of the block width (Qwen2-VL).
    pub mlp_ratio: Option<f64>,
    /// Blocks.
    pub num_hidden_layers: Option<u32>,
    /// Blocks (Qwen2-VL, Qwen2.5-VL).
    pub depth: Option<u32>,
}

impl EncoderConfig {
    /// The tower's parameters; refuses a tower it cannot size. Paths are relative to the tower.
    pub fn params(&self) -> Result<u64, FieldError> {
        let width = self.embed_dim.or(self.hidden_size).filter(|&w| w > 0).ok_or_else(|| {
            FieldError::at("hidden_size", "missing: the encoder's width sizes its weights in memory")
        })?;
        let layers = self.depth.or(self.num_hidden_layers).ok_or_else(|| {
            FieldError::at("num_hidden_layers", "missing: the encoder's depth sizes its weights in memory")
        })?;
        let intermediate = match (self.intermediate_size, self.mlp_ratio) {
            (Some(i), _) => f64::from(i),
            (None, Some(ratio)) if ratio.is_finite() && ratio > 0.0 && ratio <= 64.0 => {
                ratio * f64::from(width)
            }
            (None, Some(ratio)) => return Err(FieldError::new("mlp_ratio", ratio, "must be in (0, 64]")),
            (None, None) => {
                return Err(FieldError::at(
                    "intermediate_size",
                    "missing (nor mlp_ratio): the encoder's MLP width sizes its weights in memory",
                ));
            }
        };
        let w = f64::from(width);
        Ok((f64::from(layers) * (4.0 * w * w + 2.0 * w * intermediate)) as u64)
    }
}
