//! One LLM call's record, a line of `calls.jsonl`, and its fate.

use serde::{Deserialize, Serialize};

/// How a request ended; written once per request, and every latency derives from it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "fate", rename_all = "snake_case")]
pub enum Fate {
    /// Every output token reached the client.
    Completed,
    /// Refused without being served.
    Dropped {
        /// Why, e.g. `exceeds_max_model_len`.
        reason: String,
    },
    /// Still being computed, or its answer still travelling, when the run stopped at its
    /// horizon.
    InFlightAtHorizon,
    /// Waiting for its first step (or travelling to the engine) when the run stopped at its
    /// horizon.
    QueuedAtHorizon,
    /// Not answered within its timeout; the client aborted it (the engine freed its blocks).
    TimedOut,
    /// Never sent: a node it depends on failed, or was unfinished when the run stopped.
    NotStarted,
}

/// One LLM call as the client saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The replication it belongs to (`calls.jsonl` holds replication 0).
    pub replication: u32,
    /// The call's name: its request's id for a request of one LLM call, else `<request>/<node>`.
    pub request_id: String,
    /// The request it belongs to.
    pub request: String,
    /// Its node in the request.
    pub node: String,
    /// The nodes it waited for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<String>,
    /// The client that sent it.
    pub client: String,
    /// When the client sent it (or, if never sent, when its request arrived), µs of simulated
    /// time.
    pub arrival_us: u64,
    /// Prompt tokens.
    pub input_tokens: u32,
    /// Output tokens requested (and generated, if completed).
    pub output_tokens: u32,
    /// The engine instance that served it (empty if it never reached one).
    pub instance: String,
    /// Prompt tokens the engine found in its prefix cache when it first admitted the call.
    pub cached_tokens: u32,
    /// Times the engine preempted it.
    pub preemptions: u32,
    /// How it ended.
    #[serde(flatten)]
    pub fate: Fate,
    /// When the client stopped waiting for it (its answer arrived, or its timeout fired), µs
    /// of simulated time; absent if it was still outstanding at the end or never sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_us: Option<u64>,
    /// Per output token, µs: element 0 is the time to first token (arrival → first token at
    /// the client), element k the gap between tokens k−1 and k. Empty unless completed.
    pub token_latency_us: Vec<u64>,
    /// For the request's last call to finish: the request's end to end time (its arrival to
    /// its last node's end), µs; absent on other calls and on requests that did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_e2e_us: Option<u64>,
    /// For a call served disaggregated (prefill on one instance, decode on another, the KV
    /// cache moved between them): the prefill side and the transfer; absent otherwise. The
    /// decode instance is [`CallRecord::instance`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaggregated: Option<Disaggregated>,
}

/// The prefill side of a disaggregated call, and the KV transfer from it to the decode side.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disaggregated {
    /// The instance that ran the prefill leg (its one output token is discarded). The call's
    /// `cached_tokens` are this instance's, as llm-d's sidecar reports them.
    pub prefill_instance: String,
    /// KV bytes the decode instance read from the prefill instance (over all its GPUs); 0 when
    /// the read had not started or the decode instance had every block.
    pub kv_bytes: u64,
    /// The read's time on the fabric, µs: from the decode worker starting it to its last byte
    /// arriving; absent when no read finished for the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_us: Option<u64>,
}

impl CallRecord {
    /// Time to first token, µs, if completed.
    pub fn ttft_us(&self) -> Option<u64> {
        self.token_latency_us.first().copied()
    }

    /// Arrival to last token, µs, if completed.
    pub fn e2e_us(&self) -> Option<u64> {
        (!self.token_latency_us.is_empty()).then(|| self.token_latency_us.iter().sum())
    }

    /// Append the record as one line of `calls.jsonl` without its newline: the bytes
    /// `serde_json::to_writer` gives, written field by field, because serde's flattened map
    /// and its copy per number were a tenth of a run's instructions (docs/PERFORMANCE.md).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        let mut digits = itoa::Buffer::new();
        let mut number = |out: &mut Vec<u8>, key: &str, value: u64| {
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(digits.format(value).as_bytes());
        };
        number(out, "{\"replication\":", u64::from(self.replication));
        text(out, ",\"request_id\":", &self.request_id);
        text(out, ",\"request\":", &self.request);
        text(out, ",\"node\":", &self.node);
        if !self.parents.is_empty() {
            out.extend_from_slice(b",\"parents\":[");
            for (i, parent) in self.parents.iter().enumerate() {
                text(out, if i == 0 { "" } else { "," }, parent);
            }
            out.push(b']');
        }
        text(out, ",\"client\":", &self.client);
        number(out, ",\"arrival_us\":", self.arrival_us);
        number(out, ",\"input_tokens\":", u64::from(self.input_tokens));
        number(out, ",\"output_tokens\":", u64::from(self.output_tokens));
        text(out, ",\"instance\":", &self.instance);
        number(out, ",\"cached_tokens\":", u64::from(self.cached_tokens));
        number(out, ",\"preemptions\":", u64::from(self.preemptions));
        let fate = match &self.fate {
            Fate::Completed => "completed",
            Fate::Dropped { .. } => "dropped",
            Fate::InFlightAtHorizon => "in_flight_at_horizon",
            Fate::QueuedAtHorizon => "queued_at_horizon",
            Fate::TimedOut => "timed_out",
            Fate::NotStarted => "not_started",
        };
        text(out, ",\"fate\":", fate);
        if let Fate::Dropped { reason } = &self.fate {
            text(out, ",\"reason\":", reason);
        }
        if let Some(settled) = self.settled_us {
            number(out, ",\"settled_us\":", settled);
        }
        out.extend_from_slice(b",\"token_latency_us\":[");
        write_list(out, &self.token_latency_us);
        out.push(b']');
        if let Some(e2e) = self.request_e2e_us {
            number(out, ",\"request_e2e_us\":", e2e);
        }
        if let Some(disaggregated) = &self.disaggregated {
            text(out, ",\"disaggregated\":{\"prefill_instance\":", &disaggregated.prefill_instance);
            number(out, ",\"kv_bytes\":", disaggregated.kv_bytes);
            if let Some(transfer) = disaggregated.transfer_us {
                number(out, ",\"transfer_us\":", transfer);
            }
            out.push(b'}');
        }
        out.push(b'}');
    }
}

/// Two decimal digits of every number below 100.
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// Append `values` in decimal, separated by commas. A record's token latencies are most of its
/// bytes, and itoa's digits would each be a copy of unknown length (a call): here they are
/// written in place, two at a time.
fn write_list(out: &mut Vec<u8>, values: &[u64]) {
    let start = out.len();
    // At most 20 digits and a comma each.
    out.resize(start + values.len() * 21, 0);
    let mut end = start;
    for (i, &value) in values.iter().enumerate() {
        if i > 0 {
            out[end] = b',';
            end += 1;
        }
        end += decimal_digits(value);
        let mut at = end;
        let mut rest = value;
        while rest >= 100 {
            let pair = (rest % 100) as usize * 2;
            rest /= 100;
            at -= 2;
            out[at..at + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        }
        if rest >= 10 {
            let pair = rest as usize * 2;
            out[at - 2..at].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        } else {
            out[at - 1] = b'0' + rest as u8;
        }
    }
    out.truncate(end);
}

/// Powers of ten that fit a `u64`.
const POWERS_OF_TEN: [u64; 20] = {
    let mut powers = [1u64; 20];
    let mut i = 1;
    while i < 20 {
        powers[i] = powers[i - 1] * 10;
        i += 1;
    }
    powers
};

/// How many decimal digits `value` has (one for zero): its bit length times log10(2), by
/// 1233/4096, is that count or one less, and one comparison tells which (`ilog10` branches
/// through several ranges, and a record has a hundred numbers or more).
fn decimal_digits(value: u64) -> usize {
    let bits = 64 - (value | 1).leading_zeros();
    let fewer = ((bits * 1233) >> 12) as usize;
    (fewer + usize::from(value >= POWERS_OF_TEN[fewer])).max(1)
}

/// Append `key` and `value` as a JSON string, escaped as serde_json escapes it.
fn text(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(key.as_bytes());
    if value.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, value).expect("a string serialises");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digit_counts_are_those_of_the_decimal_form_at_every_power_of_ten() {
        let mut values = vec![0, 1, 9, u64::MAX];
        for power in POWERS_OF_TEN {
            values.extend([power - 1, power, power + 1, power.saturating_mul(5)]);
        }
        for bits in 0..64 {
            values.extend([1u64 << bits, (1u64 << bits) - 1]);
        }
        for value in values {
            assert_eq!(decimal_digits(value), value.to_string().len(), "{value}");
        }
    }

    fn record(fate: Fate) -> CallRecord {
        CallRecord {
            replication: 3,
            request_id: "chat-17".into(),
            request: "chat-17".into(),
            node: "llm".into(),
            parents: Vec::new(),
            client: "chat".into(),
            arrival_us: 97_725,
            input_tokens: 512,
            output_tokens: 128,
            instance: "engine/h100-0".into(),
            cached_tokens: 16,
            preemptions: 1,
            fate,
            settled_us: Some(944_847),
            token_latency_us: vec![20_371, 0, 6_104, u64::MAX],
            request_e2e_us: Some(847_122),
            disaggregated: None,
        }
    }

    fn assert_same_bytes(record: &CallRecord) {
        let mut written = Vec::new();
        record.write_json(&mut written);
        let serde = serde_json::to_vec(record).unwrap();
        assert_eq!(String::from_utf8(written).unwrap(), String::from_utf8(serde).unwrap());
    }

    #[test]
    fn a_record_is_written_as_serde_json_writes_it_whatever_its_fate_and_options() {
        let fates = [
            Fate::Completed,
            Fate::Dropped { reason: "exceeds_max_model_len".into() },
            Fate::InFlightAtHorizon,
            Fate::QueuedAtHorizon,
            Fate::TimedOut,
            Fate::NotStarted,
        ];
        for fate in fates {
            let full = record(fate);
            assert_same_bytes(&full);
            let mut bare = full.clone();
            bare.settled_us = None;
            bare.token_latency_us.clear();
            bare.request_e2e_us = None;
            assert_same_bytes(&bare);
            let mut rich = full;
            rich.parents = vec!["plan".into(), "search".into()];
            rich.disaggregated = Some(Disaggregated {
                prefill_instance: "engine/p-1".into(),
                kv_bytes: 1 << 40,
                transfer_us: None,
            });
            assert_same_bytes(&rich);
            rich.disaggregated.as_mut().unwrap().transfer_us = Some(42);
            rich.parents.truncate(1);
            assert_same_bytes(&rich);
        }
    }

    #[test]
    fn numbers_of_every_length_are_written_as_serde_json_writes_them() {
        let mut values = vec![0, u64::MAX, u64::MAX - 1];
        for power in 0..20 {
            let p = 10u64.pow(power);
            values.extend([p, p - 1, p + 1, p.wrapping_mul(2).wrapping_add(7)]);
            values.push(p.saturating_mul(9).saturating_add(p.saturating_sub(1)));
        }
        let mut longest = record(Fate::Completed);
        longest.token_latency_us = values.clone();
        assert_same_bytes(&longest);
        for value in values {
            longest.token_latency_us = vec![value];
            assert_same_bytes(&longest);
        }
    }

    #[test]
    fn strings_that_need_escaping_are_escaped_as_serde_json_escapes_them() {
        for name in ["", "quote\"d", "back\\slash", "tab\tand\nnewline", "\u{1}\u{1f}", "del\u{7f}", "ünï→😀"]
        {
            let mut odd = record(Fate::Dropped { reason: name.into() });
            odd.request_id = name.into();
            odd.request = format!("{name}/x");
            odd.node = name.into();
            odd.parents = vec![name.into()];
            odd.client = name.into();
            odd.instance = name.into();
            odd.disaggregated =
                Some(Disaggregated { prefill_instance: name.into(), ..Disaggregated::default() });
            assert_same_bytes(&odd);
        }
    }
}
