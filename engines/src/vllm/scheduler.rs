//! vLLM V1's scheduler, one step at a time (synchronous scheduling, FCFS).
//!
//! A port of `v1/core/sched/scheduler.py` as `../shared/reference/vllm-sglang.md` §A describes
//! it. There is no prefill or decode phase: each request has `num_computed_tokens`, and each
//! step hands it new tokens so the count catches up with its prompt plus its outputs. One step:
//!
//! 1. **Running requests first**, in list order, while budget remains: each gets
//!    `min(remaining, long_prefill_token_threshold, budget, max_model_len − 1 − computed)` tokens;
//!    a request given zero tokens is skipped (the loop goes on). If its slots cannot be
//!    allocated, the tail of the running list is preempted (recompute: blocks freed, computed
//!    tokens reset, to the front of the waiting queue) until allocation succeeds or the request
//!    itself was the tail, in which case the running pass stops.
//! 2. **Waiting requests** only if nothing was preempted this step, while budget remains and
//!    fewer than `max_num_seqs` requests run: the head gets its remaining tokens cut to the budget
//!    (the chunked-prefill cut); if its slots cannot be allocated, admission stops — a waiting
//!    request never preempts.
//! 3. Every scheduled request's computed count advances at once (so a chunked prefill can be
//!    scheduled again next step).
//!
//! After the step runs, [`Scheduler::update_from_output`] gives one token to every scheduled
//! request that has now computed all its tokens (a non-final prefill chunk samples nothing),
//! finishes those that reached `max_tokens` or `max_model_len`, and frees their blocks.

use std::collections::VecDeque;

use blis_contracts::{StepRequest, StepShape};

use super::kv_cache_manager::KvCacheManager;
use super::request::{EngineRequest, Request, Status};

/// The scheduling limits of one instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedulerLimits {
    /// Most requests running.
    pub max_num_seqs: u32,
    /// Most tokens per step.
    pub max_num_batched_tokens: u32,
    /// Longest prompt plus output.
    pub max_model_len: u32,
    /// Whether a prompt may be split over steps.
    pub enable_chunked_prefill: bool,
    /// Per-request token cap per step (0: none).
    pub long_prefill_token_threshold: u32,
}

/// Why a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// It generated `max_tokens` tokens, or reached `max_model_len`.
    Length,
}

/// A request that ended, with the time each of its tokens was produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishedRequest {
    /// The caller's key.
    pub key: u64,
    /// When each output token was produced, µs (the end of the step that sampled it).
    pub token_times_us: Vec<u64>,
    /// Why it ended.
    pub reason: FinishReason,
    /// How many times it was preempted.
    pub num_preemptions: u32,
}

/// Why a request was refused on arrival.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Prompt plus requested output exceed `max_model_len` (vLLM's API server answers 400).
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

/// A change in one request's life, as the scheduler made it. The scheduler keeps the events of
/// its last calls until [`Scheduler::clear_events`], for timelines and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedulerEvent {
    /// Moved from the waiting queue to the running list; `resumed` after a preemption.
    Admitted {
        /// Whether it had been preempted.
        resumed: bool,
    },
    /// Preempted: blocks freed, back to the front of the waiting queue.
    Preempted,
    /// Sampled a token right after computing its prompt (or recomputing it after a
    /// preemption): its prefill is over.
    PrefillDone,
    /// Finished and left the running list.
    Finished,
}

/// Counts of what the scheduler did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedulerCounters {
    /// Steps scheduled with at least one token.
    pub steps: u64,
    /// Preemptions.
    pub preemptions: u64,
}

/// The scheduler of one vLLM instance.
#[derive(Clone, Debug)]
pub struct Scheduler {
    limits: SchedulerLimits,
    kv: KvCacheManager,
    requests: Vec<Option<Request>>,
    free_slots: Vec<u32>,
    waiting: VecDeque<u32>,
    running: Vec<u32>,
    scheduled: Vec<(u32, u32)>,
    shape: StepShape,
    counters: SchedulerCounters,
    events: Vec<(u64, SchedulerEvent)>,
}

impl Scheduler {
    /// A scheduler with `limits` over `kv`.
    pub fn new(limits: SchedulerLimits, kv: KvCacheManager) -> Scheduler {
        Scheduler {
            limits,
            kv,
            requests: Vec::new(),
            free_slots: Vec::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            scheduled: Vec::new(),
            shape: StepShape::default(),
            counters: SchedulerCounters::default(),
            events: Vec::new(),
        }
    }

    /// Accept a request into the waiting queue, or refuse it as vLLM's API server would.
    pub fn add_request(&mut self, request: &EngineRequest) -> Result<(), Rejection> {
        let prompt = request.prompt_token_ids.len() as u32;
        let max_tokens = request.output_token_ids.len() as u32;
        if prompt == 0 {
            return Err(Rejection::EmptyPrompt);
        }
        if u64::from(prompt) + u64::from(max_tokens) > u64::from(self.limits.max_model_len) {
            return Err(Rejection::ExceedsMaxModelLen {
                prompt,
                max_tokens,
                max_model_len: self.limits.max_model_len,
            });
        }
        let state = Request::new(request);
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.requests[slot as usize] = Some(state);
                slot
            }
            None => {
                self.requests.push(Some(state));
                (self.requests.len() - 1) as u32
            }
        };
        self.waiting.push_back(slot);
        Ok(())
    }

    /// Whether any request is waiting or running.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Requests running.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Requests waiting (new or preempted).
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// The KV-cache manager.
    pub fn kv(&self) -> &KvCacheManager {
        &self.kv
    }

    /// What the scheduler did so far.
    pub fn counters(&self) -> SchedulerCounters {
        self.counters
    }

    /// Request events since the last [`Scheduler::clear_events`], in the order they happened.
    pub fn events(&self) -> &[(u64, SchedulerEvent)] {
        &self.events
    }

    /// Forget the events seen so far.
    pub fn clear_events(&mut self) {
        self.events.clear();
    }

    /// The step last scheduled.
    pub fn shape(&self) -> &StepShape {
        &self.shape
    }

    /// Keys of the requests in the step last scheduled, in schedule order.
    pub fn scheduled_keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.scheduled.iter().map(|&(handle, _)| self.request(handle).key)
    }

    /// Keys of the requests held, each with whether it was ever scheduled.
    pub fn held(&self) -> impl Iterator<Item = (u64, bool)> + '_ {
        self.requests.iter().flatten().map(|r| (r.key, r.started))
    }

    /// Blocks held by requests, summed over block tables.
    pub fn blocks_held(&self) -> u64 {
        self.requests.iter().flatten().map(|r| r.blocks.len() as u64).sum()
    }

    /// Schedule the next step; returns its shape (empty when there is nothing to run).
    pub fn schedule(&mut self) -> &StepShape {
        self.scheduled.clear();
        self.shape.clear();
        let limits = self.limits;
        let mut budget = limits.max_num_batched_tokens;
        let mut preempted = false;

        // 1. Running requests, in order.
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let handle = self.running[i];
            let request = self.request(handle);
            let computed = request.num_computed_tokens;
            let mut n = request.num_tokens() - computed;
            if limits.long_prefill_token_threshold > 0 {
                n = n.min(limits.long_prefill_token_threshold);
            }
            n = n.min(budget).min(limits.max_model_len.saturating_sub(1).saturating_sub(computed));
            if n == 0 {
                i += 1;
                continue;
            }
            let mut allocated = false;
            loop {
                let request = self.requests[handle as usize].as_mut().expect("running requests exist");
                if self.kv.allocate_slots(&mut request.blocks, computed, n) {
                    allocated = true;
                    break;
                }
                // FCFS victim: the tail of the running list (the most recently admitted).
                let victim = self.running.pop().expect("the request itself is running");
                self.preempt(victim);
                preempted = true;
                if victim == handle {
                    break;
                }
            }
            if !allocated {
                break;
            }
            self.scheduled.push((handle, n));
            budget -= n;
            i += 1;
        }

        // 2. Waiting requests, only if nobody was preempted.
        while !preempted && budget > 0 {
            let Some(&handle) = self.waiting.front() else { break };
            if self.running.len() >= limits.max_num_seqs as usize {
                break;
            }
            let request = self.request(handle);
            let computed = request.num_computed_tokens;
            let mut n = request.num_tokens() - computed;
            if limits.long_prefill_token_threshold > 0 {
                n = n.min(limits.long_prefill_token_threshold);
            }
            if !limits.enable_chunked_prefill && n > budget {
                break;
            }
            n = n.min(budget);
            let request = self.requests[handle as usize].as_mut().expect("waiting requests exist");
            if !self.kv.allocate_slots(&mut request.blocks, computed, n) {
                break;
            }
            let resumed = request.status == Status::Preempted;
            request.status = Status::Running;
            self.events.push((request.key, SchedulerEvent::Admitted { resumed }));
            self.waiting.pop_front();
            self.running.push(handle);
            self.scheduled.push((handle, n));
            budget -= n;
        }

        // 3. Advance computed counts at once and describe the step.
        for &(handle, n) in &self.scheduled {
            let request = self.requests[handle as usize].as_mut().expect("scheduled requests exist");
            let context = request.num_computed_tokens;
            request.num_computed_tokens += n;
            request.started = true;
            let samples = request.num_computed_tokens >= request.num_tokens();
            self.shape.push(StepRequest { new_tokens: n, context_tokens: context, samples });
        }
        if !self.scheduled.is_empty() {
            self.counters.steps += 1;
        }
        &self.shape
    }

    /// Apply the outputs of the step last scheduled, which ended at `now_us`: one token to every
    /// request that computed all its tokens, finishing those that are done.
    pub fn update_from_output(&mut self, now_us: u64, finished: &mut Vec<FinishedRequest>) {
        let max_model_len = self.limits.max_model_len;
        let mut any_finished = false;
        for &(handle, _) in &self.scheduled {
            let request = self.requests[handle as usize].as_mut().expect("scheduled requests exist");
            if request.num_computed_tokens < request.num_tokens() {
                continue; // a prefill chunk that is not the last: nothing sampled
            }
            if request.in_prefill {
                request.in_prefill = false;
                self.events.push((request.key, SchedulerEvent::PrefillDone));
            }
            request.num_output_tokens += 1;
            request.token_times_us.push(now_us);
            if request.num_output_tokens >= request.max_tokens || request.num_tokens() >= max_model_len {
                request.finished = true;
                any_finished = true;
            }
        }
        if !any_finished {
            return;
        }
        let requests = &mut self.requests;
        let (kv, free_slots, events) = (&mut self.kv, &mut self.free_slots, &mut self.events);
        self.running.retain(|&handle| {
            let slot = &mut requests[handle as usize];
            if !slot.as_ref().is_some_and(|r| r.finished) {
                return true;
            }
            let mut request = slot.take().expect("checked above");
            events.push((request.key, SchedulerEvent::Finished));
            kv.free(&mut request.blocks);
            free_slots.push(handle);
            finished.push(FinishedRequest {
                key: request.key,
                token_times_us: request.token_times_us,
                reason: FinishReason::Length,
                num_preemptions: request.num_preemptions,
            });
            false
        });
    }

    fn request(&self, handle: u32) -> &Request {
        self.requests[handle as usize].as_ref().expect("queued requests exist")
    }

    fn preempt(&mut self, handle: u32) {
        let request = self.requests[handle as usize].as_mut().expect("running requests exist");
        self.kv.free(&mut request.blocks);
        request.num_computed_tokens = 0;
        request.in_prefill = true;
        request.status = Status::Preempted;
        self.events.push((request.key, SchedulerEvent::Preempted));
        request.num_preemptions += 1;
        self.counters.preemptions += 1;
        self.waiting.push_front(handle);
    }
}
