//! tikv's `prometheus` counters against shardcount counters registered
//! through `Collected`, 2 pinned threads, as paired figures (see
//! `shardcount_harness::measure::Session`; no criterion groups):
//!
//! * one counter: `IntCounter::inc` vs `Counter::inc`;
//! * one label set: `IntCounterVec::with_label_values(&["v"]).inc()` on
//!   every call vs `CounterMap::inc(&"v")` on every call and a
//!   `CounterMap` handle taken once (and, for reference, the `IntCounter`
//!   that `with_label_values` returns, taken once).
//!
//! Every run uses a fresh registry and checks the exact total through the
//! `TextEncoder`. `SHARDCOUNT_REPS` sets the repetitions (default 7),
//! `SHARDCOUNT_ONLY=<substring>` picks figures by title.

use prometheus::core::Collector;
use prometheus::{IntCounter, IntCounterVec, Opts, Registry, TextEncoder};
use shardcount::integrations::prometheus::Collected;
use shardcount::{Counter, CounterMap};
use shardcount_harness::measure::{opaque, run_threads, Figure, Ratio, Session};
use std::sync::Arc;
use std::time::Duration;

const THREADS: usize = 2;

/// Registers `c` in a fresh registry, runs `body` on each thread, and
/// checks the encoded `series` against `THREADS * n`.
fn measured(c: Box<dyn Collector>, series: &str, n: u64, body: impl Fn() + Sync) -> Duration {
    let registry = Registry::new();
    registry.register(c).expect("registers");
    let t = run_threads(THREADS, |_| body());
    let text = TextEncoder::new()
        .encode_to_string(&registry.gather())
        .expect("encodes");
    let want = format!("{series} {}", THREADS as u64 * n);
    assert!(
        text.lines().any(|l| l == want),
        "{series}: lost or extra counts:\n{text}"
    );
    t
}

fn int_counter(n: u64) -> Duration {
    let c = IntCounter::new("hits_total", "h").unwrap();
    let body = || {
        for _ in 0..n {
            c.inc();
            opaque();
        }
    };
    measured(Box::new(c.clone()), "hits_total", n, body)
}

fn shard_counter(n: u64) -> Duration {
    let c = Arc::new(Counter::new());
    let collected = Collected::new("hits_total", "h", c.clone()).unwrap();
    let body = || {
        for _ in 0..n {
            c.inc();
            opaque();
        }
    };
    measured(Box::new(collected), "hits_total", n, body)
}

fn vec_opts() -> Opts {
    Opts::new("hits_total", "h").variable_label("k")
}

fn int_counter_vec_lookup(n: u64) -> Duration {
    let v = IntCounterVec::new(vec_opts(), &["k"]).unwrap();
    let body = || {
        // Not a literal: the label is chosen at run time.
        let label: &str = std::hint::black_box("v");
        for _ in 0..n {
            v.with_label_values(&[label]).inc();
            opaque();
        }
    };
    measured(Box::new(v.clone()), "hits_total{k=\"v\"}", n, body)
}

fn int_counter_vec_held(n: u64) -> Duration {
    let v = IntCounterVec::new(vec_opts(), &["k"]).unwrap();
    let body = || {
        let c = v.with_label_values(&["v"]);
        for _ in 0..n {
            c.inc();
            opaque();
        }
    };
    measured(Box::new(v.clone()), "hits_total{k=\"v\"}", n, body)
}

fn counter_map_lookup(n: u64) -> Duration {
    let m: Arc<CounterMap<&'static str>> = Arc::default();
    let collected = Collected::with_opts(vec_opts(), m.clone()).unwrap();
    let body = || {
        let label: &'static str = std::hint::black_box("v");
        for _ in 0..n {
            m.inc(&label);
            opaque();
        }
    };
    measured(Box::new(collected), "hits_total{k=\"v\"}", n, body)
}

fn counter_map_handle(n: u64) -> Duration {
    let m: Arc<CounterMap<&'static str>> = Arc::default();
    let collected = Collected::with_opts(vec_opts(), m.clone()).unwrap();
    let body = || {
        let h = m.handle(&"v");
        for _ in 0..n {
            h.inc();
            opaque();
        }
    };
    measured(Box::new(collected), "hits_total{k=\"v\"}", n, body)
}

fn main() {
    let mut s = Session::new("prometheus", 7);

    s.run(
        Figure::new(
            "2 threads: prometheus IntCounter::inc vs Counter::inc (Collected)",
            THREADS,
            Ratio::Throughput,
        )
        .reference("IntCounter", int_counter)
        .vs("Counter", shard_counter),
    );

    s.run(
        Figure::new(
            "2 threads: one label set, IntCounterVec vs CounterMap (Collected)",
            THREADS,
            Ratio::Throughput,
        )
        .reference("with_label_values(..).inc()", int_counter_vec_lookup)
        .vs(
            "IntCounter from with_label_values, held",
            int_counter_vec_held,
        )
        .vs("CounterMap::inc(&key)", counter_map_lookup)
        .vs("CounterMap handle, held", counter_map_handle),
    );

    s.finish();
}
