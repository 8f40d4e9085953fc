//! A request as the scheduler tracks it: its tokens, KV row, tree lock and progress.

use super::{Finish, NodeId};

#[derive(Clone, Debug)]
pub(super) struct Request {
    pub(super) origin: Vec<u32>,
    pub(super) output: Vec<u32>,
    /// `full_untruncated_fill_ids`: prompt and outputs as of the last refresh, not of now.
    pub(super) fill_ids: Vec<u32>,
    pub(super) max_new_tokens: usize,
    pub(super) prefix_len: usize,
    pub(super) num_matched: usize,
    pub(super) extend_end: usize,
    pub(super) kv_committed: usize,
    pub(super) kv_allocated: usize,
    pub(super) cache_protected_len: usize,
    pub(super) cache_inserted_len: usize,
    pub(super) last_node: NodeId,
    pub(super) lock: Option<NodeId>,
    pub(super) has_row: bool,
    pub(super) row: Vec<u32>,
    pub(super) inflight_middle_chunks: i64,
    pub(super) is_retracted: bool,
    pub(super) retracted_stain: bool,
    pub(super) to_finish: bool,
    pub(super) finished: Option<Finish>,
    pub(super) finished_len: Option<usize>,
}

impl Request {
    pub(super) fn fill(&self) -> Vec<u32> {
        let mut fill = self.origin.clone();
        fill.extend_from_slice(&self.output);
        fill
    }

    /// `refresh_fill_ids`: bring `fill_ids` up to the outputs produced since.
    pub(super) fn refresh_fill(&mut self) {
        self.fill_ids.clear();
        self.fill_ids.extend_from_slice(&self.origin);
        self.fill_ids.extend_from_slice(&self.output);
    }

    pub(super) fn owned_kv_len(&self) -> usize {
        match self.finished_len {
            None => self.kv_committed,
            Some(len) => self.kv_committed.min(self.origin.len() + len.min(self.output.len())),
        }
    }
}
