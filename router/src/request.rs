//! A request as the router's scheduling cycle receives it.
//!
//! blis-actor's clients send pre-tokenized completions (`prompt` as token ids), so upstream's
//! token producer passes the ids straight through as the request's `TokenizedPrompt` (its
//! estimate backend does so for token-id inputs, and the vLLM render backend returns the same
//! ids); there is one prompt per request. Headers are those session affinity reads: the session
//! id the client sends and the session tokens it echoes (`docs/ROUTING.md`, "Session affinity and
//! P/D selection").

use crate::approx_prefix::PromptDigests;

/// What the router reads of one request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoutingRequest<'a> {
    /// The request's key, unique in the run.
    pub key: u64,
    /// The model it names (after any rewrite).
    pub model: &'a str,
    /// The prompt's token ids.
    pub prompt_token_ids: &'a [u32],
    /// The inference objective's priority (0 by default; negative means sheddable).
    pub priority: i64,
    /// The request's `cache_salt`, empty when it has none.
    pub cache_salt: &'a [u8],
    /// The client's output cap (`max_tokens`), when it gives one.
    pub max_tokens: Option<u64>,
    /// The request headers a plugin may read, names lower-cased (as upstream's ingestion
    /// lower-cases them); empty unless the router reads headers ([`crate::Router::reads_headers`]).
    pub headers: &'a [(String, String)],
    /// The prompt's block digests, made ahead of routing by its client (none when it made none):
    /// the approximate prefix producer chains them instead of reading the ids when they were
    /// made for the block size it hashes with.
    pub prompt_digests: Option<&'a PromptDigests>,
}

impl<'a> RoutingRequest<'a> {
    /// The value of header `name` (lower-case), if the request carries it.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}
