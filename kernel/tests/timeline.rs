//! The timeline writer on a tiny hand-made run, event by event, and the checker rule by rule.

use blis_kernel::timeline::{TimelineFilter, TimelineWriter, check};
use blis_kernel::{
    Actor, ActorId, Assembly, Context, Event, HostKind, Message, MessageClass, Outbox, SimDuration, SimTime,
    TimeAdvance,
};

#[derive(Clone, Debug)]
struct Job;

impl Message for Job {
    fn class(&self) -> MessageClass {
        MessageClass(0)
    }

    fn label(&self) -> &'static str {
        "job"
    }
}

/// Sends one job at 10 µs, noting the decision, the job's first phase and a counter.
struct Source {
    sink: ActorId,
    sent: bool,
}

impl Actor<Job> for Source {
    fn time_advance(&self) -> TimeAdvance {
        if self.sent { TimeAdvance::Passive } else { TimeAdvance::After(SimDuration::from_micros(10)) }
    }

    fn transition(&mut self, _: &Context, _: Event<'_, Job>, out: &mut Outbox<Job>) {
        self.sent = true;
        out.send(self.sink, SimDuration::from_micros(5), Job);
        if let Some(notes) = out.notes() {
            notes.decision("decisions", "send").arg("to", "b/sink");
            notes.phase_begin("job", 1, "job-1");
            notes.phase_begin("job", 1, "travelling");
            notes.counter("queue", "length", 1.0);
        }
    }
}

/// Works on each job for 5 µs from its arrival, noting the span and ending the job's phases.
struct Sink;

impl Actor<Job> for Sink {
    fn time_advance(&self) -> TimeAdvance {
        TimeAdvance::Passive
    }

    fn transition(&mut self, ctx: &Context, _: Event<'_, Job>, out: &mut Outbox<Job>) {
        if let Some(notes) = out.notes() {
            let now = ctx.now.time;
            notes.span("work", "process", now, SimTime::from_micros(now.as_micros() + 5)).arg("tokens", 3u64);
            notes.phase_end("job", 1);
            notes.phase_end("job", 1);
            notes.counter("queue", "length", 0.0);
            notes.counter("queue", "length", 0.0);
        }
    }
}

fn tiny_run(filter: TimelineFilter, host: HostKind) -> String {
    let mut assembly = Assembly::new();
    let sink = assembly.add("b/sink", Sink).unwrap();
    assembly.add("a/source", Source { sink, sent: false }).unwrap();
    let mut sim = assembly.build(host).unwrap();
    let group = Box::new(|name: &str| name.split('/').next().unwrap_or(name).to_owned());
    sim.observe(TimelineWriter::new(Vec::new(), filter, group, &[("seed", "1".to_owned())]));
    sim.run().unwrap();
    let writer = sim.finish().take_observer::<TimelineWriter<Vec<u8>>>(0).unwrap();
    String::from_utf8(writer.finish(SimTime::from_micros(100)).unwrap()).unwrap()
}

const EXPECTED: &str = r#"{"displayTimeUnit":"ms","otherData":{"time":"simulated microseconds","seed":"1"},"traceEvents":[
{"ph":"M","name":"process_name","pid":1,"tid":0,"args":{"name":"a"}},
{"ph":"M","name":"process_name","pid":2,"tid":0,"args":{"name":"b"}},
{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"a/source: decisions"}},
{"ph":"X","cat":"decision","name":"send","pid":1,"tid":1,"ts":10,"dur":0,"args":{"to":"b/sink"}},
{"ph":"M","name":"process_name","pid":3,"tid":0,"args":{"name":"jobs"}},
{"ph":"M","name":"thread_name","pid":3,"tid":0,"args":{"name":"job lifetimes"}},
{"ph":"b","cat":"job","name":"job-1","id":"0x1","pid":3,"tid":0,"ts":10,"args":{}},
{"ph":"b","cat":"job","name":"travelling","id":"0x1","pid":3,"tid":0,"ts":10,"args":{}},
{"ph":"C","name":"queue","pid":1,"tid":0,"ts":10,"args":{"length":1.0}},
{"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"a/source: messages"}},
{"ph":"X","cat":"message","name":"job","pid":1,"tid":2,"ts":10,"dur":0,"bind_id":"0x0","flow_out":true,"args":{"to":"b/sink"}},
{"ph":"M","name":"thread_name","pid":2,"tid":1,"args":{"name":"b/sink: messages"}},
{"ph":"X","cat":"message","name":"job","pid":2,"tid":1,"ts":15,"dur":0,"bind_id":"0x0","flow_in":true,"args":{"from":"a/source"}},
{"ph":"M","name":"thread_name","pid":2,"tid":2,"args":{"name":"b/sink: work"}},
{"ph":"X","cat":"span","name":"process","pid":2,"tid":2,"ts":15,"dur":5,"args":{"tokens":3}},
{"ph":"e","cat":"job","name":"travelling","id":"0x1","pid":3,"tid":0,"ts":15},
{"ph":"e","cat":"job","name":"job-1","id":"0x1","pid":3,"tid":0,"ts":15},
{"ph":"C","name":"queue","pid":2,"tid":0,"ts":15,"args":{"length":0.0}}
]}
"#;

#[test]
fn a_tiny_run_gives_exactly_these_events_on_both_hosts() {
    let trace = tiny_run(TimelineFilter::default(), HostKind::Inline);
    assert_eq!(trace, EXPECTED);
    assert_eq!(tiny_run(TimelineFilter::default(), HostKind::Tasks), EXPECTED);
    assert_eq!(check(&trace), vec![]);
}

#[test]
fn filters_keep_a_valid_subset() {
    let late = tiny_run(
        TimelineFilter { from: Some(SimTime::from_micros(12)), ..TimelineFilter::default() },
        HostKind::Inline,
    );
    assert!(!late.contains("\"send\""), "the decision at 10 is outside the window");
    assert!(!late.contains("flow_out"), "a flow is kept only with both its ends");
    assert!(!late.contains("\"ph\":\"b\""), "an item is written whole or not at all");
    assert!(late.contains("\"process\""));
    assert_eq!(check(&late), vec![]);
    let only_source = tiny_run(
        TimelineFilter { components: vec!["a/".into()], ..TimelineFilter::default() },
        HostKind::Inline,
    );
    assert!(!only_source.contains("\"process\""));
    assert_eq!(check(&only_source), vec![]);
    let other_ids = tiny_run(TimelineFilter { ids: vec![2], ..TimelineFilter::default() }, HostKind::Inline);
    assert!(!other_ids.contains("job-1"));
    assert_eq!(check(&other_ids), vec![]);
}

/// The valid tiny trace with one edit applied.
fn broken(from: &str, to: &str) -> Vec<&'static str> {
    assert!(EXPECTED.contains(from), "{from}");
    check(&EXPECTED.replacen(from, to, 1)).iter().map(|v| v.rule).collect()
}

#[test]
fn the_checker_catches_each_broken_rule() {
    assert_eq!(broken(r#""ts":15,"dur":5"#, r#""ts":15"#), vec!["dur"]);
    assert_eq!(broken(r#""ts":15,"dur":5"#, r#""ts":15,"dur":-1"#), vec!["dur"]);
    assert!(broken(r#""ts":15,"dur":0,"bind_id""#, r#""ts":16,"dur":0,"bind_id""#).is_empty());
    assert_eq!(
        broken(
            r#"{"ph":"X","cat":"span","name":"process","pid":2,"tid":2,"ts":15,"dur":5,"args":{"tokens":3}},"#,
            "{\"ph\":\"X\",\"cat\":\"span\",\"name\":\"process\",\"pid\":2,\"tid\":2,\"ts\":15,\"dur\":5,\"args\":{}},\n{\"ph\":\"X\",\"cat\":\"span\",\"name\":\"late\",\"pid\":2,\"tid\":2,\"ts\":17,\"dur\":5,\"args\":{}},"
        ),
        vec!["nesting"]
    );
    assert_eq!(
        broken(r#"{"ph":"e","cat":"job","name":"job-1","id":"0x1","pid":3,"tid":0,"ts":15},"#, ""),
        vec!["async"]
    );
    assert_eq!(broken(r#""flow_in":true"#, r#""flow_out":true"#), vec!["flow"]);
    assert_eq!(broken(r#""args":{"length":0.0}"#, r#""args":{"length":"none"}"#), vec!["counter"]);
    assert_eq!(
        broken(r#"{"ph":"M","name":"process_name","pid":2,"tid":0,"args":{"name":"b"}},"#, ""),
        vec!["names"]
    );
    assert_eq!(
        broken(r#"{"ph":"M","name":"thread_name","pid":2,"tid":2,"args":{"name":"b/sink: work"}},"#, ""),
        vec!["names"]
    );
    assert_eq!(broken(r#""ph":"C""#, r#""ph":"Q""#), vec!["phase"]);
    assert_eq!(
        broken(
            r#"{"ph":"C","name":"queue","pid":2"#,
            r#"{"ph":"B","name":"open","pid":2,"tid":2,"ts":30},{"ph":"C","name":"queue","pid":2"#
        ),
        vec!["B/E"]
    );
    assert_eq!(
        broken(
            r#"{"ph":"C","name":"queue","pid":2"#,
            r#"{"ph":"s","name":"f","cat":"c","id":7,"pid":2,"tid":2,"ts":30},{"ph":"C","name":"queue","pid":2"#
        ),
        vec!["flow"]
    );
    assert_eq!(
        broken(
            r#""ts":15,"dur":0,"bind_id":"0x0","flow_in":true,"args":{"from":"a/source"}}"#,
            r#""ts":15,"bind_id":"0x0","flow_in":true,"args":{"from":"a/source"}}"#
        ),
        vec!["dur"]
    );
    assert_eq!(check("{not json").iter().map(|v| v.rule).collect::<Vec<_>>(), vec!["json"]);
    assert_eq!(check("{\"events\":[]}").iter().map(|v| v.rule).collect::<Vec<_>>(), vec!["container"]);
}
