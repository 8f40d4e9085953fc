//! The invariant registry: every rule the simulator promises, numbered, with the check that
//! enforces it in checked runs and the tests that cite it. `docs/INVARIANTS.md` is generated
//! from it ([`invariants_markdown`]) and a test keeps the file current.

/// One numbered invariant.
#[derive(Clone, Copy, Debug)]
pub struct Invariant {
    /// Its number, as violations and tests cite it (`I5`).
    pub id: &'static str,
    /// A short name.
    pub name: &'static str,
    /// The rule, in one or two sentences.
    pub rule: &'static str,
    /// Where it is checked, and when.
    pub check: &'static str,
    /// Tests that cite it by number (`file::test`).
    pub tests: &'static [&'static str],
}

/// Every invariant, in number order.
pub const INVARIANTS: &[Invariant] = &[
    Invariant {
        id: "I1",
        name: "causality",
        rule: "No message is delivered before it was sent: its delivery instant (t, round) is strictly later than the instant it was sent at, and it is delivered exactly at that instant, never late.",
        check: "`swarm::checker::Checker::on_delivery` (kernel observer), every delivery of a checked run",
        tests: &[
            "actors/src/swarm/checker.rs::tests::a_message_delivered_at_its_sending_instant_breaks_i1",
            "kernel/tests/rounds.rs::a_zero_delay_chain_of_k_actors_completes_in_k_rounds_at_one_time",
            "actors/tests/swarm.rs::the_short_swarm_finds_no_violation",
        ],
    },
    Invariant {
        id: "I2",
        name: "bag order",
        rule: "Each receiver's bag of one instant is sorted by the key (time, class, sender, send_count), strictly: no two messages share a key.",
        check: "`swarm::checker::Checker::on_delivery`, every delivery of a checked run",
        tests: &[
            "actors/src/swarm/checker.rs::tests::an_unsorted_bag_breaks_i2",
            "kernel/src/agenda.rs::tests::queue_hands_over_only_what_is_due_in_key_order",
            "kernel/src/agenda.rs::tests::bag_keys_order_like_their_fields",
            "actors/tests/swarm.rs::the_short_swarm_finds_no_violation",
        ],
    },
    Invariant {
        id: "I3",
        name: "time and transitions",
        rule: "Instants never go backwards; an actor makes at most one transition per instant, its elapsed time is the time since its previous transition, and an instant has at most the kernel's bound of rounds (no livelock within an instant).",
        check: "`swarm::checker::Checker::on_transition` every transition; the round bound by the kernel (`KernelError::RoundLimit`, reported as I3)",
        tests: &[
            "actors/src/swarm/checker.rs::tests::two_transitions_in_one_instant_break_i3",
            "kernel/tests/rounds.rs::transitions_are_internal_external_or_confluent_with_the_elapsed_time",
            "kernel/tests/rounds.rs::the_round_bound_fails_naming_the_actors",
            "actors/tests/swarm.rs::the_short_swarm_finds_no_violation",
        ],
    },
    Invariant {
        id: "I4",
        name: "call lifecycle",
        rule: "A client sends each call once; a call is answered (completed or refused) at most once, only after it was sent, and aborted only after it was sent and before its answer reached the client; an engine holds a request only with a client to answer.",
        check: "`swarm::checker::Checker::on_delivery` every delivery; `EngineHost::check` and `SglangHost::check` after every engine transition",
        tests: &[
            "actors/src/swarm/checker.rs::tests::a_second_answer_breaks_i4",
            "actors/tests/swarm.rs::the_short_swarm_finds_no_violation",
        ],
    },
    Invariant {
        id: "I5",
        name: "KV block conservation",
        rule: "In every engine instance every usable block is free or held; a held block's reference count equals the number of block tables holding it (the null block one more), free + held = blocks − 1, and the block-table count matches. In an SGLang instance every KV page is free, the radix tree's, or one request's (its row past the tree-owned prefix), the tree's sizes add up, and request rows held + free = rows.",
        check: "`Scheduler::check_invariants` (engines/src/vllm/scheduler/invariants.rs), through `EngineHost::check`, and the SGLang `Scheduler::check_invariants` (engines/src/sglang/scheduler/mod.rs), through `SglangHost::check`, after every engine transition",
        tests: &[
            "actors/tests/swarm.rs::a_leaked_kv_block_is_caught_with_its_reproduction_line",
            "bin/tests/swarm.rs::an_injected_leak_prints_the_line_that_reproduces_it",
            "actors/tests/conservation.rs::kv_blocks_are_conserved_after_every_step_under_preemption",
            "engines/src/vllm/block_pool.rs::tests::allocation_pops_the_head_and_freeing_appends_in_the_order_given",
            "engines/src/vllm/block_pool.rs::tests::the_index_agrees_with_an_ordered_map_under_inserts_and_removals",
        ],
    },
    Invariant {
        id: "I6",
        name: "step budgets",
        rule: "Every launched step schedules at most max_num_batched_tokens tokens (its total is the sum of its requests' tokens) and at most max_num_seqs requests; at most max_num_seqs requests run.",
        check: "`VllmEngine::check_invariants` and `Scheduler::check_invariants`, after every engine transition",
        tests: &[
            "engines/tests/oracle.rs::every_recorded_step_of_vllm_0_15_1_is_matched",
            "actors/tests/swarm.rs::the_short_swarm_finds_no_violation",
        ],
    },
    Invariant {
        id: "I7",
        name: "scheduler queues",
        rule: "Every request an engine holds is in exactly one of its waiting and running queues and indexed by its key; none has computed more tokens than it has.",
        check: "`Scheduler::check_invariants`, after every engine transition",
        tests: &[
            "engines/tests/oracle.rs::every_recorded_step_of_vllm_0_15_1_is_matched",
            "actors/tests/swarm.rs::the_short_swarm_finds_no_violation",
        ],
    },
    Invariant {
        id: "I8",
        name: "request conservation",
        rule: "Every call that arrived has exactly one fate (fates = arrivals), also when a horizon or the stop rule cuts the run; every call sent was answered, abandoned or is counted unfinished at the end, and the answers the clients received are the completed and refused calls.",
        check: "`swarm::checked::run_checked` at the end of every checked run, against the checker's counts",
        tests: &[
            "actors/tests/conservation.rs::a_horizon_cut_leaves_every_arrival_with_one_fate",
            "actors/tests/swarm.rs::the_short_swarm_finds_no_violation",
        ],
    },
    Invariant {
        id: "I9",
        name: "progress",
        rule: "No livelock or deadlock: a run without a horizon ends with every call settled (no call queued or in flight at the end), or is judged overloaded by the stop rule; no engine stalls.",
        check: "`swarm::checked::run_checked` at the end of every checked run (an engine stall, `RunError::Stalled`, is a violation)",
        tests: &[
            "actors/tests/swarm.rs::the_short_swarm_finds_no_violation",
            "engines/tests/vllm_engine.rs::the_upstream_priority_livelock_is_reported_not_run_forever",
        ],
    },
    Invariant {
        id: "I10",
        name: "determinism",
        rule: "The same scenario and seed give byte-identical outputs: checked or not, on the inline or the task host, with any thread count, with vLLM's decoders advanced as a cohort or walked one by one.",
        check: "`swarm::checked::run_checked` reruns every seed unchecked (every fourth on the task host, every odd one walking every vLLM request every step) and compares the digest of fates and calls",
        tests: &[
            "actors/tests/swarm.rs::the_short_swarm_finds_no_violation",
            "actors/tests/gate.rs::every_gate_scenario_gives_its_golden_bytes_walking_every_request",
            "engines/tests/vllm_cohort.rs::a_cohort_decides_as_the_faithful_walk_does",
            "actors/tests/statistics.rs::replications_are_identical_whatever_the_thread_count_and_give_intervals",
            "actors/tests/gate.rs::every_gate_scenario_replays_without_divergence",
            "actors/tests/routing.rs::llm_d_routing_is_byte_identical_across_hosts_and_thread_counts",
        ],
    },
    Invariant {
        id: "I11",
        name: "bounded inputs",
        rule: "Every input the parsers accept is within its bound and simulates without a panic, an abort or a hang; every other input is refused with one message naming the field.",
        check: "`swarm::fuzz::fuzz_one` on every mutated input; the `swarm` subcommand's wall-time bound per seed",
        tests: &[
            "actors/tests/swarm.rs::the_short_swarm_finds_no_violation",
            "actors/src/swarm/fuzz.rs::tests::the_inputs_that_found_the_empty_key_bug_are_refused_by_path",
            "bin/tests/reliability.rs::token_counts_beyond_every_max_model_len_are_refused",
            "bin/tests/reliability.rs::huge_timeouts_and_think_times_are_refused_not_wrapped",
            "bin/tests/reliability.rs::rates_and_counts_whose_run_would_never_end_are_refused",
        ],
    },
    Invariant {
        id: "I12",
        name: "CPU KV tier conservation",
        rule: "An offloading instance's CPU blocks are free or present (free + present = capacity, ids distinct); the blocks not ready are exactly those some request is storing, and each ready block's loads in flight are the requests loading it; once every transfer is reported no GPU or CPU block is left held, pinned or not ready, whatever was aborted.",
        check: "`OffloadingScheduler::check`, through `Scheduler::check_invariants`, after every engine transition",
        tests: &[
            "engines/tests/offload_properties.rs::kv_blocks_are_conserved_on_both_tiers_and_none_leak_under_random_aborts",
            "engines/tests/oracle.rs::every_recorded_step_of_vllm_0_15_1_is_matched",
        ],
    },
    Invariant {
        id: "I13",
        name: "fabric capacity and bytes",
        rule: "No fabric link ever carries more than its capacity; every transfer's bytes drain at its max-min fair rate and arrive whole, never faster than its slowest link alone allows.",
        check: "`FabricActor::check`, after every fabric transition",
        tests: &[
            "actors/tests/fabric.rs::bytes_are_conserved_and_no_link_is_ever_over_capacity",
            "actors/tests/fabric.rs::a_transfer_starting_midway_slows_the_first_exactly_as_max_min_says",
        ],
    },
];

/// `docs/INVARIANTS.md`, generated from [`INVARIANTS`].
pub fn invariants_markdown() -> String {
    let mut out = String::from(
        "# Invariants\n\nGenerated from `actors/src/swarm/registry.rs` (a test keeps this file current: \
         `UPDATE_INVARIANTS=1 cargo test -p blis-actors --test swarm` rewrites it). Every rule the \
         simulator promises, numbered; a violation names its number. Checked runs \
         (`blis-actor swarm`, the short swarm of `cargo test`) run every check after every \
         instant; `docs/RELIABILITY.md` has the campaigns' figures.\n",
    );
    for invariant in INVARIANTS {
        out.push_str(&format!(
            "\n## {} {}\n\n{}\n\n- **Check:** {}\n- **Tests:**\n",
            invariant.id, invariant.name, invariant.rule, invariant.check
        ));
        for test in invariant.tests {
            out.push_str(&format!("  - `{test}`\n"));
        }
    }
    out
}
