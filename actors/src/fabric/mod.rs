//! The fabric that carries KV transfers (DESIGN.md §4): its links from the scenario and catalog
//! ([`Topology`]), its core state machine of transfers over shared links with max-min fair rates
//! ([`Flows`]), and the actor that adapts it to messages ([`FabricActor`]).

mod actor;
mod flows;
mod topology;

pub use actor::FabricActor;
pub use flows::{FlowError, Flows, LinkId};
pub use topology::Topology;
