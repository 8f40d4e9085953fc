//! A randomised network of actors that stresses every path of the coordinator.
//!
//! Each node ticks on its own random timer (sometimes with a zero time advance, a transient
//! state), emits a message to a random peer at each tick (sometimes with zero delay), and
//! forwards what it receives a few hops further. Messages come in four classes. Every node keeps
//! an order-sensitive checksum of what it received, so any change in delivery order changes the
//! result. Used for host parity, run-twice determinism and the kernel benchmark.

use crate::actor::{Actor, ActorId, Context, Event, Outbox, TimeAdvance};
use crate::assembly::Assembly;
use crate::error::AssemblyError;
use crate::message::{Message, MessageClass};
use crate::observer::Description;
use crate::rng::{Streams, Substream};
use crate::time::SimDuration;

/// What travels between nodes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Token {
    /// 0..=3; also the message class.
    pub kind: u8,
    /// How many more times it will be forwarded.
    pub hops_left: u8,
    /// An arbitrary value folded into the receiver's checksum.
    pub value: u64,
}

impl Message for Token {
    fn class(&self) -> MessageClass {
        MessageClass(u16::from(self.kind))
    }
}

/// Parameters of a mesh.
#[derive(Clone, Copy, Debug)]
pub struct MeshConfig {
    /// Number of nodes.
    pub nodes: u32,
    /// Ticks per node before it falls silent.
    pub ticks: u32,
    /// Hops each emitted token is forwarded.
    pub hops: u8,
}

/// One node of the mesh.
pub struct Node {
    peers: Vec<ActorId>,
    draws: Substream,
    ticks_left: u32,
    hops: u8,
    next_tick: SimDuration,
    pending: Option<(ActorId, SimDuration, Token)>,
    checksum: u64,
    received: u64,
}

impl Node {
    fn new(peers: Vec<ActorId>, name: &str, config: MeshConfig, streams: Streams) -> Node {
        let mut node = Node {
            peers,
            draws: streams.stream("mesh", "node", name),
            ticks_left: config.ticks,
            hops: config.hops,
            next_tick: SimDuration::ZERO,
            pending: None,
            checksum: 0,
            received: 0,
        };
        node.plan_tick();
        node
    }

    /// The order-sensitive digest of everything this node received.
    pub fn checksum(&self) -> u64 {
        self.checksum
    }

    /// How many messages this node received.
    pub fn received(&self) -> u64 {
        self.received
    }

    fn delay(&mut self) -> SimDuration {
        if self.draws.below(4) == 0 {
            SimDuration::ZERO
        } else {
            SimDuration::from_micros(1 + self.draws.below(100))
        }
    }

    fn peer(&mut self) -> ActorId {
        self.peers[self.draws.below(self.peers.len() as u64) as usize]
    }

    fn plan_tick(&mut self) {
        if self.ticks_left == 0 {
            self.pending = None;
            return;
        }
        self.next_tick = if self.draws.below(8) == 0 {
            SimDuration::ZERO
        } else {
            SimDuration::from_micros(1 + self.draws.below(200))
        };
        let token =
            Token { kind: self.draws.below(4) as u8, hops_left: self.hops, value: self.draws.next_u64() };
        let (to, delay) = (self.peer(), self.delay());
        self.pending = Some((to, delay, token));
    }
}

impl Actor<Token> for Node {
    fn time_advance(&self) -> TimeAdvance {
        if self.pending.is_some() { TimeAdvance::After(self.next_tick) } else { TimeAdvance::Passive }
    }

    fn output(&self, _ctx: &Context, out: &mut Outbox<Token>) {
        if let Some((to, delay, token)) = &self.pending {
            out.send(*to, *delay, token.clone());
        }
    }

    fn transition(&mut self, ctx: &Context, event: Event<'_, Token>, out: &mut Outbox<Token>) {
        let (ticked, bag) = match event {
            Event::Internal => (true, None),
            Event::External(bag) => {
                // Not imminent, so the tick (if any) is still ahead: keep its absolute time.
                self.next_tick = SimDuration::from_micros(
                    self.next_tick.as_micros().saturating_sub(ctx.elapsed.as_micros()),
                );
                (false, Some(bag))
            }
            Event::Confluent(bag) => (true, Some(bag)),
        };
        if let Some(bag) = bag {
            for envelope in bag {
                let token = envelope.payload;
                self.received += 1;
                self.checksum = self.checksum.rotate_left(7)
                    ^ token.value
                    ^ (u64::from(token.kind) << 56)
                    ^ u64::from(envelope.sender.0);
                if token.hops_left > 0 {
                    let (to, delay) = (self.peer(), self.delay());
                    out.send(to, delay, Token { hops_left: token.hops_left - 1, ..token });
                }
            }
        }
        if ticked {
            self.ticks_left -= 1;
            self.plan_tick();
        }
    }

    fn describe(&self, description: &mut Description) {
        description.arg("received", self.received);
        description.arg("checksum", self.checksum);
    }
}

/// Add a mesh of `config.nodes` nodes named `node-000`, `node-001`, … to an assembly.
pub fn assemble(
    assembly: &mut Assembly<Token>,
    config: MeshConfig,
    streams: Streams,
) -> Result<Vec<ActorId>, AssemblyError> {
    let names: Vec<String> = (0..config.nodes).map(|i| format!("node-{i:03}")).collect();
    let ids = names.iter().map(|n| assembly.declare(n.clone())).collect::<Result<Vec<_>, _>>()?;
    for (i, (&id, name)) in ids.iter().zip(&names).enumerate() {
        let peers = ids.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, &p)| p).collect();
        assembly.install(id, Node::new(peers, name, config, streams))?;
    }
    Ok(ids)
}
