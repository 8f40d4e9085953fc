//! The vLLM port (V1 engine, release 0.15.1): arguments and their defaults, the plan phase with
//! the KV budget rule, block hashing, the block pool and KV-cache manager, the waiting queue, the
//! scheduler (synchronous and asynchronous), and the instance that ties them to an Environment.

mod args;
mod block_hash;
mod block_pool;
pub mod connector;
mod engine;
mod fields;
mod kv_cache_manager;
mod metrics;
mod plan;
mod queue;
mod request;
mod scheduler;

pub use args::{DeviceClass, VLLM_VERSION, VllmArgs, VllmConfig, capture_sizes};
pub use block_hash::{BlockHash, BlockKey, KeysAhead, event_value, hash_block, key_block, none_hash};
pub use block_pool::{BlockId, BlockPool, EventSpan, KvEvent, KvEvents};
pub use engine::{CopyJob, KvPull, Rejection, Stall, VllmEngine};
pub use fields::{ARGUMENTS, Treatment, treatment};
pub use kv_cache_manager::{KvCacheManager, PrefixCacheStats};
pub use metrics::{CacheConfigInfo, MetricsSnapshot};
pub use plan::{KvBudget, VllmPlan, plan};
pub use request::{EngineRequest, Status};
pub use scheduler::{
    Admission, BlockSpan, ConnectorPrefixCacheStats, FinishReason, FinishedRequest, Policy, RequestHandle,
    Scheduled, Scheduler, SchedulerCounters, SchedulerEvent, SchedulerLimits, SchedulerOutput,
    SchedulerStats, UpdateOutput,
};
