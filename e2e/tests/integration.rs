//! Every integration test of this package, in one
//! binary: each file below is a module, and the package links one test binary instead of one
//! per file. Select one file's tests with its module name as the filter, e.g.
//! `cargo test --test integration backup_sink::`.

#[path = "backup_sink.rs"]
mod backup_sink;
#[path = "diagnostics.rs"]
mod diagnostics;
#[path = "events.rs"]
mod events;
#[path = "fake_nodes.rs"]
mod fake_nodes;
#[path = "leader.rs"]
mod leader;
#[path = "mongo_sim.rs"]
mod mongo_sim;
#[path = "monitoring.rs"]
mod monitoring;
#[path = "observed_pods.rs"]
mod observed_pods;
#[path = "packaging.rs"]
mod packaging;
#[path = "proof.rs"]
mod proof;
#[path = "rollout.rs"]
mod rollout;
#[path = "runtime.rs"]
mod runtime;
#[path = "wipe.rs"]
mod wipe;
