//! Loom models of `LocalCounter`'s protocol (the module docs of
//! `src/local.rs`): folds racing `sum`, and the exit fold. The key is
//! written by hand here, with loom's thread-locals, as `local_counter!`
//! writes it with std's. Loom destroys every thread-local before it runs
//! any destructor, so a model thread runs its exit fold itself
//! (`exit_now`) as its last step; the destructor wiring is tested with real
//! threads (tests/local.rs).

use crate::local::{Guard, LocalCounter, LocalKey};
use crate::primitive::sync::atomic::AtomicI64;
use loom::thread;

struct Key;

loom::lazy_static! {
    static ref COUNTER: LocalCounter<Key> = LocalCounter::__new(2);
}

loom::thread_local! {
    static CELL: AtomicI64 = AtomicI64::new(0);
    static GUARD: Guard = Guard::new();
}

impl LocalKey for Key {
    fn with_cell<R>(f: impl FnOnce(&AtomicI64) -> R) -> R {
        CELL.with(f)
    }
    fn with_guard<R>(f: impl FnOnce(&Guard) -> R) -> Option<R> {
        GUARD.try_with(f).ok()
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
    loom::model(|| {
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

/// One thread leaves counts pending and exits; its exit fold and a
/// concurrent reader: the reader never sees more than was added.
#[test]
fn exit_fold_races_sum() {
    loom::model(|| {
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
