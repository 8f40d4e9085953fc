//! Documents and interfaces that cross blis-actor's crates.
//!
//! The scenario a user writes ([`Scenario`], with its [`Workload`]), the engine contract an engine
//! port and the cost model meet in ([`PoolPlan`], [`StepShape`], the [`Environment`] trait), the
//! model facts both read ([`ModelArchitecture`]), and what a run writes ([`RunResult`] for
//! `result.json`, [`CallsHeader`] and [`CallRecord`] for `calls.jsonl`). Nothing here simulates anything; the only
//! logic is validation, and every refusal is a [`FieldError`] naming the field's path, the
//! value and the cause. Documents outside the kernel carry time as integer microseconds in
//! fields named `*_us`.

pub mod bounds;
mod call;
mod calls_header;
mod engine;
mod error;
mod fabric;
mod frame;
pub mod json;
mod metric;
mod model;
mod rank;
mod request_spec;
mod result;
mod scenario;
mod stack;
mod workload;
pub mod yaml;

pub use call::{CallRecord, Disaggregated, Fate};
pub use calls_header::{CALLS_SCHEMA, CallsFile, CallsHeader, ServedPool, ServingSettings, Writer};
pub use engine::{
    EngineIdentity, Environment, GraphPolicy, KvPlan, MemoryFootprint, ParallelLayout, PoolPlan, StepGraph,
    StepMode, StepPrice, StepRequest, StepShape, StepTotals, Transfer,
};
pub use error::{FieldError, join_path, number};
pub use fabric::{Endpoint, FabricSpec, MAX_FABRIC_NODES, MAX_GPUS_PER_NODE};
pub use frame::{
    Acceptance, AcceptanceOutcome, ClientFrame, FrameRecord, FrameSpec, RunKind, Slo, StopRule, WarmUp,
    WarmUpRecord,
};
pub use metric::{Better, METRICS, MetricDefinition, metric};
pub use model::{AttentionKind, Dtype, ModelArchitecture, MoeLayout};
pub use rank::{Fact, Rank, RankShares};
pub use request_spec::{LlmCall, NodeKind, NodeSpec, PromptPart, RequestSpec};
pub use result::{
    BuildRecord, DataRecord, DisaggregationRecord, EstimateRecord, FateCounts, FileHash, InstanceRecord,
    LatencySummary, Metrics, OffloadRecord, OverloadRecord, PricingRecord, RESULT_SCHEMA, ReplicationRecord,
    RunResult, ScenarioRecord, SglangRecord, SimulationRecord, SpreadRecord, ValidityRecord,
};
pub use scenario::{
    Cluster, DEFAULT_REFRESH_METRICS_INTERVAL_S, EngineKind, EngineSpec, Hardware, LLMD_ROUTER_VERSION,
    Network, Pool, RouterPolicy, RouterSpec, Scenario,
};
pub use stack::{STACK_JSON, stack, version_of};
pub use workload::{
    Arrival, ClientSpec, Duration, InferencePerfBuild, InferencePerfImport, LengthDist, PromptTokenizer,
    Rate, Replay, ReplayFormat, Session, SharedPrefix, SloClass, Stage, StageGaps, Workload,
};
