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
//!   is its exact [`sum`](crate::RoughCounter::sum) minus the sum folded last time;
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
//! * a key quiet for a pass is registered again in the inner recorder
//!   before its next count is handed over, so an exporter that forgot the
//!   idle series (`idle_timeout`) shows it again; each key keeps its name,
//!   labels and metadata for that;
//! * each histogram key gets one sharded [`Histogram`](crate::Histogram)
//!   (see below), folded into the inner recorder's histogram on the same
//!   interval and flushes, and evicted as counter keys are;
//! * gauges and descriptions go straight to the inner recorder;
//! * the inner recorder may count its own work through the facade (a
//!   `counter!`, `absolute` or `histogram!` call from inside the calls the
//!   layer makes on its handles, on any key): such a call never deadlocks.
//!   On the key being folded, or on a key another thread has been folding
//!   for 50 ms (it may be waiting for this one; one such wait per call
//!   the layer makes into the recorder), it leaves what it records
//!   to that key's fold in progress or its next one, which hands on the
//!   increments counted before an `absolute` first; increments made right
//!   after such an `absolute` may then reach the inner counter before it.
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

//!
//! [`Counter`]: crate::Counter
//! [`Counter::take`]: crate::Counter::take
//! [`RoughCounter`]: crate::RoughCounter
//! [`CounterFn`]: ::metrics::CounterFn

// One concept a file; each has its maintainers' notes. Imports point down
// only (issue 48): key, entry, evict, histogram, layer, absolute, publish
// at the bottom; table above them; cache and handle above the table;
// recorder above those; `tests` on top. Loom builds only `entry` and
// `evict` (src/lib.rs), which name no `metrics` type.
mod absolute;
mod cache;
mod entry;
mod evict;
mod handle;
mod histogram;
mod key;
mod layer;
mod publish;
mod recorder;
mod table;
#[cfg(all(test, not(shardcount_loom)))]
mod tests;

pub use handle::FlushHandle;
pub use histogram::HistogramReplay;
pub use layer::ShardedLayer;
pub use publish::publish;
pub use recorder::ShardedRecorder;
