//! One vLLM instance: its plan, its scheduler, its in-flight batches, and the Environment that
//! prices its steps.
//!
//! The host drives it the way vLLM's engine core loop does. [`VllmEngine::schedule`] schedules a
//! batch and queues it as launched; [`VllmEngine::complete_oldest`] applies the outputs of the
//! oldest launched batch. Synchronously a batch completes before the next is scheduled;
//! asynchronously up to two are in flight, so a batch is scheduled before the previous one's
//! outputs are known.

use std::collections::VecDeque;

use blis_contracts::{Environment, StepPrice, StepRequest, StepShape};

use super::kv_cache_manager::KvCacheManager;
use super::plan::VllmPlan;
use super::request::EngineRequest;
use super::scheduler::{
    FinishedRequest, Policy, Scheduler, SchedulerCounters, SchedulerEvent, SchedulerLimits, SchedulerOutput,
    UpdateOutput,
};

/// Why a request was refused on arrival, as vLLM's API server refuses it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Prompt plus requested output exceed `max_model_len` (the server answers 400).
    ExceedsMaxModelLen {
        /// Prompt tokens.
        prompt: u32,
        /// Requested output tokens.
        max_tokens: u32,
        /// The limit.
        max_model_len: u32,
    },
    /// An empty prompt.
    EmptyPrompt,
}

impl Rejection {
    /// A short machine-readable reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::ExceedsMaxModelLen { .. } => "exceeds_max_model_len",
            Rejection::EmptyPrompt => "empty_prompt",
        }
    }
}

/// A vLLM instance as a plain state machine.
pub struct VllmEngine {
    plan: VllmPlan,
    scheduler: Scheduler,
    environment: Box<dyn Environment>,
    in_flight: VecDeque<SchedulerOutput>,
    spare: Vec<SchedulerOutput>,
    shape: StepShape,
    update: UpdateOutput,
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
            policy: if config.scheduling_policy == "priority" { Policy::Priority } else { Policy::Fcfs },
            async_scheduling: config.async_scheduling,
        };
        let blocks = u32::try_from(plan.budget.num_gpu_blocks).expect("the plan bounds the block count");
        let kv = KvCacheManager::new(blocks, config.block_size, config.max_model_len, config.enable_prefix_caching);
        VllmEngine {
            scheduler: Scheduler::new(limits, kv),
            plan,
            environment,
            in_flight: VecDeque::new(),
            spare: Vec::new(),
            shape: StepShape::default(),
            update: UpdateOutput::default(),
        }
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
        let prompt = request.prompt_token_ids.len() as u32;
        let max_tokens = request.output_token_ids.len() as u32;
        let max_model_len = self.scheduler.limits().max_model_len;
        if prompt == 0 {
            return Err(Rejection::EmptyPrompt);
        }
        if u64::from(prompt) + u64::from(max_tokens) > u64::from(max_model_len) {
            return Err(Rejection::ExceedsMaxModelLen { prompt, max_tokens, max_model_len });
        }
        self.scheduler.add_request(request);
        Ok(())
    }

    /// Abort a request; its record if it was held.
    pub fn abort(&mut self, key: u64) -> Option<FinishedRequest> {
        self.scheduler.abort(key)
    }

    /// Whether a `schedule` would do anything (vLLM's `has_requests`).
    pub fn has_requests(&self) -> bool {
        self.scheduler.has_requests()
    }

    /// Batches launched and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Schedule the next batch, queue it as launched, and price it. The shape is empty (and the
    /// price zero) when no request got a token.
    pub fn schedule(&mut self) -> (StepPrice, &StepShape) {
        let mut output = self.spare.pop().unwrap_or_default();
        self.scheduler.schedule(&mut output);
        self.shape.clear();
        for s in &output.scheduled {
            self.shape.push(StepRequest { new_tokens: s.tokens, context_tokens: s.context, samples: s.samples });
        }
        self.in_flight.push_back(output);
        let price = if self.shape.requests.is_empty() { StepPrice::default() } else { self.environment.price(&self.shape) };
        (price, &self.shape)
    }

    /// Apply the outputs of the oldest launched batch, which ended at `now_us`; finished
    /// requests go to `finished`.
    pub fn complete_oldest(&mut self, now_us: u64, finished: &mut Vec<FinishedRequest>) {
        let Some(batch) = self.in_flight.pop_front() else { return };
        self.scheduler.update_from_output(&batch, now_us, &mut self.update);
        finished.append(&mut self.update.finished);
        self.spare.push(batch);
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
