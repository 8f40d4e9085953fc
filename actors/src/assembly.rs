//! Assembly: a scenario becomes actors.
//!
//! Each pool is planned (the vLLM port resolves its arguments, lowers the model, asks the cost
//! model for memory and sizes the KV cache); then the router, the engine hosts and the clients
//! are declared under stable names — `router`, `engine/<pool>-<i>`, `client/<name>` — and
//! installed. Every refusal names the scenario field.

use std::path::PathBuf;

use blis_contracts::{EngineIdentity, EngineKind, FieldError, Scenario};
use blis_costmodel::{CostData, Pricer};
use blis_engines::vllm::{self, DeviceClass, VLLM_VERSION, VllmArgs, VllmEngine};
use blis_kernel::{ActorId, Assembly, HostKind, SimDuration, Simulation, Streams};
use serde_json::json;

use crate::client::{Client, ClientWiring};
use crate::engine_host::EngineHost;
use crate::ledger::CallLedger;
use crate::message::ClusterMessage;
use crate::router_host::RouterHost;
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
    /// Upstream engines modelled.
    pub identities: Vec<EngineIdentity>,
    /// Requests the clients will send, when every source knows it in advance.
    pub expected_requests: Option<u64>,
    /// Where the clients hand the records of ended requests.
    pub ledger: CallLedger,
}

/// A planned pool, before it becomes actors.
struct PlannedPool {
    name: String,
    replicas: u32,
    plan: vllm::VllmPlan,
    chip: blis_costmodel::Chip,
    vocab_size: u32,
}

/// How to assemble a cluster, beyond the scenario.
#[derive(Clone, Debug)]
pub struct AssemblyOptions {
    /// Which kernel host runs the actors.
    pub host: HostKind,
    /// Where workload files named by relative paths are.
    pub base_dir: PathBuf,
    /// Whether clients keep every request they release (to export the workload).
    pub keep_released: bool,
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
        match pool.engine.kind {
            EngineKind::Vllm if pool.engine.version != VLLM_VERSION => {
                return Err(FieldError::new(
                    format!("{path}.engine.version"),
                    &pool.engine.version,
                    format!("this build models vLLM {VLLM_VERSION} only"),
                ));
            }
            EngineKind::Vllm => {}
        }
        let args = VllmArgs::from_yaml(&pool.engine.args, &format!("{path}.engine.args"))?;
        let device = DeviceClass { name: &chip.name, capacity_bytes: chip.hbm_capacity.value as u64 };
        let registry = &data.registry;
        let (plan, _) =
            vllm::plan(&args, model, device, |p| Box::new(Pricer::new(&chip, p, registry)), &path)?;
        pools.push(PlannedPool {
            name: pool.name.clone(),
            replicas: pool.replicas,
            plan,
            vocab_size: model.vocab_size,
            chip,
        });
    }

    let mut assembly = Assembly::new();
    let declare = |assembly: &mut Assembly<ClusterMessage>, name: String| {
        assembly.declare(name).map_err(|e| FieldError::at("cluster", format!("cannot assemble: {e}")))
    };
    let router = declare(&mut assembly, "router".to_owned())?;
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
    let mut engine_ids: Vec<(ActorId, String)> =
        engines.iter().map(|(id, name, _)| (*id, name.clone())).collect();
    engine_ids.sort_by(|a, b| a.1.cmp(&b.1));
    let engine_order: Vec<ActorId> = engine_ids.iter().map(|(id, _)| *id).collect();
    assembly.install(router, RouterHost::new(engine_ids, to_engine, to_client)).map_err(install_error)?;
    for (id, name, pool) in &engines {
        let environment = Box::new(Pricer::new(&pool.chip, &pool.plan.pool, &data.registry));
        let engine = VllmEngine::new(pool.plan.clone(), environment);
        assembly
            .install(*id, EngineHost::new(name, engine, router, to_engine, scenario.horizon_s.is_some()))
            .map_err(install_error)?;
    }
    // Token ids are drawn below the smallest vocabulary served, so every engine could take them.
    let vocab_size = pools.iter().map(|p| p.vocab_size).min().expect("a validated scenario has pools");
    let expected_requests = sources.iter().map(|s| s.requests).sum();
    let ledger = CallLedger::new();
    for (index, (client_source, &id)) in sources.into_iter().zip(&clients).enumerate() {
        let wiring = ClientWiring {
            index: index as u32,
            me: id,
            router,
            delay_to_router: to_client,
            vocab_size,
            streams,
            keep_released: options.keep_released,
            ledger: ledger.clone(),
        };
        let client = Client::new(&client_source.name, client_source.source, wiring);
        assembly.install(id, client).map_err(install_error)?;
    }
    let simulation = assembly.build(options.host).map_err(install_error)?;

    let resolved = json!({
        "seed": seed,
        "horizon_s": scenario.horizon_s,
        "network": network,
        "router": scenario.cluster.router,
        "pools": pools.iter().map(|p| json!({
            "name": p.name,
            "replicas": p.replicas,
            "chip": p.chip,
            "model": p.plan.pool.model,
            "pricing": Pricer::new(&p.chip, &p.plan.pool, &data.registry).resolved().entries(),
            "engine": {
                "kind": "vllm",
                "config": p.plan.config,
                "kv_budget": p.plan.budget,
                "plan": p.plan.pool,
            },
        })).collect::<Vec<_>>(),
        "workload": scenario.workload,
    });
    let mut identities: Vec<EngineIdentity> = pools.iter().map(|p| p.plan.pool.engine.clone()).collect();
    identities.sort();
    identities.dedup();
    Ok(AssembledCluster {
        simulation,
        clients,
        engines: engine_order,
        resolved,
        identities,
        expected_requests,
        ledger,
    })
}
