//! What a plugin sees during one scheduling cycle: the endpoints, the request, the attributes the
//! data producers wrote for it, and the producers' live state.

use crate::endpoint::{Endpoint, EndpointIndex};
use crate::plugins::PluginKind;
use crate::plugins::prefix::PrefixMatchInfo;
use crate::request::RoutingRequest;

/// A configured plugin: its instance name, type and behaviour.
#[derive(Clone, Debug)]
pub struct PluginInstance {
    /// The instance name (the type when the config gives none).
    pub name: String,
    /// The plugin type.
    pub type_name: String,
    /// Its behaviour and state.
    pub kind: PluginKind,
}

/// The attributes data producers wrote for the request being scheduled, per endpoint.
#[derive(Clone, Debug, Default)]
pub struct Attributes {
    /// Whether a token producer set the request's `TokenizedPrompt`.
    pub tokenized: bool,
    /// Per prefix producer (by plugin index): its match info per endpoint.
    pub prefix: Vec<(usize, Vec<Option<PrefixMatchInfo>>)>,
    /// Per in-flight producer (by plugin index): the request's uncached tokens per endpoint.
    pub uncached: Vec<(usize, Vec<Option<u64>>)>,
    /// Per session-id producer (by plugin index): the session id it found, if any.
    pub session_ids: Vec<(usize, Option<String>)>,
}

impl Attributes {
    /// Forget the previous request's attributes, keeping the buffers.
    pub fn clear(&mut self) {
        self.tokenized = false;
        for (_, slots) in &mut self.prefix {
            slots.iter_mut().for_each(|s| *s = None);
        }
        for (_, slots) in &mut self.uncached {
            slots.iter_mut().for_each(|s| *s = None);
        }
        for (_, id) in &mut self.session_ids {
            *id = None;
        }
    }

    /// The session id producer `producer` found for the request, if any.
    pub fn session_id(&self, producer: usize) -> Option<&str> {
        self.session_ids.iter().find(|(p, _)| *p == producer).and_then(|(_, id)| id.as_deref())
    }

    /// Record the session id producer `producer` found (`None`: none).
    pub fn set_session_id(&mut self, producer: usize, id: Option<&str>) {
        let at = match self.session_ids.iter().position(|(p, _)| *p == producer) {
            Some(at) => at,
            None => {
                self.session_ids.push((producer, None));
                self.session_ids.len() - 1
            }
        };
        let slot = &mut self.session_ids[at].1;
        match (slot.as_mut(), id) {
            (Some(s), Some(id)) => {
                s.clear();
                s.push_str(id);
            }
            (None, Some(id)) => *slot = Some(id.to_owned()),
            (_, None) => *slot = None,
        }
    }

    /// The slots of prefix producer `producer`, created for `endpoints` endpoints when new.
    pub fn prefix_slots(&mut self, producer: usize, endpoints: usize) -> &mut Vec<Option<PrefixMatchInfo>> {
        let at = match self.prefix.iter().position(|(p, _)| *p == producer) {
            Some(at) => at,
            None => {
                self.prefix.push((producer, vec![None; endpoints]));
                self.prefix.len() - 1
            }
        };
        &mut self.prefix[at].1
    }

    /// The slots of in-flight producer `producer`, created for `endpoints` endpoints when new.
    pub fn uncached_slots(&mut self, producer: usize, endpoints: usize) -> &mut Vec<Option<u64>> {
        let at = match self.uncached.iter().position(|(p, _)| *p == producer) {
            Some(at) => at,
            None => {
                self.uncached.push((producer, vec![None; endpoints]));
                self.uncached.len() - 1
            }
        };
        &mut self.uncached[at].1
    }
}

/// One cycle's read-only view.
#[derive(Clone, Copy)]
pub struct View<'a> {
    /// Simulated time now, µs.
    pub now_us: u64,
    /// Every endpoint, by index.
    pub endpoints: &'a [Endpoint],
    /// The request.
    pub request: &'a RoutingRequest<'a>,
    /// The attributes written for it.
    pub attributes: &'a Attributes,
    /// Every plugin instance (producers hold live state consumers read).
    pub plugins: &'a [PluginInstance],
}

impl View<'_> {
    /// The match info producer `producer` wrote on `endpoint`, if any.
    pub fn prefix_info(&self, producer: Option<usize>, endpoint: EndpointIndex) -> Option<PrefixMatchInfo> {
        let producer = producer?;
        let (_, slots) = self.attributes.prefix.iter().find(|(p, _)| *p == producer)?;
        slots[endpoint as usize]
    }

    /// The request's uncached tokens on `endpoint` as in-flight producer `producer` estimated.
    pub fn uncached_tokens(&self, producer: Option<usize>, endpoint: EndpointIndex) -> Option<u64> {
        let producer = producer?;
        let (_, slots) = self.attributes.uncached.iter().find(|(p, _)| *p == producer)?;
        slots[endpoint as usize]
    }

    /// The live in-flight counters (requests, tokens) of `endpoint` in producer `producer`.
    pub fn in_flight(&self, producer: Option<usize>, endpoint: EndpointIndex) -> Option<(u64, u64)> {
        match &self.plugins[producer?].kind {
            PluginKind::InFlightLoadProducer(p) => Some(p.load(endpoint)),
            _ => None,
        }
    }
}
