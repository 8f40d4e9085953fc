//! Record and replay: a log of a run's inputs and of every delivered message.
//!
//! [`MessageLog`] is an observer that writes, after a header and the run's inputs (canonical
//! text supplied by the caller), one record per delivered message: its instant, receiver,
//! sender, class, send count and payload, encoded with bincode 2 (`config::standard()`, serde).
//! [`ReplayCheck`] replays: it compares every delivery of a new run with the next record and
//! asks the run to stop at the first divergence, keeping the instant, the actor and both
//! messages. The caller may append a trailer (e.g. a digest of the run's results) with
//! [`MessageLog::finish`].
//!
//! File layout: the 8 bytes `BLISLOG1`, then sections `tag: u8, length: u32 LE, bytes`:
//! tag 1 the inputs (UTF-8), tag 2 one delivery, tag 3 the trailer (UTF-8).

use std::fmt::Debug;
use std::io::{self, Read, Write};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::message::{Envelope, Message};
use crate::observer::Observer;
use crate::time::Instant;

const MAGIC: &[u8; 8] = b"BLISLOG1";
const INPUTS: u8 = 1;
const DELIVERY: u8 = 2;
const TRAILER: u8 = 3;

/// One delivered message as logged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Delivery<M> {
    /// Delivery time, µs.
    pub time_us: u64,
    /// Delivery round.
    pub round: u32,
    /// Receiver's actor index.
    pub to: u32,
    /// Sender's actor index.
    pub sender: u32,
    /// Message class.
    pub class: u16,
    /// The sender's send count.
    pub send_count: u64,
    /// The message.
    pub payload: M,
}

impl<M: Clone> Delivery<M> {
    fn of(envelope: &Envelope<M>) -> Delivery<M> {
        Delivery {
            time_us: envelope.key.time.as_micros(),
            round: envelope.round,
            to: envelope.to.0,
            sender: envelope.sender.0,
            class: envelope.key.class.0,
            send_count: envelope.key.send_count,
            payload: envelope.payload.clone(),
        }
    }
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("logged messages serialise")
}

fn write_section(out: &mut impl Write, tag: u8, bytes: &[u8]) -> io::Result<()> {
    let length = u32::try_from(bytes.len()).map_err(|_| io::Error::other("a log section exceeds 4 GiB"))?;
    out.write_all(&[tag])?;
    out.write_all(&length.to_le_bytes())?;
    out.write_all(bytes)
}

/// Writes a run's inputs and every delivered message.
pub struct MessageLog<W: Write> {
    out: W,
    error: Option<io::Error>,
    deliveries: u64,
}

impl<W: Write> MessageLog<W> {
    /// A log to `out`, starting with `inputs`: everything needed to rebuild the run.
    pub fn new(mut out: W, inputs: &str) -> MessageLog<W> {
        let error =
            out.write_all(MAGIC).and_then(|()| write_section(&mut out, INPUTS, inputs.as_bytes())).err();
        MessageLog { out, error, deliveries: 0 }
    }

    /// Messages logged.
    pub fn deliveries(&self) -> u64 {
        self.deliveries
    }

    /// Append `trailer` and flush; reports the first write error of the run.
    pub fn finish(mut self, trailer: &str) -> io::Result<W> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        write_section(&mut self.out, TRAILER, trailer.as_bytes())?;
        self.out.flush()?;
        Ok(self.out)
    }
}

impl<M: Message + Clone + Serialize, W: Write + 'static> Observer<M> for MessageLog<W> {
    fn on_delivery(&mut self, envelope: &Envelope<M>) {
        if self.error.is_none() {
            self.error = write_section(&mut self.out, DELIVERY, &encode(&Delivery::of(envelope))).err();
            self.deliveries += 1;
        }
    }
}

/// A log read back: its inputs, its deliveries (still encoded) and its trailer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedRun {
    /// The inputs text.
    pub inputs: String,
    /// Each delivery's encoding, in order.
    pub deliveries: Vec<Vec<u8>>,
    /// The trailer, if the recording finished.
    pub trailer: Option<String>,
}

/// What is wrong with a log file.
#[derive(Debug)]
pub enum LogError {
    /// It could not be read.
    Io(io::Error),
    /// It is not a blis-actor message log, or it is damaged; says where.
    Format(String),
}

impl std::fmt::Display for LogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogError::Io(e) => write!(f, "{e}"),
            LogError::Format(m) => write!(f, "not a valid message log: {m}"),
        }
    }
}

impl std::error::Error for LogError {}

impl RecordedRun {
    /// Read a whole log.
    pub fn read(mut input: impl Read) -> Result<RecordedRun, LogError> {
        let mut bytes = Vec::new();
        input.read_to_end(&mut bytes).map_err(LogError::Io)?;
        if bytes.get(..8) != Some(MAGIC.as_slice()) {
            return Err(LogError::Format("it does not start with BLISLOG1".into()));
        }
        let mut at = 8;
        let (mut inputs, mut deliveries, mut trailer) = (None, Vec::new(), None);
        while at < bytes.len() {
            let header = bytes
                .get(at..at + 5)
                .ok_or_else(|| LogError::Format(format!("truncated section header at byte {at}")))?;
            let tag = header[0];
            let length = u32::from_le_bytes([header[1], header[2], header[3], header[4]]) as usize;
            let body = bytes
                .get(at + 5..at + 5 + length)
                .ok_or_else(|| LogError::Format(format!("truncated section at byte {at}")))?
                .to_vec();
            at += 5 + length;
            let text = |body: Vec<u8>| {
                String::from_utf8(body)
                    .map_err(|_| LogError::Format(format!("section before byte {at} is not UTF-8")))
            };
            match tag {
                INPUTS => inputs = Some(text(body)?),
                DELIVERY => deliveries.push(body),
                TRAILER => trailer = Some(text(body)?),
                other => {
                    return Err(LogError::Format(format!("unknown section tag {other} before byte {at}")));
                }
            }
        }
        let inputs = inputs.ok_or_else(|| LogError::Format("no inputs section".into()))?;
        Ok(RecordedRun { inputs, deliveries, trailer })
    }
}

/// Where a replay first departed from its recording.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// Index of the delivery (0-based).
    pub index: u64,
    /// The instant of the delivery in the replay (or of the recorded one, if the replay ran out).
    pub instant: Instant,
    /// The receiving actor's name.
    pub actor: String,
    /// The recorded delivery, decoded (or "nothing" when the replay delivered more).
    pub recorded: String,
    /// The replayed delivery (or "nothing" when the replay ended early).
    pub replayed: String,
}

/// Compares a new run's deliveries with a recording and stops the run at the first divergence.
pub struct ReplayCheck<M> {
    recorded: Vec<Vec<u8>>,
    next: usize,
    names: Vec<String>,
    divergence: Option<Divergence>,
    decode: fn(&[u8]) -> String,
    _message: std::marker::PhantomData<fn() -> M>,
}

impl<M: Message + Clone + Serialize + DeserializeOwned + Debug> ReplayCheck<M> {
    /// A check against the recorded deliveries.
    pub fn new(recorded: Vec<Vec<u8>>) -> ReplayCheck<M> {
        ReplayCheck {
            recorded,
            next: 0,
            names: Vec::new(),
            divergence: None,
            decode: |bytes| match bincode::serde::decode_from_slice::<Delivery<M>, _>(
                bytes,
                bincode::config::standard(),
            ) {
                Ok((delivery, _)) => format!("{delivery:?}"),
                Err(e) => format!("<undecodable record: {e}>"),
            },
            _message: std::marker::PhantomData,
        }
    }

    /// Call once the replay has ended: the first divergence, if any (including a replay that
    /// delivered fewer messages than were recorded).
    pub fn outcome(&self) -> Option<Divergence> {
        if let Some(d) = &self.divergence {
            return Some(d.clone());
        }
        self.recorded.get(self.next).map(|bytes| {
            let decoded: Option<Delivery<M>> =
                bincode::serde::decode_from_slice(bytes, bincode::config::standard()).ok().map(|(d, _)| d);
            Divergence {
                index: self.next as u64,
                instant: decoded.as_ref().map_or_else(Instant::default, |d| Instant {
                    time: crate::time::SimTime::from_micros(d.time_us),
                    round: d.round,
                }),
                actor: decoded
                    .as_ref()
                    .and_then(|d| self.names.get(d.to as usize).cloned())
                    .unwrap_or_else(|| "?".to_owned()),
                recorded: (self.decode)(bytes),
                replayed: "nothing: the replay ended first".to_owned(),
            }
        })
    }

    /// Deliveries matched so far.
    pub fn matched(&self) -> u64 {
        self.next as u64
    }
}

impl<M: Message + Clone + Serialize + DeserializeOwned + Debug> Observer<M> for ReplayCheck<M> {
    fn on_start(&mut self, actors: &[&str]) {
        self.names = actors.iter().map(|n| (*n).to_owned()).collect();
    }

    fn on_delivery(&mut self, envelope: &Envelope<M>) {
        if self.divergence.is_some() {
            return;
        }
        let delivery = Delivery::of(envelope);
        let replayed = encode(&delivery);
        let recorded = self.recorded.get(self.next);
        if recorded != Some(&replayed) {
            self.divergence = Some(Divergence {
                index: self.next as u64,
                instant: Instant { time: envelope.key.time, round: envelope.round },
                actor: self.names[envelope.to.index()].clone(),
                recorded: recorded
                    .map_or_else(|| "nothing: the recording ended first".to_owned(), |r| (self.decode)(r)),
                replayed: format!("{delivery:?}"),
            });
            return;
        }
        self.next += 1;
    }

    fn halt(&self) -> Option<String> {
        self.divergence.as_ref().map(|d| format!("replay diverged at delivery {}", d.index))
    }
}
