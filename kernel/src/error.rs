//! What can go wrong when assembling or running a simulation.

use std::fmt;

use crate::actor::ActorId;
use crate::time::SimTime;

/// A mistake in wiring actors together, found before the run starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AssemblyError {
    /// Two actors were given the same name; names must be unique because they order ties.
    DuplicateName(String),
    /// An actor name was empty.
    EmptyName,
    /// An actor was declared but never installed.
    NotInstalled(String),
    /// An actor was installed twice.
    AlreadyInstalled(String),
    /// An id that this assembly never handed out.
    UnknownActor(ActorId),
    /// More actors than the kernel can address.
    TooManyActors,
    /// The round bound must allow at least one round per instant.
    ZeroRoundBound,
}

impl fmt::Display for AssemblyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AssemblyError::DuplicateName(n) => write!(f, "actor name {n:?} is used twice"),
            AssemblyError::EmptyName => write!(f, "actor name is empty"),
            AssemblyError::NotInstalled(n) => write!(f, "actor {n:?} was declared but not installed"),
            AssemblyError::AlreadyInstalled(n) => write!(f, "actor {n:?} was installed twice"),
            AssemblyError::UnknownActor(id) => write!(f, "actor id {} was never declared", id.0),
            AssemblyError::TooManyActors => write!(f, "more than {} actors", u32::MAX - 1),
            AssemblyError::ZeroRoundBound => write!(f, "the bound on rounds per instant must be at least 1"),
        }
    }
}

impl std::error::Error for AssemblyError {}

/// A run that cannot go on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelError {
    /// Zero-delay messages or transient states kept one simulated time from advancing: more
    /// rounds than the bound at one time. Names the actors still active in the last round.
    RoundLimit {
        /// The simulated time that did not advance.
        time: SimTime,
        /// The bound that was reached.
        bound: u32,
        /// The actors affected in the round that hit the bound, in name order.
        actors: Vec<String>,
    },
    /// An actor sent a message to an id that does not exist.
    UnknownReceiver {
        /// The sender's name.
        sender: String,
        /// The id it addressed.
        to: ActorId,
    },
    /// A delay or time advance would run past the end of representable time.
    TimeOverflow {
        /// The actor whose delay or time advance overflowed.
        actor: String,
    },
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::RoundLimit { time, bound, actors } => write!(
                f,
                "simulated time {time} did not advance after {bound} rounds; actors still active: {}",
                actors.join(", ")
            ),
            KernelError::UnknownReceiver { sender, to } => {
                write!(f, "actor {sender:?} sent a message to unknown actor id {}", to.0)
            }
            KernelError::TimeOverflow { actor } => {
                write!(f, "actor {actor:?} scheduled past the end of representable time")
            }
        }
    }
}

impl std::error::Error for KernelError {}
