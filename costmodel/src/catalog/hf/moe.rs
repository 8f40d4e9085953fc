//! The mixture-of-experts layout of a `config.json`, read by the family of its field names.
//!
//! Three families name their experts differently, and each field is read only in its own
//! family (a field of another family is refused, never dropped):
//! - Mixtral and Llama 4 (`num_local_experts`): every expert `intermediate_size` wide; Llama 4
//!   (`model_type: llama4_text`) adds one shared expert of the same width, keeps a dense MLP
//!   of `intermediate_size_mlp` on the layers `interleave_moe_layer_step` skips;
//! - Qwen2-MoE and Qwen3-MoE (`num_experts`): experts `moe_intermediate_size` wide, one gated
//!   shared expert of `shared_expert_intermediate_size`, dense layers where
//!   `decoder_sparse_step` skips or `mlp_only_layers` lists;
//! - DeepSeek V2/V3 (`n_routed_experts`): `n_shared_experts` shared experts of
//!   `moe_intermediate_size`, the first `first_k_dense_replace` layers dense, then every
//!   `moe_layer_freq`-th layer MoE.

use blis_contracts::{FieldError, MoeLayout};

use super::HfConfig;

/// The MoE layout and the dense MLP width of `config`'s `num_layers` layers; `None` for a
/// dense model.
pub fn layout(config: &HfConfig, num_layers: u32) -> Result<(Option<MoeLayout>, Option<u32>), FieldError> {
    let families = [
        ("num_local_experts", config.num_local_experts),
        ("num_experts", config.num_experts),
        ("n_routed_experts", config.n_routed_experts),
    ];
    let named: Vec<&(&str, Option<u32>)> =
        families.iter().filter(|(_, v)| v.is_some_and(|n| n > 0)).collect();
    let Some(&&(family, Some(experts))) = named.first() else {
        return dense(config);
    };
    if let Some((other, _)) = named.get(1) {
        return Err(FieldError::new(
            *other,
            experts,
            format!(
                "names the experts a second way besides {family}; one mixture-of-experts family per config"
            ),
        ));
    }
    let per_token = match config.num_experts_per_tok {
        Some(k) if k > 0 && k <= experts => k,
        Some(k) => {
            return Err(FieldError::new(
                "num_experts_per_tok",
                k,
                format!("must be between 1 and the {experts} routed experts"),
            ));
        }
        None => {
            return Err(FieldError::at(
                "num_experts_per_tok",
                "missing: a mixture-of-experts config names it",
            ));
        }
    };
    let positive = |value: Option<u32>, field: &str| match value {
        Some(0) => Err(FieldError::new(field, 0, "must be positive")),
        Some(v) => Ok(v),
        None => Err(FieldError::at(field, "missing from the model config")),
    };
    let intermediate = config.intermediate_size;
    let (expert_width, shared, moe_layers, dense_width) = match family {
        "num_local_experts" => {
            refuse_foreign(config, family, &QWEN_FIELDS)?;
            refuse_foreign(config, family, &DEEPSEEK_FIELDS)?;
            let width = positive(intermediate, "intermediate_size")?;
            let llama4 = config.model_type.as_deref() == Some("llama4_text");
            let step = match config.interleave_moe_layer_step {
                Some(0) => return Err(FieldError::new("interleave_moe_layer_step", 0, "must be positive")),
                Some(step) => step,
                None => 1,
            };
            if !llama4
                && (config.interleave_moe_layer_step.is_some() || config.intermediate_size_mlp.is_some())
            {
                let field = if config.interleave_moe_layer_step.is_some() {
                    "interleave_moe_layer_step"
                } else {
                    "intermediate_size_mlp"
                };
                return Err(FieldError::at(
                    field,
                    "read only for model_type llama4_text (its layout is known); this config's model_type is another",
                ));
            }
            // Llama 4: layer i is MoE when (i + 1) is a multiple of the step.
            let moe_layers = num_layers / step;
            let dense_width = if llama4 {
                Some(positive(config.intermediate_size_mlp.or(intermediate), "intermediate_size_mlp")?)
            } else {
                None
            };
            (width, if llama4 { width } else { 0 }, moe_layers, dense_width)
        }
        "num_experts" => {
            refuse_foreign(config, family, &LLAMA4_FIELDS)?;
            refuse_foreign(config, family, &DEEPSEEK_FIELDS)?;
            let width = positive(config.moe_intermediate_size, "moe_intermediate_size")?;
            let shared = config.shared_expert_intermediate_size.unwrap_or(0);
            let step = match config.decoder_sparse_step {
                Some(0) => return Err(FieldError::new("decoder_sparse_step", 0, "must be positive")),
                Some(step) => step,
                None => 1,
            };
            let only_mlp = config.mlp_only_layers.as_deref().unwrap_or(&[]);
            if let Some(bad) = only_mlp.iter().find(|&&l| l >= num_layers) {
                return Err(FieldError::new(
                    "mlp_only_layers",
                    bad,
                    format!("names a layer beyond the {num_layers}"),
                ));
            }
            // Qwen: layer i is MoE unless listed in mlp_only_layers, and when (i + 1) % step == 0.
            let moe_layers =
                (0..num_layers).filter(|i| !only_mlp.contains(i) && (i + 1) % step == 0).count() as u32;
            let dense_width = if moe_layers < num_layers {
                Some(positive(intermediate, "intermediate_size")?)
            } else {
                None
            };
            (width, shared, moe_layers, dense_width)
        }
        _ => {
            refuse_foreign(config, family, &LLAMA4_FIELDS)?;
            refuse_foreign(config, family, &QWEN_FIELDS)?;
            let width = positive(config.moe_intermediate_size, "moe_intermediate_size")?;
            let shared = config.n_shared_experts.unwrap_or(0).saturating_mul(width);
            let first_dense = config.first_k_dense_replace.unwrap_or(0).min(num_layers);
            let freq = match config.moe_layer_freq {
                Some(0) => return Err(FieldError::new("moe_layer_freq", 0, "must be positive")),
                Some(freq) => freq,
                None => 1,
            };
            // DeepSeek: layer i is MoE when i ≥ first_k_dense_replace and i % moe_layer_freq == 0.
            let moe_layers = (first_dense..num_layers).filter(|i| i % freq == 0).count() as u32;
            let dense_width = if moe_layers < num_layers {
                Some(positive(intermediate, "intermediate_size")?)
            } else {
                None
            };
            (width, shared, moe_layers, dense_width)
        }
    };
    let layout = MoeLayout {
        experts,
        experts_per_token: per_token,
        expert_intermediate_size: expert_width,
        shared_intermediate_size: shared,
        dense_layers: num_layers - moe_layers,
    };
    Ok((Some(layout), dense_width))
}

const LLAMA4_FIELDS: [&str; 2] = ["interleave_moe_layer_step", "intermediate_size_mlp"];
const QWEN_FIELDS: [&str; 3] = ["shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers"];
const DEEPSEEK_FIELDS: [&str; 3] = ["n_shared_experts", "first_k_dense_replace", "moe_layer_freq"];

/// Refuses a field of another MoE family, which this family's layout would not read.
fn refuse_foreign(config: &HfConfig, family: &str, fields: &[&str]) -> Result<(), FieldError> {
    for &field in fields {
        let present = match field {
            "interleave_moe_layer_step" => config.interleave_moe_layer_step.is_some(),
            "intermediate_size_mlp" => config.intermediate_size_mlp.is_some(),
            "shared_expert_intermediate_size" => config.shared_expert_intermediate_size.is_some(),
            "decoder_sparse_step" => config.decoder_sparse_step.is_some(),
            "mlp_only_layers" => config.mlp_only_layers.as_ref().is_some_and(|l| !l.is_empty()),
            "n_shared_experts" => config.n_shared_experts.is_some(),
            "first_k_dense_replace" => config.first_k_dense_replace.is_some(),
            _ => config.moe_layer_freq.is_some(),
        };
        if present {
            return Err(FieldError::at(
                field,
                format!("belongs to another mixture-of-experts family than {family}'s; it would not be read"),
            ));
        }
    }
    Ok(())
}

/// A dense model: refuses expert fields without experts.
fn dense(config: &HfConfig) -> Result<(Option<MoeLayout>, Option<u32>), FieldError> {
    let stray = [
        ("num_experts_per_tok", config.num_experts_per_tok.is_some_and(|k| k > 0)),
        ("moe_intermediate_size", config.moe_intermediate_size.is_some()),
        ("shared_expert_intermediate_size", config.shared_expert_intermediate_size.is_some()),
        ("n_shared_experts", config.n_shared_experts.is_some_and(|n| n > 0)),
    ];
    if let Some((field, _)) = stray.iter().find(|(_, present)| *present) {
        return Err(FieldError::at(
            *field,
            "an expert field without routed experts (num_local_experts, num_experts or n_routed_experts)",
        ));
    }
    Ok((None, None))
}
