//! [`ShardedLayer`]: the layer's settings (interval, backing, idle
//! eviction). The recorder above builds from them (`recorder.rs`:
//! [`ShardedLayer::wrap`] and the `metrics_util` `Layer` impl), so nothing
//! here names it.

use crate::worker;
use std::time::Duration;

/// A layer that gives the recorder under it sharded counter increments
/// (also a `metrics_util` `Layer`); see [the module docs](super).
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

    /// Backs each key with a [`RoughCounter`](crate::RoughCounter) instead
    /// of a [`Counter`](crate::Counter).
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
    ///
    /// [`ShardedRecorder`]: super::ShardedRecorder
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
    /// every pass and [flush](super::ShardedRecorder::flush).
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
    /// Over an exporter that forgets idle series (the Prometheus
    /// exporter's `idle_timeout`), with or without this: a key's first
    /// fold after a pass that saw it quiet registers the key again in the
    /// inner recorder before it hands over the count, so a series the
    /// exporter forgot comes back (from the counts since), as it would
    /// without the layer. Keep the exporter's idle time well above the
    /// [interval](Self::with_interval): a key counted in every interval
    /// is never quiet for a pass, so one the exporter forgets between two
    /// folds is not registered again.
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

    /// Whether keys are backed by [`RoughCounter`](crate::RoughCounter)s
    /// ([`rough`](Self::rough)).
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
