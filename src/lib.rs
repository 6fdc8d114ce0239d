//! Lock-free in-process counters that stay fast when many threads hammer the
//! same number.
//!
//! One `AtomicU64` written by every core is a single cache line that all of
//! them queue on. shardcount splits the count over cache-padded shards or
//! per-thread slots (addition is commutative, so nothing is lost) and pays
//! for that only once contention shows up. How much a shared atomic degrades
//! under contention depends on the CPU (on one host measured here two
//! threads got a fifth of one thread's throughput, on another two fifths),
//! so measure on yours: the repository's demo and `cargo bench` print every
//! figure as a ratio to references run beside it.
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
//! * [`CounterSet`]: `n` exact counters sharing shard rows, for many
//!   counters updated by the same threads.
//! * [`CounterMap`]: exact counters created on a key's first use, with a
//!   bound on keys (an overflow counter beyond it); a [`CounterHandle`]
//!   adds without hashing.
//! * [`MaxCounter`] / [`MinCounter`]: a running maximum / minimum whose
//!   records below it write nothing shared.
//!
//! # Which counter should I use?
//!
//! | you need | use | why, and what it costs |
//! |---|---|---|
//! | a hot counter read exactly and often, or a swap-in for a `static AtomicU64` | [`Counter`] | `const`, 16 bytes while idle, no allocation until threads contend, lossless `take()`. One thread: a `fetch_add` plus a test. `sum()` is one load until the counter has grown, then one per shard. |
//! | the cheapest increments, reads rare or rough (metrics scraped every few seconds) | [`RoughCounter`] | no locked instruction on the hot path; `approx()` is one load with a stated lag, `sum()` is exact. `approx()` does not see an idle, still-running thread's counts unless it flushes, exits or a [`Folder`] runs. |
//! | the same, for a `static`, at the thread-local limit | [`local_counter!`] | a thread-local add and a sign test; nothing lost at thread exit. Only for `static`s; `sub` is a locked add. |
//! | many counters updated by the same threads (per route, per status) | [`CounterSet`], [`CounterMap`] | `n` exact counters in shard-major rows (8 bytes each while uncontended); the map creates them on a key's first use, bounded, with an overflow counter; a [`CounterHandle`] adds without hashing. |
//! | a running maximum or minimum (peak queue depth) | [`MaxCounter`], [`MinCounter`] | a record that does not move it writes nothing shared. |
//! | a quantity that must never go below zero | [`Stock`] | takes from a thread's own shard lock-free; fails with [`Insufficient`] only when the whole stock is short. |
//! | the previous value of an add, `compare_exchange`, `store(n)` | `AtomicU64` | a sharded count has no single previous value |
//!
//! # Memory ordering
//!
//! Every counting operation is `Relaxed`: an add synchronises nothing, and a
//! read that sees an add does not make the adder's other writes visible. A
//! counter cannot carry an Acquire/Release publication the way an
//! `AtomicU64` can; publish through a separate atomic or a lock. Each type
//! states its reads' guarantees (exact at quiescence, monotonic for add-only
//! use, lag bounds).
//!
//! * [`export`]: an [`Exporter`](export::Exporter) thread ships counters'
//!   deltas to a [`Sink`](export::Sink); with the `redis` feature,
//!   `export::redis::RedisSink` folds them into Redis exactly once, for
//!   fleet-wide counts.
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
//!
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
// docs.rs (RUSTDOCFLAGS="--cfg docsrs", nightly) badges feature-gated items.
#![cfg_attr(docsrs, feature(doc_cfg))]
// The loom cfg is the crate's own test switch, not something users set.
#![cfg_attr(docsrs, doc(auto_cfg(hide(shardcount_loom))))]
#![warn(clippy::undocumented_unsafe_blocks)]

mod primitive;
mod shard;
mod surface;
mod thread;

mod accumulator;
mod counter;
// Export threads sleep and talk to sinks on a real clock; nothing in it is
// an atomic protocol for loom (it reads counters with `sum`).
#[cfg(not(shardcount_loom))]
pub mod export;
// Optional integrations; loom never builds them (the folding thread and the
// `absolute` locks are real threads and std locks).
#[cfg(all(
    any(feature = "metrics", feature = "prometheus-client"),
    not(shardcount_loom)
))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "metrics", feature = "prometheus-client")))
)]
pub mod integrations;
mod local;
mod map;
mod rough;
mod set;
mod stock;

#[cfg(all(test, shardcount_loom))]
mod loom_models;
#[cfg(all(test, not(shardcount_loom)))]
mod miri_tests;

pub use accumulator::{MaxCounter, MinCounter};
pub use counter::Counter;
pub use local::LocalCounter;
pub use map::{CounterHandle, CounterMap};
// The folder's thread sleeps on a real clock, which loom cannot model; its
// folding is the same `flush_all` the rough models check.
#[cfg(not(shardcount_loom))]
pub use rough::folder::Folder;
pub use rough::RoughCounter;
pub use set::CounterSet;
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
