#![cfg(not(shardcount_loom))]
//! `Histogram` through each integration's own encoder or recorder: every
//! cumulative `le` bucket, `_count` and `_sum` against a plain reference;
//! the metrics layer's fold against a recording inner recorder.

use rand::{Rng, SeedableRng};
use shardcount::Histogram;
use std::sync::{Arc, Mutex};

/// Values over many magnitudes, from a fixed seed.
fn values(n: usize) -> Vec<u64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    (0..n)
        .map(|_| {
            let bits = rng.gen_range(1..40);
            rng.gen_range(0..1u64 << bits)
        })
        .collect()
}

/// `(le, cumulative)` pairs from a text exposition: every `name_bucket`
/// line, `+Inf` as `None`.
fn buckets(text: &str, name: &str) -> Vec<(Option<f64>, u64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| {
            let (le, count) = rest.split_once("\"} ").unwrap();
            let le = (le != "+Inf").then(|| le.parse().unwrap());
            (le, count.split(' ').next().unwrap().parse().unwrap())
        })
        .collect()
}

/// Each cumulative bucket counts exactly the values at or below its `le`;
/// `+Inf` is last and counts all.
fn check_cumulative(got: &[(Option<f64>, u64)], vals: &[u64]) {
    assert!(got.len() >= 2, "{got:?}");
    for (le, n) in got {
        let want = match le {
            Some(le) => vals.iter().filter(|&&v| v as f64 <= *le).count(),
            None => vals.len(),
        };
        assert_eq!(*n, want as u64, "le = {le:?}");
    }
    assert_eq!(got.last().unwrap().0, None);
}

fn line_value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
        .parse()
        .unwrap()
}

#[cfg(feature = "prometheus-client")]
#[test]
fn prometheus_client_text_has_exact_cumulative_buckets() {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;
    use shardcount::integrations::prometheus_client::Shared;

    let vals = values(10_000);
    for h in [
        Histogram::new(),
        Histogram::with_bounds(&[10, 1000, 1 << 20, 1 << 30]),
    ] {
        let h = Shared::new(h);
        let mut registry = Registry::default();
        registry.register("size_bytes", "Sizes", h.clone());
        vals.iter().for_each(|&v| h.record(v));
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        check_cumulative(&buckets(&text, "size_bytes"), &vals);
        assert_eq!(line_value(&text, "size_bytes_count"), vals.len() as f64);
        assert_eq!(
            line_value(&text, "size_bytes_sum"),
            vals.iter().sum::<u64>() as f64
        );
    }
}

#[cfg(feature = "prometheus")]
#[test]
fn prometheus_text_encoder_has_exact_cumulative_buckets() {
    use prometheus::{Registry, TextEncoder};
    use shardcount::integrations::prometheus::CollectedHistogram;

    let vals = values(10_000);
    for h in [
        Histogram::new(),
        Histogram::with_bounds(&[10, 1000, 1 << 20, 1 << 30]),
    ] {
        let h = Arc::new(h);
        let registry = Registry::new();
        let c = CollectedHistogram::new("size_bytes", "Sizes", h.clone()).unwrap();
        registry.register(Box::new(c)).unwrap();
        vals.iter().for_each(|&v| h.record(v));
        let text = TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        check_cumulative(&buckets(&text, "size_bytes"), &vals);
        assert_eq!(line_value(&text, "size_bytes_count"), vals.len() as f64);
        assert_eq!(
            line_value(&text, "size_bytes_sum"),
            vals.iter().sum::<u64>() as f64
        );
    }
}

/// An inner recorder that keeps every histogram value it is given.
#[cfg(feature = "metrics")]
#[derive(Default, Clone)]
struct Recording(Arc<Mutex<Vec<f64>>>);

#[cfg(feature = "metrics")]
impl metrics::HistogramFn for Recording {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

#[cfg(feature = "metrics")]
impl metrics::Recorder for Recording {
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
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        _: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        metrics::Histogram::from_arc(Arc::new(self.clone()))
    }
}

/// Threads record while the layer folds; after a flush the inner recorder
/// holds exactly as many values, each (in order) within 1/32 of a value
/// recorded, and negative or NaN values passed on as they are.
#[cfg(feature = "metrics")]
#[test]
fn the_metrics_layer_folds_every_record_within_a_32nd() {
    use shardcount::integrations::metrics::ShardedLayer;
    use std::time::Duration;

    let inner = Recording::default();
    let seen = inner.0.clone();
    let recorder = ShardedLayer::new()
        .with_interval(Duration::from_millis(1))
        .wrap(inner);
    let vals: Vec<f64> = values(20_000).iter().map(|&v| v as f64 * 1e-6).collect();
    metrics::with_local_recorder(&recorder, || {
        let h = metrics::histogram!("latency_seconds");
        std::thread::scope(|s| {
            for chunk in vals.chunks(5_000) {
                let h = h.clone();
                s.spawn(move || chunk.iter().for_each(|&v| h.record(v)));
            }
        });
        h.record(-2.0);
    });
    recorder.flush();
    let mut got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), vals.len() + 1);
    assert!(got.contains(&-2.0), "a negative value was not passed on");
    got.retain(|&v| v != -2.0);
    got.sort_by(f64::total_cmp);
    let mut want = vals.clone();
    want.sort_by(f64::total_cmp);
    for (g, w) in got.iter().zip(&want) {
        // Rounding to 1e-9 first, then 1/32 of the value.
        assert!((g - w).abs() <= w / 32.0 + 1e-9, "{g} for {w}");
    }
}
