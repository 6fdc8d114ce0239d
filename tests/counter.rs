#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! `Counter`: the sequential spec, and stress with real threads.

use shardcount::Counter;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

/// Growth needs two threads to run side by side, and a loaded 2-core host
/// (other test binaries, other builds) may run them in turns for a while:
/// growth loops keep going up to this long before they give up. A liveness
/// bound, not a speed assertion.
fn within_patience(start: Instant) -> bool {
    start.elapsed() < Duration::from_secs(60)
}

#[test]
fn new_is_zero_and_unsharded() {
    let c = Counter::new();
    assert_eq!(c.sum(), 0);
    assert_eq!(c.shards(), 0);
    assert_eq!(Counter::default().sum(), 0);
}

#[test]
fn add_sub_inc_dec() {
    let c = Counter::new();
    c.add(10);
    c.inc();
    assert_eq!(c.sum(), 11);
    c.sub(4);
    c.dec();
    assert_eq!(c.sum(), 6);
    assert_eq!(c.sum_i64(), 6);
}

#[test]
fn take_returns_and_resets() {
    let c = Counter::from(5);
    c.add(3);
    assert_eq!(c.take(), 8);
    assert_eq!(c.sum(), 0);
    assert_eq!(c.take(), 0);
    c.inc();
    assert_eq!(c.sum(), 1);
}

#[test]
fn reset_zeroes() {
    let c = Counter::from(77);
    c.reset();
    assert_eq!(c.sum(), 0);
    c.add(2);
    assert_eq!(c.sum(), 2);
}

#[test]
fn debug_shows_sum() {
    let c = Counter::from(12);
    assert_eq!(format!("{c:?}"), "Counter { sum: 12, shards: 0 }");
}

#[test]
fn from_and_into_inner() {
    assert_eq!(Counter::from(u64::MAX).into_inner(), u64::MAX);
    assert_eq!(Counter::from(3).sum(), 3);
}

#[test]
fn wraps_like_atomic_u64() {
    use std::sync::atomic::AtomicU64;
    let c = Counter::from(u64::MAX - 1);
    let a = AtomicU64::new(u64::MAX - 1);
    for n in [1, 1, 1, 5] {
        c.add(n);
        a.fetch_add(n, Ordering::Relaxed);
        assert_eq!(c.sum(), a.load(Ordering::Relaxed));
    }
    // Below zero wraps too, and the signed read sees the negative value.
    let d = Counter::new();
    d.sub(3);
    assert_eq!(d.sum(), u64::MAX - 2);
    assert_eq!(d.sum_i64(), -3);
    d.add(5);
    assert_eq!(d.sum_i64(), 2);
}

#[test]
fn size_and_traits() {
    assert!(std::mem::size_of::<Counter>() <= 16);
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Counter>();
}

#[test]
fn max_shards_rounds_up() {
    assert_eq!(Counter::with_max_shards(1).max_shards(), 1);
    assert_eq!(Counter::with_max_shards(3).max_shards(), 4);
    assert_eq!(Counter::with_max_shards(8).max_shards(), 8);
    assert_eq!(Counter::with_max_shards(65536).max_shards(), 65536);
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(
        Counter::new().max_shards(),
        cores.max(2).next_power_of_two()
    );
}

#[test]
#[should_panic(expected = "need at least 1 shard")]
fn max_shards_zero_panics() {
    let _ = Counter::with_max_shards(0);
}

#[test]
#[should_panic(expected = "at most 65536 shards")]
fn max_shards_too_large_panics() {
    let _ = Counter::with_max_shards(65537);
}

/// Hammers `c` from `threads` threads, `per_thread` adds each (of `step`),
/// all released together by a barrier.
fn hammer(c: &Counter, threads: usize, per_thread: u64, step: u64) {
    let barrier = Barrier::new(threads);
    thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                barrier.wait();
                for _ in 0..per_thread {
                    c.add(step);
                }
            });
        }
    });
}

#[test]
fn threads_through_barrier_exact() {
    for threads in [2, 4, 8] {
        let c = Counter::new();
        hammer(&c, threads, 200_000, 3);
        assert_eq!(c.sum(), threads as u64 * 200_000 * 3, "{threads} threads");
    }
}

#[test]
fn contention_grows_the_table_up_to_the_cap() {
    // Growth is sampled, so hammer until it shows (it does within a few
    // thousand adds when two threads really overlap), with a bound.
    let c = Counter::with_max_shards(4);
    let start = Instant::now();
    let mut rounds = 0;
    while c.shards() == 0 && within_patience(start) {
        hammer(&c, 4, 100_000, 1);
        rounds += 1;
    }
    assert!(c.shards() >= 2, "never grew after {rounds} rounds");
    assert!(c.shards() <= 4);
    assert_eq!(c.sum(), rounds * 400_000);
}

/// More threads than the cap: owners store into their own shards, the
/// others add to the shared shards, and every count is exact (the owned
/// shards' single writers are checked in `src/counter.rs`'s unit tests and
/// the loom models).
#[test]
fn more_threads_than_the_cap_count_exactly() {
    let c = Counter::with_max_shards(2);
    assert_eq!(c.split(2), 2);
    for round in 1..=3 {
        hammer(&c, 6, 100_000, 1);
        assert_eq!(c.sum(), round * 600_000);
    }
    assert_eq!(c.shards(), 2);
}

#[test]
fn cap_of_one_never_grows() {
    let c = Counter::with_max_shards(1);
    hammer(&c, 4, 100_000, 1);
    assert_eq!(c.shards(), 0);
    assert_eq!(c.sum(), 400_000);
}

static STATIC_COUNTER: Counter = Counter::new();

#[test]
fn static_counter_from_many_threads() {
    hammer(&STATIC_COUNTER, 6, 50_000, 1);
    assert_eq!(STATIC_COUNTER.sum(), 300_000);
}

#[test]
fn up_down_balances_to_zero() {
    let c = Counter::new();
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..100_000 {
                    c.inc();
                    c.dec();
                }
                c.sub(7);
            });
        }
    });
    assert_eq!(c.sum_i64(), -28);
}

#[test]
fn concurrent_sums_are_monotonic_and_bounded() {
    let c = Counter::new();
    let total = 4 * 200_000u64;
    let done = AtomicBool::new(false);
    // The reader reads once before the writers start, so the reads below
    // never depend on the scheduler running it in time.
    let ready = Barrier::new(2);
    thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut last = 0;
            let mut reads = 0u64;
            let mut read = || {
                let now = c.sum();
                assert!(now >= last, "sum went back: {last} -> {now}");
                assert!(now <= total, "sum {now} exceeds adds {total}");
                last = now;
                reads += 1;
            };
            read();
            ready.wait();
            while !done.load(Ordering::Acquire) {
                read();
            }
            reads
        });
        ready.wait();
        thread::scope(|w| {
            for _ in 0..4 {
                w.spawn(|| (0..200_000).for_each(|_| c.inc()));
            }
        });
        done.store(true, Ordering::Release);
        assert!(reader.join().unwrap() > 0);
    });
    assert_eq!(c.sum(), total);
}

#[test]
fn take_while_adding_loses_nothing() {
    let c = Counter::new();
    let done = AtomicBool::new(false);
    let per = 300_000u64;
    let taken = thread::scope(|s| {
        let takers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut got = 0u64;
                    while !done.load(Ordering::Acquire) {
                        got += c.take();
                    }
                    got
                })
            })
            .collect();
        thread::scope(|w| {
            for _ in 0..3 {
                w.spawn(|| (0..per).for_each(|_| c.inc()));
            }
        });
        done.store(true, Ordering::Release);
        takers.into_iter().map(|t| t.join().unwrap()).sum::<u64>()
    });
    assert_eq!(taken + c.sum(), 3 * per);
}

#[test]
fn contention_is_seen_when_threads_rotate_over_counters() {
    // Metrics code often bumps several counters per request; sampling must
    // still see each one contended (a check pairs adds to the same word).
    let (a, b, c) = (
        Counter::with_max_shards(2),
        Counter::with_max_shards(2),
        Counter::with_max_shards(2),
    );
    let start = Instant::now();
    let mut rounds = 0u64;
    while (a.shards() == 0 || b.shards() == 0 || c.shards() == 0) && within_patience(start) {
        let barrier = Barrier::new(2);
        thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    barrier.wait();
                    for _ in 0..100_000 {
                        a.inc();
                        b.add(2);
                        c.add(3);
                    }
                });
            }
        });
        rounds += 1;
    }
    assert_eq!(
        (a.shards(), b.shards(), c.shards()),
        (2, 2, 2),
        "after {rounds} rounds"
    );
    assert_eq!(a.sum(), rounds * 200_000);
    assert_eq!(b.sum(), rounds * 400_000);
    assert_eq!(c.sum(), rounds * 600_000);
}

// A regression test from an adversarial review.
/// A single thread never contends with itself, so a counter it alone uses
/// must stay a single atomic. Contention sampling keys its note on the
/// address of the word it added to; when one counter is dropped and the next
/// one lives at the same address (a stack slot, a reused allocation), the
/// first add to the new counter "resolves" the old counter's note, finds a
/// different value and grows the table: allocation and 2+ padded shards for
/// a counter no other thread ever touched.
///
/// This is why `tests/counter_alloc.rs` fails under `cargo test --release`
/// (6 allocations: `available_parallelism` plus the table), where the
/// warm-up counter and the measured one share a stack slot.
#[test]
fn single_thread_counter_at_reused_address_never_grows() {
    thread::spawn(|| {
        // One storage location, two counters in turn.
        let mut slot = Counter::with_max_shards(4);
        slot.inc(); // this thread's first add: it notes (address, 1)
        let first = std::ptr::from_ref(&slot).addr();
        slot = Counter::with_max_shards(4); // the old counter is dropped here
        assert_eq!(std::ptr::from_ref(&slot).addr(), first);
        slot.inc(); // resolves the stale note: 0 found, 1 expected
        assert_eq!(
            slot.shards(),
            0,
            "a counter used by one thread only grew a shard table"
        );
        assert_eq!(slot.sum(), 1);
    })
    .join()
    .unwrap();
}

/// The same stale-note effect in an ordinary loop of short-lived counters on
/// one thread: some of them grow although no other thread exists.
#[test]
fn short_lived_counters_in_a_loop_never_grow() {
    thread::spawn(|| {
        let mut grew = 0;
        for _ in 0..1000 {
            let c = Counter::with_max_shards(4);
            c.inc();
            c.inc();
            grew += usize::from(c.shards() != 0);
        }
        assert_eq!(grew, 0, "{grew} of 1000 single-thread counters grew");
    })
    .join()
    .unwrap();
}

#[test]
fn threads_pinned_to_one_core_each_still_grow_the_table() {
    // `available_parallelism` follows the calling thread's affinity, so a
    // thread pinned to one core sees 1; the default cap must not become 1.
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    if cores.len() < 2 {
        eprintln!("skipped: fewer than 2 cores to pin to");
        return;
    }
    let c = Counter::new();
    let start = Instant::now();
    let mut rounds = 0u64;
    while c.shards() == 0 && within_patience(start) {
        let barrier = Barrier::new(2);
        thread::scope(|s| {
            for core in cores.iter().take(2) {
                let (c, barrier) = (&c, &barrier);
                s.spawn(move || {
                    core_affinity::set_for_current(*core);
                    barrier.wait();
                    (0..200_000).for_each(|_| c.inc());
                });
            }
        });
        rounds += 1;
    }
    assert!(
        c.shards() >= 2,
        "pinned threads never grew it in {rounds} rounds"
    );
    assert!(c.max_shards() >= 2);
    assert_eq!(c.sum(), rounds * 400_000);
}

/// `adds` increments on this thread while another calls `take` in a loop
/// until they are done; returns what the takes returned.
fn adds_racing_a_take_loop(c: &Counter, adds: u64) -> u64 {
    let done = AtomicBool::new(false);
    let start = Barrier::new(2);
    thread::scope(|s| {
        let taker = s.spawn(|| {
            start.wait();
            let mut taken = 0u64;
            while !done.load(Ordering::Relaxed) {
                taken += c.take();
            }
            taken
        });
        start.wait();
        for _ in 0..adds {
            c.inc();
        }
        done.store(true, Ordering::Relaxed);
        taker.join().unwrap()
    })
}

/// One adder and one thread calling `take` in a tight loop: the takes are
/// writes to the adder's word, but not contention between adders, so the
/// table must not grow (it used to double until the cap: 4096 shards after
/// 10 s). Nothing is lost either.
#[test]
fn take_loop_with_one_adder_never_grows_the_table() {
    const ADDS: u64 = 3_000_000;
    let c = Counter::with_max_shards(1 << 16);
    let taken = adds_racing_a_take_loop(&c, ADDS);
    assert_eq!(taken + c.sum(), ADDS, "a take lost or doubled counts");
    assert_eq!(c.shards(), 0, "takes alone grew the table");
}

/// The same with a counter that already has a table: takes must not make
/// it double further.
#[test]
fn take_loop_with_one_adder_never_grows_a_sharded_table() {
    const ADDS: u64 = 3_000_000;
    let c = Counter::with_max_shards(1 << 16);
    // Two adders until the first table exists.
    let start = Instant::now();
    while c.shards() == 0 && within_patience(start) {
        hammer(&c, 2, 10_000, 1);
    }
    assert!(c.shards() > 0, "two adders never grew the counter");
    let before = c.shards();
    let base = c.take();
    let taken = adds_racing_a_take_loop(&c, ADDS);
    assert_eq!(
        taken + c.sum(),
        ADDS,
        "a take lost or doubled counts (base {base})"
    );
    assert_eq!(c.shards(), before, "takes alone grew the table");
}

/// One thread alone: a `take` or `reset` between its adds rewrites its word,
/// which the contention check used to read as another writer.
#[test]
fn take_and_reset_on_one_thread_never_grow_the_table() {
    let c = Counter::with_max_shards(1 << 16);
    for i in 0..10_000u64 {
        c.inc();
        if i % 2 == 0 {
            assert_eq!(c.take(), 1);
        } else {
            c.reset();
        }
    }
    assert_eq!(c.shards(), 0, "takes and resets alone grew the table");
}

/// Owned rows under churn: short-lived threads (their owner ids handed on
/// to the next ones at exit), more of them than the cap, adding to a
/// split `Counter` and `CounterSet` while another thread takes in a loop.
/// Every add is in exactly one take or in the final reads.
#[test]
fn takes_in_a_loop_with_thread_churn_lose_and_double_nothing() {
    let c = shardcount::Counter::with_max_shards(2);
    let s = shardcount::CounterSet::with_max_shards(3, 2);
    c.split(2);
    s.split(2);
    let done = AtomicBool::new(false);
    let (taken, taken_set) = thread::scope(|sc| {
        let taker = sc.spawn(|| {
            let (mut t, mut ts) = (0u64, [0u64; 3]);
            while !done.load(Ordering::Relaxed) {
                t += c.take();
                for (a, b) in ts.iter_mut().zip(s.take_all()) {
                    *a += b;
                }
            }
            (t, ts)
        });
        for _round in 0..20 {
            thread::scope(|r| {
                for k in 0..3u64 {
                    let (c, s) = (&c, &s);
                    r.spawn(move || {
                        for i in 0..5_000u64 {
                            c.add(1 + k);
                            s.inc(((i + k) % 3) as usize);
                        }
                    });
                }
            });
        }
        done.store(true, Ordering::Relaxed);
        taker.join().unwrap()
    });
    assert_eq!(taken + c.sum(), 20 * 5_000 * (1 + 2 + 3));
    let rest = s.snapshot();
    for i in 0..3 {
        assert_eq!(taken_set[i] + rest[i], 20 * 5_000, "counter {i}");
    }
}
