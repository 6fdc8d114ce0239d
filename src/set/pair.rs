//! Two adds to one row at once, for a [`Histogram`](crate::Histogram)'s
//! record (a bucket and the sum): one head load, one row, and the
//! contention sample on the first counter only. The row choice is
//! `add_unchecked`'s, and a change to one belongs in the other.

use super::CounterSet;
use crate::primitive::sync::atomic::Ordering;
use crate::shard::{flat_word_at, store_add, Head, Slot, Table};
use crate::thread::sampler;

impl CounterSet {
    /// Adds `a` to counter `i` and `b` to counter `j`, in the same row.
    /// Only the add to `i` is sampled for contention: the row mark it
    /// swaps covers `j`'s lines too.
    ///
    /// # Safety
    ///
    /// `i < len()` and `j < len()`.
    #[inline(always)]
    pub(crate) unsafe fn add_pair_unchecked(&self, i: usize, a: u64, j: usize, b: u64) {
        debug_assert!(i < self.len && j < self.len);
        let head = self.table.load();
        if let Some(row) = self.table.cached(head) {
            // SAFETY: every row has room for `len + 1` words; `i` and `j`
            // are below `len` (the caller's promise).
            let (at, and) = unsafe { (row.word(i), row.word(j)) };
            // A row this thread alone writes: loads and stores, not
            // sampled (`shard/owned.rs`).
            store_add(and, b);
            store_add(at, a);
            return;
        }
        if head.is_table() {
            match self.table.slot(head) {
                Slot::Owned(row) => {
                    // SAFETY: as above.
                    let (at, and) = unsafe { (row.word(i), row.word(j)) };
                    store_add(and, b);
                    store_add(at, a);
                }
                // SAFETY: the caller's promise, passed on.
                Slot::Beyond(t) => unsafe { self.add_pair_beyond(head, t, i, a, j, b) },
                // SAFETY: as above.
                Slot::NoId => unsafe { self.add_pair_unowned(i, a, j, b) },
            }
            return;
        }
        let row = self.base_first();
        // SAFETY: as above.
        let (at, and) = unsafe { (flat_word_at(row, i), flat_word_at(row, j)) };
        // Relaxed: as above.
        and.fetch_add(b, Ordering::Relaxed);
        let prev = at.fetch_add(a, Ordering::Relaxed);
        if sampler::sampled(prev, a) {
            self.check_base_add(head, at, prev, a, i);
        }
    }

    /// The pair add of a thread whose id is beyond `t`, the table `head`
    /// names: two adds, each counted wherever it lands.
    ///
    /// # Safety
    ///
    /// `i < len()` and `j < len()`.
    #[inline(never)]
    unsafe fn add_pair_beyond(&self, head: Head, t: &Table, i: usize, a: u64, j: usize, b: u64) {
        // SAFETY: the caller's promise, passed on.
        unsafe {
            self.add_probed(head, t, i, a);
            self.add_probed(head, t, j, b);
        }
    }

    /// The pair add of a thread without an owner id (none yet, or revoked
    /// by a merge): `add_unowned` (lease or acknowledge, then a fresh head)
    /// for each; the second one finds the thread holding its id, or pins
    /// again at exit. Neither uses a head loaded before the lease
    /// (`shard/merge.rs`).
    ///
    /// # Safety
    ///
    /// `i < len()` and `j < len()`.
    #[inline(never)]
    unsafe fn add_pair_unowned(&self, i: usize, a: u64, j: usize, b: u64) {
        // SAFETY: the caller's promise, passed on.
        unsafe {
            self.add_unowned(i, a);
            self.add_unchecked(j, b);
        }
    }
}
