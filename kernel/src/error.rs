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
    /// Lanes need at least one thread.
    NoLaneThreads,
    /// Lanes need a positive lookahead.
    ZeroLookahead,
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
            AssemblyError::NoLaneThreads => write!(f, "lanes need at least one thread"),
            AssemblyError::ZeroLookahead => write!(f, "lanes need a positive lookahead"),
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
    /// A detached actor sent a message to a detached actor; lanes never exchange messages.
    DetachedToDetached {
        /// The sender's name.
        sender: String,
        /// The detached receiver.
        to: ActorId,
    },
    /// A detached actor sent a message without delay; its lane runs ahead of the others.
    DetachedWithoutDelay {
        /// The sender's name.
        sender: String,
    },
    /// A message reached a detached actor sooner than the lanes' promise allows: shorter than
    /// the lookahead, or before a window the lanes already ran (a quiet class was not quiet).
    LookaheadBroken {
        /// The sender's name.
        sender: String,
        /// When the message was due.
        at: SimTime,
        /// The end of the window already run.
        frontier: SimTime,
    },
    /// An observer that watches every actor was attached to a simulation whose detached
    /// actors run in lanes, out of its sight.
    ObserverSeesDetached,
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
            KernelError::DetachedToDetached { sender, to } => {
                write!(f, "detached actor {sender:?} sent a message to detached actor id {}", to.0)
            }
            KernelError::DetachedWithoutDelay { sender } => {
                write!(f, "detached actor {sender:?} sent a message without delay")
            }
            KernelError::LookaheadBroken { sender, at, frontier } => write!(
                f,
                "actor {sender:?} sent a message due at {at} to a detached actor whose lane had run to {frontier}"
            ),
            KernelError::ObserverSeesDetached => {
                write!(
                    f,
                    "an observer of every actor was attached to a run whose detached actors run in lanes"
                )
            }
        }
    }
}

impl std::error::Error for KernelError {}
