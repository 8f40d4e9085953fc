//! `quantization_config`: which weight and GEMM formats a checkpoint's quantization implies.
//!
//! vLLM 0.15.1 runs an FP8 checkpoint's linear layers as FP8 GEMMs when its activations are
//! quantized too (W8A8: `fp8`, `fbgemm_fp8`, `modelopt` FP8, compressed-tensors
//! `float-quantized` with input activations) and dequantizes weight-only FP8 (W8A16) to the
//! compute format; the embedding and output projection stay unquantized either way. Integer and
//! 4-bit schemes are refused: the catalog has no INT8 or FP4 GEMM peaks to price them with.

use std::collections::BTreeMap;

use blis_contracts::{Dtype, FieldError};
use serde::Deserialize;

/// The fields of a `quantization_config` that decide the formats.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct QuantizationConfig {
    /// The method, e.g. `fp8` or `compressed-tensors`.
    pub quant_method: Option<String>,
    /// `fp8`: `dynamic` or `static` activation scales (activations are FP8 either way).
    pub activation_scheme: Option<String>,
    /// `modelopt`: the algorithm, e.g. `FP8`.
    pub quant_algo: Option<String>,
    /// compressed-tensors: the schemes, by group name.
    pub config_groups: Option<BTreeMap<String, CompressedGroup>>,
    /// compressed-tensors: the KV-cache scheme (scales for an FP8 KV cache).
    pub kv_cache_scheme: Option<QuantizationArgs>,
}

/// One compressed-tensors scheme group.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct CompressedGroup {
    /// How the weights are stored.
    pub weights: Option<QuantizationArgs>,
    /// How activations enter the GEMM (absent or null: unquantized).
    pub input_activations: Option<QuantizationArgs>,
}

/// compressed-tensors quantization arguments.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct QuantizationArgs {
    /// Bits per element.
    pub num_bits: Option<u32>,
    /// `float` or `int`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

/// The formats a quantization implies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Formats {
    /// Stored weight format.
    pub weight: Dtype,
    /// GEMM input format.
    pub gemm: Dtype,
}

impl QuantizationConfig {
    /// The weight and GEMM formats of a checkpoint computing in `compute`; notes what is read
    /// but decided elsewhere. Paths are relative to `quantization_config`.
    pub fn formats(&self, compute: Dtype, notes: &mut Vec<String>) -> Result<Formats, FieldError> {
        let w8a8 = Formats { weight: Dtype::Fp8, gemm: Dtype::Fp8 };
        if self.kv_cache_scheme.is_some() {
            notes.push(
                "quantization_config.kv_cache_scheme: the KV cache is stored as the engine's kv_cache_dtype \
                 says (fp8 uses the checkpoint's scales; auto keeps the compute format)"
                    .to_owned(),
            );
        }
        match self.quant_method.as_deref() {
            None => {
                Err(FieldError::at("quant_method", "missing: a quantization_config must name its method"))
            }
            Some("fp8") => match self.activation_scheme.as_deref() {
                None | Some("dynamic" | "static") => Ok(w8a8),
                Some(other) => Err(FieldError::new(
                    "activation_scheme",
                    other,
                    "an fp8 activation scheme vLLM does not know (dynamic or static)",
                )),
            },
            Some("fbgemm_fp8") => Ok(w8a8),
            Some("modelopt") => match self.quant_algo.as_deref() {
                Some("FP8") => Ok(w8a8),
                Some(other) => Err(FieldError::new(
                    "quant_algo",
                    other,
                    "only modelopt FP8 is priced (the catalog has no FP4 or INT4 GEMM peaks)",
                )),
                None => Err(FieldError::at("quant_algo", "missing: modelopt names its algorithm")),
            },
            Some("compressed-tensors") => self.compressed_tensors(compute),
            Some(other) => Err(FieldError::new(
                "quant_method",
                other,
                "a quantization the cost model cannot price (fp8, fbgemm_fp8, modelopt FP8 and FP8 \
                 compressed-tensors are priced; integer and 4-bit schemes have no GEMM peaks in the catalog)",
            )),
        }
    }

    fn compressed_tensors(&self, compute: Dtype) -> Result<Formats, FieldError> {
        let groups = match &self.config_groups {
            Some(groups) if !groups.is_empty() => groups,
            _ => {
                return Err(FieldError::at("config_groups", "missing: compressed-tensors names its schemes"));
            }
        };
        let mut formats: Option<Formats> = None;
        for (name, group) in groups {
            let path = format!("config_groups.{name}");
            let weights = group.weights.as_ref().ok_or_else(|| {
                FieldError::at(format!("{path}.weights"), "missing: the group's weight scheme")
            })?;
            fp8_args(weights, &format!("{path}.weights"))?;
            let gemm = match &group.input_activations {
                None => compute,
                Some(args) => {
                    fp8_args(args, &format!("{path}.input_activations"))?;
                    Dtype::Fp8
                }
            };
            let group_formats = Formats { weight: Dtype::Fp8, gemm };
            if formats.is_some_and(|f| f != group_formats) {
                return Err(FieldError::at(
                    path,
                    "groups that quantize activations differently are not priced (one GEMM format per model)",
                ));
            }
            formats = Some(group_formats);
        }
        Ok(formats.expect("at least one group"))
    }
}

/// Refuses compressed-tensors arguments other than 8-bit float.
fn fp8_args(args: &QuantizationArgs, path: &str) -> Result<(), FieldError> {
    match (args.kind.as_deref(), args.num_bits) {
        (Some("float"), Some(8)) => Ok(()),
        (kind, bits) => Err(FieldError::new(
            path,
            format!("{} bits, type {}", bits.map_or("?".to_owned(), |b| b.to_string()), kind.unwrap_or("?")),
            "only 8-bit float (FP8) compressed-tensors schemes are priced (the catalog has no INT8 or 4-bit GEMM peaks)",
        )),
    }
}
