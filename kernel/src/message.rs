//! Envelopes and the order in which an actor sees them.
//!
//! # The ordering invariant
//!
//! Every message is delivered inside an [`Envelope`] whose [`OrderKey`] is
//! `(time, class, sender, send_count)`:
//!
//! - `time` — the simulated time at which it is delivered;
//! - `class` — a small integer fixed per message kind ([`MessageClass`]), from the one class
//!   table of the payload type ([`Message::class`]), so that, e.g., a completion is seen before
//!   an arrival at the same instant whatever order they were sent in;
//! - `sender` — the sender's [`SenderOrder`], derived from its stable name (its rank among all
//!   actor names), so adding an actor never reorders ties among the others;
//! - `send_count` — the sender's own running count of messages sent, so two messages from one
//!   sender keep the order in which it sent them.
//!
//! The key is unique (a sender never reuses a send count) and total. All messages an actor
//! receives at one super-dense instant form its *bag*, sorted by this key. No global counter and
//! no wall-clock or thread timing takes part, so the order is a pure function of the model.

use crate::actor::ActorId;
use crate::time::{Instant, SimTime};

/// A message kind's place in the tie-break among messages delivered at the same time.
///
/// Lower classes are seen first. Each payload type defines its whole table in one place, its
/// [`Message::class`] implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageClass(pub u16);

/// A payload that can travel between actors.
pub trait Message: 'static {
    /// This message's class: its rank among messages delivered at the same time.
    fn class(&self) -> MessageClass;

    /// A short name of the message's kind, for timelines and logs.
    fn label(&self) -> &'static str {
        "message"
    }
}

/// A sender's position in the tie-break: the rank of its name among all actor names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SenderOrder(pub u32);

/// The delivery order of a message; see the module documentation for the invariant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OrderKey {
    /// Delivery time.
    pub time: SimTime,
    /// The payload's class.
    pub class: MessageClass,
    /// The sender's name rank.
    pub sender: SenderOrder,
    /// The sender's running send count.
    pub send_count: u64,
}

/// A delivered message with its header.
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope<M> {
    /// Where this message sits in its receiver's bag.
    pub key: OrderKey,
    /// The round (of `key.time`) in which it is delivered.
    pub round: u32,
    /// The instant at which it was sent.
    pub sent_at: Instant,
    /// Who sent it, for replies.
    pub sender: ActorId,
    /// Who receives it.
    pub to: ActorId,
    /// The message itself.
    pub payload: M,
}
