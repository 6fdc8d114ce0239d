//! Loom models of owner ids (the module docs of `src/thread/owner.rs`):
//! leases, hand-backs and reuse racing adds and sums.

use crate::thread::owner;
use crate::Counter;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

/// The main thread owns row 0 of a table of 2; two threads lease ids,
/// add and exit, handing their ids back, while the main thread adds again
/// and sums. Depending on the order the second thread reuses the first's
/// id (and row) or gets id 3, beyond the table, and adds on its probe's
/// row, which the main thread owns: a row shared with its owner. Every
/// add is an atomic RMW, so the total is exact either way, and a
/// concurrent sum never exceeds what was added.
#[test]
fn lease_hand_back_and_reuse_racing_adds_and_sums() {
    loom::model(|| {
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
    loom::model(|| {
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
