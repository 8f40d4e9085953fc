//! Assembly: a scenario becomes actors.
//!
//! Each pool is planned (the vLLM port resolves its arguments, lowers the model, asks the cost
//! model for memory and sizes the KV cache); then the router, the engine hosts and the clients
//! are declared under stable names — `router`, `engine/<pool>-<i>`, `client/<name>` — and
//! installed. Every refusal names the scenario field.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use blis_contracts::{
    Endpoint, EngineIdentity, EngineKind, FabricSpec, FieldError, RouterSpec, Scenario, ServedPool,
    ServingSettings,
};
use blis_costmodel::{CostData, Pricer};
use blis_engines::sglang::{self, SGLANG_VERSION, SglangArgs, SglangEngine};
use blis_engines::vllm::{self, DeviceClass, VLLM_VERSION, VllmArgs, VllmEngine};
use blis_kernel::{ActorId, Assembly, HostKind, LaneSpec, SimDuration, Simulation, Streams};
use serde_json::json;

use crate::client::{Client, ClientWiring};
use crate::draws::MadeAhead;
use crate::engine_host::{EngineHost, FabricWiring, PdWiring};
use crate::fabric::{FabricActor, Topology};
use crate::ledger::CallLedger;
use crate::message::ClusterMessage;
use crate::pd_guard::PoolRole;
use crate::router_host::{LlmdWiring, RouterHost};
use crate::sglang_host::{SeededShuffle, SglangHost};
use crate::workload;

/// An assembled cluster, ready to run.
pub struct AssembledCluster {
    /// The simulation.
    pub simulation: Simulation<ClusterMessage>,
    /// The clients, in scenario order.
    pub clients: Vec<ActorId>,
    /// The engine hosts, in name order.
    pub engines: Vec<ActorId>,
    /// The scenario with every default and derived fact filled in.
    pub resolved: serde_json::Value,
    /// What serves the calls, pool by pool, for the `calls.jsonl` header.
    pub served: Vec<ServedPool>,
    /// Upstream engines modelled.
    pub identities: Vec<EngineIdentity>,
    /// Requests the clients will send, when every source knows it in advance.
    pub expected_requests: Option<u64>,
    /// Where the clients hand the records of ended requests.
    pub ledger: CallLedger,
}

/// A planned pool, before it becomes actors.
struct PlannedPool {
    /// Its position in `cluster.pools`.
    index: usize,
    name: String,
    model: Arc<str>,
    labels: std::collections::BTreeMap<String, String>,
    replicas: u32,
    engine: PlannedEngine,
    chip: blis_costmodel::Chip,
    vocab_size: u32,
}

/// A pool's engine, planned.
enum PlannedEngine {
    Vllm(Box<vllm::VllmPlan>),
    Sglang(Box<sglang::SglangPlan>),
}

impl PlannedPool {
    /// The block size its instances publish in their cache-config metric, which the router scrapes.
    fn scraped_block_size(&self) -> u32 {
        match &self.engine {
            PlannedEngine::Vllm(plan) => plan.config.block_size,
            PlannedEngine::Sglang(plan) => plan.pool.kv.block_size,
        }
    }

    /// Whether its instances run NixlConnector (prefill/decode disaggregation).
    fn nixl(&self) -> bool {
        matches!(&self.engine, PlannedEngine::Vllm(plan) if plan.config.nixl.is_some())
    }

    /// The offloading connector's settings, when its instances offload KV blocks.
    fn offload(&self) -> Option<blis_engines::vllm::connector::OffloadConfig> {
        match &self.engine {
            PlannedEngine::Vllm(plan) => plan.config.offload,
            PlannedEngine::Sglang(_) => None,
        }
    }

    /// The plan shared with the cost model.
    fn pool_plan(&self) -> &blis_contracts::PoolPlan {
        match &self.engine {
            PlannedEngine::Vllm(plan) => &plan.pool,
            PlannedEngine::Sglang(plan) => &plan.pool,
        }
    }

    /// The tensor-parallel degree, and the argument that sets it.
    fn tensor_parallel(&self) -> (u32, &'static str) {
        match &self.engine {
            PlannedEngine::Vllm(plan) => (plan.config.tensor_parallel_size, "tensor_parallel_size"),
            PlannedEngine::Sglang(plan) => (plan.config.tp_size, "tp_size"),
        }
    }

    /// Its engine's resolved record: kind, configuration, memory arithmetic and plan.
    fn engine_record(&self) -> serde_json::Value {
        match &self.engine {
            PlannedEngine::Vllm(plan) => json!({
                "kind": "vllm",
                "config": plan.config,
                "kv_budget": plan.budget,
                "plan": plan.pool,
            }),
            PlannedEngine::Sglang(plan) => json!({
                "kind": "sglang",
                "config": plan.config,
                "kv_pool": plan.budget,
                "plan": plan.pool,
            }),
        }
    }

    /// The serving settings the `calls.jsonl` header records (SGLang's under vLLM's names:
    /// `max_running_requests` as `max_num_seqs`, the chunk as `max_num_batched_tokens`,
    /// `context_length` as `max_model_len`, `page_size` as `block_size`, the radix cache as
    /// prefix caching, `mem_fraction_static` as `gpu_memory_utilization`).
    fn serving(&self) -> ServingSettings {
        match &self.engine {
            PlannedEngine::Vllm(plan) => {
                let config = &plan.config;
                ServingSettings {
                    engine: "vllm".to_owned(),
                    engine_version: config.version.clone(),
                    replicas: self.replicas,
                    tensor_parallel_size: config.tensor_parallel_size,
                    max_num_seqs: config.max_num_seqs,
                    max_num_batched_tokens: config.max_num_batched_tokens,
                    max_model_len: config.max_model_len,
                    block_size: config.block_size,
                    enable_prefix_caching: config.enable_prefix_caching,
                    enable_chunked_prefill: config.enable_chunked_prefill,
                    gpu_memory_utilization: config.gpu_memory_utilization,
                    scheduling_policy: config.scheduling_policy.clone(),
                }
            }
            PlannedEngine::Sglang(plan) => {
                let config = &plan.config;
                ServingSettings {
                    engine: "sglang".to_owned(),
                    engine_version: config.version.clone(),
                    replicas: self.replicas,
                    tensor_parallel_size: config.tp_size,
                    max_num_seqs: config.max_running_requests,
                    max_num_batched_tokens: config.chunked_prefill_size.unwrap_or(config.max_prefill_tokens),
                    max_model_len: config.context_length,
                    block_size: config.page_size,
                    enable_prefix_caching: true,
                    enable_chunked_prefill: config.chunked_prefill_size.is_some(),
                    gpu_memory_utilization: config.mem_fraction_static,
                    scheduling_policy: config.schedule_policy.clone(),
                }
            }
        }
    }
}

/// Clients that may each draw their token ids ahead on a thread of their own.
const DRAWING_CLIENTS: usize = 4;

/// How to assemble a cluster, beyond the scenario.
#[derive(Clone, Debug)]
pub struct AssemblyOptions {
    /// Which kernel host runs the actors.
    pub host: HostKind,
    /// Where workload files named by relative paths are.
    pub base_dir: PathBuf,
    /// Whether clients keep every request they release (to export the workload).
    pub keep_released: bool,
    /// Whether kept requests carry their prompts as token ids (`--export-workload --token-ids`).
    pub released_token_ids: bool,
    /// A fault to inject, so a checked run can show its checks catch it (never set by `run`).
    pub fault: Option<Fault>,
    /// Whether each client (of a few) reads its source and draws its token ids on a thread of
    /// its own; the outputs are the same. A run's replications set it themselves: on when the
    /// replication has a core to spare (`run_replication`'s accounting on a second thread).
    pub draw_ahead: bool,
    /// Threads the engines may share when they can run in lanes, ahead of the router and the
    /// clients (see `lane_spec`); 1 runs them with the rest. The outputs are the same, for a
    /// run to its end, to its horizon, or stopped at a multiple of `OVERLOAD_STOP_GRID`.
    pub lane_threads: usize,
    /// vLLM engines take every step in a round of their own, walk every running request every
    /// step and cache every full block as it fills, the reference path, instead of running
    /// ahead through the steps before the next event elsewhere, advancing plain decoders as a
    /// cohort and, where no prompt can hold another call's outputs, caching output blocks only
    /// when their request is preempted; the outputs are the same.
    pub faithful_steps: bool,
}

/// The overload watch, deciding between slices to stop a run, stops it at the next multiple
/// of this period of simulated time; the engines' windows never cross one, so in lanes they
/// are no further on there than in a sequential run.
pub(crate) const OVERLOAD_STOP_GRID: SimDuration = SimDuration::from_micros(100_000);

/// The average engine transitions per window from which the engines' windows are shared
/// among threads. The reference cluster cases (`cluster-8x-100k`: 128 output tokens, 8
/// engines at 308 requests/s) average five transitions a window, and sharing each of them cost
/// more than it saved; with 1024 output tokens at 40 requests/s they average 26 (PERFORMANCE.md,
/// "Engines in lanes").
const LANE_HANDOFF_GRAIN: u32 = 12;

/// What decides whether a cluster's engines can run in lanes.
struct LaneCase<'a> {
    threads: usize,
    host: HostKind,
    to_engine: SimDuration,
    to_client: SimDuration,
    clients: &'a [ActorId],
    disaggregated: bool,
    flow_control: bool,
    kv_events_lag: Option<SimDuration>,
    open_clients: bool,
}

/// Whether the engines can run in lanes, and how: only when nothing they send can lead to a
/// message to an engine before the router's or a client's next event of another kind plus the
/// router's delay to the engines. That holds when every client sends only at its requests'
/// arrival times (open loop, one call per request), the router sends to engines only when a
/// request or an abort reaches it or when its own scrape timer fires (round-robin, or llm-d
/// without flow control, which releases held requests as others finish), engines never talk
/// to each other (no P/D, no fabric), and every message between router and engines is
/// delayed. What vLLM's and SGLang's engines send (answers, first tokens, scraped metrics, KV
/// events) and a client's end are then quiet: their delivery leads to nothing sent to an
/// engine.
fn lane_spec(case: LaneCase<'_>) -> Option<LaneSpec> {
    let eligible = case.threads > 1
        && case.host == HostKind::Inline
        && !case.to_engine.is_zero()
        && !case.disaggregated
        && !case.flow_control
        && case.kv_events_lag.is_none_or(|lag| !lag.is_zero())
        && case.open_clients;
    eligible.then(|| LaneSpec {
        threads: case.threads,
        lookahead: case.to_engine,
        quiet: ClusterMessage::QUIET_CLASSES.to_vec(),
        handoff_grain: LANE_HANDOFF_GRAIN,
        grid: OVERLOAD_STOP_GRID,
        reach: case
            .clients
            .iter()
            .map(|&client| {
                (
                    client,
                    SimDuration::from_micros(
                        case.to_client.as_micros().saturating_add(case.to_engine.as_micros()),
                    ),
                )
            })
            .collect(),
    })
}

/// A deliberate defect a checked run injects to prove an invariant's check fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Every engine instance leaks one KV block before the run starts (breaks I5).
    LeakKvBlock,
}

/// Refuse synthetic token counts no pool could serve at any setting: a prompt (with its shared
/// prefix) or an output longer than the largest `max_model_len` any pool allows (its model's
/// `max_position_embeddings`) would be materialised only to be dropped, and at billions of
/// tokens would exhaust memory first. Lengths between a pool's configured `max_model_len` and
/// that bound run, and are dropped as too long, as vLLM drops them.
fn check_lengths(scenario: &Scenario, longest: u32) -> Result<(), FieldError> {
    let bound = |path: String, tokens: u64, what: &str| {
        if tokens > u64::from(longest) {
            Err(FieldError::new(
                path,
                tokens,
                format!(
                    "{what} longer than the largest max_model_len any pool allows ({longest} tokens, its model's max_position_embeddings) could never be served"
                ),
            ))
        } else {
            Ok(())
        }
    };
    for (i, client) in scenario.workload.clients.iter().enumerate() {
        let path = format!("workload.clients[{i}]");
        let prefix = client.shared_prefix.map_or(0, |p| u64::from(p.tokens));
        if let Some(p) = client.shared_prefix {
            bound(format!("{path}.shared_prefix.tokens"), u64::from(p.tokens), "a shared prefix")?;
        }
        let input = u64::from(client.input_tokens.max());
        if prefix > 0 && prefix + input > u64::from(longest) && input <= u64::from(longest) {
            return Err(FieldError::new(
                format!("{path}.input_tokens"),
                format!("up to {input} (after a {prefix}-token shared prefix)"),
                format!(
                    "a prompt longer than the largest max_model_len any pool allows ({longest} tokens, its model's max_position_embeddings) could never be served"
                ),
            ));
        }
        bound(format!("{path}.input_tokens"), input, "a prompt")?;
        bound(format!("{path}.output_tokens"), u64::from(client.output_tokens.max()), "an output")?;
    }
    Ok(())
}

/// Turn `scenario` into actors seeded with `seed`.
pub fn assemble(
    scenario: &Scenario,
    seed: u64,
    data: &CostData,
    options: &AssemblyOptions,
) -> Result<AssembledCluster, FieldError> {
    let mut pools = Vec::with_capacity(scenario.cluster.pools.len());
    for (i, pool) in scenario.cluster.pools.iter().enumerate() {
        let path = format!("cluster.pools[{i}]");
        let chip = data.catalog.chip(&pool.hardware.chip, &format!("{path}.hardware.chip"))?.clone();
        let model = &data.catalog.model(&pool.model, &format!("{path}.model"))?.architecture;
        let device = DeviceClass { name: &chip.name, capacity_bytes: chip.hbm_capacity.value as u64 };
        let registry = &data.registry;
        let pricer = |p: &blis_contracts::PoolPlan| -> Box<dyn blis_contracts::Environment> {
            Box::new(Pricer::new(&chip, p, registry))
        };
        let args_path = format!("{path}.engine.args");
        let engine = match pool.engine.kind {
            EngineKind::Vllm if pool.engine.version != VLLM_VERSION => {
                return Err(FieldError::new(
                    format!("{path}.engine.version"),
                    &pool.engine.version,
                    format!("this build models vLLM {VLLM_VERSION} only"),
                ));
            }
            EngineKind::Sglang if pool.engine.version != SGLANG_VERSION => {
                return Err(FieldError::new(
                    format!("{path}.engine.version"),
                    &pool.engine.version,
                    format!("this build models SGLang {SGLANG_VERSION} only"),
                ));
            }
            EngineKind::Vllm => {
                let args = VllmArgs::from_yaml(&pool.engine.args, &args_path)?;
                let (plan, _) = vllm::plan(&args, model, device, pricer, &path)?;
                PlannedEngine::Vllm(Box::new(plan))
            }
            EngineKind::Sglang => {
                let args = SglangArgs::from_yaml(&pool.engine.args, &args_path)?;
                let device = sglang::Device { name: &chip.name, capacity_bytes: device.capacity_bytes };
                let (plan, _) = sglang::plan(&args, model, device, pricer, &path)?;
                PlannedEngine::Sglang(Box::new(plan))
            }
        };
        let mut labels = pool.labels.clone();
        if let PlannedEngine::Sglang(_) = engine {
            engine_type_label(&mut labels, &path)?;
        }
        pools.push(PlannedPool {
            index: i,
            name: pool.name.clone(),
            model: Arc::from(pool.model.as_str()),
            labels,
            replicas: pool.replicas,
            engine,
            vocab_size: model.vocab_size,
            chip,
        });
    }

    let longest = pools
        .iter()
        .map(|p| p.pool_plan().model.max_position_embeddings)
        .max()
        .expect("a validated scenario has pools");
    check_lengths(scenario, longest)?;

    let placement = place_on_fabric(scenario, &pools, data)?;
    let fabric_record = placement.as_ref().map(|_| scenario.cluster.fabric.clone().unwrap_or_default());

    let mut assembly = Assembly::new();
    let declare = |assembly: &mut Assembly<ClusterMessage>, name: String| {
        assembly.declare(name).map_err(|e| FieldError::at("cluster", format!("cannot assemble: {e}")))
    };
    let router = declare(&mut assembly, "router".to_owned())?;
    let fabric = match &placement {
        Some(_) => Some(declare(&mut assembly, "fabric".to_owned())?),
        None => None,
    };
    let mut engines = Vec::new();
    for pool in &pools {
        for replica in 0..pool.replicas {
            let name = format!("engine/{}-{replica}", pool.name);
            engines.push((declare(&mut assembly, name.clone())?, name, pool));
        }
    }
    let streams = Streams::new(seed);
    let sources = workload::sources(&scenario.workload, streams, &options.base_dir)?;
    let clients: Vec<ActorId> = sources
        .iter()
        .map(|source| declare(&mut assembly, format!("client/{}", source.name)))
        .collect::<Result<_, _>>()?;

    let network = scenario.cluster.network;
    let to_engine = SimDuration::from_micros(network.router_engine_us);
    let to_client = SimDuration::from_micros(network.client_router_us);
    let install_error =
        |e: blis_kernel::AssemblyError| FieldError::at("cluster", format!("cannot assemble: {e}"));
    let mut endpoints: Vec<(ActorId, String, &PlannedPool)> =
        engines.iter().map(|(id, name, pool)| (*id, name.clone(), *pool)).collect();
    endpoints.sort_by(|a, b| a.1.cmp(&b.1));
    let engine_order: Vec<ActorId> = endpoints.iter().map(|(id, _, _)| *id).collect();
    let spec = &scenario.cluster.router;
    let roles: Vec<PoolRole> = pools.iter().map(|p| PoolRole { labels: &p.labels, nixl: p.nixl() }).collect();
    let (llmd, router_record) = if spec.is_llmd() {
        let (wiring, record) =
            llmd_router(spec, &endpoints, &roles, streams, sources.len(), &options.base_dir)?;
        let untimed =
            wiring.router.config().flow_control.as_ref().is_some_and(|f| f.default_request_ttl_us == 0);
        if untimed && scenario.horizon_s.is_none() {
            let at =
                if spec.config.is_some() { "cluster.router.config" } else { "cluster.router.config_file" };
            return Err(FieldError::new(
                format!("{at}.flowControl.defaultRequestTTL"),
                "\"0s\"",
                "without a TTL a request can wait in flow control for ever (upstream waits until the client goes away), \
                 so the run might not end; give the scenario a horizon_s or the flow control a TTL",
            ));
        }
        (Some(wiring), record)
    } else {
        crate::pd_guard::check(None, &roles)?;
        (None, serde_json::to_value(spec).expect("a router spec serialises"))
    };
    let peers = nixl_peers(&engines, placement.as_ref())?;
    let notify_done = llmd.is_some();
    let llmd_flow_control = llmd.as_ref().is_some_and(|w| w.router.config().flow_control.is_some());
    let kv_events_lag = llmd
        .as_ref()
        .is_some_and(|w| w.router.wants_kv_events())
        .then(|| SimDuration::from_micros(spec.kv_events_delay_us()));
    let table = endpoints
        .iter()
        .map(|(id, name, pool)| (*id, Arc::from(name.as_str()), pool.model.clone()))
        .collect();
    // What the router's approximate prefix producer hashes prompts with once every endpoint has
    // scraped its block size (clients drawing ahead make the prompts' digests for it).
    let digest_plan = llmd.as_ref().and_then(|w| w.router.prompt_digest_plan(scraped_block_size(&pools)));
    assembly.install(router, RouterHost::new(table, llmd, to_engine, to_client)).map_err(install_error)?;
    // Whether a vLLM instance may cache output blocks only when their request is preempted.
    let prompts_hold_no_outputs = sources.iter().all(|s| s.source.prompts_hold_no_outputs());
    // The block sizes the vLLM instances key blocks by (none for one that keys none: no prefix
    // caching and no connector).
    let mut key_block_sizes = std::collections::BTreeSet::new();
    for (index, (id, name, pool)) in engines.iter().enumerate() {
        let environment = Box::new(Pricer::new(&pool.chip, pool.pool_plan(), &data.registry));
        let plan = match &pool.engine {
            PlannedEngine::Vllm(plan) => plan,
            PlannedEngine::Sglang(plan) => {
                let shuffle = SeededShuffle::new(streams.stream(name, "sglang-shuffle", ""));
                let mut engine =
                    SglangEngine::new(sglang::SglangPlan::clone(plan), environment, Box::new(shuffle))
                        .map_err(|e| {
                            FieldError::at(
                                format!("cluster.pools[{}].engine.args", pool.index),
                                e.to_string(),
                            )
                        })?;
                if options.fault == Some(Fault::LeakKvBlock) {
                    engine.inject_kv_leak();
                }
                let host = SglangHost::new(name, engine, router, to_engine, scenario.horizon_s.is_some());
                assembly.install_detached(*id, host).map_err(install_error)?;
                continue;
            }
        };
        let mut engine = VllmEngine::new(vllm::VllmPlan::clone(plan), environment);
        engine.set_decode_cohort(!options.faithful_steps);
        engine.set_defer_output_blocks(!options.faithful_steps && prompts_hold_no_outputs);
        key_block_sizes.insert(engine.scheduler().key_block_size());
        if options.fault == Some(Fault::LeakKvBlock) {
            engine.inject_kv_leak();
        }
        let engine_id =
            peers.iter().find(|(_, (peer, _))| peer == id).map(|(engine_id, _)| engine_id.clone());
        if let Some(engine_id) = &engine_id {
            engine.set_engine_id(engine_id.clone());
        }
        let mut host = EngineHost::new(name, engine, router, to_engine, scenario.horizon_s.is_some());
        host.set_run_ahead(!options.faithful_steps);
        if let Some(lag) = kv_events_lag {
            host.publish_kv_events(lag);
        }
        if let (Some(fabric), Some(placement)) = (fabric, &placement) {
            let (first, count, node) = placement.gpus[index];
            host.carry_transfers(FabricWiring {
                fabric,
                gpus: Endpoint::Gpus { first, count },
                host: Endpoint::Host { node },
            });
        }
        if engine_id.is_some() {
            host.disaggregate(PdWiring { me: *id, pod_delay: to_engine, peers: peers.clone() });
        }
        assembly.install_detached(*id, host).map_err(install_error)?;
    }
    if let (Some(fabric), Some(placement)) = (fabric, placement) {
        assembly.install(fabric, FabricActor::new(placement.topology)).map_err(install_error)?;
    }
    // Token ids are drawn below the smallest vocabulary served, so every engine could take them.
    let vocab_size = pools.iter().map(|p| p.vocab_size).min().expect("a validated scenario has pools");
    let expected_requests = sources.iter().map(|s| s.requests).sum();
    let mut served: Vec<&str> = pools.iter().map(|p| &*p.model).collect();
    served.sort_unstable();
    served.dedup();
    let ledger = CallLedger::new();
    // Clients drawing ahead key their requests' blocks when every vLLM instance keys by one size.
    let made_ahead = MadeAhead {
        key_block_size: match key_block_sizes.first() {
            Some(&Some(size)) if key_block_sizes.len() == 1 => u32::try_from(size).ok(),
            _ => None,
        },
        digest_plan,
    };
    // A few clients draw ahead, each on a thread of its own; the threads share the spare core
    // with the accounting (the draws are the same work however many threads do them, and each
    // thread wakes once a batch). More clients draw as they send.
    let draw_ahead = options.draw_ahead && sources.len() <= DRAWING_CLIENTS;
    let lanes = lane_spec(LaneCase {
        threads: options.lane_threads,
        host: options.host,
        to_engine,
        to_client,
        clients: &clients,
        disaggregated: fabric.is_some() || !peers.is_empty(),
        flow_control: llmd_flow_control,
        kv_events_lag,
        open_clients: sources.iter().all(|s| s.source.answers_release_nothing()),
    });
    for (index, (client_source, &id)) in sources.into_iter().zip(&clients).enumerate() {
        let model = client_model(client_source.model.as_deref(), &client_source.model_path, &served)?;
        let wiring = ClientWiring {
            index: index as u32,
            me: id,
            router,
            delay_to_router: to_client,
            vocab_size,
            streams,
            keep_released: options.keep_released,
            released_token_ids: options.released_token_ids,
            model: Arc::from(model),
            notify_done,
            ledger: ledger.clone(),
            draw_ahead,
            fairness_id: client_source.fairness_id.as_deref().map(Arc::from),
            slo_ttft_ms: client_source.slo_ttft_ms,
            made_ahead,
        };
        let client = Client::new(&client_source.name, client_source.source, wiring);
        assembly.install(id, client).map_err(install_error)?;
    }
    let simulation = match lanes {
        Some(spec) => assembly.build_in_lanes(&spec),
        None => assembly.build(options.host),
    }
    .map_err(install_error)?;

    let resolved = json!({
        "seed": seed,
        "horizon_s": scenario.horizon_s,
        "network": network,
        "router": router_record,
        "pools": pools.iter().map(|p| {
            let mut record = json!({
            "name": p.name,
            "replicas": p.replicas,
            "chip": p.chip,
            "model": p.pool_plan().model,
            "pricing": Pricer::new(&p.chip, p.pool_plan(), &data.registry).resolved().entries(),
            "engine": p.engine_record(),
            });
            // Labels appear only when given, so label-free scenarios keep their records.
            if !p.labels.is_empty() {
                record["labels"] = json!(p.labels);
            }
            record
        }).collect::<Vec<_>>(),
        "workload": scenario.workload,
    });
    let served = pools
        .iter()
        .map(|p| ServedPool { model: p.model.to_string(), chip: p.chip.name.clone(), serving: p.serving() })
        .collect();
    let mut resolved = resolved;
    if let Some(fabric) = fabric_record {
        resolved["fabric"] = json!(fabric);
    }
    let mut identities: Vec<EngineIdentity> = pools.iter().map(|p| p.pool_plan().engine.clone()).collect();
    identities.sort();
    identities.dedup();
    Ok(AssembledCluster {
        simulation,
        clients,
        engines: engine_order,
        resolved,
        served,
        identities,
        expected_requests,
        ledger,
    })
}

/// Label an SGLang pool's pods `llm-d.ai/engine-type: sglang`, as a deployment must for llm-d's
/// metrics extractor to read SGLang's metric names; a label that names another engine is refused
/// (the router would read vLLM's names and see an idle pod).
fn engine_type_label(
    labels: &mut std::collections::BTreeMap<String, String>,
    path: &str,
) -> Result<(), FieldError> {
    use blis_router::endpoint::{ENGINE_TYPE_FALLBACK_LABEL, ENGINE_TYPE_LABEL};
    for label in [ENGINE_TYPE_LABEL, ENGINE_TYPE_FALLBACK_LABEL] {
        if let Some(value) = labels.get(label) {
            if value != "sglang" {
                return Err(FieldError::new(
                    format!("{path}.labels.{label}"),
                    value,
                    "an SGLang pool's pods must name engine type sglang, or llm-d's metrics extractor reads \
                     vLLM's metric names from them and sees idle pods",
                ));
            }
            return Ok(());
        }
    }
    labels.insert(ENGINE_TYPE_LABEL.to_owned(), "sglang".to_owned());
    Ok(())
}

/// Every NIXL instance by its engine id (the one its `kv_transfer_config` gives, else its name, as
/// vLLM draws a fresh one per instance): its host and its GPUs. Two instances with one engine id
/// are refused: a decode instance could not tell which to read from.
fn nixl_peers(
    engines: &[(ActorId, String, &PlannedPool)],
    placement: Option<&Placement>,
) -> Result<std::collections::BTreeMap<Arc<str>, (ActorId, Endpoint)>, FieldError> {
    let mut peers = std::collections::BTreeMap::new();
    let Some(placement) = placement else { return Ok(peers) };
    for (index, (id, name, pool)) in engines.iter().enumerate() {
        let PlannedEngine::Vllm(plan) = &pool.engine else { continue };
        let Some(nixl) = &plan.config.nixl else { continue };
        let engine_id: Arc<str> = Arc::from(nixl.engine_id.as_deref().unwrap_or(name));
        let (first, count, _) = placement.gpus[index];
        if peers.insert(engine_id.clone(), (*id, Endpoint::Gpus { first, count })).is_some() {
            return Err(FieldError::new(
                format!("cluster.pools[{}].engine.args.kv_transfer_config.engine_id", pool.index),
                format!("{engine_id:?}"),
                "two instances share this NIXL engine id (a pool's replicas all take the configured one), so a decode                  instance could not tell which to read from; leave engine_id out and each instance gets its own,                  as vLLM draws a fresh uuid4 per instance",
            ));
        }
    }
    Ok(peers)
}

/// Where the instances sit on the fabric: the topology and, per instance in declaration order,
/// its first GPU, its GPU count and its node.
struct Placement {
    topology: Topology,
    gpus: Vec<(u32, u32, u32)>,
}

/// Place the instances on the fabric, when any of them offloads KV blocks or the scenario gives
/// a fabric: each takes `tensor_parallel_size` GPUs of one node, in pool order; the node's host
/// memory must hold the CPU tiers of the instances on it.
fn place_on_fabric(
    scenario: &Scenario,
    pools: &[PlannedPool],
    data: &CostData,
) -> Result<Option<Placement>, FieldError> {
    let offloads = pools.iter().any(|p| p.offload().is_some() || p.nixl());
    if !offloads && scenario.cluster.fabric.is_none() {
        return Ok(None);
    }
    let spec = scenario.cluster.fabric.clone().unwrap_or_default();
    let topology = Topology::resolve(&spec, &data.catalog, "cluster.fabric")?;
    let spec: &FabricSpec = &spec;
    let mut gpus = Vec::new();
    let mut host_used = vec![0.0f64; spec.nodes as usize];
    let mut next = 0u32;
    for (i, pool) in pools.iter().enumerate() {
        let (tp, tp_field) = pool.tensor_parallel();
        if tp > spec.gpus_per_node {
            return Err(FieldError::new(
                format!("cluster.pools[{i}].engine.args.{tp_field}"),
                tp,
                format!(
                    "an instance's GPUs sit in one node, and the fabric's nodes have {} GPUs",
                    spec.gpus_per_node
                ),
            ));
        }
        for _ in 0..pool.replicas {
            if next % spec.gpus_per_node + tp > spec.gpus_per_node {
                next = next.div_ceil(spec.gpus_per_node) * spec.gpus_per_node;
            }
            if next + tp > topology.gpus() {
                return Err(FieldError::new(
                    "cluster.fabric.nodes",
                    spec.nodes,
                    format!(
                        "the pools up to cluster.pools[{i}] need more GPUs than {} nodes of {} GPUs hold",
                        spec.nodes, spec.gpus_per_node
                    ),
                ));
            }
            let node = topology.node_of(next);
            gpus.push((next, tp, node));
            next += tp;
            if let Some(offload) = pool.offload() {
                host_used[node as usize] += offload.cpu_bytes_to_use;
                let capacity = topology.host_memory_bytes();
                if host_used[node as usize] > capacity {
                    return Err(FieldError::new(
                        format!("cluster.pools[{i}].engine.args"),
                        format!("{} B of CPU KV tier per instance", offload.cpu_bytes_to_use),
                        format!(
                            "the CPU KV tiers of the instances on node {node} need {:.0} B, more than the {:.0} B of host \
                             memory its {} has (catalog)",
                            host_used[node as usize], capacity, spec.host_memory
                        ),
                    ));
                }
            }
        }
    }
    Ok(Some(Placement { topology, gpus }))
}

/// The block size every pool's instances publish, when they all publish one.
fn scraped_block_size(pools: &[PlannedPool]) -> Option<u32> {
    let (first, rest) = pools.split_first()?;
    let size = first.scraped_block_size();
    rest.iter().all(|p| p.scraped_block_size() == size).then_some(size)
}

/// The model a client's requests name: the one it gives, which some pool must serve, or the
/// only model served.
fn client_model<'a>(given: Option<&'a str>, path: &str, served: &[&'a str]) -> Result<&'a str, FieldError> {
    match given {
        Some(model) if served.contains(&model) => Ok(model),
        Some(model) => Err(FieldError::new(
            path,
            format!("{model:?}"),
            format!("no pool serves this model (served: {})", served.join(", ")),
        )),
        None if served.len() == 1 => Ok(served[0]),
        None => Err(FieldError::at(
            path,
            format!(
                "the pools serve several models ({}): name the one this client's requests go to",
                served.join(", ")
            ),
        )),
    }
}

/// llm-d's router for `spec` over `endpoints` (in name order), and its resolved record.
fn llmd_router(
    spec: &RouterSpec,
    endpoints: &[(ActorId, String, &PlannedPool)],
    roles: &[PoolRole],
    streams: Streams,
    clients: usize,
    base_dir: &Path,
) -> Result<(LlmdWiring, serde_json::Value), FieldError> {
    let (document, prefix) = match (&spec.config, &spec.config_file) {
        (Some(inline), _) => (
            blis_contracts::yaml::to_json(inline, "cluster.router.config")?,
            "cluster.router.config".to_owned(),
        ),
        (None, Some(file)) => {
            let path = base_dir.join(file);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                FieldError::new(
                    "cluster.router.config_file",
                    format!("{file:?}"),
                    format!("cannot read {}: {e}", path.display()),
                )
            })?;
            let value: serde_json::Value = if text.trim().is_empty() {
                serde_json::Value::Null
            } else {
                blis_contracts::yaml::from_str(&text).map_err(|e| {
                    FieldError::new(
                        "cluster.router.config_file",
                        format!("{file:?}"),
                        format!("not YAML: {e}"),
                    )
                })?
            };
            (value, format!("cluster.router.config_file({file})"))
        }
        (None, None) => unreachable!("a validated llm-d router has a config"),
    };
    let options = blis_router::LoadOptions { allow_experimental_plugins: spec.allow_experimental_plugins };
    let config = blis_router::load(Some(&document), options).map_err(|e| FieldError {
        path: blis_contracts::join_path(&prefix, &e.path),
        value: e.value.clone(),
        cause: e.reason.clone(),
    })?;
    crate::pd_guard::check(Some((&config, &prefix)), roles)?;
    let base_us = spec.refresh_metrics_interval_us();
    let mut source_periods = Vec::new();
    let mut sources_record = Vec::new();
    for source in &config.data_sources {
        let plugin = &config.plugins[source.source];
        let blis_router::plugins::PluginKind::MetricsDataSource(metrics) = &plugin.kind else { continue };
        let extracts = source.extractors.iter().any(|&e| {
            matches!(config.plugins[e].kind, blis_router::plugins::PluginKind::CoreMetricsExtractor)
        });
        let period = period_ticks(metrics.interval.map(|d| d.micros), base_us);
        if extracts {
            source_periods.push(period);
        }
        sources_record.push(json!({
            "source": plugin.name,
            "extractors": source.extractors.iter().map(|&e| &config.plugins[e].name).collect::<Vec<_>>(),
            "period_ticks": period,
        }));
    }
    let name = |i: usize| config.plugins[i].name.clone();
    let record = json!({
        "kind": "llm-d",
        "version": blis_contracts::LLMD_ROUTER_VERSION,
        "spec": spec,
        "refresh_metrics_interval_us": base_us,
        "api_version": config.api_version,
        "feature_gates": config.feature_gates,
        "plugins": config.plugins.iter().map(|p| json!({"name": p.name, "type": p.type_name})).collect::<Vec<_>>(),
        "profiles": config.profiles.iter().map(|p| json!({
            "name": p.name,
            "filters": p.filters.iter().map(|&f| name(f)).collect::<Vec<_>>(),
            "scorers": p.scorers.iter().map(|&(s, w)| json!({"plugin": name(s), "weight": w})).collect::<Vec<_>>(),
            "picker": name(p.picker),
        })).collect::<Vec<_>>(),
        "profile_handler": name(config.handler),
        "saturation_detector": name(config.saturation_detector),
        "parsers": config.parsers.iter().map(|&p| name(p)).collect::<Vec<_>>(),
        "data_sources": sources_record,
        "producers": config.producers.iter().map(|&p| name(p)).collect::<Vec<_>>(),
        "inert": config.inert.iter().map(|i| json!({
            "path": blis_contracts::join_path(&prefix, &i.path),
            "reason": i.reason,
        })).collect::<Vec<_>>(),
        "warnings": config.warnings,
    });
    let mut record = record;
    if let Some(flow) = &config.flow_control {
        let band = |b: &blis_router::flow_control::BandConfig| {
            json!({
                "priority": b.priority,
                "ordering": name(b.ordering_plugin),
                "fairness": name(b.fairness_plugin),
                "max_bytes": b.max_bytes,
                "max_requests": b.max_requests,
            })
        };
        record["flow_control"] = json!({
            "max_bytes": flow.max_bytes,
            "max_requests": flow.max_requests,
            "default_request_ttl_us": flow.default_request_ttl_us,
            "priority_bands": flow.bands.values().rev().map(band).collect::<Vec<_>>(),
            "default_priority_band": band(&flow.default_band),
            "default_negative_priority_band": flow.default_negative_band.as_ref().map(band),
            "usage_limit_policy": name(flow.usage_limit_plugin),
            "usage_limit_threshold": flow.usage_limit.threshold,
        });
    }
    let table = endpoints
        .iter()
        .map(|(_, name, pool)| blis_router::Endpoint {
            name: Arc::from(name.as_str()),
            labels: pool.labels.clone(),
            model: pool.model.clone(),
            metrics: blis_router::EndpointMetrics::default(),
        })
        .collect();
    let router = blis_router::Router::new(config, table);
    let wiring = LlmdWiring { router, streams, refresh_interval_us: base_us, source_periods, clients };
    Ok((wiring, record))
}

/// `periodTicks`: a source's interval in whole base ticks (Go's `math.Round`, at least 1; no
/// interval or a non-positive one fires every tick).
fn period_ticks(interval_us: Option<i64>, base_us: u64) -> u64 {
    match interval_us {
        Some(us) if us > 0 => ((us as f64 / base_us as f64).round() as u64).max(1),
        _ => 1,
    }
}
