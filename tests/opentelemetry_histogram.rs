#![cfg(not(shardcount_loom))]
//! Issue 32: histograms reach an OpenTelemetry SDK pipeline with exact
//! counts, buckets and sums, through the SDK's in-memory exporter.

use opentelemetry::metrics::MeterProvider;
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, HistogramDataPoint, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
use shardcount::integrations::opentelemetry::HistogramReplay;
use shardcount::{Histogram, HistogramSnapshot};
use std::sync::Arc;
use std::time::Duration;

fn pipeline() -> (SdkMeterProvider, InMemoryMetricExporter) {
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    (provider, exporter)
}

/// Calls `f` with the last export's data of metric `name`.
fn last(exporter: &InMemoryMetricExporter, name: &str, f: impl FnOnce(&AggregatedMetrics)) {
    let all = exporter.get_finished_metrics().unwrap();
    let rm = all.last().expect("an export");
    let m = rm
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("no metric {name}"));
    f(m.data());
}

/// The point's bounds and bucket counts are the snapshot's exported ones.
fn same_buckets<T>(p: &HistogramDataPoint<T>, s: &HistogramSnapshot) {
    let want: Vec<(Option<f64>, u64)> = s.export_buckets().collect();
    let bounds: Vec<f64> = p.bounds().collect();
    let counts: Vec<u64> = p.bucket_counts().collect();
    assert_eq!(bounds.len() + 1, want.len());
    for (i, (le, n)) in want.iter().enumerate() {
        assert_eq!(le, &bounds.get(i).copied(), "bound {i}");
        assert_eq!(*n, counts[i], "bucket {i}");
    }
}

/// Values over many magnitudes, none repeating a pattern the buckets
/// could hide.
fn values() -> Vec<u64> {
    (1..3_000u64).map(|i| i * i * 7_919 % (1 << 34)).collect()
}

#[test]
fn default_buckets_replay_exact_counts_buckets_and_sum() {
    let (provider, exporter) = pipeline();
    let h = Arc::new(Histogram::new());
    let replay = HistogramReplay::new(&provider.meter("t"), "sizes", h.clone());
    let vals = values();
    vals.iter().for_each(|&v| h.record(v));
    assert_eq!(replay.replay(), vals.len() as u64);
    provider.force_flush().unwrap();
    last(&exporter, "sizes", |data| {
        let AggregatedMetrics::U64(MetricData::Histogram(got)) = data else {
            panic!("not a u64 histogram");
        };
        let p = got.data_points().next().unwrap();
        assert_eq!(p.count(), vals.len() as u64);
        assert_eq!(p.sum(), vals.iter().sum::<u64>());
        same_buckets(p, &h.snapshot());
    });

    // A second round replays only what is new; cumulative, the SDK adds.
    h.record(12_345);
    assert_eq!(replay.replay(), 1);
    provider.force_flush().unwrap();
    last(&exporter, "sizes", |data| {
        let AggregatedMetrics::U64(MetricData::Histogram(got)) = data else {
            panic!("not a u64 histogram");
        };
        let p = got.data_points().next().unwrap();
        assert_eq!(p.count(), vals.len() as u64 + 1);
        assert_eq!(p.sum(), vals.iter().sum::<u64>() + 12_345);
        same_buckets(p, &h.snapshot());
    });
}

#[test]
fn durations_replay_in_seconds_with_labels() {
    use shardcount::{Label, LabelledHistogram};

    #[derive(Clone, Copy, Label)]
    enum Route {
        Home,
        Checkout,
    }

    let (provider, exporter) = pipeline();
    let h = Arc::new(LabelledHistogram::with_duration_bounds(&[
        Duration::from_millis(1),
        Duration::from_millis(10),
    ]));
    let replay = HistogramReplay::new(&provider.meter("t"), "latency", h.clone());
    for ms in [1, 2, 20] {
        h.record_duration(Route::Checkout, Duration::from_millis(ms));
    }
    assert_eq!(replay.replay(), 3);
    provider.force_flush().unwrap();
    last(&exporter, "latency", |data| {
        let AggregatedMetrics::F64(MetricData::Histogram(got)) = data else {
            panic!("not an f64 histogram");
        };
        let points: Vec<_> = got.data_points().collect();
        let member = |route: &'static str| {
            let want = KeyValue::new("route", route);
            points
                .iter()
                .find(|p| p.attributes().any(|kv| *kv == want))
                .copied()
        };
        let checkout = member("checkout").expect("a checkout point");
        assert_eq!(checkout.count(), 3);
        assert!((checkout.sum() - 0.023).abs() < 1e-12, "{}", checkout.sum());
        assert_eq!(checkout.bounds().collect::<Vec<_>>(), [0.001, 0.01]);
        assert_eq!(checkout.bucket_counts().collect::<Vec<_>>(), [1, 1, 1]);
        // Never recorded into: no SDK record, so no point or an empty one.
        assert!(member("home").is_none_or(|p| p.count() == 0));
    });
}
