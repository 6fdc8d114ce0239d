//! Review tests for `Stock` (adversarial review).

use shardcount::Stock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;

/// Near-empty churn: `T` workers each take 1..=3 units and put them back,
/// so at any instant the others hold at most 3 × (T − 1) units and the stock
/// is at least 3 ≥ n: **no take may ever fail**. The stock is tiny, so it
/// lives merged in one shard and takes go through borrows and
/// consolidations all the time, while another thread calls `merge` and
/// `sum`.
#[test]
fn review_near_empty_churn_never_fails_and_is_exact() {
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
                    sc.spawn(move || {
                        start.wait();
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
fn review_restocks_past_shard_cap_race_takes() {
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
fn review_merge_over_capacity_fills_callers_shard() {
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
