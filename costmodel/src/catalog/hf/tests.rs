//! Each `config.json` variant a user brings: priced (the layout written out) or refused by
//! path.

use blis_contracts::{AttentionKind, Dtype, FieldError, MoeLayout};

use super::{HfConfig, ReadModel};

/// A Llama-3.1-8B text model's fields, as JSON object members (no braces).
const LLAMA: &str = r#""model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
    "max_position_embeddings": 131072, "torch_dtype": "bfloat16""#;

fn read(json: &str) -> Result<ReadModel, FieldError> {
    serde_json::from_str::<HfConfig>(json).expect("well-formed JSON").architecture("m")
}

fn refused(json: &str) -> FieldError {
    read(json).expect_err("refused")
}

fn llama_with(extra: &str) -> String {
    format!("{{{LLAMA}, {extra}}}")
}

#[test]
fn a_plain_dense_config_is_read_and_a_missing_field_is_named() {
    let model = read(&format!("{{{LLAMA}}}")).unwrap();
    assert_eq!(model.architecture.head_dim, 128);
    assert_eq!(
        (model.architecture.weight_dtype, model.architecture.gemm_dtype),
        (Dtype::Bfloat16, Dtype::Bfloat16)
    );
    assert!(model.notes.is_empty());
    assert_eq!(refused(r#"{"hidden_size": 8, "torch_dtype": "bfloat16"}"#).path, "num_hidden_layers");
    assert_eq!(refused(r#"{"hidden_size": 8}"#).path, "torch_dtype");
}

#[test]
fn the_newer_dtype_key_is_read_like_torch_dtype() {
    let json = format!("{{{}}}", LLAMA.replace(r#""torch_dtype": "bfloat16""#, r#""dtype": "float16""#));
    assert_eq!(read(&json).unwrap().architecture.compute_dtype, Dtype::Float16);
}

#[test]
fn a_multimodal_wrapper_reads_its_text_model_and_counts_its_vision_tower_in_memory() {
    // Llava-style: the text model under text_config, dtype at the top, a CLIP ViT-L tower.
    let json = format!(
        r#"{{"model_type": "llava", "torch_dtype": "float16", "text_config": {{{}}},
            "vision_config": {{"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24}}}}"#,
        LLAMA.replace(r#", "torch_dtype": "bfloat16""#, "")
    );
    let model = read(&json).unwrap();
    assert_eq!(model.architecture.hidden_size, 4096);
    assert_eq!(model.architecture.compute_dtype, Dtype::Float16);
    // 24 × (4 × 1024² + 2 × 1024 × 4096) = 301,989,888.
    assert_eq!(model.architecture.encoder_params, 301_989_888);
    assert!(
        model.notes[0].starts_with("vision_config: an encoder of about 0.30 B parameters"),
        "{:?}",
        model.notes
    );
    // Qwen2-VL names its width embed_dim and its MLP by a ratio.
    let qwen = format!(
        r#"{{"torch_dtype": "bfloat16", "text_config": {{{LLAMA}}},
            "vision_config": {{"embed_dim": 1280, "hidden_size": 3584, "mlp_ratio": 4, "depth": 32}}}}"#
    );
    assert_eq!(read(&qwen).unwrap().architecture.encoder_params, 32 * (4 * 1280 * 1280 + 2 * 1280 * 5120));
}

#[test]
fn a_wrapper_names_the_text_models_fields_by_their_path() {
    let missing = r#"{"torch_dtype": "bfloat16", "text_config": {"num_hidden_layers": 32}}"#;
    assert_eq!(refused(missing).path, "text_config.hidden_size");
    let disagreeing = format!(r#"{{"hidden_size": 5120, "text_config": {{{LLAMA}}}}}"#);
    let e = refused(&disagreeing);
    assert_eq!(e.path, "hidden_size");
    assert!(e.cause.contains("differs from text_config.hidden_size (4096)"), "{e}");
    let unsized_tower =
        format!(r#"{{"text_config": {{{LLAMA}}}, "vision_config": {{"hidden_size": 1024}}}}"#);
    assert_eq!(refused(&unsized_tower).path, "vision_config.num_hidden_layers");
    let gemma =
        format!(r#"{{"text_config": {{{LLAMA}, "sliding_window": 1024, "sliding_window_pattern": 6}}}}"#);
    assert_eq!(refused(&gemma).path, "text_config.sliding_window_pattern");
}

#[test]
fn fp8_checkpoints_run_fp8_gemms_when_activations_are_fp8_and_dequantize_otherwise() {
    let w8a8 = [
        r#""quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}"#,
        r#""quantization_config": {"quant_method": "fbgemm_fp8"}"#,
        r#""quantization_config": {"quant_method": "modelopt", "quant_algo": "FP8"}"#,
        r#""quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized",
            "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
                "input_activations": {"num_bits": 8, "type": "float", "dynamic": true}, "targets": ["Linear"]}},
            "ignore": ["lm_head"]}"#,
    ];
    for quantization in w8a8 {
        let model = read(&llama_with(quantization)).unwrap().architecture;
        assert_eq!(
            (model.weight_dtype, model.gemm_dtype, model.compute_dtype),
            (Dtype::Fp8, Dtype::Fp8, Dtype::Bfloat16)
        );
    }
    let w8a16 = r#""quantization_config": {"quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "float"}, "input_activations": null}}}"#;
    let model = read(&llama_with(w8a16)).unwrap().architecture;
    assert_eq!((model.weight_dtype, model.gemm_dtype), (Dtype::Fp8, Dtype::Bfloat16));
}

#[test]
fn a_kv_cache_scheme_is_noted_as_the_engines_decision() {
    let json = llama_with(
        r#""quantization_config": {"quant_method": "compressed-tensors",
            "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}, "input_activations": {"num_bits": 8, "type": "float"}}},
            "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor"}}"#,
    );
    let model = read(&json).unwrap();
    assert!(model.notes.iter().any(|n| n.starts_with(
        "quantization_config.kv_cache_scheme: the KV cache is stored as the engine's kv_cache_dtype"
    )));
}

#[test]
fn integer_and_4_bit_quantizations_are_refused_by_path() {
    let int8 = llama_with(
        r#""quantization_config": {"quant_method": "compressed-tensors",
            "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "int"}, "input_activations": {"num_bits": 8, "type": "int"}}}}"#,
    );
    let e = refused(&int8);
    assert_eq!(e.path, "quantization_config.config_groups.group_0.weights");
    assert_eq!(e.value.as_deref(), Some("8 bits, type int"));
    for method in ["awq", "gptq", "bitsandbytes", "mxfp4"] {
        let e = refused(&llama_with(&format!(
            r#""quantization_config": {{"quant_method": "{method}", "bits": 4}}"#
        )));
        assert_eq!((e.path.as_str(), e.value.as_deref()), ("quantization_config.quant_method", Some(method)));
    }
    let nvfp4 =
        refused(&llama_with(r#""quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}"#));
    assert_eq!(nvfp4.path, "quantization_config.quant_algo");
}

/// A MoE text model: `fields` replace the Llama MLP.
fn moe(fields: &str) -> Result<ReadModel, FieldError> {
    read(&format!(
        r#"{{"num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 16, "vocab_size": 151936,
            "max_position_embeddings": 8192, "torch_dtype": "bfloat16", {fields}}}"#
    ))
}

#[test]
fn qwen2_moe_keeps_its_shared_expert_and_its_dense_layers() {
    // Qwen1.5-MoE-A2.7B: 60 experts of 1408, top 4, one shared expert of 5632.
    let qwen = r#""model_type": "qwen2_moe", "intermediate_size": 5632, "num_experts": 60, "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1"#;
    let layout = moe(qwen).unwrap().architecture.moe;
    let expected = MoeLayout {
        experts: 60,
        experts_per_token: 4,
        expert_intermediate_size: 1408,
        shared_intermediate_size: 5632,
        dense_layers: 0,
    };
    assert_eq!(layout, Some(expected));
    let with_dense = moe(&format!(r#"{qwen}, "mlp_only_layers": [0, 5]"#)).unwrap().architecture;
    assert_eq!(with_dense.moe.unwrap().dense_layers, 2);
    assert_eq!(with_dense.intermediate_size, 5632);
    // Every other layer MoE: layers 1, 3, …, 23.
    let sparse = moe(&qwen.replace(r#""decoder_sparse_step": 1"#, r#""decoder_sparse_step": 2"#)).unwrap();
    assert_eq!(sparse.architecture.moe.unwrap().dense_layers, 12);
}

#[test]
fn deepseek_layouts_count_their_shared_experts_and_leading_dense_layers() {
    // DeepSeek-V2-Lite: 64 experts of 1408, top 6, two shared, the first layer dense (10944).
    let deepseek = r#""model_type": "deepseek_v2", "intermediate_size": 10944, "n_routed_experts": 64,
        "num_experts_per_tok": 6, "moe_intermediate_size": 1408, "n_shared_experts": 2,
        "first_k_dense_replace": 1, "moe_layer_freq": 1"#;
    let model = moe(deepseek).unwrap().architecture;
    assert_eq!(
        model.moe,
        Some(MoeLayout {
            experts: 64,
            experts_per_token: 6,
            expert_intermediate_size: 1408,
            shared_intermediate_size: 2816,
            dense_layers: 1,
        })
    );
    assert_eq!(model.intermediate_size, 10944);
}

#[test]
fn llama4_interleaves_dense_and_moe_layers_with_a_shared_expert() {
    // Llama-4-Maverick's text model (without its chunked attention): 128 experts, top 1,
    // every second layer MoE, dense layers 16384 wide.
    let llama4 = r#""model_type": "llama4_text", "intermediate_size": 8192, "intermediate_size_mlp": 16384,
        "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2"#;
    let model = moe(llama4).unwrap().architecture;
    assert_eq!(
        model.moe,
        Some(MoeLayout {
            experts: 128,
            experts_per_token: 1,
            expert_intermediate_size: 8192,
            shared_intermediate_size: 8192,
            dense_layers: 12,
        })
    );
    assert_eq!(model.intermediate_size, 16384);
    let chunked = moe(&format!(r#"{llama4}, "attention_chunk_size": 8192"#)).unwrap_err();
    assert_eq!(chunked.path, "attention_chunk_size");
}

#[test]
fn mixtral_reads_its_experts_and_refuses_fields_of_another_family() {
    let mixtral = r#""intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2"#;
    let layout = moe(mixtral).unwrap().architecture.moe.unwrap();
    assert_eq!((layout.experts, layout.shared_intermediate_size, layout.dense_layers), (8, 0, 0));
    let shared = moe(&format!(r#"{mixtral}, "shared_expert_intermediate_size": 5632"#)).unwrap_err();
    assert_eq!(shared.path, "shared_expert_intermediate_size");
    let not_llama4 = moe(&format!(r#"{mixtral}, "interleave_moe_layer_step": 2"#)).unwrap_err();
    assert_eq!(not_llama4.path, "interleave_moe_layer_step");
    let twice = moe(&format!(r#"{mixtral}, "num_experts": 8"#)).unwrap_err();
    assert_eq!(twice.path, "num_experts");
    let too_many =
        moe(&mixtral.replace(r#""num_experts_per_tok": 2"#, r#""num_experts_per_tok": 9"#)).unwrap_err();
    assert_eq!(too_many.path, "num_experts_per_tok");
    let stray = moe(r#""intermediate_size": 14336, "moe_intermediate_size": 1408"#).unwrap_err();
    assert_eq!(stray.path, "moe_intermediate_size");
}

#[test]
fn attention_of_one_kind_is_read_and_mixed_kinds_are_refused_by_name() {
    let full = "full_attention";
    let all_full = format!(
        r#""layer_types": [{}], "use_sliding_window": false, "sliding_window": null"#,
        vec![format!("\"{full}\""); 32].join(", ")
    );
    assert_eq!(read(&llama_with(&all_full)).unwrap().architecture.attention, AttentionKind::Full);
    let qwen2 = r#""sliding_window": 131072, "use_sliding_window": false, "max_window_layers": 28"#;
    assert_eq!(read(&llama_with(qwen2)).unwrap().architecture.attention, AttentionKind::Full);
    let mistral = r#""sliding_window": 4096"#;
    assert_eq!(
        read(&llama_with(mistral)).unwrap().architecture.attention,
        AttentionKind::SlidingWindow { window: 4096 }
    );
    let mut kinds = vec![format!("\"{full}\""); 32];
    kinds[0] = "\"sliding_attention\"".into();
    let mixed =
        refused(&llama_with(&format!(r#""sliding_window": 512, "layer_types": [{}]"#, kinds.join(", "))));
    assert_eq!(
        (mixed.path.as_str(), mixed.value.as_deref()),
        ("layer_types", Some("1 sliding of 32 layers"))
    );
    kinds[3] = "\"linear_attention\"".into();
    let linear = refused(&llama_with(&format!(r#""layer_types": [{}]"#, kinds.join(", "))));
    assert_eq!(linear.path, "layer_types[3]");
    let partly = refused(&llama_with(
        r#""sliding_window": 4096, "use_sliding_window": true, "max_window_layers": 28"#,
    ));
    assert_eq!(partly.path, "max_window_layers");
    let mllama = refused(&llama_with(r#""cross_attention_layers": [3, 8, 13]"#));
    assert_eq!(mllama.path, "cross_attention_layers");
}
