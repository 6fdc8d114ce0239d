//! Loom models of `LocalCounter`'s protocol (the module docs of
//! `src/local.rs`): folds racing `sum`, and the exit fold. The key is
//! written by hand here, with loom's thread-locals, as `local_counter!`
//! writes it with std's. Loom destroys every thread-local before it runs
//! any destructor, so a model thread runs its exit fold itself
//! (`exit_now`) as its last step; the destructor wiring is tested with real
//! threads (tests/local.rs).

use super::thread;
use crate::local::{Guard, LocalCounter, LocalKey, Moved};
use crate::primitive::sync::atomic::AtomicI64;

struct Key;

loom::lazy_static! {
    static ref COUNTER: LocalCounter<Key> = LocalCounter::__new(2);
}

loom::thread_local! {
    static CELL: AtomicI64 = AtomicI64::new(0);
    static GUARD: Guard = Guard::new();
    static MOVED: Moved = Moved::new();
}

impl LocalKey for Key {
    fn with_cell<R>(f: impl FnOnce(&AtomicI64) -> R) -> R {
        CELL.with(f)
    }
    fn with_guard<R>(f: impl FnOnce(&Guard) -> R) -> Option<R> {
        GUARD.try_with(f).ok()
    }
    fn with_moved<R>(f: impl FnOnce(&Moved) -> R) -> R {
        MOVED.with(f)
    }
    fn counter() -> &'static LocalCounter<Self> {
        &COUNTER
    }
}

/// Two adders (a first-use fold, then a batch fold each) and a reader: a
/// concurrent `sum` never exceeds the adds started (a fold is never counted
/// twice), and after the threads exit, `sum` and `approx` are exact. Adds
/// run on spawned threads only: the main thread's exit guard would run
/// after loom's statics are gone.
#[test]
fn folds_race_sum_and_exit_folds_are_exact() {
    super::model(|| {
        let adders: Vec<_> = (0..2)
            .map(|_| {
                thread::spawn(|| {
                    COUNTER.inc(); // first use: folds
                    COUNTER.inc();
                    COUNTER.inc(); // a batch of 2 since: folds
                    COUNTER.exit_now();
                })
            })
            .collect();
        let seen = COUNTER.sum();
        assert!(seen <= 6, "sum {seen} counted a fold twice");
        for a in adders {
            a.join().unwrap();
        }
        assert_eq!(COUNTER.sum(), 6);
        assert_eq!(COUNTER.approx(), 6);
    });
}

/// A `sum` counts every add that happened-before it, folded or pending,
/// however a fold interleaves with it: the owner's batch fold (its third
/// add) may run between the reader's tally load and its look at the cell.
#[test]
fn sum_counts_every_add_that_happened_before_it() {
    use crate::primitive::sync::atomic::{AtomicU64, Ordering};
    use loom::sync::Arc;
    super::model(|| {
        let done = Arc::new(AtomicU64::new(0));
        let t = {
            let done = Arc::clone(&done);
            thread::spawn(move || {
                for i in 1..=3 {
                    COUNTER.inc(); // the first and the third fold
                                   // Release: the reader's lower bound.
                    done.store(i, Ordering::Release);
                }
                COUNTER.exit_now();
            })
        };
        // Acquire: pairs with the store above.
        let before = done.load(Ordering::Acquire);
        let seen = COUNTER.sum();
        assert!(seen >= before, "sum {seen} after {before} adds");
        t.join().unwrap();
    });
}

/// One thread leaves counts pending and exits; its exit fold and a
/// concurrent reader: the reader never sees more than was added.
#[test]
fn exit_fold_races_sum() {
    super::model(|| {
        let t = thread::spawn(|| {
            COUNTER.add(1); // first use: folds
            COUNTER.add(1); // pending until exit
            COUNTER.exit_now();
        });
        let seen = COUNTER.sum();
        assert!(seen <= 2, "sum {seen}");
        t.join().unwrap();
        assert_eq!(COUNTER.approx(), 2);
        assert_eq!(COUNTER.sum(), 2);
    });
}

/// `std::thread::scope` returns before its threads' exit folds run. A
/// `sum` after the scope (here: after the thread's last add is visible,
/// its exit fold still to come or in progress) is exact: the exit fold
/// unregisters the cell and adds its counts to the tally in one step under
/// the registry lock, so `sum` sees one or the other.
#[test]
fn sum_racing_an_exit_fold_after_the_last_add_is_exact() {
    use crate::primitive::sync::atomic::{AtomicBool, Ordering};
    use loom::sync::Arc;
    super::model(|| {
        let done = Arc::new(AtomicBool::new(false));
        let t = {
            let done = Arc::clone(&done);
            thread::spawn(move || {
                COUNTER.add(1); // first use: folds
                COUNTER.add(1); // pending until exit
                                // Release: the "scope returned" point for the reader.
                done.store(true, Ordering::Release);
                COUNTER.exit_now();
            })
        };
        // Acquire: pairs with the store above.
        while !done.load(Ordering::Acquire) {
            thread::yield_now();
        }
        assert_eq!(COUNTER.sum(), 2);
        t.join().unwrap();
    });
}

/// `flush_all` from another thread racing an owner's adds and folds
/// (batch 2: the first add folds, the third folds again): `approx` and a
/// concurrent `sum` never exceed the adds (nothing counted twice), and
/// once the owner exits both are exact (nothing lost): what `flush_all`
/// moved is left out of the owner's next fold and its exit fold.
#[test]
fn flush_all_races_adds_and_folds() {
    super::model(|| {
        let t = thread::spawn(|| {
            COUNTER.inc(); // first use: folds
            COUNTER.inc(); // pending
            COUNTER.inc(); // a batch of 2 since: folds
            COUNTER.inc(); // pending until exit
            COUNTER.exit_now();
        });
        COUNTER.flush_all();
        let approx = COUNTER.approx();
        assert!(approx <= 4, "approx {approx} counted a move twice");
        let seen = COUNTER.sum();
        assert!(seen <= 4, "sum {seen} counted a move twice");
        t.join().unwrap();
        assert_eq!(COUNTER.sum(), 4);
        assert_eq!(COUNTER.approx(), 4);
    });
}

/// A pool worker that added and stays alive: `flush_all` after its adds
/// are visible makes `approx` exact, and `sum` stays exact.
#[test]
fn flush_all_of_a_live_worker_is_exact() {
    use crate::primitive::sync::atomic::{AtomicBool, Ordering};
    use loom::sync::Arc;
    super::model(|| {
        let (added, exit) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let t = {
            let (added, exit) = (Arc::clone(&added), Arc::clone(&exit));
            thread::spawn(move || {
                COUNTER.inc(); // first use: folds
                COUNTER.inc(); // pending
                               // Release: the adds are done, as a pool job's end.
                added.store(true, Ordering::Release);
                // Acquire: stays alive, as a pool worker, until told.
                while !exit.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                COUNTER.inc(); // pending again, after the move
                COUNTER.exit_now();
            })
        };
        // Acquire: pairs with the store above.
        while !added.load(Ordering::Acquire) {
            thread::yield_now();
        }
        assert_eq!(COUNTER.approx(), 1);
        COUNTER.flush_all();
        assert_eq!((COUNTER.approx(), COUNTER.sum()), (2, 2));
        // Release: pairs with the worker's Acquire.
        exit.store(true, Ordering::Release);
        t.join().unwrap();
        assert_eq!((COUNTER.approx(), COUNTER.sum()), (3, 3));
    });
}
