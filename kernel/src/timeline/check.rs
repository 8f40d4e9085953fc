//! Validating a trace file against what Perfetto needs.
//!
//! Rules, each with its own [`Violation`]: the document is a trace-event container; every event
//! has a known phase, a pid and (except metadata) a numeric `ts`; every `X` has a non-negative
//! `dur`; complete slices and `B`/`E` pairs nest on each thread; async `b`/`e` events pair by
//! `(cat, id)` and nest; every flow binding (`bind_id`) has exactly one `flow_out` and one
//! `flow_in`, each on a slice; legacy `s`/`f` flows pair by id; counter arguments are numbers;
//! every pid and every thread that carries slices is named by metadata.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value as Json;

/// One broken rule, with the index of the offending event where there is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Index in `traceEvents`, if the violation is about one event.
    pub event: Option<usize>,
    /// The rule broken.
    pub rule: &'static str,
    /// Details.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.event {
            Some(i) => write!(f, "event {i}: {}: {}", self.rule, self.detail),
            None => write!(f, "{}: {}", self.rule, self.detail),
        }
    }
}

/// A thread: (pid, tid).
type Thread = (i64, i64);
/// Complete slices of a thread: (ts, dur, event index).
type Slices = Vec<(i64, i64, usize)>;
/// Begin/end events in the order met: (ts, is begin, event index).
type Marks = Vec<(i64, bool, usize)>;

const PHASES: &[&str] = &["X", "B", "E", "b", "e", "n", "C", "M", "i", "I", "s", "t", "f"];

fn violation(event: Option<usize>, rule: &'static str, detail: impl Into<String>) -> Violation {
    Violation { event, rule, detail: detail.into() }
}

/// Every violation in the trace `text`, in event order (empty when it is valid).
pub fn check(text: &str) -> Vec<Violation> {
    let document: Json = match serde_json::from_str(text) {
        Ok(d) => d,
        Err(e) => return vec![violation(None, "json", e.to_string())],
    };
    let events = match &document {
        Json::Array(events) => events,
        Json::Object(map) => match map.get("traceEvents") {
            Some(Json::Array(events)) => events,
            _ => return vec![violation(None, "container", "no traceEvents array")],
        },
        _ => return vec![violation(None, "container", "neither an array nor an object")],
    };
    let mut out = Vec::new();
    let mut named_pids = BTreeSet::new();
    let mut named_threads = BTreeSet::new();
    let mut used_pids: BTreeMap<i64, usize> = BTreeMap::new();
    let mut used_threads: BTreeMap<Thread, usize> = BTreeMap::new();
    let mut slices: BTreeMap<Thread, Slices> = BTreeMap::new();
    let mut begin_end: BTreeMap<Thread, Marks> = BTreeMap::new();
    let mut asyncs: BTreeMap<(String, String), Marks> = BTreeMap::new();
    let mut binds: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    let mut legacy_flows: BTreeMap<String, (u32, u32)> = BTreeMap::new();

    for (i, event) in events.iter().enumerate() {
        let Some(event) = event.as_object() else {
            out.push(violation(Some(i), "event", "not an object"));
            continue;
        };
        let ph = event.get("ph").and_then(Json::as_str).unwrap_or("");
        if !PHASES.contains(&ph) {
            out.push(violation(Some(i), "phase", format!("unknown ph {ph:?}")));
            continue;
        }
        let Some(pid) = event.get("pid").and_then(Json::as_i64) else {
            out.push(violation(Some(i), "pid", "missing or not an integer"));
            continue;
        };
        let tid = event.get("tid").and_then(Json::as_i64).unwrap_or(0);
        if ph == "M" {
            match event.get("name").and_then(Json::as_str) {
                Some("process_name") => {
                    named_pids.insert(pid);
                }
                Some("thread_name") => {
                    named_threads.insert((pid, tid));
                }
                _ => {}
            }
            continue;
        }
        used_pids.entry(pid).or_insert(i);
        let Some(ts) = event.get("ts").and_then(Json::as_f64) else {
            out.push(violation(Some(i), "ts", "missing or not a number"));
            continue;
        };
        let ts = ts.round() as i64;
        match ph {
            "X" => {
                used_threads.entry((pid, tid)).or_insert(i);
                match event.get("dur").and_then(Json::as_f64) {
                    Some(d) if d >= 0.0 => {
                        slices.entry((pid, tid)).or_default().push((ts, d.round() as i64, i))
                    }
                    Some(d) => out.push(violation(Some(i), "dur", format!("negative dur {d}"))),
                    None => {
                        out.push(violation(Some(i), "dur", "complete slice without dur (Perfetto drops it)"))
                    }
                }
            }
            "B" | "E" => {
                used_threads.entry((pid, tid)).or_insert(i);
                begin_end.entry((pid, tid)).or_default().push((ts, ph == "B", i));
            }
            "b" | "e" | "n" => {
                let cat = event.get("cat").and_then(Json::as_str).unwrap_or("").to_owned();
                let Some(id) = event.get("id").map(|v| v.to_string()) else {
                    out.push(violation(Some(i), "async id", "async event without id"));
                    continue;
                };
                if ph != "n" {
                    asyncs.entry((cat, id)).or_default().push((ts, ph == "b", i));
                }
            }
            "C" => match event.get("args").and_then(Json::as_object) {
                Some(args) if !args.is_empty() => {
                    for (key, value) in args {
                        let numeric =
                            value.is_number() || value.as_str().is_some_and(|s| s.parse::<f64>().is_ok());
                        if !numeric {
                            out.push(violation(Some(i), "counter", format!("argument {key} is not numeric")));
                        }
                    }
                }
                _ => out.push(violation(Some(i), "counter", "counter without arguments")),
            },
            "s" | "f" => {
                let id = event.get("id").map(|v| v.to_string()).unwrap_or_default();
                let entry = legacy_flows.entry(id).or_default();
                if ph == "s" {
                    entry.0 += 1;
                } else {
                    entry.1 += 1;
                }
            }
            _ => {}
        }
        if let Some(bind) = event.get("bind_id").map(|v| v.to_string()) {
            if !matches!(ph, "X" | "B" | "b" | "n") {
                out.push(violation(
                    Some(i),
                    "flow",
                    format!("flow binding on a {ph} event does not bind to a slice"),
                ));
            }
            let entry = binds.entry(bind).or_default();
            if event.get("flow_out").and_then(Json::as_bool) == Some(true) {
                entry.0 += 1;
            }
            if event.get("flow_in").and_then(Json::as_bool) == Some(true) {
                entry.1 += 1;
            }
        }
    }

    for ((pid, tid), mut list) in slices {
        // Parents first: earlier start, then longer.
        list.sort_by_key(|&(ts, dur, i)| (ts, std::cmp::Reverse(dur), i));
        let mut stack: Vec<(i64, usize)> = Vec::new();
        for (ts, dur, i) in list {
            // Close the slices this one starts after (a zero-length slice at a parent's very end
            // still sits inside it).
            while stack.last().is_some_and(|&(end, _)| end < ts || (end == ts && dur > 0)) {
                stack.pop();
            }
            if let Some(&(parent_end, parent)) = stack.last()
                && ts + dur > parent_end
            {
                out.push(violation(
                    Some(i),
                    "nesting",
                    format!("slice on pid {pid} tid {tid} overlaps event {parent} without nesting in it"),
                ));
                continue;
            }
            stack.push((ts + dur, i));
        }
    }
    for ((pid, tid), mut list) in begin_end {
        list.sort_by_key(|&(ts, _, i)| (ts, i));
        let mut depth = 0i64;
        for (_, begin, i) in list {
            depth += if begin { 1 } else { -1 };
            if depth < 0 {
                out.push(violation(Some(i), "B/E", format!("E without B on pid {pid} tid {tid}")));
                depth = 0;
            }
        }
        if depth > 0 {
            out.push(violation(None, "B/E", format!("{depth} B without E on pid {pid} tid {tid}")));
        }
    }
    for ((cat, id), mut list) in asyncs {
        list.sort_by_key(|&(ts, begin, i)| (ts, !begin, i));
        let mut depth = 0i64;
        for (_, begin, i) in list {
            depth += if begin { 1 } else { -1 };
            if depth < 0 {
                out.push(violation(Some(i), "async", format!("end without begin for cat {cat:?} id {id}")));
                depth = 0;
            }
        }
        if depth > 0 {
            out.push(violation(None, "async", format!("{depth} begin without end for cat {cat:?} id {id}")));
        }
    }
    for (bind, (outs, ins)) in binds {
        if (outs, ins) != (1, 1) {
            out.push(violation(
                None,
                "flow",
                format!("bind_id {bind} has {outs} flow_out and {ins} flow_in (need 1 and 1)"),
            ));
        }
    }
    for (id, (starts, ends)) in legacy_flows {
        if starts == 0 || ends == 0 {
            out.push(violation(
                None,
                "flow",
                format!("flow id {id} has {starts} start and {ends} end events"),
            ));
        }
    }
    for (pid, first) in used_pids {
        if !named_pids.contains(&pid) {
            out.push(violation(Some(first), "names", format!("pid {pid} has no process_name")));
        }
    }
    for ((pid, tid), first) in used_threads {
        if !named_threads.contains(&(pid, tid)) {
            out.push(violation(Some(first), "names", format!("pid {pid} tid {tid} has no thread_name")));
        }
    }
    out
}
