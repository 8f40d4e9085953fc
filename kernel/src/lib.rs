//! The deterministic DEVS actor kernel of blis-actor.
//!
//! A simulation is a fixed set of named [`Actor`]s that interact only through timestamped
//! messages. The [`Simulation`] coordinator owns simulated time ([`SimTime`], integer
//! microseconds) and advances it from one super-dense [`Instant`] `(time, round)` to the next,
//! running each round in three phases — output, delivery, transition — exactly as the DEVS
//! abstract simulator does. Ties are broken by a documented key, [`OrderKey`]
//! `(time, class, sender, send_count)`, never by a global counter, a hash container or thread
//! timing, so the same model and seed give the same run, bit for bit, on either host: inline
//! calls (the default) or one tokio task per actor on a paused runtime (the parity proof).
//! Randomness comes only from named [`Substream`]s; observers watch a run without the actors
//! knowing. Actors installed detached may run ahead of the others in lanes, on several threads,
//! within windows their quiet answers and the delays to them allow ([`LaneSpec`]), with the
//! same outcome. Nothing here knows about LLMs.
//!
//! ```text
//!   Assembly ── declare names, install actors ──► Simulation ── run_until(horizon) ──► Finished
//!                                                   │
//!                         one round at (t, r):      ▼
//!        output of imminent actors ─► bags sorted by OrderKey ─► one transition per affected actor
//!        (zero-delay messages arrive at (t, r + 1); delay d at (t + d, 0))
//! ```
//!
//! See `docs/ADDING_AN_ACTOR.md` for a worked example (the M/M/1 queue in [`toys::mm1`]).

mod actor;
mod agenda;
mod assembly;
pub mod clock;
mod coordinator;
mod error;
mod host;
mod key_table;
mod lanes;
mod message;
mod notes;
mod observer;
mod radix;
pub mod record;
pub mod rng;
#[cfg(test)]
mod test_support;
mod time;
pub mod timeline;
pub mod toys;
mod wheel;

pub use actor::{Actor, ActorId, Bag, Context, Event, Outbox, Outgoing, TimeAdvance};
pub use assembly::{Assembly, DEFAULT_MAX_ROUNDS_PER_INSTANT};
pub use coordinator::{Finished, RunEnd, RunStats, Simulation};
pub use error::{AssemblyError, KernelError};
pub use host::HostKind;
pub use key_table::KeyTable;
pub use lanes::LaneSpec;
pub use message::{Envelope, Message, MessageClass, OrderKey, SenderOrder};
pub use notes::{Args, Mark, Notes};
pub use observer::{Description, Observer, TransitionKind, TransitionRecord, Value};
pub use rng::{Streams, Substream};
pub use time::{Instant, SimDuration, SimTime, TimeError};
