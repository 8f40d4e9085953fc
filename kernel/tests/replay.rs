//! Record and replay: a recorded run replays without divergence on either host, and an altered
//! record is caught at its own delivery.

use blis_kernel::record::{MessageLog, RecordedRun, ReplayCheck};
use blis_kernel::toys::mesh::{self, MeshConfig, Token};
use blis_kernel::{Assembly, HostKind, RunEnd, Simulation, Streams};

const CONFIG: MeshConfig = MeshConfig { nodes: 12, ticks: 40, hops: 2 };

fn mesh(host: HostKind) -> Simulation<Token> {
    let mut assembly = Assembly::new();
    mesh::assemble(&mut assembly, CONFIG, Streams::new(9)).unwrap();
    assembly.build(host).unwrap()
}

fn record() -> RecordedRun {
    let mut sim = mesh(HostKind::Inline);
    sim.observe(MessageLog::new(Vec::new(), "mesh seed 9"));
    sim.run().unwrap();
    let log = sim.finish().take_observer::<MessageLog<Vec<u8>>>(0).unwrap();
    let bytes = log.finish("the end").unwrap();
    RecordedRun::read(bytes.as_slice()).unwrap()
}

fn replay(recorded: &RecordedRun, host: HostKind) -> (RunEnd, ReplayCheck<Token>) {
    let mut sim = mesh(host);
    sim.observe(ReplayCheck::<Token>::new(recorded.deliveries.clone()));
    let end = sim.run().unwrap();
    (end, sim.finish().take_observer::<ReplayCheck<Token>>(0).unwrap())
}

#[test]
fn a_recording_replays_without_divergence_on_both_hosts() {
    let recorded = record();
    assert_eq!(recorded.inputs, "mesh seed 9");
    assert_eq!(recorded.trailer.as_deref(), Some("the end"));
    assert!(recorded.deliveries.len() > 500);
    for host in [HostKind::Inline, HostKind::Tasks] {
        let (end, check) = replay(&recorded, host);
        assert!(matches!(end, RunEnd::Quiescent { .. }));
        assert_eq!(check.outcome(), None, "{host:?}");
        assert_eq!(check.matched(), recorded.deliveries.len() as u64);
    }
}

#[test]
fn an_altered_record_is_caught_at_its_delivery_and_stops_the_run() {
    let mut recorded = record();
    let target = 321;
    let original = recorded.deliveries[target].clone();
    let last = recorded.deliveries[target].len() - 1;
    recorded.deliveries[target][last] ^= 0x01; // flip a bit of the payload's last field
    let (end, check) = replay(&recorded, HostKind::Inline);
    let divergence = check.outcome().expect("the altered record diverges");
    assert_eq!(divergence.index, target as u64);
    assert!(matches!(end, RunEnd::Halted { ref actor, .. } if actor == "observer"), "{end:?}");
    let (expected, _): (blis_kernel::record::Delivery<Token>, usize) =
        bincode::serde::decode_from_slice(&original, bincode::config::standard()).unwrap();
    assert_eq!(divergence.instant.time.as_micros(), expected.time_us);
    assert_eq!(divergence.instant.round, expected.round);
    assert_eq!(divergence.actor, format!("node-{:03}", expected.to));
    assert_ne!(divergence.recorded, divergence.replayed);
}

#[test]
fn a_truncated_recording_is_reported_as_the_replay_delivering_more() {
    let mut recorded = record();
    recorded.deliveries.truncate(100);
    let (_, check) = replay(&recorded, HostKind::Inline);
    let divergence = check.outcome().unwrap();
    assert_eq!(divergence.index, 100);
    assert!(divergence.recorded.contains("recording ended first"));
}

#[test]
fn damaged_files_are_refused() {
    assert!(RecordedRun::read(&b"NOTALOG!"[..]).is_err());
    let mut bytes = b"BLISLOG1".to_vec();
    bytes.extend_from_slice(&[1, 9, 0, 0, 0, b'x']);
    assert!(RecordedRun::read(bytes.as_slice()).unwrap_err().to_string().contains("truncated"));
}
