//! The waiting queue: first come first served, or by priority.
//!
//! FCFS is a deque: new requests join the back, preempted ones the front. Under the priority
//! policy vLLM keeps a heap ordered by `(priority, arrival_time, request_id)` — the id compared
//! as a string — and "prepending" a preempted request is an ordinary push; an ordered set gives
//! the same pop order.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use super::scheduler::RequestHandle;

/// The priority order of a waiting request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct PriorityKey {
    pub(crate) priority: i64,
    pub(crate) arrival_us: u64,
    pub(crate) name: Arc<str>,
    pub(crate) handle: RequestHandle,
}

/// Requests waiting for admission.
#[derive(Clone, Debug)]
pub(crate) enum WaitingQueue {
    /// First come first served.
    Fcfs(VecDeque<RequestHandle>),
    /// Lowest `(priority, arrival, id)` first.
    Priority(BTreeSet<PriorityKey>),
}

impl WaitingQueue {
    pub(crate) fn len(&self) -> usize {
        match self {
            WaitingQueue::Fcfs(q) => q.len(),
            WaitingQueue::Priority(q) => q.len(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The request admission considers next.
    pub(crate) fn peek(&self) -> Option<RequestHandle> {
        match self {
            WaitingQueue::Fcfs(q) => q.front().copied(),
            WaitingQueue::Priority(q) => q.first().map(|k| k.handle),
        }
    }

    /// Remove the request `peek` returned.
    pub(crate) fn pop(&mut self) {
        match self {
            WaitingQueue::Fcfs(q) => {
                q.pop_front();
            }
            WaitingQueue::Priority(q) => {
                q.pop_first();
            }
        }
    }

    /// A new request.
    pub(crate) fn add(&mut self, key: PriorityKey) {
        match self {
            WaitingQueue::Fcfs(q) => q.push_back(key.handle),
            WaitingQueue::Priority(q) => {
                q.insert(key);
            }
        }
    }

    /// A preempted request: to the front (FCFS) or back into the order (priority).
    pub(crate) fn prepend(&mut self, key: PriorityKey) {
        match self {
            WaitingQueue::Fcfs(q) => q.push_front(key.handle),
            WaitingQueue::Priority(q) => {
                q.insert(key);
            }
        }
    }

    /// Remove a request wherever it is.
    pub(crate) fn remove(&mut self, key: &PriorityKey) {
        match self {
            WaitingQueue::Fcfs(q) => {
                if let Some(i) = q.iter().position(|&h| h == key.handle) {
                    q.remove(i);
                }
            }
            WaitingQueue::Priority(q) => {
                q.remove(key);
            }
        }
    }

    /// The requests in pop order.
    pub(crate) fn iter(&self) -> Box<dyn Iterator<Item = RequestHandle> + '_> {
        match self {
            WaitingQueue::Fcfs(q) => Box::new(q.iter().copied()),
            WaitingQueue::Priority(q) => Box::new(q.iter().map(|k| k.handle)),
        }
    }
}
