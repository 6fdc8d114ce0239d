//! Loom models of `Stock`'s protocol (the module docs of `src/stock.rs`).
//!
//! Each model starts from a given split over two shards. Spawned threads get
//! consecutive sequence numbers, so they sit on different shards, and which
//! one gets which depends on the interleaving, which loom explores.
//!
//! Claims checked: never below zero and one winner for the last unit (the
//! CAS expects an open value; swaps collect everything); no spurious failure
//! (a failure's pool is the whole stock at its last swap); exact accounting
//! across a consolidation (closed shards are frozen, so reopening stores lose
//! nothing); restocks that meet a closed shard wait and are not lost.

use super::thread;
use crate::Stock;
use loom::sync::Arc;

/// A take's outcome as plain values: `Err((requested, available))`.
fn take(s: &Stock, n: u64) -> Result<(), (u64, u64)> {
    s.try_sub(n).map_err(|e| (e.requested(), e.available()))
}

/// Runs `a` and `b` on two threads and returns their results.
fn race<A, B, RA, RB>(stock: &Arc<Stock>, a: A, b: B) -> (RA, RB)
where
    A: FnOnce(&Stock) -> RA + Send + 'static,
    B: FnOnce(&Stock) -> RB + Send + 'static,
    RA: Send + 'static,
    RB: Send + 'static,
{
    let (sa, sb) = (stock.clone(), stock.clone());
    let ha = thread::spawn(move || a(&sa));
    let hb = thread::spawn(move || b(&sb));
    (ha.join().unwrap(), hb.join().unwrap())
}

/// Two takers, one unit, on either shard: exactly one gets it, the other
/// fails with nothing available, and the stock ends at zero.
#[test]
fn last_unit_has_one_winner() {
    for amounts in [[1, 0], [0, 1]] {
        super::model(move || {
            let s = Arc::new(Stock::with_amounts(&amounts));
            let (a, b) = race(&s, |s| take(s, 1), |s| take(s, 1));
            let lost = (1, 0);
            assert!(
                (a.is_ok() && b == Err(lost)) || (b.is_ok() && a == Err(lost)),
                "{a:?} {b:?}"
            );
            assert_eq!(s.shard_amounts(), vec![0, 0]);
        });
    }
}

/// Three takers of one unit, two units split over both shards: exactly two
/// succeed.
#[test]
fn two_units_three_takers() {
    super::model(|| {
        let s = Arc::new(Stock::with_amounts(&[1, 1]));
        let (sa, sb) = (s.clone(), s.clone());
        let ha = thread::spawn(move || sa.try_sub(1).is_ok());
        let hb = thread::spawn(move || sb.try_sub(1).is_ok());
        let c = s.try_sub(1).is_ok();
        let wins = [ha.join().unwrap(), hb.join().unwrap(), c];
        assert_eq!(wins.iter().filter(|&&w| w).count(), 2);
        assert_eq!(s.sum(), 0);
    });
}

/// A take of 2 that needs both shards races a fast take of 1: one of them
/// must succeed (both failing would be spurious), and a failure reports
/// exactly the stock left by the winner.
#[test]
fn fragmented_take_racing_fast_take() {
    super::model(|| {
        let s = Arc::new(Stock::with_amounts(&[1, 1]));
        let (two, one) = race(&s, |s| take(s, 2), |s| take(s, 1));
        match (two, one) {
            (Ok(()), Err(e)) => {
                assert_eq!(e, (1, 0));
                assert_eq!(s.sum(), 0);
            }
            (Err(e), Ok(())) => {
                assert_eq!(e, (2, 1));
                assert_eq!(s.sum(), 1);
            }
            other => panic!("impossible outcome {other:?}"),
        }
    });
}

/// A take racing a restock, with stock always sufficient for it: it never
/// fails, and the restock is never lost (even if it meets a closed shard).
#[test]
fn take_racing_add_never_fails() {
    // [1, 0]: a taker on the empty shard borrows; [1, 1] with a take of 2:
    // the taker consolidates while the restock may meet a closed shard.
    for (amounts, n) in [([1, 0], 1), ([1, 1], 2)] {
        super::model(move || {
            let s = Arc::new(Stock::with_amounts(&amounts));
            let (took, ()) = race(&s, move |s| take(s, n), |s| s.add(1));
            assert_eq!(took, Ok(()));
            assert_eq!(s.sum(), amounts.iter().sum::<u64>() + 1 - n);
        });
    }
}

/// A rebalance (a short taker facing a shard too rich to borrow from, so it
/// consolidates and spreads) races a fast-path take from that rich shard:
/// both succeed and the accounting is exact.
#[test]
fn rebalance_racing_fast_take() {
    let rich = 4 * Stock::SPREAD_MIN;
    for amounts in [[rich, 0], [0, rich]] {
        super::model(move || {
            let s = Arc::new(Stock::with_amounts(&amounts));
            let (a, b) = race(&s, |s| take(s, 1), |s| take(s, 1));
            assert_eq!((a, b), (Ok(()), Ok(())));
            let after = s.shard_amounts();
            assert_eq!(after.iter().sum::<u64>(), rich - 2);
        });
    }
}

/// An explicit merge races a fast take: the take succeeds and nothing is
/// lost or duplicated by the merge.
#[test]
fn merge_racing_fast_take() {
    super::model(|| {
        let s = Arc::new(Stock::with_amounts(&[1, 1]));
        let (took, ()) = race(&s, |s| take(s, 1), |s| s.merge());
        assert_eq!(took, Ok(()));
        let after = s.shard_amounts();
        assert_eq!(after.iter().sum::<u64>(), 1);
    });
}

/// A take of 2 from [1, 1] while another thread restocks one unit and only
/// then a third takes one: the stock never drops below 2 during the take,
/// so it must succeed even though the restock and the take may hit
/// different shards (a failure decided by reading shards one by one, rather
/// than by closing them, would be fooled here).
#[test]
fn take_with_restock_then_take_elsewhere() {
    super::model(|| {
        let s = Arc::new(Stock::with_amounts(&[1, 1]));
        let restocked = Arc::new(loom::sync::atomic::AtomicBool::new(false));
        let (sa, sb, sc) = (s.clone(), s.clone(), s.clone());
        let r2 = restocked.clone();
        let a = thread::spawn(move || take(&sa, 2));
        let b = thread::spawn(move || {
            sb.add(1);
            // Release: the third thread's take follows the restock.
            r2.store(true, std::sync::atomic::Ordering::Release);
        });
        let c = thread::spawn(move || {
            // Acquire: pairs with the Release above.
            while !restocked.load(std::sync::atomic::Ordering::Acquire) {
                thread::yield_now();
            }
            take(&sc, 1)
        });
        assert_eq!(a.join().unwrap(), Ok(()));
        b.join().unwrap();
        assert_eq!(c.join().unwrap(), Ok(()));
        assert_eq!(s.sum(), 0);
    });
}

/// A restock whose own shard is full (at `cap` = MAX / 2 with two shards)
/// cannot add lock-free: it consolidates (`add_slow`), closing both shards,
/// while a take runs on either shard. The take must not fail (the stock
/// never drops below `cap`), and the restock must not be lost.
#[test]
fn restock_into_full_shard_races_take() {
    let cap = Stock::MAX / 2;
    for amounts in [[cap, 1], [1, cap]] {
        super::model(move || {
            let s = Arc::new(Stock::with_amounts(&amounts));
            let (sa, sb) = (s.clone(), s.clone());
            let adder = thread::spawn(move || sa.add(1));
            let taker = thread::spawn(move || sb.try_sub(1).is_ok());
            adder.join().unwrap();
            assert!(taker.join().unwrap(), "a take failed with {cap} in stock");
            assert_eq!(s.sum(), cap + 1);
        });
    }
}

/// `Stock::sum` docs: while only takes run, it lies between the stock at
/// its end and at its start.
#[test]
fn stock_sum_during_takes_is_between_end_and_start() {
    super::model(|| {
        let s = Arc::new(Stock::with_amounts(&[2, 1]));
        let (sa, sb) = (s.clone(), s.clone());
        let a = thread::spawn(move || sa.try_sub(1).unwrap());
        let b = thread::spawn(move || sb.try_sub(2).unwrap());
        let mid = s.sum();
        a.join().unwrap();
        b.join().unwrap();
        assert!(mid <= 3, "sum {mid} above the starting stock");
        assert_eq!(s.sum(), 0);
    });
}
