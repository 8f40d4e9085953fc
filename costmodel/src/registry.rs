//! The coefficient registry: what each primitive costs beyond the datasheet roofline.
//!
//! Every entry belongs to a [`Family`] (GEMMs, prefill attention, paged decode attention, logits,
//! tensor-parallel all-reduce, MoE dispatch, host work, kernel launches, memory overheads), names
//! the chip it applies to (`"*"` for all), and carries its [`Rank`], its source, optionally the
//! range it was fitted on (outside it the entry ranks as `transferred`) and the bundle it was
//! fitted with. For every family a `"*"` entry exists (the roofline, or an assumption where a
//! roofline has nothing to say), so a lookup never refuses; it only lowers the trust.
//!
//! A lookup for one chip first picks a bundle: of the bundles with entries for that chip, the one
//! whose best entry is most trusted. Families the bundle covers come from it; the others from
//! unbundled entries, most trusted first (chip-specific before `"*"` at equal rank). Terms from
//! two different fits are therefore never mixed. Two entries for one family, chip, rank and
//! bundle are ambiguous and refused.

use std::collections::BTreeMap;
use std::fmt;

use blis_contracts::{FieldError, Rank, number, yaml};
use serde::{Deserialize, Serialize};

/// The primitive families the registry prices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Linear layers (projections, MLP, experts): efficiency by token count, and of memory.
    Gemm,
    /// Causal attention over a prompt chunk and its cached context.
    PrefillAttention,
    /// Paged attention of decoding tokens over their cached context.
    DecodeAttention,
    /// The output projection, for sampled tokens only.
    Logits,
    /// Tensor-parallel all-reduce: a latency floor and a bus efficiency, per TP degree.
    AllReduce,
    /// Routing tokens to experts (top-k, permutation) per MoE layer.
    MoeDispatch,
    /// CPU work of the serving engine per step, per request and per sampled token.
    Host,
    /// Kernel launches: per layer when eager, one replay per step under CUDA graphs.
    Launch,
    /// Memory outside the framework's allocator (CUDA context, communication buffers).
    Memory,
    /// The API server in front of the engine: what a request costs before the scheduler sees it
    /// (HTTP, tokenization) and its first token after (detokenization, the first SSE event).
    Frontend,
}

impl Family {
    /// Every family.
    pub const ALL: [Family; 10] = [
        Family::Gemm,
        Family::PrefillAttention,
        Family::DecodeAttention,
        Family::Logits,
        Family::AllReduce,
        Family::MoeDispatch,
        Family::Host,
        Family::Launch,
        Family::Memory,
        Family::Frontend,
    ];

    /// The parameters an entry of this family must give, each with what it means.
    pub fn parameters(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Family::Gemm | Family::Logits => &[
                ("compute_efficiency", "share of the dense peak reached by large GEMMs, (0, 1]"),
                (
                    "half_efficiency_tokens",
                    "tokens at which half of that share is reached (efficiency × T/(T + this))",
                ),
                ("memory_efficiency", "share of HBM bandwidth reached streaming weights, (0, 1]"),
            ],
            Family::PrefillAttention | Family::DecodeAttention => &[
                ("compute_efficiency", "share of the dense peak reached, (0, 1]"),
                ("memory_efficiency", "share of HBM bandwidth reached reading and writing KV, (0, 1]"),
            ],
            Family::AllReduce => &[
                ("latency_us_tp2", "time of a tiny all-reduce over 2 GPUs, µs"),
                ("latency_us_tp4", "time of a tiny all-reduce over 4 GPUs, µs"),
                ("latency_us_tp8", "time of a tiny all-reduce over 8 GPUs, µs"),
                ("efficiency_tp2", "bus bandwidth reached over 2 GPUs, share of the link, (0, 1]"),
                ("efficiency_tp4", "bus bandwidth reached over 4 GPUs, share of the link, (0, 1]"),
                ("efficiency_tp8", "bus bandwidth reached over 8 GPUs, share of the link, (0, 1]"),
            ],
            Family::MoeDispatch => &[
                ("latency_us", "routing and permutation per MoE layer per step, µs"),
                ("token_us", "routing, sorting and permutation per token per MoE layer, µs"),
            ],
            Family::Host => &[
                ("step_us", "CPU time per step (scheduling, input preparation, output processing), µs"),
                (
                    "step_us_per_peer",
                    "CPU time per step per tensor-parallel worker beyond the first (the executor hands each worker process the step), µs",
                ),
                ("request_us", "CPU time per scheduled request per step, µs"),
                ("sampled_token_us", "CPU time per sampled token, µs"),
            ],
            Family::Launch => &[
                ("eager_layer_us", "kernel-launch time per layer per step without CUDA graphs, µs"),
                ("graph_step_us", "time to replay one CUDA graph per step, µs"),
                (
                    "piecewise_layer_us",
                    "launch time per layer of the attention left eager between piecewise graphs, µs",
                ),
            ],
            Family::Memory => &[
                ("non_torch_bytes", "memory outside the allocator on each GPU, bytes"),
                ("non_torch_bytes_per_peer", "extra per tensor-parallel peer (communication buffers), bytes"),
            ],
            Family::Frontend => &[
                ("request_us", "API-server time per request before the engine sees it, µs"),
                ("prompt_token_us", "and per prompt token (tokenization), µs"),
            ],
        }
    }

    /// The family's name in documents.
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Gemm => "gemm",
            Family::PrefillAttention => "prefill_attention",
            Family::DecodeAttention => "decode_attention",
            Family::Logits => "logits",
            Family::AllReduce => "all_reduce",
            Family::MoeDispatch => "moe_dispatch",
            Family::Host => "host",
            Family::Launch => "launch",
            Family::Memory => "memory",
            Family::Frontend => "frontend",
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a fitted entry was fitted; outside it the entry ranks as `transferred`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitRange {
    /// Tokens per step covered, inclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<[u64; 2]>,
    /// Tensor-parallel degrees covered, inclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_parallel: Option<[u32; 2]>,
    /// Catalog models the fit's data came from (a run serving another model lies outside the
    /// validated domain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
}

/// One registry entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The family.
    pub family: Family,
    /// The chip it applies to, or `"*"` for every chip.
    pub chip: String,
    /// How much it is trusted.
    pub rank: Rank,
    /// Where it comes from.
    pub source: String,
    /// The fit it belongs to, if it was fitted with others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    /// The range it was fitted on, if fitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<FitRange>,
    /// The family's parameters.
    pub params: BTreeMap<String, f64>,
}

impl Entry {
    /// The parameter `name` (present: checked at load).
    pub fn param(&self, name: &str) -> f64 {
        self.params[name]
    }

    /// The rank this entry prices with for a step of `tokens` tokens.
    pub fn rank_for_tokens(&self, tokens: u64) -> Rank {
        match self.range.as_ref().and_then(|r| r.tokens) {
            Some([lo, hi]) if !(lo..=hi).contains(&tokens) && self.rank < Rank::Transferred => {
                Rank::Transferred
            }
            _ => self.rank,
        }
    }

    /// The rank this entry prices with at tensor-parallel degree `tp`.
    pub fn rank_for_tensor_parallel(&self, tp: u32) -> Rank {
        match self.range.as_ref().and_then(|r| r.tensor_parallel) {
            Some([lo, hi]) if !(lo..=hi).contains(&tp) && self.rank < Rank::Transferred => Rank::Transferred,
            _ => self.rank,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegistryFile {
    entries: Vec<Entry>,
    #[serde(default)]
    uncertainty: Vec<CoefficientSample>,
}

/// One alternative set of a fitted bundle's parameters (e.g. a fit leaving one experiment
/// out), so a run can show how much a figure moves across the fit's uncertainty.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CoefficientSample {
    /// The bundle it replaces parameters of.
    pub bundle: String,
    /// What the sample is (which experiment was left out, say).
    pub label: String,
    /// `family.parameter` → value, for the parameters that differ from the bundle's.
    pub params: BTreeMap<String, f64>,
}

/// The embedded registry.
pub const EMBEDDED_REGISTRY: &str = include_str!("../data/registry.yaml");

/// All coefficient entries of a run, and the uncertainty samples of fitted bundles.
#[derive(Clone, Debug, PartialEq)]
pub struct Registry {
    entries: Vec<Entry>,
    uncertainty: Vec<CoefficientSample>,
}

impl Registry {
    /// The registry compiled into this binary.
    pub fn embedded() -> Registry {
        Registry::parse(EMBEDDED_REGISTRY).expect("the embedded registry is valid (checked by its tests)")
    }

    /// A registry from its YAML text; refuses unknown families or parameters, out-of-range
    /// values, missing `"*"` entries and ambiguous entries, naming the entries.
    pub fn parse(text: &str) -> Result<Registry, FieldError> {
        let file: RegistryFile = yaml::from_str(text)?;
        Registry::from_entries(file.entries)?.with_uncertainty(file.uncertainty)
    }

    /// The registry as YAML, as [`Registry::parse`] reads it.
    pub fn to_yaml(&self) -> String {
        #[derive(Serialize)]
        struct File<'a> {
            entries: &'a [Entry],
            #[serde(skip_serializing_if = "<[CoefficientSample]>::is_empty")]
            uncertainty: &'a [CoefficientSample],
        }
        yaml::to_string(&File { entries: &self.entries, uncertainty: &self.uncertainty })
            .expect("a registry serialises")
    }

    /// The same registry with its uncertainty samples replaced.
    pub fn with_uncertainty(&self, samples: Vec<CoefficientSample>) -> Result<Registry, FieldError> {
        for (i, sample) in samples.iter().enumerate() {
            self.applied(sample).map_err(|e| e.within(&format!("uncertainty[{i}]")))?;
        }
        Ok(Registry { entries: self.entries.clone(), uncertainty: samples })
    }

    /// The registry without the entries and samples of `bundle`.
    pub fn without_bundle(&self, bundle: &str) -> Registry {
        Registry {
            entries: self.entries.iter().filter(|e| e.bundle.as_deref() != Some(bundle)).cloned().collect(),
            uncertainty: self.uncertainty.iter().filter(|s| s.bundle != bundle).cloned().collect(),
        }
    }

    /// The uncertainty samples.
    pub fn uncertainty(&self) -> &[CoefficientSample] {
        &self.uncertainty
    }

    /// The registry with sample `sample`'s parameters put into its bundle (and no samples).
    pub fn with_sample(&self, sample: &CoefficientSample) -> Result<Registry, FieldError> {
        self.applied(sample)
    }

    /// The entries with `sample`'s parameters put into its bundle (no samples), refusing names
    /// that do not exist and values out of range.
    fn applied(&self, sample: &CoefficientSample) -> Result<Registry, FieldError> {
        let mut changed = self.clone();
        for (name, value) in &sample.params {
            let (family, param) = name.split_once('.').unwrap_or((name, ""));
            let entry = changed
                .entries
                .iter_mut()
                .find(|e| {
                    e.bundle.as_deref() == Some(&sample.bundle)
                        && e.family.as_str() == family
                        && e.params.contains_key(param)
                })
                .ok_or_else(|| {
                    FieldError::new(
                        format!("params.{name}"),
                        value,
                        format!("no entry of bundle {} has it", sample.bundle),
                    )
                })?;
            entry.params.insert(param.to_owned(), *value);
        }
        Registry::from_entries(changed.entries)
    }

    /// A registry from entries, checked as [`Registry::parse`] checks them (each parameter
    /// within its physical bound, [`parameter_bound`]).
    pub fn from_entries(entries: Vec<Entry>) -> Result<Registry, FieldError> {
        for (i, entry) in entries.iter().enumerate() {
            let path = format!("entries[{i}]");
            let expected = entry.family.parameters();
            for name in entry.params.keys() {
                if !expected.iter().any(|(p, _)| p == name) {
                    let known: Vec<&str> = expected.iter().map(|(p, _)| *p).collect();
                    return Err(FieldError::new(
                        format!("{path}.params.{name}"),
                        entry.params[name],
                        format!("not a parameter of {} (its parameters: {})", entry.family, known.join(", ")),
                    ));
                }
            }
            for (name, _) in expected {
                let value = *entry.params.get(*name).ok_or_else(|| {
                    FieldError::at(format!("{path}.params"), format!("{} needs `{name}`", entry.family))
                })?;
                if let Some(cause) = parameter_bound(name, value) {
                    return Err(FieldError::new(format!("{path}.params.{name}"), number(value), cause));
                }
            }
            if let Some(j) = entries[..i].iter().position(|other| {
                other.family == entry.family
                    && other.chip == entry.chip
                    && other.rank == entry.rank
                    && other.bundle == entry.bundle
            }) {
                return Err(FieldError::new(
                    path,
                    format!("{} {} {}", entry.family, entry.chip, entry.rank.as_str()),
                    format!(
                        "ambiguous: entries[{j}] ({:?}) and this entry ({:?}) give the same family, chip and rank",
                        entries[j].source, entry.source
                    ),
                ));
            }
        }
        for family in Family::ALL {
            if !entries.iter().any(|e| e.family == family && e.chip == "*" && e.bundle.is_none()) {
                return Err(FieldError::at(
                    "entries",
                    format!(
                        "no unbundled `*` entry for {family}: a lookup on some chip would have nothing to fall back to"
                    ),
                ));
            }
        }
        Ok(Registry { entries, uncertainty: Vec::new() })
    }

    /// Every entry, in file order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entries that price `chip`, one per family (see the module documentation).
    pub fn resolve(&self, chip: &str) -> Resolved {
        let applies = |e: &&Entry| e.chip == chip || e.chip == "*";
        // The bundle whose best entry for this chip is most trusted (ties: name order).
        let bundle = self
            .entries
            .iter()
            .filter(applies)
            .filter_map(|e| e.bundle.as_ref().map(|b| (e.rank, b)))
            .min()
            .map(|(_, b)| b.clone());
        let pick = |family: Family| -> Entry {
            let from_bundle = bundle.as_ref().and_then(|b| {
                self.entries
                    .iter()
                    .filter(applies)
                    .filter(|e| e.family == family && e.bundle.as_ref() == Some(b))
                    .min_by_key(|e| (e.rank, e.chip == "*"))
            });
            from_bundle
                .or_else(|| {
                    self.entries
                        .iter()
                        .filter(applies)
                        .filter(|e| e.family == family && e.bundle.is_none())
                        .min_by_key(|e| (e.rank, e.chip == "*"))
                })
                .cloned()
                .expect("every family has an unbundled `*` entry (checked at load)")
        };
        Resolved { entries: Family::ALL.map(pick) }
    }

    /// The registry with the entries `keep` accepts (for tests of fallback).
    pub fn retain(&self, keep: impl Fn(&Entry) -> bool) -> Result<Registry, FieldError> {
        Registry::from_entries(self.entries.iter().filter(|e| keep(e)).cloned().collect())
    }
}

/// The entry chosen for each family, for one chip.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    entries: [Entry; 10],
}

impl Resolved {
    /// The entry of `family`.
    pub fn get(&self, family: Family) -> &Entry {
        &self.entries[Family::ALL.iter().position(|f| *f == family).expect("ALL lists every family")]
    }

    /// The entries, in [`Family::ALL`] order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }
}

/// A share of a peak no working kernel falls below: under a thousandth of the datasheet.
const LEAST_SHARE: f64 = 1e-3;
/// The longest time any one parameter may price, µs: no per-step, per-layer, per-request or
/// per-token cost of a serving engine comes near a second.
const LONGEST_US: f64 = 1e6;
/// The most bytes a memory parameter may take: 1 TiB, more than any GPU holds today.
const MOST_BYTES: f64 = (1u64 << 40) as f64;
/// The most tokens a half-efficiency point may sit at: more than any step batches.
const MOST_TOKENS: f64 = (1u64 << 20) as f64;

/// Why `value` is out of bounds for the parameter `name`, by what the name measures (a share of
/// a peak, µs, bytes or tokens), or `None` when it is within them. Tiny shares and huge times are
/// refused so that no registry can price a step beyond the simulated clock's range.
fn parameter_bound(name: &str, value: f64) -> Option<String> {
    if !value.is_finite() {
        return Some("must be a finite number".to_owned());
    }
    if name.ends_with("_efficiency") || name.starts_with("efficiency_") {
        return (!(LEAST_SHARE..=1.0).contains(&value))
            .then(|| format!("must be in [{LEAST_SHARE}, 1]: a share of the peak a working kernel reaches"));
    }
    let (most, unit) = parameter_unit(name)?;
    (!(0.0..=most).contains(&value))
        .then(|| format!("must be a non-negative number of at most {most} {unit}"))
}

/// The bound and unit of a parameter that is not a share, by what its name measures.
fn parameter_unit(name: &str) -> Option<(f64, &'static str)> {
    if name.contains("_us") {
        Some((
            LONGEST_US,
            "µs (one second: no step, layer, request or token cost of an engine comes near it)",
        ))
    } else if name.contains("bytes") {
        Some((MOST_BYTES, "bytes (1 TiB: more than any GPU holds today)"))
    } else if name.ends_with("_tokens") {
        Some((MOST_TOKENS, "tokens (more than any step batches)"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(family: Family, chip: &str, rank: Rank, bundle: Option<&str>) -> Entry {
        Entry {
            family,
            chip: chip.to_owned(),
            rank,
            source: format!("{family} {chip} {rank:?}"),
            bundle: bundle.map(str::to_owned),
            range: None,
            params: family.parameters().iter().map(|(p, _)| ((*p).to_owned(), 0.5)).collect(),
        }
    }

    fn base() -> Vec<Entry> {
        Family::ALL.iter().map(|&f| entry(f, "*", Rank::Roofline, None)).collect()
    }

    /// The base entries with `family`'s `param` set to `value` are refused naming it, the cause
    /// containing `cause`.
    fn entries_with(family: Family, param: &str, value: f64, cause: &str) {
        let mut entries = base();
        let at = entries.iter().position(|e| e.family == family).unwrap();
        entries[at].params.insert(param.to_owned(), value);
        let error = Registry::from_entries(entries).unwrap_err();
        assert!(error.path.ends_with(&format!("entries[{at}].params.{param}")), "{}", error.path);
        assert!(error.cause.contains(cause), "{}", error.cause);
    }

    #[test]
    fn the_embedded_registry_loads_and_covers_every_family_for_every_chip() {
        let registry = Registry::embedded();
        for chip in ["H100-SXM", "A100-80GB-SXM", "MI300X", "no-such-chip"] {
            let resolved = registry.resolve(chip);
            for family in Family::ALL {
                assert_eq!(resolved.get(family).family, family);
            }
        }
    }

    #[test]
    fn the_most_trusted_entry_wins_and_chip_specific_breaks_ties() {
        let mut entries = base();
        entries.push(entry(Family::Gemm, "H100-SXM", Rank::Literature, None));
        entries.push(entry(Family::Gemm, "*", Rank::Literature, None));
        let registry = Registry::from_entries(entries).unwrap();
        assert_eq!(registry.resolve("H100-SXM").get(Family::Gemm).chip, "H100-SXM");
        assert_eq!(registry.resolve("A100-80GB-SXM").get(Family::Gemm).chip, "*");
        assert_eq!(registry.resolve("A100-80GB-SXM").get(Family::Gemm).rank, Rank::Literature);
        assert_eq!(registry.resolve("H100-SXM").get(Family::Host).rank, Rank::Roofline);
    }

    #[test]
    fn a_bundle_is_used_whole_and_never_mixed_with_another() {
        let mut entries = base();
        entries.push(entry(Family::Gemm, "H100-SXM", Rank::Calibrated, Some("fit-a")));
        entries.push(entry(Family::Host, "H100-SXM", Rank::Calibrated, Some("fit-a")));
        entries.push(entry(Family::Host, "H100-SXM", Rank::Measured, Some("fit-b")));
        entries.push(entry(Family::AllReduce, "H100-SXM", Rank::Literature, None));
        let registry = Registry::from_entries(entries).unwrap();
        let resolved = registry.resolve("H100-SXM");
        // fit-b holds the most trusted entry, so fit-b is the bundle; fit-a is not used at all.
        assert_eq!(resolved.get(Family::Host).bundle.as_deref(), Some("fit-b"));
        assert_eq!(resolved.get(Family::Gemm).rank, Rank::Roofline);
        assert_eq!(resolved.get(Family::AllReduce).rank, Rank::Literature);
    }

    #[test]
    fn fitted_entries_rank_as_transferred_outside_their_range() {
        let mut e = entry(Family::Gemm, "H100-SXM", Rank::Calibrated, None);
        e.range = Some(FitRange { tokens: Some([1, 512]), tensor_parallel: Some([1, 2]), models: None });
        assert_eq!(e.rank_for_tokens(256), Rank::Calibrated);
        assert_eq!(e.rank_for_tokens(4096), Rank::Transferred);
        assert_eq!(e.rank_for_tensor_parallel(4), Rank::Transferred);
        let mut roofline = e.clone();
        roofline.rank = Rank::Roofline;
        assert_eq!(roofline.rank_for_tokens(4096), Rank::Roofline, "a range never raises trust");
    }

    #[test]
    fn the_embedded_uncertainty_samples_move_the_calibrated_bundle_and_the_yaml_round_trips() {
        let registry = Registry::embedded();
        assert!(!registry.uncertainty().is_empty(), "the calibrated bundle carries its jackknife fits");
        let sample = &registry.uncertainty()[0];
        let moved = registry.with_sample(sample).unwrap();
        let (name, value) = sample.params.iter().next().unwrap();
        let (family, param) = name.split_once('.').unwrap();
        let entry = moved
            .entries()
            .iter()
            .find(|e| e.bundle.as_deref() == Some(&sample.bundle) && e.family.as_str() == family)
            .unwrap();
        assert_eq!(entry.param(param), *value);
        assert!(moved.uncertainty().is_empty());
        assert_eq!(Registry::parse(&registry.to_yaml()).unwrap(), registry);
        // A sample naming a parameter the bundle does not have is refused by path.
        let mut bad = sample.clone();
        bad.params.insert("gemm.no_such_parameter".into(), 1.0);
        let error = registry.with_uncertainty(vec![bad]).unwrap_err();
        assert_eq!(error.path, "uncertainty[0].params.gemm.no_such_parameter");
    }

    #[test]
    fn ambiguous_entries_are_refused_naming_both() {
        let mut entries = base();
        entries.push(entry(Family::Gemm, "H100-SXM", Rank::Literature, None));
        let mut twin = entry(Family::Gemm, "H100-SXM", Rank::Literature, None);
        twin.source = "another paper".to_owned();
        entries.push(twin);
        let e = Registry::from_entries(entries).unwrap_err();
        assert!(
            e.cause.contains("ambiguous")
                && e.cause.contains("another paper")
                && e.cause.contains("entries[10]"),
            "{e}"
        );
    }

    #[test]
    fn every_parameter_of_every_family_has_a_bound() {
        for family in Family::ALL {
            for (name, _) in family.parameters() {
                let share = name.ends_with("_efficiency") || name.starts_with("efficiency_");
                assert!(share || parameter_unit(name).is_some(), "{family}.{name} has no bound");
                assert!(parameter_bound(name, 1e30).is_some(), "{family}.{name} takes 1e30");
            }
        }
    }

    #[test]
    fn bad_parameters_and_missing_fallbacks_are_refused() {
        let mut entries = base();
        entries[0].params.insert("speed".to_owned(), 1.0);
        assert!(Registry::from_entries(entries).unwrap_err().path.ends_with("params.speed"));
        let mut entries = base();
        entries[0].params.insert("compute_efficiency".to_owned(), 1.5);
        assert!(Registry::from_entries(entries).unwrap_err().cause.contains("[0.001, 1]"));
        let mut entries = base();
        entries[0].params.insert("memory_efficiency".to_owned(), 1e-300);
        let error = Registry::from_entries(entries).unwrap_err();
        assert!(error.path.ends_with("params.memory_efficiency") && error.cause.contains("[0.001, 1]"));
        entries_with(Family::Host, "step_us", 1e300, "at most 1000000 µs");
        entries_with(Family::Host, "step_us", -1.0, "non-negative");
        entries_with(Family::Memory, "non_torch_bytes", 1e15, "bytes");
        entries_with(Family::Gemm, "half_efficiency_tokens", 1e9, "tokens");
        entries_with(Family::Frontend, "prompt_token_us", f64::INFINITY, "finite");
        let mut entries = base();
        entries.remove(0);
        assert!(Registry::from_entries(entries).unwrap_err().cause.contains("gemm"));
    }
}
