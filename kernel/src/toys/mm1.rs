//! An M/M/1 queue from two actors: a Poisson source and an exponential server.
//!
//! The source emits jobs with exponential gaps of mean `1/λ`; the server serves them one at a
//! time, first come first served, with exponential service times of mean `1/μ`. Queueing theory
//! gives the mean wait before service as `Wq = ρ / (μ − λ)` with `ρ = λ/μ`, so the model checks
//! the kernel end to end: timing, ordering, transitions and random substreams.

use std::collections::VecDeque;

use crate::actor::{Actor, ActorId, Context, Event, Outbox, TimeAdvance};
use crate::assembly::Assembly;
use crate::error::AssemblyError;
use crate::message::{Message, MessageClass};
use crate::observer::Description;
use crate::rng::{Streams, Substream};
use crate::time::{SimDuration, SimTime};

/// The one message kind of the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Job {
    /// Sequence number from the source, from 0.
    pub id: u64,
    /// When the source emitted it.
    pub arrived: SimTime,
}

impl Message for Job {
    fn class(&self) -> MessageClass {
        // The class table of this model has one entry.
        MessageClass(0)
    }
}

/// Emits `jobs` jobs with exponential gaps of mean `mean_gap_us`.
pub struct Source {
    server: ActorId,
    mean_gap_us: f64,
    remaining: u64,
    next_id: u64,
    gap: SimDuration,
    gaps: Substream,
}

impl Source {
    /// A source sending to `server`, drawing gaps from the substream `("source", "gap", "")`.
    pub fn new(server: ActorId, mean_gap_us: f64, jobs: u64, streams: Streams) -> Source {
        let mut gaps = streams.stream("source", "gap", "");
        let gap = draw(&mut gaps, mean_gap_us);
        Source { server, mean_gap_us, remaining: jobs, next_id: 0, gap, gaps }
    }
}

fn draw(stream: &mut Substream, mean_us: f64) -> SimDuration {
    SimDuration::from_micros_ceil(stream.exponential(mean_us))
        .expect("an exponential draw with a positive finite mean is a valid duration")
}

impl Actor<Job> for Source {
    fn time_advance(&self) -> TimeAdvance {
        if self.remaining == 0 { TimeAdvance::Passive } else { TimeAdvance::After(self.gap) }
    }

    fn output(&self, ctx: &Context, out: &mut Outbox<Job>) {
        out.send(self.server, SimDuration::ZERO, Job { id: self.next_id, arrived: ctx.now.time });
    }

    fn transition(&mut self, _ctx: &Context, _event: Event<'_, Job>, _out: &mut Outbox<Job>) {
        // Only internal events reach a source: it receives no messages.
        self.remaining -= 1;
        self.next_id += 1;
        self.gap = draw(&mut self.gaps, self.mean_gap_us);
    }
}

/// Serves jobs one at a time, first come first served, and records each job's wait.
pub struct Server {
    mean_service_us: f64,
    queue: VecDeque<Job>,
    busy_until: Option<SimTime>,
    last_transition: SimTime,
    service: Substream,
    waits_us: Vec<u64>,
}

impl Server {
    /// A server drawing service times from the substream `("server", "service", "")`.
    pub fn new(mean_service_us: f64, streams: Streams) -> Server {
        Server {
            mean_service_us,
            queue: VecDeque::new(),
            busy_until: None,
            last_transition: SimTime::ZERO,
            service: streams.stream("server", "service", ""),
            waits_us: Vec::new(),
        }
    }

    /// Each served job's wait before service, in service order, in microseconds.
    pub fn waits_us(&self) -> &[u64] {
        &self.waits_us
    }

    fn start_next(&mut self, now: SimTime) {
        if let Some(job) = self.queue.pop_front() {
            self.waits_us.push(now.saturating_since(job.arrived).as_micros());
            let service = draw(&mut self.service, self.mean_service_us);
            self.busy_until = Some(now.saturating_add(service));
        }
    }
}

impl Actor<Job> for Server {
    fn time_advance(&self) -> TimeAdvance {
        match self.busy_until {
            None => TimeAdvance::Passive,
            Some(end) => TimeAdvance::until(self.last_transition, end),
        }
    }

    fn transition(&mut self, ctx: &Context, event: Event<'_, Job>, _out: &mut Outbox<Job>) {
        let now = ctx.now.time;
        // A completion at the same instant as arrivals is handled first: the server frees up,
        // then the arrivals join the queue in bag order.
        if matches!(event, Event::Internal | Event::Confluent(_)) {
            self.busy_until = None;
        }
        if let Event::External(bag) | Event::Confluent(bag) = event {
            self.queue.extend(bag.map(|envelope| envelope.payload));
        }
        if self.busy_until.is_none() {
            self.start_next(now);
        }
        self.last_transition = now;
    }

    fn describe(&self, description: &mut Description) {
        description.arg("queue", self.queue.len());
        description.arg("busy", u64::from(self.busy_until.is_some()));
    }
}

/// The actor ids of an assembled M/M/1 model.
#[derive(Clone, Copy, Debug)]
pub struct Mm1 {
    /// The source.
    pub source: ActorId,
    /// The server.
    pub server: ActorId,
}

/// Parameters of an M/M/1 model.
#[derive(Clone, Copy, Debug)]
pub struct Mm1Config {
    /// Mean time between arrivals, µs (`1/λ`).
    pub mean_gap_us: f64,
    /// Mean service time, µs (`1/μ`).
    pub mean_service_us: f64,
    /// How many jobs the source emits.
    pub jobs: u64,
}

impl Mm1Config {
    /// The analytic mean wait before service, `ρ / (μ − λ)`, in µs (infinite if `ρ ≥ 1`).
    pub fn analytic_mean_wait_us(&self) -> f64 {
        let lambda = 1.0 / self.mean_gap_us;
        let mu = 1.0 / self.mean_service_us;
        if lambda >= mu { f64::INFINITY } else { (lambda / mu) / (mu - lambda) }
    }
}

/// Add an M/M/1 model (actors `source` and `server`) to an assembly.
pub fn assemble(
    assembly: &mut Assembly<Job>,
    config: Mm1Config,
    streams: Streams,
) -> Result<Mm1, AssemblyError> {
    let server = assembly.add("server", Server::new(config.mean_service_us, streams))?;
    let source = assembly.add("source", Source::new(server, config.mean_gap_us, config.jobs, streams))?;
    Ok(Mm1 { source, server })
}
