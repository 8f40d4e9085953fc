//! `kv_transfer_config` as vLLM 0.15.1 takes it (`vllm/config/kv_transfer.py`), the
//! `kv_offloading_size` shorthand as `VllmConfig._post_init_kv_transfer_config` expands it, and
//! the offloading connector's extra config (`v1/kv_offload/{spec,cpu,factory}.py`).
//!
//! `OffloadingConnector` with the `lru` policy over `CPUOffloadingSpec` and `NixlConnector` with
//! device buffers are modelled; every other registered connector is refused by name, and where 0.15.1 itself fails (ARC crashing on
//! the first store; `--kv-offloading-size` alone with the hybrid KV-cache manager on) the
//! refusal carries upstream's condition.

use blis_contracts::FieldError;
use blis_contracts::yaml::{self, YamlValue};
use serde::Deserialize;

/// The connectors vLLM 0.15.1's factory registers.
const REGISTERED: &[&str] = &[
    "ExampleConnector",
    "P2pNcclConnector",
    "LMCacheConnectorV1",
    "LMCacheMPConnector",
    "NixlConnector",
    "MultiConnector",
    "MoRIIOConnector",
    "OffloadingConnector",
    "DecodeBenchConnector",
    "MooncakeConnector",
];

const ROLES: &str = "('kv_producer', 'kv_consumer', 'kv_both')";

/// `kv_transfer_config`, field by field as vLLM's dataclass has them.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvTransferConfig {
    /// The connector, by registry name.
    pub kv_connector: Option<String>,
    /// The engine id (a uuid4 when unset); no effect on the offloading connector.
    pub engine_id: Option<String>,
    /// `cuda` or `cpu`; unused by the offloading connector.
    pub kv_buffer_device: Option<String>,
    /// Unused by the offloading connector.
    pub kv_buffer_size: Option<f64>,
    /// `kv_producer`, `kv_consumer` or `kv_both`; required with a connector.
    pub kv_role: Option<String>,
    /// P2P-NCCL connectors only.
    pub kv_rank: Option<i64>,
    /// P2P-NCCL connectors only.
    pub kv_parallel_size: Option<i64>,
    /// P2P-NCCL connectors only.
    pub kv_ip: Option<String>,
    /// P2P-NCCL connectors only.
    pub kv_port: Option<i64>,
    /// Per-connector settings.
    #[serde(default)]
    pub kv_connector_extra_config: Option<YamlValue>,
    /// A module to import an unregistered connector from.
    pub kv_connector_module_path: Option<String>,
    /// NIXL only.
    pub enable_permute_local_kv: Option<bool>,
    /// `recompute` (default) or `fail`.
    pub kv_load_failure_policy: Option<String>,
}

/// Which connector a configuration selects, resolved.
#[derive(Clone, Debug, PartialEq)]
pub enum KvConnectorKind {
    /// `OffloadingConnector`.
    Offloading(OffloadConfig),
    /// `NixlConnector`.
    Nixl(NixlConfig),
}

/// NIXL's settings, resolved.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NixlConfig {
    /// `kv_producer`, `kv_consumer` or `kv_both` (NIXL acts on each request's params whatever
    /// the role).
    pub kv_role: String,
    /// The engine id, if configured (else the host names the instance).
    pub engine_id: Option<String>,
    /// Whether `kv_load_failure_policy` is `recompute` (else `fail`).
    pub recompute_on_failure: bool,
}

/// The offloading connector's settings, resolved.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct OffloadConfig {
    /// `cpu_bytes_to_use`: the CPU tier's bytes, summed over every rank.
    pub cpu_bytes_to_use: f64,
    /// Tokens per offloaded block (a multiple of the GPU block size).
    pub block_size: u32,
    /// Whether `kv_load_failure_policy` is `recompute` (else `fail`).
    pub recompute_on_failure: bool,
}

/// `floor(int(cpu_bytes_to_use) / bytes_per_offloaded_block)`, where an offloaded block is
/// `factor` GPU blocks over every layer and rank (`CPUOffloadingSpec`).
pub fn cpu_blocks(cpu_bytes_to_use: f64, bytes_per_gpu_block_all_ranks: u64, factor: u32) -> u64 {
    let per_block = bytes_per_gpu_block_all_ranks.saturating_mul(u64::from(factor));
    (cpu_bytes_to_use.trunc() as u64).checked_div(per_block).unwrap_or(0)
}

/// `kv_load_failure_policy`: whether a failed load is recomputed (`recompute`, the default)
/// rather than failing its request (`fail`).
fn recompute_on_failure(config: &KvTransferConfig, tc: &dyn Fn(&str) -> String) -> Result<bool, FieldError> {
    match config.kv_load_failure_policy.as_deref().unwrap_or("recompute") {
        "recompute" => Ok(true),
        "fail" => Ok(false),
        other => Err(FieldError::new(tc("kv_load_failure_policy"), other, "vLLM accepts recompute or fail")),
    }
}

/// Read a YAML number as vLLM would (`int` or `float`).
fn number(value: &YamlValue) -> Option<f64> {
    value.as_f64().or_else(|| value.as_i64().map(|v| v as f64)).or_else(|| value.as_u64().map(|v| v as f64))
}

impl KvTransferConfig {
    /// Read `kv_transfer_config` at `path`.
    pub fn from_yaml(value: &YamlValue, path: &str) -> Result<KvTransferConfig, FieldError> {
        yaml::from_value(value, path)
    }

    /// Resolve it, with `kv_offloading_size` (GiB) and `kv_offloading_backend` expanded as vLLM
    /// does, `gpu_block_size` the GPU block size, and the hybrid KV-cache manager decision's
    /// inputs (whether `kv_events_config` and `disable_hybrid_kv_cache_manager` were given).
    /// `None`: no connector.
    pub fn resolve(
        given: Option<&KvTransferConfig>,
        offloading_size_gib: Option<f64>,
        offloading_backend: Option<&str>,
        gpu_block_size: u32,
        kv_events_config: bool,
        disable_hybrid: Option<bool>,
        path: &str,
    ) -> Result<Option<KvConnectorKind>, FieldError> {
        let at = |field: &str| format!("{path}.{field}");
        let mut config = given.cloned();
        let mut extra = match given.and_then(|c| c.kv_connector_extra_config.clone()) {
            Some(YamlValue::Mapping(m)) => m,
            Some(YamlValue::Null) | None => Default::default(),
            Some(other) => {
                return Err(FieldError::new(
                    at("kv_transfer_config.kv_connector_extra_config"),
                    serde_json::to_string(&other).unwrap_or_default(),
                    "must be a mapping of connector settings",
                ));
            }
        };
        // The HMA decision runs before the offloading expansion (vllm.py l.943-1007 then l.1051).
        let hybrid_on = match disable_hybrid {
            Some(disabled) => !disabled,
            None => config.is_none() && !kv_events_config,
        };
        if disable_hybrid == Some(false) && kv_events_config {
            return Err(FieldError::new(
                at("disable_hybrid_kv_cache_manager"),
                "false",
                "Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. \
                 Consider omitting the --no-disable-hybrid-kv-cache-manager flag to let vLLM decide automatically.",
            ));
        }
        if let Some(size) = offloading_size_gib {
            let backend = offloading_backend.unwrap_or("native");
            if !(size.is_finite() && (0.0..=1.0e6).contains(&size)) {
                return Err(FieldError::new(
                    at("kv_offloading_size"),
                    size,
                    "must be a size in GiB between 0 and 1,000,000",
                ));
            }
            match backend {
                "native" => {}
                "lmcache" => {
                    return Err(FieldError::new(
                        at("kv_offloading_backend"),
                        "lmcache",
                        "it selects LMCacheConnectorV1, which is not modelled (only the native OffloadingConnector is)",
                    ));
                }
                other => {
                    return Err(FieldError::new(
                        at("kv_offloading_backend"),
                        other,
                        "vLLM accepts native or lmcache",
                    ));
                }
            }
            let c = config.get_or_insert_with(KvTransferConfig::default);
            c.kv_connector = Some("OffloadingConnector".to_owned());
            c.kv_role = Some("kv_both".to_owned());
            extra.insert(YamlValue::from("cpu_bytes_to_use"), YamlValue::from(size * (1u64 << 30) as f64));
        } else if offloading_backend.is_some_and(|b| b != "native" && b != "lmcache") {
            return Err(FieldError::new(
                at("kv_offloading_backend"),
                offloading_backend.unwrap_or_default(),
                "vLLM accepts native or lmcache",
            ));
        }
        let Some(config) = config else { return Ok(None) };
        let tc = |field: &str| at(&format!("kv_transfer_config.{field}"));
        if let Some(role) = &config.kv_role
            && !["kv_producer", "kv_consumer", "kv_both"].contains(&role.as_str())
        {
            return Err(FieldError::new(
                tc("kv_role"),
                role,
                format!("Unsupported kv_role: {role}. Supported roles are {ROLES}"),
            ));
        }
        let Some(name) = &config.kv_connector else {
            if config.kv_connector_module_path.is_some() {
                return Err(FieldError::at(
                    tc("kv_connector"),
                    "Connector name is not set in KVTransferConfig",
                ));
            }
            // A config without a connector makes no connector.
            return Ok(None);
        };
        if config.kv_role.is_none() {
            return Err(FieldError::at(
                tc("kv_role"),
                format!("Please specify kv_role when kv_connector is set, supported roles are {ROLES}"),
            ));
        }
        if name == "NixlConnector" {
            return Self::resolve_nixl(&config, extra.iter(), &tc).map(Some);
        }
        if name != "OffloadingConnector" {
            let cause = if REGISTERED.contains(&name.as_str()) {
                "a vLLM connector this build does not model (only OffloadingConnector and NixlConnector are)"
                    .to_owned()
            } else if config.kv_connector_module_path.is_some() {
                "a connector loaded from kv_connector_module_path is not modelled".to_owned()
            } else {
                format!("Unsupported connector type: {name}")
            };
            return Err(FieldError::new(tc("kv_connector"), name, cause));
        }
        if hybrid_on {
            return Err(FieldError::new(
                at(if offloading_size_gib.is_some() {
                    "kv_offloading_size"
                } else {
                    "disable_hybrid_kv_cache_manager"
                }),
                offloading_size_gib.map_or("false".to_owned(), |s| s.to_string()),
                "Connector OffloadingConnector does not support HMA but HMA is enabled. Please set \
                 `--disable-hybrid-kv-cache-manager` (vLLM 0.15.1 decides the hybrid KV-cache manager before it \
                 expands kv_offloading_size, so on a GPU the shorthand alone fails; give kv_transfer_config, \
                 kv_events_config or disable_hybrid_kv_cache_manager: true)",
            ));
        }
        let recompute_on_failure = recompute_on_failure(&config, &tc)?;
        let ex = |field: &str| tc(&format!("kv_connector_extra_config.{field}"));
        let mut cpu_bytes = None;
        let mut block_size = gpu_block_size;
        for (key, value) in &extra {
            let key = key.as_str().unwrap_or_default();
            match key {
                "cpu_bytes_to_use" => {
                    let bytes = number(value).ok_or_else(|| {
                        FieldError::new(
                            ex(key),
                            serde_json::to_string(value).unwrap_or_default(),
                            "must be a number of bytes",
                        )
                    })?;
                    if !(bytes.is_finite() && (0.0..=1.0e15).contains(&bytes)) {
                        return Err(FieldError::new(ex(key), bytes, "must be between 0 and 1e15 bytes"));
                    }
                    cpu_bytes = Some(bytes);
                }
                "block_size" => {
                    let size = value.as_u64().filter(|&s| (1..=1 << 20).contains(&s)).ok_or_else(|| {
                        FieldError::new(
                            ex(key),
                            serde_json::to_string(value).unwrap_or_default(),
                            "must be a whole number of tokens",
                        )
                    })? as u32;
                    if !size.is_multiple_of(gpu_block_size) {
                        return Err(FieldError::new(
                            ex(key),
                            size,
                            format!(
                                "assert self.offloaded_block_size % self.gpu_block_size == 0 fails: the GPU block size is {gpu_block_size}"
                            ),
                        ));
                    }
                    block_size = size;
                }
                "eviction_policy" => match value.as_str() {
                    Some("lru") => {}
                    Some("arc") => {
                        return Err(FieldError::new(
                            ex(key),
                            "arc",
                            "vLLM 0.15.1's ARCOffloadingManager raises KeyError at the first store (touch pops a \
                             not-ready block from T1 and then moves it in T1); only lru works in this release",
                        ));
                    }
                    other => {
                        let shown = other
                            .map_or_else(|| serde_json::to_string(value).unwrap_or_default(), str::to_owned);
                        return Err(FieldError::new(
                            ex(key),
                            &shown,
                            format!("Unknown eviction policy: {shown}. Supported policies: lru, arc"),
                        ));
                    }
                },
                "spec_name" => {
                    if value.as_str() != Some("CPUOffloadingSpec") {
                        return Err(FieldError::new(
                            ex(key),
                            serde_json::to_string(value).unwrap_or_default(),
                            "only CPUOffloadingSpec is modelled",
                        ));
                    }
                }
                "spec_module_path" => {
                    return Err(FieldError::new(
                        ex(key),
                        serde_json::to_string(value).unwrap_or_default(),
                        "custom offloading specs are not modelled",
                    ));
                }
                other => {
                    return Err(FieldError::new(
                        ex(other),
                        serde_json::to_string(value).unwrap_or_default(),
                        "not a setting of OffloadingConnector (cpu_bytes_to_use, block_size, eviction_policy, spec_name)",
                    ));
                }
            }
        }
        let cpu_bytes_to_use = match cpu_bytes {
            Some(b) if b != 0.0 => b,
            _ => {
                return Err(FieldError::at(
                    ex("cpu_bytes_to_use"),
                    "cpu_bytes_to_use must be specified in kv_connector_extra_config",
                ));
            }
        };
        Ok(Some(KvConnectorKind::Offloading(OffloadConfig {
            cpu_bytes_to_use,
            block_size,
            recompute_on_failure,
        })))
    }

    /// NIXL's settings (`NixlConnector`'s extra config: `backends`, `num_threads`,
    /// `enforce_handshake_compat`, none of which changes a scheduling decision).
    fn resolve_nixl<'a>(
        config: &KvTransferConfig,
        extra: impl Iterator<Item = (&'a YamlValue, &'a YamlValue)>,
        tc: &dyn Fn(&str) -> String,
    ) -> Result<KvConnectorKind, FieldError> {
        if let Some(device) = config.kv_buffer_device.as_deref()
            && device != "cuda"
        {
            return Err(FieldError::new(
                tc("kv_buffer_device"),
                device,
                "only device buffers (cuda) are modelled; the host-buffer mode copies every prefill chunk to host \
                 memory and is not",
            ));
        }
        if config.kv_connector_module_path.is_some() {
            return Err(FieldError::at(
                tc("kv_connector_module_path"),
                "a connector loaded from kv_connector_module_path is not modelled",
            ));
        }
        let recompute_on_failure = recompute_on_failure(config, tc)?;
        for (key, value) in extra {
            let key = key.as_str().unwrap_or_default();
            let shown = serde_json::to_string(value).unwrap_or_default();
            let at = tc(&format!("kv_connector_extra_config.{key}"));
            match key {
                "backends" => {
                    let names = value.as_sequence().filter(|s| s.iter().all(|b| b.as_str().is_some()));
                    if names.is_none_or(|s| s.is_empty()) {
                        return Err(FieldError::new(
                            at,
                            shown,
                            "must be a list of NIXL backend names (default [UCX])",
                        ));
                    }
                }
                "num_threads" => {
                    if value.as_u64().is_none_or(|n| !(1..=1024).contains(&n)) {
                        return Err(FieldError::new(
                            at,
                            shown,
                            "must be a whole number of threads, 1 to 1024",
                        ));
                    }
                }
                "enforce_handshake_compat" => {
                    if value.as_bool().is_none() {
                        return Err(FieldError::new(at, shown, "must be true or false"));
                    }
                }
                _ => {
                    return Err(FieldError::new(
                        at,
                        shown,
                        "not a setting of NixlConnector (backends, num_threads, enforce_handshake_compat)",
                    ));
                }
            }
        }
        Ok(KvConnectorKind::Nixl(NixlConfig {
            kv_role: config.kv_role.clone().unwrap_or_default(),
            engine_id: config.engine_id.clone(),
            recompute_on_failure,
        }))
    }
}
