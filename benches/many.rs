//! Many counters at once: `CounterMap`, `CounterSet` and `MaxCounter`
//! against what a user would write instead. A paired section only (see
//! `shardcount_harness::measure::Session`): every subject runs in the same
//! repetitions as its reference, and medians of the ratios are printed.
//! `SHARDCOUNT_REPS` sets the repetitions (default 9),
//! `SHARDCOUNT_ONLY=<substring>` picks figures by title.
//!
//! * 2 threads, one hot key: a `CounterMap` handle, a standalone `Counter`
//!   (the reference) and `DashMap<u64, AtomicU64>` (`get` + `fetch_add`).
//! * 2 threads, 10,000 counters picked uniformly: `CounterSet::add` against
//!   one `AtomicU64` per counter (the reference).
//! * One thread, a snapshot of 10,000 idle counters: `CounterSet`, grown
//!   to 2 rows first, against loading 10,000 `AtomicU64`s.
//! * 2 threads recording values below the current maximum: `MaxCounter`
//!   against `AtomicU64::fetch_max` (the reference) and a load-then-
//!   `fetch_max`.

use shardcount::{Counter, CounterMap, CounterSet, MaxCounter};
use shardcount_harness::measure::{
    bench_main, escape, opaque, run_threads, Figure, Ratio, Session,
};
use shardcount_harness::peers::dashmap::DashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const KEYS: usize = 10_000;

/// A cheap per-thread sequence of counter indices (xorshift), the same for
/// every subject.
#[inline(always)]
fn next_index(x: &mut u64) -> usize {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    (*x % KEYS as u64) as usize
}

/// `per_thread` adds of one on each of 2 threads through `add`; checks the
/// total `total()` reports afterwards.
fn two_threads(per_thread: u64, add: impl Fn(usize) + Sync, total: impl Fn() -> u64) -> Duration {
    let before = total();
    let t = run_threads(2, |_| {
        for _ in 0..per_thread {
            add(0);
            opaque();
        }
    });
    assert_eq!(total() - before, 2 * per_thread, "lost or extra counts");
    t
}

/// As `two_threads`, each add to an index from the thread's own sequence.
fn two_threads_uniform(
    per_thread: u64,
    add: impl Fn(usize) + Sync,
    total: impl Fn() -> u64,
) -> Duration {
    let before = total();
    let t = run_threads(2, |thread| {
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (thread as u64 + 1);
        for _ in 0..per_thread {
            add(next_index(&mut x));
            opaque();
        }
    });
    assert_eq!(total() - before, 2 * per_thread, "lost or extra counts");
    t
}

fn paired_report() {
    let mut s = Session::new("many", 9);

    if s.wants("one hot key") {
        s.run(
            Figure::new(
                "2 threads, one hot key: throughput vs a standalone Counter",
                2,
                Ratio::Throughput,
            )
            .reference("Counter::inc", |n| {
                let c = Counter::new();
                let c = escape(&c);
                two_threads(n, |_| c.inc(), || c.sum())
            })
            .vs("CounterMap handle inc", |n| {
                let m = CounterMap::new();
                let h = m.handle(&0u64);
                let h = escape(&h);
                two_threads(n, |_| h.inc(), || h.sum())
            })
            .vs("DashMap<u64, AtomicU64> get + fetch_add", |n| {
                let m: DashMap<u64, AtomicU64> = DashMap::new();
                m.insert(0, AtomicU64::new(0));
                let m = escape(&m);
                two_threads(
                    n,
                    // Relaxed: a count, as everywhere here.
                    |k| {
                        m.get(&(k as u64)).unwrap().fetch_add(1, Ordering::Relaxed);
                    },
                    || m.get(&0).unwrap().load(Ordering::Relaxed),
                )
            })
            .vs("CounterMap add by key", |n| {
                let m = CounterMap::new();
                let m = escape(&m);
                two_threads(n, |k| m.inc(&(k as u64)), || m.get(&0).unwrap_or(0))
            }),
        );
    }

    if s.wants("10,000 counters") {
        s.run(
            Figure::new(
                "2 threads, 10,000 counters uniform: throughput vs one AtomicU64 per counter",
                2,
                Ratio::Throughput,
            )
            .reference("[AtomicU64; 10000] fetch_add", |n| {
                let a: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
                let a = escape(&a[..]);
                two_threads_uniform(
                    n,
                    // Relaxed: a count.
                    |i| {
                        a[i].fetch_add(1, Ordering::Relaxed);
                    },
                    || a.iter().map(|x| x.load(Ordering::Relaxed)).sum(),
                )
            })
            .vs("CounterSet::inc", |n| {
                let set = CounterSet::new(KEYS);
                let set = escape(&set);
                two_threads_uniform(n, |i| set.inc(i), || set.snapshot().iter().sum())
            }),
        );
    }

    if s.wants("snapshot") {
        let a: Vec<AtomicU64> = (0..KEYS).map(|i| AtomicU64::new(i as u64)).collect();
        // Grown to its 2 rows first (two threads hammering one counter
        // until it grows): the figure is for a set on 2 shards.
        let set = CounterSet::with_max_shards(KEYS, 2);
        while set.shards() < 2 {
            run_threads(2, |_| (0..100_000).for_each(|_| set.inc(0)));
        }
        set.reset();
        (0..KEYS).for_each(|i| set.add(i, i as u64));
        let mut buf = vec![0u64; KEYS];
        let want: u64 = (0..KEYS as u64).sum();
        let buf = std::cell::RefCell::new(&mut buf);
        s.run(
            Figure::new(
                "1 thread, snapshot of 10,000 idle counters on 2 rows (and the base): cost vs loading 10,000 AtomicU64",
                1,
                Ratio::Cost,
            )
            .reference("load 10,000 AtomicU64 into a buffer", |n| {
                let a = escape(&a[..]);
                let mut b = buf.borrow_mut();
                let start = Instant::now();
                for _ in 0..n {
                    // Relaxed: a count read.
                    b.iter_mut()
                        .zip(a)
                        .for_each(|(o, x)| *o = x.load(Ordering::Relaxed));
                    opaque();
                }
                let t = start.elapsed();
                assert_eq!(b.iter().sum::<u64>(), want);
                t
            })
            .vs("CounterSet::snapshot_into", |n| {
                let set = escape(&set);
                let mut b = buf.borrow_mut();
                let start = Instant::now();
                for _ in 0..n {
                    set.snapshot_into(&mut b[..]);
                    opaque();
                }
                let t = start.elapsed();
                assert_eq!(b.iter().sum::<u64>(), want);
                t
            }),
        );
    }

    if s.wants("below the max") {
        const TOP: u64 = 1 << 40;
        let check = |got: u64| assert_eq!(got, TOP, "the maximum moved");
        s.run(
            Figure::new(
                "2 threads, records below the max: throughput vs AtomicU64::fetch_max",
                2,
                Ratio::Throughput,
            )
            .reference("AtomicU64::fetch_max", |n| {
                let a = AtomicU64::new(TOP);
                let a = escape(&a);
                let t = run_threads(2, |_| {
                    for i in 0..n {
                        // Relaxed: a maximum; nothing is published.
                        a.fetch_max(i, Ordering::Relaxed);
                        opaque();
                    }
                });
                check(a.load(Ordering::Relaxed));
                t
            })
            .vs("load, fetch_max only above", |n| {
                let a = AtomicU64::new(TOP);
                let a = escape(&a);
                let t = run_threads(2, |_| {
                    for i in 0..n {
                        // Relaxed: as above.
                        if i > a.load(Ordering::Relaxed) {
                            a.fetch_max(i, Ordering::Relaxed);
                        }
                        opaque();
                    }
                });
                check(a.load(Ordering::Relaxed));
                t
            })
            .vs("MaxCounter::record", |n| {
                let m = MaxCounter::new();
                m.record(TOP);
                let m = escape(&m);
                let t = run_threads(2, |_| {
                    for i in 0..n {
                        m.record(i);
                        opaque();
                    }
                });
                check(m.get());
                t
            }),
        );
    }

    s.finish();
}

fn main() {
    // No criterion groups: the paired section is the whole bench.
    bench_main(|| {}, paired_report);
}
