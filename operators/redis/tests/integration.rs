//! Every integration test of this package but the real-node ones (`real_pods.rs`), in one
//! binary: each file below is a module, and the package links one test binary instead of one
//! per file. Select one file's tests with its module name as the filter, e.g.
//! `cargo test --test integration admin_verbs::`.

// Each file uses part of the shared support.
#[allow(dead_code)]
#[path = "support/mod.rs"]
mod support;

#[path = "admin_verbs.rs"]
mod admin_verbs;
#[path = "backup_full_stack.rs"]
mod backup_full_stack;
#[path = "chart_install.rs"]
mod chart_install;
#[path = "cluster_full_stack.rs"]
mod cluster_full_stack;
#[path = "olm.rs"]
mod olm;
#[path = "rbac.rs"]
mod rbac;
#[path = "replication_full_stack.rs"]
mod replication_full_stack;
#[path = "validation.rs"]
mod validation;
