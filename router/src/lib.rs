//! llm-d's router (llm-d-router v0.10.0) as plain state machines that know nothing of actors.
//!
//! A user's `EndpointPickerConfig` is loaded exactly as the release loads it ([`config`]: strict
//! decoding, the defaults upstream injects, upstream's refusals), into plugin instances
//! ([`plugins`]) that a [`Router`] runs through the release's scheduling cycle ([`cycle`]) for
//! every request, over endpoints whose metrics arrive only by scrape ([`endpoint`]). The
//! approximate prefix index ([`approx_prefix`]) learns from the router's own decisions. Where
//! upstream is nondeterministic (Go map order, wall-clock-seeded picks, goroutines) the router
//! takes a fixed order or a named random substream instead; `docs/ROUTING.md` lists each case.
//! With the `flowControl` gate on, requests first wait in [`flow_control`]'s priority bands.
//! [`RoundRobin`] remains as the baseline policy.

pub mod approx_prefix;
pub mod config;
pub mod cycle;
pub mod endpoint;
pub mod flow_control;
mod identity_hasher;
pub mod params;
pub mod plugins;
pub mod precise_prefix;
pub mod registry;
pub mod request;
pub mod round_robin;
pub mod view;

pub use config::{ConfigError, LoadOptions, RouterConfig, load};
pub use cycle::{Decision, Router, RouterRng};
pub use endpoint::{Endpoint, EndpointIndex, EndpointMetrics, EngineType, Scrape};
pub use request::RoutingRequest;
pub use round_robin::RoundRobin;
