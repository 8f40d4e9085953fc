//! The inline host: actors in a vector, called directly.

use super::{Work, perform};
use crate::actor::{Actor, ActorId};
use crate::message::Message;

pub(crate) struct InlineHost<M: Message> {
    actors: Vec<Box<dyn Actor<M>>>,
}

impl<M: Message> InlineHost<M> {
    pub(crate) fn new(actors: Vec<Box<dyn Actor<M>>>) -> InlineHost<M> {
        InlineHost { actors }
    }

    pub(crate) fn run_round(&mut self, affected: &[ActorId], works: &mut [Work<M>]) {
        for &id in affected {
            perform(self.actors[id.index()].as_mut(), &mut works[id.index()]);
        }
    }

    pub(crate) fn into_actors(self) -> Vec<Box<dyn Actor<M>>> {
        self.actors
    }
}
