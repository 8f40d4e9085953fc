//! Host parity and run-twice determinism: the same model and seed give byte-identical logs of
//! every delivery and transition on the inline host and the task host, run after run.

use std::cell::RefCell;
use std::fmt::{Debug, Write};
use std::rc::Rc;

use blis_kernel::toys::{mesh, mm1};
use blis_kernel::{Assembly, Envelope, HostKind, Message, Observer, Streams, TransitionRecord};

/// Writes one line per delivery and per transition, with the actors' descriptions.
struct Log(Rc<RefCell<String>>);

impl<M: Message + Debug> Observer<M> for Log {
    fn wants_descriptions(&self) -> bool {
        true
    }

    fn on_delivery(&mut self, e: &Envelope<M>) {
        let mut log = self.0.borrow_mut();
        writeln!(
            log,
            "deliver t={} r={} to={} from={} class={} n={} sent={} {:?}",
            e.key.time.as_micros(),
            e.round,
            e.to.0,
            e.sender.0,
            e.key.class.0,
            e.key.send_count,
            e.sent_at,
            e.payload
        )
        .unwrap();
    }

    fn on_transition(&mut self, r: &TransitionRecord<'_>) {
        let mut log = self.0.borrow_mut();
        writeln!(
            log,
            "transition {} {} {:?} e={} bag={} out={} next={:?} {:?}",
            r.now,
            r.name,
            r.kind,
            r.elapsed,
            r.bag_len,
            r.emitted,
            r.next_internal,
            r.description.map(|d| d.entries())
        )
        .unwrap();
    }
}

fn mm1_log(host: HostKind, seed: u64) -> String {
    let mut assembly = Assembly::new();
    let config = mm1::Mm1Config { mean_gap_us: 1_000.0, mean_service_us: 900.0, jobs: 3_000 };
    mm1::assemble(&mut assembly, config, Streams::new(seed)).unwrap();
    let mut sim = assembly.build(host).unwrap();
    let log = Rc::new(RefCell::new(String::new()));
    sim.observe(Log(log.clone()));
    sim.run().unwrap();
    log.take()
}

fn mesh_log(host: HostKind, seed: u64) -> String {
    let mut assembly = Assembly::new();
    let config = mesh::MeshConfig { nodes: 24, ticks: 60, hops: 3 };
    mesh::assemble(&mut assembly, config, Streams::new(seed)).unwrap();
    let mut sim = assembly.build(host).unwrap();
    let log = Rc::new(RefCell::new(String::new()));
    sim.observe(Log(log.clone()));
    sim.run().unwrap();
    let stats = sim.stats();
    let mut log = log.take();
    writeln!(log, "stats {stats:?}").unwrap();
    log
}

fn assert_same(what: &str, a: &str, b: &str) {
    if a != b {
        let line = a.lines().zip(b.lines()).position(|(x, y)| x != y).unwrap_or(0);
        panic!(
            "{what} diverges at line {line}:\n  {}\n  {}",
            a.lines().nth(line).unwrap_or(""),
            b.lines().nth(line).unwrap_or("")
        );
    }
}

#[test]
fn mm1_is_identical_on_both_hosts_and_on_repeated_runs() {
    let inline = mm1_log(HostKind::Inline, 5);
    assert!(inline.lines().count() > 10_000);
    assert_same("inline vs inline", &inline, &mm1_log(HostKind::Inline, 5));
    assert_same("inline vs tasks", &inline, &mm1_log(HostKind::Tasks, 5));
    assert_same("tasks vs tasks", &mm1_log(HostKind::Tasks, 5), &mm1_log(HostKind::Tasks, 5));
    assert_ne!(inline, mm1_log(HostKind::Inline, 6), "another seed must change the run");
}

#[test]
fn a_randomised_mesh_is_identical_on_both_hosts_and_on_repeated_runs() {
    for seed in [1, 2, 3] {
        let inline = mesh_log(HostKind::Inline, seed);
        assert!(inline.contains("Confluent"), "the mesh must exercise confluent transitions");
        assert!(inline.contains(" r=1 "), "the mesh must exercise zero-delay messages");
        assert_same("inline vs inline", &inline, &mesh_log(HostKind::Inline, seed));
        assert_same("inline vs tasks", &inline, &mesh_log(HostKind::Tasks, seed));
        assert_ne!(inline, mesh_log(HostKind::Inline, seed + 100));
    }
}
