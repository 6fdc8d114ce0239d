//! Unit tests of lower modules that go through the types built on them
//! (`Counter`, `CounterSet`, `Histogram`, ...). They live here, at the
//! crate top, so that no module imports from a layer above it; tests that
//! need only a module's own items stay beside its code.

mod contract;
mod merge;
mod owner;
mod snapshot_export;
