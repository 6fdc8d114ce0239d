//! Lock-free in-process counters that stay fast when many threads hammer the
//! same number.
//!
//! One `AtomicU64` written by every core is a single cache line that all of
//! them queue on: on a 2-core machine two threads get about a third of the
//! throughput one thread gets. shardcount splits the count over cache-padded
//! shards (addition is commutative, so nothing is lost) and pays for that only
//! once contention shows up.
//!
//! * [`Counter`]: a swap-in for a hot `AtomicU64` counter, `static`-friendly,
//!   16 bytes while idle, as cheap as `fetch_add` on one thread, and sharded
//!   when threads contend. Reads are exact at quiescence.
//! * [`RoughCounter`]: adds cost about a thread-local add (no locked
//!   instruction); each thread's counts are folded into a global sink now and
//!   then. `approx()` is one load that lags a little, `sum()` is exact. A
//!   [`Folder`] folds registered counters in the background.
//! * [`Stock`]: a never-negative quantity (inventory, tickets, permits) whose
//!   `try_sub` takes from the caller's own shard lock-free and fails with
//!   [`Insufficient`] only when the whole stock is short.
//!
//! Optional cargo features, all off by default, connect the counters to
//! metrics crates (the `integrations` module, present when built with one): `metrics`
//! (the `metrics` facade, and a layer that gives an existing recorder sharded
//! increments) and `prometheus-client`.
//!
//! # Example
//!
//! ```
//! use shardcount::Counter;
//!
//! static REQUESTS: Counter = Counter::new();
//!
//! std::thread::scope(|s| {
//!     for _ in 0..2 {
//!         s.spawn(|| (0..10_000).for_each(|_| REQUESTS.inc()));
//!     }
//! });
//! assert_eq!(REQUESTS.sum(), 20_000);
//! ```
//! # Glossary
//!
//! * **shard**: one of several cache-padded words a count is split over;
//!   threads add to different shards, so they do not fight over one line.
//! * **slot**: a thread's own place in a counter (a [`RoughCounter`]'s
//!   per-thread total), written by that thread alone.
//! * **fold**: moving a slot's not-yet-published counts into the sink.
//! * **sink**: the one shared word a [`RoughCounter`]'s folds add to, read
//!   by `approx()`.
//! * **orphan**: the slot that takes adds made after a thread's own slots
//!   are gone (from another thread-local's destructor at thread exit), so
//!   even those are counted.
#![warn(missing_docs, missing_debug_implementations, unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod primitive;
mod shard;
mod surface;
mod thread;

mod counter;
// Optional integrations; loom never builds them (the folding thread and the
// `absolute` locks are real threads and std locks).
#[cfg(all(
    any(feature = "metrics", feature = "prometheus-client"),
    not(shardcount_loom)
))]
pub mod integrations;
mod local;
mod rough;
mod stock;

#[cfg(all(test, shardcount_loom))]
mod loom_models;
#[cfg(all(test, not(shardcount_loom)))]
mod miri_tests;

pub use counter::Counter;
pub use local::LocalCounter;
// The folder's thread sleeps on a real clock, which loom cannot model; its
// folding is the same `flush_all` the rough models check.
#[cfg(not(shardcount_loom))]
pub use rough::folder::Folder;
pub use rough::RoughCounter;
pub use stock::{Insufficient, Stock};

/// What [`local_counter!`] expands to names; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::local::{Guard, LocalKey};
    pub use crate::primitive::sync::atomic::AtomicI64;
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
