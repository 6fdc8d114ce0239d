//! `Exporter`: the background thread that reads sources and delivers
//! batches, and `flush` for shutdown.
//!
//! # Protocol
//!
//! No atomics of its own. Two mutexes:
//!
//! * `ctl` (short holds only): sources registered but not yet picked up,
//!   and the published [`ExportStats`]. The handle's `register`, `stats`,
//!   `pending` and `delivered` take only this lock, so they never wait for
//!   the network.
//! * `engine`: the cursors, `pending`, the frozen batches, the sink and the
//!   back-off. Whoever runs a pass holds it for the pass, network calls
//!   included: the thread, or `flush`. A pass never takes `ctl` while
//!   holding it except briefly to pick up sources and publish stats (lock
//!   order: `engine`, then `ctl`).
//!
//! The thread is a `worker::Worker` (src/worker.rs), whose own lock is
//! never held during a pass, so it is ordered with neither of these. Each
//! pass returns the next wait: the interval, or the back-off after a failed
//! delivery. Dropping the handle stops the worker and joins it, waiting for
//! a pass in progress (bounded by the sink's network timeouts). Counters
//! are read with their ordinary `sum()`; no add path and no fold lock is
//! involved.

use super::register::Registered;
use super::sink::{Batch, Outcome, Sink, SinkError, WriterId};
use super::source::{Source, RESERVED_PREFIX};
use crate::contract::{CountFamily, CountRef};
use crate::primitive::sync::{lock, Arc, Mutex};
use crate::unwind::FirstPanic;
use crate::worker::{self, Worker};
use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

/// How an [`Exporter`] batches and paces its deliveries.
///
/// ```
/// use shardcount::export::ExportConfig;
/// let c = ExportConfig::default();
/// assert_eq!((c.batch_keys, c.pipeline), (1000, 8));
/// ```
#[derive(Clone, Debug)]
pub struct ExportConfig {
    /// Time between passes of the background thread. Any interval below
    /// 1 ms, zero included, runs every 1 ms, as every background thread of
    /// this crate does.
    ///
    /// ```
    /// use shardcount::export::{ExportConfig, Exporter, MemorySink};
    /// use shardcount::RoughCounter;
    /// use std::time::Duration;
    ///
    /// static C: RoughCounter = RoughCounter::new();
    /// let sink = MemorySink::new();
    /// let config = ExportConfig { interval: Duration::ZERO, ..ExportConfig::default() };
    /// let exporter = Exporter::with_config(sink.clone(), config); // every 1 ms
    /// exporter.register("c", &C);
    /// C.add(2);
    /// while sink.get("c") != 2 {
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// ```
    pub interval: Duration,
    /// At most this many keys per batch (a batch is one script call in
    /// Redis, atomic, so it holds the server for its duration).
    pub batch_keys: usize,
    /// At most this many batches per delivery (pipelined in one round trip).
    pub pipeline: usize,
    /// First back-off after a failed delivery; it doubles (with jitter) up
    /// to `max_backoff`. A back-off below 1 ms waits 1 ms, as an interval
    /// does.
    pub min_backoff: Duration,
    /// The longest back-off.
    pub max_backoff: Duration,
    /// How long confirmed batches are kept to be sent again if the sink
    /// turns out to have lost them (a gap), not counting time while
    /// deliveries fail (the sink down, restarting, unreachable, and the
    /// back-off after each failure). Default 3 s: Redis with
    /// `appendfsync everysec` may confirm writes it has not yet written to
    /// its AOF when a background fsync is slow (it postpones the write for
    /// up to 2 s), and a `kill -9` then loses them.
    pub retain: Duration,
}

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            interval: Duration::from_millis(100),
            batch_keys: 1000,
            pipeline: 8,
            min_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(5),
            retain: Duration::from_secs(3),
        }
    }
}

/// Numbers to export about an [`Exporter`] (counts are sums of delta
/// magnitudes: a delta of +5 is 5 counts).
///
/// ```
/// use shardcount::export::{Exporter, MemorySink};
/// let e = Exporter::new(MemorySink::new(), std::time::Duration::from_secs(1));
/// let s = e.stats();
/// assert_eq!((s.delivered, s.pending, s.pending_keys, s.errors), (0, 0, 0, 0));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Counts the sink confirmed (applied now or before).
    pub delivered: u64,
    /// Counts read from sources and not yet confirmed (frozen or pending).
    pub pending: u64,
    /// Distinct keys with pending counts, frozen batches included (a key
    /// both frozen and pending again counts once).
    pub pending_keys: usize,
    /// Batches the sink confirmed.
    pub batches: u64,
    /// Batches the sink answered as already applied (resends).
    pub duplicates: u64,
    /// Deliveries that failed as a whole (each is retried).
    pub errors: u64,
    /// Times the sink had lost confirmed batches (a gap). The exporter
    /// continues under a new writer id and sends the lost batches again
    /// from those it retained (see [`ExportConfig::retain`]).
    pub gaps: u64,
    /// Lost batches that were no longer retained when a gap showed them:
    /// their counts are missing from the sink for good.
    pub lost: u64,
    /// Counts dropped because the sink rejected their keys, or because
    /// their keys were reserved or could not be shown (see
    /// [`Exporter::register`]).
    pub rejected: u64,
    /// The last delivery error, if the last delivery failed.
    pub last_error: Option<String>,
    /// The current writer id.
    pub writer: Option<WriterId>,
}

/// What a [`flush`](Exporter::flush) delivered and what it could not.
///
/// ```
/// use shardcount::export::{Exporter, MemorySink};
/// use std::time::{Duration, Instant};
/// let e = Exporter::new(MemorySink::new(), Duration::from_secs(1));
/// let r = e.flush(Instant::now() + Duration::from_secs(1)).unwrap();
/// assert_eq!((r.delivered, r.undelivered, r.undelivered_keys), (0, 0, 0));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlushReport {
    /// Counts confirmed during the flush.
    pub delivered: u64,
    /// Counts still not confirmed when it returned.
    pub undelivered: u64,
    /// Distinct keys those counts belong to.
    pub undelivered_keys: usize,
}

/// A [`flush`](Exporter::flush) that reached its deadline with counts
/// undelivered. Its [`source`](std::error::Error::source) is the last
/// delivery error, when there was one.
///
/// ```
/// use shardcount::export::{Exporter, MemorySink};
/// use shardcount::RoughCounter;
/// use std::error::Error;
/// use std::time::{Duration, Instant};
///
/// static C: RoughCounter = RoughCounter::new();
/// let sink = MemorySink::new();
/// let e = Exporter::new(sink.clone(), Duration::from_secs(60));
/// e.register("c", &C);
/// C.add(1);
/// sink.set_down(true);
/// let err = e.flush(Instant::now() + Duration::from_millis(20)).unwrap_err();
/// assert_eq!(err.to_string(), "export flush: 1 counts over 1 keys undelivered");
/// assert_eq!(err.source().unwrap().to_string(), "MemorySink is down");
/// ```
#[derive(Debug)]
pub struct FlushError {
    /// What was and was not delivered.
    pub report: FlushReport,
    /// The last delivery error (`None` if the deadline came first).
    pub error: Option<SinkError>,
}

impl fmt::Display for FlushError {
    /// What is undelivered; the delivery error is the
    /// [`source`](std::error::Error::source), not repeated here.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "export flush: {} counts over {} keys undelivered",
            self.report.undelivered, self.report.undelivered_keys
        )
    }
}

impl std::error::Error for FlushError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.as_ref().map(|e| e as _)
    }
}

struct Ctl {
    new_sources: Vec<Box<dyn Source>>,
    stats: ExportStats,
}

/// One key of one source.
#[derive(Default)]
struct Cursor {
    /// The cumulative value already turned into deltas.
    shipped: u64,
    /// The value the read numbered `read` reported (the sum, if it
    /// reported the key more than once).
    seen: u64,
    read: u64,
}

struct Engine {
    sink: Box<dyn Sink>,
    config: ExportConfig,
    /// Each source with its cursors, by key.
    sources: Vec<(Box<dyn Source>, HashMap<String, Cursor>)>,
    /// How many reads `collect` has made: marks the cursors a read reported.
    reads: u64,
    /// Coalesced deltas not yet frozen.
    pending: HashMap<String, i64>,
    /// Frozen batches, in sequence order, not yet confirmed.
    frozen: Vec<Batch>,
    /// Confirmed batches of the current writer, oldest first, with when
    /// they were confirmed; kept for `config.retain` to repair a gap.
    retained: std::collections::VecDeque<(Instant, Batch)>,
    writer: WriterId,
    next_seq: u64,
    /// Consecutive failed deliveries (for the back-off).
    failures: u32,
    /// When the first of those failed: time the sink spends unreachable
    /// does not age the retained batches.
    failing_since: Option<Instant>,
    /// A cheap jitter source (xorshift), seeded from the writer id.
    rng: u64,
    stats: ExportStats,
}

struct Inner {
    ctl: Mutex<Ctl>,
    engine: Mutex<Engine>,
}

impl Inner {
    /// Locks the engine, marking the calling thread as holding it until
    /// the guard drops (so that a source or sink calling `flush` on the
    /// same exporter panics rather than waiting for itself).
    ///
    /// # Panics
    ///
    /// If the calling thread holds it already.
    #[track_caller]
    fn engine(&self) -> (std::sync::MutexGuard<'_, Engine>, Holding) {
        let me = std::ptr::from_ref(self);
        let outer = HOLDING.with(std::cell::Cell::get);
        assert!(
            outer != me,
            "shardcount: Exporter::flush from inside the same exporter's source or sink would wait for itself"
        );
        let engine = lock(&self.engine);
        HOLDING.with(|h| h.set(me));
        (engine, Holding(outer))
    }
}

std::thread_local! {
    /// The exporter whose engine the calling thread holds, if any.
    static HOLDING: std::cell::Cell<*const Inner> = const { std::cell::Cell::new(std::ptr::null()) };
}

/// Puts the calling thread's previous `HOLDING` back when dropped.
struct Holding(*const Inner);

impl Drop for Holding {
    fn drop(&mut self) {
        HOLDING.with(|h| h.set(self.0));
    }
}

/// A background thread that ships registered counters' deltas to a
/// [`Sink`] every interval, exactly once in effect (see the
/// [module docs](super)).
///
/// No network call is ever made on an add: adds go to the counters as
/// usual, and the thread reads them with `sum()`. Call
/// [`flush`](Self::flush) before shutting down; dropping the exporter
/// stops its thread without a final delivery.
///
/// ```
/// use shardcount::export::{Exporter, MemorySink};
/// use shardcount::RoughCounter;
/// use std::time::{Duration, Instant};
///
/// static HITS: RoughCounter = RoughCounter::new();
/// let sink = MemorySink::new();
/// let exporter = Exporter::new(sink.clone(), Duration::from_millis(5));
/// exporter.register("hits", &HITS);
/// HITS.add(3);
/// while sink.get("hits") != 3 {
///     std::thread::sleep(Duration::from_millis(1)); // the thread delivers
/// }
/// assert_eq!(exporter.pending(), 0);
/// ```
pub struct Exporter {
    inner: Arc<Inner>,
    /// Stops and joins the thread when the exporter is dropped.
    _worker: Worker,
}

impl Exporter {
    /// Starts an exporter delivering to `sink` every `interval`, with the
    /// other settings at their defaults. Any interval below 1 ms, zero
    /// included, runs every 1 ms ([`ExportConfig::interval`]).
    ///
    /// ```
    /// use shardcount::export::{Exporter, MemorySink};
    /// use std::time::Duration;
    /// let e = Exporter::new(MemorySink::new(), Duration::from_millis(50));
    /// assert!(e.stats().writer.is_some());
    /// let every_ms = Exporter::new(MemorySink::new(), Duration::ZERO);
    /// # drop(every_ms);
    /// ```
    #[must_use]
    pub fn new(sink: impl Sink, interval: Duration) -> Exporter {
        Exporter::with_config(
            sink,
            ExportConfig {
                interval,
                ..ExportConfig::default()
            },
        )
    }

    /// Starts an exporter with `config`.
    ///
    /// # Panics
    ///
    /// If `batch_keys` or `pipeline` is 0, or the thread cannot be spawned.
    /// (An `interval` below 1 ms is no error: it runs every 1 ms, see
    /// [`ExportConfig::interval`].)
    ///
    /// ```
    /// use shardcount::export::{ExportConfig, Exporter, MemorySink};
    /// let e = Exporter::with_config(
    ///     MemorySink::new(),
    ///     ExportConfig { batch_keys: 10, ..ExportConfig::default() },
    /// );
    /// # drop(e);
    /// ```
    #[must_use]
    pub fn with_config(sink: impl Sink, config: ExportConfig) -> Exporter {
        assert!(
            config.batch_keys > 0 && config.pipeline > 0,
            "shardcount: ExportConfig: batch_keys and pipeline must be at least 1"
        );
        let interval = config.interval;
        let writer = WriterId::random();
        let stats = ExportStats {
            writer: Some(writer),
            ..ExportStats::default()
        };
        let inner = Arc::new(Inner {
            ctl: Mutex::new(Ctl {
                new_sources: Vec::new(),
                stats: stats.clone(),
            }),
            engine: Mutex::new(Engine {
                sink: Box::new(sink),
                config,
                sources: Vec::new(),
                reads: 0,
                pending: HashMap::new(),
                frozen: Vec::new(),
                retained: std::collections::VecDeque::new(),
                writer,
                next_seq: 1,
                failures: 0,
                failing_since: None,
                rng: (writer.0 as u64) | 1,
                stats,
            }),
        });
        let worker = Worker::spawn_paced("shardcount-exporter", interval, {
            let inner = Arc::clone(&inner);
            move || pass(&inner)
        });
        Exporter {
            inner,
            _worker: worker,
        }
    }

    /// Exports `counter` under `key`: any counter type (anything that
    /// implements [`CountFamily`], so every
    /// [`Count`](crate::Count) too), held as a `&'static T` (a `static`,
    /// `local_counter!` statics included) or an `Arc<T>` (see [`CountRef`]).
    ///
    /// # Keys
    ///
    /// Each member is exported under `key` followed by its label
    /// (`format!("{key}{label}")`), and the sink adds its own prefix:
    ///
    /// * a single count ([`Counter`](crate::Counter),
    ///   [`RoughCounter`](crate::RoughCounter), ...) has one member with
    ///   the empty label: its key is `key`;
    /// * a [`CounterSet`](crate::CounterSet) has one per index:
    ///   `register("status_", set)` exports `status_0`, `status_1`, ...;
    /// * a [`CounterMap`](crate::CounterMap) has one per key, shown with
    ///   `Display`: `register("route:", map)` exports `route:/about`, ...;
    ///   keys created later are exported from their first read on. Its
    ///   overflow counter is not exported. A key whose `Display` returns
    ///   an error is not exported (not even the part it wrote): its counts
    ///   go to [`ExportStats::rejected`];
    /// * a [`LabelledCounter`](crate::LabelledCounter) has one per label
    ///   value, its texts comma-separated: `register("req:", family)` of a
    ///   `(Method, Status)` family exports `req:get,ok`, `req:post,ok`, ...
    ///
    /// A member's key is built in one buffer kept with the registration,
    /// so reading a member seen before allocates nothing.
    ///
    /// # Values
    ///
    /// Each member is read with the type's exact read (see
    /// [`Count`](crate::Count)); what it gained since the previous read is
    /// shipped, so the sink holds the value of the last read. Counts the
    /// counter had before registering are exported too. Registering two
    /// counters (or a member and a counter) under one key adds both into
    /// that key, and so do two members of one family whose labels print
    /// alike. A gauge ([`MaxCounter`](crate::MaxCounter),
    /// [`MinCounter`](crate::MinCounter), [`Stock`](crate::Stock)) is
    /// exported as its current value, wrapped into the sink's signed 64
    /// bits (a `MinCounter` with nothing recorded reads `u64::MAX`: `-1`);
    /// across a fleet the sink holds the sum of the processes' values.
    ///
    /// An `Arc` is let go of after its last read, once the exporter holds
    /// its only reference; a `static` is read for as long as the exporter
    /// runs.
    ///
    /// # Panics
    ///
    /// If `key` starts with [`RESERVED_PREFIX`] (`__`): such keys are
    /// reserved for sinks' own bookkeeping (e.g. the Redis sink's writers
    /// hash). For a family (`CounterSet`, `CounterMap`), also if `key` is
    /// `""` or `"_"`, as a member's label could then complete that prefix.
    /// The message names the key.
    ///
    /// ```
    /// use shardcount::export::{Exporter, MemorySink};
    /// use shardcount::{Counter, CounterMap, RoughCounter};
    /// use std::sync::Arc;
    /// use std::time::{Duration, Instant};
    ///
    /// static REQUESTS: Counter = Counter::new();
    /// let errors = Arc::new(RoughCounter::new());
    /// let routes: Arc<CounterMap<String>> = Arc::new(CounterMap::new());
    ///
    /// let sink = MemorySink::new();
    /// let e = Exporter::new(sink.clone(), Duration::from_secs(60));
    /// e.register("requests", &REQUESTS);
    /// e.register("errors", errors.clone());
    /// e.register("route:", routes.clone());
    ///
    /// REQUESTS.add(2);
    /// errors.inc();
    /// routes.add(&"/about".to_string(), 3);
    /// e.flush(Instant::now() + Duration::from_secs(5)).unwrap();
    /// assert_eq!(sink.get("requests"), 2);
    /// assert_eq!(sink.get("errors"), 1);
    /// assert_eq!(sink.get("route:/about"), 3);
    /// ```
    ///
    /// A borrowed counter does not compile: the exporter keeps what it
    /// reads, so it takes a `static` or an `Arc`.
    ///
    /// ```compile_fail
    /// use shardcount::export::{Exporter, MemorySink};
    /// let c = shardcount::Counter::new();
    /// let e = Exporter::new(MemorySink::new(), std::time::Duration::from_secs(60));
    /// e.register("c", &c); // `c` does not live long enough
    /// ```
    ///
    /// ```should_panic
    /// use shardcount::export::{Exporter, MemorySink};
    /// static C: shardcount::Counter = shardcount::Counter::new();
    /// let e = Exporter::new(MemorySink::new(), std::time::Duration::from_secs(60));
    /// e.register("__writers", &C); // panics: reserved
    /// ```
    #[track_caller]
    pub fn register<C>(&self, key: &str, counter: C)
    where
        C: CountRef,
        C::Target: CountFamily,
    {
        self.register_source(Registered::new(key, counter));
    }

    /// Exports a [`Source`] (e.g. a keyed counter family).
    ///
    /// ```
    /// use shardcount::export::{Exporter, MemorySink, Source};
    /// struct Five;
    /// impl Source for Five {
    ///     fn read(&self, f: &mut dyn FnMut(&str, u64)) { f("five", 5) }
    /// }
    /// let e = Exporter::new(MemorySink::new(), std::time::Duration::from_secs(60));
    /// e.register_source(Five);
    /// ```
    pub fn register_source(&self, source: impl Source) {
        lock(&self.inner.ctl).new_sources.push(Box::new(source));
    }

    /// The exporter's numbers as of its last pass.
    ///
    /// ```
    /// use shardcount::export::{Exporter, MemorySink};
    /// let e = Exporter::new(MemorySink::new(), std::time::Duration::from_secs(60));
    /// assert_eq!(e.stats().gaps, 0);
    /// ```
    #[must_use]
    pub fn stats(&self) -> ExportStats {
        lock(&self.inner.ctl).stats.clone()
    }

    /// Counts read from sources and not yet confirmed by the sink (as of the
    /// last pass). Bounded by the keys, not the adds: see
    /// [`ExportStats::pending_keys`].
    ///
    /// ```
    /// use shardcount::export::{Exporter, MemorySink};
    /// let e = Exporter::new(MemorySink::new(), std::time::Duration::from_secs(60));
    /// assert_eq!(e.pending(), 0);
    /// ```
    #[must_use]
    pub fn pending(&self) -> u64 {
        lock(&self.inner.ctl).stats.pending
    }

    /// Counts the sink has confirmed.
    ///
    /// ```
    /// use shardcount::export::{Exporter, MemorySink};
    /// let e = Exporter::new(MemorySink::new(), std::time::Duration::from_secs(60));
    /// assert_eq!(e.delivered(), 0);
    /// ```
    #[must_use]
    pub fn delivered(&self) -> u64 {
        lock(&self.inner.ctl).stats.delivered
    }

    /// Reads every source once more and delivers until nothing is pending
    /// or `deadline` passes, retrying failed deliveries with back-off. It
    /// always tries at least one delivery, even past the deadline. Waits
    /// first for a pass the thread is running (bounded by the sink's
    /// network timeouts; on a Redis Cluster, see the `redis_cluster`
    /// module's Timeouts), and a delivery in progress at the deadline is
    /// waited for too.
    ///
    /// # Errors
    ///
    /// [`FlushError`], with what could not be delivered, if counts remain
    /// at the deadline.
    ///
    /// # Panics
    ///
    /// If a source panics while it is read (a label whose `Display`
    /// panics, say): after the other sources' counts are delivered. That
    /// source's read is dropped, not half used, and it is read again at the
    /// next pass, so nothing it counted is lost.
    ///
    /// If called from inside this exporter's own source or sink (it would
    /// wait for itself).
    ///
    /// ```
    /// use shardcount::export::{Exporter, MemorySink};
    /// use shardcount::RoughCounter;
    /// use std::time::{Duration, Instant};
    /// let c = std::sync::Arc::new(RoughCounter::new());
    /// let sink = MemorySink::new();
    /// let e = Exporter::new(sink.clone(), Duration::from_secs(60));
    /// e.register("c", c.clone());
    /// c.add(4);
    /// sink.set_down(true);
    /// let err = e.flush(Instant::now() + Duration::from_millis(50)).unwrap_err();
    /// assert_eq!(err.report.undelivered, 4);
    /// sink.set_down(false);
    /// assert_eq!(e.flush(Instant::now() + Duration::from_secs(5)).unwrap().delivered, 4);
    /// ```
    pub fn flush(&self, deadline: Instant) -> Result<FlushReport, FlushError> {
        let (mut engine, holding) = self.inner.engine();
        let before = engine.stats.delivered;
        let panics = engine.collect(&self.inner);
        let result = self.deliver_until(&mut engine, before, deadline);
        drop(engine);
        drop(holding);
        panics.finish();
        result
    }

    /// `flush` after its read: delivers, retrying, until nothing is pending
    /// or `deadline` passes.
    fn deliver_until(
        &self,
        engine: &mut Engine,
        before: u64,
        deadline: Instant,
    ) -> Result<FlushReport, FlushError> {
        loop {
            let res = engine.deliver_all(Some(deadline));
            engine.publish(&self.inner);
            let report = FlushReport {
                // Saturating: a gap un-counts batches confirmed before
                // this flush until they are resent.
                delivered: engine.stats.delivered.saturating_sub(before),
                undelivered: engine.stats.pending,
                undelivered_keys: engine.stats.pending_keys,
            };
            match res {
                Ok(()) if report.undelivered == 0 => return Ok(report),
                Ok(()) => {
                    return Err(FlushError {
                        report,
                        error: None,
                    })
                }
                Err(e) => {
                    let wait = worker::effective(engine.backoff());
                    // Checked: a back-off of years (`max_backoff` near
                    // `Duration::MAX`) passes any deadline.
                    if Instant::now()
                        .checked_add(wait)
                        .is_none_or(|then| then >= deadline)
                    {
                        return Err(FlushError {
                            report,
                            error: Some(e),
                        });
                    }
                    std::thread::sleep(wait);
                }
            }
        }
    }
}

impl fmt::Debug for Exporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exporter")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// One pass of the thread: reads every source and delivers; returns the
/// wait before the next pass (the back-off after a failed delivery).
fn pass(inner: &Inner) -> Duration {
    let (mut engine, holding) = inner.engine();
    let panics = engine.collect(inner);
    let res = engine.deliver_all(None);
    engine.publish(inner);
    let wait = match res {
        Ok(()) => engine.config.interval,
        Err(_) => engine.backoff(),
    };
    drop(engine);
    drop(holding);
    // For the worker, which reports it and passes again later.
    panics.finish();
    wait
}

impl Engine {
    /// Picks up new sources, reads every source and coalesces the deltas
    /// into `pending`; lets go of sources that are no longer live (after
    /// this last read). A source whose read panics keeps its place, and
    /// nothing of that read is used: its cursors move only after a whole
    /// read, so the next read ships what this one missed. The other
    /// sources are read all the same; the first panic is returned.
    fn collect(&mut self, inner: &Inner) -> FirstPanic {
        let mut panics = FirstPanic::default();
        let new = std::mem::take(&mut lock(&inner.ctl).new_sources);
        self.sources
            .extend(new.into_iter().map(|s| (s, HashMap::new())));
        self.reads = self.reads.wrapping_add(1);
        let read = self.reads;
        let pending = &mut self.pending;
        let rejected = &mut self.stats.rejected;
        self.sources.retain_mut(|(source, cursors)| {
            let mut reserved = false;
            let whole = panics.run(|| {
                let live = source.is_live();
                // First the read: a key reported twice in one read (a family
                // whose labels print alike) is the sum of its values.
                source.read(&mut |key, value| {
                    // A lookup first: no allocation for a key seen before.
                    let cursor = match cursors.get_mut(key) {
                        Some(c) => c,
                        None => cursors.entry(key.to_owned()).or_default(),
                    };
                    reserved |= key.starts_with(RESERVED_PREFIX);
                    if cursor.read == read {
                        cursor.seen = cursor.seen.wrapping_add(value);
                    } else {
                        (cursor.read, cursor.seen) = (read, value);
                    }
                });
                live
            });
            let Some(live) = whole else {
                return true;
            };
            // A key a whole read left out is gone (a family's member
            // removed or evicted for good): what was shipped for it stays
            // in the sink, and if it comes back it starts from zero. Kept
            // when the read reported a reserved key: a label that failed
            // to print is still there under its own name.
            if !reserved {
                cursors.retain(|_, c| c.read == read);
            }
            // Then the deltas of the keys this read reported.
            for (key, cursor) in cursors.iter_mut().filter(|(_, c)| c.read == read) {
                let delta = cursor.seen.wrapping_sub(cursor.shipped) as i64;
                cursor.shipped = cursor.seen;
                if delta != 0 && key.starts_with(RESERVED_PREFIX) {
                    *rejected += delta.unsigned_abs();
                } else if delta != 0 {
                    match pending.get_mut(key) {
                        Some(p) => {
                            *p = p.wrapping_add(delta);
                            if *p == 0 {
                                pending.remove(key);
                            }
                        }
                        None => _ = pending.insert(key.clone(), delta),
                    }
                }
            }
            live
        });
        panics
    }

    /// Freezes batches from `pending` (when none are frozen) and delivers
    /// until nothing is pending, a delivery fails, or `deadline` passes.
    fn deliver_all(&mut self, deadline: Option<Instant>) -> Result<(), SinkError> {
        loop {
            if self.frozen.is_empty() {
                self.freeze();
            }
            if self.frozen.is_empty() {
                return Ok(());
            }
            // The deadline is checked after a delivery, so a flush whose
            // deadline passed while it read the sources still tries once
            // (and reports that try's error).
            // At most `pipeline` batches, also after a gap put the
            // retained ones back in front.
            let sent = self.frozen.len().min(self.config.pipeline.max(1));
            let settled = match self.sink.deliver(&self.frozen[..sent]) {
                Ok(outcomes) if outcomes.is_empty() || outcomes.len() > sent => {
                    Err(SinkError::new(format!(
                        "the sink answered {} outcomes for {sent} batches (1 to {sent} expected)",
                        outcomes.len()
                    )))
                }
                Ok(outcomes) => match self.settle(outcomes) {
                    true => Ok(()),
                    false => Err(SinkError::new(
                        "the sink rejected no key of the batch it refused".to_owned(),
                    )),
                },
                Err(e) => Err(e),
            };
            match settled {
                Ok(()) => {
                    self.failures = 0;
                    self.stats.last_error = None;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(());
                    }
                }
                Err(e) => {
                    self.failures = self.failures.saturating_add(1);
                    self.failing_since.get_or_insert_with(Instant::now);
                    self.stats.errors += 1;
                    self.stats.last_error = Some(e.to_string());
                    return Err(e);
                }
            }
        }
    }

    /// Moves up to `pipeline` batches of up to `batch_keys` keys from
    /// `pending` into `frozen`, numbered from `next_seq`.
    fn freeze(&mut self) {
        let (keys, pipeline) = (self.config.batch_keys, self.config.pipeline);
        let mut drain = self.pending.drain();
        for _ in 0..pipeline {
            let deltas: Vec<(String, i64)> = drain.by_ref().take(keys).collect();
            if deltas.is_empty() {
                break;
            }
            self.frozen
                .push(Batch::new(self.writer, self.next_seq, deltas));
            self.next_seq += 1;
        }
        // Keys beyond `pipeline` batches stay pending.
        let rest: Vec<_> = drain.collect();
        self.pending.extend(rest);
    }

    /// Applies the sink's answers: confirmed batches move from `frozen` to
    /// `retained`; at the first batch not applied, rejected keys are
    /// dropped or, for a gap, the writer starts over (`restart`). Batches
    /// after it stay as they are (their answers only follow from it).
    /// Returns whether anything moved: `false` only for a rejection that
    /// names no key of its batch (a sink breaking its contract, which
    /// would otherwise be resent for ever).
    fn settle(&mut self, outcomes: Vec<Outcome>) -> bool {
        let now = Instant::now();
        // The sink answers again: the time it did not counts against no
        // retained batch (a restart that loses confirmed writes often
        // takes longer than `retain`, and the gap shows only now).
        if let Some(since) = self.failing_since.take() {
            let outage = now.saturating_duration_since(since);
            for (confirmed, _) in &mut self.retained {
                *confirmed += outage;
            }
        }
        let mut gap = None;
        let mut moved = true;
        for outcome in outcomes {
            let Some(batch) = self.frozen.first_mut() else {
                break;
            };
            match outcome {
                Outcome::Applied | Outcome::Duplicate => {
                    if outcome == Outcome::Duplicate {
                        self.stats.duplicates += 1;
                    }
                    self.stats.delivered = self.stats.delivered.saturating_add(batch.magnitude());
                    self.stats.batches += 1;
                    let batch = self.frozen.remove(0);
                    self.retained.push_back((now, batch));
                }
                Outcome::Rejected { keys } => {
                    let before = batch.magnitude();
                    let len = batch.deltas.len();
                    batch.deltas.retain(|(k, _)| !keys.contains(k));
                    moved = batch.deltas.len() < len;
                    self.stats.rejected = self
                        .stats
                        .rejected
                        .saturating_add(before - batch.magnitude());
                    break;
                }
                Outcome::Gap { last } => {
                    gap = Some(last);
                    break;
                }
            }
        }
        if let Some(last) = gap {
            self.restart(last);
        }
        self.prune(now);
        moved
    }

    /// Lets go of confirmed batches `config.retain` old or older (all of
    /// them for a zero `retain`), in time the sink answered.
    fn prune(&mut self, now: Instant) {
        let retain = self.config.retain;
        while self
            .retained
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) >= retain)
        {
            self.retained.pop_front();
        }
    }

    /// The sink has the writer's batches up to `last` only, though it had
    /// confirmed later ones: put the retained batches after `last` back in
    /// front of the frozen ones (the lost ones that are no longer retained
    /// are counted in `lost`), and number everything from 1 under a new
    /// writer id. The old writer's batches after `last` are gone from the
    /// sink, so none of them can be applied twice.
    fn restart(&mut self, last: u64) {
        self.stats.gaps += 1;
        let first_frozen = self.frozen.first().map_or(self.next_seq, |b| b.seq);
        let mut resend: Vec<Batch> = Vec::new();
        for (_, b) in self.retained.drain(..) {
            if b.seq > last {
                self.stats.delivered = self.stats.delivered.saturating_sub(b.magnitude());
                self.stats.batches -= 1;
                resend.push(b);
            }
        }
        // Lost batches we no longer hold: last + 1 .. the first resent one.
        let held_from = resend.first().map_or(first_frozen, |b| b.seq);
        if held_from > last.saturating_add(1) {
            // Their content is gone; count what the sink had confirmed
            // (its magnitude is unknown here): the batches, not counts.
            self.stats.lost += held_from - (last + 1);
        }
        resend.append(&mut self.frozen);
        self.frozen = resend;
        self.writer = WriterId::random();
        self.stats.writer = Some(self.writer);
        let mut seq = 1;
        for b in &mut self.frozen {
            b.writer = self.writer;
            b.seq = seq;
            seq += 1;
        }
        self.next_seq = seq;
    }

    /// The next back-off: `min_backoff` doubled per consecutive failure, up
    /// to `max_backoff`, times a jitter factor in [0.5, 1).
    fn backoff(&mut self) -> Duration {
        let exp = self.failures.saturating_sub(1).min(20);
        let base = self
            .config
            .min_backoff
            .saturating_mul(1 << exp)
            .min(self.config.max_backoff);
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let jitter = 0.5 + (self.rng >> 11) as f64 / (1u64 << 53) as f64 / 2.0;
        base.mul_f64(jitter)
    }

    /// Recomputes the pending numbers and publishes the stats.
    fn publish(&mut self, inner: &Inner) {
        // Saturating, as `Batch::magnitude`.
        let frozen = self.frozen.iter().map(Batch::magnitude);
        let pending = self.pending.values().map(|d| d.unsigned_abs());
        self.stats.pending = frozen.chain(pending).fold(0u64, u64::saturating_add);
        // Distinct keys: a key may be frozen (even in several resent
        // batches) and pending again at once.
        let mut frozen_only = std::collections::HashSet::new();
        for b in &self.frozen {
            for (k, _) in &b.deltas {
                if !self.pending.contains_key(k) {
                    frozen_only.insert(k.as_str());
                }
            }
        }
        self.stats.pending_keys = self.pending.len() + frozen_only.len();
        lock(&inner.ctl).stats = self.stats.clone();
    }
}
