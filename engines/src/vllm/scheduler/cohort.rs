//! The decode cohort: running requests that decode one token a step with nothing else happening
//! to them, advanced by counting instead of one by one (issue 13's O(change) step).
//!
//! Under FCFS, a running request past its prompt gets one token a step: each schedule adds one
//! computed token (and, under asynchronous scheduling, an output placeholder), each update adds
//! one token (and spends the placeholder). Nothing else happens to it until it needs a new
//! block, fills a block (its key is made and the block cached), reaches its last token, or is
//! preempted.
//! When a step leaves a request with nothing due before a known batch, it *joins* the cohort
//! for the batches up to then — its *run*: those batches count it (the step's totals add its one
//! token and its context) without reading it. Its fields are brought up to date (*settled*)
//! whenever something reads it (the schedule after its run, where it is walked as before; an
//! update of a batch that lists it; a preemption; an abort), and after it leaves, at every update
//! until its run's last batches have completed. Token times come from a log of batch end times.
//!
//! A run ends before the first schedule that needs a new block or could see a filled block
//! (vLLM caches a block at the first schedule after the update that fills it); whether a
//! schedule sees the update just before it depends on the engine's loop, so a run whose
//! schedules go on past the filling update is cut if that update comes first. The walk that
//! caches the block and takes the next one may keep the request in the cohort, its run going
//! on, rather than list it: under asynchronous scheduling its run's last updates are still in
//! flight then, so a fresh run could not start until the schedule after.
//!
//! The walk is the faithful one for everything not in the cohort, in running order; a step where
//! the budget or the free blocks could bind (so that order decides who gets what) first
//! disbands the cohort and walks every request. Outputs are identical to stepping every request
//! (`engines/tests/vllm_cohort.rs` runs both).

use std::collections::BTreeMap;

use super::RequestHandle;
use crate::vllm::request::Request;

/// Most batches in one run; a run never reaches back further than the log holds.
const LONGEST_RUN: u64 = 64;

/// Batch end times kept, a power of two above a run plus the batches in flight.
const LOG_BATCHES: usize = 256;

/// Lists of members by the batch they leave at, a power of two above a run.
const LEAVING_LISTS: usize = 128;

/// A request's run in the cohort: the batches that count it without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CohortRun {
    /// Its first batch.
    first: u64,
    /// Its last batch.
    last: u64,
    /// The request's computed tokens when `first` was scheduled.
    computed_at_first: u32,
    /// The first batch of the run whose schedule its fields do not count yet.
    unscheduled: u64,
    /// The first batch of the run whose update its fields do not count yet.
    unupdated: u64,
}

impl CohortRun {
    /// The request's computed tokens when `batch` (in the run, or the batch before it) was
    /// scheduled: the context the step priced for it.
    fn context_at(&self, batch: u64) -> u64 {
        u64::from(self.computed_at_first) + batch - self.first
    }
}

/// The cohort's part of a scheduled step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CohortStep {
    /// Requests it advanced by one token each (each samples one).
    pub requests: u32,
    /// Their computed tokens before the step.
    pub context_tokens: u64,
}

/// The limits a run is planned within.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunLimits {
    /// Tokens per block.
    pub(crate) block_size: u32,
    /// Whether full blocks are keyed and cached.
    pub(crate) caching: bool,
    /// The instance's longest prompt plus output.
    pub(crate) max_model_len: u32,
}

/// How long a run may go on after the batch that last advanced its request.
#[derive(Clone, Copy, Debug)]
struct RunLimit {
    /// Batches it may run.
    length: u64,
    /// Batches until the update that fills the block after the request's cached ones, when
    /// its schedules may go on after that update.
    fills_in: Option<u64>,
}

/// The run a decoding request with `computed` tokens (its last just scheduled) and `in_flight`
/// batches listing it may have, if any: nothing may happen to it in the run but one token a
/// batch.
fn run_limit(request: &Request, computed: u32, in_flight: u32, limits: RunLimits) -> Option<RunLimit> {
    let prompt_and_output = request.num_prompt_tokens + request.max_tokens;
    if prompt_and_output >= limits.max_model_len {
        return None;
    }
    // Its tokens once the batches in flight (all listing it, the latest included) have
    // completed: a decoding request has computed all of them but the last.
    let tokens_landed = computed + 1;
    debug_assert_eq!(request.num_tokens() + in_flight, tokens_landed, "a decoding request");
    // The run's updates leave it short of its last token (the update that lands it finishes
    // the request).
    let last_tokens = prompt_and_output - 1;
    if last_tokens <= tokens_landed {
        return None;
    }
    let mut fills_in = None;
    if limits.caching {
        // No schedule of the run may see the block after its cached ones full: vLLM caches a
        // block at the first schedule after the update that fills it, and that schedule is a
        // walk. A schedule sees at most the updates of the batches before it; whether it sees
        // the one just before it depends on the engine's loop, so a run whose schedules go on
        // after the filling update is cut when that update comes first
        // ([`Cohort::cut_at_fill`]). The request is keyed as it is settled.
        let cached = request.num_cached_blocks.unwrap_or(0) as u32;
        let filled_at = (cached + 1) * limits.block_size;
        if filled_at <= tokens_landed {
            return None;
        }
        fills_in = Some(u64::from(filled_at - tokens_landed));
    }
    // Its schedules need no new block.
    let capacity = request.blocks.len() as u32 * limits.block_size;
    if computed >= capacity {
        return None;
    }
    let length = u64::from((last_tokens - tokens_landed).min(capacity - computed)).min(LONGEST_RUN);
    Some(RunLimit { length, fills_in })
}

/// The cohort of one scheduler, and the batch counts it is kept against.
#[derive(Clone, Debug)]
pub(crate) struct Cohort {
    /// Whether requests may join (the engine's choice; the scheduler adds its scope).
    pub(crate) enabled: bool,
    /// Whether steps are scheduled asynchronously (a scheduled token is an output placeholder
    /// until its batch completes).
    asynchronous: bool,
    /// By request slot: the last batch of its run, 0 when it has none under way.
    run_through: Vec<u64>,
    /// Members counted in the latest scheduled batch.
    members: u32,
    /// Their computed tokens when the latest batch was scheduled.
    context_tokens: u64,
    /// Requests joining from the batch after the one being scheduled, and their computed tokens
    /// before the batch being scheduled advanced them.
    joining: u32,
    joining_context_tokens: u64,
    /// Batch end times, µs, by batch id modulo [`LOG_BATCHES`].
    end_times: Vec<u64>,
    /// By batch modulo [`LEAVING_LISTS`]: the members whose run ends the batch before, with
    /// their places in the running list (an entry whose run was cut since is stale).
    leaving: Vec<Vec<(u64, RequestHandle)>>,
    /// By batch modulo [`LEAVING_LISTS`]: members whose run's schedules go on after the update
    /// of that batch fills the block after their cached ones, with their run's first batch
    /// (an entry whose run was cut or ended since is stale).
    filling: Vec<Vec<(u64, RequestHandle)>>,
    /// Requests that left the cohort before their fields counted their whole run, settled at
    /// every update until they do, so that none waits for a walk that may not reach it (a step
    /// whose budget runs out first) while the end-time log wraps.
    departed: Vec<RequestHandle>,
    /// Tokens that in-flight batches counted for members aborted since, by batch.
    dropped: BTreeMap<u64, u32>,
    /// The latest batch scheduled (batches are numbered from 1).
    pub(crate) scheduled: u64,
    /// The latest batch whose outputs were applied.
    pub(crate) updated: u64,
}

impl Cohort {
    /// An empty cohort, enabled, for a scheduler that schedules asynchronously or not.
    pub(crate) fn new(asynchronous: bool) -> Cohort {
        Cohort {
            enabled: true,
            asynchronous,
            run_through: Vec::new(),
            members: 0,
            context_tokens: 0,
            joining: 0,
            joining_context_tokens: 0,
            end_times: vec![0; LOG_BATCHES],
            leaving: vec![Vec::new(); LEAVING_LISTS],
            filling: vec![Vec::new(); LEAVING_LISTS],
            departed: Vec::new(),
            dropped: BTreeMap::new(),
            scheduled: 0,
            updated: 0,
        }
    }

    /// The last batch of the run of the request in `slot`, 0 if none is under way.
    #[inline]
    pub(crate) fn run_through(&self, slot: u32) -> u64 {
        self.run_through.get(slot as usize).copied().unwrap_or(0)
    }

    /// Whether any run is under way.
    pub(crate) fn has_members(&self) -> bool {
        self.members > 0 || self.joining > 0
    }

    /// Members counted in the latest scheduled batch, or (while a batch is walked) those in it.
    pub(crate) fn members(&self) -> u32 {
        self.members
    }

    /// The members whose run ended with the batch before `batch` (and stale entries), each with
    /// its place in the running list; give the list back with [`Cohort::give_back_leaving`].
    pub(crate) fn take_leaving(&mut self, batch: u64) -> Vec<(u64, RequestHandle)> {
        std::mem::take(&mut self.leaving[batch as usize % LEAVING_LISTS])
    }

    /// Return the (emptied) list [`Cohort::take_leaving`] gave, keeping its allocation.
    pub(crate) fn give_back_leaving(&mut self, batch: u64, mut list: Vec<(u64, RequestHandle)>) {
        list.clear();
        self.leaving[batch as usize % LEAVING_LISTS] = list;
    }

    /// The members whose block after their cached ones the update of `batch` fills (and stale
    /// entries), each with its run's first batch; give the list back with
    /// [`Cohort::give_back_filling`].
    pub(crate) fn take_filling(&mut self, batch: u64) -> Vec<(u64, RequestHandle)> {
        std::mem::take(&mut self.filling[batch as usize % LEAVING_LISTS])
    }

    /// Return the (emptied) list [`Cohort::take_filling`] gave, keeping its allocation.
    pub(crate) fn give_back_filling(&mut self, batch: u64, mut list: Vec<(u64, RequestHandle)>) {
        list.clear();
        self.filling[batch as usize % LEAVING_LISTS] = list;
    }

    /// The update that fills the block after `request`'s cached ones has come before the
    /// schedules of its run (the run that began at `first`) ended: the run ends with the latest
    /// scheduled batch, so that the next schedule walks it and caches the block.
    pub(crate) fn cut_at_fill(&mut self, handle: RequestHandle, request: &mut Request, first: u64) {
        let slot = handle.slot;
        let through = self.run_through(slot);
        let Some(run) = request.cohort_run.as_mut() else { return };
        if through == 0 || run.first != first || through <= self.scheduled {
            return;
        }
        run.last = self.scheduled;
        self.run_through[slot as usize] = self.scheduled;
        self.leaving[(self.scheduled + 1) as usize % LEAVING_LISTS].push((request.running_seq, handle));
    }

    /// `request` (`handle`) leaves the cohort as the batch after its run is scheduled: the
    /// cohort stops counting it.
    pub(crate) fn leave(&mut self, handle: RequestHandle, request: &Request) {
        let slot = handle.slot;
        let through = self.run_through[slot as usize];
        let run = request.cohort_run.as_ref().expect("a member has a run");
        self.members -= 1;
        self.context_tokens -= run.context_at(through);
        self.run_through[slot as usize] = 0;
        self.departed.push(handle);
    }

    /// `request` (`handle`) leaves the cohort between steps (an abort, or a step that walks
    /// every request): its run is cut after the latest scheduled batch.
    pub(crate) fn cut(&mut self, handle: RequestHandle, request: &mut Request) {
        let slot = handle.slot;
        if self.run_through(slot) == 0 {
            return;
        }
        let run = request.cohort_run.as_mut().expect("a member has a run");
        self.members -= 1;
        self.context_tokens -= run.context_at(self.scheduled);
        run.last = run.last.min(self.scheduled);
        self.run_through[slot as usize] = 0;
        self.departed.push(handle);
    }

    /// Batch `batch` has been walked: its members' contexts advance by the token each got in the
    /// batch before, and those that joined in the walk are counted from the next; returns the
    /// cohort's part of this batch.
    pub(crate) fn count_step(&mut self, batch: u64) -> CohortStep {
        debug_assert_eq!(batch, self.scheduled + 1, "batches are scheduled in order");
        self.scheduled = batch;
        self.context_tokens += u64::from(self.members);
        let step = CohortStep { requests: self.members, context_tokens: self.context_tokens };
        self.members += std::mem::take(&mut self.joining);
        self.context_tokens += std::mem::take(&mut self.joining_context_tokens);
        step
    }

    /// Let `request` (`handle`), just advanced by one token in batch `batch` and sampling, join
    /// from the next batch, if nothing can happen to it there; returns whether it joined.
    pub(crate) fn try_join(
        &mut self,
        handle: RequestHandle,
        request: &mut Request,
        batch: u64,
        limits: RunLimits,
    ) -> bool {
        if request.cohort_run.is_some() {
            return false;
        }
        let computed = request.num_computed_tokens;
        let in_flight = if self.asynchronous { request.num_output_placeholders } else { 1 };
        let Some(limit) = run_limit(request, computed, in_flight, limits) else { return false };
        let first = batch + 1;
        let run = CohortRun {
            first,
            last: batch + limit.length,
            computed_at_first: computed,
            unscheduled: first,
            unupdated: first,
        };
        self.joining += 1;
        self.joining_context_tokens += run.context_at(batch);
        self.start_run(handle, request, run, batch, limit);
        true
    }

    /// Let `request` (`handle`), a member whose run ended with the batch before `batch` and
    /// which this batch's walk gives its one token (its new block taken and its full one
    /// cached), stay in the cohort from this batch on, its run going on as if it had not left,
    /// if nothing can happen to it for a while; returns whether it stayed. The walk then does
    /// not list it. This spares a walk where its run's last updates are still in flight, which
    /// keeps a fresh run from starting.
    pub(crate) fn try_rejoin(
        &mut self,
        handle: RequestHandle,
        request: &mut Request,
        batch: u64,
        limits: RunLimits,
    ) -> bool {
        let Some(run) = request.cohort_run else { return false };
        if run.last + 1 != batch || run.unscheduled != batch || self.run_through(handle.slot) != 0 {
            return false;
        }
        // Its fields as this batch's token would leave them.
        let computed = request.num_computed_tokens + 1;
        let in_flight = if self.asynchronous { request.num_output_placeholders + 1 } else { 1 };
        let Some(limit) = run_limit(request, computed, in_flight, limits) else { return false };
        let run = CohortRun { last: batch + limit.length, ..run };
        // Counted in this batch again, as [`Cohort::leave`] stopped counting it.
        self.members += 1;
        self.context_tokens += run.context_at(batch - 1);
        self.start_run(handle, request, run, batch, limit);
        true
    }

    /// Note `run` of `request` (`handle`), planned after batch `batch` within `limit`.
    fn start_run(
        &mut self,
        handle: RequestHandle,
        request: &mut Request,
        run: CohortRun,
        batch: u64,
        limit: RunLimit,
    ) {
        let slot = handle.slot;
        if self.run_through.len() <= slot as usize {
            self.run_through.resize(slot as usize + 1, 0);
        }
        self.run_through[slot as usize] = run.last;
        self.leaving[(run.last + 1) as usize % LEAVING_LISTS].push((request.running_seq, handle));
        if let Some(fills_in) = limit.fills_in {
            let filling_update = batch + fills_in;
            if filling_update < run.last {
                self.filling[filling_update as usize % LEAVING_LISTS].push((run.first, handle));
            }
        }
        request.cohort_run = Some(run);
    }

    /// Count in `request`'s fields the batches of its run scheduled and completed so far: its
    /// computed tokens and placeholders, its tokens (keyed as they are made) and their times.
    pub(crate) fn settle(
        &self,
        request: &mut Request,
        hash_block_size: Option<usize>,
        scratch: &mut Vec<u8>,
    ) {
        let Some(mut run) = request.cohort_run else { return };
        let scheduled_through = run.last.min(self.scheduled);
        if scheduled_through >= run.unscheduled {
            let batches = (scheduled_through + 1 - run.unscheduled) as u32;
            request.num_computed_tokens += batches;
            if self.asynchronous {
                request.num_output_placeholders += batches;
            }
            run.unscheduled = scheduled_through + 1;
        }
        let updated_through = run.last.min(self.updated);
        if updated_through >= run.unupdated {
            debug_assert!(self.updated - run.unupdated < LOG_BATCHES as u64, "a run outlived the log");
            let (from, to) = (run.unupdated as usize % LOG_BATCHES, updated_through as usize % LOG_BATCHES);
            if from <= to {
                request.token_times_us.extend_from_slice(&self.end_times[from..=to]);
            } else {
                request.token_times_us.extend_from_slice(&self.end_times[from..]);
                request.token_times_us.extend_from_slice(&self.end_times[..=to]);
            }
            let batches = (updated_through + 1 - run.unupdated) as u32;
            request.append_outputs(batches, hash_block_size, scratch);
            if self.asynchronous {
                request.num_output_placeholders -= batches;
            }
            run.unupdated = updated_through + 1;
        }
        request.cohort_run = (run.unupdated <= run.last).then_some(run);
    }

    /// Stop every run after the latest scheduled batch (a step that walks every request),
    /// `running` being the running list.
    pub(crate) fn disband(&mut self, running: &[RequestHandle], slots: &mut [(u32, Option<Request>)]) {
        if !self.has_members() {
            return;
        }
        for handle in running {
            if let Some(request) = slots[handle.slot as usize].1.as_mut() {
                self.cut(*handle, request);
            }
        }
        for list in self.leaving.iter_mut().chain(&mut self.filling) {
            list.clear();
        }
        debug_assert_eq!((self.members, self.context_tokens), (0, 0), "every member runs");
    }

    /// Batch `batch` completed at `end_us`: log its end time; returns the tokens its cohort part
    /// sampled (less those of members aborted meanwhile).
    pub(crate) fn complete(&mut self, batch: u64, end_us: u64, step: CohortStep) -> u32 {
        debug_assert_eq!(batch, self.updated + 1, "batches complete in order");
        self.updated = batch;
        self.end_times[batch as usize % LOG_BATCHES] = end_us;
        step.requests - self.dropped.remove(&batch).unwrap_or(0)
    }

    /// `request`, aborted with its run's batches from `unupdated` still in flight, drops their
    /// tokens.
    pub(crate) fn drop_in_flight(&mut self, request: &Request) {
        if let Some(run) = &request.cohort_run {
            for batch in run.unupdated..=run.last {
                *self.dropped.entry(batch).or_default() += 1;
            }
        }
    }

    /// The requests that left with their run not yet settled, taken to be settled (given back
    /// with [`Cohort::keep_departed`]).
    pub(crate) fn take_departed(&mut self) -> Vec<RequestHandle> {
        std::mem::take(&mut self.departed)
    }

    /// Put back those whose run is still not settled.
    pub(crate) fn keep_departed(&mut self, departed: Vec<RequestHandle>) {
        self.departed = departed;
    }
}
