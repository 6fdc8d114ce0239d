//! Loom models of owner ids (the module docs of `src/thread/owner.rs`):
//! leases, hand-backs and reuse racing adds and sums.

use super::thread;
use crate::shard::GrowOnce;
use crate::thread::owner;
use crate::Counter;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;

/// The main thread owns row 0 of a table of 2; two threads lease ids,
/// add and exit, handing their ids back, while the main thread adds again
/// and sums. Depending on the order the second thread reuses the first's
/// id (and row) or gets id 3, beyond the table, and adds on its probe's
/// row, which the main thread owns: a row shared with its owner. Every
/// add is an atomic RMW, so the total is exact either way, and a
/// concurrent sum never exceeds what was added.
#[test]
fn lease_hand_back_and_reuse_racing_adds_and_sums() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.grow_once();
        c.add(1);
        assert_eq!(owner::owner(), 1, "the first lease of the model");
        let adders: Vec<_> = [2, 4]
            .into_iter()
            .map(|n| {
                let c = c.clone();
                thread::spawn(move || {
                    c.add(n);
                    owner::owner()
                })
            })
            .collect();
        c.add(8);
        let seen = c.sum();
        assert!(seen <= 15, "sum beyond total: {seen}");
        let ids: Vec<usize> = adders.into_iter().map(|t| t.join().unwrap()).collect();
        for id in &ids {
            assert!([2, 3].contains(id), "ids {ids:?}: the main thread holds 1");
        }
        assert_eq!(c.sum(), 15);
    });
}

/// Two threads leasing at once, after the main thread gave its id back:
/// while both hold theirs, the ids differ (each marks its id held while it
/// holds it), and they are the two smallest.
#[test]
fn live_leases_are_distinct_and_dense() {
    super::model(|| {
        assert_eq!(owner::lease(), 1);
        owner::hand_back();
        let held: Arc<[AtomicBool; 4]> = Arc::new(std::array::from_fn(|_| AtomicBool::new(false)));
        let leasers: Vec<_> = (0..2)
            .map(|_| {
                let held = held.clone();
                thread::spawn(move || {
                    let id = owner::lease();
                    // SeqCst: a plain flag between two threads; the
                    // pool's mutex orders the leases themselves.
                    let was = held[id].swap(true, Ordering::SeqCst);
                    assert!(!was, "id {id} leased to two live threads");
                    held[id].store(false, Ordering::SeqCst);
                    // Cleared before the id goes back, at thread exit.
                    id
                })
            })
            .collect();
        let mut ids: Vec<usize> = leasers.into_iter().map(|t| t.join().unwrap()).collect();
        ids.sort_unstable();
        // The second may lease after the first has exited: 1 again.
        assert!(ids == [1, 2] || ids == [1, 1], "ids {ids:?}");
    });
}

/// The row cache against a revocation (`Own` in `src/thread/owner.rs`): a
/// thread's fourth add in a row to a sharded counter fills its cache
/// while a merge's revocation runs. Once both are done, the thread's id is
/// revoked (it has not acknowledged), so the cache must not hit: a hit
/// would skip the slow path that acknowledges, holding a merge pending for
/// as long as the thread adds only there. Fails without the fill's barrier
/// or its reload, or without the revoker's clear.
#[test]
fn a_fill_racing_a_revocation_leaves_no_hit() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.grow_once();
        let revoked = Arc::new(AtomicBool::new(false));
        let adder = {
            let (c, revoked) = (c.clone(), revoked.clone());
            thread::spawn(move || {
                owner::lease();
                // The fourth miss in a row on the table fills the cache.
                for _ in 0..4 {
                    c.add(1);
                }
                // SeqCst: a plain flag; the protocol under test is
                // `revoke`'s and `fill`'s.
                while !revoked.load(Ordering::SeqCst) {
                    thread::yield_now();
                }
                assert!(
                    owner::owner() != 0 || !c.cache_hits(),
                    "a revoked thread's row cache still hits"
                );
            })
        };
        owner::revoke();
        revoked.store(true, Ordering::SeqCst);
        adder.join().unwrap();
        assert_eq!(c.sum(), 4);
    });
}

/// A thread that gave its id back (as at exit, before other thread-locals'
/// destructors add) must not hit its cache: the id may already be another
/// thread's, whose plain stores to the row would race its own. The second
/// thread leases (reusing the id or not) and adds while the first adds
/// after its hand-back; nothing is lost. Fails without the lease drop's
/// clear of the cache.
#[test]
fn a_handed_back_id_leaves_no_hit() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.grow_once();
        let first = {
            let c = c.clone();
            thread::spawn(move || {
                owner::lease();
                for _ in 0..4 {
                    c.add(1);
                }
                assert!(c.cache_hits());
                owner::exit_now();
                assert!(!c.cache_hits(), "a handed-back id's cache still hits");
                c.add(2);
            })
        };
        let second = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(4);
                c.add(8);
            })
        };
        first.join().unwrap();
        second.join().unwrap();
        assert_eq!(c.sum(), 18);
    });
}

/// A counter's drop empties every thread's cache that names its tables,
/// so a table allocated later at the same address is not taken for it
/// (the model checks the cache itself rather than wait for an address to
/// be reused). Fails without `owner::forget` in the drop.
#[test]
fn a_dropped_table_leaves_no_cache_entry() {
    super::model(|| {
        let c = Counter::with_max_shards(2);
        c.grow_once();
        let addr = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let dropped = Arc::new(AtomicBool::new(false));
        let mut c = Arc::new(c);
        let adder = {
            let (c, addr, dropped) = (c.clone(), addr.clone(), dropped.clone());
            thread::spawn(move || {
                owner::lease();
                for _ in 0..4 {
                    c.add(1);
                }
                assert!(c.cache_hits());
                addr.store(c.head_addr(), Ordering::SeqCst);
                drop(c);
                while !dropped.load(Ordering::SeqCst) {
                    thread::yield_now();
                }
                assert!(
                    owner::cached(addr.load(Ordering::SeqCst)).is_none(),
                    "a dropped table is still in a thread's cache"
                );
            })
        };
        // Wait for the adder's reference to go, then drop the counter.
        let c = loop {
            match Arc::try_unwrap(c) {
                Ok(c) => break c,
                Err(back) => {
                    thread::yield_now();
                    c = back;
                }
            }
        };
        assert_eq!(c.sum(), 4);
        drop(c);
        dropped.store(true, Ordering::SeqCst);
        adder.join().unwrap();
    });
}
