//! The vLLM port (V1 engine, release 0.15.1): arguments and their defaults, the plan phase with
//! the KV budget rule, the block pool and KV-cache manager, the scheduler, and the instance that
//! ties them to an Environment.

mod args;
mod block_pool;
mod engine;
mod kv_cache_manager;
mod plan;
mod request;
mod scheduler;

pub use args::{DeviceClass, VLLM_VERSION, VllmArgs, VllmConfig};
pub use block_pool::{BlockId, BlockPool};
pub use engine::VllmEngine;
pub use kv_cache_manager::KvCacheManager;
pub use plan::{KvBudget, VllmPlan, plan};
pub use request::EngineRequest;
pub use scheduler::{
    FinishReason, FinishedRequest, Rejection, Scheduler, SchedulerCounters, SchedulerEvent, SchedulerLimits,
};
