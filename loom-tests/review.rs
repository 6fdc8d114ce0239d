//! Review models: protocol paths of `Stock` and `RoughCounter` that the
//! other loom files do not reach.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use shardcount::{RoughCounter, Stock};
use std::time::Duration;

/// A restock whose own shard is full (at `cap` = MAX / 2 with two shards)
/// cannot add lock-free: it consolidates (`add_slow`), closing both shards,
/// while a take runs on either shard. The take must not fail (the stock
/// never drops below `cap`), and the restock must not be lost.
#[test]
fn restock_into_full_shard_races_take() {
    let cap = Stock::MAX / 2;
    for amounts in [[cap, 1], [1, cap]] {
        loom::model(move || {
            let s = Arc::new(Stock::with_amounts_for_test(&amounts));
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
    loom::model(|| {
        let s = Arc::new(Stock::with_amounts_for_test(&[2, 1]));
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

/// Slot handoff: a thread adds and exits (fold, then `in_use` released)
/// while a second thread may take over that very slot and add, and a third
/// folds everything. The new owner must continue from the old total
/// (`Acquire` takeover pairs with the `Release` give-back), so nothing is
/// lost or folded twice.
#[test]
fn slot_reuse_races_flush_all() {
    loom::model(|| {
        let c = Arc::new(
            RoughCounter::new()
                .with_batch(100)
                .with_interval(Duration::MAX),
        );
        let first = {
            let c = c.clone();
            thread::spawn(move || c.add(1))
        };
        let second = {
            let c = c.clone();
            thread::spawn(move || c.add(2))
        };
        c.flush_all();
        assert!(c.approx() <= c.sum());
        first.join().unwrap();
        second.join().unwrap();
        while c.live_slots() != 0 {
            thread::yield_now();
        }
        assert_eq!(c.sum(), 3);
        assert_eq!(c.approx(), 3);
    });
}
