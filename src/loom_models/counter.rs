//! Loom models of `Counter`'s protocol (the module docs of `src/counter.rs` and `src/shard`).
//!
//! Under loom every add is checked (the sampler's loom constants), so an
//! interleaving with another writer really grows the table inside the model.

use super::thread;
use crate::shard::GrowOnce;
use crate::Counter;
use loom::sync::Arc;

/// Two adders and a concurrent reader: nothing lost after join, a concurrent
/// sum never exceeds what was added, and one reader's sums never decrease.
#[test]
fn add_and_sum() {
    super::model(|| {
        let c = Arc::new(Counter::new());
        let adders: Vec<_> = (0..2)
            .map(|_| {
                let c = c.clone();
                thread::spawn(move || {
                    c.add(1);
                    c.add(2);
                })
            })
            .collect();
        let first = c.sum();
        let second = c.sum();
        assert!(
            first <= 6 && second <= 6,
            "sum beyond total: {first}, {second}"
        );
        assert!(second >= first, "sum went back: {first} -> {second}");
        for a in adders {
            a.join().unwrap();
        }
        assert_eq!(c.sum(), 6);
    });
}

/// An add racing a growth of the shard table (base → 2 shards → 4 shards):
/// the total is exact whichever table the add lands in.
#[test]
fn add_racing_growth() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(4));
        let grower = {
            let c = c.clone();
            thread::spawn(move || {
                c.grow_once();
                c.grow_once();
            })
        };
        let adder = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(5);
                c.add(7);
            })
        };
        c.add(1);
        grower.join().unwrap();
        adder.join().unwrap();
        assert_eq!(c.shards(), 4);
        assert_eq!(c.sum(), 13);
    });
}

/// Two threads whose adds race on the base: a lost exchange creates the
/// table, and no count is lost in that switch.
#[test]
fn racing_adds_grow_without_loss() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        let other = {
            let c = c.clone();
            thread::spawn(move || c.add(10))
        };
        c.add(1);
        other.join().unwrap();
        assert_eq!(c.sum(), 11);
        assert!(c.shards() <= 2);
    });
}

/// `take` racing adds: every add is counted by exactly one take or stays
/// for the final sum.
#[test]
fn take_and_add() {
    super::model(|| {
        let c = Arc::new(Counter::new());
        let adder = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(1);
                c.add(2);
            })
        };
        let taker = {
            let c = c.clone();
            thread::spawn(move || c.take())
        };
        let mine = c.take();
        let theirs = taker.join().unwrap();
        adder.join().unwrap();
        assert_eq!(mine + theirs + c.sum(), 3);
    });
}

/// `take` racing an add that lands in a table grown concurrently.
#[test]
fn take_racing_growth() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.add(4);
        let grower = {
            let c = c.clone();
            thread::spawn(move || {
                c.grow_once();
                c.add(3);
            })
        };
        let taken = c.take();
        grower.join().unwrap();
        assert_eq!(taken + c.sum(), 7);
    });
}

/// One adder and one taker: a take between the adder's noting and resolving
/// adds is not interference, so the counter never grows (the epoch protocol
/// in `src/counter.rs`). Also exact.
#[test]
fn take_between_checks_never_grows_the_base() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(4));
        let taker = {
            let c = c.clone();
            thread::spawn(move || c.take())
        };
        c.add(1);
        c.add(2);
        let taken = taker.join().unwrap();
        assert_eq!(taken + c.sum(), 3);
        assert_eq!(c.shards(), 0, "a take alone grew the counter");
    });
}

/// The same on a counter that already has a table: it keeps its size.
#[test]
fn take_between_checks_never_grows_a_table() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(4));
        c.grow_once();
        let taker = {
            let c = c.clone();
            thread::spawn(move || c.take())
        };
        // The probed path: a thread that owns a row never checks it.
        c.add_probed_for_test(1);
        c.add_probed_for_test(2);
        let taken = taker.join().unwrap();
        assert_eq!(taken + c.sum(), 3);
        assert_eq!(c.shards(), 2, "a take alone grew the table");
    });
}

/// An owner storing plainly into its row (`shard/owned.rs`) racing two
/// takes and a sum: every add is in exactly one take or in the final sum,
/// and no read is ever "negative" (a wrapped huge value from a baseline
/// ahead of the word it was read against).
#[test]
fn owned_stores_racing_takes_and_a_sum() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.grow_once();
        let owner = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(1);
                c.add(2);
                c.add(4);
            })
        };
        let taker = {
            let c = c.clone();
            thread::spawn(move || c.take())
        };
        let mine = c.take();
        let seen = c.sum();
        assert!(
            seen <= 7 && mine <= 7,
            "a wrapped read: sum {seen}, take {mine}"
        );
        let theirs = taker.join().unwrap();
        owner.join().unwrap();
        assert!(theirs <= 7, "a wrapped take: {theirs}");
        assert_eq!(mine + theirs + c.sum(), 7);
    });
}

/// A thread leasing an owner id and storing into the row it then owns,
/// while another adds twice through the probed path (to a shared row,
/// never the owned one; its second check has an epoch to compare, so some
/// interleavings grow the table) and a third sums: exact either way, and
/// the concurrent sum never exceeds what was added.
#[test]
fn owned_row_beside_a_probed_add() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(4));
        c.grow_once();
        let owner = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(1);
                c.add(2);
            })
        };
        let sharer = {
            let c = c.clone();
            thread::spawn(move || {
                c.add_probed_for_test(4);
                c.add_probed_for_test(8);
            })
        };
        let seen = c.sum();
        assert!(seen <= 15, "sum beyond total: {seen}");
        owner.join().unwrap();
        sharer.join().unwrap();
        assert_eq!(c.sum(), 15);
    });
}
