//! Session affinity: `session-affinity-scorer` and `session-affinity-filter` (both Alpha), their
//! shared strategies (`scheduling/util/sessionaffinity/`), and the `session-id-producer`
//! (`requestcontrol/dataproducer/sessionid/`).
//!
//! Two strategies, as upstream's:
//! - `encoded_endpoint_header` (the default): the request's header (default `x-session-token`)
//!   carries `base64(<pod id>)`; that pod scores 1, the filter keeps it alone when present. The
//!   response hook writes the header on the response, for the client to send back next turn.
//! - `session_id`: a server-side binding session id → pod, read from a header (default
//!   `x-session-id`) or a request attribute; the pre-request hook binds, refreshes, or migrates
//!   the binding — it migrates only when this request's own choice found the bound pod absent
//!   from the candidates. Bindings unused for `evictionTtlSeconds` are dropped by a sweep every
//!   `evictionSweepSeconds`, the sweeper's ticker starting with the plugin; here the sweep is
//!   evaluated in simulated time when a binding is read.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::{Built, DataKey, DataType, PluginKind};
use crate::endpoint::EndpointIndex;
use crate::params::{ParamError, decode};
use crate::request::RoutingRequest;
use crate::view::{Attributes, View};

/// The producer's registered type name.
pub const PRODUCER_TYPE: &str = "session-id-producer";
/// The header carrying the encoded pod when none is configured.
pub const DEFAULT_TOKEN_HEADER: &str = "x-session-token";
/// The header a `session_id` source reads when none is configured.
pub const DEFAULT_SESSION_ID_HEADER: &str = "x-session-id";
/// The longest binding lifetime or sweep period accepted, seconds (ten years; upstream's
/// `time.Duration` overflows near 292 years).
pub const MAX_EVICTION_SECONDS: f64 = 315_360_000.0;

/// Which slot the plugin fills.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `session-affinity-scorer`.
    Scorer,
    /// `session-affinity-filter`.
    Filter,
}

impl Role {
    fn type_name(self) -> &'static str {
        match self {
            Role::Scorer => "session-affinity-scorer",
            Role::Filter => "session-affinity-filter",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Role::Scorer => "scorer",
            Role::Filter => "filter",
        }
    }
}

/// Where a `session_id` strategy reads the session identifier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A request header (lower-cased, trimmed).
    Header(String),
    /// A request attribute, by key (e.g. `SessionIDDataKey/session-id-producer`), with the
    /// session-id producer writing that key, resolved after loading (other attributes are not
    /// simulated, so no other key is ever present).
    Attribute(String, Option<usize>),
}

/// One session's pin under the `session_id` strategy.
#[derive(Clone, Debug, PartialEq)]
pub struct Binding {
    /// The pod id it is pinned to.
    pub pod: Arc<str>,
    /// When it was last bound or refreshed, µs.
    pub last_seen_us: u64,
}

/// The `session_id` strategy's state: its sources, eviction schedule and bindings.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionIds {
    /// Sources in priority order; the first non-empty value wins.
    pub sources: Vec<Source>,
    /// A binding unused for longer than this is evicted, µs.
    pub ttl_us: u64,
    /// The sweep period, µs (the sweeps fall at whole multiples of it from the plugin's start).
    pub sweep_us: u64,
    bindings: BTreeMap<String, Binding>,
    /// This request's choice: whether the session's bound pod was among the candidates
    /// (`None`: no bound session was looked at). Upstream keeps it in per-request plugin state.
    presence: Cell<Option<bool>>,
}

/// The strategy a session-affinity plugin runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    /// The client sends back the pod the router wrote on the previous response.
    EncodedEndpointHeader {
        /// The header, lower-cased.
        header: String,
    },
    /// The router keeps the binding.
    SessionId(SessionIds),
}

/// A session-affinity scorer or filter.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionAffinity {
    /// Scorer or filter.
    pub role: Role,
    /// Which profile's target it pins (empty: the primary's).
    pub profile_name: String,
    /// Its strategy and state.
    pub strategy: Strategy,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct Params {
    strategy: String,
    encoded_endpoint_header_config: EncodedParams,
    session_id_config: SessionIdParams,
    profile_name: String,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            strategy: "encoded_endpoint_header".to_owned(),
            encoded_endpoint_header_config: EncodedParams::default(),
            session_id_config: SessionIdParams::default(),
            profile_name: String::new(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct EncodedParams {
    header: String,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct SessionIdParams {
    sources: Vec<SourceParams>,
    eviction_ttl_seconds: f64,
    eviction_sweep_seconds: f64,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct SourceParams {
    header: String,
    attribute: String,
}

/// `NormalizeHeader`: trimmed, lower-cased, the default when empty.
pub fn normalize_header(name: &str) -> String {
    let header = name.trim().to_lowercase();
    if header.is_empty() { DEFAULT_TOKEN_HEADER.to_owned() } else { header }
}

impl SessionAffinity {
    pub(super) fn build(role: Role, params: Option<&Value>) -> Result<Built, ParamError> {
        let type_name = role.type_name();
        let p: Params = decode(params).map_err(|mut e| {
            e.reason =
                format!("failed to parse the parameters of the '{type_name}' {} - {}", role.word(), e.reason);
            e
        })?;
        let invalid = |path: &str, why: String| {
            ParamError::invalid(
                params,
                path,
                format!("invalid parameters of the '{type_name}' {} - {why}", role.word()),
            )
        };
        let strategy = match p.strategy.as_str() {
            "encoded_endpoint_header" => Strategy::EncodedEndpointHeader {
                header: normalize_header(&p.encoded_endpoint_header_config.header),
            },
            "session_id" => {
                let c = p.session_id_config;
                let mut sources = Vec::new();
                for (i, s) in c.sources.iter().enumerate() {
                    if s.header.is_empty() == s.attribute.is_empty() {
                        return Err(invalid(
                            &format!("sessionIdConfig.sources[{i}]"),
                            format!("sources[{i}]: exactly one of header or attribute must be set"),
                        ));
                    }
                    sources.push(if s.header.is_empty() {
                        Source::Attribute(s.attribute.clone(), None)
                    } else {
                        Source::Header(normalize_header(&s.header))
                    });
                }
                if sources.is_empty() {
                    sources.push(Source::Header(DEFAULT_SESSION_ID_HEADER.to_owned()));
                }
                let ttl = if c.eviction_ttl_seconds == 0.0 { 300.0 } else { c.eviction_ttl_seconds };
                let sweep = if c.eviction_sweep_seconds == 0.0 { 10.0 } else { c.eviction_sweep_seconds };
                for (field, value) in [("evictionTtlSeconds", ttl), ("evictionSweepSeconds", sweep)] {
                    let path = format!("sessionIdConfig.{field}");
                    if value <= 0.0 {
                        return Err(invalid(&path, format!("{field} must be > 0, got {value}")));
                    }
                    if value > MAX_EVICTION_SECONDS {
                        return Err(invalid(
                            &path,
                            format!(
                                "{field} must be at most {MAX_EVICTION_SECONDS} (ten years), got {value}"
                            ),
                        ));
                    }
                }
                Strategy::SessionId(SessionIds {
                    sources,
                    ttl_us: seconds_to_micros(ttl),
                    sweep_us: seconds_to_micros(sweep).max(1),
                    bindings: BTreeMap::new(),
                    presence: Cell::new(None),
                })
            }
            other => {
                return Err(invalid(
                    "strategy",
                    format!("strategy must be \"encoded_endpoint_header\" or \"session_id\", got {other:?}"),
                ));
            }
        };
        let plugin = SessionAffinity { role, profile_name: p.profile_name, strategy };
        Ok(Built::plain(PluginKind::SessionAffinity(Box::new(plugin))))
    }

    /// Whether it writes a response header (the `encoded_endpoint_header` strategy).
    pub fn writes_response_header(&self) -> bool {
        matches!(self.strategy, Strategy::EncodedEndpointHeader { .. })
    }

    /// The scorer's scores over `candidates`: 1 for the session's pod, 0 for the others.
    pub fn score(&self, view: &View, candidates: &[EndpointIndex], out: &mut [Option<f64>]) {
        out.iter_mut().for_each(|s| *s = Some(0.0));
        if let Some(at) = self.choose(view, candidates) {
            out[at] = Some(1.0);
        }
    }

    /// The filter: the session's pod alone when it is among `input`, otherwise all of them.
    pub fn filter(&self, view: &View, input: &[EndpointIndex], out: &mut Vec<EndpointIndex>) {
        match self.choose(view, input) {
            Some(at) => out.push(input[at]),
            None => out.extend_from_slice(input),
        }
    }

    /// The position in `candidates` of the session's pod, if it is there.
    fn choose(&self, view: &View, candidates: &[EndpointIndex]) -> Option<usize> {
        let pod_at = |pod: &str| candidates.iter().position(|&e| &*view.endpoints[e as usize].name == pod);
        match &self.strategy {
            Strategy::EncodedEndpointHeader { header } => {
                let pod = decode_pod_name(view.request.header(header)?)?;
                pod_at(&pod)
            }
            Strategy::SessionId(ids) => {
                if candidates.is_empty() {
                    return None;
                }
                let session = ids.resolve(view.request, view.attributes)?;
                let pod = &ids.bound(session, view.now_us)?.pod;
                let at = pod_at(pod);
                ids.presence.set(Some(at.is_some()));
                at
            }
        }
    }

    /// Forget the previous request's choice.
    pub fn begin_request(&mut self) {
        if let Strategy::SessionId(ids) = &mut self.strategy {
            ids.presence.set(None);
        }
    }

    /// Point attribute sources at the session-id producer writing their key.
    pub fn resolve_sources(&mut self, producer_of: impl Fn(&str) -> Option<usize>) {
        if let Strategy::SessionId(ids) = &mut self.strategy {
            for source in &mut ids.sources {
                if let Source::Attribute(key, producer) = source {
                    *producer = producer_of(key);
                }
            }
        }
    }

    /// The pre-request hook: under `session_id`, bind, refresh or migrate the session's pin to
    /// `picked` (the pinned profile's first target), at `now_us`. A binding a sweep has evicted
    /// is as if absent.
    pub fn pre_request(
        &mut self,
        request: &RoutingRequest,
        attributes: &Attributes,
        now_us: u64,
        picked: Option<&Arc<str>>,
    ) {
        let Strategy::SessionId(ids) = &mut self.strategy else { return };
        let Some(session) = ids.resolve(request, attributes) else { return };
        let Some(picked) = picked else { return };
        let fresh = Binding { pod: picked.clone(), last_seen_us: now_us };
        let existing = ids.bound(session, now_us).map(|b| b.pod.clone());
        match existing {
            None => {
                ids.bindings.insert(session.to_owned(), fresh);
            }
            Some(pod) if pod == *picked => {
                ids.bindings.insert(session.to_owned(), fresh);
            }
            // Migrate only on an absence this request's own choice recorded.
            Some(_) if ids.presence.get() == Some(false) => {
                ids.bindings.insert(session.to_owned(), fresh);
            }
            Some(_) => {}
        }
    }

    /// The response-header hook: the header and token to write, given the pinned profile's
    /// first target (`None` writes nothing).
    pub fn response_header(&self, pod: Option<&str>) -> Option<(String, String)> {
        match &self.strategy {
            Strategy::EncodedEndpointHeader { header } => {
                Some((header.clone(), encode_base64(pod?.as_bytes())))
            }
            Strategy::SessionId(_) => None,
        }
    }

    /// The session's binding, if any (for tests and reports).
    pub fn binding(&self, session: &str, now_us: u64) -> Option<&Binding> {
        match &self.strategy {
            Strategy::SessionId(ids) => ids.bindings.get(session).filter(|b| !ids.swept(b, now_us)),
            Strategy::EncodedEndpointHeader { .. } => None,
        }
    }
}

impl SessionIds {
    /// `resolveSessionID`: the first source with a non-empty (trimmed) value.
    fn resolve<'a>(&self, request: &RoutingRequest<'a>, attributes: &'a Attributes) -> Option<&'a str> {
        self.sources.iter().find_map(|source| {
            let value = match source {
                Source::Header(h) => request.header(h),
                Source::Attribute(_, producer) => attributes.session_id((*producer)?),
            }?;
            let value = value.trim();
            (!value.is_empty()).then_some(value)
        })
    }

    /// The binding of `session`, unless a sweep at or before `now_us` found it expired.
    fn bound(&self, session: &str, now_us: u64) -> Option<&Binding> {
        self.bindings.get(session).filter(|b| !self.swept(b, now_us))
    }

    /// Whether a sweep at some `k · sweep` (k ≥ 1) in `(last_seen + ttl, now]` evicted `b`.
    fn swept(&self, b: &Binding, now_us: u64) -> bool {
        let deadline = b.last_seen_us.saturating_add(self.ttl_us);
        let first_sweep_after = (deadline / self.sweep_us).saturating_add(1).saturating_mul(self.sweep_us);
        first_sweep_after <= now_us
    }
}

fn seconds_to_micros(seconds: f64) -> u64 {
    libm::ceil(seconds * 1e6) as u64
}

/// `session-id-producer`: the session id from a header or a named cookie, as the request
/// attribute `SessionIDDataKey/<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionIdProducer {
    /// Read this header (lower-cased).
    Header(String),
    /// Read this cookie of the `cookie` header.
    Cookie(String),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
struct ProducerParams {
    header_name: String,
    cookie_name: String,
}

impl SessionIdProducer {
    pub(super) fn build(params: Option<&Value>) -> Result<Built, ParamError> {
        let p: ProducerParams = decode(params).map_err(|mut e| {
            e.reason =
                format!("failed to parse the parameters of the '{PRODUCER_TYPE}' producer: {}", e.reason);
            e
        })?;
        let header = p.header_name.trim().to_lowercase();
        let cookie = p.cookie_name.trim().to_owned();
        let producer = match (header.is_empty(), cookie.is_empty()) {
            (true, true) => {
                return Err(ParamError::invalid(
                    params,
                    "",
                    format!("'{PRODUCER_TYPE}' requires exactly one of headerName or cookieName to be set"),
                ));
            }
            (false, false) => {
                return Err(ParamError::invalid(
                    params,
                    "",
                    format!(
                        "'{PRODUCER_TYPE}' requires exactly one of headerName or cookieName to be set, not both"
                    ),
                ));
            }
            (false, true) => SessionIdProducer::Header(header),
            (true, false) => SessionIdProducer::Cookie(cookie),
        };
        Ok(Built::plain(PluginKind::SessionIdProducer(producer)))
    }

    /// The key it writes, for an instance named `name`.
    pub fn key(name: &str) -> DataKey {
        DataKey::new(DataType::SessionId, name)
    }

    /// The session id it extracts from a request with `headers` (`None`: none found).
    pub fn extract<'a>(&self, header: impl Fn(&str) -> Option<&'a str>) -> Option<&'a str> {
        let value = match self {
            SessionIdProducer::Header(h) => header(h)?.trim(),
            SessionIdProducer::Cookie(name) => cookie_value(header("cookie")?, name)?.trim(),
        };
        (!value.is_empty()).then_some(value)
    }
}

/// The value of cookie `name` in a `Cookie` header (`name=value` pairs split on `;`).
fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    if name.is_empty() {
        return None;
    }
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard padded base64 (Go's `base64.StdEncoding.EncodeToString`).
pub fn encode_base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `DecodePodName`: the pod id in a session token, or `None` when it is empty or not standard
/// padded base64 (Go's `StdEncoding.DecodeString`, which skips `\r` and `\n`).
pub fn decode_pod_name(token: &str) -> Option<String> {
    let text: Vec<u8> = token.bytes().filter(|&c| c != b'\r' && c != b'\n').collect();
    if text.is_empty() || !text.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let quads = text.len() / 4;
    for (q, quad) in text.chunks(4).enumerate() {
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && q + 1 != quads) {
            return None;
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            let v = ALPHABET.iter().position(|&a| a == c)? as u32;
            n = (n << 6) | v;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_as_go_writes_it() {
        for (text, encoded) in
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("default/pod1", "ZGVmYXVsdC9wb2Qx")]
        {
            assert_eq!(encode_base64(text.as_bytes()), encoded);
            if !text.is_empty() {
                assert_eq!(decode_pod_name(encoded).as_deref(), Some(text));
            }
        }
        for bad in ["garbage-token", "Zg", "Zg=a", "Z===", "Zg==Zg=="] {
            assert_eq!(decode_pod_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn cookies_are_read_by_name() {
        assert_eq!(cookie_value("a=1; llm-d-session=abc; b=2", "llm-d-session"), Some("abc"));
        assert_eq!(cookie_value("a=1;b", "b"), None);
        assert_eq!(cookie_value("a=1", ""), None);
    }
}
