//! Lock-free in-process counters that stay fast when many threads hammer the
//! same number.
//!
//! One `AtomicU64` written by every core is a single cache line that all of
//! them queue on. shardcount splits the count over cache-padded shards or
//! per-thread slots and pays for that only once contention shows up. The
//! README (the repository's front page and crates.io's) has the usage
//! guide: which counter to pick and migration from `AtomicU64`; which
//! integration to pick, with a before/after for each, is the
//! [`integration_guide`] module.
//!
//! * [`Counter`]: a swap-in for a hot `AtomicU64`; `const`, 16 bytes while
//!   idle, sharded once threads contend. Exact reads.
//! * [`RoughCounter`] and [`local_counter!`]: adds with no locked
//!   instruction; each thread's counts are folded into a shared tally now
//!   and then (a [`Folder`] folds in the background). `approx()` is one
//!   load that lags, `sum()` is exact.
//! * [`CounterSet`], [`CounterMap`] (with [`CounterHandle`]): many exact
//!   counters updated by the same threads.
//! * [`LabelledCounter<L>`](LabelledCounter) with [`Label`] (and
//!   `#[derive(Label)]`): a `const` family indexed by a label type (an
//!   enum, or a struct or tuple of them), as fast as a [`CounterSet`] add.
//! * [`Histogram`]: a latency or size distribution in the same shard rows
//!   (log-linear buckets, quantiles within 1/32, or `le` bounds); `const`,
//!   with timers; exported with a fixed `le` set, durations in seconds.
//!   [`LabelledHistogram<L>`](LabelledHistogram): one per label value.
//! * [`MaxCounter`] / [`MinCounter`]: a running maximum / minimum.
//! * [`Stock`]: a quantity that never goes below zero; `try_sub` fails with
//!   [`Insufficient`] only when the whole stock is short.
//! * [`contract`]: the traits every counter type implements ([`Count`],
//!   [`CountFamily`]), which the exporter and the integrations are written
//!   over; [`MaxCounter`], [`MinCounter`] and [`Stock`] are gauges.
//! * [`export`]: an [`Exporter`](export::Exporter) thread ships counters'
//!   deltas to a [`Sink`](export::Sink); `export::redis` (feature `redis`)
//!   folds them into Redis exactly once, for fleet-wide counts.
//! * `fleet` (feature `redis`): a `FleetReader` reads those totals through
//!   a TTL cache, and a `FleetStock` sells one Redis inventory from many
//!   processes.
//! * `integrations` (features `metrics`, `prometheus-client`, `prometheus`,
//!   `opentelemetry`, `serde`): the counters behind the `metrics` facade,
//!   in a `prometheus_client` or `prometheus` registry, as OpenTelemetry
//!   observable instruments, and as serde snapshots.
//!
//! Every counting operation is `Relaxed`: a counter cannot publish other
//! writes the way an Acquire/Release `AtomicU64` can. Each type states its
//! reads' guarantees.
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
//! # One verb per idea
//!
//! The same idea has the same name on every type; a method named `get`
//! never panics (as `slice::get`), and every take is lossless: each add is
//! counted by exactly one take, or stays in the counter.
//!
//! * `add(n)`, `inc()`, `sub(n)`, `dec()`; a family takes the member
//!   first: `add(i, n)` ([`CounterSet`], panics past `len()`; `try_add`),
//!   `add(&key, n)` ([`CounterMap<K>`](CounterMap)), `add(label, n)`
//!   ([`LabelledCounter<L>`](LabelledCounter)). [`Stock`]: `add(n)`,
//!   `try_sub(n)`; [`MaxCounter`], [`MinCounter`], [`Histogram`]:
//!   `record(v)`.
//! * Exact reads: `sum()`, and `sum_i64()` (signed) on a single counter
//!   ([`Counter`], [`RoughCounter`], [`CounterHandle`],
//!   [`local_counter!`]); a member or gauge by
//!   `get`: `get(i)`, `get(&k)` return an `Option`, `get(label)` a `u64`
//!   (a label is always in range). `approx()`: one or two loads, lagging
//!   ([`RoughCounter`], [`local_counter!`]).
//! * `take()` and `reset()` ([`Counter`], [`CounterHandle`], gauges,
//!   [`Histogram`]); `take(i)`, `take(&k)`, `take(label)`, `take_all()` for
//!   families. None on [`RoughCounter`] and [`local_counter!`] (each thread
//!   stores to its own slot, which no swap can take losslessly), nor on
//!   [`Stock`].
//! * Families: `snapshot()`, and for a map `top(n)` and `handle(&k)` (a
//!   [`CounterHandle`] that adds without a lookup).
//! * Constructors: `new()`, `const` where a `static` needs it ([`Counter`],
//!   [`RoughCounter`], [`MaxCounter`], [`MinCounter`],
//!   [`LabelledCounter`]), `Default`; sizes `with_max_shards(m)`,
//!   `with_batch(b)` (`local_counter!(static N, batch = b)`),
//!   `with_max_keys(m)`, `unbounded()`, `Histogram::with_bounds(b)`;
//!   `split(n)` ([`Counter`], [`CounterSet`]) grows ahead of a burst.
//! * [`Histogram`] and [`LabelledHistogram`] also time: `record_since(t)`,
//!   `start_timer()`, `time(f)`; `new()` is `const`.
//!
//! ```
//! use shardcount::{CounterMap, CounterSet};
//!
//! let set = CounterSet::new(2);
//! set.add(1, 3);
//! set.dec(1);
//! assert_eq!((set.get(1), set.get(2)), (Some(2), None)); // no panic
//! assert_eq!(set.take(1), Some(2));
//!
//! let map: CounterMap<String> = CounterMap::new();
//! let h = map.handle("/");
//! h.sub(1);
//! assert_eq!((h.sum_i64(), map.take("/")), (-1, Some(u64::MAX)));
//! assert_eq!(h.sum(), 0);
//! ```
//!
//! # Glossary
//!
//! One word per idea, in the docs and in the code:
//!
//! * **shard**: one of several cache-padded words a count is split over;
//!   threads add to different shards, so they do not fight over one line.
//! * **table**, **row**: a sharded counter's shards, grown on contention;
//!   a row is one thread's shards of a table (one word for a `Counter`, one
//!   per counter of a [`CounterSet`]).
//! * **owner id**: a number leased to a thread on its first add to a
//!   sharded counter; id `i` owns row `i - 1` of every table and is its
//!   only writer. Given back at thread exit or by [`quiesce()`].
//! * **route**: the one choice every add makes between the thread's owned
//!   row, the base word and a shared row.
//! * **merge**: folding a table's rows back into the base word and freeing
//!   it; **pin**: what a read marks so a merge does not free what it reads.
//! * **slot**: a thread's own place in a [`RoughCounter`] (its per-thread
//!   total), written by that thread alone.
//! * **fold**: moving a slot's (or a [`LocalCounter`] cell's)
//!   not-yet-published counts into the tally.
//! * **tally**: the one shared word those folds add to, read by
//!   `approx()`.
//! * **orphan**: the slot that takes adds made after a thread's own slots
//!   are gone (from another thread-local's destructor at thread exit), so
//!   even those are counted.
//! * **place**: the counter a [`CounterMap`] key was given (its place
//!   number: counter `n % 127` of chunk `n / 127`).
//! * **sink**: where an [`Exporter`](export::Exporter) delivers batches
//!   ([`export::Sink`]).
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
mod unwind;
// The one periodic background thread (folder, metrics, exporter): real
// threads and clocks, which loom never builds.
#[cfg(not(shardcount_loom))]
mod worker;

mod accumulator;
pub mod contract;
mod counter;
mod histogram;
// Export threads sleep and talk to sinks on a real clock; nothing in it is
// an atomic protocol for loom (it reads counters with `sum`).
#[cfg(not(shardcount_loom))]
pub mod export;
// Reads and sells through Redis on a real clock, as export does.
#[cfg(all(feature = "redis", not(shardcount_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod fleet;
// Optional integrations; loom never builds them (the folding thread and the
// `absolute` locks are real threads and std locks) but for two files of the
// `metrics` layer that name no `metrics` type, its entries and their
// eviction: `loom_models::metrics_evict` runs them, at the module paths a
// normal build gives them.
#[cfg(all(test, shardcount_loom))]
// The model calls what the eviction protocol needs, not every helper.
#[allow(dead_code)]
mod integrations {
    pub(crate) mod metrics {
        pub(crate) mod entry;
        pub(crate) mod evict;
    }
}
#[cfg(all(
    any(
        feature = "metrics",
        feature = "prometheus-client",
        feature = "prometheus",
        feature = "opentelemetry",
        feature = "serde"
    ),
    not(shardcount_loom)
))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(
        feature = "metrics",
        feature = "prometheus-client",
        feature = "prometheus",
        feature = "opentelemetry",
        feature = "serde"
    )))
)]
pub mod integrations;
mod labels;
mod local;
mod map;
// The merger's thread sleeps on a real clock, as the folder's; the merges
// it calls are the ones the merge models check.
#[cfg(not(shardcount_loom))]
mod merger;
mod quiesce;
mod rough;
mod set;
mod stock;

#[cfg(all(test, not(shardcount_loom)))]
mod layer_tests;
#[cfg(all(test, shardcount_loom))]
mod loom_models;
#[cfg(all(test, not(shardcount_loom)))]
mod miri_tests;
#[cfg(all(test, not(shardcount_loom)))]
mod take_race_tests;

pub use accumulator::{MaxCounter, MinCounter};
pub use contract::{Count, CountFamily};
pub use counter::Counter;
pub use histogram::{
    Bucket, Histogram, HistogramSnapshot, HistogramTimer, HistogramUnit, LabelledHistogram,
    DEFAULT_DURATION_LE, DEFAULT_LE,
};
pub use labels::{Label, LabelledCounter};
pub use local::LocalCounter;
pub use map::{CounterHandle, CounterMap, IntoKey};
#[cfg(not(shardcount_loom))]
pub use merger::{Mergeable, Merger};
pub use quiesce::{merges_need_quiesce, quiesce, scrape};
/// `#[derive(Label)]`: see the [`Label`](trait@Label) trait.
///
/// ```
/// #[derive(Clone, Copy, shardcount::Label)]
/// #[label(name = "route")]
/// enum Page { Home, #[label(rename = "cart")] Basket }
///
/// use shardcount::Label;
/// assert_eq!((Page::NAMES, Page::text(1, 0)), (&["route"][..], Some("cart")));
/// ```
#[cfg(feature = "derive")]
#[cfg_attr(docsrs, doc(cfg(feature = "derive")))]
pub use shardcount_derive::Label;
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
    pub use crate::labels::member_index;
    pub use crate::local::{Guard, LocalKey, Moved};
    pub use crate::primitive::sync::atomic::AtomicI64;
}

/// Which integration to use, what each exports and lacks, and a
/// before/after for each (`docs/integrations.md`, shipped in the package):
/// in every `cargo doc`, and run as doc tests with every integration's
/// feature on (its examples need them all).
#[cfg(any(
    not(doctest),
    all(
        feature = "metrics",
        feature = "prometheus-client",
        feature = "prometheus",
        feature = "opentelemetry",
        feature = "serde"
    )
))]
#[doc = include_str!("../docs/integrations.md")]
pub mod integration_guide {}

/// The README's examples, compiled and run as doc tests. Its `metrics` and
/// `prometheus-client` examples need those features, so it is tested with
/// them on (`cargo test --all-features --doc`, and scripts/test-all); a
/// `redis` example carries its own `cfg` and only compiles (`no_run`).
#[cfg(all(doctest, feature = "metrics", feature = "prometheus-client"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
