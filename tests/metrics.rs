//! The `metrics` integration against the real Prometheus exporter: counts
//! through `counter!` with `ShardedLayer` installed (per thread, with
//! `metrics::with_local_recorder`, so tests never share the global
//! recorder), rendered by the exporter's handle and parsed back.

use metrics::{CounterFn, Recorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use metrics_util::layers::Layer;
use shardcount::integrations::metrics::{ShardedLayer, ShardedRecorder};
use shardcount::{Counter, RoughCounter};
use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The exposition text's samples: `series -> value`, where series is the
/// name with its labels exactly as rendered (`requests{worker="1"}`).
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample line");
            let value: f64 = value.parse().expect("a numeric sample");
            (series.to_string(), value)
        })
        .collect()
}

/// The value of `series` as an integer count (missing means 0).
fn count(text: &str, series: &str) -> u64 {
    let v = samples(text).get(series).copied().unwrap_or(0.0);
    assert_eq!(v.fract(), 0.0, "{series} is not a whole count: {v}");
    v as u64
}

fn layered(interval: Duration) -> (ShardedRecorder<PrometheusRecorder>, PrometheusHandle) {
    layered_with(ShardedLayer::new().with_interval(interval))
}

fn layered_with(layer: ShardedLayer) -> (ShardedRecorder<PrometheusRecorder>, PrometheusHandle) {
    let prometheus = PrometheusBuilder::new().build_recorder();
    let handle = prometheus.handle();
    (layer.layer(prometheus), handle)
}

/// The two backings, folding every millisecond or (`slow`) never on their
/// own within a test.
fn layers(slow: bool) -> [ShardedLayer; 2] {
    let interval = if slow {
        Duration::from_secs(3600)
    } else {
        Duration::from_millis(1)
    };
    let l = ShardedLayer::new().with_interval(interval);
    [l, l.rough()]
}

const THREADS: usize = 4;
const PER_THREAD: u64 = 20_000;
const WORKERS: [&str; THREADS] = ["0", "1", "2", "3"];

/// Four threads count through `counter!`: one labelled series per thread,
/// looked up on every call; one series all share, registered once per
/// thread and incremented through the handle; and a series incremented by
/// 3 at a time. The folding thread runs every millisecond meanwhile, so
/// folds race the increments; after the final flush every total is exact.
#[test]
fn exporter_totals_are_exact_after_flush() {
    for layer in layers(false) {
        exact_after_flush(layer);
    }
}

fn exact_after_flush(layer: ShardedLayer) {
    let (recorder, render) = layered_with(layer);
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for (t, worker) in WORKERS.iter().enumerate() {
            let (recorder, start) = (&recorder, &start);
            s.spawn(move || {
                metrics::with_local_recorder(recorder, || {
                    let shared = metrics::counter!("shared_total", "kind" => "all");
                    start.wait();
                    for i in 0..PER_THREAD {
                        metrics::counter!("requests", "worker" => *worker).increment(1);
                        shared.increment(1);
                        if i % 4 == t as u64 % 4 {
                            metrics::counter!("bytes", "worker" => *worker, "dir" => "in")
                                .increment(3);
                        }
                    }
                });
            });
        }
    });
    recorder.flush();
    let text = render.render();
    for w in WORKERS {
        assert_eq!(
            count(&text, &format!("requests{{worker=\"{w}\"}}")),
            PER_THREAD,
            "worker {w}:\n{text}"
        );
        assert_eq!(
            count(&text, &format!("bytes{{worker=\"{w}\",dir=\"in\"}}")),
            3 * PER_THREAD / 4,
            "worker {w}:\n{text}"
        );
    }
    assert_eq!(
        count(&text, "shared_total{kind=\"all\"}"),
        THREADS as u64 * PER_THREAD,
        "{text}"
    );
    // One key per series, however many threads and calls.
    assert_eq!(recorder.keys(), 2 * THREADS + 1);
}

/// Without an explicit flush, dropping the recorder folds what is left.
#[test]
fn drop_flushes() {
    // An interval the test never reaches: only the drop can fold.
    for layer in layers(true) {
        drop_flushes_with(layer);
    }
}

fn drop_flushes_with(layer: ShardedLayer) {
    let (recorder, render) = layered_with(layer);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let recorder = &recorder;
            s.spawn(move || {
                metrics::with_local_recorder(recorder, || {
                    for _ in 0..PER_THREAD {
                        metrics::counter!("dropped").increment(1);
                    }
                });
            });
        }
    });
    assert_eq!(
        count(&render.render(), "dropped"),
        0,
        "folded before the drop"
    );
    drop(recorder);
    assert_eq!(
        count(&render.render(), "dropped"),
        THREADS as u64 * PER_THREAD
    );
}

/// The background thread alone brings the exporter up to date, fold after
/// fold (for a `RoughCounter`, each fold moves only what was added since).
#[test]
fn background_thread_folds() {
    for layer in layers(false) {
        let (recorder, render) = layered_with(layer);
        for expect in [42, 84] {
            metrics::with_local_recorder(&recorder, || metrics::counter!("idle").increment(42));
            let deadline = Instant::now() + Duration::from_secs(30);
            while count(&render.render(), "idle") != expect {
                assert!(Instant::now() < deadline, "never folded to {expect}");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        // Further passes with nothing new add nothing.
        std::thread::sleep(Duration::from_millis(20));
        recorder.flush();
        assert_eq!(count(&render.render(), "idle"), 84);
    }
}

/// Any interval below 1 ms, zero included, runs every 1 ms: no panic, and
/// the background thread folds.
#[test]
fn zero_interval_folds_every_millisecond() {
    let layer = ShardedLayer::new().with_interval(Duration::ZERO);
    assert_eq!(layer.interval(), Duration::from_millis(1));
    assert_eq!(layer.interval(), ShardedLayer::MIN_INTERVAL);
    for layer in [layer, layer.rough()] {
        let (recorder, render) = layered_with(layer);
        metrics::with_local_recorder(&recorder, || metrics::counter!("zero").increment(5));
        let deadline = Instant::now() + Duration::from_secs(30);
        while count(&render.render(), "zero") != 5 {
            assert!(Instant::now() < deadline, "never folded");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Gauges and descriptions reach the exporter unchanged; a histogram's
/// records are folded in with their count exact and each value within
/// 1/32 (see "Histograms under the layer").
#[test]
fn gauges_pass_through_and_histograms_fold_within_a_32nd() {
    let (recorder, render) = layered(Duration::from_secs(3600));
    metrics::with_local_recorder(&recorder, || {
        metrics::describe_counter!("described", "what it counts");
        metrics::counter!("described").increment(1);
        metrics::gauge!("level", "tank" => "a").set(7.5);
        metrics::histogram!("latency").record(2.0);
    });
    recorder.flush();
    let text = render.render();
    let s = samples(&text);
    assert_eq!(s.get("level{tank=\"a\"}"), Some(&7.5), "{text}");
    assert_eq!(s.get("latency_count"), Some(&1.0), "{text}");
    let sum = s["latency_sum"];
    assert!((sum - 2.0).abs() <= 2.0 / 32.0, "{text}");
    assert!(text.contains("# HELP described what it counts"), "{text}");
    assert_eq!(recorder.keys(), 1, "only counters are sharded");
}

/// Over an exporter that forgets idle series: a key counted again after
/// the exporter forgot it shows again (the layer registers it again after
/// a quiet pass, not into the forgotten handle), counters and histograms.
#[test]
fn keys_come_back_after_the_exporter_forgot_them() {
    let prometheus = PrometheusBuilder::new()
        .idle_timeout(
            metrics_util::MetricKindMask::ALL,
            Some(Duration::from_millis(100)),
        )
        .build_recorder();
    let render = prometheus.handle();
    let recorder = ShardedLayer::new()
        .with_interval(Duration::from_millis(5))
        .wrap(prometheus);
    // Through a fold, and straight through (an absolute, a negative value).
    let count_all = |jobs: u64, ms: f64| {
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!("jobs").increment(jobs);
            metrics::histogram!("lat").record(ms);
            metrics::counter!("abs").absolute(jobs);
            metrics::histogram!("neg").record(-ms);
        });
        recorder.flush();
        let text = render.render();
        let counts = ["jobs", "lat_count", "abs", "neg_count"].map(|s| count(&text, s));
        (counts, text)
    };
    let (counts, text) = count_all(1, 1.0);
    assert_eq!(counts, [1, 1, 1, 1], "{text}");
    std::thread::sleep(Duration::from_millis(250));
    let text = render.render(); // idle past the timeout: forgotten
    assert!(!samples(&text).contains_key("jobs"), "{text}");
    let (counts, text) = count_all(5, 2.0);
    assert_eq!(counts, [5, 1, 5, 1], "{text}");
}

/// The recorder underneath goes with the layer's recorder, though threads'
/// caches and kept handles still hold its keys.
#[test]
fn dropping_the_recorder_drops_the_one_underneath() {
    use metrics::{Key, KeyName, Metadata, SharedString, Unit};
    use std::sync::atomic::{AtomicBool, Ordering};
    struct Flagged(Arc<AtomicBool>, metrics::NoopRecorder);
    impl Drop for Flagged {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    impl Recorder for Flagged {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, k: &Key, m: &Metadata<'_>) -> metrics::Counter {
            self.1.register_counter(k, m)
        }
        fn register_gauge(&self, k: &Key, m: &Metadata<'_>) -> metrics::Gauge {
            self.1.register_gauge(k, m)
        }
        fn register_histogram(&self, k: &Key, m: &Metadata<'_>) -> metrics::Histogram {
            self.1.register_histogram(k, m)
        }
    }
    let dropped = Arc::new(AtomicBool::new(false));
    let flagged = Flagged(Arc::clone(&dropped), metrics::NoopRecorder);
    let recorder = ShardedLayer::new().wrap(flagged);
    let kept = metrics::with_local_recorder(&recorder, || {
        metrics::counter!("cached").increment(1); // in this thread's cache
        metrics::histogram!("h").record(1.0);
        metrics::counter!("kept")
    });
    drop(recorder);
    assert!(dropped.load(Ordering::Relaxed));
    kept.increment(1); // counted nowhere, and no panic
}

/// A thread's cache belongs to one recorder: the same key on a second
/// recorder, used on the same thread, counts there and only there.
#[test]
fn thread_caches_do_not_cross_recorders() {
    let (a, render_a) = layered(Duration::from_secs(3600));
    let (b, render_b) = layered(Duration::from_secs(3600));
    metrics::with_local_recorder(&a, || metrics::counter!("same").increment(1));
    metrics::with_local_recorder(&b, || metrics::counter!("same").increment(10));
    metrics::with_local_recorder(&a, || metrics::counter!("same").increment(100));
    drop(a);
    // A fresh recorder after a drop (its state may even reuse the address).
    let (c, render_c) = layered(Duration::from_secs(3600));
    metrics::with_local_recorder(&c, || metrics::counter!("same").increment(1000));
    drop((b, c));
    assert_eq!(count(&render_a.render(), "same"), 101);
    assert_eq!(count(&render_b.render(), "same"), 10);
    assert_eq!(count(&render_c.render(), "same"), 1000);
}

/// `absolute` through the layer: pending increments are folded first, then
/// the exporter's own `absolute` (a "set to at least") applies.
#[test]
fn absolute_through_the_layer() {
    for layer in layers(true) {
        absolute_through(layer);
    }
}

fn absolute_through(layer: ShardedLayer) {
    let (recorder, render) = layered_with(layer);
    metrics::with_local_recorder(&recorder, || {
        let c = metrics::counter!("mirrored");
        c.increment(3);
        c.absolute(10);
        assert_eq!(count(&render.render(), "mirrored"), 10);
        c.increment(2);
        c.absolute(5); // below: no change
        recorder.flush();
        assert_eq!(count(&render.render(), "mirrored"), 12);
        c.increment(20); // pending: 32 once folded, above 30
        c.absolute(30);
        assert_eq!(count(&render.render(), "mirrored"), 32);
    });
}

/// Four threads raise a counter through the same values at once, with no
/// increments: it must end at exactly the largest value (concurrent
/// `absolute` calls never stack).
fn absolute_only_is_exact<C: CounterFn + Send + Sync>(c: &C, sum: impl Fn(&C) -> u64) {
    const TOP: u64 = 300_000;
    let start = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let start = &start;
            s.spawn(move || {
                start.wait();
                for v in 1..=TOP {
                    c.absolute(v);
                }
            });
        }
    });
    assert_eq!(sum(c), TOP);
}

#[test]
fn counter_absolute_never_stacks() {
    absolute_only_is_exact(&Counter::new(), Counter::sum);
}

#[test]
fn rough_absolute_never_stacks() {
    absolute_only_is_exact(&RoughCounter::new(), RoughCounter::sum);
}

/// `absolute` mixed with increments: the total ends at least the largest
/// `absolute` and at least the increments, and at most their sum; a
/// thread's own `sum` right after its `absolute(v)` reads at least `v`.
fn absolute_with_increments<C: CounterFn + Send + Sync>(c: &C, sum: impl Fn(&C) -> u64 + Sync) {
    const TOP: u64 = 50_000;
    let start = Barrier::new(THREADS);
    let sum = &sum;
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let start = &start;
            s.spawn(move || {
                start.wait();
                for i in 1..=TOP {
                    if t % 2 == 0 {
                        c.increment(1);
                    } else if i % 16 == 0 {
                        c.absolute(i);
                        assert!(sum(c) >= i, "sum below an absolute just made");
                    }
                }
            });
        }
    });
    let increments = (THREADS as u64).div_ceil(2) * TOP;
    let total = sum(c);
    assert!(total >= TOP.max(increments), "total {total}");
    assert!(total <= TOP + increments, "total {total}");
}

#[test]
fn counter_absolute_with_increments() {
    absolute_with_increments(&Counter::new(), Counter::sum);
}

#[test]
fn rough_absolute_with_increments() {
    absolute_with_increments(&RoughCounter::new(), RoughCounter::sum);
}

/// The counters themselves behind the facade's handle: every increment
/// from every thread lands.
#[test]
fn counters_behind_the_facade_handle() {
    let exact = Arc::new(Counter::new());
    let rough = Arc::new(RoughCounter::new());
    let handles = [
        metrics::Counter::from_arc(exact.clone()),
        metrics::Counter::from_arc(rough.clone()),
    ];
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let handles = handles.clone();
            s.spawn(move || {
                for _ in 0..PER_THREAD {
                    handles.iter().for_each(|h| h.increment(2));
                }
            });
        }
    });
    assert_eq!(exact.sum(), 2 * THREADS as u64 * PER_THREAD);
    assert_eq!(rough.sum(), 2 * THREADS as u64 * PER_THREAD);
}

/// Issue 19, item 5, for the layer: `thread::scope` returns before its
/// threads' thread-local destructors run, but the layer's folds read the
/// counters' exact totals (`take`, `sum`), so a flush right after the scope
/// hands the inner recorder every increment. 50 trials, both kinds.
#[test]
fn a_flush_right_after_a_thread_scope_renders_every_increment() {
    for layer in [ShardedLayer::new(), ShardedLayer::new().rough()] {
        let (recorder, handle) = layered_with(layer.with_interval(Duration::from_secs(3600)));
        for trial in 1..=50u64 {
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        metrics::with_local_recorder(&recorder, || {
                            for _ in 0..1000 {
                                metrics::counter!("scoped").increment(1);
                            }
                        })
                    });
                }
            });
            recorder.flush();
            assert_eq!(count(&handle.render(), "scoped"), trial * 4000);
        }
    }
}

/// One generic check for every type the contract gives `CounterFn`:
/// increments through the facade's handle from several threads, then an
/// `absolute` below and one above the total, read back with `Count::read`.
fn counter_fn_through_the_contract<C>()
where
    C: CounterFn + shardcount::Count + Default + Send + Sync + 'static,
{
    let c = Arc::new(C::default());
    let handle = metrics::Counter::from_arc(c.clone());
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let handle = handle.clone();
            s.spawn(move || (0..PER_THREAD).for_each(|_| handle.increment(3)));
        }
    });
    let total = 3 * THREADS as u64 * PER_THREAD;
    assert_eq!(c.read(), total);
    handle.absolute(total - 1); // below: unchanged
    assert_eq!(c.read(), total);
    handle.absolute(total + 5);
    assert_eq!(c.read(), total + 5);
}

#[test]
fn counter_fn_for_every_counter_type() {
    counter_fn_through_the_contract::<Counter>();
    counter_fn_through_the_contract::<RoughCounter>();
}

/// A handle a thread registered (and so owns) but sent to other threads:
/// their increments go through the key's shared counter, the owner's
/// through its own word, and the exporter gets both, exactly.
#[test]
fn a_handle_sent_to_other_threads_counts_every_increment() {
    for layer in layers(false) {
        let (recorder, render) = layered_with(layer);
        let owned = metrics::with_local_recorder(&recorder, || metrics::counter!("sent"));
        std::thread::scope(|s| {
            for _ in 0..3 {
                let h = owned.clone();
                s.spawn(move || (0..PER_THREAD).for_each(|_| h.increment(1)));
            }
            (0..PER_THREAD).for_each(|_| owned.increment(2));
        });
        recorder.flush();
        assert_eq!(count(&render.render(), "sent"), 5 * PER_THREAD);
    }
}

/// Keys looked up every call with the same labels in another order, with
/// label values built at run time (so their strings have new addresses on
/// every call), and more keys than a thread's fast table has slots: each
/// series is counted exactly, once.
#[test]
fn runtime_labels_any_order_and_many_keys_are_exact() {
    const KEYS: usize = 200;
    let (recorder, render) = layered(Duration::from_millis(1));
    std::thread::scope(|s| {
        for t in 0..2 {
            let recorder = &recorder;
            s.spawn(move || {
                metrics::with_local_recorder(recorder, || {
                    for round in 0..50 {
                        for k in 0..KEYS {
                            let v = format!("k{k}");
                            if (round + t) % 2 == 0 {
                                metrics::counter!("many", "key" => v, "side" => "a").increment(1);
                            } else {
                                metrics::counter!("many", "side" => "a", "key" => v).increment(1);
                            }
                        }
                    }
                });
            });
        }
    });
    recorder.flush();
    let text = render.render();
    let samples = samples(&text);
    let series: Vec<_> = samples.keys().filter(|k| k.starts_with("many{")).collect();
    assert_eq!(series.len(), KEYS, "{text}");
    for k in 0..KEYS {
        let total: f64 = samples
            .iter()
            .filter(|(name, _)| name.starts_with("many{") && name.contains(&format!("\"k{k}\"")))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(total, 100.0, "key k{k}:\n{text}");
    }
    assert_eq!(recorder.keys(), KEYS);
}

/// `publish` hands a two-label family to the recorder: one series per
/// member with both labels, at its total after adds from several threads;
/// publishing again after more adds moves the totals on.
#[test]
fn publish_renders_both_labels_of_a_labelled_counter() {
    #[derive(Clone, Copy, shardcount::Label)]
    enum Method {
        Get,
        Post,
    }
    #[derive(Clone, Copy, shardcount::Label)]
    enum Status {
        Ok,
        Failed,
    }
    let family = shardcount::LabelledCounter::<(Method, Status)>::new();
    let prometheus = PrometheusBuilder::new().build_recorder();
    let render = prometheus.handle();
    let add = || {
        std::thread::scope(|s| {
            for t in 0..4 {
                let family = &family;
                s.spawn(move || {
                    let status = if t % 2 == 0 {
                        Status::Ok
                    } else {
                        Status::Failed
                    };
                    (0..10_000).for_each(|_| family.inc((Method::Post, status)));
                });
            }
        });
    };
    add();
    metrics::with_local_recorder(&prometheus, || {
        shardcount::integrations::metrics::publish("requests", &family)
    });
    let text = render.render();
    assert_eq!(
        count(&text, r#"requests{method="post",status="ok"}"#),
        20_000
    );
    assert_eq!(
        count(&text, r#"requests{method="post",status="failed"}"#),
        20_000
    );
    assert!(
        text.contains(r#"requests{method="get",status="ok"} 0"#),
        "{text}"
    );
    add();
    metrics::with_local_recorder(&prometheus, || {
        shardcount::integrations::metrics::publish("requests", &family)
    });
    let text = render.render();
    assert_eq!(
        count(&text, r#"requests{method="post",status="failed"}"#),
        40_000
    );
    // A map publishes its keys under the label name it was given.
    let users = shardcount::CounterMap::<u64>::new().with_label_name("user_id");
    users.add(&42, 3);
    metrics::with_local_recorder(&prometheus, || {
        shardcount::integrations::metrics::publish("visits", &users)
    });
    assert_eq!(count(&render.render(), r#"visits{user_id="42"}"#), 3);
}

/// A layer folding every millisecond that evicts keys idle for 1 ms.
fn evicting() -> ShardedLayer {
    ShardedLayer::new()
        .with_interval(Duration::from_millis(1))
        .evict_idle_after(Duration::from_millis(1))
}

/// Waits (up to a generous deadline, never asserting on time) until the
/// recorder holds `keys` keys.
fn wait_for_keys<R>(recorder: &ShardedRecorder<R>, keys: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while recorder.keys() != keys {
        assert!(
            Instant::now() < deadline,
            "keys stayed at {} (waiting for {keys})",
            recorder.keys()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Keys that go idle are evicted (the layer's key count drops to 0) and
/// their totals are in the exporter; counting a key again registers it
/// again, and its series carries on from its total.
#[test]
fn idle_keys_are_evicted_and_the_exporter_stays_exact() {
    for layer in [evicting(), evicting().rough()] {
        let (recorder, render) = layered_with(layer);
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let recorder = &recorder;
                s.spawn(move || {
                    metrics::with_local_recorder(recorder, || {
                        for user in 0..50u64 {
                            let user = format!("u{user}");
                            metrics::counter!("visits", "user" => user).increment(t + 1);
                        }
                    });
                });
            }
        });
        wait_for_keys(&recorder, 0);
        let text = render.render();
        for user in 0..50 {
            assert_eq!(count(&text, &format!("visits{{user=\"u{user}\"}}")), 3);
        }
        metrics::with_local_recorder(&recorder, || {
            metrics::counter!("visits", "user" => "u7").increment(10)
        });
        recorder.flush();
        assert_eq!(count(&render.render(), "visits{user=\"u7\"}"), 13);
        wait_for_keys(&recorder, 0);
        assert_eq!(count(&render.render(), "visits{user=\"u7\"}"), 13);
    }
}

/// Two threads count one key through `counter!` in bursts; between
/// bursts they either wait until the key is evicted (so the next burst
/// starts on an evicted handle in each cache) or pause briefly (so an
/// eviction may race the next burst). The exported total ends exact.
#[test]
fn evictions_racing_bursts_and_pauses_lose_nothing() {
    const ROUNDS: u64 = 20;
    const BURST: u64 = 2_000;
    for layer in [evicting(), evicting().rough()] {
        let (recorder, render) = layered_with(layer);
        let both = Barrier::new(2);
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let (recorder, both) = (&recorder, &both);
                s.spawn(move || {
                    metrics::with_local_recorder(recorder, || {
                        for round in 0..ROUNDS {
                            for i in 0..BURST {
                                metrics::counter!("bursty").increment(1);
                                if i % 500 == 0 {
                                    std::thread::yield_now();
                                }
                            }
                            if round % 2 == 0 {
                                both.wait();
                                wait_for_keys(recorder, 0);
                                both.wait();
                            } else {
                                std::thread::sleep(Duration::from_micros(500 * (t + round % 3)));
                            }
                        }
                    });
                });
            }
        });
        recorder.flush();
        assert_eq!(count(&render.render(), "bursty"), 2 * ROUNDS * BURST);
    }
}

/// A handle kept outside the layer keeps its key from eviction, and keeps
/// counting exactly, from its thread and others; once dropped, the key
/// goes, its total in the exporter.
#[test]
fn a_kept_handle_counts_exactly_across_idle_time() {
    for layer in [evicting(), evicting().rough()] {
        let (recorder, render) = layered_with(layer);
        let kept = metrics::with_local_recorder(&recorder, || {
            metrics::counter!("other").increment(1);
            metrics::counter!("kept")
        });
        kept.increment(1);
        // The other key goes; the kept one stays, however long it idles.
        wait_for_keys(&recorder, 1);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(recorder.keys(), 1, "a key with a kept handle was evicted");
        std::thread::scope(|s| {
            let sent = kept.clone();
            s.spawn(move || (0..PER_THREAD).for_each(|_| sent.increment(1)));
            (0..PER_THREAD).for_each(|_| kept.increment(2));
        });
        recorder.flush();
        assert_eq!(count(&render.render(), "kept"), 1 + 3 * PER_THREAD);
        drop(kept);
        wait_for_keys(&recorder, 0);
        metrics::with_local_recorder(&recorder, || metrics::counter!("kept").increment(5));
        recorder.flush();
        let text = render.render();
        assert_eq!(count(&text, "kept"), 6 + 3 * PER_THREAD, "{text}");
        assert_eq!(count(&text, "other"), 1, "{text}");
    }
}

/// Two threads count through one handle until the key splits (at most 50
/// bursts), then stop; the background pass must merge it back (no shard
/// rows left) and `exported` must then read every count. Twice: a merged
/// key splits and merges anew.
fn splits_then_merges(
    r: &ShardedRecorder<PrometheusRecorder>,
    count: impl Fn() + Sync,
    exported: impl Fn() -> u64,
) {
    const PER: u64 = 200_000;
    let mut expected = 0;
    for round in 1..=2 {
        let mut split = false;
        let mut bursts = 0;
        while !split {
            bursts += 1;
            assert!(bursts <= 50, "round {round}: the key never split");
            expected += 2 * PER;
            let done = std::sync::atomic::AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..2 {
                    s.spawn(|| {
                        (0..PER).for_each(|_| count());
                        done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    });
                }
                // Looked at while they count (a merge may follow at once).
                while !split && done.load(std::sync::atomic::Ordering::Relaxed) < 2 {
                    split = r.shards() > 0;
                    std::thread::yield_now();
                }
            });
        }
        let start = Instant::now();
        while r.shards() > 0 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "round {round}: still sharded a minute after the load stopped"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        r.flush();
        assert_eq!(exported(), expected, "round {round}");
    }
}

/// A `metrics::Counter` registered once and shared by two threads counts
/// on the key's counter, which contention splits; once the threads stop,
/// the background pass merges it back and the exported total is exact.
#[test]
fn a_shared_handles_counter_splits_under_contention_and_merges_when_quiet() {
    let (r, render) = layered(Duration::from_millis(1));
    let meta = metrics::Metadata::new("test", metrics::Level::INFO, None);
    let c = r.register_counter(&metrics::Key::from_name("shared"), &meta);
    splits_then_merges(&r, || c.increment(1), || count(&render.render(), "shared"));
}

/// The same for a histogram key: every record goes to the key's
/// histogram, which contention splits and the pass merges back.
#[test]
fn a_histogram_key_splits_under_contention_and_merges_when_quiet() {
    let (r, render) = layered(Duration::from_millis(1));
    let meta = metrics::Metadata::new("test", metrics::Level::INFO, None);
    let h = r.register_histogram(&metrics::Key::from_name("latency"), &meta);
    splits_then_merges(
        &r,
        || h.record(0.25),
        || count(&render.render(), "latency_count"),
    );
}
