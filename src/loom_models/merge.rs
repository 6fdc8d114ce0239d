//! Loom models of merge (`src/shard/merge.rs`, `src/thread/owner.rs`'s
//! revocation, `src/thread/grace.rs`): an owner's plain stores, sums and
//! takes racing a merge that folds the chain into the base and frees it.
//!
//! Loom's `join` returns before the thread's thread-locals are dropped,
//! so a thread that must be gone (its owner id given back) ends with
//! `owner::hand_back()`, as its exit would (every thread the models spawn
//! also does as it ends: `loom_models::thread`).

use super::thread;
use crate::counter::Counter;
use crate::histogram::Histogram;
use crate::set::CounterSet;
use crate::shard::GrowOnce;
use crate::thread::owner;
use loom::sync::Arc;

/// An owner storing into its row while another thread merges: the merge
/// waits for the owner's acknowledgement (its next add) or its exit, so
/// the store lands before the fold or goes to the base after; exact, and
/// back to no table once the owner is gone.
#[test]
fn merge_racing_owned_stores() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.split(2);
        let owner = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(1);
                c.add(2);
                owner::hand_back();
            })
        };
        let merged = c.merge();
        assert!(c.sum() <= 3, "a merge counted something twice");
        owner.join().unwrap();
        if !merged {
            // The owner has exited, and so given its id back.
            assert!(c.merge(), "a merge still pending after the owner left");
        }
        assert_eq!(c.shards(), 0);
        assert_eq!(c.sum(), 3);
    });
}

/// A reader's sums racing an owner and a merge: never beyond what was
/// added, never going back (a fold is seen wholly or not at all).
#[test]
fn sums_racing_a_merge() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.split(2);
        let owner = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(1);
                c.add(2);
                owner::hand_back();
            })
        };
        let merger = {
            let c = c.clone();
            thread::spawn(move || c.merge())
        };
        let first = c.sum();
        let second = c.sum();
        assert!(
            first <= 3 && second <= 3,
            "beyond the total: {first}, {second}"
        );
        assert!(second >= first, "a sum went back: {first} -> {second}");
        owner.join().unwrap();
        merger.join().unwrap();
        assert_eq!(c.sum(), 3);
    });
}

/// A take racing an owner and a merge: lossless (what the take got plus
/// what stays is everything added).
#[test]
fn take_racing_a_merge() {
    super::model(|| {
        let s = Arc::new(CounterSet::with_max_shards(1, 2));
        s.split(2);
        let owner = {
            let s = s.clone();
            thread::spawn(move || {
                s.add(0, 1);
                s.add(0, 2);
                owner::hand_back();
            })
        };
        let merger = {
            let s = s.clone();
            thread::spawn(move || s.merge())
        };
        let taken = s.take(0).unwrap();
        owner.join().unwrap();
        merger.join().unwrap();
        assert_eq!(taken + s.get(0).unwrap(), 3);
    });
}

/// Adds by a thread without an owner id (as from thread-local destructors
/// at exit: pinned, on the shared rows) racing a merge: the grace period
/// waits for them, so none lands in a drained or freed table.
#[test]
fn pinned_adds_racing_a_merge() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.split(2);
        let exiting = {
            let c = c.clone();
            thread::spawn(move || {
                owner::exit_now();
                c.add(1);
                c.add(2);
            })
        };
        let merged = c.merge();
        exiting.join().unwrap();
        assert!(merged || c.merge(), "nothing should hold the merge back");
        assert_eq!(c.sum(), 3);
    });
}

/// A growth racing a merge and an owner: the merge folds whichever chain
/// it retired, a growth after it starts a new one; exact either way.
#[test]
fn growth_racing_a_merge() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(4));
        c.split(2);
        let grower = {
            let c = c.clone();
            thread::spawn(move || c.grow_once())
        };
        let owner = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(1);
                c.add(2);
                owner::hand_back();
            })
        };
        let _ = c.merge();
        grower.join().unwrap();
        owner.join().unwrap();
        while !c.merge() {
            thread::yield_now();
        }
        assert_eq!((c.shards(), c.sum()), (0, 3));
    });
}

/// A split racing a merge: meeting the chain retiring, it puts it back;
/// folding, it waits for the fold's tag and grows from it (it returned 0
/// rows there, growing nothing); either way it has the rows it asked for.
#[test]
fn a_split_racing_a_merge_grows() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(4));
        c.split(2);
        let splitter = {
            let c = c.clone();
            thread::spawn(move || c.split(2))
        };
        let _ = c.merge();
        assert_eq!(splitter.join().unwrap(), 2);
    });
}

/// A histogram's record (two adds to one row: a bucket and the sum) by a
/// thread that leases its owner id inside the record, racing a merge: the
/// second add uses a head loaded after the lease, so neither lands in a
/// table the merge already folded.
#[test]
fn pair_records_racing_a_merge() {
    super::model(|| {
        let h = Arc::new(Histogram::with_bounds(&[10]));
        h.split(2);
        let recorder = {
            let h = h.clone();
            thread::spawn(move || {
                h.record(3);
                h.record(20);
                owner::hand_back();
            })
        };
        let _ = h.merge();
        recorder.join().unwrap();
        while !h.merge() {
            thread::yield_now();
        }
        let s = h.snapshot();
        assert_eq!((s.count(), s.sum()), (2, 23));
    });
}

/// A sum by a thread that holds an owner id reads its plain table
/// unpinned (`merge.rs`, "Holders' reads"), racing a merge: the merge
/// cannot fold before that thread's next add acknowledges, so the sum
/// sees exactly the thread's own adds before it.
#[test]
fn a_holders_unpinned_sum_racing_a_merge() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.split(2);
        let holder = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(1);
                let seen = c.sum();
                c.add(2);
                owner::hand_back();
                seen
            })
        };
        let merged = c.merge();
        assert_eq!(holder.join().unwrap(), 1, "a fold halfway through a read");
        assert!(merged || c.merge(), "the holder has left");
        assert_eq!(c.sum(), 3);
    });
}

/// A sum by a thread without an owner id racing a merge that nothing holds
/// back (the adder has left): it must pin, so that it sees the fold wholly
/// or not at all, and never a freed table.
#[test]
fn a_sum_without_an_id_racing_a_merge_pins() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.split(2);
        {
            let c = c.clone();
            thread::spawn(move || {
                c.add(3);
                owner::hand_back();
            })
        }
        .join()
        .unwrap();
        let merger = {
            let c = c.clone();
            thread::spawn(move || assert!(c.merge(), "nothing holds it back"))
        };
        assert_eq!(c.sum(), 3, "a sum that missed or doubled a fold");
        merger.join().unwrap();
    });
}

/// An owner that quiesces between two adds (gives its id back, as an
/// exit would), racing a merge: the merge may complete while the owner
/// holds no id, and the owner's next add must then lease again and load
/// the head afresh, never store into the folded table; a merge revoked
/// after that lease must wait for the owner again. Exact, and never
/// counted twice.
#[test]
fn a_quiescing_owner_racing_a_merge() {
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.split(2);
        let owner = {
            let c = c.clone();
            thread::spawn(move || {
                c.add(1);
                crate::quiesce::quiesce();
                c.add(2);
                owner::hand_back();
            })
        };
        let merged = c.merge();
        assert!(c.sum() <= 3, "a merge counted something twice");
        owner.join().unwrap();
        assert!(merged || c.merge(), "the owner has left");
        assert_eq!(c.shards(), 0);
        assert_eq!(c.sum(), 3);
    });
}

/// Two counters merged in one batch (one revocation, one grace period
/// before the folds and one before the frees) while an owner adds to both:
/// each table waits for the same acknowledgement, so neither folds while
/// the owner may still store into it. Exact, never counted twice.
#[test]
fn a_batch_of_two_racing_owned_stores() {
    super::model(|| {
        let a = Arc::new(Counter::with_max_shards(2));
        let b = Arc::new(Counter::with_max_shards(2));
        a.split(2);
        b.split(2);
        let owner = {
            let (a, b) = (a.clone(), b.clone());
            thread::spawn(move || {
                a.add(1);
                b.add(2);
                owner::hand_back();
            })
        };
        let done = crate::shard::merge_all(&mut [a.merge_part(), b.merge_part()]);
        assert!(
            a.sum() <= 1 && b.sum() <= 2,
            "a merge counted something twice"
        );
        owner.join().unwrap();
        assert!(done == 2 || (a.merge() && b.merge()), "the owner has left");
        assert_eq!((a.shards(), b.shards()), (0, 0));
        assert_eq!((a.sum(), b.sum()), (1, 2));
    });
}

/// A holder that adds, then waits (a parked pool thread: alive, its id
/// held, outside every add) while another thread merges: where the busy
/// words are trusted it holds nothing back, so the merge completes at
/// once; the holder's next add then goes to the base (its id revoked, it
/// leases again and sees the tag). Exact.
#[test]
fn a_parked_holder_holds_no_merge() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.split(2);
        let parked = Arc::new(AtomicBool::new(false));
        let go = Arc::new(AtomicBool::new(false));
        let holder = {
            let (c, parked, go) = (c.clone(), parked.clone(), go.clone());
            thread::spawn(move || {
                c.add(1);
                parked.store(true, Ordering::Release);
                while !go.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                c.add(2);
                owner::hand_back();
            })
        };
        while !parked.load(Ordering::Acquire) {
            thread::yield_now();
        }
        assert!(c.merge(), "a parked holder held the merge");
        assert_eq!((c.shards(), c.sum()), (0, 1));
        go.store(true, Ordering::Release);
        holder.join().unwrap();
        assert_eq!(c.sum(), 3);
    });
}

/// A thread that only reads (an exporter's) registers as a reader at its
/// first sum of a sharded counter, a pinned one, and then sums unpinned,
/// in a read window,
/// racing a merge: both sums are exact (a merge that folded while the
/// window was open would have the read miss the count: the base loaded
/// before the fold, the row after), and once the reader rests, alive and
/// outside every window, it holds no merge back. Fails when a merge
/// counts a reader as done whatever its `busy` word says.
#[test]
fn a_reader_holds_a_merge_only_while_it_reads() {
    use loom::sync::atomic::{AtomicBool, Ordering};
    super::model(|| {
        let c = Arc::new(Counter::with_max_shards(2));
        c.split(2);
        c.add(1);
        let rested = Arc::new(AtomicBool::new(false));
        let go = Arc::new(AtomicBool::new(false));
        let reader = {
            let (c, rested, go) = (c.clone(), rested.clone(), go.clone());
            thread::spawn(move || {
                // Pinned, registering a reader, unless the merge is done
                // (then both sums read the base alone).
                assert_eq!(c.sum(), 1, "the first (pinned) sum");
                assert_eq!(c.sum(), 1, "a sum in a read window");
                rested.store(true, Ordering::Release);
                while !go.load(Ordering::Acquire) {
                    thread::yield_now();
                }
                owner::hand_back();
            })
        };
        let first = c.merge();
        while !rested.load(Ordering::Acquire) {
            thread::yield_now();
        }
        assert!(first || c.merge(), "a resting reader held the merge");
        assert_eq!((c.shards(), c.sum()), (0, 1));
        go.store(true, Ordering::Release);
        reader.join().unwrap();
    });
}
