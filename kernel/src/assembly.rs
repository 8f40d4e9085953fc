//! Assembly: naming actors, wiring their addresses, then freezing the topology.
//!
//! Actors usually need each other's addresses before they can be built (a client needs its
//! router's, the router its engines'), so assembly has two steps: [`Assembly::declare`] hands out
//! an [`ActorId`] for a name, and [`Assembly::install`] later puts the actor behind it.
//! [`Assembly::build`] checks every name has an actor and freezes the topology: nothing can be
//! added once the run starts.

use crate::actor::{Actor, ActorId};
use crate::coordinator::Simulation;
use crate::coordinator::{Taken, name_ranks};
use crate::error::AssemblyError;
use crate::host::HostKind;
use crate::lanes::{LaneSpec, Lanes, Member};
use crate::message::Message;

/// The default bound on rounds at one simulated time.
pub const DEFAULT_MAX_ROUNDS_PER_INSTANT: u32 = 10_000;

/// A simulation being put together.
pub struct Assembly<M: Message> {
    names: Vec<String>,
    actors: Vec<Option<Installed<M>>>,
    max_rounds: u32,
}

/// An installed actor: attached (always on the coordinator's thread) or detached (free to run
/// in a lane when the simulation is built in lanes).
enum Installed<M> {
    Attached(Box<dyn Actor<M>>),
    Detached(Box<dyn Actor<M> + Send>),
}

impl<M: Message> Default for Assembly<M> {
    fn default() -> Self {
        Assembly { names: Vec::new(), actors: Vec::new(), max_rounds: DEFAULT_MAX_ROUNDS_PER_INSTANT }
    }
}

impl<M: Message> Assembly<M> {
    /// An empty assembly.
    pub fn new() -> Assembly<M> {
        Assembly::default()
    }

    /// Reserve an address for the actor called `name` (unique, non-empty).
    pub fn declare(&mut self, name: impl Into<String>) -> Result<ActorId, AssemblyError> {
        let name = name.into();
        if name.is_empty() {
            return Err(AssemblyError::EmptyName);
        }
        if self.names.contains(&name) {
            return Err(AssemblyError::DuplicateName(name));
        }
        let id = u32::try_from(self.names.len())
            .ok()
            .filter(|&i| i < u32::MAX)
            .ok_or(AssemblyError::TooManyActors)?;
        self.names.push(name);
        self.actors.push(None);
        Ok(ActorId(id))
    }

    /// Put `actor` behind an address from [`Assembly::declare`].
    pub fn install(&mut self, id: ActorId, actor: impl Actor<M>) -> Result<(), AssemblyError> {
        self.install_boxed(id, Box::new(actor))
    }

    /// [`Assembly::install`] for an already boxed actor.
    pub fn install_boxed(&mut self, id: ActorId, actor: Box<dyn Actor<M>>) -> Result<(), AssemblyError> {
        self.put(id, Installed::Attached(actor))
    }

    /// [`Assembly::install`] for an actor that may run in a lane: one that hears from the
    /// others only through delayed messages and sends them only delayed messages of quiet
    /// classes (see [`LaneSpec`]). Built without lanes, it runs like any other.
    pub fn install_detached(
        &mut self,
        id: ActorId,
        actor: impl Actor<M> + Send,
    ) -> Result<(), AssemblyError> {
        self.put(id, Installed::Detached(Box::new(actor)))
    }

    fn put(&mut self, id: ActorId, actor: Installed<M>) -> Result<(), AssemblyError> {
        let slot = self.actors.get_mut(id.index()).ok_or(AssemblyError::UnknownActor(id))?;
        if slot.is_some() {
            return Err(AssemblyError::AlreadyInstalled(self.names[id.index()].clone()));
        }
        *slot = Some(actor);
        Ok(())
    }

    /// Declare and install in one step.
    pub fn add(&mut self, name: impl Into<String>, actor: impl Actor<M>) -> Result<ActorId, AssemblyError> {
        let id = self.declare(name)?;
        self.install(id, actor)?;
        Ok(id)
    }

    /// The name given to `id`.
    pub fn name(&self, id: ActorId) -> Option<&str> {
        self.names.get(id.index()).map(String::as_str)
    }

    /// Bound the number of rounds at one simulated time (default
    /// [`DEFAULT_MAX_ROUNDS_PER_INSTANT`]); a run that exceeds it fails naming the actors.
    pub fn max_rounds_per_instant(&mut self, bound: u32) -> Result<(), AssemblyError> {
        if bound == 0 {
            return Err(AssemblyError::ZeroRoundBound);
        }
        self.max_rounds = bound;
        Ok(())
    }

    /// Freeze the topology and start a simulation at time zero on the given host.
    pub fn build(self, host: HostKind) -> Result<Simulation<M>, AssemblyError> {
        let mut actors = Vec::with_capacity(self.actors.len());
        let mut detached = Vec::with_capacity(self.actors.len());
        for (name, actor) in self.names.iter().zip(self.actors) {
            actors.push(match actor.ok_or_else(|| AssemblyError::NotInstalled(name.clone()))? {
                Installed::Attached(actor) => {
                    detached.push(false);
                    actor
                }
                Installed::Detached(actor) => {
                    detached.push(true);
                    actor
                }
            });
        }
        Ok(Simulation::start(self.names, actors, self.max_rounds, host, None, detached))
    }
}

impl<M: Message + Send> Assembly<M> {
    /// Freeze the topology and start a simulation on the inline host whose detached actors run
    /// in lanes on `spec.threads` threads; the outcome is [`Assembly::build`]'s, byte for byte.
    pub fn build_in_lanes(self, spec: &LaneSpec) -> Result<Simulation<M>, AssemblyError> {
        if spec.threads == 0 {
            return Err(AssemblyError::NoLaneThreads);
        }
        if spec.lookahead.is_zero() {
            return Err(AssemblyError::ZeroLookahead);
        }
        let ranks = name_ranks(&self.names);
        let mut actors: Vec<Box<dyn Actor<M>>> = Vec::with_capacity(self.actors.len());
        let mut members = Vec::new();
        let mut detached = vec![false; self.names.len()];
        for (index, (name, actor)) in self.names.iter().zip(self.actors).enumerate() {
            match actor.ok_or_else(|| AssemblyError::NotInstalled(name.clone()))? {
                Installed::Attached(actor) => actors.push(actor),
                Installed::Detached(actor) => {
                    let id = ActorId(index as u32);
                    members.push(Member::new(id, actor, ranks[index], name.clone()));
                    detached[index] = true;
                    actors.push(Box::new(Taken));
                }
            }
        }
        let lanes = Lanes::start(spec, members, ranks, detached.clone(), self.max_rounds);
        Ok(Simulation::start(self.names, actors, self.max_rounds, HostKind::Inline, Some(lanes), detached))
    }
}
