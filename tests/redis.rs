//! The Redis export against a real `redis-server`: each test starts its own
//! server (free port, own directory, AOF everysec, no RDB) and kills it when
//! done. Without `redis-server` on the PATH the tests fail, on purpose:
//! install it with `.ci/install-redis`.
#![cfg(all(feature = "redis", not(shardcount_loom)))]

mod common;

use common::Server;

use shardcount::export::redis::RedisSink;
use shardcount::export::{Batch, ExportConfig, Exporter, Outcome, Sink, WriterId};
use shardcount::RoughCounter;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn sink(server: &Server, prefix: &str) -> RedisSink {
    RedisSink::new(&server.url(), prefix)
        .unwrap()
        .with_timeout(Duration::from_millis(500))
}

fn config() -> ExportConfig {
    ExportConfig {
        interval: Duration::from_millis(5),
        batch_keys: 100,
        pipeline: 4,
        ..ExportConfig::default()
    }
}

/// One "process": its counters, registered with its own exporter, and
/// what its threads added per key.
struct Worker {
    counters: Arc<Vec<Arc<RoughCounter>>>,
    exporter: Exporter,
    added: Arc<Vec<AtomicU64>>,
}

impl Worker {
    fn new(sink: RedisSink, keys: usize) -> Worker {
        let counters: Arc<Vec<Arc<RoughCounter>>> = Arc::new(
            (0..keys)
                .map(|_| Arc::new(RoughCounter::new().with_batch(64)))
                .collect(),
        );
        let exporter = Exporter::with_config(sink, config());
        for (i, c) in counters.iter().enumerate() {
            exporter.register(&format!("k{i}"), Arc::clone(c));
        }
        Worker {
            counters,
            exporter,
            added: Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect()),
        }
    }

    /// Starts `threads` threads adding to random keys until `stop`.
    fn spawn(
        &self,
        threads: usize,
        seed: u64,
        stop: &Arc<AtomicBool>,
    ) -> Vec<std::thread::JoinHandle<()>> {
        (0..threads)
            .map(|t| {
                let (counters, added, stop) = (
                    Arc::clone(&self.counters),
                    Arc::clone(&self.added),
                    Arc::clone(stop),
                );
                std::thread::spawn(move || {
                    let mut x = seed.wrapping_mul(31).wrapping_add(t as u64 + 1) | 1;
                    let mut mine = vec![0u64; counters.len()];
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) || n < 20_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let k = (x % counters.len() as u64) as usize;
                        let v = (x >> 40) % 4 + 1;
                        counters[k].add(v);
                        mine[k] += v;
                        n += 1;
                    }
                    for (a, m) in added.iter().zip(mine) {
                        a.fetch_add(m, Ordering::Relaxed);
                    }
                })
            })
            .collect()
    }
}

fn expected(workers: &[&Worker], keys: usize) -> Vec<i64> {
    (0..keys)
        .map(|k| {
            workers
                .iter()
                .map(|w| w.added[k].load(Ordering::Relaxed) as i64)
                .sum()
        })
        .collect()
}

fn key_names(prefix: &str, keys: usize) -> Vec<String> {
    (0..keys).map(|i| format!("{prefix}k{i}")).collect()
}

fn flush(w: &Worker) {
    let r = w
        .exporter
        .flush(Instant::now() + Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("flush: {e}"));
    assert_eq!(r.undelivered, 0);
}

const KEYS: usize = 1000;

#[test]
fn two_exporters_four_threads_each_totals_exact() {
    let mut server = Server::new("everysec");
    server.start();
    let a = Worker::new(sink(&server, "t:"), KEYS);
    let b = Worker::new(sink(&server, "t:"), KEYS);
    assert_ne!(a.exporter.stats().writer, b.exporter.stats().writer);
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = a.spawn(4, 1, &stop);
    threads.extend(b.spawn(4, 2, &stop));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    flush(&a);
    flush(&b);
    let want = expected(&[&a, &b], KEYS);
    assert!(want.iter().all(|&v| v > 0));
    assert_eq!(server.values(&key_names("t:", KEYS)), want);
    let total: i64 = want.iter().sum();
    assert_eq!(
        (a.exporter.delivered() + b.exporter.delivered()) as i64,
        total
    );
    // Several passes ran while the threads counted, not only the flush.
    assert!(a.exporter.stats().batches > 10);
    // The writers hash has one field per exporter.
    let mut c = server.conn();
    let n: usize = redis::cmd("HLEN").arg("t:__writers").query(&mut c).unwrap();
    assert_eq!(n, 2);
}

#[test]
fn redis_killed_mid_run_and_restarted_totals_exact() {
    let mut server = Server::new("everysec");
    server.start();
    let a = Worker::new(sink(&server, "t:"), KEYS);
    let b = Worker::new(sink(&server, "t:"), KEYS);
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = a.spawn(4, 3, &stop);
    threads.extend(b.spawn(4, 4, &stop));
    // Let batches land, then kill the server under them.
    let until = Instant::now() + Duration::from_secs(20);
    while a.exporter.stats().batches < 5 || b.exporter.stats().batches < 5 {
        assert!(Instant::now() < until, "no batches before the kill");
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill();
    std::thread::sleep(Duration::from_millis(300));
    server.start();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    flush(&a);
    flush(&b);
    let (sa, sb) = (a.exporter.stats(), b.exporter.stats());
    if sa.gaps + sb.gaps > 0 {
        // Redis confirmed writes it had not written to its AOF yet (a slow
        // background fsync under everysec) and the kill lost them: the
        // exporters must have sent them again.
        eprintln!(
            "redis lost confirmed batches: gaps {} + {}",
            sa.gaps, sb.gaps
        );
    }
    assert_eq!(
        server.values(&key_names("t:", KEYS)),
        expected(&[&a, &b], KEYS),
        "{sa:?} {sb:?}"
    );
    assert!(sa.errors + sb.errors > 0, "the kill was not noticed");
    assert_eq!((sa.lost, sb.lost, sa.rejected, sb.rejected), (0, 0, 0, 0));
}

#[test]
fn resent_batch_after_lost_reply_applied_once() {
    let mut server = Server::new("everysec");
    server.start();
    let mut s = sink(&server, "r:");
    let w = WriterId::random();
    let b1 = Batch::new(w, 1, vec![("a".into(), 5), ("b".into(), -2)]);
    let b2 = Batch::new(w, 2, vec![("a".into(), 1)]);
    assert_eq!(
        s.deliver(std::slice::from_ref(&b1)).unwrap(),
        [Outcome::Applied]
    );
    // The reply to b1 was "lost": the exporter resends it with the next one.
    assert_eq!(
        s.deliver(&[b1.clone(), b2.clone()]).unwrap(),
        [Outcome::Duplicate, Outcome::Applied]
    );
    assert_eq!(
        s.deliver(&[b1, b2]).unwrap(),
        [Outcome::Duplicate, Outcome::Duplicate]
    );
    let keys = ["r:a".to_string(), "r:b".to_string()];
    assert_eq!(server.values(&keys), [6, -2]);
    // Another writer's batch 1 is its own.
    let other = Batch::new(WriterId::random(), 1, vec![("a".into(), 10)]);
    assert_eq!(s.deliver(&[other]).unwrap(), [Outcome::Applied]);
    assert_eq!(server.values(&keys), [16, -2]);
}

#[test]
fn gap_rejected_keys_and_flushed_script_cache() {
    let mut server = Server::new("everysec");
    server.start();
    let mut s = sink(&server, "g:");
    let w = WriterId::random();
    // A batch past last + 1: the server lost confirmed batches.
    let far = Batch::new(w, 3, vec![("a".into(), 1)]);
    assert_eq!(s.deliver(&[far]).unwrap(), [Outcome::Gap { last: 0 }]);
    // A key that cannot take a delta: nothing of the batch is applied.
    let mut c = server.conn();
    let _: () = redis::cmd("SET")
        .arg("g:bad")
        .arg("x")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("g:hash")
        .arg("f")
        .arg(1)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("g:big")
        .arg(i64::MAX - 1)
        .query(&mut c)
        .unwrap();
    let b = Batch::new(
        w,
        1,
        vec![
            ("a".into(), 1),
            ("bad".into(), 1),
            ("hash".into(), 1),
            ("big".into(), 5),
        ],
    );
    assert_eq!(
        s.deliver(&[b]).unwrap(),
        [Outcome::Rejected {
            keys: vec!["bad".into(), "hash".into(), "big".into()]
        }]
    );
    assert_eq!(server.values(&["g:a".into()]), [0]);
    // After SCRIPT FLUSH the sink loads the script again.
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
    let ok = Batch::new(w, 1, vec![("a".into(), 1)]);
    assert_eq!(s.deliver(&[ok]).unwrap(), [Outcome::Applied]);
    assert_eq!(server.values(&["g:a".into()]), [1]);
}

/// Values Redis's `INCRBY` refuses though they look like integers
/// ("007", "-0"): the script must reject them before writing anything, or
/// it fails half-way with the keys before them already incremented.
#[test]
fn non_canonical_integers_rejected_before_any_write() {
    let mut server = Server::new("everysec");
    server.start();
    let mut s = sink(&server, "z:");
    let mut c = server.conn();
    for (k, v) in [("z:lead", "007"), ("z:negzero", "-0")] {
        let _: () = redis::cmd("SET").arg(k).arg(v).query(&mut c).unwrap();
    }
    let w = WriterId::random();
    let b = Batch::new(
        w,
        1,
        vec![("a".into(), 1), ("lead".into(), 1), ("negzero".into(), 1)],
    );
    assert_eq!(
        s.deliver(&[b]).unwrap(),
        [Outcome::Rejected {
            keys: vec!["lead".into(), "negzero".into()]
        }]
    );
    assert_eq!(
        server.values(&["z:a".into()]),
        [0],
        "a write before the check"
    );
    // Canonical values far beyond a double's exact range still fold
    // exactly (up to the script's documented margin of 9.2e18).
    const HIGH: i64 = 9_000_000_000_000_000_000;
    let _: () = redis::cmd("SET")
        .arg("z:top")
        .arg(HIGH - 4)
        .query(&mut c)
        .unwrap();
    let ok = Batch::new(w, 1, vec![("a".into(), -3), ("top".into(), 5)]);
    assert_eq!(s.deliver(&[ok]).unwrap(), [Outcome::Applied]);
    assert_eq!(
        server.values(&["z:a".into(), "z:top".into()]),
        [-3, HIGH + 1]
    );
}

#[test]
fn exporter_rejected_keys_dropped_rest_delivered() {
    let mut server = Server::new("everysec");
    server.start();
    let mut c = server.conn();
    let _: () = redis::cmd("SET")
        .arg("e:bad")
        .arg("x")
        .query(&mut c)
        .unwrap();
    let (good, bad) = (Arc::new(RoughCounter::new()), Arc::new(RoughCounter::new()));
    let exporter = Exporter::with_config(sink(&server, "e:"), config());
    exporter.register("good", Arc::clone(&good));
    exporter.register("bad", Arc::clone(&bad));
    good.add(7);
    bad.add(3);
    exporter
        .flush(Instant::now() + Duration::from_secs(30))
        .unwrap();
    assert_eq!(server.values(&["e:good".into()]), [7]);
    assert_eq!(exporter.stats().rejected, 3);
}

#[test]
fn redis_unreachable_at_start_adds_never_block_delivery_completes() {
    let mut server = Server::new("everysec"); // not started: nothing listens on its port
    let keys = 100;
    let w = Worker::new(sink(&server, "u:"), keys);
    let stop = Arc::new(AtomicBool::new(true)); // each thread adds 20,000 times
                                                // Adds finish with nothing listening: no add waits for Redis.
    for t in w.spawn(4, 5, &stop) {
        t.join().unwrap();
    }
    let total: u64 = w.added.iter().map(|a| a.load(Ordering::Relaxed)).sum();
    let until = Instant::now() + Duration::from_secs(30);
    while w.exporter.pending() != total {
        assert!(
            Instant::now() < until,
            "the exporter never read the counters"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let stats = w.exporter.stats();
    assert!(stats.errors > 0 && stats.last_error.is_some());
    assert_eq!(stats.delivered, 0);
    // Bounded by keys (80,000 adds over 100 keys), each counted once
    // whether frozen, pending or both.
    assert!(stats.pending_keys <= keys, "{stats:?}");
    assert!(w
        .exporter
        .flush(Instant::now() + Duration::from_millis(50))
        .is_err());
    server.start();
    flush(&w);
    assert_eq!(server.values(&key_names("u:", keys)), expected(&[&w], keys));
    assert_eq!(w.exporter.delivered(), total);
    assert_eq!(w.exporter.pending(), 0);
}

/// The type of a key, as Redis's `TYPE` names it ("none" when absent).
fn key_type(server: &Server, key: &str) -> String {
    redis::cmd("TYPE")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

/// Issue 19, item 1: a counter key that names the sink's writers hash. The
/// script used to increment the other keys and then fail on the hash, so
/// a later retry applied them twice. Now that key is rejected before any
/// write, and the rest applies exactly once.
#[test]
fn a_counter_key_naming_the_writers_hash_is_rejected_before_any_write() {
    let mut server = Server::new("everysec");
    server.start();
    let mut s = sink(&server, "w:");
    let w = WriterId::random();
    let b = Batch::new(w, 1, vec![("a".into(), 5), ("__writers".into(), 3)]);
    assert_eq!(
        s.deliver(&[b]).unwrap(),
        [Outcome::Rejected {
            keys: vec!["__writers".into()]
        }]
    );
    assert_eq!(
        server.values(&["w:a".into()]),
        [0],
        "a write before the check"
    );
    assert_eq!(key_type(&server, "w:__writers"), "none");
    let ok = Batch::new(w, 1, vec![("a".into(), 5)]);
    assert_eq!(
        s.deliver(std::slice::from_ref(&ok)).unwrap(),
        [Outcome::Applied]
    );
    assert_eq!(s.deliver(&[ok]).unwrap(), [Outcome::Duplicate]);
    assert_eq!(server.values(&["w:a".into()]), [5]);
    assert_eq!(key_type(&server, "w:__writers"), "hash");
}

/// Someone else wrote a string where the writers hash lives: every batch
/// fails whole, writing nothing, and once the key is repaired the batch
/// applies exactly once.
#[test]
fn a_writers_key_of_another_type_fails_the_batch_and_writes_nothing() {
    let mut server = Server::new("everysec");
    server.start();
    let mut s = sink(&server, "x:");
    let mut c = server.conn();
    let _: () = redis::cmd("SET")
        .arg("x:__writers")
        .arg("oops")
        .query(&mut c)
        .unwrap();
    let w = WriterId::random();
    let b = Batch::new(w, 1, vec![("a".into(), 5), ("b".into(), 1)]);
    for _ in 0..3 {
        let err = s.deliver(std::slice::from_ref(&b)).unwrap_err();
        assert!(err.to_string().contains("x:__writers"), "{err}");
        assert_eq!(server.values(&["x:a".into(), "x:b".into()]), [0, 0]);
    }
    let _: () = redis::cmd("DEL").arg("x:__writers").query(&mut c).unwrap();
    assert_eq!(
        s.deliver(std::slice::from_ref(&b)).unwrap(),
        [Outcome::Applied]
    );
    assert_eq!(s.deliver(&[b]).unwrap(), [Outcome::Duplicate]);
    assert_eq!(server.values(&["x:a".into(), "x:b".into()]), [5, 1]);
}

static ALL_EXACT: shardcount::Counter = shardcount::Counter::new();
static ALL_ROUGH: RoughCounter = RoughCounter::new().with_batch(16);
shardcount::local_counter!(static ALL_LOCAL, batch = 32);

/// Every counter type through `register`, into Redis, while threads add
/// and the exporter runs: exact per key after the flush.
#[test]
fn every_counter_type_registers_and_exports_exactly() {
    use shardcount::{CounterMap, CounterSet};
    const THREADS: u64 = 4;
    const ADDS: u64 = 20_000;
    let mut server = Server::new("everysec");
    server.start();
    let set = Arc::new(CounterSet::new(5));
    let map: Arc<CounterMap<String>> = Arc::new(CounterMap::new());
    let exporter = Exporter::with_config(sink(&server, "a:"), config());
    exporter.register("exact", &ALL_EXACT);
    exporter.register("rough", &ALL_ROUGH);
    exporter.register("local", &ALL_LOCAL);
    exporter.register("set.", Arc::clone(&set));
    exporter.register("route:", Arc::clone(&map));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (set, map) = (&set, &map);
            s.spawn(move || {
                for i in 0..ADDS {
                    ALL_EXACT.inc();
                    ALL_ROUGH.add(2);
                    ALL_LOCAL.add(3);
                    set.add((i % 5) as usize, 1 + t);
                    map.add(&format!("/{}", i % 7), 1);
                }
            });
        }
    });
    exporter
        .flush(Instant::now() + Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("flush: {e}"));
    let n = (THREADS * ADDS) as i64;
    let per_thread: i64 = (1..=THREADS as i64).sum();
    let mut keys: Vec<String> = ["exact", "rough", "local"]
        .iter()
        .map(|k| format!("a:{k}"))
        .collect();
    let mut want = vec![n, 2 * n, 3 * n];
    for i in 0..5 {
        keys.push(format!("a:set.{i}"));
        want.push(per_thread * (ADDS / 5) as i64);
    }
    for r in 0..7 {
        keys.push(format!("a:route:/{r}"));
        want.push(THREADS as i64 * (0..ADDS).filter(|i| i % 7 == r).count() as i64);
    }
    assert_eq!(server.values(&keys), want);
    assert_eq!(exporter.delivered() as i64, want.iter().sum::<i64>());
}

/// A key repeated in one batch (only a hand-made `Batch` can do that; the
/// exporter's keys are distinct) is refused before any write: checked one
/// occurrence at a time against the stored value, the repeats could
/// overflow half-way through, after earlier keys were written.
#[test]
fn a_key_repeated_in_one_batch_is_rejected_before_any_write() {
    let mut server = Server::new("everysec");
    server.start();
    let mut s = sink(&server, "d:");
    let _: () = redis::cmd("SET")
        .arg("d:a")
        .arg(9_100_000_000_000_000_000i64)
        .query(&mut server.conn())
        .unwrap();
    let w = WriterId::random();
    let big = 90_000_000_000_000_000;
    let b = Batch::new(
        w,
        1,
        vec![("b".into(), 1), ("a".into(), big), ("a".into(), big)],
    );
    assert_eq!(
        s.deliver(&[b]).unwrap(),
        [Outcome::Rejected {
            keys: vec!["a".into()]
        }]
    );
    assert_eq!(
        server.values(&["d:b".into(), "d:a".into()]),
        [0, 9_100_000_000_000_000_000]
    );
}

/// A writer's record edited by hand into something not a batch number
/// (negative, or text Lua's `tonumber` would still read: `inf`, hex,
/// exponent): the delivery fails naming the hash and writes nothing
/// (`inf` and hex answered "repeat" and lost the batch, a negative record
/// gave a gap at `u64::MAX`); once repaired, the batch applies once.
#[test]
fn a_writer_record_not_a_batch_number_fails_the_batch_and_writes_nothing() {
    let server = Server::started("everysec");
    let mut s = sink(&server, "n:");
    let mut c = server.conn();
    for (i, record) in ["-1", "inf", "0x10", "1e3", "01"].into_iter().enumerate() {
        let w = WriterId::random();
        let key = format!("a{i}");
        let _: () = redis::cmd("HSET")
            .arg("n:__writers")
            .arg(w.to_string())
            .arg(record)
            .query(&mut c)
            .unwrap();
        let b = Batch::new(w, 1, vec![(key.clone(), 5)]);
        let err = s.deliver(std::slice::from_ref(&b)).unwrap_err();
        assert!(err.to_string().contains("n:__writers"), "{record}: {err}");
        assert_eq!(server.values(&[format!("n:{key}")]), [0], "{record}");
        let _: () = redis::cmd("HDEL")
            .arg("n:__writers")
            .arg(w.to_string())
            .query(&mut c)
            .unwrap();
        assert_eq!(s.deliver(&[b]).unwrap(), [Outcome::Applied], "{record}");
        assert_eq!(server.values(&[format!("n:{key}")]), [5], "{record}");
    }
}

#[test]
#[should_panic(expected = "RedisSink::with_timeout: the timeout must not be zero")]
fn a_zero_sink_timeout_panics_naming_it() {
    let _ = RedisSink::new("redis://127.0.0.1:1", "z:")
        .unwrap()
        .with_timeout(Duration::ZERO);
}
