//! The [`metrics`] facade (feature `metrics`): the counters as
//! `metrics::CounterFn`, and [`ShardedLayer`], which gives a program's
//! existing recorder sharded increments.
//!
//! # Counters as `CounterFn`
//!
//! [`Counter`] and [`RoughCounter`] implement [`CounterFn`]: `increment(v)`
//! is `add(v)`, and `absolute(v)` raises the counter to at least `v` (see
//! [`CounterFn for Counter`](#impl-CounterFn-for-Counter) for exactly what
//! it guarantees). Hand one to `metrics::Counter::from_arc` to use it behind
//! the facade's handle.
//!
//! # The layer
//!
//! Put [`ShardedLayer`] over your recorder ([`ShardedLayer::wrap`], its
//! `metrics_util::layers::Layer` impl, or [`ShardedRecorder::new`]) and
//! install the result instead of the recorder. Your exporter and
//! `counter!` calls stay as they are:
//!
//! * each counter key gets one shardcount [`Counter`] (or, with
//!   [`ShardedLayer::rough`], a [`RoughCounter`]), registered in the inner
//!   recorder once, with the labels unchanged;
//! * each thread keeps a handle of its own per key, found again on every
//!   `counter!` call without a lock or a write to any line another thread
//!   writes, and the key's hash computed by `counter!` is the only one.
//!   Its `increment` is a load and a store to a word of that handle (no
//!   locked instruction); increments through a handle sent to another
//!   thread add to the key's counter (a `Counter` shards once threads
//!   contend; a `RoughCounter` adds to the thread's own slot);
//! * a background thread moves each key's delta into the inner recorder's
//!   counter every interval, so nothing is lost or counted twice: a
//!   `Counter`'s delta is what [`Counter::take`] returns; a `RoughCounter`'s
//!   is its exact [`sum`](RoughCounter::sum) minus the sum folded last time;
//!   each thread's handle adds its word's growth since the last fold.
//!   [`ShardedRecorder::flush`] (or a [`FlushHandle`]) does the same on
//!   demand and so does dropping the recorder. After a flush that follows
//!   every increment, the exporter's counts are exact;
//! * memory: 128 bytes per thread and key the thread has counted, let go
//!   of at the thread's exit (after one more fold), plus the key's counter.
//!   By default a key stays until the recorder is dropped, so memory
//!   follows the threads alive times the keys ever seen. With
//!   [`ShardedLayer::evict_idle_after`], a key no fold has seen move for
//!   that long (and for which no handle is kept outside the layer) is
//!   folded one last time and taken out; each thread lets go of its handle
//!   at its next `counter!` call or its exit, and the key's memory goes
//!   with the last handle, so memory follows the keys in use. Nothing is
//!   lost or counted twice, and a key counted again is registered again;
//! * each histogram key gets one sharded [`Histogram`](crate::Histogram)
//!   (see below), folded into the inner recorder's histogram on the same
//!   interval and flushes, and evicted as counter keys are;
//! * gauges and descriptions go straight to the inner recorder.
//!
//! ```
//! use metrics_exporter_prometheus::PrometheusBuilder;
//! use shardcount::integrations::metrics::ShardedLayer;
//!
//! let prometheus = PrometheusBuilder::new().build_recorder();
//! let render = prometheus.handle();
//! let recorder = ShardedLayer::new().wrap(prometheus); // the one new line
//! let flush = recorder.flush_handle();
//! metrics::with_local_recorder(&recorder, || {
//!     for _ in 0..1000 {
//!         metrics::counter!("requests", "path" => "/").increment(1);
//!     }
//! });
//! flush.flush(); // or wait for the next interval
//! assert!(render.render().contains("requests{path=\"/\"} 1000"));
//! ```
//!
//! # The usual setups, converted
//!
//! `wrap` needs no `metrics-util` import:
//!
//! ```no_run
//! use metrics::set_global_recorder;
//! use metrics_exporter_prometheus::PrometheusBuilder;
//! use shardcount::integrations::metrics::ShardedLayer;
//!
//! async fn was_install() -> Result<(), Box<dyn std::error::Error>> {
//!     // PrometheusBuilder::new().install()?; becomes, in your tokio runtime:
//!     let (recorder, serve) = PrometheusBuilder::new().build()?; // also: .with_http_listener(addr).build()?
//!     tokio::spawn(serve);
//!     Ok(set_global_recorder(ShardedLayer::new().wrap(recorder))?) // was: set_global_recorder(recorder)
//! }
//! fn was_install_recorder() -> Result<(), Box<dyn std::error::Error>> {
//!     // let scrape = PrometheusBuilder::new().install_recorder()?; becomes:
//!     let recorder = PrometheusBuilder::new().build_recorder();
//!     let scrape = recorder.handle(); // render through it, as before
//!     Ok(set_global_recorder(ShardedLayer::new().wrap(recorder))?)
//! }
//! ```
//!
//! # Histograms under the layer
//!
//! `histogram!(..).record(v)` records into a sharded histogram with the
//! default log-linear buckets, at a fixed scale: `v` is kept as
//! `round(v × 10^9)`, so a value in seconds is kept in nanoseconds and
//! one in bytes in nano-bytes. Each fold takes it (losslessly) and hands
//! every non-empty bucket to the inner histogram as one value, the
//! bucket's midpoint divided by 10^9, `count` times (`record_many`). What
//! the inner recorder sees is therefore:
//!
//! * the count: exact;
//! * each value: within 1/32 of the value recorded (exact for values
//!   below 32 × 10^-9; a value is first rounded to 10^-9), so quantiles
//!   and bucket placement within that, and the sum within 1/32 of the
//!   exact sum;
//! * negative, NaN and values from about 1.8 × 10^10 up: passed to the
//!   inner histogram at once, as they are (exact, unsharded).
//!
//! Registration takes a lock: keep the handle for a hot path.
//!
//! ```
//! use metrics_exporter_prometheus::PrometheusBuilder;
//! use shardcount::integrations::metrics::ShardedLayer;
//!
//! let prometheus = PrometheusBuilder::new().build_recorder();
//! let render = prometheus.handle();
//! let recorder = ShardedLayer::new().wrap(prometheus);
//! metrics::with_local_recorder(&recorder, || {
//!     let latency = metrics::histogram!("latency_seconds");
//!     for _ in 0..100 {
//!         latency.record(0.25);
//!     }
//! });
//! recorder.flush();
//! let text = render.render();
//! assert!(text.contains("latency_seconds_count 100"));
//! let sum: f64 = text
//!     .lines()
//!     .find_map(|l| l.strip_prefix("latency_seconds_sum "))
//!     .unwrap()
//!     .parse()
//!     .unwrap();
//! assert!((sum - 25.0).abs() <= 25.0 / 32.0, "{sum}");
//! ```

// Protocol (maintainers' notes, not public docs).
//
// Locks order everything, beyond the counters' own atomics, the owned
// handles' words (below) and eviction's flag and count (last section).
//
// * `Shared::entries: Mutex<map>` maps each key to its `Entry` (the
//   shardcount counter, the inner recorder's counter handle and a fold
//   lock). Registration inserts; only eviction removes (below).
// * `Entry::fold: Mutex<Folded>` is held while a key's delta is taken and
//   handed to the inner counter (`take`, or `sum` less the sum folded
//   before, then `increment`), and while `absolute` does that and then
//   calls the inner `absolute`. It holds the sum folded so far (used by
//   `RoughCounter` entries). So a flush that returns has waited for any
//   fold of the same key already in progress: the inner counter then holds
//   every increment that happened-before the flush. For a `RoughCounter`,
//   successive sums under the lock never decrease (every slot's total only
//   grows, and a read that happens-after another read of the same word
//   sees the same or a later value), so each delta is what was added in
//   between: nothing is counted twice.
// * The background thread is a `worker::Worker` (src/worker.rs): it owns
//   the stop flag, the wait and the join.
// * Each thread keeps a cache (a thread-local) from key to a handle of its
//   own (`Local`), so `counter!` on a known key takes no lock and clones
//   only a reference count that no other thread touches. A cache belongs to
//   one recorder, identified by a `Weak` reference to its shared state (the
//   allocation cannot be reused while the `Weak` lives); caches of dropped
//   recorders are cleared at the thread's next miss.
// * A `Local` has `owner` (the id of the thread whose cache holds it, from
//   a process-wide sequence, never reused; 0 once retired) and `own`, which
//   only the owner writes, with a Relaxed load and store. An increment
//   from any other thread (the handle was sent) adds to the entry's
//   counter. The entry lists its cached `Local`s in its fold state with the
//   word each had at the last fold; a fold adds every word's growth.
// * Retiring: when the owner's cache is dropped (thread exit, or its
//   recorder is gone) it stores 0 in `owner` with Release, after its last
//   store to `own` (same thread). A fold that reads 0 with Acquire therefore
//   reads the final word, folds its growth and drops the `Local` from the
//   list. Later increments, by anyone, go to the entry.
// * Entry and Local point at each other; dropping the recorder clears the
//   lists after its last flush, so both are freed.
//
// Eviction (`ShardedLayer::evict_idle_after`; off by default). Counts never
// depend on a handle noticing it: an evicted entry is folded until nothing
// but the pass can reach it. The atomics below only decide when memory is
// let go of.
//
// * `Folded::moved` (under the fold lock) is set by a fold that moved a
//   delta; the background pass clears it and stamps `Folded::active_at`.
// * `Shared::evict` (the pass, after its folds): under the map lock, for
//   each entry whose fold lock it gets at once (`try_lock`: a fold in
//   progress may be calling an inner recorder that registers through the
//   facade) with `moved` clear, `active_at` at least the idle time ago and
//   no reference outside the layer (`Entry::reachable`, a heuristic on
//   strong counts, for kept handles' speed only), stores
//   `Entry::evicted = true` (Relaxed), removes it from the map and pushes
//   it to `Shared::evicted`, all under the three locks. Then, once per
//   pass that evicted, `Shared::evictions.fetch_add(1, Release)`.
// * `Entry::evicted`: written once, by that pass, under the entry's fold
//   lock. Registration (`register_slow`) reads it under the same lock when
//   it lists a new handle: an entry evicted since the map lookup is not
//   used (the lookup is retried and makes a new entry), so no handle is
//   listed in an entry after it left the map. A cache sweep reads it
//   without a lock (Relaxed), after reading `evictions` with Acquire: that
//   load pairs with the Release above, so the sweep sees the flag of every
//   entry evicted by the passes counted. A later eviction moves the count
//   on, and the thread's next `counter!` (whose hit path compares its
//   cache's `seen` with a Relaxed load: a stale value only defers the
//   sweep) takes the slow path and sweeps again. The count is read before
//   the registration's map lookup, and a new cache starts with that value.
// * A sweep (by the cache's owner) retires each handle of an evicted entry
//   (the `retire` protocol above: the Release store of 0 after the owner's
//   last store to `own`) and lets go of it. The entry's next fold reads
//   the 0 (Acquire), folds the word's last growth and drops the handle
//   from its list. A thread that never calls `counter!` again does the
//   same at its exit.
// * `Shared::evicted: Mutex<Vec>`: folded on every pass and flush (the
//   lock held throughout, so a flush waits for a concurrent one's folds),
//   like the map's entries: increments through a cached handle before its
//   sweep, through a kept `metrics::Counter` (retired or not), or by a
//   registration that found the entry just before it left the map all
//   reach the inner counter. An entry leaves the list when
//   `Arc::try_unwrap` succeeds: no handle, cache, list or registration
//   holds it (each `Local` holds its entry, so its handle list is empty
//   too), and none can again (it is in no map). `try_unwrap` synchronises
//   with every other reference's drop (their Release decrements, its
//   Acquire), and each increment through a reference is sequenced before
//   its drop, so the last fold, on the unwrapped entry, takes everything.
// * A key counted again after eviction gets a new entry and registers with
//   the inner recorder again; both entries fold into the inner counter the
//   recorder hands for the key (the same series for the usual recorders).
// * Lock order: evicted list, map, fold. `evict` holds the list over the
//   map's lock, so an entry is in one or the other at every moment and no
//   flush misses it; it only tries the fold locks. Folds call the inner
//   recorder under their fold lock (and the list's), never the map's, so
//   an inner recorder that registers through the facade takes the map's
//   lock last.
// * Loom: `loom_models::metrics_evict` models the evicted entry's fold
//   until unique ownership, racing a cached handle's owner (increment,
//   sweep, retire) and a kept handle's increments.
// * `absolute` on a bare counter takes one of 64 process-wide locks, picked
//   by the counter's address (see `raise_to`).

use crate::contract::{Count, Kind};
use crate::merger::Quiet;
use crate::primitive::const_thread_local;
use crate::primitive::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use crate::primitive::sync::{lock, try_lock, Arc, Mutex, Weak};
use crate::worker::{self, Worker};
use crate::{Counter, RoughCounter};
use ::metrics::{
    CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use crossbeam_utils::CachePadded;
use metrics_util::layers::Layer;
use metrics_util::KeyHasher;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;
use std::time::{Duration, Instant};

/// Keys hash to the hash they carry (`Key` writes exactly one `u64`).
type KeyMap<V> = HashMap<Key, V, BuildHasherDefault<KeyHasher>>;

mod histogram;
pub use histogram::HistogramReplay;

/// The locks that serialise `absolute` calls; which one a counter uses
/// depends on its address only.
static RAISE: [Mutex<()>; 64] = [const { Mutex::new(()) }; 64];

/// Raises the counter at `addr` (read by `sum`, added to by `add`) to at
/// least `value`: under its stripe lock, adds `value - sum()` when that is
/// positive.
///
/// Why it never stacks (add-only use): all raises of one counter run under
/// one lock, so each raise's `sum` happens-after every earlier raise's
/// `add` and includes it (both counters' `sum` includes every update that
/// happened-before it). Let the last raise that added be K, reading `s_K`
/// and adding `v_K - s_K`. `s_K` includes every earlier raise's addition
/// (and some increments, all non-negative), so the raises together added at
/// most `v_K`: the total is at most `v_K` plus what increments added. And
/// it is at least `value` after any raise: `s` never exceeds the total at
/// the time of the `add` (each word only grows), so the `add` lifts it to
/// `value` or above.
fn raise_to(addr: usize, value: u64, sum: impl FnOnce() -> u64, add: impl FnOnce(u64)) {
    // Counters are at least 16 bytes apart; mix in higher bits too.
    let stripe = ((addr >> 4) ^ (addr >> 10)) % RAISE.len();
    let _held = lock(&RAISE[stripe]);
    let s = sum();
    if value > s {
        add(value - s);
    }
}

/// `CounterFn` for counter types, written once over the contract:
/// `increment(v)` is the type's `add(v)`, and `absolute(v)` raises what
/// [`Count::read`] reads to at least `v` (see `raise_to`). Only for
/// [`Kind::Counter`] types: a gauge has no count to raise.
macro_rules! counter_fn {
    ($($(#[$doc:meta])* $t:ty;)*) => {$(
        const _: () = assert!(matches!(<$t as Count>::KIND, Kind::Counter));

        $(#[$doc])*
        impl CounterFn for $t {
            #[inline]
            fn increment(&self, value: u64) {
                self.add(value);
            }

            fn absolute(&self, value: u64) {
                raise_to(
                    std::ptr::from_ref(self).addr(),
                    value,
                    || Count::read(self),
                    |d| self.add(d),
                );
            }
        }
    )*};
}

counter_fn! {
    /// `increment(v)` is [`add(v)`](Counter::add). `absolute(v)` raises the
    /// counter to at least `v`.
    ///
    /// # What `absolute` guarantees
    ///
    /// It reads [`sum`](Counter::sum) and, if that is below `v`, adds the
    /// difference. Calls to `absolute` on one counter are serialised by a lock
    /// (one of 64 process-wide, picked by the counter's address); increments
    /// never wait for it. For add-only use (`increment`/`add` and `absolute`;
    /// no `sub`, `take` or `reset`, no wrap past 2<sup>64</sup>):
    ///
    /// * after `absolute(v)` returns, every `sum()` that happens-after it reads
    ///   at least `v`;
    /// * concurrent `absolute` calls never stack: the total never exceeds the
    ///   largest `v` passed plus what increments added, so a counter set only
    ///   through `absolute` reads exactly the largest `v` once the calls are
    ///   over, whatever their interleaving.
    ///
    /// It is not a `fetch_max`: an increment concurrent with `absolute` may be
    /// counted on top of the raised value, so the total can end up to those
    /// concurrent increments above `max(v, increments)`.
    ///
    /// ```
    /// use metrics::CounterFn;
    /// use shardcount::Counter;
    /// use std::sync::Arc;
    ///
    /// let c = Arc::new(Counter::new());
    /// let handle = metrics::Counter::from_arc(c.clone());
    /// handle.increment(3);
    /// handle.absolute(10); // raised to 10
    /// handle.absolute(4); // already above: unchanged
    /// assert_eq!(c.sum(), 10);
    /// ```
    Counter;

    /// `increment(v)` is [`add(v)`](RoughCounter::add). `absolute(v)` raises the
    /// counter to at least `v`, with the same guarantees as
    /// [`Counter`'s](#impl-CounterFn-for-Counter) (it reads the exact
    /// [`sum`](RoughCounter::sum), which reads every slot, and adds the
    /// difference to the calling thread's slot).
    ///
    /// ```
    /// use metrics::CounterFn;
    /// use shardcount::RoughCounter;
    /// use std::sync::Arc;
    ///
    /// let c = Arc::new(RoughCounter::new());
    /// let handle = metrics::Counter::from_arc(c.clone());
    /// handle.increment(3);
    /// handle.absolute(10);
    /// assert_eq!(c.sum(), 10);
    /// ```
    RoughCounter;
}

/// A layer that gives the recorder under it sharded counter increments
/// (also a `metrics_util` `Layer`); see [the module docs](self).
///
/// ```
/// use shardcount::integrations::metrics::ShardedLayer;
/// use std::time::Duration;
///
/// let layer = ShardedLayer::new().with_interval(Duration::from_secs(1));
/// let recorder = layer.wrap(metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder());
/// assert_eq!(recorder.interval(), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardedLayer {
    interval: Duration,
    rough: bool,
    evict_idle: Option<Duration>,
}

impl ShardedLayer {
    /// How often the background thread moves deltas into the inner
    /// recorder by default: 100 ms, well below any scrape interval.
    ///
    /// ```
    /// use shardcount::integrations::metrics::ShardedLayer;
    /// assert_eq!(ShardedLayer::DEFAULT_INTERVAL, std::time::Duration::from_millis(100));
    /// ```
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

    /// The shortest interval: any interval below 1 ms, zero included, runs
    /// every 1 ms, as every background thread of this crate does.
    ///
    /// ```
    /// use shardcount::integrations::metrics::ShardedLayer;
    /// let layer = ShardedLayer::new().with_interval(std::time::Duration::from_nanos(1));
    /// assert_eq!(layer.interval(), ShardedLayer::MIN_INTERVAL);
    /// assert_eq!(ShardedLayer::MIN_INTERVAL, std::time::Duration::from_millis(1));
    /// ```
    pub const MIN_INTERVAL: Duration = worker::MIN_WAIT;

    /// A layer folding every [`DEFAULT_INTERVAL`](Self::DEFAULT_INTERVAL).
    ///
    /// ```
    /// let layer = shardcount::integrations::metrics::ShardedLayer::new();
    /// assert_eq!(layer.interval(), std::time::Duration::from_millis(100));
    /// ```
    #[must_use]
    pub const fn new() -> Self {
        ShardedLayer {
            interval: Self::DEFAULT_INTERVAL,
            rough: false,
            evict_idle: None,
        }
    }

    /// Sets how often the background thread folds. Any interval below
    /// 1 ms, zero included, runs every 1 ms
    /// ([`MIN_INTERVAL`](Self::MIN_INTERVAL)). The exporter's counters lag
    /// the increments by about this much.
    ///
    /// ```
    /// use shardcount::integrations::metrics::ShardedLayer;
    /// use std::time::Duration;
    /// let layer = ShardedLayer::new().with_interval(Duration::from_secs(2));
    /// assert_eq!(layer.interval(), Duration::from_secs(2));
    /// let layer = ShardedLayer::new().with_interval(Duration::ZERO);
    /// assert_eq!(layer.interval(), Duration::from_millis(1));
    /// ```
    #[must_use]
    pub fn with_interval(self, interval: Duration) -> Self {
        ShardedLayer {
            interval: worker::effective(interval),
            ..self
        }
    }

    /// Backs each key with a [`RoughCounter`] instead of a [`Counter`].
    ///
    /// A thread increments the handles it registered itself in a word of
    /// its own either way; the backing counts the rest: increments through
    /// handles sent to other threads (and [`ShardedRecorder`]'s handles
    /// once their thread has exited). With a `RoughCounter` those are a
    /// store to the sending thread's own slot, with no locked instruction,
    /// for handles shared by many threads. The price is memory: a 128-byte
    /// slot per thread that has used the key (a `Counter` is 16 bytes until
    /// threads contend on it), and a fold reads every slot. Exactness after
    /// a flush is the same.
    ///
    /// ```
    /// use metrics_util::layers::Layer;
    /// use shardcount::integrations::metrics::ShardedLayer;
    ///
    /// let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    /// let render = prometheus.handle();
    /// let recorder = ShardedLayer::new().rough().layer(prometheus);
    /// metrics::with_local_recorder(&recorder, || metrics::counter!("hot").increment(9));
    /// recorder.flush();
    /// assert!(render.render().contains("hot 9"));
    /// ```
    #[must_use]
    pub const fn rough(self) -> Self {
        ShardedLayer {
            rough: true,
            ..self
        }
    }

    /// Frees the layer's state for keys nobody counts any more: a key
    /// whose folds have moved nothing for at least `idle` is folded one
    /// last time and taken out of the layer. Off by default.
    ///
    /// The background thread checks on each pass, so a key goes after
    /// `idle` rounded up to whole [intervals](Self::with_interval). A key
    /// is kept while a `metrics::Counter` or `metrics::Histogram` handle
    /// for it is held outside the layer's own caches (one kept in a struct
    /// or a `static`, say): such a handle stays on its fast path. Once a
    /// key is out, the next `counter!` or `histogram!` for it registers it
    /// again, in the inner recorder too (which hands back the same series:
    /// the exporter's totals carry on). Each thread that had the key in its
    /// cache lets go of its handle (and so of its 128 bytes) at its next
    /// `counter!` call on this recorder, any key, or at its exit; the key's
    /// counter is freed with the last handle. No increment is lost or
    /// counted twice on the way: until then, the key is still folded on
    /// every pass and [flush](ShardedRecorder::flush).
    ///
    /// Why off: the inner recorder keeps its own state for every series it
    /// was handed (the Prometheus exporter until its own `idle_timeout`),
    /// so this frees only the layer's share, and the two idle times are
    /// best chosen together; a program with a fixed set of keys gains
    /// nothing from it. Turn it on when label values come and go (user ids,
    /// peers, paths), with an idle time well above the longest quiet spell
    /// a live key has, minutes rather than seconds: a key taken out too
    /// early only costs a fresh registration (a lock and the inner
    /// recorder's `register_counter`) when it comes back.
    ///
    /// ```
    /// use metrics_exporter_prometheus::PrometheusBuilder;
    /// use shardcount::integrations::metrics::ShardedLayer;
    /// use std::time::{Duration, Instant};
    ///
    /// let prometheus = PrometheusBuilder::new().build_recorder();
    /// let render = prometheus.handle();
    /// let recorder = ShardedLayer::new()
    ///     .with_interval(Duration::from_millis(1))
    ///     .evict_idle_after(Duration::from_millis(5))
    ///     .wrap(prometheus);
    /// assert_eq!(recorder.idle_eviction(), Some(Duration::from_millis(5)));
    /// metrics::with_local_recorder(&recorder, || {
    ///     metrics::counter!("visits", "user" => "ada").increment(3);
    /// });
    /// let deadline = Instant::now() + Duration::from_secs(10);
    /// while recorder.keys() > 0 && Instant::now() < deadline {
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// assert_eq!(recorder.keys(), 0); // the layer let go of the key
    /// assert!(render.render().contains("visits{user=\"ada\"} 3")); // folded first
    /// ```
    #[must_use]
    pub const fn evict_idle_after(self, idle: Duration) -> Self {
        ShardedLayer {
            evict_idle: Some(idle),
            ..self
        }
    }

    /// The idle time after which keys are taken out
    /// ([`evict_idle_after`](Self::evict_idle_after)); `None`, the
    /// default, keeps every key while the recorder lives.
    ///
    /// ```
    /// use shardcount::integrations::metrics::ShardedLayer;
    /// use std::time::Duration;
    /// assert_eq!(ShardedLayer::new().idle_eviction(), None);
    /// let layer = ShardedLayer::new().evict_idle_after(Duration::from_secs(600));
    /// assert_eq!(layer.idle_eviction(), Some(Duration::from_secs(600)));
    /// ```
    #[must_use]
    pub fn idle_eviction(&self) -> Option<Duration> {
        self.evict_idle
    }

    /// Puts `inner` under this layer: the same as `Layer::layer`, without
    /// importing `metrics_util::layers::Layer` or depending on
    /// `metrics-util`. Install the result instead of `inner`.
    ///
    /// # Panics
    ///
    /// If the background thread cannot be spawned.
    ///
    /// ```
    /// use metrics_exporter_prometheus::PrometheusBuilder;
    /// use shardcount::integrations::metrics::ShardedLayer;
    ///
    /// let prometheus = PrometheusBuilder::new().build_recorder();
    /// let render = prometheus.handle();
    /// let recorder = ShardedLayer::new().rough().wrap(prometheus);
    /// metrics::with_local_recorder(&recorder, || metrics::counter!("hot").increment(9));
    /// recorder.flush();
    /// assert!(render.render().contains("hot 9"));
    /// ```
    #[must_use]
    pub fn wrap<R: Recorder>(self, inner: R) -> ShardedRecorder<R> {
        Layer::layer(&self, inner)
    }

    /// Whether keys are backed by [`RoughCounter`]s ([`rough`](Self::rough)).
    ///
    /// ```
    /// use shardcount::integrations::metrics::ShardedLayer;
    /// assert!(!ShardedLayer::new().is_rough());
    /// assert!(ShardedLayer::new().rough().is_rough());
    /// ```
    #[must_use]
    pub fn is_rough(&self) -> bool {
        self.rough
    }

    /// The interval the recorders it builds fold at.
    ///
    /// ```
    /// let layer = shardcount::integrations::metrics::ShardedLayer::default();
    /// assert_eq!(layer.interval(), shardcount::integrations::metrics::ShardedLayer::DEFAULT_INTERVAL);
    /// ```
    #[must_use]
    pub fn interval(&self) -> Duration {
        self.interval
    }
}

impl Default for ShardedLayer {
    /// [`ShardedLayer::new`].
    ///
    /// ```
    /// use shardcount::integrations::metrics::ShardedLayer;
    /// assert_eq!(ShardedLayer::default(), ShardedLayer::new());
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Recorder> Layer<R> for ShardedLayer {
    type Output = ShardedRecorder<R>;

    fn layer(&self, inner: R) -> ShardedRecorder<R> {
        ShardedRecorder::build(inner, *self)
    }
}

/// What counts a key's increments.
enum Backing {
    Exact(Counter),
    Rough(RoughCounter),
}

/// One counter key: its shardcount counter, the words of the threads that
/// count it in a handle of their own, and the inner recorder's handle.
struct Entry {
    counter: Backing,
    inner: ::metrics::Counter,
    /// Held while a delta moves to `inner` (protocol notes at the top).
    fold: Mutex<Folded>,
    /// Set once, by the pass that takes the entry out of `Shared::entries`
    /// (under this entry's `fold` lock); never cleared.
    evicted: AtomicBool,
}

/// What an entry has folded so far.
struct Folded {
    /// The `RoughCounter`'s sum at the last fold.
    rough: u64,
    /// The owned handles (see [`Local`]) and each one's word at the last
    /// fold. A retired handle is folded once more, then dropped from here.
    locals: Vec<(Arc<Local>, u64)>,
    /// A fold moved a delta since the last background pass looked.
    moved: bool,
    /// The last background pass that saw a delta moved (or the entry's
    /// creation): the key's idle time runs from here.
    active_at: Instant,
    /// When contention left the key's counter (as a `Merger` tells).
    quiet: Quiet,
}

impl Folded {
    fn new() -> Self {
        Folded {
            rough: 0,
            locals: Vec::new(),
            moved: false,
            active_at: Instant::now(),
            quiet: Quiet::new(Instant::now()),
        }
    }
}

impl Entry {
    #[inline]
    fn add(&self, value: u64) {
        match &self.counter {
            Backing::Exact(c) => c.add(value),
            Backing::Rough(c) => c.add(value),
        }
    }

    /// Moves the key's delta into the inner counter; returns with the fold
    /// lock held, for `absolute`.
    fn fold(&self) -> crate::primitive::sync::MutexGuard<'_, Folded> {
        let mut folded = lock(&self.fold);
        let mut delta = match &self.counter {
            Backing::Exact(c) => c.take(),
            Backing::Rough(c) => {
                let sum = c.sum();
                let delta = sum.wrapping_sub(folded.rough);
                folded.rough = sum;
                delta
            }
        };
        folded.locals.retain_mut(|(local, seen)| {
            // Acquire: pairs with `retire`'s Release, so a retired handle's
            // word is read with its owner's last store.
            let retired = local.0.owner.load(Ordering::Acquire) == 0;
            // Relaxed: only the owner writes the word; a fold that
            // happens-after an increment reads it (or a later value).
            let word = local.0.own.load(Ordering::Relaxed);
            delta = delta.wrapping_add(word.wrapping_sub(*seen));
            *seen = word;
            !retired
        });
        if delta != 0 {
            folded.moved = true;
            self.inner.increment(delta);
        }
        folded
    }

    /// Whether anything outside the layer may still hold this entry: a
    /// handle the user kept, or one being handed out or folded right now.
    /// A heuristic under the `fold` lock, not a guarantee: the strong
    /// counts move without our locks (a thread clones its cached handle
    /// with no lock at all). What it gets wrong only keeps a key longer, or
    /// evicts a key with a handle that then counts into the evicted entry,
    /// which is folded until the last handle goes (protocol notes).
    fn reachable(self: &Arc<Self>, folded: &Folded) -> bool {
        #[cfg(test)]
        if tests::IGNORE_HANDLES.with(Cell::get) {
            return false;
        }
        // The map's reference, and one per listed handle.
        Arc::strong_count(self) != 1 + folded.locals.len()
            || folded.locals.iter().any(|(local, _)| {
                // The list's reference, and the owner's cache's unless
                // retired. Relaxed: a stale value only misjudges, as above.
                let cached = if local.0.owner.load(Ordering::Relaxed) == 0 {
                    0
                } else {
                    local.0.cached.load(Ordering::Relaxed)
                };
                Arc::strong_count(local) > 1 + usize::from(cached)
            })
    }
}

impl CounterFn for Entry {
    #[inline]
    fn increment(&self, value: u64) {
        self.add(value);
    }

    /// Folds this key's delta, then passes `absolute` to the inner counter,
    /// under the fold lock: the inner counter sees every increment taken so
    /// far before it sees `absolute`.
    fn absolute(&self, value: u64) {
        let _held = self.fold();
        self.inner.absolute(value);
    }
}

const_thread_local! {
    /// The calling thread's id for owned handles: 0 until it first owns
    /// one, then unique in the process (never reused, unlike the addresses
    /// and indexes of exited threads). No destructor: readable while the
    /// thread's other thread-locals are being destroyed.
    static THREAD_ID: Cell<u64> = Cell::new(0);
}

/// The calling thread's id, taking one on first use.
fn own_thread_id() -> u64 {
    THREAD_ID.with(|id| {
        if id.get() == 0 {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
            // Relaxed: only uniqueness matters.
            id.set(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        }
        id.get()
    })
}

/// A thread's own handle to an entry, cached by that thread and cloned by
/// each of its `counter!` calls.
///
/// Its owner counts in `own` with a load and a store (no locked
/// instruction: no other thread writes the word); any other thread the
/// handle was sent to adds to the entry's counter. Padded, so the
/// handle's reference count and word share a line with no other thread's.
struct Local(CachePadded<Owned>);

struct Owned {
    /// The owner's [`own_thread_id`]; 0 once the owner's cache is gone
    /// (`retire`): from then on every increment goes to the entry.
    owner: AtomicU64,
    /// What the owner counted: written by the owner only, read by folds.
    own: AtomicU64,
    /// How many references the owner's cache holds (0 to 2: its map and
    /// its front table), for `Entry::reachable`. Written by the owner when
    /// it caches the handle, before any eviction can concern it.
    cached: AtomicU8,
    entry: Arc<Entry>,
}

impl Local {
    /// A handle owned by the calling thread.
    fn owned(entry: Arc<Entry>) -> Self {
        Local(CachePadded::new(Owned {
            owner: AtomicU64::new(own_thread_id()),
            own: AtomicU64::new(0),
            cached: AtomicU8::new(0),
            entry,
        }))
    }

    /// Sends this handle's later increments to the entry. Called by the
    /// owner only, after its last increment to `own`.
    fn retire(&self) {
        // Release: a fold that reads 0 also reads the owner's last store
        // to `own`, and folds it once more before letting the handle go.
        self.0.owner.store(0, Ordering::Release);
    }
}

impl CounterFn for Local {
    #[inline]
    fn increment(&self, value: u64) {
        let me = THREAD_ID.with(Cell::get);
        // Relaxed: only the owner ever stores its own id here or replaces
        // it, so the owner reads its latest store; another thread never
        // reads its own id (ids are never reused).
        if me != 0 && self.0.owner.load(Ordering::Relaxed) == me {
            // Relaxed: the owner is the only writer; folds that must see
            // this increment happen-after it.
            let own = &self.0.own;
            own.store(
                own.load(Ordering::Relaxed).wrapping_add(value),
                Ordering::Relaxed,
            );
        } else {
            self.0.entry.add(value);
        }
    }

    fn absolute(&self, value: u64) {
        self.0.entry.absolute(value);
    }
}

/// What a recorder, its background thread and its flush handles share.
struct Shared {
    entries: Mutex<KeyMap<Arc<Entry>>>,
    /// Entries taken out of `entries` that a handle may still count into:
    /// folded on every pass and flush until the pass holds the only
    /// reference (protocol notes at the top).
    evicted: Mutex<Vec<Arc<Entry>>>,
    /// How many passes have evicted counter keys: a thread whose cache saw
    /// an older value sweeps it. Padded: read by every `counter!` hit,
    /// written once per evicting pass, beside locks that registration
    /// writes.
    evictions: CachePadded<AtomicU64>,
    /// [`ShardedLayer::evict_idle_after`].
    evict_idle: Option<Duration>,
    /// How long no pass may see two rows of a key's counter change before
    /// the pass merges it (`MERGE_AFTER` intervals).
    merge_idle: Duration,
    histograms: histogram::Folds,
}

/// Passes without contention on a key's counter (two of its rows
/// changing) before a pass merges it back to one word.
const MERGE_AFTER: u32 = 10;

impl Shared {
    /// Folds every key, evicted ones included. Copies the list first, so
    /// registration never waits for a pass.
    fn flush(&self) {
        self.fold_keys(None);
        self.fold_evicted();
        self.histograms.flush();
    }

    /// The background thread's pass at `now`: a flush, which also notes
    /// which keys moved, then the eviction of keys idle for long enough.
    fn pass(&self, now: Instant) {
        self.fold_keys(Some(now));
        if let Some(idle) = self.evict_idle {
            self.evict(now, idle);
        }
        self.fold_evicted();
        self.histograms.pass(now, self.evict_idle, self.merge_idle);
    }

    /// Folds every key in `entries`; with `now`, a key whose folds moved a
    /// delta since the last pass is active at `now`.
    fn fold_keys(&self, now: Option<Instant>) {
        let entries: Vec<Arc<Entry>> = lock(&self.entries).values().cloned().collect();
        let mut quiet = Vec::new();
        for e in &entries {
            let mut folded = e.fold();
            if let Some(now) = now {
                if std::mem::take(&mut folded.moved) {
                    folded.active_at = now;
                }
                if let Backing::Exact(c) = &e.counter {
                    if folded
                        .quiet
                        .look(|out| c.row_totals(out), now, self.merge_idle)
                    {
                        quiet.push(c);
                    }
                }
            }
        }
        if !quiet.is_empty() {
            Counter::merge_batch(quiet);
        }
    }

    /// Takes out of `entries` every key with nothing moved since `idle`
    /// before `now` and no handle outside the caches, and tells the
    /// threads' caches.
    fn evict(&self, now: Instant, idle: Duration) {
        // Locked first and held over the map's lock: an entry is always in
        // the map or the list, so no flush misses it.
        let mut list = lock(&self.evicted);
        let before = list.len();
        lock(&self.entries).retain(|_, e| {
            // A fold in progress holds the lock (and calls the inner
            // recorder, which may register through the facade and want
            // the map's lock): that key is busy anyway.
            let Some(folded) = try_lock(&e.fold) else {
                return true;
            };
            let quiet = !folded.moved && now.saturating_duration_since(folded.active_at) >= idle;
            if !quiet || e.reachable(&folded) {
                return true;
            }
            // Relaxed: registration reads it under the `fold` lock, held
            // here; a cache sweep reads it after an Acquire load of
            // `evictions`, which the Release below publishes.
            e.evicted.store(true, Ordering::Relaxed);
            drop(folded);
            list.push(Arc::clone(e));
            false
        });
        if list.len() != before {
            // Release: a thread that reads this value (Acquire) before its
            // sweep reads every flag stored above.
            self.evictions.fetch_add(1, Ordering::Release);
        }
    }

    /// Folds every evicted entry, and frees each one nobody else holds any
    /// more. The list stays locked throughout, so a flush that returns has
    /// waited for the folds of a concurrent one.
    fn fold_evicted(&self) {
        let mut list = lock(&self.evicted);
        for e in std::mem::take(&mut *list) {
            // Also drops the handles retired since the last fold: each
            // holds a reference to the entry.
            drop(e.fold());
            // Unique: no handle, cache or registration holds the entry, and
            // none can again (it is in no map). `try_unwrap` synchronises
            // with every other reference's drop, so the fold below reads
            // every increment made through one. Until then, every fold
            // takes what was added since the last: nothing lost, nothing
            // twice.
            match Arc::try_unwrap(e) {
                Ok(last) => drop(last.fold()),
                Err(e) => list.push(e),
            }
        }
    }
}

/// One thread's handles for one recorder.
///
/// A hit is usually decided in `front`, a small direct-mapped table indexed
/// by the hash the key carries (computed once, by `Key`'s constructor) and
/// confirmed by [`same_key`], which compares the key's strings by address
/// first: a `counter!` call site builds its key from the same `'static`
/// strings every time, so a hit compares no bytes. Every handle is also in
/// `handles`, where keys that lost their `front` slot to another are found.
struct Cache {
    owner: Weak<Shared>,
    /// The owner's `evictions` at this cache's last sweep (or creation).
    seen: u64,
    front: Box<[Option<Cached>; FRONT]>,
    handles: KeyMap<Arc<Local>>,
}

/// A key and this thread's handle for it.
type Cached = (Key, Arc<Local>);

/// Slots in a [`Cache`]'s `front` (a power of two).
const FRONT: usize = 32;

impl Cache {
    fn new(owner: Weak<Shared>, seen: u64) -> Self {
        Cache {
            owner,
            seen,
            front: Box::new([const { None }; FRONT]),
            handles: KeyMap::default(),
        }
    }

    /// Retires and lets go of the handles of evicted keys. The entry's next
    /// fold takes each one's word a last time and drops it from its list.
    fn sweep(&mut self) {
        // Relaxed: the caller read `evictions` with Acquire after the flags
        // it must see were stored; a flag stored later is seen by the sweep
        // after the next eviction count.
        let evicted = |local: &Arc<Local>| local.0.entry.evicted.load(Ordering::Relaxed);
        self.handles.retain(|_, local| {
            if evicted(local) {
                // By the owner, after its last increment to the word.
                local.retire();
                return false;
            }
            true
        });
        for slot in self.front.iter_mut() {
            if slot.as_ref().is_some_and(|(_, local)| evicted(local)) {
                *slot = None;
            }
        }
    }

    #[inline]
    fn slot(key: &Key) -> usize {
        // The high bits: the map below indexes with the low ones.
        (key.get_hash() >> (64 - FRONT.trailing_zeros())) as usize
    }

    #[inline]
    fn get(&self, key: &Key) -> Option<&Arc<Local>> {
        match &self.front[Self::slot(key)] {
            Some((k, local)) if same_key(k, key) => Some(local),
            _ => self.handles.get(key),
        }
    }

    /// Caches `local` for `key`; false if the key has a handle already
    /// (which stays).
    fn insert(&mut self, key: &Key, local: &Arc<Local>) -> bool {
        use std::collections::hash_map::Entry as Slot;
        match self.handles.entry(key.clone()) {
            Slot::Occupied(_) => return false,
            Slot::Vacant(v) => v.insert(Arc::clone(local)),
        };
        // The first key to a slot keeps it: no key evicts another on
        // every call.
        let front = &mut self.front[Self::slot(key)];
        let refs = if front.is_none() {
            *front = Some((key.clone(), Arc::clone(local)));
            2
        } else {
            1
        };
        // Relaxed: read by `Entry::reachable`, a heuristic.
        local.0.cached.store(refs, Ordering::Relaxed);
        true
    }
}

impl Drop for Cache {
    /// The thread is exiting or the recorder is gone: the thread's handles
    /// stop counting in their own words.
    fn drop(&mut self) {
        for local in self.handles.values() {
            local.retire();
        }
    }
}

/// `a == b`, deciding most equal keys from their strings' addresses and
/// lengths alone, and otherwise by `Key`'s own comparison (which also
/// accepts the same labels in another order).
#[inline]
fn same_key(a: &Key, b: &Key) -> bool {
    #[inline]
    fn same_place(a: &str, b: &str) -> bool {
        std::ptr::eq(a, b)
    }
    let fast = a.get_hash() == b.get_hash()
        && same_place(a.name(), b.name())
        && a.labels().len() == b.labels().len()
        && a.labels()
            .zip(b.labels())
            .all(|(x, y)| same_place(x.key(), y.key()) && same_place(x.value(), y.value()));
    fast || a == b
}

const_thread_local! {
    /// This thread's caches, one per live recorder it has used.
    static CACHES: RefCell<Vec<Cache>> = RefCell::new(Vec::new());
}

/// A recorder whose counters are shardcount [`Counter`]s, folded into the
/// inner recorder's counters every interval; see [the module
/// docs](self). Build it with [`ShardedLayer`] or [`new`](Self::new).
///
/// Dropping it stops its background thread and flushes. A recorder
/// installed with `metrics::set_global_recorder` is never dropped: call
/// [`FlushHandle::flush`] before the last scrape or at shutdown.
/// Increments made through `metrics::Counter` handles after the recorder
/// was dropped are not folded anywhere.
///
/// ```
/// use metrics::Recorder;
/// use metrics_exporter_prometheus::PrometheusBuilder;
/// use shardcount::integrations::metrics::ShardedRecorder;
///
/// let recorder = ShardedRecorder::new(PrometheusBuilder::new().build_recorder());
/// let render = recorder.inner().handle();
/// let key = metrics::Key::from_name("hits");
/// let meta = metrics::Metadata::new("doc", metrics::Level::INFO, None);
/// let hits = recorder.register_counter(&key, &meta);
/// hits.increment(5);
/// assert!(!render.render().contains("hits 5")); // not folded yet
/// recorder.flush();
/// assert!(render.render().contains("hits 5"));
/// ```
pub struct ShardedRecorder<R> {
    inner: R,
    shared: Arc<Shared>,
    layer: ShardedLayer,
    worker: Worker,
}

impl<R: Recorder> ShardedRecorder<R> {
    /// `inner` with sharded counters, folded every
    /// [`ShardedLayer::DEFAULT_INTERVAL`]: the same as
    /// `ShardedLayer::new().layer(inner)`.
    ///
    /// # Panics
    ///
    /// If the background thread cannot be spawned.
    ///
    /// ```
    /// use shardcount::integrations::metrics::{ShardedLayer, ShardedRecorder};
    /// let r = ShardedRecorder::new(metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder());
    /// assert_eq!(r.interval(), ShardedLayer::DEFAULT_INTERVAL);
    /// ```
    #[must_use]
    pub fn new(inner: R) -> Self {
        Self::build(inner, ShardedLayer::new())
    }
}

impl<R> ShardedRecorder<R> {
    fn build(inner: R, layer: ShardedLayer) -> Self {
        let shared = Arc::new(Shared {
            entries: Mutex::new(KeyMap::default()),
            evicted: Mutex::new(Vec::new()),
            evictions: CachePadded::new(AtomicU64::new(0)),
            evict_idle: layer.evict_idle,
            merge_idle: layer.interval * MERGE_AFTER,
            histograms: histogram::Folds::default(),
        });
        let worker = Worker::spawn("shardcount-metrics", layer.interval, {
            let shared = Arc::clone(&shared);
            move || shared.pass(Instant::now())
        });
        ShardedRecorder {
            inner,
            shared,
            layer,
            worker,
        }
    }

    /// Moves every key's delta into the inner recorder now. When it returns,
    /// the inner counters include every increment that happened-before the
    /// call.
    ///
    /// ```
    /// use metrics::Recorder;
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// let meta = metrics::Metadata::new("doc", metrics::Level::INFO, None);
    /// r.register_counter(&metrics::Key::from_name("n"), &meta).increment(2);
    /// r.flush();
    /// assert!(r.inner().handle().render().contains("n 2"));
    /// ```
    pub fn flush(&self) {
        self.shared.flush();
    }

    /// A handle that flushes this recorder from anywhere, also after the
    /// recorder was moved into `metrics::set_global_recorder`.
    ///
    /// ```
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// let flush = r.flush_handle();
    /// flush.flush();
    /// ```
    #[must_use]
    pub fn flush_handle(&self) -> FlushHandle {
        FlushHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The recorder underneath.
    ///
    /// ```
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// let _render = r.inner().handle();
    /// ```
    #[must_use]
    pub fn inner(&self) -> &R {
        &self.inner
    }

    /// How often the background thread folds.
    ///
    /// ```
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// assert_eq!(r.interval(), std::time::Duration::from_millis(100));
    /// ```
    #[must_use]
    pub fn interval(&self) -> Duration {
        self.layer.interval
    }

    /// How long a key stays idle before the layer lets go of it
    /// ([`ShardedLayer::evict_idle_after`]); `None` (the default) keeps
    /// every key while the recorder lives.
    ///
    /// ```
    /// use shardcount::integrations::metrics::ShardedLayer;
    /// use std::time::Duration;
    /// let r = ShardedLayer::new()
    ///     .evict_idle_after(Duration::from_secs(300))
    ///     .wrap(metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder());
    /// assert_eq!(r.idle_eviction(), Some(Duration::from_secs(300)));
    /// ```
    #[must_use]
    pub fn idle_eviction(&self) -> Option<Duration> {
        self.layer.evict_idle
    }

    /// How many counter keys the layer holds: every key registered, less
    /// those evicted ([`ShardedLayer::evict_idle_after`]). A diagnostic.
    ///
    /// ```
    /// use metrics::Recorder;
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// let meta = metrics::Metadata::new("doc", metrics::Level::INFO, None);
    /// let _ = r.register_counter(&metrics::Key::from_name("a"), &meta);
    /// let _ = r.register_counter(&metrics::Key::from_name("a"), &meta);
    /// assert_eq!(r.keys(), 1);
    /// ```
    #[must_use]
    pub fn keys(&self) -> usize {
        lock(&self.shared.entries).len()
    }

    /// How many shard rows the keys' counters and histograms hold in all:
    /// 0 while no key is contended. A diagnostic.
    ///
    /// A key's increments through a handle that its own thread registered
    /// go to a word of that thread's; increments through a handle shared
    /// by many threads (a `metrics::Counter` kept in a struct or a
    /// `static`) go to the key's counter, and every record goes to the
    /// key's histogram, which contention splits into shard rows. The
    /// background thread merges those back once no pass has seen two of a
    /// key's rows change for 10 intervals
    /// ([`ShardedLayer::with_interval`]), as a [`Merger`](crate::Merger)
    /// would: memory follows load.
    ///
    /// ```
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// assert_eq!(r.shards(), 0);
    /// ```
    #[must_use]
    pub fn shards(&self) -> usize {
        let entries: Vec<Arc<Entry>> = lock(&self.shared.entries).values().cloned().collect();
        entries
            .iter()
            .map(|e| match &e.counter {
                Backing::Exact(c) => c.shards(),
                Backing::Rough(_) => 0,
            })
            .sum::<usize>()
            + self.shared.histograms.shards()
    }
}

impl<R: Recorder> ShardedRecorder<R> {
    /// The key's entry, registering it in the inner recorder on first use.
    #[cold]
    fn entry(&self, key: &Key, metadata: &Metadata<'_>) -> Arc<Entry> {
        if let Some(e) = lock(&self.shared.entries).get(key) {
            return Arc::clone(e);
        }
        // Registered without our lock held, in case the inner recorder
        // records through the facade itself; a racing registration of the
        // same key wins and ours is dropped (the inner recorder hands both
        // the same counter).
        let inner = self.inner.register_counter(key, metadata);
        let mut entries = lock(&self.shared.entries);
        let e = entries.entry(key.clone()).or_insert_with(|| {
            Arc::new(Entry {
                counter: if self.layer.rough {
                    Backing::Rough(RoughCounter::new())
                } else {
                    Backing::Exact(Counter::new())
                },
                inner,
                fold: Mutex::new(Folded::new()),
                evicted: AtomicBool::new(false),
            })
        });
        Arc::clone(e)
    }

    /// A cache miss: sweep the thread's cache if keys were evicted since
    /// its last sweep, then find or make the entry, and cache a handle of
    /// this thread's own for it.
    #[cold]
    #[inline(never)]
    fn register_slow(&self, key: &Key, metadata: &Metadata<'_>) -> ::metrics::Counter {
        // Acquire: pairs with `evict`'s Release, so the sweep reads the
        // flag of every entry evicted by the passes counted so far. Read
        // before the entry is looked up: an eviction after this read moves
        // the count past the value a new cache starts with.
        let evictions = self.shared.evictions.load(Ordering::Acquire);
        if let Some(local) = self.swept_hit(key, evictions) {
            return ::metrics::Counter::from_arc(local);
        }
        let me = Arc::as_ptr(&self.shared);
        let local = loop {
            let entry = self.entry(key, metadata);
            let local = Arc::new(Local::owned(Arc::clone(&entry)));
            let mut folded = lock(&entry.fold);
            // Relaxed: written under this lock. An entry evicted since
            // `entry` found it is in no map: look again, for a new one.
            if entry.evicted.load(Ordering::Relaxed) {
                continue;
            }
            folded.locals.push((Arc::clone(&local), 0));
            break local;
        };
        // Not cached when the thread-local is gone (thread exit) or already
        // borrowed (a registration from inside one): the handle still
        // counts, through the entry, as a retired one.
        let cached = CACHES
            .try_with(|caches| {
                let Ok(mut caches) = caches.try_borrow_mut() else {
                    return false;
                };
                caches.retain(|c| c.owner.strong_count() > 0);
                let i = match caches.iter().position(|c| c.owner.as_ptr() == me) {
                    Some(i) => i,
                    None => {
                        caches.push(Cache::new(Arc::downgrade(&self.shared), evictions));
                        caches.len() - 1
                    }
                };
                caches[i].insert(key, &local)
            })
            .unwrap_or(false);
        if !cached {
            // Listed already: the next fold takes its word and drops it.
            local.retire();
        }
        ::metrics::Counter::from_arc(local)
    }

    /// This thread's handle for `key`, after sweeping the handles of
    /// evicted keys out of its cache if it has not seen `evictions` yet.
    fn swept_hit(&self, key: &Key, evictions: u64) -> Option<Arc<Local>> {
        let me = Arc::as_ptr(&self.shared);
        CACHES
            .try_with(|caches| {
                let mut caches = caches.try_borrow_mut().ok()?;
                let cache = caches.iter_mut().find(|c| c.owner.as_ptr() == me)?;
                if cache.seen != evictions {
                    cache.sweep();
                    cache.seen = evictions;
                }
                cache.get(key).cloned()
            })
            .ok()
            .flatten()
    }
}

impl<R: Recorder> Recorder for ShardedRecorder<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    /// A handle backed by the key's shardcount [`Counter`]. On a key this
    /// thread has registered before, it takes no lock: one lookup in the
    /// thread's cache and a reference count only this thread touches.
    #[inline]
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> ::metrics::Counter {
        let shared = &*self.shared;
        let me = std::ptr::from_ref(shared);
        let hit = CACHES
            .try_with(|caches| {
                let caches = caches.try_borrow().ok()?;
                let cache = caches.iter().find(|c| c.owner.as_ptr() == me)?;
                // Relaxed: a stale count only puts the sweep off to a later
                // call; the slow path reads it again with Acquire.
                if cache.seen != shared.evictions.load(Ordering::Relaxed) {
                    return None;
                }
                cache.get(key).cloned()
            })
            .ok()
            .flatten();
        match hit {
            Some(local) => ::metrics::Counter::from_arc(local),
            None => self.register_slow(key, metadata),
        }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.inner.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.shared.histograms.handle(&self.inner, key, metadata)
    }
}

impl<R> Drop for ShardedRecorder<R> {
    /// Stops the background thread, waits for it, and flushes once more.
    fn drop(&mut self) {
        self.worker.stop();
        self.shared.flush();
        // An entry holds its owned handles and each handle its entry: let
        // go of the handles, so both are freed with the threads' caches.
        for e in lock(&self.shared.entries).values() {
            lock(&e.fold).locals.clear();
        }
        for e in lock(&self.shared.evicted).iter() {
            lock(&e.fold).locals.clear();
        }
    }
}

impl<R> fmt::Debug for ShardedRecorder<R> {
    /// Shows the interval, the backing, the idle eviction time and the
    /// number of keys.
    ///
    /// ```
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// assert_eq!(
    ///     format!("{r:?}"),
    ///     "ShardedRecorder { interval: 100ms, rough: false, evict_idle_after: None, keys: 0 }"
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedRecorder")
            .field("interval", &self.layer.interval)
            .field("rough", &self.layer.rough)
            .field("evict_idle_after", &self.layer.evict_idle)
            .field("keys", &self.keys())
            .finish()
    }
}

/// Flushes a [`ShardedRecorder`] from anywhere: get one with
/// [`ShardedRecorder::flush_handle`] before installing the recorder.
///
/// ```
/// use metrics_util::layers::Layer;
/// use shardcount::integrations::metrics::ShardedLayer;
///
/// let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
/// let render = prometheus.handle();
/// let recorder = ShardedLayer::new().layer(prometheus);
/// let flush = recorder.flush_handle();
/// metrics::with_local_recorder(&recorder, || metrics::counter!("jobs").increment(7));
/// flush.flush();
/// assert!(render.render().contains("jobs 7"));
/// ```
#[derive(Clone)]
pub struct FlushHandle {
    shared: Arc<Shared>,
}

impl FlushHandle {
    /// As [`ShardedRecorder::flush`].
    ///
    /// ```
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// r.flush_handle().flush();
    /// ```
    pub fn flush(&self) {
        self.shared.flush();
    }
}

impl fmt::Debug for FlushHandle {
    /// Shows the number of keys.
    ///
    /// ```
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// assert_eq!(format!("{:?}", r.flush_handle()), "FlushHandle { keys: 0 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FlushHandle")
            .field("keys", &lock(&self.shared.entries).len())
            .finish()
    }
}

/// Hands each member of `family` (any counter type or family, a
/// [`LabelledCounter`](crate::LabelledCounter) included) to the current
/// recorder (`metrics::with_recorder`) as its own series of `name`, with
/// one `metrics` label per name in
/// [`LABEL_NAMES`](crate::contract::CountFamily::LABEL_NAMES): a counter
/// member through `absolute` (its exact read, which a recorder's counter
/// takes as the new total when it is larger), a gauge member through
/// `set`. Call it before each scrape or export, e.g. from the thread that
/// renders; nothing here touches the add path.
///
/// Under [`ShardedLayer`] it works as well: the layer passes `absolute`
/// on to the inner recorder's counter.
///
/// ```
/// use metrics_exporter_prometheus::PrometheusBuilder;
/// use shardcount::integrations::metrics::publish;
/// use shardcount::{Label, LabelledCounter};
///
/// #[derive(Clone, Copy, Label)]
/// enum Method { Get, Post }
/// #[derive(Clone, Copy, Label)]
/// enum Status { Ok, Failed }
/// static REQUESTS: LabelledCounter<(Method, Status)> = LabelledCounter::new();
///
/// let recorder = PrometheusBuilder::new().build_recorder();
/// let render = recorder.handle();
/// REQUESTS.add((Method::Post, Status::Ok), 3);
/// metrics::with_local_recorder(&recorder, || publish("requests", &REQUESTS));
/// assert!(render.render().contains("requests{method=\"post\",status=\"ok\"} 3"));
/// ```
pub fn publish<F: crate::contract::CountFamily + ?Sized>(name: &'static str, family: &F) {
    static META: Metadata<'static> =
        Metadata::new(module_path!(), ::metrics::Level::INFO, Some(module_path!()));
    ::metrics::with_recorder(|recorder| {
        family.read_each_labels(|texts, value| {
            let labels: Vec<::metrics::Label> = family
                .label_names()
                .iter()
                .zip(texts)
                .map(|(n, t)| ::metrics::Label::new(*n, t.to_string()))
                .collect();
            let key = Key::from_parts(name, labels);
            match F::MEMBER_KIND {
                Kind::Counter => recorder.register_counter(&key, &META).absolute(value),
                // The data model's values are f64: exact up to 2^53.
                Kind::Gauge => recorder.register_gauge(&key, &META).set(value as f64),
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::Relaxed;

    std::thread_local! {
        /// Evicts keys with handles kept, as a pass racing a `counter!`
        /// call can (`Entry::reachable`); set on the thread running the pass.
        pub(super) static IGNORE_HANDLES: Cell<bool> = const { Cell::new(false) };
    }

    /// A pass now (which marks the keys that moved since the last one
    /// active now), then one at a time far enough ahead that every key is
    /// idle.
    fn pass_idle<R>(r: &ShardedRecorder<R>) {
        let now = Instant::now();
        r.shared.pass(now);
        r.shared.pass(now + Duration::from_secs(3600));
    }

    fn evicted(r: &ShardedRecorder<Tally>) -> usize {
        lock(&r.shared.evicted).len()
    }

    /// A recorder over a [`Tally`] that evicts keys idle for a minute and
    /// folds on its own only every hour, and the tally's total.
    fn evicting(rough: bool) -> (ShardedRecorder<Tally>, std::sync::Arc<AtomicU64Std>) {
        let inner = Tally::default();
        let total = std::sync::Arc::clone(&inner.0);
        let layer = ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .evict_idle_after(Duration::from_secs(60));
        let r = if rough { layer.rough() } else { layer }.wrap(inner);
        (r, total)
    }

    type AtomicU64Std = std::sync::atomic::AtomicU64;

    /// An idle key is taken out by a pass; the thread's next `counter!`
    /// sweeps its cache, which retires its handle, and registers the key
    /// again; the old entry is folded once more and freed. Every count
    /// reaches the inner counter once.
    #[test]
    fn an_idle_key_is_evicted_folded_and_registered_again() {
        for rough in [false, true] {
            let (r, total) = evicting(rough);
            ::metrics::with_local_recorder(&r, || ::metrics::counter!("idle").increment(5));
            r.shared.pass(Instant::now());
            assert_eq!(r.keys(), 1, "evicted before its idle time");
            assert_eq!(total.load(Relaxed), 5);
            pass_idle(&r);
            assert_eq!(r.keys(), 0, "an idle key is evicted");
            assert_eq!(evicted(&r), 1, "held by this thread's cache");
            ::metrics::with_local_recorder(&r, || ::metrics::counter!("idle").increment(7));
            assert_eq!(r.keys(), 1, "registered again");
            r.flush();
            assert_eq!(evicted(&r), 0, "the swept handle let go of the old entry");
            assert_eq!(total.load(Relaxed), 12);
            assert_eq!(owned_handles(&r), 1);
        }
    }

    /// A handle kept outside the layer keeps its key in: it stays on its
    /// fast path. Dropped, the key goes at the next idle pass.
    #[test]
    fn a_kept_handle_keeps_its_key() {
        let (r, total) = evicting(false);
        let kept = ::metrics::with_local_recorder(&r, || ::metrics::counter!("kept"));
        kept.increment(1);
        pass_idle(&r);
        assert_eq!(r.keys(), 1, "evicted while a handle is kept");
        kept.increment(2);
        drop(kept);
        pass_idle(&r);
        assert_eq!(r.keys(), 0);
        r.flush();
        assert_eq!(total.load(Relaxed), 3);
    }

    /// A pass that evicts a key while a handle for it is kept (as one
    /// racing a `counter!` call can): increments through the handle, by
    /// its owner before and after its cache's sweep and by another thread,
    /// all reach the inner counter once; the evicted entry is freed when
    /// the handle goes.
    #[test]
    fn a_kept_handle_of_an_evicted_key_counts_exactly() {
        let (r, total) = evicting(false);
        let kept = ::metrics::with_local_recorder(&r, || ::metrics::counter!("kept"));
        kept.increment(1);
        IGNORE_HANDLES.with(|c| c.set(true));
        pass_idle(&r);
        IGNORE_HANDLES.with(|c| c.set(false));
        assert_eq!((r.keys(), evicted(&r)), (0, 1));
        kept.increment(2); // the owner's word, not swept yet
        r.flush();
        assert_eq!(total.load(Relaxed), 3);
        std::thread::scope(|s| {
            let sent = kept.clone();
            s.spawn(move || sent.increment(4)); // through the entry's counter
        });
        // The owner's next `counter!` sweeps: its handle is retired, the
        // key registered again.
        ::metrics::with_local_recorder(&r, || ::metrics::counter!("kept").increment(8));
        kept.increment(16); // retired: through the old entry's counter
        r.flush();
        assert_eq!(total.load(Relaxed), 31);
        assert_eq!(evicted(&r), 1, "freed while a handle is kept");
        drop(kept);
        r.flush();
        assert_eq!(evicted(&r), 0, "kept after its last handle went");
        assert_eq!(total.load(Relaxed), 31);
    }

    /// Passes that evict the key whenever they can (every key is idle to
    /// them, kept handles ignored) race two threads counting through
    /// `counter!` in bursts and pauses: the inner total ends exact.
    #[test]
    fn evictions_racing_counter_calls_lose_nothing() {
        const ROUNDS: u64 = 200;
        const BURST: u64 = 100;
        for rough in [false, true] {
            let inner = Tally::default();
            let total = std::sync::Arc::clone(&inner.0);
            let layer = ShardedLayer::new()
                .with_interval(Duration::from_secs(3600))
                .evict_idle_after(Duration::ZERO);
            let r = if rough { layer.rough() } else { layer }.wrap(inner);
            let done = std::sync::atomic::AtomicUsize::new(0);
            let passes = std::thread::scope(|s| {
                for t in 0..2u64 {
                    let (r, done) = (&r, &done);
                    s.spawn(move || {
                        ::metrics::with_local_recorder(r, || {
                            for round in 0..ROUNDS {
                                for _ in 0..BURST {
                                    ::metrics::counter!("raced").increment(1);
                                }
                                if (round + t) % 3 == 0 {
                                    std::thread::yield_now();
                                }
                                if round == ROUNDS / 2 {
                                    // Not done before a pass has evicted.
                                    let deadline = Instant::now() + Duration::from_secs(10);
                                    while r.shared.evictions.load(Relaxed) == 0 {
                                        assert!(Instant::now() < deadline, "no eviction");
                                        std::thread::yield_now();
                                    }
                                }
                            }
                        });
                        done.fetch_add(1, Relaxed);
                    });
                }
                IGNORE_HANDLES.with(|c| c.set(true));
                let mut passes = 0u64;
                while done.load(Relaxed) < 2 {
                    pass_idle(&r);
                    passes += 1;
                }
                IGNORE_HANDLES.with(|c| c.set(false));
                passes
            });
            // The threads' caches are gone only after their destructors.
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                r.flush();
                if evicted(&r) == 0 || Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(passes > 0);
            assert_eq!(total.load(Relaxed), 2 * ROUNDS * BURST, "rough: {rough}");
            assert_eq!(
                evicted(&r),
                0,
                "evicted entries kept after every handle went"
            );
        }
    }

    /// An inner recorder whose histograms count the values recorded.
    #[derive(Default)]
    struct Records(std::sync::Arc<Values>);

    #[derive(Default)]
    struct Values(AtomicU64Std);

    impl ::metrics::HistogramFn for Values {
        fn record(&self, _: f64) {
            self.0.fetch_add(1, Relaxed);
        }
    }

    impl Recorder for Records {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> ::metrics::Counter {
            ::metrics::Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(std::sync::Arc::clone(&self.0))
        }
    }

    /// Histogram keys: an idle key with no handle kept is folded and freed
    /// at once; a kept handle keeps its key; one recorded again after its
    /// eviction is registered again. Every record is folded once.
    #[test]
    fn idle_histogram_keys_are_evicted_unless_a_handle_is_kept() {
        let inner = Records::default();
        let records = std::sync::Arc::clone(&inner.0);
        let r = ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .evict_idle_after(Duration::from_secs(60))
            .wrap(inner);
        let kept = ::metrics::with_local_recorder(&r, || {
            ::metrics::histogram!("gone").record(1.0);
            ::metrics::histogram!("gone").record(2.0);
            ::metrics::histogram!("kept")
        });
        kept.record(3.0);
        r.shared.pass(Instant::now());
        assert_eq!(
            r.shared.histograms.keys(),
            2,
            "evicted before its idle time"
        );
        pass_idle(&r);
        assert_eq!(r.shared.histograms.keys(), 1, "only the kept key stays");
        assert_eq!(r.shared.histograms.evicted(), 0, "freed at once");
        assert_eq!(records.0.load(Relaxed), 3);
        ::metrics::with_local_recorder(&r, || ::metrics::histogram!("gone").record(4.0));
        kept.record(5.0);
        r.flush();
        assert_eq!(r.shared.histograms.keys(), 2);
        assert_eq!(records.0.load(Relaxed), 5);
    }

    /// A tally inner recorder: every key's counter is one shared word.
    #[derive(Default)]
    struct Tally(std::sync::Arc<std::sync::atomic::AtomicU64>);

    impl Recorder for Tally {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> ::metrics::Counter {
            ::metrics::Counter::from_arc(std::sync::Arc::clone(&self.0))
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    fn owned_handles(r: &ShardedRecorder<Tally>) -> usize {
        lock(&r.shared.entries)
            .values()
            .map(|e| lock(&e.fold).locals.len())
            .sum()
    }

    /// Threads that come and go leave no owned handle behind once a fold
    /// has taken their last counts: memory follows the live threads.
    #[test]
    fn exited_threads_owned_handles_are_folded_then_dropped() {
        let inner = Tally::default();
        let total = std::sync::Arc::clone(&inner.0);
        let r = ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .wrap(inner);
        for _ in 0..20 {
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        ::metrics::with_local_recorder(&r, || {
                            for _ in 0..100 {
                                ::metrics::counter!("churn", "k" => "v").increment(1);
                            }
                        });
                    });
                }
            });
        }
        // A scope's join can return before the threads' caches are gone;
        // the caches go with the thread-local destructors, just after.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            r.flush();
            if owned_handles(&r) == 0 || std::time::Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(owned_handles(&r), 0, "handles of exited threads kept");
        assert_eq!(total.load(std::sync::atomic::Ordering::Relaxed), 4000);
    }

    /// The owner counts in its handle's own word (no locked add), and a fold
    /// moves that word's growth, once.
    #[test]
    fn the_owner_counts_in_its_own_word_and_folds_move_it_once() {
        let inner = Tally::default();
        let total = std::sync::Arc::clone(&inner.0);
        let r = ShardedLayer::new()
            .with_interval(Duration::from_secs(3600))
            .wrap(inner);
        let meta = Metadata::new("t", ::metrics::Level::INFO, None);
        let key = Key::from_name("own");
        let h = r.register_counter(&key, &meta);
        h.increment(5);
        let word = {
            let entries = lock(&r.shared.entries);
            let e = entries.get(&key).expect("registered");
            let folded = lock(&e.fold);
            folded.locals[0].0 .0.own.load(Ordering::Relaxed)
        };
        assert_eq!(word, 5, "the owner's increment is in its own word");
        r.flush();
        r.flush();
        assert_eq!(total.load(std::sync::atomic::Ordering::Relaxed), 5);
        h.increment(2);
        r.flush();
        assert_eq!(total.load(std::sync::atomic::Ordering::Relaxed), 7);
    }
}
