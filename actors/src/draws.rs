//! A client's token ids: drawn from the run's named substreams as each call is sent, or ahead of
//! the simulation on a thread of their own.
//!
//! Every id comes from a substream named by the client, the request, the node and the prompt
//! part (a shared part by its name), so the ids do not depend on when or where they are drawn:
//! a client that reads its source and draws its requests' ids ahead, on another core, sends the
//! same ids as one that draws them as it sends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::thread::JoinHandle;

use blis_contracts::{FieldError, NodeKind, PromptPart, RequestSpec};
use blis_engines::vllm::KeysAhead;
use blis_kernel::{Streams, Substream};
use blis_router::approx_prefix::PromptDigests;

use crate::workload::{Planned, RequestSource};

/// Requests handed over at a time: one hand-over (and at most one wake-up of either thread) per
/// batch, not per request.
const BATCH: usize = 128;

/// Batches drawn ahead of the simulation, at most.
const BATCHES_AHEAD: usize = 2;

/// What a client drawing ahead also makes of each whole prompt, off the simulation's thread,
/// so that the engines and the router need not read its ids.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MadeAhead {
    /// The block size every vLLM instance keys its prefix cache by, when they share one: the
    /// prompt's and output's block keys are made for it.
    pub key_block_size: Option<u32>,
    /// The block size and per-prompt block cap llm-d's approximate prefix producer hashes
    /// prompts with, when the router runs one: the prompt's block digests are made for them.
    pub digest_plan: Option<(u32, usize)>,
}

/// The substreams a client's token ids come from.
#[derive(Clone, Debug)]
pub(crate) struct TokenDraws {
    streams: Streams,
    component: String,
    vocab_size: u32,
    made_ahead: MadeAhead,
}

impl TokenDraws {
    /// The draws of the client whose substreams are named by `component`, each id below
    /// `vocab_size`; requests drawn ahead come with what `made_ahead` asks for.
    pub(crate) fn new(
        streams: Streams,
        component: String,
        vocab_size: u32,
        made_ahead: MadeAhead,
    ) -> TokenDraws {
        TokenDraws { streams, component, vocab_size, made_ahead }
    }

    /// `count` ids of prompt part `part` of node `node` of request `request`, appended to `into`.
    fn prompt_tokens(&self, request: &str, node: &str, part: usize, count: u32, into: &mut Vec<u32>) {
        let mut digits = itoa::Buffer::new();
        let entity = [request, "/", node, "/", digits.format(part)];
        self.ids(self.streams.stream_of_parts(&self.component, "prompt-tokens", &entity), count, into);
    }

    /// The ids of the shared part `name`, `count` long, appended to `into`.
    fn shared_tokens(&self, name: &str, count: u32, into: &mut Vec<u32>) {
        self.ids(self.streams.stream("workload", "shared-tokens", name), count, into);
    }

    /// The `count` output ids of node `node` of request `request`, appended to `into`.
    pub(crate) fn output_tokens(&self, request: &str, node: &str, count: u32, into: &mut Vec<u32>) {
        let entity = [request, "/", node];
        self.ids(self.streams.stream_of_parts(&self.component, "output-tokens", &entity), count, into);
    }

    /// `count` ids below the vocabulary's size from `stream`, appended to `into`.
    fn ids(&self, mut stream: Substream, count: u32, into: &mut Vec<u32>) {
        stream.extend_below(self.vocab_size, count as usize, into);
    }

    /// Every id the calls of `spec` draw: a call's whole prompt when nothing in it waits on
    /// the run (a history), else its parts in buffers taken from `spare`; `scratch` is reused.
    fn draw_request(&self, spec: &RequestSpec, spare: &mut Vec<Vec<u32>>, scratch: &mut Vec<u32>) -> Drawn {
        let nodes = spec
            .nodes
            .iter()
            .map(|node| {
                let NodeKind::Llm(call) = &node.kind else { return None };
                let prompt = if call.prompt.iter().any(|part| matches!(part, PromptPart::History(_))) {
                    let parts = call
                        .prompt
                        .iter()
                        .enumerate()
                        .map(|(j, part)| {
                            matches!(part, PromptPart::Tokens(_) | PromptPart::Shared { .. }).then(|| {
                                let mut ids = spare.pop().unwrap_or_default();
                                ids.clear();
                                self.prompt_part(&spec.id, &node.id, j, part, &mut ids);
                                ids
                            })
                        })
                        .collect();
                    DrawnPrompt::Parts(parts)
                } else {
                    scratch.clear();
                    for (j, part) in call.prompt.iter().enumerate() {
                        self.prompt_part(&spec.id, &node.id, j, part, scratch);
                    }
                    DrawnPrompt::Whole(Arc::from(scratch.as_slice()))
                };
                scratch.clear();
                self.output_tokens(&spec.id, &node.id, call.output_tokens, scratch);
                let (keys, digests) = match &prompt {
                    DrawnPrompt::Whole(prompt) => (
                        self.made_ahead.key_block_size.map(|size| KeysAhead::of(prompt, scratch, size)),
                        self.made_ahead.digest_plan.map(|(size, cap)| PromptDigests::of(prompt, size, cap)),
                    ),
                    DrawnPrompt::Parts(_) => (None, None),
                };
                Some(NodeDraws { prompt, output: Arc::from(scratch.as_slice()), keys, digests })
            })
            .collect();
        Drawn { nodes }
    }

    /// The ids of prompt part `part` (number `j` of node `node` of request `request`) appended
    /// to `into`: drawn, or given; a history, which only the run knows, has none here.
    pub(crate) fn prompt_part(
        &self,
        request: &str,
        node: &str,
        j: usize,
        part: &PromptPart,
        into: &mut Vec<u32>,
    ) {
        match part {
            PromptPart::Tokens(count) => self.prompt_tokens(request, node, j, *count, into),
            PromptPart::Shared { name, tokens } => self.shared_tokens(name, *tokens, into),
            PromptPart::TokenIds(ids) => into.extend_from_slice(ids),
            PromptPart::History(_) => {}
        }
    }
}

/// The ids a request's calls draw, drawn ahead: for each node, an LLM node's draws.
#[derive(Debug)]
pub(crate) struct Drawn {
    nodes: Vec<Option<NodeDraws>>,
}

impl Drawn {
    /// Node `node`'s draws, taken (none for a node that is not an LLM call).
    pub(crate) fn take(&mut self, node: usize) -> Option<NodeDraws> {
        self.nodes.get_mut(node).and_then(Option::take)
    }
}

/// One LLM call's ids drawn ahead: its prompt and its output.
#[derive(Debug)]
pub(crate) struct NodeDraws {
    /// The prompt, whole or in parts.
    pub(crate) prompt: DrawnPrompt,
    /// The output ids.
    pub(crate) output: Arc<[u32]>,
    /// The keys of the prompt's and output's blocks, for a whole prompt when the cluster's
    /// vLLM instances share a block size.
    pub(crate) keys: Option<KeysAhead>,
    /// The whole prompt's block digests, when the router's approximate prefix producer hashes
    /// prompts.
    pub(crate) digests: Option<PromptDigests>,
}

/// A call's prompt drawn ahead.
#[derive(Debug)]
pub(crate) enum DrawnPrompt {
    /// Every id of it, assembled on the drawing thread (nothing in it waits on the run).
    Whole(Arc<[u32]>),
    /// Its parts' ids in order (none for a part that draws nothing: token ids given, or a
    /// history), for the client to assemble with the history it has.
    Parts(Vec<Option<Vec<u32>>>),
}

/// What the drawing thread hands the client.
enum Ahead {
    /// The source's next requests, in order, their ids drawn.
    Requests(Vec<(Planned, Drawn)>),
    /// The source is exhausted; why, if it ended early.
    End(Option<FieldError>),
}

/// A client's source read, and its requests' ids drawn, on a thread of their own, up to
/// [`BATCHES_AHEAD`] batches of [`BATCH`] requests ahead. A prompt with no history, and every
/// output, is assembled there into the shared array the engine request carries, so the
/// simulation's thread copies no id; the part buffers of a prompt with a history go back to be
/// reused there once the client has assembled it.
pub(crate) struct DrawAhead {
    requests: Option<Receiver<Ahead>>,
    /// The batch being taken, in order.
    batch: VecDeque<(Planned, Drawn)>,
    spent: Sender<Spent>,
    /// Ended requests gathered to be freed on the drawing thread, sent [`FREED_TOGETHER`] at a
    /// time.
    to_free: Vec<Box<dyn Send>>,
    thread: Option<JoinHandle<()>>,
    /// What the source's end reported, once it has been read.
    ended: Option<Option<FieldError>>,
}

impl DrawAhead {
    /// Start reading `source` and drawing with `draws`; the source back if no thread could be
    /// started (the client then draws as it sends).
    pub(crate) fn start(
        source: Box<dyn RequestSource>,
        draws: TokenDraws,
    ) -> Result<DrawAhead, Box<dyn RequestSource>> {
        let (to_client, requests) = sync_channel::<Ahead>(BATCHES_AHEAD);
        let (spent, from_client) = channel::<Spent>();
        // The source crosses once the thread runs, so a thread that cannot start leaves it here.
        let (hand_over, handed) = sync_channel::<Box<dyn RequestSource>>(1);
        let started = std::thread::Builder::new().name("token-draws".to_owned()).spawn(move || {
            if let Ok(mut source) = handed.recv() {
                draw_ahead(&mut *source, &draws, &to_client, &from_client);
            }
        });
        let Ok(thread) = started else { return Err(source) };
        // The thread is waiting for it, with room for it in the channel.
        if let Err(returned) = hand_over.send(source) {
            return Err(returned.0);
        }
        Ok(DrawAhead {
            requests: Some(requests),
            batch: VecDeque::new(),
            spent,
            to_free: Vec::new(),
            thread: Some(thread),
            ended: None,
        })
    }

    /// The source's next request and its ids; `None` at the end.
    pub(crate) fn next_request(&mut self) -> Option<(Planned, Drawn)> {
        if let Some(request) = self.batch.pop_front() {
            return Some(request);
        }
        if self.ended.is_some() {
            return None;
        }
        let received = self.requests.as_ref().map(Receiver::recv);
        match received {
            Some(Ok(Ahead::Requests(batch))) => {
                self.batch = batch.into();
                self.batch.pop_front()
            }
            Some(Ok(Ahead::End(error))) => {
                self.ended = Some(error);
                None
            }
            // The thread stopped without an end: it panicked, and the panic is the run's.
            Some(Err(_)) | None => {
                self.requests = None;
                if let Some(Err(panic)) = self.thread.take().map(JoinHandle::join) {
                    std::panic::resume_unwind(panic);
                }
                unreachable!("the drawing thread ends its stream before it stops")
            }
        }
    }

    /// Why the source ended early, once its end has been read.
    pub(crate) fn error(&self) -> Option<&FieldError> {
        self.ended.as_ref().and_then(Option::as_ref)
    }

    /// Hand a call's spent prompt buffers back to the drawing thread.
    pub(crate) fn give_back(&self, draws: NodeDraws) {
        if let DrawnPrompt::Parts(parts) = draws.prompt {
            // A thread already stopped has no use for them; they are freed here.
            let _ = self.spent.send(Spent::Parts(parts));
        }
    }

    /// Free an ended request on the drawing thread, which allocated most of what it holds (its
    /// spec, its token ids), so that the simulation's thread neither walks it nor frees memory
    /// another thread owns.
    pub(crate) fn free_later(&mut self, ended: Box<dyn Send>) {
        self.to_free.push(ended);
        if self.to_free.len() >= FREED_TOGETHER {
            let batch = std::mem::replace(&mut self.to_free, Vec::with_capacity(FREED_TOGETHER));
            // A thread already stopped has no use for them; they are freed here.
            let _ = self.spent.send(Spent::Ended(batch));
        }
    }
}

impl Drop for DrawAhead {
    fn drop(&mut self) {
        // Closing the stream stops a thread waiting to hand over a request.
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            // A panic after the client stopped reading changed nothing the run reports.
            let _ = thread.join();
        }
    }
}

/// What the client hands back to the drawing thread.
enum Spent {
    /// A call's prompt part buffers, to be reused.
    Parts(Vec<Option<Vec<u32>>>),
    /// Ended requests, to be freed.
    Ended(Vec<Box<dyn Send>>),
}

/// Ended requests sent to the drawing thread together.
const FREED_TOGETHER: usize = 64;

/// The drawing thread: every request of `source` with its ids, in order, then the end.
fn draw_ahead(
    source: &mut dyn RequestSource,
    draws: &TokenDraws,
    to_client: &SyncSender<Ahead>,
    spent: &Receiver<Spent>,
) {
    let mut spare: Vec<Vec<u32>> = Vec::new();
    let mut scratch = Vec::new();
    loop {
        for returned in spent.try_iter() {
            match returned {
                Spent::Parts(parts) => spare.extend(parts.into_iter().flatten()),
                Spent::Ended(ended) => drop(ended),
            }
        }
        let mut batch = Vec::with_capacity(BATCH);
        while batch.len() < BATCH
            && let Some(planned) = source.next_request()
        {
            let drawn = draws.draw_request(&planned.spec, &mut spare, &mut scratch);
            batch.push((planned, drawn));
        }
        let last = batch.len() < BATCH;
        // A send fails when the client is gone (the run stopped before its source ended).
        if !batch.is_empty() && to_client.send(Ahead::Requests(batch)).is_err() {
            return;
        }
        if last {
            let _ = to_client.send(Ahead::End(source.error().cloned()));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::Pacing;

    /// Requests from a list, then an end with `error`.
    struct Listed(std::vec::IntoIter<RequestSpec>, Option<FieldError>);

    impl RequestSource for Listed {
        fn pacing(&self) -> Pacing {
            Pacing::Open
        }

        fn next_request(&mut self) -> Option<Planned> {
            self.0.next().map(|spec| Planned { spec, stage: 0 })
        }

        fn error(&self) -> Option<&FieldError> {
            self.1.as_ref()
        }
    }

    fn requests(count: usize) -> Vec<RequestSpec> {
        (0..count)
            .map(|i| {
                let line = format!(
                    r#"{{"id":"r{i}","arrival_us":{i},"nodes":[{{"kind":"llm","id":"a","prompt":[{{"shared":{{"name":"s{}","tokens":30}}}},{{"tokens":{}}},{{"token_ids":[7]}}],"output_tokens":{}}},{{"kind":"tool","id":"t","parents":["a"],"duration_us":5}},{{"kind":"llm","id":"b","parents":["t"],"prompt":[{{"history":"a"}},{{"tokens":3}}],"output_tokens":2}}]}}"#,
                    i % 2,
                    1 + i % 9,
                    1 + i % 4
                );
                serde_json::from_str(&line).unwrap()
            })
            .collect()
    }

    fn draws() -> TokenDraws {
        TokenDraws::new(Streams::new(5), "client/c".to_owned(), 1000, MadeAhead::default())
    }

    #[test]
    fn drawn_ahead_the_requests_come_in_order_with_the_ids_drawn_as_sent_then_the_sources_end() {
        let count = 3 * BATCH + 5;
        let error = FieldError::new("workload.path", "w.jsonl", "changed after it was checked");
        let mut ahead =
            DrawAhead::start(Box::new(Listed(requests(count).into_iter(), Some(error.clone()))), draws())
                .unwrap_or_else(|_| panic!("a thread starts"));
        let direct = draws();
        for spec in requests(count) {
            let (planned, mut drawn) = ahead.next_request().expect("every request comes");
            assert_eq!(planned.spec, spec);
            let a = drawn.take(0).expect("node a is a call");
            let mut shared = Vec::new();
            direct.shared_tokens(
                &format!("s{}", spec.id[1..].parse::<usize>().unwrap() % 2),
                30,
                &mut shared,
            );
            let mut own = Vec::new();
            let NodeKind::Llm(call) = &spec.nodes[0].kind else { unreachable!() };
            let PromptPart::Tokens(n) = call.prompt[1] else { unreachable!() };
            direct.prompt_tokens(&spec.id, "a", 1, n, &mut own);
            let whole: Vec<u32> = [&shared[..], &own[..], &[7]].concat();
            assert!(
                matches!(&a.prompt, DrawnPrompt::Whole(ids) if ids[..] == whole[..]),
                "a prompt without a history comes whole, given ids included"
            );
            let mut output = Vec::new();
            direct.output_tokens(&spec.id, "a", call.output_tokens, &mut output);
            assert_eq!(a.output[..], output[..]);
            assert!(drawn.take(1).is_none(), "a tool draws nothing");
            let b = drawn.take(2).expect("node b is a call");
            let mut tail = Vec::new();
            direct.prompt_tokens(&spec.id, "b", 1, 3, &mut tail);
            let DrawnPrompt::Parts(parts) = &b.prompt else {
                panic!("a prompt with a history comes in parts")
            };
            assert_eq!(parts[0], None, "a history is the earlier call's, not drawn");
            assert_eq!(parts[1].as_deref(), Some(&tail[..]));
            ahead.give_back(a);
            ahead.give_back(b);
        }
        assert!(ahead.next_request().is_none());
        assert_eq!(ahead.error(), Some(&error));
        assert!(ahead.next_request().is_none(), "the end stays the end");
    }

    #[test]
    fn a_client_that_stops_reading_stops_the_drawing_thread() {
        let mut ahead = DrawAhead::start(Box::new(Listed(requests(10 * BATCH).into_iter(), None)), draws())
            .unwrap_or_else(|_| panic!("a thread starts"));
        assert!(ahead.next_request().is_some());
        // Dropping joins the thread, which is waiting to hand over a batch: no hang.
        drop(ahead);
    }
}
