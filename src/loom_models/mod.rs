//! Loom models of every atomic protocol in the crate, built only under the
//! crate's own cfg:
//!
//! ```sh
//! RUSTFLAGS="--cfg shardcount_loom" cargo test --release --lib loom_models
//! ```
//!
//! They live inside the crate so they can reach internals (forcing a growth,
//! starting a stock from a given split) without public test hooks. Each file
//! models the claims its type's module docs make.

mod counter;
mod grace;
mod histogram;
mod local;
mod many;
mod map;
mod merge;
mod metrics_evict;
mod owner;
mod rough;
mod stock;
