//! The exporter against in-process sinks: exact totals through failures,
//! lost replies, a sink that loses state, and dropped counters.
#![cfg(not(shardcount_loom))]

use shardcount::contract::{Count, Kind};
use shardcount::export::{
    Batch, ExportConfig, Exporter, MemorySink, Outcome, Sink, SinkError, Source, WriterId,
};
use shardcount::RoughCounter;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn soon() -> Instant {
    Instant::now() + Duration::from_secs(30)
}

fn fast() -> ExportConfig {
    ExportConfig {
        interval: Duration::from_millis(1),
        batch_keys: 3,
        pipeline: 2,
        min_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        retain: Duration::from_secs(3),
    }
}

/// A sink that applies every delivery but reports an error for the first
/// and then every `nth` one (the reply is "lost"; `u64::MAX`: never), and
/// can forget everything once.
#[derive(Clone)]
struct Flaky {
    inner: Arc<Mutex<MemorySink>>,
    calls: Arc<AtomicU64>,
    nth: u64,
    forget_at: Arc<Mutex<Option<u64>>>,
}

impl Sink for Flaky {
    fn deliver(&mut self, batches: &[Batch]) -> Result<Vec<Outcome>, SinkError> {
        let call = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        if *self.forget_at.lock().unwrap() == Some(call) {
            // A store restored from nothing: totals and writers gone.
            *self.inner.lock().unwrap() = MemorySink::new();
        }
        let out = self.inner.lock().unwrap().deliver(batches)?;
        // Calls 1, 1 + nth, 1 + 2 nth, ...: the first reply is always lost,
        // so a retry (and a duplicate) happens however few calls the
        // exporter makes before its final flush.
        if self.nth != u64::MAX && (call - 1).is_multiple_of(self.nth) {
            return Err(SinkError::new("reply lost"));
        }
        Ok(out)
    }
}

#[test]
fn lost_replies_counted_once_while_threads_add() {
    let sink = Flaky {
        inner: Arc::new(Mutex::new(MemorySink::new())),
        calls: Arc::new(AtomicU64::new(0)),
        nth: 3,
        forget_at: Arc::new(Mutex::new(None)),
    };
    let counters: Arc<Vec<Arc<RoughCounter>>> = Arc::new(
        (0..10)
            .map(|_| Arc::new(RoughCounter::new().with_batch(8)))
            .collect(),
    );
    let exporter = Exporter::with_config(sink.clone(), fast());
    for (i, c) in counters.iter().enumerate() {
        exporter.register(&format!("k{i}"), Arc::clone(c));
    }
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let counters = Arc::clone(&counters);
            std::thread::spawn(move || {
                for i in 0..50_000u64 {
                    counters[((i * 7 + t) % 10) as usize].add(1 + i % 3);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    exporter.flush(soon()).unwrap();
    let stats = exporter.stats();
    assert!(stats.errors > 0 && stats.duplicates > 0, "{stats:?}");
    for (i, c) in counters.iter().enumerate() {
        assert_eq!(
            sink.inner.lock().unwrap().get(&format!("k{i}")),
            c.sum() as i64
        );
    }
    assert_eq!(
        stats.delivered,
        counters.iter().map(|c| c.sum()).sum::<u64>()
    );
}

/// A sink that never loses a reply (it may forget everything once, see
/// `forget_at`), and an exporter of one counter, `c`, into it that
/// delivers only when flushed and retains batches for `retain`.
fn exporting_one(retain: Duration) -> (Flaky, Arc<RoughCounter>, Exporter) {
    let sink = Flaky {
        inner: Arc::new(Mutex::new(MemorySink::new())),
        calls: Arc::new(AtomicU64::new(0)),
        nth: u64::MAX,
        forget_at: Arc::new(Mutex::new(None)),
    };
    let c = Arc::new(RoughCounter::new());
    let exporter = Exporter::with_config(
        sink.clone(),
        ExportConfig {
            interval: Duration::from_secs(3600),
            retain,
            ..fast()
        },
    );
    exporter.register("c", Arc::clone(&c));
    (sink, c, exporter)
}

/// The sink forgets everything once confirmed batch 1 is `age` old;
/// returns (sink total, exporter stats, first writer).
fn forgetful(retain: Duration) -> (i64, shardcount::export::ExportStats, Option<WriterId>) {
    let (sink, c, exporter) = exporting_one(retain);
    c.add(5);
    exporter.flush(soon()).unwrap();
    let first = exporter.stats().writer;
    *sink.forget_at.lock().unwrap() = Some(sink.calls.load(Ordering::Relaxed) + 1);
    c.add(2);
    // The sink forgot batch 1; batch 2 is a gap.
    exporter.flush(soon()).unwrap();
    c.add(1);
    exporter.flush(soon()).unwrap();
    assert_eq!(exporter.pending(), 0);
    let total = sink.inner.lock().unwrap().get("c");
    (total, exporter.stats(), first)
}

#[test]
fn sink_that_lost_retained_batches_gets_them_again() {
    let (total, stats, first) = forgetful(Duration::from_secs(60));
    assert_eq!((stats.gaps, stats.lost), (1, 0));
    assert_ne!(stats.writer, first);
    assert_eq!(total, 8);
    assert_eq!(stats.delivered, 8);
}

#[test]
fn sink_that_lost_unretained_batches_counts_the_loss() {
    let (total, stats, first) = forgetful(Duration::ZERO);
    assert_eq!((stats.gaps, stats.lost), (1, 1));
    assert_ne!(stats.writer, first);
    assert_eq!(total, 3); // the 5 of batch 1 are gone
    assert_eq!(stats.delivered, 8); // as confirmed, once each
}

/// A sink down for longer than `retain` that comes back without batches it
/// had confirmed (a restart from an old state) gets them again: time spent
/// failing does not age the retained batches.
#[test]
fn an_outage_longer_than_retain_still_repairs_the_gap() {
    let (sink, c, exporter) = exporting_one(Duration::from_millis(50));
    c.add(5);
    exporter.flush(soon()).unwrap(); // batch 1 confirmed, retained
    sink.inner.lock().unwrap().set_down(true);
    c.add(2);
    let down = Instant::now() + Duration::from_millis(200);
    assert!(exporter.flush(down).is_err()); // failing past `retain`
                                            // Back, from a state without batch 1.
    *sink.forget_at.lock().unwrap() = Some(sink.calls.load(Ordering::Relaxed) + 1);
    sink.inner.lock().unwrap().set_down(false);
    exporter.flush(soon()).unwrap();
    let stats = exporter.stats();
    assert_eq!((stats.gaps, stats.lost), (1, 0), "{stats:?}");
    assert_eq!(sink.inner.lock().unwrap().get("c"), 7);
}

/// A counter that says when it is dropped (and shows that a type of one's
/// own registers through the contract).
struct Tracked {
    c: RoughCounter,
    dropped: Arc<AtomicBool>,
}

impl Count for Tracked {
    const KIND: Kind = Kind::Counter;
    fn read(&self) -> u64 {
        self.c.sum()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::Relaxed);
    }
}

#[test]
fn dropped_counter_is_read_once_more_and_let_go() {
    let sink = MemorySink::new();
    let exporter = Exporter::with_config(
        sink.clone(),
        ExportConfig {
            interval: Duration::from_secs(3600),
            ..fast()
        },
    );
    let dropped = Arc::new(AtomicBool::new(false));
    let c = Arc::new(Tracked {
        c: RoughCounter::new(),
        dropped: Arc::clone(&dropped),
    });
    exporter.register("gone", Arc::clone(&c));
    std::thread::scope(|s| {
        s.spawn(|| c.c.add(11));
    });
    let weak = Arc::downgrade(&c);
    drop(c);
    exporter.flush(soon()).unwrap();
    assert_eq!(sink.get("gone"), 11);
    // A `Weak` could still be upgraded and added through: kept.
    assert!(!dropped.load(Ordering::Relaxed));
    weak.upgrade().unwrap().c.add(2);
    drop(weak);
    // The exporter's is the last handle: read once more, then let go.
    exporter.flush(soon()).unwrap();
    assert_eq!(sink.get("gone"), 13);
    assert!(dropped.load(Ordering::Relaxed));
    exporter.flush(soon()).unwrap();
    assert_eq!(sink.get("gone"), 13);
}

/// A map key removed (or evicted for good) leaves what was shipped for it
/// in the sink; made again, it counts from zero on top (its cursor went
/// with it: a stale one shipped `1 - 5` and left the sink at 1).
#[test]
fn a_map_key_gone_and_made_again_adds_to_what_the_sink_holds() {
    let map: Arc<shardcount::CounterMap<String>> = Arc::default();
    let sink = MemorySink::new();
    let exporter = Exporter::new(sink.clone(), Duration::from_secs(3600));
    exporter.register("m:", Arc::clone(&map));
    map.add("removed", 5);
    map.add("evicted", 7);
    exporter.flush(soon()).unwrap();
    assert_eq!(map.remove("removed"), Some(5));
    assert!(map.evict_idle(Duration::ZERO).is_empty()); // notes "evicted"
    assert_eq!(
        map.evict_idle(Duration::ZERO),
        vec![("evicted".to_owned(), 7)]
    );
    exporter.flush(soon()).unwrap();
    // The next call lets the evicted key go from the map's reads.
    assert!(map.evict_idle(Duration::ZERO).is_empty());
    exporter.flush(soon()).unwrap();
    assert_eq!((sink.get("m:removed"), sink.get("m:evicted")), (5, 7));
    map.add("removed", 1);
    map.add("evicted", 2);
    exporter.flush(soon()).unwrap();
    assert_eq!((sink.get("m:removed"), sink.get("m:evicted")), (6, 9));
}

/// A keyed source whose key set grows: each key is shipped from 0.
struct Grow(Mutex<Vec<(String, u64)>>);

impl Source for Grow {
    fn read(&self, f: &mut dyn FnMut(&str, u64)) {
        for (k, v) in self.0.lock().unwrap().iter() {
            f(k, *v);
        }
    }
}

#[test]
fn keyed_source_many_keys_in_small_batches() {
    let src = Arc::new(Grow(Mutex::new(Vec::new())));
    let sink = MemorySink::new();
    let exporter = Exporter::with_config(
        sink.clone(),
        ExportConfig {
            interval: Duration::from_secs(3600),
            ..fast()
        },
    );
    exporter.register_source(Arc::clone(&src));
    for round in 1..=3u64 {
        src.0
            .lock()
            .unwrap()
            .extend((0..10).map(|i| (format!("r{round}k{i}"), 0)));
        for (_, v) in src.0.lock().unwrap().iter_mut() {
            *v += round;
        }
        exporter.flush(soon()).unwrap();
    }
    // 3 keys per batch, 2 batches per delivery: many deliveries, exact.
    let totals = sink.totals();
    assert_eq!(totals.len(), 30);
    assert_eq!(totals["r1k0"], 6);
    assert_eq!(totals["r2k9"], 5);
    assert_eq!(totals["r3k3"], 3);
    assert!(sink.applied_batches() >= 20);
}

/// A key frozen in a failed batch and pending again is one undelivered key,
/// not two.
#[test]
fn undelivered_keys_counts_a_frozen_and_pending_key_once() {
    static C: RoughCounter = RoughCounter::new();
    let sink = MemorySink::new();
    let exporter = Exporter::new(sink.clone(), Duration::from_secs(60));
    exporter.register("only", &C);
    sink.set_down(true);
    C.add(5);
    // The failed delivery leaves the key frozen in a batch.
    let first = exporter
        .flush(Instant::now() + Duration::from_millis(30))
        .unwrap_err();
    assert_eq!(
        (first.report.undelivered, first.report.undelivered_keys),
        (5, 1)
    );
    C.add(5);
    // Now the key is both frozen (5) and pending (5).
    let second = exporter
        .flush(Instant::now() + Duration::from_millis(30))
        .unwrap_err();
    assert_eq!(
        (second.report.undelivered, second.report.undelivered_keys),
        (10, 1),
        "{second}"
    );
    assert_eq!(exporter.stats().pending_keys, 1);
    sink.set_down(false);
    exporter.flush(soon()).unwrap();
    assert_eq!(sink.get("only"), 10);
}

/// Issue 19, item 1: a counter cannot be registered under a key reserved
/// for sinks' bookkeeping, and a source that reports one has its deltas
/// rejected while its other keys are delivered exactly.
#[test]
fn reserved_keys_are_refused_at_registration_and_rejected_from_sources() {
    static C: RoughCounter = RoughCounter::new();
    let sink = MemorySink::new();
    let exporter = Exporter::new(sink.clone(), Duration::from_secs(60));
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        exporter.register("__writers", &C);
    }))
    .unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("\"__writers\""), "{msg}");

    struct Both(AtomicU64);
    impl Source for Both {
        fn read(&self, f: &mut dyn FnMut(&str, u64)) {
            let v = self.0.load(Ordering::Relaxed);
            f("a", v);
            f("__writers", 3 * v);
        }
    }
    let both = Arc::new(Both(AtomicU64::new(0)));
    exporter.register_source(Arc::clone(&both));
    both.0.store(5, Ordering::Relaxed);
    exporter.flush(soon()).unwrap();
    both.0.store(7, Ordering::Relaxed);
    exporter.flush(soon()).unwrap();
    assert_eq!(sink.get("a"), 7);
    assert_eq!(sink.get("__writers"), 0);
    assert_eq!(exporter.stats().rejected, 21);
}

/// Any interval below 1 ms, zero included, runs every 1 ms: no panic, and
/// the thread delivers on its own.
#[test]
fn zero_interval_delivers_every_millisecond() {
    static C: RoughCounter = RoughCounter::new();
    let sink = MemorySink::new();
    let exporter = Exporter::new(sink.clone(), Duration::ZERO);
    exporter.register("c", &C);
    C.add(6);
    let deadline = soon();
    while sink.get("c") != 6 {
        assert!(Instant::now() < deadline, "never delivered");
        std::thread::sleep(Duration::from_millis(1));
    }
}

static EXACT: shardcount::Counter = shardcount::Counter::new();
static ROUGH: RoughCounter = RoughCounter::new().with_batch(16);
shardcount::local_counter!(static LOCAL, batch = 32);
static PEAK: shardcount::MaxCounter = shardcount::MaxCounter::new();

/// Every counter type through `register`, while threads add and the
/// exporter runs every millisecond: exact per key after the flush.
#[test]
fn every_counter_type_registers_and_exports_exactly() {
    use shardcount::{CounterMap, CounterSet};
    const THREADS: u64 = 4;
    const ADDS: u64 = 20_000;
    let set = Arc::new(CounterSet::new(5));
    let map: Arc<CounterMap<String>> = Arc::new(CounterMap::new());
    let sink = MemorySink::new();
    let exporter = Exporter::with_config(sink.clone(), fast());
    exporter.register("exact", &EXACT);
    exporter.register("rough", &ROUGH);
    exporter.register("local", &LOCAL);
    exporter.register("peak", &PEAK);
    exporter.register("set.", Arc::clone(&set));
    exporter.register("route:", Arc::clone(&map));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (set, map) = (&set, &map);
            s.spawn(move || {
                for i in 0..ADDS {
                    EXACT.inc();
                    ROUGH.add(2);
                    LOCAL.add(3);
                    PEAK.record(t * ADDS + i);
                    set.add((i % 5) as usize, 1 + t);
                    map.add(&format!("/{}", i % 7), 1);
                }
            });
        }
    });
    exporter.flush(soon()).unwrap();
    let totals = sink.totals();
    let n = (THREADS * ADDS) as i64;
    assert_eq!(totals["exact"], n);
    assert_eq!(totals["rough"], 2 * n);
    assert_eq!(totals["local"], 3 * n);
    assert_eq!(totals["peak"], n - 1); // a gauge: its current value
    for i in 0..5 {
        // Each thread adds (1 + t) to every index ADDS / 5 times.
        let per_thread: i64 = (1..=THREADS as i64).sum();
        assert_eq!(totals[&format!("set.{i}")], per_thread * (ADDS / 5) as i64);
    }
    for r in 0..7 {
        let hits = (0..ADDS).filter(|i| i % 7 == r).count() as i64;
        assert_eq!(totals[&format!("route:/{r}")], THREADS as i64 * hits);
    }
    assert_eq!(totals.len(), 4 + 5 + 7);
    // Nothing more is shipped on a second flush, and a take on a gauge is
    // shipped as the fall it is.
    PEAK.reset();
    exporter.flush(soon()).unwrap();
    assert_eq!(sink.get("peak"), 0);
    assert_eq!(sink.get("exact"), n);
}

#[test]
#[should_panic(expected = "Exporter::register(\"__writers\")")]
fn reserved_key_panics_with_the_key() {
    static C: shardcount::Counter = shardcount::Counter::new();
    let exporter = Exporter::new(MemorySink::new(), Duration::from_secs(60));
    exporter.register("__writers", &C);
}

#[test]
#[should_panic(expected = "Exporter::register(\"_\")")]
fn family_key_a_label_could_make_reserved_panics() {
    let exporter = Exporter::new(MemorySink::new(), Duration::from_secs(60));
    let map: Arc<shardcount::CounterMap<String>> = Arc::new(shardcount::CounterMap::new());
    exporter.register("_", map);
}

#[test]
fn single_count_may_use_a_short_key() {
    static C: shardcount::Counter = shardcount::Counter::new();
    let sink = MemorySink::new();
    let exporter = Exporter::new(sink.clone(), Duration::from_secs(60));
    exporter.register("_", &C);
    C.add(3);
    exporter.flush(soon()).unwrap();
    assert_eq!(sink.get("_"), 3);
}

/// A source that reports one key twice in a read (a family whose labels
/// print alike) exports the sum: the second report used to overwrite the
/// first's cursor, shipping +a then -a, so the sink kept only one member.
#[test]
fn a_key_reported_twice_in_one_read_exports_the_sum() {
    struct Twice([AtomicU64; 2]);
    impl Source for Twice {
        fn read(&self, f: &mut dyn FnMut(&str, u64)) {
            f("same", self.0[0].load(Ordering::Relaxed));
            f("same", self.0[1].load(Ordering::Relaxed));
        }
    }
    let src = Arc::new(Twice([AtomicU64::new(0), AtomicU64::new(0)]));
    let sink = MemorySink::new();
    let exporter = Exporter::new(sink.clone(), Duration::from_secs(60));
    exporter.register_source(Arc::clone(&src));
    src.0[0].store(10, Ordering::Relaxed);
    src.0[1].store(3, Ordering::Relaxed);
    exporter.flush(soon()).unwrap();
    assert_eq!(sink.get("same"), 13);
    src.0[0].store(11, Ordering::Relaxed);
    src.0[1].store(7, Ordering::Relaxed);
    exporter.flush(soon()).unwrap();
    assert_eq!(sink.get("same"), 18);
}

/// A flush whose deadline has already passed still tries one delivery, so
/// its error says why the counts are undelivered (a busy host could use up
/// a short deadline reading the sources, and the error then had no cause).
#[test]
fn a_flush_past_its_deadline_tries_once_and_reports_why() {
    use std::error::Error;
    static C: RoughCounter = RoughCounter::new();
    let sink = MemorySink::new();
    let exporter = Exporter::new(sink.clone(), Duration::from_secs(60));
    exporter.register("late", &C);
    C.add(2);
    sink.set_down(true);
    let err = exporter.flush(Instant::now()).unwrap_err();
    assert_eq!(err.report.undelivered, 2);
    assert_eq!(err.source().unwrap().to_string(), "MemorySink is down");
    sink.set_down(false);
    assert_eq!(exporter.flush(Instant::now()).unwrap().delivered, 2);
    assert_eq!(sink.get("late"), 2);
}

/// A back-off near `Duration::MAX` still ends a failing flush at its
/// deadline (the deadline check added the back-off to now, and panicked).
#[test]
fn a_back_off_of_centuries_ends_a_flush_at_its_deadline() {
    static C: RoughCounter = RoughCounter::new();
    let sink = MemorySink::new();
    let exporter = Exporter::with_config(
        sink.clone(),
        ExportConfig {
            interval: Duration::from_secs(3600),
            min_backoff: Duration::MAX,
            max_backoff: Duration::MAX,
            ..ExportConfig::default()
        },
    );
    exporter.register("patient", &C);
    C.add(3);
    sink.set_down(true);
    let err = exporter
        .flush(Instant::now() + Duration::from_millis(10))
        .unwrap_err();
    assert_eq!(err.report.undelivered, 3);
}

#[path = "common/awkward.rs"]
mod awkward;
use awkward::{awkward, Awkward};

/// A label whose `Display` fails part-way used to export its member under
/// the partial key (`k:bro`); it is not exported, and its counts are
/// rejected. Members that print alike add up (as any key reported twice).
#[test]
fn a_label_whose_display_fails_is_rejected_not_exported_under_a_partial_key() {
    let m = awkward();
    let sink = MemorySink::new();
    let exporter = Exporter::new(sink.clone(), Duration::from_secs(60));
    exporter.register("k:", m.clone());
    exporter.flush(soon()).unwrap();
    m.add(&Awkward::Broken, 1);
    m.add(&Awkward::Alias(2), 1);
    exporter.flush(soon()).unwrap();
    let want = [("k:a".to_string(), 2), ("k:alias".to_string(), 8)];
    assert_eq!(sink.totals(), want.into_iter().collect());
    assert_eq!(exporter.stats().rejected, 6);
}

/// An unset gauge is exported as its read, like every value: a
/// `MaxCounter`'s 0, and a `MinCounter`'s `u64::MAX`, which the signed
/// sink holds as -1.
#[test]
fn unset_gauges_export_their_read() {
    let (peak, fastest) = (
        Arc::new(shardcount::MaxCounter::new()),
        Arc::new(shardcount::MinCounter::new()),
    );
    let sink = MemorySink::new();
    let exporter = Exporter::new(sink.clone(), Duration::from_secs(60));
    exporter.register("peak", peak);
    exporter.register("fastest", fastest);
    exporter.flush(soon()).unwrap();
    assert_eq!((sink.get("peak"), sink.get("fastest")), (0, -1));
}

/// A two-label family exports each member under the key followed by its
/// two texts, every add from several threads counted exactly once across
/// lost replies.
#[test]
fn labelled_counter_exports_each_member_with_both_texts() {
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
    static REQUESTS: shardcount::LabelledCounter<(Method, Status)> =
        shardcount::LabelledCounter::new();
    const THREADS: u64 = 4;
    const ADDS: u64 = 20_000;
    let sink = Flaky {
        inner: Arc::new(Mutex::new(MemorySink::new())),
        calls: Arc::new(AtomicU64::new(0)),
        nth: 3,
        forget_at: Arc::new(Mutex::new(None)),
    };
    let exporter = Exporter::with_config(sink.clone(), fast());
    exporter.register("req:", &REQUESTS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                let status = if t % 2 == 0 {
                    Status::Ok
                } else {
                    Status::Failed
                };
                (0..ADDS).for_each(|_| REQUESTS.inc((Method::Post, status)));
                REQUESTS.add((Method::Get, Status::Ok), t);
            });
        }
    });
    exporter.flush(soon()).unwrap();
    let totals = sink.inner.lock().unwrap().totals();
    let half = (THREADS / 2 * ADDS) as i64;
    assert_eq!(totals["req:post,ok"], half);
    assert_eq!(totals["req:post,failed"], half);
    assert_eq!(totals["req:get,ok"], (0..THREADS as i64).sum::<i64>());
    assert_eq!(totals.get("req:get,failed").copied().unwrap_or(0), 0);
}

/// A sink that forgets everything once the test says so, and records the
/// largest delivery it was handed.
#[derive(Clone, Default)]
struct Amnesiac {
    inner: Arc<Mutex<MemorySink>>,
    forget: Arc<AtomicBool>,
    widest: Arc<AtomicU64>,
}

impl Sink for Amnesiac {
    fn deliver(&mut self, batches: &[Batch]) -> Result<Vec<Outcome>, SinkError> {
        self.widest
            .fetch_max(batches.len() as u64, Ordering::Relaxed);
        if self.forget.swap(false, Ordering::Relaxed) {
            *self.inner.lock().unwrap() = MemorySink::new();
        }
        self.inner.lock().unwrap().deliver(batches)
    }
}

/// After a gap, the retained batches go back one `pipeline` at a time,
/// and a flush whose deadline has passed reports what it delivered without
/// going below zero (it un-counts the batches it must send again).
#[test]
fn a_gap_resends_within_the_pipeline_and_a_late_flush_does_not_underflow() {
    let sink = Amnesiac::default();
    let config = ExportConfig {
        interval: Duration::from_secs(3600),
        batch_keys: 1,
        pipeline: 2,
        retain: Duration::from_secs(600),
        ..fast()
    };
    let exporter = Exporter::with_config(sink.clone(), config);
    let c = Arc::new(RoughCounter::new());
    exporter.register("c", Arc::clone(&c));
    for _ in 0..5 {
        c.add(3);
        exporter.flush(soon()).unwrap(); // one batch each, all retained
    }
    sink.forget.store(true, Ordering::Relaxed);
    c.add(1);
    // Past its deadline: one delivery, a gap, the 5 retained batches back
    // in front of the new one (before the fix: 15 - 0 underflowed).
    let late = exporter.flush(Instant::now());
    let delivered = match &late {
        Ok(r) => r.delivered,
        Err(e) => e.report.delivered,
    };
    assert!(delivered <= 16, "{late:?}");
    exporter.flush(soon()).unwrap();
    assert_eq!(sink.inner.lock().unwrap().get("c"), 16);
    assert_eq!(exporter.stats().delivered, 16);
    assert!(
        sink.widest.load(Ordering::Relaxed) <= 2,
        "a delivery above the pipeline"
    );
}

/// A sink that answers no outcome, or rejects no key of the batch it
/// refuses, breaks the contract: each is a delivery error (the flush
/// returns it, the thread backs off), not an endless loop under the lock.
#[test]
fn a_sink_that_breaks_its_contract_is_an_error_not_a_spin() {
    struct Broken(bool);
    impl Sink for Broken {
        fn deliver(&mut self, _: &[Batch]) -> Result<Vec<Outcome>, SinkError> {
            Ok(if self.0 {
                vec![]
            } else {
                vec![Outcome::Rejected {
                    keys: vec!["nobody".into()],
                }]
            })
        }
    }
    for silent in [true, false] {
        let exporter = Exporter::with_config(Broken(silent), fast());
        let c = Arc::new(RoughCounter::new());
        exporter.register("c", Arc::clone(&c));
        c.add(1);
        std::thread::sleep(Duration::from_millis(20)); // the thread meets it too
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let r = exporter.flush(Instant::now() + Duration::from_millis(100));
            let _ = tx.send(r.map(|_| ()).map_err(|e| e.error.map(|e| e.to_string())));
        });
        let r = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("flush hung");
        let e = r
            .unwrap_err()
            .expect("a delivery error, not only the deadline");
        assert!(
            e.contains("outcomes") || e.contains("rejected no key"),
            "{e}"
        );
    }
}

/// Gauges whose magnitudes add past 2^64 in one batch: the statistics
/// saturate instead of overflowing (a panic in a debug build).
#[test]
fn huge_gauges_saturate_the_statistics_and_export_exactly() {
    let sink = Amnesiac::default();
    let exporter = Exporter::with_config(
        sink.clone(),
        ExportConfig {
            batch_keys: 8,
            ..fast()
        },
    );
    let gauges: Vec<Arc<shardcount::MaxCounter>> = (0..3).map(|_| Arc::default()).collect();
    for (i, g) in gauges.iter().enumerate() {
        g.record(i64::MAX as u64 - i as u64);
        exporter.register(&format!("g{i}"), Arc::clone(g));
    }
    exporter.flush(soon()).unwrap();
    assert_eq!(exporter.stats().delivered, u64::MAX);
    for i in 0..3 {
        assert_eq!(
            sink.inner.lock().unwrap().get(&format!("g{i}")),
            i64::MAX - i as i64
        );
    }
}

#[test]
#[should_panic(expected = "HistogramSource::new(\"_\")")]
fn a_histogram_key_of_one_underscore_panics_naming_it() {
    let _ = shardcount::export::HistogramSource::new("_", Arc::new(shardcount::Histogram::new()));
}

/// A source that panics on every second read, after reporting half of
/// its keys; the read it panics in is dropped whole.
struct Halting {
    reads: AtomicU64,
    value: AtomicU64,
}

impl Source for Halting {
    fn read(&self, each: &mut dyn FnMut(&str, u64)) {
        let value = self.value.load(Ordering::Relaxed);
        each("halting-a", value);
        if self.reads.fetch_add(1, Ordering::Relaxed) % 2 == 1 {
            panic!("the source panics half way");
        }
        each("halting-b", value);
    }
}

/// A source whose read panics delays no other source (the flush delivers
/// them, then panics), and ships nothing twice or never: the next whole
/// read ships what the broken one missed.
#[test]
fn a_source_that_panics_delays_no_other_and_loses_nothing() {
    let sink = MemorySink::new();
    let e = Exporter::new(sink.clone(), Duration::from_secs(3600));
    let halting = Arc::new(Halting {
        reads: AtomicU64::new(0),
        value: AtomicU64::new(2),
    });
    struct Shared(Arc<Halting>);
    impl Source for Shared {
        fn read(&self, each: &mut dyn FnMut(&str, u64)) {
            self.0.read(each);
        }
    }
    e.register_source(Shared(Arc::clone(&halting)));
    let good = Arc::new(RoughCounter::new());
    e.register("good", good.clone());
    good.add(5);
    e.flush(soon()).expect("the first read is whole");
    assert_eq!((sink.get("halting-a"), sink.get("halting-b")), (2, 2));
    good.add(6);
    halting.value.store(7, Ordering::Relaxed);
    let flushed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.flush(soon())));
    assert!(flushed.is_err(), "the source's panic reaches the flush");
    assert_eq!(sink.get("good"), 11, "the other source was delivered");
    assert_eq!(
        sink.get("halting-a"),
        2,
        "nothing of the broken read shipped"
    );
    e.flush(soon()).expect("the next read is whole");
    assert_eq!((sink.get("halting-a"), sink.get("halting-b")), (7, 7));
}

/// A sink that flushes its own exporter (reached through a cell) would
/// wait for the pass it is called from: the flush panics instead, the
/// sink's delivery fails, and a later flush delivers everything.
#[test]
fn a_sink_flushing_its_own_exporter_panics_instead_of_hanging() {
    struct Reentrant {
        sink: MemorySink,
        exporter: Arc<std::sync::OnceLock<Exporter>>,
        reenter: Arc<AtomicBool>,
    }
    impl Sink for Reentrant {
        fn deliver(&mut self, batches: &[Batch]) -> Result<Vec<Outcome>, SinkError> {
            if self.reenter.swap(false, Ordering::Relaxed) {
                let e = self.exporter.get().expect("set before the flush");
                let _ = e.flush(soon());
            }
            self.sink.deliver(batches)
        }
    }
    let (sink, cell) = (MemorySink::new(), Arc::new(std::sync::OnceLock::new()));
    let reenter = Arc::new(AtomicBool::new(true));
    let e = Exporter::new(
        Reentrant {
            sink: sink.clone(),
            exporter: Arc::clone(&cell),
            reenter: Arc::clone(&reenter),
        },
        Duration::from_secs(3600),
    );
    let c = Arc::new(RoughCounter::new());
    e.register("c", c.clone());
    c.add(3);
    assert!(cell.set(e).is_ok());
    let (tx, rx) = std::sync::mpsc::channel();
    let there = Arc::clone(&cell);
    // Detached: a hang fails at the timeout instead of stalling the run.
    std::thread::spawn(move || {
        let e = there.get().unwrap();
        let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| e.flush(soon())));
        tx.send((first.is_err(), e.flush(soon()).map(|r| r.delivered).ok()))
            .unwrap();
    });
    let got = rx.recv_timeout(Duration::from_secs(60));
    assert_eq!(
        got,
        Ok((true, Some(3))),
        "the inner flush panics, the next delivers"
    );
    assert_eq!(sink.get("c"), 3);
}
