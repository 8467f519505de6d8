//! The availability-aware admin layer: how every operator observes its database members and
//! decides whether a disruptive step may be taken. Engine-neutral; each operator's `admin.rs`
//! supplies the database calls.
//!
//! - [`health`]: the tri-state observation. **Unknown is never treated as down**: "I cannot
//!   reach it" is a fact about the network path from the operator, not about the member.
//! - [`gate`]: the safety gate every disruptive step passes: quorum survives, the others were
//!   positively observed Healthy and recently, nothing else is in flight.
//! - [`breaker`] and [`retry`]: per-endpoint circuit breakers, timeouts on every call, retries
//!   with jittered backoff for idempotent reads only.
//! - [`clients`]: admin clients cached per cluster and member; [`per_cluster`]: what they are
//!   built with (credentials, TLS material, routes), kept per cluster and forgotten with it;
//!   [`member_clients`]: the two together, one engine's way to its members.
//! - [`metrics`]: what the layer did, for Prometheus.

pub mod breaker;
pub mod clients;
pub mod gate;
pub mod health;
pub mod member_clients;
pub mod metrics;
pub mod per_cluster;
pub mod retry;
