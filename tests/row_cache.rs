//! The owners' row cache (`thread/owner.rs`): a thread's adds to the last
//! two sharded tables it wrote skip the row lookup. These check what the
//! cache must never change: merges still complete while threads add only
//! elsewhere, and every add counts when threads rotate over more tables
//! than the cache holds.

use shardcount::{Counter, CounterSet, Histogram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A thread that added to `a` and now adds only to `b` (so every add hits
/// its cache) must still acknowledge `a`'s merge: a merge's revocation
/// empties the caches, so the next add takes the slow path. Without that,
/// `a.merge()` would stay pending for as long as the thread runs.
#[test]
fn a_merge_completes_while_a_thread_adds_only_to_another_counter() {
    let a = Counter::new();
    let b = Counter::new();
    assert_eq!(a.split(2), 2);
    assert_eq!(b.split(2), 2);
    let stop = AtomicBool::new(false);
    let added = std::thread::scope(|s| {
        let adder = s.spawn(|| {
            a.inc();
            let mut n = 0u64;
            // Relaxed: a stop flag; the counts are read after the join.
            while !stop.load(Ordering::Relaxed) {
                b.inc();
                n += 1;
            }
            n
        });
        // Wait for the adder's adds to `b` to be cached hits.
        while b.sum() < 1000 {
            std::thread::yield_now();
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut merged = a.merge();
        while !merged && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
            merged = a.merge();
        }
        stop.store(true, Ordering::Relaxed);
        let n = adder.join().unwrap();
        assert!(
            merged,
            "a merge stayed pending while its only other thread added elsewhere"
        );
        n
    });
    assert_eq!(a.shards(), 0);
    assert_eq!(a.sum(), 1);
    assert_eq!(b.sum(), added);
}

/// Threads rotate over more sharded tables (counters, a set, a histogram)
/// than the cache holds, so adds hit, hit the other entry, or miss and
/// refill, in every order; totals are exact.
#[test]
fn threads_rotating_over_more_tables_than_cached_count_exactly() {
    const THREADS: u64 = 4;
    const ROUNDS: u64 = 50_000;
    let cs: Vec<Counter> = (0..3).map(|_| Counter::new()).collect();
    let set = CounterSet::new(5);
    let h = Histogram::new();
    for c in &cs {
        c.split(4);
    }
    set.split(4);
    h.split(4);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (cs, set, h) = (&cs, &set, &h);
            s.spawn(move || {
                for r in 0..ROUNDS {
                    // Each thread walks its own pattern: some stay on one
                    // table for a while, others alternate every add.
                    let k = if t % 2 == 0 { r / 64 } else { r };
                    cs[(k % 3) as usize].inc();
                    if r % 3 == t % 3 {
                        set.inc((r % 5) as usize);
                        h.record(r);
                    }
                    cs[((k + 1) % 3) as usize].add(2);
                }
            });
        }
    });
    let per_counter: u64 = cs.iter().map(Counter::sum).sum();
    assert_eq!(per_counter, THREADS * ROUNDS * 3);
    let set_total: u64 = set.snapshot().iter().sum();
    assert_eq!(set_total, h.count());
    let expected: u64 = (0..THREADS)
        .map(|t| (0..ROUNDS).filter(|r| r % 3 == t % 3).count() as u64)
        .sum();
    assert_eq!(h.count(), expected);
}
