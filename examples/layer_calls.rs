//! Instructions per `counter!("hits", "k" => v).increment(1)` call, one
//! thread, for callgrind: under `metrics::NoopRecorder` (the macro's own
//! work: building and hashing the key) and under `ShardedLayer` (both
//! backings). `scripts/callgrind` runs it at N and 2N calls.

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use shardcount::integrations::metrics::ShardedLayer;
use shardcount_harness::measure::opaque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// An inner recorder whose every counter is one shared word: cheap and
/// deterministic, so the count is the layer's own work (a real exporter's
/// registration runs once per key and is not in the loop anyway).
#[derive(Default)]
struct Tally(Arc<AtomicU64>);

impl Recorder for Tally {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::clone(&self.0))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn calls(recorder: &(impl Recorder + Sync), n: u64) {
    let v: &'static str = std::hint::black_box("v");
    metrics::with_local_recorder(recorder, || {
        for _ in 0..n {
            metrics::counter!("hits", "k" => v).increment(1);
            opaque();
        }
    });
}

fn main() {
    let mut args = std::env::args().skip(1);
    let subject = args.next().unwrap_or_else(|| "layer".into());
    let n: u64 = args
        .next()
        .map_or(1_000_000, |s| s.parse().expect("calls must be a number"));
    match subject.as_str() {
        "noop" => calls(&metrics::NoopRecorder, n),
        "layer" | "layer-rough" => {
            let inner = Tally::default();
            let total = Arc::clone(&inner.0);
            let layer = if subject == "layer" {
                ShardedLayer::new()
            } else {
                ShardedLayer::new().rough()
            };
            let r = layer.wrap(inner);
            calls(&r, n);
            r.flush();
            assert_eq!(total.load(Ordering::Relaxed), n, "lost calls");
        }
        other => panic!("unknown subject {other:?}: noop, layer, layer-rough"),
    }
}
