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

/// The `le` texts of every `name_bucket` line, in order.
#[cfg(any(
    feature = "prometheus-client",
    feature = "prometheus",
    feature = "metrics"
))]
fn le_set(text: &str, name: &str) -> Vec<String> {
    let prefix = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .map(|rest| rest.split_once('"').unwrap().0.to_string())
        .collect()
}

/// Issue 32: two replicas fed different data expose identical `le` sets
/// (default buckets: 54 bounds and `+Inf`), so `sum by (le)` adds like
/// with like.
#[cfg(feature = "prometheus-client")]
#[test]
fn prometheus_client_renders_the_same_le_set_whatever_the_data() {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;
    use shardcount::integrations::prometheus_client::Shared;

    let render = |vals: &[u64]| {
        let h = Shared::new(Histogram::new());
        vals.iter().for_each(|&v| h.record(v));
        let mut registry = Registry::default();
        registry.register("size_bytes", "Sizes", h);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        le_set(&text, "size_bytes")
    };
    let (a, b) = (render(&values(4_000)), render(&[3]));
    assert_eq!(a.len(), 55);
    assert_eq!(a, b);
    assert_eq!(a.last().map(String::as_str), Some("+Inf"));
}

#[cfg(feature = "prometheus")]
#[test]
fn prometheus_renders_the_same_le_set_whatever_the_data() {
    use prometheus::{Registry, TextEncoder};
    use shardcount::integrations::prometheus::CollectedHistogram;

    let render = |vals: &[u64]| {
        let h = Arc::new(Histogram::new());
        vals.iter().for_each(|&v| h.record(v));
        let registry = Registry::new();
        let c = CollectedHistogram::new("size_bytes", "Sizes", h).unwrap();
        registry.register(Box::new(c)).unwrap();
        let text = TextEncoder::new()
            .encode_to_string(&registry.gather())
            .unwrap();
        le_set(&text, "size_bytes")
    };
    let (a, b) = (render(&values(4_000)), render(&[3]));
    assert_eq!(a.len(), 55);
    assert_eq!(a, b);
}

/// Durations: `_seconds` names, the round `le` set (`DEFAULT_DURATION_LE`)
/// and sums in seconds; each cumulative count never holds a duration above
/// its bound and misses none more than 1/32 below it; `+Inf` holds all.
#[cfg(all(feature = "prometheus-client", feature = "prometheus"))]
#[test]
fn duration_histograms_export_seconds_in_both_prometheus_crates() {
    use std::time::Duration;

    let ns: Vec<u64> = values(2_000).iter().map(|v| v % 20_000_000_000).collect();
    let secs: Vec<f64> = ns.iter().map(|&v| v as f64 / 1e9).collect();
    let check = |text: &str| {
        let got = buckets(text, "latency_seconds");
        let les: Vec<Option<f64>> = got.iter().map(|b| b.0).collect();
        let want_les: Vec<Option<f64>> = shardcount::DEFAULT_DURATION_LE
            .iter()
            .map(|d| Some(d.as_secs_f64()))
            .chain([None])
            .collect();
        assert_eq!(les, want_les);
        for (le, n) in &got {
            let Some(le) = le else {
                assert_eq!(*n, secs.len() as u64, "+Inf");
                continue;
            };
            let at_most = secs.iter().filter(|&&v| v <= *le).count() as u64;
            let at_least = secs
                .iter()
                .filter(|&&v| v <= le * (1.0 - 1.0 / 32.0))
                .count() as u64;
            assert!(
                (at_least..=at_most).contains(n),
                "le = {le}: {n} not in {at_least}..={at_most}"
            );
        }
        let sum = line_value(text, "latency_seconds_sum");
        let want = ns.iter().sum::<u64>() as f64 / 1e9;
        assert!((sum - want).abs() <= want * 1e-12, "{sum} vs {want}");
    };

    {
        use prometheus_client::encoding::text::encode;
        use prometheus_client::registry::{Registry, Unit};
        use shardcount::integrations::prometheus_client::Shared;
        let h = Shared::new(Histogram::for_durations());
        ns.iter()
            .for_each(|&v| h.record_duration(Duration::from_nanos(v)));
        let mut registry = Registry::default();
        registry.register_with_unit("latency", "Latency", Unit::Seconds, h);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(text.contains("# UNIT latency_seconds seconds\n"), "{text}");
        check(&text);
    }
    {
        use prometheus::{Registry, TextEncoder};
        use shardcount::integrations::prometheus::CollectedHistogram;
        let h = Arc::new(Histogram::for_durations());
        ns.iter()
            .for_each(|&v| h.record_duration(Duration::from_nanos(v)));
        let registry = Registry::new();
        let c = CollectedHistogram::new("latency_seconds", "Latency", h).unwrap();
        registry.register(Box::new(c)).unwrap();
        check(
            &TextEncoder::new()
                .encode_to_string(&registry.gather())
                .unwrap(),
        );
    }
}

/// Under the metrics layer the `le` set is the inner exporter's: the same
/// for two histograms fed different data, in the unit recorded (seconds
/// for `Duration`s, which `metrics` records as seconds).
#[cfg(feature = "metrics")]
#[test]
fn the_metrics_layer_renders_the_same_le_set_whatever_the_data() {
    use metrics_exporter_prometheus::PrometheusBuilder;
    use shardcount::integrations::metrics::ShardedLayer;
    use std::time::Duration;

    let bounds = [0.001, 0.01, 0.1, 1.0];
    let prometheus = PrometheusBuilder::new()
        .set_buckets(&bounds)
        .unwrap()
        .build_recorder();
    let handle = prometheus.handle();
    let recorder = ShardedLayer::new().wrap(prometheus);
    metrics::with_local_recorder(&recorder, || {
        let a = metrics::histogram!("a_seconds");
        values(2_000)
            .iter()
            .for_each(|&v| a.record(Duration::from_nanos(v % 2_000_000_000)));
        metrics::histogram!("b_seconds").record(Duration::from_millis(5));
    });
    recorder.flush();
    let text = handle.render();
    let (a, b) = (le_set(&text, "a_seconds"), le_set(&text, "b_seconds"));
    assert_eq!(a, ["0.001", "0.01", "0.1", "1", "+Inf"], "{text}");
    assert_eq!(a, b);
    // The fold hands on bucket midpoints: within 1/32 (module docs).
    let sum = line_value(&text, "b_seconds_sum");
    assert!((sum - 0.005).abs() <= 0.005 / 32.0, "{text}");
}

/// A labelled family: every label value is a member with its label pair
/// (recorded into or not), each with the same fixed `le` set, its counts
/// its own.
#[cfg(all(
    feature = "prometheus-client",
    feature = "prometheus",
    feature = "derive"
))]
#[test]
fn labelled_histograms_export_label_pairs_in_both_prometheus_crates() {
    use shardcount::{Label, LabelledHistogram};

    #[derive(Clone, Copy, Label)]
    enum Route {
        Home,
        Checkout,
    }

    let check = |text: &str| {
        for (route, n) in [("home", 0), ("checkout", 2)] {
            let member = format!("route=\"{route}\"");
            let les: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with("size_bytes_bucket{") && l.contains(&member))
                .collect();
            assert_eq!(les.len(), 55, "{route}:\n{text}");
            let count = text
                .lines()
                .find(|l| l.starts_with("size_bytes_count{") && l.contains(&member))
                .unwrap_or_else(|| panic!("no count for {route}:\n{text}"));
            assert!(count.ends_with(&format!(" {n}")), "{count}");
        }
    };
    {
        use prometheus_client::encoding::text::encode;
        use prometheus_client::registry::Registry;
        use shardcount::integrations::prometheus_client::Shared;
        let h = Shared::new(LabelledHistogram::new());
        h.record(Route::Checkout, 10);
        h.record(Route::Checkout, 1 << 30);
        let mut registry = Registry::default();
        registry.register("size_bytes", "Sizes", h);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        check(&text);
    }
    {
        use prometheus::{Registry, TextEncoder};
        use shardcount::integrations::prometheus::CollectedHistogram;
        let h = Arc::new(LabelledHistogram::new());
        h.record(Route::Checkout, 10);
        h.record(Route::Checkout, 1 << 30);
        let registry = Registry::new();
        let c = CollectedHistogram::new("size_bytes", "Sizes", h).unwrap();
        registry.register(Box::new(c)).unwrap();
        check(
            &TextEncoder::new()
                .encode_to_string(&registry.gather())
                .unwrap(),
        );
    }
}

/// `metrics::HistogramReplay` into metrics-exporter-prometheus with the
/// family's `le` set: every cumulative count and the sum exact, each
/// member under its label, over two replays.
#[cfg(all(feature = "metrics", feature = "derive"))]
#[test]
fn the_metrics_replay_renders_exact_buckets_with_labels() {
    use metrics_exporter_prometheus::PrometheusBuilder;
    use shardcount::integrations::metrics::HistogramReplay;
    use shardcount::{Label, LabelledHistogram};

    #[derive(Clone, Copy, Label)]
    enum Op {
        Read,
        Write,
    }

    let h = Arc::new(LabelledHistogram::new());
    let replay = HistogramReplay::new("size_bytes", h.clone());
    assert_eq!(replay.le_set().len(), 54);
    let recorder = PrometheusBuilder::new()
        .set_buckets(&replay.le_set())
        .unwrap()
        .build_recorder();
    let vals = values(3_000);
    let (first, second) = vals.split_at(1_000);
    first.iter().for_each(|&v| h.record(Op::Write, v));
    metrics::with_local_recorder(&recorder, || assert_eq!(replay.replay(), 1_000));
    second.iter().for_each(|&v| h.record(Op::Write, v));
    h.record(Op::Read, 7);
    metrics::with_local_recorder(&recorder, || assert_eq!(replay.replay(), 2_001));
    let text = recorder.handle().render();
    let member = |op: &str| -> Vec<(Option<f64>, u64)> {
        let tag = format!("op=\"{op}\"");
        text.lines()
            .filter(|l| l.starts_with("size_bytes_bucket{") && l.contains(&tag))
            .map(|l| {
                let le = l.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
                let n = l.rsplit(' ').next().unwrap().parse().unwrap();
                ((le != "+Inf").then(|| le.parse().unwrap()), n)
            })
            .collect()
    };
    check_cumulative(&member("write"), &vals);
    check_cumulative(&member("read"), &[7]);
    assert_eq!(member("write").len(), member("read").len());
    let sum = text
        .lines()
        .find_map(|l| l.strip_prefix("size_bytes_sum{op=\"write\"} "))
        .unwrap_or_else(|| panic!("no sum:\n{text}"));
    assert_eq!(sum.parse::<f64>().unwrap(), vals.iter().sum::<u64>() as f64);
}

/// Replays that run while another thread records can read a record
/// counted but not yet summed (or the reverse), so their values cannot add
/// up to the recorded sum; what they could not place is carried, never
/// dropped, and the records replayed after the burst bring the replayed sum
/// back to the recorded one exactly.
#[cfg(feature = "metrics")]
#[test]
fn the_metrics_replay_sum_comes_back_after_replays_during_bursts() {
    use metrics_exporter_prometheus::PrometheusBuilder;
    use shardcount::integrations::metrics::HistogramReplay;
    use std::sync::atomic::{AtomicBool, Ordering};

    for round in 0..10 {
        let h = Arc::new(Histogram::new());
        let replay = HistogramReplay::new("v", h.clone());
        let recorder = PrometheusBuilder::new()
            .set_buckets(&replay.le_set())
            .unwrap()
            .build_recorder();
        let busy = AtomicBool::new(true);
        let mut during = 0;
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..200 {
                    (0..300).for_each(|_| h.record(1000));
                    std::thread::yield_now();
                }
                busy.store(false, Ordering::Release);
            });
            while busy.load(Ordering::Acquire) {
                metrics::with_local_recorder(&recorder, || replay.replay());
                during += 1;
            }
        });
        // Records after the burst, of many sizes: room within their
        // buckets for what the replays during it could not place.
        (0..20_000u64).for_each(|i| h.record(1000 + i % 3000));
        metrics::with_local_recorder(&recorder, || replay.replay());
        let text = recorder.handle().render();
        let (count, sum) = (line_value(&text, "v_count"), line_value(&text, "v_sum"));
        assert_eq!(
            (count, sum),
            (h.count() as f64, h.sum() as f64),
            "round {round}, {during} replays during the burst"
        );
    }
}
