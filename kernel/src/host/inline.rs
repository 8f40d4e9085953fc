//! The inline host: actors in a vector, called directly.

use super::{Work, perform};
use crate::actor::Actor;
use crate::message::Message;

pub(crate) struct InlineHost<M: Message> {
    actors: Vec<Box<dyn Actor<M>>>,
}

impl<M: Message> InlineHost<M> {
    pub(crate) fn new(actors: Vec<Box<dyn Actor<M>>>) -> InlineHost<M> {
        InlineHost { actors }
    }

    pub(crate) fn run_round(&mut self, works: &mut [Work<M>]) {
        for work in works {
            perform(self.actors[work.actor.index()].as_mut(), work);
        }
    }

    pub(crate) fn into_actors(self) -> Vec<Box<dyn Actor<M>>> {
        self.actors
    }
}
