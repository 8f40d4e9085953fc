//! The SGLang port: release 0.5.23's KV-cache rules as plain state machines.
//!
//! So far the radix cache ([`radix_cache`]), proven operation by operation against the
//! release's own `UnifiedRadixCache` by `tests/sglang_radix_oracle.rs`; the scheduler that
//! drives it is issue 22's next part.

pub mod radix_cache;
