//! Every integration test of this package, in one
//! binary: each file below is a module, and the package links one test binary instead of one
//! per file. Select one file's tests with its module name as the filter, e.g.
//! `cargo test --test integration drift::`.

#[path = "drift.rs"]
mod drift;
#[path = "image.rs"]
mod image;
#[path = "olm_in_cluster.rs"]
mod olm_in_cluster;
#[path = "olm_upgrades.rs"]
mod olm_upgrades;
#[path = "upgrade_edges.rs"]
mod upgrade_edges;
