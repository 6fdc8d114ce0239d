//! The integrations against the crates' own counters, 2 pinned threads, as
//! paired figures (see `shardcount_harness::measure::Session`; no criterion
//! groups):
//!
//! * `counter!`-registered handle, `increment(1)` in a loop: the Prometheus
//!   exporter's own counter vs the same exporter under `ShardedLayer`, with
//!   `Counter` and with `RoughCounter` backing (and,
//!   for reference, a bare `Counter` / `RoughCounter` behind
//!   `metrics::Counter::from_arc`);
//! * `counter!("x", "k" => v).increment(1)` on every call (key lookup and
//!   label allocation each time): exporter vs exporter under the layer,
//!   and the layer against `metrics::NoopRecorder` (which stores nothing:
//!   the macro's own work) and against a recorder that only hands out a
//!   per-thread `Arc` handle (the least a recorder with live handles pays);
//! * `prometheus-client`'s `Counter` vs `Shared<Counter>`, both registered in
//!   a `Registry`, each run checked by encoding it.
//!
//! Every run uses a fresh recorder or registry and checks the exact total
//! through the exporter's rendering (after a flush) or the encoder.
//! `SHARDCOUNT_REPS` sets the repetitions (default 7),
//! `SHARDCOUNT_ONLY=<substring>` picks figures by title.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use shardcount::integrations::metrics::ShardedLayer;
use shardcount::integrations::prometheus_client::Shared;
use shardcount::{Counter, RoughCounter};
use shardcount_harness::measure::{opaque, run_threads, Figure, Ratio, Session};
use std::sync::Arc;
use std::time::Duration;

const THREADS: usize = 2;

/// The value of the unlabelled or labelled `series` in exposition text.
fn sample(text: &str, series: &str) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.parse::<f64>().expect("a number") as u64)
}

fn prometheus() -> (PrometheusRecorder, PrometheusHandle) {
    let r = PrometheusBuilder::new().build_recorder();
    let h = r.handle();
    (r, h)
}

/// `n` increments per thread through a handle each thread registers once
/// with `counter!`, under `recorder`; returns the wall time.
fn handle_loop(recorder: &(impl metrics::Recorder + Sync), n: u64) -> Duration {
    run_threads(THREADS, |_| {
        let c = metrics::with_local_recorder(recorder, || metrics::counter!("hits"));
        for _ in 0..n {
            c.increment(1);
            opaque();
        }
    })
}

/// `n` calls per thread of `counter!("hits", "k" => v).increment(1)`, the
/// same series on both threads, under `recorder`.
fn lookup_loop(recorder: &(impl metrics::Recorder + Sync), n: u64) -> Duration {
    run_threads(THREADS, |_| {
        // Not a literal: the label is built at run time on every call.
        let v: &'static str = std::hint::black_box("v");
        metrics::with_local_recorder(recorder, || {
            for _ in 0..n {
                metrics::counter!("hits", "k" => v).increment(1);
                opaque();
            }
        });
    })
}

/// The least any recorder that hands out live handles pays per
/// `counter!` call: no lookup, no count, only the clone and drop of a
/// reference count that no other thread touches (`metrics::Counter` is an
/// `Arc`), as this layer's per-thread handles are.
struct LiveHandleFloor;

/// Counts nothing.
struct Nothing;

impl metrics::CounterFn for Nothing {
    fn increment(&self, _: u64) {}
    fn absolute(&self, _: u64) {}
}

thread_local! {
    static FLOOR_HANDLE: Arc<Nothing> = Arc::new(Nothing);
}

impl metrics::Recorder for LiveHandleFloor {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::from_arc(FLOOR_HANDLE.with(Arc::clone))
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

fn check(handle: &PrometheusHandle, series: &str, n: u64, what: &str) {
    assert_eq!(
        sample(&handle.render(), series),
        THREADS as u64 * n,
        "{what}: lost or extra counts"
    );
}

fn plain(n: u64, run: fn(&PrometheusRecorder, u64) -> Duration, series: &str) -> Duration {
    let (r, h) = prometheus();
    let t = run(&r, n);
    check(&h, series, n, "exporter");
    t
}

fn layered<F>(layer: ShardedLayer, n: u64, run: F, series: &str) -> Duration
where
    F: Fn(&shardcount::integrations::metrics::ShardedRecorder<PrometheusRecorder>, u64) -> Duration,
{
    let (r, h) = prometheus();
    let r = layer.wrap(r);
    let t = run(&r, n);
    r.flush();
    check(&h, series, n, "layer");
    t
}

/// A bare counter behind `metrics::Counter::from_arc`, no recorder.
fn bare<C: metrics::CounterFn + Send + Sync + 'static>(
    c: Arc<C>,
    total: impl Fn(&C) -> u64,
    n: u64,
) -> Duration {
    let handle = metrics::Counter::from_arc(c.clone());
    let t = run_threads(THREADS, |_| {
        let h = handle.clone();
        for _ in 0..n {
            h.increment(1);
            opaque();
        }
    });
    assert_eq!(total(&c), THREADS as u64 * n, "bare: lost or extra counts");
    t
}

fn encoded_total(registry: &Registry, name: &str) -> u64 {
    let mut text = String::new();
    encode(&mut text, registry).expect("encodes");
    sample(&text, &format!("{name}_total"))
}

fn prometheus_client_counter(n: u64) -> Duration {
    let c: prometheus_client::metrics::counter::Counter = Default::default();
    let mut registry = Registry::default();
    registry.register("hits", "", c.clone());
    let t = run_threads(THREADS, |_| {
        for _ in 0..n {
            c.inc();
            opaque();
        }
    });
    assert_eq!(encoded_total(&registry, "hits"), THREADS as u64 * n);
    t
}

fn shared_counter(n: u64) -> Duration {
    let c: Shared<Counter> = Shared::default();
    let mut registry = Registry::default();
    registry.register("hits", "", c.clone());
    let t = run_threads(THREADS, |_| {
        for _ in 0..n {
            c.inc();
            opaque();
        }
    });
    assert_eq!(encoded_total(&registry, "hits"), THREADS as u64 * n);
    t
}

fn main() {
    let mut s = Session::new("metrics", 7);

    s.run(
        Figure::new(
            "2 threads: counter!-registered handle, increment(1): exporter vs ShardedLayer",
            THREADS,
            Ratio::Throughput,
        )
        .reference("exporter handle", |n| plain(n, handle_loop, "hits"))
        .vs("ShardedLayer handle", |n| {
            layered(ShardedLayer::new(), n, handle_loop, "hits")
        })
        .vs("ShardedLayer::rough handle", |n| {
            layered(ShardedLayer::new().rough(), n, handle_loop, "hits")
        })
        .vs("Counter via from_arc", |n| {
            bare(Arc::new(Counter::new()), Counter::sum, n)
        })
        .vs("RoughCounter via from_arc", |n| {
            bare(Arc::new(RoughCounter::new()), RoughCounter::sum, n)
        }),
    );

    s.run(
        Figure::new(
            "2 threads: counter!(\"hits\", \"k\" => v).increment(1), lookup on every call",
            THREADS,
            Ratio::Throughput,
        )
        .reference("exporter", |n| plain(n, lookup_loop, "hits{k=\"v\"}"))
        .vs("NoopRecorder (the macro's own work)", |n| {
            lookup_loop(&metrics::NoopRecorder, n)
        })
        .vs("live-handle floor (Arc clone + drop, no lookup)", |n| {
            lookup_loop(&LiveHandleFloor, n)
        })
        .vs("ShardedLayer", |n| {
            layered(ShardedLayer::new(), n, lookup_loop, "hits{k=\"v\"}")
        })
        .vs("ShardedLayer::rough", |n| {
            layered(ShardedLayer::new().rough(), n, lookup_loop, "hits{k=\"v\"}")
        })
        // Issue 21's goal: the layer within 0.8 of the macro's own cost.
        .compare("ShardedLayer", "NoopRecorder (the macro's own work)")
        .compare("ShardedLayer::rough", "NoopRecorder (the macro's own work)")
        .compare(
            "ShardedLayer",
            "live-handle floor (Arc clone + drop, no lookup)",
        ),
    );

    s.run(
        Figure::new(
            "2 threads: prometheus-client Counter vs Shared<Counter>, inc()",
            THREADS,
            Ratio::Throughput,
        )
        .reference("prometheus_client Counter", prometheus_client_counter)
        .vs("Shared<Counter>", shared_counter),
    );

    s.finish();
}
