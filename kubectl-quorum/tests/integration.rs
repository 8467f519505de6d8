//! Every integration test of this package, in one
//! binary: each file below is a module, and the package links one test binary instead of one
//! per file. Select one file's tests with its module name as the filter, e.g.
//! `cargo test --test integration against_an_operator::`.

#[path = "against_an_operator.rs"]
mod against_an_operator;
#[path = "day_two.rs"]
mod day_two;
