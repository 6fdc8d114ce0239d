//! Loom models of `RoughCounter` (see the module docs of `src/rough.rs`).
#![cfg(loom)]
