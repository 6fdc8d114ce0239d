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
//! * `increment` adds to that counter (a `Counter` shards once threads
//!   contend; a `RoughCounter` adds to the thread's own slot);
//! * a background thread moves each key's delta into the inner recorder's
//!   counter every interval, so nothing is lost or counted twice: a
//!   `Counter`'s delta is what [`Counter::take`] returns; a `RoughCounter`'s
//!   is its exact [`sum`](RoughCounter::sum) minus the sum folded last time.
//!   [`ShardedRecorder::flush`] (or a [`FlushHandle`]) does the same on
//!   demand and so does dropping the recorder. After a flush that follows
//!   every increment, the exporter's counts are exact;
//! * each histogram key gets one sharded [`Histogram`](crate::Histogram)
//!   (see below), folded into the inner recorder's histogram on the same
//!   interval and flushes;
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
// No atomics of its own beyond the counters': locks order everything.
//
// * `Shared::entries: Mutex<map>` maps each key to its `Entry` (the
//   shardcount counter, the inner recorder's counter handle and a fold
//   lock). Registration inserts; nothing removes until the recorder goes.
// * `Entry::fold: Mutex<u64>` is held while a key's delta is taken and
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
//   own, so `counter!` on a known key takes no lock and clones only a
//   reference count that no other thread touches. A cache belongs to one
//   recorder, identified by a `Weak` reference to its shared state (the
//   allocation cannot be reused while the `Weak` lives); caches of dropped
//   recorders are cleared at the thread's next miss.
// * `absolute` on a bare counter takes one of 64 process-wide locks, picked
//   by the counter's address (see `raise_to`).

use crate::contract::{Count, Kind};
use crate::primitive::const_thread_local;
use crate::primitive::sync::{lock, Arc, Mutex, Weak};
use crate::worker::{self, Worker};
use crate::{Counter, RoughCounter};
use ::metrics::{
    CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use crossbeam_utils::CachePadded;
use metrics_util::layers::Layer;
use metrics_util::KeyHasher;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasherDefault;
use std::time::Duration;

/// Keys hash to the hash they carry (`Key` writes exactly one `u64`).
type KeyMap<V> = HashMap<Key, V, BuildHasherDefault<KeyHasher>>;

mod histogram;

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

    /// Backs each key with a [`RoughCounter`] instead of a [`Counter`]:
    /// an increment is then a store to the thread's own slot, with no locked
    /// instruction, for the hottest counters. The price is memory: a
    /// 128-byte slot per thread that has used the key (a `Counter` is 16
    /// bytes until threads contend on it), and a fold reads every slot.
    /// Exactness after a flush is the same.
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

/// One counter key: its shardcount counter and the inner recorder's handle.
struct Entry {
    counter: Backing,
    inner: ::metrics::Counter,
    /// Held while a delta moves from `counter` to `inner`; the sum folded so
    /// far, for a `RoughCounter` (protocol notes at the top).
    fold: Mutex<u64>,
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
    fn fold(&self) -> crate::primitive::sync::MutexGuard<'_, u64> {
        let mut folded = lock(&self.fold);
        let delta = match &self.counter {
            Backing::Exact(c) => c.take(),
            Backing::Rough(c) => {
                let sum = c.sum();
                let delta = sum.wrapping_sub(*folded);
                *folded = sum;
                delta
            }
        };
        if delta != 0 {
            self.inner.increment(delta);
        }
        folded
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

/// A thread's own handle to an entry: cloning it (in `counter!`) touches a
/// reference count no other thread does. Padded, so that the reference
/// counts of two threads' handles never share a cache line.
struct Local(CachePadded<Arc<Entry>>);

impl CounterFn for Local {
    #[inline]
    fn increment(&self, value: u64) {
        self.0.add(value);
    }

    fn absolute(&self, value: u64) {
        self.0.absolute(value);
    }
}

/// What a recorder, its background thread and its flush handles share.
struct Shared {
    entries: Mutex<KeyMap<Arc<Entry>>>,
    histograms: histogram::Folds,
}

impl Shared {
    /// Folds every key. Copies the list first, so registration never waits
    /// for a pass.
    fn flush(&self) {
        let entries: Vec<Arc<Entry>> = lock(&self.entries).values().cloned().collect();
        for e in &entries {
            drop(e.fold());
        }
        self.histograms.flush();
    }
}

/// One thread's handles for one recorder.
struct Cache {
    owner: Weak<Shared>,
    handles: KeyMap<Arc<Local>>,
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
            histograms: histogram::Folds::default(),
        });
        let worker = Worker::spawn("shardcount-metrics", layer.interval, {
            let shared = Arc::clone(&shared);
            move || shared.flush()
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

    /// How many counter keys have been registered. A diagnostic.
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
                fold: Mutex::new(0),
            })
        });
        Arc::clone(e)
    }

    /// A cache miss: find or make the entry, and cache a handle of this
    /// thread's own for it.
    #[cold]
    #[inline(never)]
    fn register_slow(&self, key: &Key, metadata: &Metadata<'_>) -> ::metrics::Counter {
        let entry = self.entry(key, metadata);
        let me = Arc::as_ptr(&self.shared);
        let local = Arc::new(Local(CachePadded::new(entry)));
        // Not cached when the thread-local is gone (thread exit) or already
        // borrowed (a registration from inside one): the handle still
        // counts, it is only not reused.
        let _ = CACHES.try_with(|caches| {
            let Ok(mut caches) = caches.try_borrow_mut() else {
                return;
            };
            caches.retain(|c| c.owner.strong_count() > 0);
            let i = match caches.iter().position(|c| c.owner.as_ptr() == me) {
                Some(i) => i,
                None => {
                    caches.push(Cache {
                        owner: Arc::downgrade(&self.shared),
                        handles: KeyMap::default(),
                    });
                    caches.len() - 1
                }
            };
            caches[i].handles.insert(key.clone(), Arc::clone(&local));
        });
        ::metrics::Counter::from_arc(local)
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
        let me = Arc::as_ptr(&self.shared);
        let hit = CACHES
            .try_with(|caches| {
                let caches = caches.try_borrow().ok()?;
                let cache = caches.iter().find(|c| c.owner.as_ptr() == me)?;
                cache.handles.get(key).cloned()
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
    }
}

impl<R> fmt::Debug for ShardedRecorder<R> {
    /// Shows the interval, the backing and the number of keys.
    ///
    /// ```
    /// let r = shardcount::integrations::metrics::ShardedRecorder::new(
    ///     metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder(),
    /// );
    /// assert_eq!(format!("{r:?}"), "ShardedRecorder { interval: 100ms, rough: false, keys: 0 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedRecorder")
            .field("interval", &self.layer.interval)
            .field("rough", &self.layer.rough)
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
