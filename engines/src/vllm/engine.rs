//! One vLLM instance: its plan, its scheduler, and the Environment that prices its steps.

use blis_contracts::{Environment, StepPrice, StepShape};

use super::kv_cache_manager::KvCacheManager;
use super::plan::VllmPlan;
use super::request::EngineRequest;
use super::scheduler::{
    FinishedRequest, Rejection, Scheduler, SchedulerCounters, SchedulerEvent, SchedulerLimits,
};

/// A vLLM instance as a plain state machine: requests in, steps scheduled and priced, finished
/// requests out. Synchronous scheduling: a step is scheduled, runs, and its outputs are applied
/// before the next is scheduled.
pub struct VllmEngine {
    plan: VllmPlan,
    scheduler: Scheduler,
    environment: Box<dyn Environment>,
}

impl VllmEngine {
    /// An idle instance of `plan`, priced by `environment`.
    pub fn new(plan: VllmPlan, environment: Box<dyn Environment>) -> VllmEngine {
        let config = &plan.config;
        let limits = SchedulerLimits {
            max_num_seqs: config.max_num_seqs,
            max_num_batched_tokens: config.max_num_batched_tokens,
            max_model_len: config.max_model_len,
            enable_chunked_prefill: config.enable_chunked_prefill,
            long_prefill_token_threshold: config.long_prefill_token_threshold,
        };
        let blocks = u32::try_from(plan.budget.num_gpu_blocks).expect("the plan bounds the block count");
        let kv = KvCacheManager::new(blocks, config.block_size, config.max_model_len);
        VllmEngine { scheduler: Scheduler::new(limits, kv), plan, environment }
    }

    /// The plan this instance runs.
    pub fn plan(&self) -> &VllmPlan {
        &self.plan
    }

    /// The scheduler (for state and counters).
    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Accept a request, or refuse it as vLLM's API server would.
    pub fn add_request(&mut self, request: &EngineRequest) -> Result<(), Rejection> {
        self.scheduler.add_request(request)
    }

    /// Whether any request is waiting or running.
    pub fn has_work(&self) -> bool {
        self.scheduler.has_work()
    }

    /// Schedule the next step and price it; `None` if no request got a token.
    pub fn start_step(&mut self) -> Option<(StepPrice, &StepShape)> {
        let shape = self.scheduler.schedule();
        if shape.requests.is_empty() {
            return None;
        }
        Some((self.environment.price(shape), shape))
    }

    /// Apply the outputs of the running step, which ended at `now_us`.
    pub fn finish_step(&mut self, now_us: u64, finished: &mut Vec<FinishedRequest>) {
        self.scheduler.update_from_output(now_us, finished);
    }

    /// What the scheduler did so far.
    pub fn counters(&self) -> SchedulerCounters {
        self.scheduler.counters()
    }

    /// Request events since the last [`VllmEngine::clear_events`].
    pub fn events(&self) -> &[(u64, SchedulerEvent)] {
        self.scheduler.events()
    }

    /// Forget the events seen so far.
    pub fn clear_events(&mut self) {
        self.scheduler.clear_events();
    }
}
