//! Counts from 2 threads into shardcount counters registered on an
//! OpenTelemetry `Meter`, next to the SDK's own `Counter<u64>`, collects
//! twice through the SDK's in-memory exporter with delta temporality, and
//! prints one line per data point: `name{attributes} kind value`.
//!
//! ```text
//! cargo run --example opentelemetry_memory --features opentelemetry
//! ```
//!
//! `scripts/test-all` runs it and checks the exact lines.

use opentelemetry::metrics::MeterProvider;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{
    InMemoryMetricExporter, InMemoryMetricExporterBuilder, PeriodicReader, SdkMeterProvider,
    Temporality,
};
use shardcount::integrations::opentelemetry::{observe, Observe};
use shardcount::{Counter, CounterMap, MaxCounter};
use std::sync::Arc;

const PER_THREAD: u64 = 100_000;

/// One collection's data points, as sorted lines.
fn collect(
    provider: &SdkMeterProvider,
    exporter: &InMemoryMetricExporter,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    exporter.reset();
    provider.force_flush()?;
    let mut lines = Vec::new();
    for resource in exporter.get_finished_metrics()? {
        for metric in resource.scope_metrics().flat_map(|s| s.metrics()) {
            let mut push = |kind: &str, attributes: Vec<String>, value: u64| {
                let name = metric.name();
                let attributes = attributes.join(",");
                lines.push(format!("{name}{{{attributes}}} {kind} {value}"));
            };
            let show = |kv: &opentelemetry::KeyValue| format!("{}=\"{}\"", kv.key, kv.value);
            match metric.data() {
                AggregatedMetrics::U64(MetricData::Sum(sum)) => {
                    let kind = format!("sum/{:?}", sum.temporality()).to_lowercase();
                    for p in sum.data_points() {
                        push(&kind, p.attributes().map(show).collect(), p.value());
                    }
                }
                AggregatedMetrics::U64(MetricData::Gauge(gauge)) => {
                    for p in gauge.data_points() {
                        push("gauge", p.attributes().map(show).collect(), p.value());
                    }
                }
                other => push(&format!("{other:?}"), Vec::new(), 0),
            }
        }
    }
    lines.sort();
    Ok(lines)
}

fn count(
    requests: &Counter,
    routes: &CounterMap<&'static str>,
    peak: &MaxCounter,
    theirs: &opentelemetry::metrics::Counter<u64>,
    round: u64,
) {
    std::thread::scope(|s| {
        for t in 0..2u64 {
            s.spawn(move || {
                for i in 0..PER_THREAD * round {
                    requests.inc();
                    routes.add(if i % 4 == 0 { &"/login" } else { &"/" }, 1);
                    peak.record(round * 10 + t * 5 + i % 5);
                    theirs.add(1, &[]);
                }
            });
        }
    });
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let exporter = InMemoryMetricExporterBuilder::new()
        .with_temporality(Temporality::Delta)
        .build();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let meter = provider.meter("example");

    let requests = Arc::new(Counter::new());
    let routes: Arc<CounterMap<&'static str>> = Arc::default();
    let peak = Arc::new(MaxCounter::new());
    let theirs = meter.u64_counter("theirs_requests").build();
    // Keep the handles for as long as the counters should be collected.
    let _instruments = [
        observe(&meter, "requests", requests.clone()),
        Observe::new("route_requests", routes.clone())
            .with_label_name("route")
            .with_unit("{request}")
            .register(&meter),
        observe(&meter, "batch_peak", peak.clone()),
    ];

    // Round 1 adds 2 × 100,000, round 2 adds 2 × 200,000: with delta
    // temporality each collection reports its own round.
    for round in 1..=2 {
        count(&requests, &routes, &peak, &theirs, round);
        println!("collection {round}");
        for line in collect(&provider, &exporter)? {
            println!("{line}");
        }
    }
    provider.shutdown()?;
    Ok(())
}
