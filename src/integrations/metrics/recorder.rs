//! [`ShardedRecorder`]: the recorder the layer builds (`ShardedLayer::wrap`
//! and the `metrics_util` `Layer` impl are here, above the settings in
//! `layer.rs`). It registers keys into its [`KeyTable`] (`table.rs`: the
//! key maps and the passes over them), which it shares with its background
//! thread and flush handles, and hands out each thread's own handles
//! (`cache.rs`).
//!
//! Protocol (maintainers' notes). Locks order everything, beyond the
//! counters' own atomics, the owned handles' words (`entry.rs`) and
//! eviction's flag and count (`evict.rs`, which also has the lock order).
//!
//! * Registration inserts into `KeyTable::entries` (`table.rs`).
//! * The background thread is a `worker::Worker` (src/worker.rs): it owns
//!   the stop flag, the wait and the join.
//! * `absolute` on a key folds it, then calls the inner `absolute`, under
//!   the key's fold lock.

use super::cache;
use super::entry::{hand_on, Backing, Entry, Local};
use super::handle::FlushHandle;
use super::layer::ShardedLayer;
use super::table::{CounterEntry, KeyTable, Registered, Registrar};
use crate::primitive::sync::{lock, Arc};
use crate::unwind::FirstPanic;
use crate::worker::Worker;
use ::metrics::{
    CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use metrics_util::layers::Layer;
use std::fmt;
use std::time::{Duration, Instant};

impl CounterFn for CounterEntry {
    #[inline]
    fn increment(&self, value: u64) {
        self.add(value);
    }

    /// Folds this key's delta, then passes `absolute` to the inner counter,
    /// under the fold lock: the inner counter sees every increment taken so
    /// far before it sees `absolute`.
    fn absolute(&self, value: u64) {
        let Some(held) = super::entry::fold_lock(std::ptr::from_ref(self).cast(), &self.fold)
        else {
            // From inside a fold (the recorder underneath setting a key):
            // of this key, whose lock is this thread's, or of another while
            // this one's is taken. This key's fold passes it on.
            self.defer_absolute(value);
            return;
        };
        let mut held = self.fold_locked(held);
        // As a fold's delta: after a quiet pass, registered again first (a
        // panic reaches the caller, with the renewal still due).
        hand_on(
            std::ptr::from_ref(self).cast(),
            &mut *held,
            |i| i.handle.absolute(value),
            || {},
        );
        held.moved = true;
    }
}

impl CounterFn for Local<Registered<::metrics::Counter>> {
    #[inline]
    fn increment(&self, value: u64) {
        Local::increment(self, value);
    }

    fn absolute(&self, value: u64) {
        self.entry().absolute(value);
    }
}

/// A recorder whose counters are shardcount [`Counter`]s, folded into the
/// inner recorder's counters every interval; see [the module
/// docs](super). Build it with [`ShardedLayer`] or [`new`](Self::new).
/// The inner recorder must be `Send + Sync + 'static` (every exporter is):
/// the background thread registers quiet keys in it again.
///
/// Dropping it stops its background thread and flushes. A recorder
/// installed with `metrics::set_global_recorder` is never dropped: call
/// [`FlushHandle::flush`] before the last scrape or at shutdown.
/// Increments made through `metrics::Counter` handles after the recorder
/// was dropped are not folded anywhere.
///
/// If the recorder underneath panics in a fold (registering a key, or
/// taking a delta or records), every other key is still folded, what the
/// panicking call was handed goes back to its key for the next fold, and
/// then the panic goes on: from [`flush`](Self::flush), from the
/// background pass (which the next pass follows), or from the drop, unless
/// the thread is already unwinding.
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
///
/// [`Counter`]: crate::Counter
pub struct ShardedRecorder<R> {
    inner: Arc<R>,
    pub(super) shared: Arc<KeyTable>,
    layer: ShardedLayer,
    worker: Worker,
}

impl<R: Recorder + Send + Sync + 'static> ShardedRecorder<R> {
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

// The layer's settings (layer.rs) lie below the recorder built from them:
// the builders are here.
impl ShardedLayer {
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
    pub fn wrap<R: Recorder + Send + Sync + 'static>(self, inner: R) -> ShardedRecorder<R> {
        Layer::layer(&self, inner)
    }
}

impl<R: Recorder + Send + Sync + 'static> Layer<R> for ShardedLayer {
    type Output = ShardedRecorder<R>;

    fn layer(&self, inner: R) -> ShardedRecorder<R> {
        ShardedRecorder::build(inner, *self)
    }
}

impl<R: Recorder + Send + Sync + 'static> ShardedRecorder<R> {
    pub(super) fn build(inner: R, layer: ShardedLayer) -> Self {
        let inner = Arc::new(inner);
        let shared = Arc::new(KeyTable::new(
            layer.interval(),
            layer.idle_eviction(),
            Arc::downgrade(&inner) as std::sync::Weak<dyn Registrar>,
        ));
        let worker = Worker::spawn("shardcount-metrics", layer.interval(), {
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
}

impl<R> ShardedRecorder<R> {
    /// Moves every key's delta into the inner recorder now. When it returns,
    /// the inner counters include every increment that happened-before the
    /// call.
    ///
    /// # Panics
    ///
    /// If the inner recorder panics (registering a key, or taking a delta
    /// or a record): after every other key is folded. The delta or records
    /// it was handed when it panicked go back to the key, and a later flush
    /// or pass hands them on: nothing is lost.
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
        FlushHandle::new(Arc::clone(&self.shared))
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
        self.layer.interval()
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
        self.layer.idle_eviction()
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
        self.shared.keys()
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
        let entries: Vec<Arc<CounterEntry>> =
            lock(&self.shared.entries).values().cloned().collect();
        entries
            .iter()
            .map(|e| match e.backing() {
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
    fn entry(&self, key: &Key, metadata: &Metadata<'_>) -> Arc<CounterEntry> {
        if let Some(e) = lock(&self.shared.entries).get(key) {
            return Arc::clone(e);
        }
        // Registered without our lock held, in case the inner recorder
        // records through the facade itself; a racing registration of the
        // same key wins and ours is dropped (the inner recorder hands both
        // the same counter).
        let inner = self.inner.register_counter(key, metadata);
        let inner = Registered::new(inner, key, metadata, &self.shared.inner);
        let mut entries = lock(&self.shared.entries);
        let e = entries
            .entry(key.clone())
            .or_insert_with(|| Arc::new(Entry::new(self.layer.is_rough(), inner)));
        Arc::clone(e)
    }

    /// A cache miss: sweep the thread's cache if keys were evicted since
    /// its last sweep, then find or make the entry, and cache a handle of
    /// this thread's own for it.
    #[cold]
    #[inline(never)]
    fn register_slow(&self, key: &Key, metadata: &Metadata<'_>) -> ::metrics::Counter {
        // Read before the entry is looked up: an eviction after this read
        // moves the count past the value a new cache starts with.
        let passes = self.shared.evicted.passes();
        if let Some(local) = cache::swept_hit(&self.shared, key, passes) {
            return ::metrics::Counter::from_arc(local);
        }
        let local = loop {
            if let Some(local) = Entry::list(&self.entry(key, metadata)) {
                break local;
            }
        };
        if local.is_retired() {
            // Registered from inside the key's own fold: unlisted, and
            // uncached, so it never holds the key in the map.
            return ::metrics::Counter::from_arc(local);
        }
        if !cache::keep(&self.shared, key, &local, passes) {
            // Listed already: the next fold takes its word and drops it.
            local.retire();
        }
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
    ///
    /// [`Counter`]: crate::Counter
    #[inline]
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> ::metrics::Counter {
        match cache::hit(&self.shared, key) {
            Some(local) => ::metrics::Counter::from_arc(local),
            None => self.register_slow(key, metadata),
        }
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.inner.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.shared
            .histograms
            .handle(&*self.inner, &self.shared.inner, key, metadata)
    }
}

impl<R> Drop for ShardedRecorder<R> {
    /// Stops the background thread, waits for it, and flushes once more.
    ///
    /// A flush that panics (the recorder underneath did) still lets go of
    /// the handles, and its panic goes on unless the thread is already
    /// unwinding (a second panic there would abort the process).
    fn drop(&mut self) {
        self.worker.stop();
        let mut panics = FirstPanic::default();
        panics.run(|| self.shared.flush());
        // An entry holds its owned handles and each handle its entry: let
        // go of the handles, so both are freed with the threads' caches.
        for e in lock(&self.shared.entries).values() {
            e.let_go_of_handles();
        }
        self.shared.evicted.let_go_of_handles();
        if !std::thread::panicking() {
            panics.finish();
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
            .field("interval", &self.layer.interval())
            .field("rough", &self.layer.is_rough())
            .field("evict_idle_after", &self.layer.idle_eviction())
            .field("keys", &self.keys())
            .finish()
    }
}
