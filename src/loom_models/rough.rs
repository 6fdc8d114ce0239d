//! Loom models of `RoughCounter` (see the module docs of `src/rough.rs`).
//!
//! Each model checks one claim of the protocol: `sum` reads cumulative slot
//! totals only (no double count, no loss, whatever the folds do); a fold's
//! `Release` add to the tally pairs with `approx`'s `Acquire` so that
//! `approx() ≤ sum()`; any thread may fold any slot while its owner adds,
//! and a claim of a total older than the owner's last check (or than the
//! slot's give-back, or another orphan add) is claimed again, so with
//! nothing in progress each live slot is within a batch and every other
//! slot exact; thread exit folds and releases the slot, and the shared
//! block outlives a dropped counter exactly as long as a thread holds a slot
//! in it. The interval rule is off (`Duration::MAX`) so the models do not
//! depend on the clock.

use super::thread;
use crate::RoughCounter;
use loom::sync::Arc;
use std::time::Duration;

/// Loom's `join` returns before the thread's thread-local destructors run
/// (std's does not). A thread gives its slot back only after folding it, so
/// "no live slots" is the point from which its exit fold is visible.
fn wait_for_exit_folds(c: &RoughCounter) {
    while c.live_slots() != 0 {
        thread::yield_now();
    }
}

fn counter(batch: u64) -> Arc<RoughCounter> {
    Arc::new(
        RoughCounter::new()
            .with_batch(batch)
            .with_interval(Duration::MAX),
    )
}

/// An owner adds (folding on its second add) while another thread sums:
/// the sum is a prefix of the owner's adds, never a double count, and
/// everything is there after the join.
#[test]
fn owner_adds_while_other_sums() {
    super::model(|| {
        let c = counter(3);
        let owner = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(1);
                c.add(2); // reaches the batch: folds while the other sums
            })
        };
        let a = c.approx();
        let s = c.sum();
        assert!(
            s == 0 || s == 1 || s == 3,
            "sum {s} is not a prefix of 1, 2"
        );
        assert!(a <= s, "approx {a} > sum {s}");
        owner.join().unwrap();
        wait_for_exit_folds(&c);
        assert_eq!(c.sum(), 3);
        assert_eq!(c.approx(), 3);
    });
}

/// A fold by a third thread races `approx()` and `sum()`:
/// `approx() ≤ sum() ≤ total` in every interleaving, exact after the join.
#[test]
fn fold_races_sum_and_approx() {
    super::model(|| {
        let c = counter(100);
        let owner = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(1);
                c.add(1);
            })
        };
        let folder = {
            let c = c.clone();
            thread::spawn(move || c.flush_all())
        };
        let a = c.approx();
        let s = c.sum();
        assert!(a <= s, "approx {a} > sum {s}");
        assert!(s <= 2, "sum {s} counts more than was added");
        owner.join().unwrap();
        folder.join().unwrap();
        wait_for_exit_folds(&c);
        assert_eq!(c.sum(), 2);
        assert_eq!(c.approx(), 2);
    });
}

/// `flush_all()` on another thread races the owner's adds and its own
/// batch fold. The owner here is the main thread, which stays alive, so no
/// exit fold helps: after a final `flush_all`, the tally holds everything.
#[test]
fn flush_all_races_owner_adds() {
    super::model(|| {
        let c = counter(2);
        let other = {
            let c = c.clone();
            thread::spawn(move || c.flush_all())
        };
        c.add(1);
        c.add(1); // batch fold, racing the other thread's fold
        other.join().unwrap();
        let a = c.approx();
        assert!(a == 0 || a == 1 || a == 2, "approx {a}");
        assert_eq!(c.sum(), 2);
        c.flush_all();
        assert_eq!(c.approx(), 2);
        assert_eq!(c.sum(), 2);
    });
}

/// Two threads add and exit; their exit folds race each other and a reader.
/// After the joins `approx()` is exact, and a later thread reuses a slot.
#[test]
fn thread_exit_folds() {
    super::model(|| {
        let c = counter(100);
        let hs: Vec<_> = [1u64, 10]
            .into_iter()
            .map(|n| {
                let c = c.clone();
                thread::spawn(move || c.add(n))
            })
            .collect();
        let a = c.approx();
        assert!(a <= c.sum());
        for h in hs {
            h.join().unwrap();
        }
        wait_for_exit_folds(&c);
        assert_eq!(c.approx(), 11);
        assert_eq!(c.sum(), 11);
        assert!(c.slots() <= 2);
        // A later thread may take an exited thread's index (and so its
        // slot) or, if that index is not back yet, a new one; either way
        // nothing is lost. Reuse itself is checked with real threads
        // (tests/rough.rs, churn).
        let c2 = c.clone();
        thread::spawn(move || c2.add(100)).join().unwrap();
        wait_for_exit_folds(&c);
        assert!(c.slots() <= 3);
        assert_eq!(c.approx(), 111);
    });
}

/// The counter is dropped while a thread still holds a slot in it; the
/// thread's exit fold runs afterwards. Loom reports a leak if the shared
/// block is not freed, and the thread's accesses must not race its freeing.
#[test]
fn drop_counter_while_thread_holds_slot() {
    super::model(|| {
        let c = counter(100);
        let t = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(4);
                drop(c); // keeps its slot (and the shared block) until exit
            })
        };
        drop(c);
        t.join().unwrap();
    });
}

/// An add made after the thread's slot table is gone (from a thread-local
/// destructor) goes to the orphan slot, with a locked add, and is folded at
/// once; here it races the owner's own orphan add and a `flush_all`. (The
/// real destructor path is tested in `tests/rough.rs`: loom runs
/// thread-local destructors in a random order it cannot replay.)
#[test]
fn orphan_adds_race_flush_all() {
    super::model(|| {
        let c = counter(100);
        let t = {
            let c = c.clone();
            thread::spawn(move || {
                c.add_orphan(1);
                c.add_orphan(2);
            })
        };
        c.add_orphan(4);
        c.flush_all();
        let a = c.approx();
        // Not necessarily ≥ 4: the other thread's fold may have claimed our
        // add and not yet added it to the tally (documented on flush_all).
        assert!(a <= c.sum());
        t.join().unwrap();
        assert_eq!(c.sum(), 7);
        assert_eq!(c.approx(), 7);
    });
}

/// Slot handoff: a thread adds and exits (fold, then `in_use` released)
/// while a second thread may take over that very slot and add, and a third
/// folds everything. The new owner must continue from the old total
/// (`Acquire` takeover pairs with the `Release` give-back), so nothing is
/// lost or folded twice.
#[test]
fn slot_reuse_races_flush_all() {
    super::model(|| {
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

/// A counter's position in the threads' arenas goes back to the pool only
/// once each thread's word there is free (its slot handed back at exit),
/// and the next counter takes it with an `Acquire` load that orders its
/// adds after that: a thread that may hold the first thread's index and
/// arena counts the new counter from zero while the main thread sums.
/// (With the word left as the first thread's slot had it, the adds stay
/// in it: no carry, no takeover, and `b` sums 0.)
#[test]
fn a_reused_position_counts_from_zero() {
    super::model(|| {
        let a = counter(100);
        let first = {
            let a = a.clone();
            thread::spawn(move || a.add(3))
        };
        first.join().unwrap();
        wait_for_exit_folds(&a);
        drop(a);
        // Installed at once: the second thread's first add takes the hot
        // path to its word at the position.
        let b = Arc::new(
            RoughCounter::from(0)
                .with_batch(100)
                .with_interval(Duration::MAX),
        );
        let other = counter(100);
        let second = {
            let (b, other) = (b.clone(), other.clone());
            thread::spawn(move || {
                // An index first (perhaps the first thread's, with its
                // arena), so the adds to `b` take the hot path.
                other.add(1);
                b.add(1);
                b.add(1);
            })
        };
        let s = b.sum();
        assert!(s <= 2, "sum {s} counts adds of the dropped counter");
        second.join().unwrap();
        wait_for_exit_folds(&b);
        assert_eq!((b.sum(), b.approx()), (2, 2));
    });
}

/// `|sum - approx|` of a counter, as a distance around the `u64` circle.
fn lag(c: &RoughCounter) -> u64 {
    (c.sum().wrapping_sub(c.approx()) as i64).unsigned_abs()
}

/// The scenario: an owner counts up and down while another thread
/// folds its slot. A foreign fold reads the slot's total, the owner then
/// passes a check that does not fold and re-centres its window, and the
/// foreign claim lands afterwards with the total from before the check.
/// The owner measures once it is out of `add` and the folder is joined, so
/// no fold of its slot is in progress: the lag must be below one batch (one
/// live slot). The owner is a spawned thread so that a failure unwinds
/// through a model with no slot held by the model's main thread.
#[test]
fn stale_foreign_fold_keeps_lag_below_batch() {
    const BATCH: u64 = 10;
    super::model(|| {
        let c = counter(BATCH);
        let owner = {
            let c = c.clone();
            thread::spawn(move || {
                c.sub(4); // first add: takes the slot, arms a window around 0
                let folder = {
                    let c = c.clone();
                    thread::spawn(move || c.flush_all())
                };
                c.add(9); // leaves the window: a check that does not fold
                c.add(4); // inside the re-centred window: no check
                folder.join().unwrap();
                lag(&c)
            })
        };
        let l = owner.join().unwrap();
        wait_for_exit_folds(&c);
        assert!(
            l < BATCH,
            "lag {l} not below one batch with no fold in progress"
        );
    });
}

/// The same stale claim on a slot whose owner has exited: a foreign fold
/// reads the total after the owner's +5, the owner's -5 brings the total
/// back to what is folded, so its exit fold has nothing to claim, and the
/// foreign claim of +5 then lands on the free slot. Once every thread is
/// joined and no slot is live, `approx` must be exact, as documented.
#[test]
fn stale_foreign_fold_after_exit_leaves_approx_exact() {
    super::model(|| {
        let c = counter(100);
        let owner = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(5);
                c.sub(5); // back to the folded 0: the exit fold claims nothing
            })
        };
        let folder = {
            let c = c.clone();
            thread::spawn(move || c.flush_all())
        };
        owner.join().unwrap();
        folder.join().unwrap();
        wait_for_exit_folds(&c);
        assert_eq!(c.sum(), 0);
        assert_eq!(c.approx(), 0, "a stale claim stayed on a free slot");
    });
}

/// The same stale claim on the orphan slot, which every thread may add to:
/// one thread's fold reads the orphan's total after its +1, another's -1
/// brings the total back to what is folded (its fold claims nothing), and
/// the first claim of +1 lands afterwards. After the joins nothing is in
/// progress and `approx` must be exact.
#[test]
fn stale_orphan_fold_leaves_approx_exact() {
    super::model(|| {
        let c = counter(100);
        let t = {
            let c = c.clone();
            thread::spawn(move || c.add_orphan(1))
        };
        c.add_orphan(1u64.wrapping_neg());
        t.join().unwrap();
        assert_eq!(c.sum(), 0);
        assert_eq!(c.approx(), 0, "a stale claim stayed on the orphan slot");
    });
}

/// `std::thread::scope` returns once its closures have, before their
/// thread-local destructors (the exit folds) have run; loom's `join` is the
/// same. `flush_all` after it must still leave `approx` exact: it waits for
/// an exit fold that has claimed the slot's counts but not yet added them
/// to the tally.
#[test]
fn flush_all_after_a_join_that_precedes_the_exit_fold_is_exact() {
    super::model(|| {
        let c = counter(100);
        let t = {
            let c = c.clone();
            thread::spawn(move || c.add(3))
        };
        t.join().unwrap(); // the exit fold may still be running
        c.flush_all();
        assert_eq!(c.approx(), 3);
    });
}

/// A thread's own `flush` at the end of its work leaves `approx` exact
/// after the join, even while another thread's fold of its slot (a
/// `Folder` pass, a `flush_all`) has claimed counts it has not yet added.
#[test]
fn flush_racing_a_foreign_fold_is_exact_after_the_join() {
    super::model(|| {
        let c = counter(100);
        let t = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(3);
                c.flush();
            })
        };
        let folder = {
            let c = c.clone();
            thread::spawn(move || c.flush_all())
        };
        t.join().unwrap();
        assert_eq!(c.approx(), 3);
        folder.join().unwrap();
    });
}
