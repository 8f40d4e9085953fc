//! An inference-perf profile as a request source: the stream the named inference-perf build
//! would send (`../shared/reference/inference-perf.md`; the rules below are its §0).
//!
//! - **Prompts.** `G` groups × `P` prompts: each group has a system prompt of `S_g` tokens,
//!   shared token for token by its prompts, and each prompt a question of `Q_p` tokens. The
//!   list is shuffled once; request `k` of a stage (k restarts at 0 each stage) sends prompt
//!   `perm[k mod G·P]`, so whole prompts recur and can hit the prefix cache in full. The `b505c33`
//!   build ignored the profile's group counts (always 10 × 10) and lengths drift through
//!   decoding and re-tokenization: `S_g = 1 + round(N(f_sys·sys, (σ√sys)²))`,
//!   `Q_p = round(N(f_q·q, (σ√q)²))` with the tokenizer's factors; `head` sends exact lengths.
//! - **Arrivals.** A `constant` stage of rate R and duration D has `floor(R·D)` arrivals at
//!   `T0 + D·C_i/C_N`, with `C` the running sum of Exp(1) draws: the first after a gap, the last
//!   exactly at `T0 + D`. Stages run one after another (`T0` one second after a stage begins; the
//!   end seen at a one-second poll tick; the next stage `load.interval` later).
//! - **Outputs and timeouts.** Exactly `output_len` tokens (`ignore_eos`); a call is abandoned
//!   `request_timeout` (aiohttp's default 300 s) plus a uniform fraction of a second after it was
//!   sent (aiohttp rounds deadlines up to a whole second).

use std::path::Path;

use blis_contracts::yaml::{self, YamlValue};
use blis_contracts::{
    FieldError, InferencePerfBuild, InferencePerfImport, LlmCall, NodeKind, NodeSpec, PromptPart,
    PromptTokenizer, RequestSpec, bounds, number,
};
use blis_kernel::{Streams, Substream};
use serde::Deserialize;

use super::{Pacing, Planned, RequestSource};

/// aiohttp's default total timeout, which the pinned build's client inherited.
const DEFAULT_TIMEOUT_S: f64 = 300.0;

/// The profile fields the import reads (inference-perf ignores keys it does not know, and so
/// does this; the keys it reads are checked).
#[derive(Debug, Deserialize)]
struct Profile {
    data: DataSection,
    load: LoadSection,
    #[serde(default)]
    api: Option<ApiSection>,
    #[serde(default)]
    server: Option<ServerSection>,
    #[serde(default)]
    tokenizer: Option<TokenizerSection>,
}

#[derive(Debug, Deserialize)]
struct DataSection {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    shared_prefix: Option<SharedPrefixSection>,
}

#[derive(Debug, Deserialize)]
struct SharedPrefixSection {
    #[serde(default)]
    num_groups: Option<u32>,
    #[serde(default)]
    num_prompts_per_group: Option<u32>,
    #[serde(default)]
    num_unique_system_prompts: Option<u32>,
    #[serde(default)]
    num_users_per_system_prompt: Option<u32>,
    system_prompt_len: u32,
    question_len: u32,
    output_len: u32,
    #[serde(default)]
    enable_multi_turn_chat: Option<bool>,
}

#[derive(Debug, Deserialize)]
struct LoadSection {
    #[serde(rename = "type", default = "constant")]
    kind: String,
    stages: Vec<StageSection>,
    #[serde(default)]
    interval: Option<f64>,
    #[serde(default)]
    request_timeout: Option<f64>,
    #[serde(default)]
    sweep: Option<YamlValue>,
}

fn constant() -> String {
    "constant".to_owned()
}

#[derive(Debug, Deserialize)]
struct StageSection {
    rate: f64,
    duration: f64,
}

#[derive(Debug, Deserialize)]
struct ApiSection {
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ServerSection {
    #[serde(default)]
    ignore_eos: Option<bool>,
    #[serde(default)]
    model_name: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TokenizerSection {
    #[serde(default)]
    pretrained_model_name_or_path: Option<String>,
}

/// The tokenizer whose drift was measured that a model or tokenizer `name` (a Hugging Face
/// id) uses, if known: Llama 2's (`…llama-2-<size>…`, and CodeLlama's, which ships the same
/// sentencepiece model: its four reference runs' mean prompt lengths lie within 1.9 tokens of
/// the Llama-2 factors) or Mistral v0.1's (Mixtral-8x7B, Mistral-7B v0.1 and Instruct
/// v0.1/v0.2); later Mistral tokenizers differ.
pub fn known_drift(name: &str) -> Option<PromptTokenizer> {
    let name = name.to_ascii_lowercase();
    let mistral_v01 =
        ["mixtral-8x7b", "mistral-7b-v0.1", "mistral-7b-instruct-v0.1", "mistral-7b-instruct-v0.2"];
    if name.contains("llama-2-") || name.contains("codellama-") {
        Some(PromptTokenizer::Llama2)
    } else if mistral_v01.iter().any(|m| name.contains(m)) {
        Some(PromptTokenizer::Mixtral)
    } else {
        None
    }
}

/// Length drift of a tokenizer: system and question factors and the spread per √token.
fn drift(tokenizer: PromptTokenizer) -> (f64, f64, f64) {
    match tokenizer {
        PromptTokenizer::Llama2 => (1.047, 1.0463, 0.27),
        PromptTokenizer::Mixtral => (1.041, 1.040, 0.26),
        PromptTokenizer::Exact => (1.0, 1.0, 0.0),
    }
}

/// What the import resolved, for the frame and for tests.
#[derive(Clone, Debug, PartialEq)]
pub struct InferencePerfPlan {
    /// The build emulated.
    pub build: InferencePerfBuild,
    /// Groups and prompts per group.
    pub groups: u32,
    /// Prompts per group.
    pub prompts_per_group: u32,
    /// Tokens of each group's system prompt.
    pub system_tokens: Vec<u32>,
    /// Tokens of each prompt's question (prompt `i` belongs to group `i / prompts_per_group`).
    pub question_tokens: Vec<u32>,
    /// The order prompts are sent in: request `k` sends prompt `order[k mod G·P]`.
    pub order: Vec<usize>,
    /// Output tokens of every request.
    pub output_tokens: u32,
    /// Each stage's rate (per second) and duration (seconds).
    pub stages: Vec<(f64, f64)>,
    /// Profile keys the build ignored.
    pub ignored_keys: Vec<&'static str>,
    /// The client timeout, seconds.
    pub timeout_s: f64,
}

impl InferencePerfPlan {
    /// Requests of stage `s`: `floor(rate × duration)`.
    pub fn stage_requests(&self, s: usize) -> u64 {
        let (rate, duration) = self.stages[s];
        (rate * duration).floor() as u64
    }

    /// Prompt tokens of prompt `i`.
    pub fn prompt_tokens(&self, i: usize) -> u32 {
        self.system_tokens[i / self.prompts_per_group as usize] + self.question_tokens[i]
    }
}

/// The source.
pub struct InferencePerfSource {
    name: String,
    plan: InferencePerfPlan,
    interval_us: u64,
    stream_seed: Streams,
    /// The stage whose arrivals are drawn, once the first is.
    stage: Option<usize>,
    offsets: Vec<u64>,
    next_in_stage: usize,
    timeouts: Substream,
}

impl InferencePerfSource {
    /// Read the profile of `import` (relative to `base_dir`) and plan the stream; `label` names
    /// the import in messages.
    pub fn open(
        import: &InferencePerfImport,
        base_dir: &Path,
        streams: Streams,
    ) -> Result<InferencePerfSource, FieldError> {
        let label = format!("workload.inference_perf.profile ({})", import.profile);
        let text = std::fs::read_to_string(base_dir.join(&import.profile)).map_err(|e| {
            FieldError::new("workload.inference_perf.profile", &import.profile, format!("cannot read: {e}"))
        })?;
        let profile: Profile = yaml::from_str(&text).map_err(|e| e.within(&label))?;
        let (plan, interval_s) = plan(&profile, import, &label, streams)?;
        Ok(InferencePerfSource {
            name: import.name.clone(),
            interval_us: (interval_s * 1e6).round() as u64,
            timeouts: streams.stream(&format!("inference-perf/{}", import.name), "timeout-fraction", ""),
            stream_seed: streams,
            plan,
            stage: None,
            offsets: Vec::new(),
            next_in_stage: 0,
        })
    }

    /// What the import resolved.
    pub fn plan(&self) -> &InferencePerfPlan {
        &self.plan
    }

    /// Arrival offsets of stage `s` from its time origin, µs: `round(D·C_i/C_N)`.
    fn stage_offsets(&self, s: usize) -> Vec<u64> {
        let n = self.plan.stage_requests(s) as usize;
        let duration_us = self.plan.stages[s].1 * 1e6;
        let mut draws =
            self.stream_seed.stream(&format!("inference-perf/{}", self.name), "arrivals", &s.to_string());
        let mut running = Vec::with_capacity(n);
        let mut sum = 0.0;
        for _ in 0..n {
            sum += draws.exponential(1.0);
            running.push(sum);
        }
        running.iter().map(|c| (duration_us * c / sum).round() as u64).collect()
    }
}

/// Resolve the profile into a plan and the interval between stages.
fn plan(
    profile: &Profile,
    import: &InferencePerfImport,
    label: &str,
    streams: Streams,
) -> Result<(InferencePerfPlan, f64), FieldError> {
    let at = |field: &str| format!("{label}.{field}");
    if profile.data.kind != "shared_prefix" {
        return Err(FieldError::new(
            at("data.type"),
            &profile.data.kind,
            "only shared_prefix data is modelled",
        ));
    }
    let Some(shared) = &profile.data.shared_prefix else {
        return Err(FieldError::at(
            at("data.shared_prefix"),
            "missing: shared_prefix data needs its section",
        ));
    };
    if !["constant"].contains(&profile.load.kind.as_str()) {
        return Err(FieldError::new(at("load.type"), &profile.load.kind, "only constant load is modelled"));
    }
    if profile.load.sweep.is_some() {
        return Err(FieldError::at(at("load.sweep"), "sweeps are not modelled; give the stages"));
    }
    if let Some(kind) = profile.api.as_ref().and_then(|a| a.kind.as_deref()).filter(|k| *k != "completion") {
        return Err(FieldError::new(at("api.type"), kind, "only the completion API is modelled"));
    }
    if profile.server.as_ref().and_then(|s| s.ignore_eos) == Some(false) {
        return Err(FieldError::new(
            at("server.ignore_eos"),
            false,
            "without ignore_eos the output length depends on the model's text; only ignore_eos is modelled",
        ));
    }
    if profile.load.stages.is_empty() {
        return Err(FieldError::new(at("load.stages"), "[]", "needs at least one stage"));
    }
    let mut requests = 0.0;
    for (i, stage) in profile.load.stages.iter().enumerate() {
        if !(stage.rate.is_finite() && stage.rate >= 0.0 && stage.rate <= bounds::MAX_RATE_PER_S) {
            return Err(FieldError::new(
                at(&format!("load.stages[{i}].rate")),
                number(stage.rate),
                format!("must be in [0, {:e}] requests per second", bounds::MAX_RATE_PER_S),
            ));
        }
        if !(stage.duration.is_finite() && stage.duration > 0.0) {
            return Err(FieldError::new(
                at(&format!("load.stages[{i}].duration")),
                number(stage.duration),
                "must be > 0",
            ));
        }
        bounds::check_seconds(&at(&format!("load.stages[{i}].duration")), stage.duration)?;
        requests += stage.rate * stage.duration;
    }
    if requests > bounds::MAX_CALLS as f64 {
        return Err(FieldError::new(
            at("load.stages"),
            format!("{} requests in all", number(requests)),
            format!("a run holds at most {} calls (each call's record is kept)", bounds::MAX_CALLS),
        ));
    }
    for (field, value) in
        [("load.interval", profile.load.interval), ("load.request_timeout", profile.load.request_timeout)]
    {
        if let Some(seconds) = value {
            if !(seconds.is_finite() && seconds >= 0.0) {
                return Err(FieldError::new(at(field), number(seconds), "must be a number of seconds ≥ 0"));
            }
            bounds::check_seconds(&at(field), seconds)?;
        }
    }
    let (system_len, question_len) = (shared.system_prompt_len, shared.question_len);
    if system_len == 0 || question_len == 0 || shared.output_len == 0 {
        return Err(FieldError::at(
            at("data.shared_prefix"),
            "system_prompt_len, question_len and output_len must each be at least 1",
        ));
    }
    let mut ignored_keys = Vec::new();
    let (groups, prompts_per_group) = match import.emulate {
        InferencePerfBuild::B505c33 => {
            for (key, set) in [
                ("num_unique_system_prompts", shared.num_unique_system_prompts.is_some()),
                ("num_users_per_system_prompt", shared.num_users_per_system_prompt.is_some()),
                ("enable_multi_turn_chat", shared.enable_multi_turn_chat.is_some()),
            ] {
                if set {
                    ignored_keys.push(key);
                }
            }
            (shared.num_groups.unwrap_or(10), shared.num_prompts_per_group.unwrap_or(10))
        }
        InferencePerfBuild::Head => {
            if shared.enable_multi_turn_chat == Some(true) {
                return Err(FieldError::new(
                    at("data.shared_prefix.enable_multi_turn_chat"),
                    true,
                    "multi-turn chat of inference-perf head is not modelled yet (emulate b505c33 to ignore it, as that build did)",
                ));
            }
            (
                shared.num_groups.or(shared.num_unique_system_prompts).unwrap_or(10),
                shared.num_prompts_per_group.or(shared.num_users_per_system_prompt).unwrap_or(10),
            )
        }
    };
    if groups == 0 || prompts_per_group == 0 {
        return Err(FieldError::at(
            at("data.shared_prefix"),
            "groups and prompts per group must be at least 1",
        ));
    }
    if u64::from(groups) * u64::from(prompts_per_group) > bounds::MAX_CALLS {
        return Err(FieldError::new(
            at("data.shared_prefix"),
            format!("{groups} groups × {prompts_per_group} prompts"),
            format!("at most {} prompts are held", bounds::MAX_CALLS),
        ));
    }
    let tokenizer = match (import.tokenizer, import.emulate) {
        (Some(tokenizer), _) => tokenizer,
        (None, InferencePerfBuild::Head) => PromptTokenizer::Exact,
        (None, InferencePerfBuild::B505c33) => {
            let named = profile
                .tokenizer
                .as_ref()
                .and_then(|t| t.pretrained_model_name_or_path.clone())
                .or_else(|| profile.server.as_ref().and_then(|s| s.model_name.clone()))
                .unwrap_or_default();
            known_drift(&named).ok_or_else(|| {
                FieldError::new(
                    "workload.inference_perf.tokenizer",
                    if named.is_empty() { "(none)" } else { &named },
                    "the prompt-length drift of this tokenizer is not known; give tokenizer: llama2, mixtral or exact",
                )
            })?
        }
    };
    let (f_system, f_question, spread) = drift(tokenizer);
    let component = format!("inference-perf/{}", import.name);
    let mut lengths = streams.stream(&component, "prompt-lengths", "");
    let mut draw = |tokens: u32, factor: f64| -> u32 {
        let mean = factor * f64::from(tokens);
        let sd = spread * f64::from(tokens).sqrt();
        (mean + sd * lengths.standard_normal()).round().max(1.0) as u32
    };
    // The pinned build's system text decodes to BOS plus the drifted tokens; `head` converges to
    // exactly `system_prompt_len` tokens including BOS.
    let system_tokens: Vec<u32> = (0..groups)
        .map(
            |_| if tokenizer == PromptTokenizer::Exact { system_len } else { 1 + draw(system_len, f_system) },
        )
        .collect();
    let total = (groups * prompts_per_group) as usize;
    let question_tokens: Vec<u32> = (0..total).map(|_| draw(question_len, f_question)).collect();
    let mut order: Vec<usize> = (0..total).collect();
    let mut shuffle = streams.stream(&component, "shuffle", "");
    for i in (1..total).rev() {
        let j = shuffle.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    let plan = InferencePerfPlan {
        build: import.emulate,
        groups,
        prompts_per_group,
        system_tokens,
        question_tokens,
        order,
        output_tokens: shared.output_len,
        stages: profile
            .load
            .stages
            .iter()
            .map(|s| (s.rate, import.stage_duration_cap_s.map_or(s.duration, |cap| s.duration.min(cap))))
            .collect(),
        ignored_keys,
        timeout_s: profile.load.request_timeout.unwrap_or(DEFAULT_TIMEOUT_S),
    };
    Ok((plan, profile.load.interval.unwrap_or(1.0)))
}

impl RequestSource for InferencePerfSource {
    fn pacing(&self) -> Pacing {
        Pacing::StagesAfterCompletion {
            lead_us: 1_000_000,
            poll_us: 1_000_000,
            interval_us: self.interval_us,
        }
    }

    fn next_request(&mut self) -> Option<Planned> {
        // Draw the next stage's arrivals when this one is used up (stages of no request are
        // passed over; their number still advances).
        let stage = loop {
            match self.stage {
                Some(stage) if self.next_in_stage < self.offsets.len() => break stage,
                current => {
                    let next = current.map_or(0, |s| s + 1);
                    if next >= self.plan.stages.len() {
                        return None;
                    }
                    self.offsets = self.stage_offsets(next);
                    self.stage = Some(next);
                    self.next_in_stage = 0;
                }
            }
        };
        let k = self.next_in_stage;
        self.next_in_stage += 1;
        let prompt = self.plan.order[k % self.plan.order.len()];
        let group = prompt / self.plan.prompts_per_group as usize;
        let fraction_us = self.timeouts.below(1_000_000);
        let call = LlmCall {
            prompt: vec![
                PromptPart::Shared {
                    name: format!("{}/system-{group}", self.name),
                    tokens: self.plan.system_tokens[group],
                },
                PromptPart::Shared {
                    name: format!("{}/question-{prompt}", self.name),
                    tokens: self.plan.question_tokens[prompt],
                },
            ],
            output_tokens: self.plan.output_tokens,
            priority: 0,
            timeout_us: Some((self.plan.timeout_s * 1e6).round() as u64 + fraction_us),
        };
        let spec = RequestSpec {
            id: format!("{}-s{stage}-{k}", self.name),
            arrival_us: self.offsets[k],
            nodes: vec![NodeSpec { id: "llm".into(), parents: Vec::new(), kind: NodeKind::Llm(call) }],
        };
        Some(Planned { spec, stage: stage as u32 })
    }
}
