//! The token-to-KV pool, counted in pages.

/// The token-to-KV pool in pages (`TokenToKVPoolAllocator` for pages of one token,
/// `PagedTokenToKVPoolAllocator` above): pages handed out from the front; freed ones return to
/// the back for single-token pages and to the front, in ascending order, for larger ones.
#[derive(Clone, Debug)]
pub(super) struct SlotPool {
    pub(super) page_size: u32,
    pub(super) free_pages: std::collections::VecDeque<u32>,
}

impl SlotPool {
    pub(super) fn new(pool_tokens: usize, page_size: u32) -> Self {
        Self { page_size, free_pages: (1..=(pool_tokens / page_size as usize) as u32).collect() }
    }

    pub(super) fn available(&self) -> usize {
        self.free_pages.len() * self.page_size as usize
    }

    pub(super) fn take_page(&mut self) -> u32 {
        self.free_pages.pop_front().expect("admission budgets leave room for every allocation")
    }

    pub(super) fn give_back(&mut self, slots: &[u32]) {
        if slots.is_empty() {
            return;
        }
        if self.page_size == 1 {
            self.free_pages.extend(slots.iter().copied());
            return;
        }
        let pages: std::collections::BTreeSet<u32> = slots.iter().map(|s| s / self.page_size).collect();
        for &page in pages.iter().rev() {
            self.free_pages.push_front(page);
        }
    }
}
