//! Owner ids: which rows of a shard table the adding threads own.
//!
//! A sharded `Counter` or `CounterSet` gives row `id - 1` of its table to
//! the thread holding owner id `id`, while the table has that row. Ids are
//! leased only to threads that add to a sharded table (one that exists
//! because threads contended on it), on their first such add, from a pool
//! of their own, smallest free id first. So a thread that only holds a
//! thread index (`thread::index`, which a `RoughCounter` slot takes) or
//! adds only to unsharded counters never pushes a busy thread beyond a
//! table: N threads adding to sharded tables on N cores hold ids 1..=N and
//! own N distinct rows of any table that has N rows, whatever other
//! threads exist.
//!
//! # Protocol
//!
//! * `OWNER` (a `const` thread-local without a destructor, so the hot
//!   path reads it with a bare TLS load) holds the calling thread's id, 0
//!   while it has none.
//! * `LEASE` (a thread-local with a destructor) holds the lease. At thread
//!   exit its destructor sets `OWNER` to 0 and only then gives the id back
//!   to the pool, under the pool's mutex: every owned add the thread made
//!   happens-before the next thread's lease of the same id, so two threads
//!   never add to one row *as its owner* at once. Adds the thread makes
//!   later (from other thread-locals' destructors) see `OWNER` 0 and take
//!   the unowned path, which cannot lease again once `LEASE` is gone.
//! * An owned row has one writer: its owner adds with a plain load and
//!   store (`shard/owned.rs`). Threads beyond the table, or without an id,
//!   add to the table's shared rows instead, and takes keep baselines
//!   rather than writing owned words; the hand-off above is what lets the
//!   next holder of an id load its predecessor's last store.
//!
//! Ids are process-wide, not per table: a thread holds its id from its
//! first add to any sharded table until it exits, so threads that added to
//! sharded tables once and now sit idle still hold theirs, and a thread
//! that got an id beyond a table keeps it when smaller ones are given
//! back (it adds on its probe's row, sampled, as before).

use super::pool::Pool;
use crate::primitive::sync::{lock, Arc, Mutex};
use std::cell::{Cell, RefCell};

crate::primitive::const_thread_local! {
    /// The calling thread's owner id, 0 if none. No destructor: the hot
    /// path reads it with a bare TLS load.
    static OWNER: Cell<usize> = Cell::new(0);
}

crate::primitive::global! {
    // Behind an Arc that each lease shares, so giving an id back never
    // needs the static: under loom, statics are gone before the main
    // thread's thread-local destructors run.
    static POOL: Arc<Mutex<Pool>> = Arc::new(Mutex::new(Pool::new()));
}

/// A thread's hold on its owner id; dropping it gives the id back.
struct Lease {
    id: usize,
    pool: Arc<Mutex<Pool>>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        // First the thread stops owning, then the id may go to another.
        let _ = OWNER.try_with(|o| o.set(0));
        lock(&self.pool).give(self.id);
    }
}

crate::primitive::const_thread_local! {
    static LEASE: RefCell<Option<Lease>> = RefCell::new(None);
}

/// The calling thread's owner id, or 0 if it has none.
#[inline(always)]
pub(crate) fn owner() -> usize {
    // Without a destructor the cell is never torn down; `try_with` only
    // keeps loom's lazily built thread-locals safe at thread exit.
    OWNER.try_with(Cell::get).unwrap_or(0)
}

/// The calling thread's owner id, leasing one if it has none; 0 once the
/// thread's lease has been handed back at exit (it takes no other).
#[cold]
#[inline(never)]
pub(crate) fn lease() -> usize {
    LEASE
        .try_with(|l| {
            l.borrow_mut()
                .get_or_insert_with(|| {
                    let pool = Arc::clone(&POOL);
                    let id = lock(&pool).take();
                    let _ = OWNER.try_with(|o| o.set(id));
                    Lease { id, pool }
                })
                .id
        })
        .unwrap_or(0)
}

/// Hands the calling thread's id back now, as its exit would: for tests
/// and models that reuse an id without waiting for a thread to end.
#[cfg(test)]
pub(crate) fn hand_back() {
    let lease = LEASE.try_with(|l| l.borrow_mut().take()).ok().flatten();
    drop(lease);
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_kept_until_handed_back_and_ids_are_reused() {
        std::thread::spawn(|| {
            assert_eq!(owner(), 0);
            let id = lease();
            assert_ne!(id, 0);
            assert_eq!(owner(), id);
            assert_eq!(lease(), id, "a second lease must keep the first");
            hand_back();
            assert_eq!(owner(), 0);
        })
        .join()
        .unwrap();
    }

    /// Two live threads never hold the same id, and a thread's exit gives
    /// its id back (ids stay dense: a later thread gets one at most as
    /// large as the number of holders alive at once, tests alongside
    /// included).
    #[test]
    fn live_holders_have_distinct_ids() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let stop_rx = std::sync::Mutex::new(stop_rx);
        std::thread::scope(|s| {
            for _ in 0..4 {
                let (tx, stop_rx) = (tx.clone(), &stop_rx);
                s.spawn(move || {
                    tx.send(lease()).unwrap();
                    // Hold the id until the test has seen all four.
                    let _ = stop_rx.lock().unwrap().recv();
                });
            }
            let mut ids: Vec<usize> = (0..4).map(|_| rx.recv().unwrap()).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), 4, "two live threads shared an id: {ids:?}");
            drop(stop_tx);
        });
    }
}

/// Shards follow the threads that add, in a process of its own (so no
/// test running alongside holds an owner id).
#[cfg(all(test, not(shardcount_loom), not(miri)))]
mod busy_threads_own_the_shards {
    use crate::{Counter, CounterSet, RoughCounter};
    use std::process::Command;
    use std::sync::Barrier;

    /// Set in the child process, which runs the scenario.
    const CHILD: &str = "SHARDCOUNT_OWNED_CHILD";

    /// The case: the main thread holds a thread index (it touched
    /// a `RoughCounter`), and two threads add to a counter and a set with
    /// 2 rows. With rows given by thread index, the main thread held row 1
    /// and one adder was beyond the table; now each adder owns a row, and
    /// every one of its adds lands there.
    #[test]
    fn while_the_main_thread_holds_a_thread_index() {
        if std::env::var_os(CHILD).is_none() {
            let out = Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "thread::owner::busy_threads_own_the_shards::while_the_main_thread_holds_a_thread_index",
                    "--test-threads=1",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let log = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "the child failed:\n{log}");
            assert!(log.contains("1 passed"), "the child ran no test:\n{log}");
            return;
        }
        let rough = RoughCounter::new();
        rough.inc();
        assert_ne!(crate::thread::index(), 0, "the main thread holds no index");
        assert_eq!(super::owner(), 0);

        let c = Counter::with_max_shards(2);
        c.grow_once();
        let set = CounterSet::with_max_shards(3, 2);
        set.grow_once();
        // Different counts per thread, so the shard values say who added.
        let adds = [1000u64, 3000];
        let barrier = Barrier::new(2);
        let ids: Vec<usize> = std::thread::scope(|s| {
            let spawned: Vec<_> = adds
                .iter()
                .map(|&n| {
                    let (c, set, barrier) = (&c, &set, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        for _ in 0..n {
                            c.inc();
                            set.inc(1);
                        }
                        // Both alive until both are done: an exited
                        // thread's id may go to the other.
                        barrier.wait();
                        super::owner()
                    })
                })
                .collect();
            spawned.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(super::owner(), 0, "the main thread leased an id");
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [1, 2], "owner ids of the adders");
        let mut want = vec![0; 2];
        for (id, n) in ids.iter().zip(adds) {
            want[id - 1] = n;
        }
        assert_eq!(c.base_and_newest_shards(), (0, want.clone()));
        assert_eq!(set.base_and_newest_rows_of(1), (0, want));
        assert_eq!(rough.sum(), 1);
    }
}
