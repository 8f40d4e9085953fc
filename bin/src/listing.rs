//! `blis-actor catalog`: the chips, link kinds, models and coefficients a run would use.

use std::fmt::Write;

use blis_costmodel::{CostData, Fact, parameter_summary};

fn fact(f: &Fact, scale: f64, unit: &str) -> String {
    format!("{:.1} {unit} [{}]", f.value / scale, f.rank.as_str())
}

/// The listing: chips with their facts, models with their shapes, registry entries, each with
/// rank and source; then the data hashes.
pub fn render(data: &CostData) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "CHIPS");
    for chip in data.catalog.chips() {
        let _ = writeln!(
            s,
            "  {:<14} BF16 {}  FP8 {}  HBM {} at {}  link {}  PCIe {}",
            chip.name,
            fact(&chip.bf16_dense_flops, 1e12, "TFLOP/s"),
            chip.fp8_dense_flops.as_ref().map_or("-".to_owned(), |f| fact(f, 1e12, "TFLOP/s")),
            fact(&chip.hbm_capacity, (1u64 << 30) as f64, "GiB"),
            fact(&chip.hbm_bandwidth, 1e9, "GB/s"),
            chip.nvlink_bandwidth.as_ref().map_or("-".to_owned(), |f| fact(f, 1e9, "GB/s")),
            chip.pcie_bandwidth.as_ref().map_or("-".to_owned(), |f| fact(f, 1e9, "GB/s")),
        );
        let _ = writeln!(s, "      source (BF16): {}", chip.bf16_dense_flops.source);
    }
    let _ = writeln!(s, "LINKS (the fabric's link kinds, per direction; host memory both ways)");
    for link in data.catalog.links() {
        let capacity =
            link.capacity.as_ref().map_or(String::new(), |c| format!("  capacity {}", fact(c, 1e9, "GB")));
        let _ = writeln!(
            s,
            "  {:<18} {:<11} {}{capacity}",
            link.name,
            link.class.as_str(),
            fact(&link.bandwidth, 1e9, "GB/s")
        );
        let _ = writeln!(s, "      source: {}", link.bandwidth.source);
    }
    let _ = writeln!(s, "MODELS");
    for model in data.catalog.models() {
        let a = &model.architecture;
        let (total, active) = parameter_summary(a);
        let _ = writeln!(
            s,
            "  {:<18} {:>6.2} B params ({:.2} B active), {} layers, {} heads / {} KV heads × {}, {:?} weights, {:?} attention, max len {} [{}]",
            a.name,
            total / 1e9,
            active / 1e9,
            a.num_layers,
            a.num_attention_heads,
            a.num_kv_heads,
            a.head_dim,
            a.weight_dtype,
            a.attention,
            a.max_position_embeddings,
            model.rank.as_str()
        );
        let _ = writeln!(s, "      source: {}", model.source);
        if a.gemm_dtype != a.weight_dtype || a.encoder_params > 0 {
            let _ = writeln!(
                s,
                "      {:?} GEMMs, {:.2} B encoder parameters",
                a.gemm_dtype,
                a.encoder_params as f64 / 1e9
            );
        }
        for note in &model.notes {
            let _ = writeln!(s, "      note: {note}");
        }
    }
    let _ = writeln!(s, "REGISTRY");
    for entry in data.registry.entries() {
        let params: Vec<String> = entry.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            s,
            "  {:<18} {:<14} {:<12} {}{}",
            entry.family.as_str(),
            entry.chip,
            entry.rank.as_str(),
            params.join(" "),
            entry.bundle.as_ref().map_or(String::new(), |b| format!(" (bundle {b})"))
        );
        let _ = writeln!(s, "      source: {}", entry.source);
    }
    let _ = writeln!(s, "catalog sha256 {}", data.catalog_sha256);
    let _ = writeln!(s, "registry sha256 {}", data.registry_sha256);
    s
}
