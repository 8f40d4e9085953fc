//! The streaming Chrome trace-event writer.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::actor::ActorId;
use crate::message::{Envelope, Message};
use crate::notes::Mark;
use crate::observer::{Observer, TransitionRecord, Value};
use crate::time::SimTime;

/// What to keep of a run in its timeline.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimelineFilter {
    /// Keep events from this simulated time on (inclusive).
    pub from: Option<SimTime>,
    /// Keep events up to this simulated time (inclusive).
    pub to: Option<SimTime>,
    /// Keep only actors whose name starts with one of these (all when empty).
    pub components: Vec<String>,
    /// Keep only phased items (e.g. requests) with these ids (all when empty), compared under
    /// `id_mask`.
    pub ids: Vec<u64>,
    /// The bits of an id that `ids` compare (all when `None`), so one id can select a family
    /// (a request's calls, say).
    pub id_mask: Option<u64>,
}

impl TimelineFilter {
    fn in_window(&self, t: SimTime) -> bool {
        self.from.is_none_or(|f| t >= f) && self.to.is_none_or(|to| t <= to)
    }

    fn overlaps(&self, start: SimTime, end: SimTime) -> bool {
        self.from.is_none_or(|f| end >= f) && self.to.is_none_or(|to| start <= to)
    }
}

/// A phased item being written.
struct OpenItem {
    written: bool,
    phases: Vec<Cow<'static, str>>,
}

/// Streams a run's timeline as Chrome trace-event JSON; see the module documentation.
pub struct TimelineWriter<W: Write> {
    out: W,
    error: Option<io::Error>,
    filter: TimelineFilter,
    group_of: Box<dyn Fn(&str) -> String>,
    names: Vec<String>,
    kept: Vec<bool>,
    pid_of_actor: Vec<u32>,
    groups: Vec<String>,
    threads: BTreeMap<(u32, String), u32>,
    next_tid: BTreeMap<u32, u32>,
    category_pids: BTreeMap<&'static str, u32>,
    open: BTreeMap<(&'static str, u64), OpenItem>,
    counters: BTreeMap<(u32, &'static str, &'static str), f64>,
    events: u64,
}

impl<W: Write> TimelineWriter<W> {
    /// A writer to `out`, keeping what `filter` keeps, with one Perfetto process per group that
    /// `group_of` assigns to actor names (e.g. all clients in one). `other_data` goes into the
    /// file's header for people (seed, scenario name).
    pub fn new(
        mut out: W,
        filter: TimelineFilter,
        group_of: Box<dyn Fn(&str) -> String>,
        other_data: &[(&str, String)],
    ) -> TimelineWriter<W> {
        let mut header =
            String::from("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"time\":\"simulated microseconds\"");
        for (key, value) in other_data {
            header.push(',');
            header.push_str(&json_string(key));
            header.push(':');
            header.push_str(&json_string(value));
        }
        header.push_str("},\"traceEvents\":[\n");
        let error = out.write_all(header.as_bytes()).err();
        TimelineWriter {
            out,
            error,
            filter,
            group_of,
            names: Vec::new(),
            kept: Vec::new(),
            pid_of_actor: Vec::new(),
            groups: Vec::new(),
            threads: BTreeMap::new(),
            next_tid: BTreeMap::new(),
            category_pids: BTreeMap::new(),
            open: BTreeMap::new(),
            counters: BTreeMap::new(),
            events: 0,
        }
    }

    /// Events written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Close every phase still open at `end` (a run cut at a horizon), close the JSON document
    /// and flush; reports the first write error of the whole run.
    pub fn finish(mut self, end: SimTime) -> io::Result<W> {
        let open = std::mem::take(&mut self.open);
        for ((category, id), item) in open {
            if !item.written {
                continue;
            }
            let pid = self.category_pid(category);
            for name in item.phases.iter().rev() {
                self.emit(&format!(
                    "{{\"ph\":\"e\",\"cat\":{},\"name\":{},\"id\":\"0x{id:x}\",\"pid\":{pid},\"tid\":0,\"ts\":{},\"args\":{{\"open_at_end\":true}}}}",
                    json_string(category),
                    json_string(name),
                    end.as_micros()
                ));
            }
        }
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        self.out.write_all(b"\n]}\n")?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn emit(&mut self, event: &str) {
        if self.error.is_some() {
            return;
        }
        let separator: &[u8] = if self.events == 0 { b"" } else { b",\n" };
        let result = self.out.write_all(separator).and_then(|()| self.out.write_all(event.as_bytes()));
        self.events += 1;
        if let Err(error) = result {
            self.error = Some(error);
        }
    }

    fn group_pid(&mut self, group: &str) -> u32 {
        if let Some(i) = self.groups.iter().position(|g| g == group) {
            return i as u32 + 1;
        }
        self.groups.push(group.to_owned());
        let pid = self.groups.len() as u32;
        self.emit(&format!(
            "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":{}}}}}",
            json_string(group)
        ));
        pid
    }

    fn tid(&mut self, actor: ActorId, lane: &str) -> (u32, u32) {
        let pid = self.pid_of_actor[actor.index()];
        let label = format!("{}: {lane}", self.names[actor.index()]);
        if let Some(&tid) = self.threads.get(&(pid, label.clone())) {
            return (pid, tid);
        }
        let next = self.next_tid.entry(pid).or_insert(1);
        let tid = *next;
        *next += 1;
        self.emit(&format!(
            "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":{}}}}}",
            json_string(&label)
        ));
        self.threads.insert((pid, label), tid);
        (pid, tid)
    }

    fn category_pid(&mut self, category: &'static str) -> u32 {
        if let Some(&pid) = self.category_pids.get(category) {
            return pid;
        }
        let pid = self.group_pid(&format!("{category}s"));
        self.emit(&format!(
            "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":{}}}}}",
            json_string(&format!("{category} lifetimes"))
        ));
        self.category_pids.insert(category, pid);
        pid
    }

    fn mark(&mut self, actor: ActorId, now: SimTime, mark: &Mark) {
        match mark {
            Mark::Span { lane, name, start, end, args } => {
                if !self.kept[actor.index()] || !self.filter.overlaps(*start, *end) {
                    return;
                }
                let (pid, tid) = self.tid(actor, lane);
                let dur = end.saturating_since(*start).as_micros();
                self.emit(&format!(
                    "{{\"ph\":\"X\",\"cat\":\"span\",\"name\":{},\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"dur\":{dur},\"args\":{}}}",
                    json_string(name),
                    start.as_micros(),
                    json_args(args)
                ));
            }
            Mark::Decision { lane, name, args } => {
                if !self.kept[actor.index()] || !self.filter.in_window(now) {
                    return;
                }
                let (pid, tid) = self.tid(actor, lane);
                self.emit(&format!(
                    "{{\"ph\":\"X\",\"cat\":\"decision\",\"name\":{},\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"dur\":0,\"args\":{}}}",
                    json_string(name),
                    now.as_micros(),
                    json_args(args)
                ));
            }
            Mark::PhaseBegin { category, id, name, args } => {
                let item = self.open.entry((category, *id)).or_insert_with(|| OpenItem {
                    // An item is written whole or not at all: decided at its first phase.
                    written: (self.filter.ids.is_empty() || {
                        let mask = self.filter.id_mask.unwrap_or(u64::MAX);
                        self.filter.ids.iter().any(|wanted| wanted & mask == id & mask)
                    }) && self.filter.in_window(now),
                    phases: Vec::new(),
                });
                item.phases.push(name.clone());
                if item.written {
                    let pid = self.category_pid(category);
                    self.emit(&format!(
                        "{{\"ph\":\"b\",\"cat\":{},\"name\":{},\"id\":\"0x{id:x}\",\"pid\":{pid},\"tid\":0,\"ts\":{},\"args\":{}}}",
                        json_string(category),
                        json_string(name),
                        now.as_micros(),
                        json_args(args)
                    ));
                }
            }
            Mark::PhaseEnd { category, id } => {
                let Some(item) = self.open.get_mut(&(category, *id)) else { return };
                let Some(name) = item.phases.pop() else { return };
                let (written, done) = (item.written, item.phases.is_empty());
                if done {
                    self.open.remove(&(category, *id));
                }
                if written {
                    let pid = self.category_pid(category);
                    self.emit(&format!(
                        "{{\"ph\":\"e\",\"cat\":{},\"name\":{},\"id\":\"0x{id:x}\",\"pid\":{pid},\"tid\":0,\"ts\":{}}}",
                        json_string(category),
                        json_string(&name),
                        now.as_micros()
                    ));
                }
            }
            Mark::Counter { group, name, value } => {
                let pid = self.pid_of_actor[actor.index()];
                if !self.kept[actor.index()] || !self.filter.in_window(now) {
                    return;
                }
                if self.counters.insert((pid, group, name), *value) == Some(*value) {
                    return;
                }
                self.emit(&format!(
                    "{{\"ph\":\"C\",\"name\":{},\"pid\":{pid},\"tid\":0,\"ts\":{},\"args\":{{{}:{}}}}}",
                    json_string(group),
                    now.as_micros(),
                    json_string(name),
                    json_number(*value)
                ));
            }
        }
    }
}

impl<M: Message, W: Write + 'static> Observer<M> for TimelineWriter<W> {
    fn wants_descriptions(&self) -> bool {
        true
    }

    fn on_start(&mut self, actors: &[&str]) {
        self.names = actors.iter().map(|n| (*n).to_owned()).collect();
        self.kept = actors
            .iter()
            .map(|n| {
                self.filter.components.is_empty()
                    || self.filter.components.iter().any(|c| n.starts_with(c.as_str()))
            })
            .collect();
        let mut groups: Vec<String> = actors.iter().map(|n| (self.group_of)(n)).collect();
        let mut sorted = groups.clone();
        sorted.sort();
        sorted.dedup();
        for group in &sorted {
            self.group_pid(group);
        }
        self.pid_of_actor = groups.drain(..).map(|g| self.group_pid(&g)).collect();
    }

    fn on_delivery(&mut self, envelope: &Envelope<M>) {
        let (from, to) = (envelope.sender, envelope.to);
        let delivered = envelope.key.time;
        if !self.kept[from.index()]
            || !self.kept[to.index()]
            || !self.filter.in_window(envelope.sent_at.time)
            || !self.filter.in_window(delivered)
        {
            return;
        }
        let bind = (u64::from(envelope.key.sender.0) << 40) | envelope.key.send_count;
        let label = json_string(envelope.payload.label());
        let (pid, tid) = self.tid(from, "messages");
        let receiver = json_string(&self.names[to.index()]);
        self.emit(&format!(
            "{{\"ph\":\"X\",\"cat\":\"message\",\"name\":{label},\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"dur\":0,\"bind_id\":\"0x{bind:x}\",\"flow_out\":true,\"args\":{{\"to\":{receiver}}}}}",
            envelope.sent_at.time.as_micros()
        ));
        let (pid, tid) = self.tid(to, "messages");
        let sender = json_string(&self.names[from.index()]);
        self.emit(&format!(
            "{{\"ph\":\"X\",\"cat\":\"message\",\"name\":{label},\"pid\":{pid},\"tid\":{tid},\"ts\":{},\"dur\":0,\"bind_id\":\"0x{bind:x}\",\"flow_in\":true,\"args\":{{\"from\":{sender}}}}}",
            delivered.as_micros()
        ));
    }

    fn on_transition(&mut self, record: &TransitionRecord<'_>) {
        let Some(notes) = record.notes else { return };
        for mark in notes.marks() {
            self.mark(record.actor, record.now.time, mark);
        }
    }
}

fn json_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serialises")
}

fn json_number(v: f64) -> String {
    if v.is_finite() {
        serde_json::to_string(&v).expect("a finite number serialises")
    } else {
        "0".to_owned()
    }
}

fn json_args(args: &[(&'static str, Value)]) -> String {
    let mut s = String::from("{");
    for (i, (key, value)) in args.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        s.push_str(&json_string(key));
        s.push(':');
        match value {
            Value::U64(v) => s.push_str(&v.to_string()),
            Value::I64(v) => s.push_str(&v.to_string()),
            Value::F64(v) => s.push_str(&json_number(*v)),
            Value::Text(t) => s.push_str(&json_string(t)),
        }
    }
    s.push('}');
    s
}
