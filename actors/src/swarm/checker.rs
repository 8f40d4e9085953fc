//! The checker: a kernel observer that checks causality, bag order, time and the call
//! lifecycle on every delivery and transition (I1–I4), collects what the actors' own checks
//! find (I4–I7), and halts the run at the first violation.

use std::collections::BTreeMap;

use blis_kernel::{ActorId, Envelope, Instant, Observer, OrderKey, TransitionRecord};

use crate::message::ClusterMessage;

/// Where a call is in its life, as the messages show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CallState {
    Sent,
    Aborted,
    /// Answered, at this instant.
    Answered(Instant),
}

/// What the checker counted and found.
#[derive(Clone, Debug, Default)]
pub struct CheckerReport {
    /// Distinct instants (t, round) checked.
    pub instants: u64,
    /// Calls the clients sent.
    pub sent: u64,
    /// Completions and refusals delivered to clients.
    pub answered: u64,
    /// Aborts the clients sent.
    pub aborted: u64,
    /// Violations, in the order found (the first one halts the run).
    pub violations: Vec<String>,
}

/// The observer of a checked run.
pub struct Checker {
    clients: Vec<ActorId>,
    last_instant: Option<Instant>,
    /// The instant of the deliveries being reported, and the last key delivered to each
    /// receiver in it.
    delivering: Option<Instant>,
    last_keys: BTreeMap<ActorId, OrderKey>,
    /// Actors that made a transition in the current instant, and each actor's last time.
    transitioned: Vec<ActorId>,
    last_transition: BTreeMap<ActorId, blis_kernel::SimTime>,
    calls: BTreeMap<u64, CallState>,
    report: CheckerReport,
}

impl Checker {
    /// A checker that learns the clients from the actors' names (`client/…`) at the start.
    pub fn for_run() -> Checker {
        Checker::new(Vec::new())
    }

    /// A checker for a cluster whose clients are `clients`.
    pub fn new(mut clients: Vec<ActorId>) -> Checker {
        clients.sort_unstable();
        Checker {
            clients,
            last_instant: None,
            delivering: None,
            last_keys: BTreeMap::new(),
            transitioned: Vec::new(),
            last_transition: BTreeMap::new(),
            calls: BTreeMap::new(),
            report: CheckerReport::default(),
        }
    }

    /// What it counted and found.
    pub fn report(&self) -> &CheckerReport {
        &self.report
    }

    /// Record a violation.
    fn violate(&mut self, violation: String) {
        self.report.violations.push(violation);
    }

    fn is_client(&self, id: ActorId) -> bool {
        self.clients.binary_search(&id).is_ok()
    }

    fn lifecycle(&mut self, envelope: &Envelope<ClusterMessage>) {
        let from_client = self.is_client(envelope.sender);
        let to_client = self.is_client(envelope.to);
        let key = envelope.payload.key();
        match &envelope.payload {
            ClusterMessage::Request(_) if from_client => {
                self.report.sent += 1;
                if self.calls.insert(key, CallState::Sent).is_some() {
                    self.violate(format!("I4 call {key} was sent twice"));
                }
            }
            ClusterMessage::Abort(_) if from_client => {
                self.report.aborted += 1;
                match self.calls.get(&key) {
                    Some(CallState::Sent) => {
                        self.calls.insert(key, CallState::Aborted);
                    }
                    // The abort left the client before the answer reached it.
                    Some(CallState::Answered(at)) if envelope.sent_at < *at => {}
                    state => self.violate(format!("I4 call {key} was aborted in state {state:?}")),
                }
            }
            ClusterMessage::Completion(_) | ClusterMessage::Rejection(_) if to_client => {
                self.report.answered += 1;
                match self.calls.get(&key) {
                    Some(CallState::Sent | CallState::Aborted) => {
                        self.calls.insert(
                            key,
                            CallState::Answered(Instant { time: envelope.key.time, round: envelope.round }),
                        );
                    }
                    state => self.violate(format!("I4 call {key} was answered in state {state:?}")),
                }
            }
            _ => {}
        }
    }
}

impl Observer<ClusterMessage> for Checker {
    fn wants_checks(&self) -> bool {
        true
    }

    fn on_start(&mut self, actors: &[&str]) {
        self.clients = (0..actors.len() as u32)
            .filter(|&i| actors[i as usize].starts_with("client/"))
            .map(ActorId)
            .collect();
    }

    fn on_delivery(&mut self, envelope: &Envelope<ClusterMessage>) {
        let at = Instant { time: envelope.key.time, round: envelope.round };
        if at <= envelope.sent_at {
            self.violate(format!(
                "I1 a {} sent at {:?} was delivered at {at:?}, not after",
                blis_kernel::Message::label(&envelope.payload),
                envelope.sent_at
            ));
        }
        if self.last_instant.is_some_and(|last| at <= last) {
            self.violate(format!(
                "I1 a message due at {at:?} was delivered after instant {:?}",
                self.last_instant
            ));
        }
        if self.delivering != Some(at) {
            if self.delivering.is_some_and(|d| at < d) {
                self.violate(format!("I1 deliveries of {at:?} follow those of {:?}", self.delivering));
            }
            self.delivering = Some(at);
            self.last_keys.clear();
        }
        if let Some(previous) = self.last_keys.insert(envelope.to, envelope.key)
            && previous >= envelope.key
        {
            self.violate(format!(
                "I2 a bag of actor {} holds key {:?} after {previous:?}",
                envelope.to.0, envelope.key
            ));
        }
        self.lifecycle(envelope);
    }

    fn on_transition(&mut self, record: &TransitionRecord<'_>) {
        match self.last_instant {
            Some(last) if record.now < last => {
                self.violate(format!("I3 instant {:?} follows {last:?}", record.now));
            }
            Some(last) if record.now == last => {}
            _ => {
                self.report.instants += 1;
                self.transitioned.clear();
                self.last_instant = Some(record.now);
            }
        }
        if self.transitioned.contains(&record.actor) {
            self.violate(format!("I3 {} made two transitions at {:?}", record.name, record.now));
        }
        self.transitioned.push(record.actor);
        let previous = self.last_transition.insert(record.actor, record.now.time).unwrap_or_default();
        if record.now.time.saturating_since(previous) != record.elapsed {
            self.violate(format!(
                "I3 {} reports {:?} elapsed at {:?}, {:?} after its previous transition",
                record.name,
                record.elapsed,
                record.now,
                record.now.time.saturating_since(previous)
            ));
        }
    }

    fn on_violation(&mut self, now: Instant, actor: &str, violation: &str) {
        self.violate(format!(
            "{violation} ({actor} at {:.6} s, round {})",
            now.time.as_micros() as f64 / 1e6,
            now.round
        ));
    }

    fn halt(&self) -> Option<String> {
        self.report.violations.first().map(|v| format!("invariant violated: {v}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blis_kernel::{MessageClass, SenderOrder, SimTime};

    fn envelope(time: u64, round: u32, sent: u64, send_count: u64, to: u32) -> Envelope<ClusterMessage> {
        Envelope {
            key: OrderKey {
                time: SimTime::from_micros(time),
                class: MessageClass(6),
                sender: SenderOrder(0),
                send_count,
            },
            round,
            sent_at: Instant { time: SimTime::from_micros(sent), round: 0 },
            sender: ActorId(0),
            to: ActorId(to),
            payload: ClusterMessage::Scrape,
        }
    }

    #[test]
    fn a_message_delivered_at_its_sending_instant_breaks_i1() {
        let mut checker = Checker::new(vec![]);
        checker.on_delivery(&envelope(10, 1, 10, 0, 1));
        assert!(checker.report().violations.is_empty());
        checker.on_delivery(&envelope(20, 0, 20, 1, 2));
        assert!(checker.report().violations[0].starts_with("I1 "), "{:?}", checker.report().violations);
        assert!(checker.halt().is_some());
    }

    #[test]
    fn an_unsorted_bag_breaks_i2() {
        let mut checker = Checker::new(vec![]);
        checker.on_delivery(&envelope(10, 0, 5, 3, 1));
        checker.on_delivery(&envelope(10, 0, 5, 2, 1));
        assert_eq!(checker.report().violations.len(), 1);
        assert!(checker.report().violations[0].starts_with("I2 "));
    }

    #[test]
    fn a_second_answer_breaks_i4() {
        use crate::message::CallRejection;
        let mut checker = Checker::new(vec![ActorId(3)]);
        let rejection = |key| {
            ClusterMessage::Rejection(Box::new(CallRejection {
                key,
                client: ActorId(3),
                instance: "engine/p-0".into(),
                reason: "x".into(),
            }))
        };
        let mut answer = envelope(10, 0, 5, 0, 3);
        answer.payload = rejection(7);
        checker.on_delivery(&answer);
        assert!(checker.report().violations[0].starts_with("I4 call 7 was answered in state None"));
    }

    #[test]
    fn two_transitions_in_one_instant_break_i3() {
        let mut checker = Checker::new(vec![]);
        let now = Instant { time: SimTime::from_micros(5), round: 0 };
        let record = TransitionRecord {
            now,
            actor: ActorId(1),
            name: "a",
            kind: blis_kernel::TransitionKind::Internal,
            elapsed: blis_kernel::SimDuration::from_micros(5),
            bag_len: 0,
            emitted: 0,
            next_internal: None,
            description: None,
            notes: None,
        };
        checker.on_transition(&record);
        assert!(checker.report().violations.is_empty());
        checker.on_transition(&record);
        assert!(checker.report().violations[0].starts_with("I3 a made two transitions"));
        assert_eq!(checker.report().instants, 1);
    }
}
