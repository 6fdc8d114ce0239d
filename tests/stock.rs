#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! `Stock`: the sequential spec, bad input, and stress with real threads.

use shardcount::{Insufficient, Stock};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;

/// The spread threshold `Stock` documents (32 units today): a tuning value
/// the crate keeps private, mirrored here for the tests of its behaviour.
const SPREAD_MIN: u64 = 32;

const THREADS: usize = 4;

/// A tiny per-thread generator: amounts of 1..=3.
struct Rng(u64);

impl Rng {
    fn amount(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        1 + self.0 % 3
    }
}

fn err(stock: &Stock, n: u64) -> (u64, u64) {
    let e = stock.try_sub(n).unwrap_err();
    (e.requested(), e.available())
}

#[test]
fn send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Stock>();
    check::<Insufficient>();
}

#[test]
fn sequential_spec() {
    let s = Stock::new(10);
    assert_eq!(s.sum(), 10);
    assert_eq!(s.try_sub(4), Ok(()));
    assert_eq!(s.sum(), 6);
    s.add(3);
    assert_eq!(s.sum(), 9);
    assert_eq!(err(&s, 10), (10, 9));
    assert_eq!(s.sum(), 9, "a failed take takes nothing");
    assert_eq!(s.try_sub(9), Ok(()));
    assert_eq!(s.sum(), 0);
    assert_eq!(err(&s, 1), (1, 0));
    assert_eq!(s.into_inner(), 0);
}

#[test]
fn defaults_and_conversions() {
    assert_eq!(Stock::default().sum(), 0);
    assert_eq!(Stock::from(5).sum(), 5);
    assert_eq!(Stock::new(0).shards(), Stock::default().shards());
    assert!(Stock::new(0).shards().is_power_of_two());
    assert_eq!(Stock::with_shards(1).shards(), 1);
    assert_eq!(Stock::with_shards(5).shards(), 8);
    assert_eq!(Stock::with_shards(65536).shards(), 65536);
}

#[test]
fn debug_shows_sum_and_shards() {
    let s = Stock::with_shards(4);
    s.add(12);
    assert_eq!(format!("{s:?}"), "Stock { sum: 12, shards: 4 }");
}

#[test]
fn zero_amounts() {
    let s = Stock::default();
    assert_eq!(s.try_sub(0), Ok(()), "taking nothing always succeeds");
    s.add(0);
    assert_eq!(s.sum(), 0);
}

#[test]
fn take_above_max_fails_cleanly() {
    let s = Stock::new(Stock::MAX);
    assert_eq!(err(&s, Stock::MAX + 1), (Stock::MAX + 1, Stock::MAX));
    assert_eq!(err(&s, u64::MAX), (u64::MAX, Stock::MAX));
    assert_eq!(s.try_sub(Stock::MAX), Ok(()));
    assert_eq!(s.sum(), 0);
}

#[test]
fn add_beyond_max_panics_and_adds_nothing() {
    let s = Stock::with_shards(4);
    s.add(Stock::MAX - 1);
    let e = catch_unwind(AssertUnwindSafe(|| s.add(2))).unwrap_err();
    let msg = e.downcast_ref::<String>().unwrap();
    assert!(msg.contains("would exceed Stock::MAX"), "{msg}");
    assert_eq!(s.sum(), Stock::MAX - 1);
    // The stock still works, lock included.
    s.add(1);
    assert_eq!(s.sum(), Stock::MAX);
    assert_eq!(s.try_sub(Stock::MAX), Ok(()));
    assert!(catch_unwind(|| Stock::new(u64::MAX)).is_err());
}

#[test]
fn bad_shard_counts_panic() {
    assert!(catch_unwind(|| Stock::with_shards(0)).is_err());
    assert!(catch_unwind(|| Stock::with_shards(65537)).is_err());
}

#[test]
fn adds_past_one_shards_capacity_spread() {
    // One shard holds at most MAX / 4 here: the rest must go elsewhere.
    let s = Stock::with_shards(4);
    s.add(Stock::MAX / 2);
    s.add(Stock::MAX / 2);
    assert_eq!(s.sum(), Stock::MAX);
    assert!(s.shard_amounts().iter().all(|&a| a <= Stock::MAX / 4));
}

#[test]
fn insufficient_formats() {
    let e = Stock::new(2).try_sub(7).unwrap_err();
    assert_eq!(
        e.to_string(),
        "insufficient stock: requested 7, available 2"
    );
    assert_eq!(
        format!("{e:?}"),
        "Insufficient { requested: 7, available: 2 }"
    );
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
    assert!(boxed.source().is_none());
    assert_eq!(boxed.to_string(), e.to_string());
}

#[test]
fn merge_collects_into_one_shard() {
    // Rich enough to be spread over every shard by `new`.
    let s = Stock::with_shards(8);
    s.add(1000 * SPREAD_MIN);
    s.merge();
    let amounts = s.shard_amounts();
    assert_eq!(amounts.iter().filter(|&&a| a > 0).count(), 1);
    assert_eq!(amounts.iter().sum::<u64>(), 1000 * SPREAD_MIN);
}

#[test]
fn takes_from_another_threads_shard_then_spreads() {
    let s = Stock::with_shards(4);
    thread::scope(|sc| {
        sc.spawn(|| s.add(4 * 4 * SPREAD_MIN));
    });
    assert_eq!(s.try_sub(1), Ok(()));
    // Same shard as the adder: untouched split; else a rich shard is spread.
    let amounts = s.shard_amounts();
    assert!(
        amounts.iter().filter(|&&a| a > 0).count() == 1 || amounts.iter().all(|&a| a >= SPREAD_MIN),
        "{amounts:?}"
    );
    for _ in 1..4 * 4 * SPREAD_MIN {
        assert_eq!(s.try_sub(1), Ok(()));
    }
    assert_eq!(s.sum(), 0);
}

#[test]
fn failed_take_merges_what_is_left() {
    let s = Stock::with_shards(4);
    thread::scope(|sc| {
        for _ in 0..3 {
            sc.spawn(|| s.add(3));
        }
    });
    assert_eq!(err(&s, 10), (10, 9));
    assert_eq!(s.shard_amounts().iter().filter(|&&a| a > 0).count(), 1);
    assert_eq!(s.sum(), 9);
}

/// Threads take single units until refused: exactly `stock` succeed, the
/// stock ends at 0, and an observer's sums never exceed the start, never
/// rise (takes only), and never wrap.
fn drain_singles(stock: Stock, initial: u64) {
    let done = AtomicBool::new(false);
    let start = Barrier::new(THREADS + 1);
    let taken = AtomicU64::new(0);
    thread::scope(|sc| {
        sc.spawn(|| {
            let mut last = initial;
            while !done.load(Ordering::Relaxed) {
                let now = stock.sum();
                assert!(now <= last, "sum rose from {last} to {now} with takes only");
                last = now;
            }
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                sc.spawn(|| {
                    start.wait();
                    let mut mine = 0;
                    while stock.try_sub(1).is_ok() {
                        mine += 1;
                    }
                    taken.fetch_add(mine, Ordering::Relaxed);
                })
            })
            .collect();
        start.wait();
        workers.into_iter().for_each(|w| w.join().unwrap());
        done.store(true, Ordering::Relaxed);
    });
    assert_eq!(taken.load(Ordering::Relaxed), initial);
    assert_eq!(stock.sum(), 0);
    assert!(stock.shard_amounts().iter().all(|&a| a == 0));
}

#[test]
fn drain_singles_default_shards() {
    drain_singles(Stock::new(200_000), 200_000);
}

#[test]
fn drain_singles_two_shards() {
    drain_singles(
        {
            let s = Stock::with_shards(2);
            s.add(100_000);
            s
        },
        100_000,
    );
}

#[test]
fn drain_few_units_many_shards() {
    for _ in 0..50 {
        let s = Stock::with_shards(16);
        s.add(7);
        drain_singles(s, 7);
    }
}

/// Random takes of 1..=3 until refused: the stock taken plus what is left
/// is the initial stock, and every refusal was justified: the stock left
/// at the end (takes only, so it never rose) is at most what each failure
/// reported, and each failure reported less than it asked.
#[test]
fn drain_random_amounts() {
    const INITIAL: u64 = 300_000;
    let stock = Stock::new(INITIAL);
    let results: Vec<(u64, Insufficient)> = thread::scope(|sc| {
        let workers: Vec<_> = (0..THREADS as u64)
            .map(|t| {
                let stock = &stock;
                sc.spawn(move || {
                    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (t + 1));
                    let mut mine = 0;
                    loop {
                        let n = rng.amount();
                        match stock.try_sub(n) {
                            Ok(()) => mine += n,
                            Err(e) => return (mine, e),
                        }
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let left = stock.sum();
    let taken: u64 = results.iter().map(|r| r.0).sum();
    assert_eq!(taken + left, INITIAL);
    for (_, e) in &results {
        assert!(e.available() < e.requested());
        assert!(left <= e.available(), "{e} but {left} left at the end");
    }
    assert!(left < 3);
}

/// Takers whose combined demand is below the stock never fail, however the
/// stock is split among shards when they start.
#[test]
fn never_fails_while_sufficient() {
    const PER_THREAD: u64 = 20_000;
    // At most 3 units per take.
    let stock = Stock::new(THREADS as u64 * PER_THREAD * 3);
    thread::scope(|sc| {
        for t in 0..THREADS as u64 {
            let stock = &stock;
            sc.spawn(move || {
                let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (t + 1));
                for _ in 0..PER_THREAD {
                    let n = rng.amount();
                    if let Err(e) = stock.try_sub(n) {
                        panic!("spurious failure: {e}");
                    }
                }
            });
        }
    });
}

/// Takers of 1..=3 race restockers: at the end, initial + restocks − taken
/// is exactly what is left, and an observer never sees more than initial +
/// every restock.
#[test]
fn restocks_account_exactly() {
    const INITIAL: u64 = 1_000;
    const RESTOCKERS: u64 = 2;
    const RESTOCKS: u64 = 20_000;
    let stock = Stock::new(INITIAL);
    let taken = AtomicU64::new(0);
    let restocked = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let ceiling = INITIAL + RESTOCKERS * RESTOCKS * 3;
    thread::scope(|sc| {
        sc.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                assert!(stock.sum() <= ceiling);
            }
        });
        let restockers: Vec<_> = (0..RESTOCKERS)
            .map(|t| {
                let (stock, restocked) = (&stock, &restocked);
                sc.spawn(move || {
                    let mut rng = Rng(0xA076_1D64_78BD_642F ^ (t + 1));
                    for _ in 0..RESTOCKS {
                        let n = rng.amount();
                        stock.add(n);
                        restocked.fetch_add(n, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let takers: Vec<_> = (0..THREADS as u64)
            .map(|t| {
                let (stock, taken, done) = (&stock, &taken, &done);
                sc.spawn(move || {
                    let mut rng = Rng(0xE703_7ED1_A0B4_28DB ^ (t + 1));
                    let mut mine = 0;
                    while !done.load(Ordering::Relaxed) {
                        let n = rng.amount();
                        if stock.try_sub(n).is_ok() {
                            mine += n;
                        }
                    }
                    taken.fetch_add(mine, Ordering::Relaxed);
                })
            })
            .collect();
        restockers.into_iter().for_each(|r| r.join().unwrap());
        done.store(true, Ordering::Relaxed);
        takers.into_iter().for_each(|t| t.join().unwrap());
    });
    let (taken, restocked) = (taken.into_inner(), restocked.into_inner());
    assert_eq!(stock.sum(), INITIAL + restocked - taken);
    // Quiescent now: a final drain takes exactly what is left.
    let left = stock.sum();
    assert_eq!(stock.try_sub(left), Ok(()));
    assert_eq!(err(&stock, 1), (1, 0));
}

/// As `never_fails_while_sufficient`, with restocks landing on other shards
/// meanwhile: restocks only raise the stock, so no take may fail.
#[test]
fn never_fails_while_sufficient_with_restocks() {
    const PER_THREAD: u64 = 20_000;
    for shards in [2, 8] {
        let stock = Stock::with_shards(shards);
        stock.add(THREADS as u64 * PER_THREAD * 3);
        let done = AtomicBool::new(false);
        thread::scope(|sc| {
            sc.spawn(|| {
                let mut rng = Rng(0x2545_F491_4F6C_DD1D);
                while !done.load(Ordering::Relaxed) {
                    stock.add(rng.amount());
                }
            });
            let takers: Vec<_> = (0..THREADS as u64)
                .map(|t| {
                    let stock = &stock;
                    sc.spawn(move || {
                        let mut rng = Rng(0x8CB9_2BA7_2F3D_8DD7 ^ (t + 1));
                        for _ in 0..PER_THREAD {
                            let n = rng.amount();
                            if let Err(e) = stock.try_sub(n) {
                                panic!("spurious failure: {e}");
                            }
                        }
                    })
                })
                .collect();
            takers.into_iter().for_each(|t| t.join().unwrap());
            done.store(true, Ordering::Relaxed);
        });
    }
}

// A regression test from an adversarial review.
/// Near-empty churn: `T` workers each take 1..=3 units and put them back,
/// so at any instant the others hold at most 3 × (T − 1) units and the stock
/// is at least 3 ≥ n: **no take may ever fail**. The stock is tiny, so it
/// lives merged in one shard and takes go through borrows and
/// consolidations all the time, while another thread calls `merge` and
/// `sum`.
#[test]
fn near_empty_churn_never_fails_and_is_exact() {
    const T: u64 = 4;
    const ROUNDS: u64 = 200_000;
    for shards in [1, 2, 8] {
        let stock = Stock::with_shards(shards);
        stock.add(3 * T);
        let done = AtomicBool::new(false);
        let merges = AtomicU64::new(0);
        // The workers and the merger start together, so they overlap.
        let start = Barrier::new(T as usize + 1);
        thread::scope(|sc| {
            sc.spawn(|| {
                start.wait();
                while !done.load(Ordering::Relaxed) {
                    merges.fetch_add(1, Ordering::Relaxed);
                    // Not bounded by 3T: `sum` reads shard after shard, so a
                    // unit moved from a read shard to an unread one counts
                    // twice (documented: not a snapshot).
                    let _ = stock.sum();
                    stock.merge();
                }
            });
            let workers: Vec<_> = (0..T)
                .map(|t| {
                    let (stock, start) = (&stock, &start);
                    let merges = &merges;
                    sc.spawn(move || {
                        start.wait();
                        // With more threads than cores, the merger might
                        // otherwise first run after the workers are done.
                        while merges.load(Ordering::Relaxed) == 0 {
                            thread::yield_now();
                        }
                        for i in 0..ROUNDS {
                            let n = 1 + (i * 7 + t) % 3;
                            if let Err(e) = stock.try_sub(n) {
                                panic!("spurious failure with {shards} shards: {e}");
                            }
                            stock.add(n);
                        }
                    })
                })
                .collect();
            workers.into_iter().for_each(|w| w.join().unwrap());
            done.store(true, Ordering::Relaxed);
        });
        assert_eq!(stock.sum(), 3 * T, "{shards} shards");
        assert!(merges.into_inner() > 0, "the merger never ran");
    }
}

/// Restocks that overflow their own shard's cap (MAX / shards) consolidate;
/// racing takes and restocks near the cap must keep the accounting exact.
#[test]
fn restocks_past_shard_cap_race_takes() {
    let stock = Stock::with_shards(2);
    let cap = Stock::MAX / 2;
    stock.add(cap - 10);
    thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| {
                for _ in 0..20_000 {
                    stock.add(3);
                    stock.try_sub(3).unwrap();
                }
            });
        }
        sc.spawn(|| {
            for _ in 0..2_000 {
                stock.merge(); // pushes everything towards one shard's cap
            }
        });
    });
    assert_eq!(stock.sum(), cap - 10);
}

/// `merge` documents: "Collects the whole stock into the caller's shard …
/// If the stock exceeds one shard's capacity (`MAX / shards`), the excess is
/// spread evenly." The code spreads the *whole* stock evenly instead, so the
/// caller's shard ends up with about half, not full.
#[test]
fn merge_over_capacity_fills_callers_shard() {
    let s = Stock::with_shards(2);
    let cap = Stock::MAX / 2;
    s.add(cap + 2);
    s.merge();
    let amounts = s.shard_amounts();
    assert_eq!(amounts.iter().sum::<u64>(), cap + 2);
    assert!(
        amounts.contains(&cap),
        "merge left {amounts:?}: the caller's shard is not filled to cap {cap}"
    );
}
