//! OpenTelemetry's SDK instruments against shardcount counters registered
//! with `observe`, as paired figures (see
//! `shardcount_harness::measure::Session`; no criterion groups):
//!
//! * 2 threads, one series: the SDK's `Counter<u64>::add(1, &[])` vs
//!   `Counter::inc` on a counter the SDK observes;
//! * 2 threads, one attribute: `add(1, &[KeyValue])` (the attribute built
//!   once) vs a `CounterMap` handle and `CounterMap::inc(&key)`;
//! * 1 thread, collection: a 10,000-key `CounterMap` vs a hand-written
//!   callback that observes 10,000 precomputed values with the same
//!   attributes; one operation is one collection through a manual reader.
//!
//! Every run uses a fresh meter provider and checks the exact totals it
//! collects. `SHARDCOUNT_REPS` sets the repetitions (default 7),
//! `SHARDCOUNT_ONLY=<substring>` picks figures by title.

use opentelemetry::metrics::{Meter, MeterProvider};
use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{
    InstrumentKind, ManualReader, Pipeline, SdkMeterProvider, Stream, Temporality,
};
use shardcount::integrations::opentelemetry::observe;
use shardcount::{Counter, CounterMap};
use shardcount_harness::measure::{opaque, run_threads, Figure, Ratio, Session};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

const THREADS: usize = 2;
const KEYS: u64 = 10_000;

/// A manual reader the bench keeps a handle to after the provider took it.
#[derive(Debug, Clone)]
struct Shared(Arc<ManualReader>);

impl MetricReader for Shared {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline)
    }
    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

/// A provider whose instruments keep up to 2 × `KEYS` attribute sets,
/// its reader, and a meter.
fn provider() -> (SdkMeterProvider, Shared, Meter) {
    let reader = Shared(Arc::new(ManualReader::builder().build()));
    let provider = SdkMeterProvider::builder()
        .with_reader(reader.clone())
        .with_view(|_: &opentelemetry_sdk::metrics::Instrument| {
            Stream::builder()
                .with_cardinality_limit(2 * KEYS as usize)
                .build()
                .ok()
        })
        .build();
    let meter = provider.meter("bench");
    (provider, reader, meter)
}

/// Collects once and returns (data points, sum of their values).
fn collect(reader: &Shared, rm: &mut ResourceMetrics) -> (u64, u64) {
    reader.collect(rm).expect("collects");
    let (mut points, mut total) = (0, 0);
    for metric in rm.scope_metrics().flat_map(|s| s.metrics()) {
        let AggregatedMetrics::U64(MetricData::Sum(sum)) = metric.data() else {
            panic!("{}: not a u64 sum", metric.name());
        };
        for p in sum.data_points() {
            points += 1;
            total += p.value();
        }
    }
    (points, total)
}

/// Runs `body` on each thread and checks the one series collected.
fn measured(reader: &Shared, n: u64, body: impl Fn() + Sync) -> Duration {
    let t = run_threads(THREADS, |_| body());
    let got = collect(reader, &mut ResourceMetrics::default());
    assert_eq!(got, (1, THREADS as u64 * n), "lost or extra counts");
    t
}

fn sdk_counter(n: u64) -> Duration {
    let (_p, reader, meter) = provider();
    let c = meter.u64_counter("hits").build();
    measured(&reader, n, || {
        for _ in 0..n {
            c.add(1, &[]);
            opaque();
        }
    })
}

fn shard_counter(n: u64) -> Duration {
    let (_p, reader, meter) = provider();
    let c = Arc::new(Counter::new());
    let _h = observe(&meter, "hits", c.clone());
    measured(&reader, n, || {
        for _ in 0..n {
            c.inc();
            opaque();
        }
    })
}

fn sdk_counter_attribute(n: u64) -> Duration {
    let (_p, reader, meter) = provider();
    let c = meter.u64_counter("hits").build();
    let attributes = [KeyValue::new("key", "v")];
    measured(&reader, n, || {
        for _ in 0..n {
            c.add(1, &attributes);
            opaque();
        }
    })
}

fn counter_map_handle(n: u64) -> Duration {
    let (_p, reader, meter) = provider();
    let m: Arc<CounterMap<&'static str>> = Arc::default();
    let _h = observe(&meter, "hits", m.clone());
    measured(&reader, n, || {
        let h = m.handle(&"v");
        for _ in 0..n {
            h.inc();
            opaque();
        }
    })
}

fn counter_map_lookup(n: u64) -> Duration {
    let (_p, reader, meter) = provider();
    let m: Arc<CounterMap<&'static str>> = Arc::default();
    let _h = observe(&meter, "hits", m.clone());
    measured(&reader, n, || {
        let key: &'static str = std::hint::black_box("v");
        for _ in 0..n {
            m.inc(&key);
            opaque();
        }
    })
}

/// Times `n` collections (after one untimed, which builds the SDK's and
/// the map's attribute sets) and checks the last one.
fn collections(reader: &Shared, n: u64) -> Duration {
    let mut rm = ResourceMetrics::default();
    collect(reader, &mut rm);
    let start = Instant::now();
    for _ in 0..n {
        reader.collect(&mut rm).expect("collects");
    }
    let t = start.elapsed();
    let want = (KEYS, KEYS * (KEYS + 1) / 2);
    assert_eq!(collect(reader, &mut rm), want, "lost or extra points");
    t
}

fn hand_written_callback(n: u64) -> Duration {
    let (_p, reader, meter) = provider();
    let values: Vec<(KeyValue, u64)> = (0..KEYS)
        .map(|k| {
            let value: Arc<str> = k.to_string().into();
            (KeyValue::new("key", value), k + 1)
        })
        .collect();
    let _h = meter
        .u64_observable_counter("ids")
        .with_callback(move |sink| {
            for (attribute, value) in &values {
                sink.observe(*value, std::slice::from_ref(attribute));
            }
        })
        .build();
    collections(&reader, n)
}

fn counter_map_collected(n: u64) -> Duration {
    let (_p, reader, meter) = provider();
    let m: Arc<CounterMap<u64>> = Arc::new(CounterMap::with_max_keys(2 * KEYS as usize));
    for k in 0..KEYS {
        m.add(&k, k + 1);
    }
    let _h = observe(&meter, "ids", m.clone());
    collections(&reader, n)
}

fn main() {
    let mut s = Session::new("opentelemetry", 7);

    s.run(
        Figure::new(
            "2 threads: SDK Counter<u64>::add(1, &[]) vs Counter::inc (observed)",
            THREADS,
            Ratio::Throughput,
        )
        .reference("SDK add(1, &[])", sdk_counter)
        .vs("Counter::inc, observed", shard_counter),
    );

    s.run(
        Figure::new(
            "2 threads: one attribute, SDK add(1, &[KeyValue]) vs CounterMap (observed)",
            THREADS,
            Ratio::Throughput,
        )
        .reference("SDK add(1, &[KeyValue])", sdk_counter_attribute)
        .vs("CounterMap handle, held", counter_map_handle)
        .vs("CounterMap::inc(&key)", counter_map_lookup),
    );

    s.run(
        Figure::new(
            "collection: 10,000 keys, hand-written callback vs CounterMap (observe)",
            1,
            Ratio::Cost,
        )
        .reference("hand-written callback", hand_written_callback)
        .vs("CounterMap, observe", counter_map_collected),
    );

    s.finish();
}
