//! Two adds to one row at once, for a [`Histogram`](crate::Histogram)'s
//! record (a bucket and the sum): one route (`shard::Route`), one row, and
//! the contention sample on the first counter only.

use super::CounterSet;
use crate::shard::{flat_word_at, shared_add, Head, Line, Route};
use crate::thread::sampler;

impl CounterSet {
    /// Adds `n` to counter `i` and `m` to counter `j`, in the same row.
    /// Only the add to `i` is sampled for contention: the row mark it
    /// swaps covers `j`'s lines too.
    ///
    /// # Safety
    ///
    /// `i < len()` and `j < len()`.
    #[inline(always)]
    pub(crate) unsafe fn add_pair_unchecked(&self, i: usize, n: u64, j: usize, m: u64) {
        debug_assert!(i < self.len && j < self.len);
        // SAFETY: every row has room for `len + 1` words; `i` and `j` are
        // below `len` (the caller's promise), which the other ways' calls
        // (in the closure) pass on.
        unsafe {
            self.table.route_add_pair(
                (i, n),
                (j, m),
                #[inline(always)]
                |route| match route {
                    Route::Base(head) => {
                        let row = self.base.first();
                        if row.is_null() {
                            // Out of line and not back, as in `add_base`.
                            return self.add_pair_base_unmade(head, (i, n), (j, m));
                        }
                        self.add_pair_base(head, row, (i, n), (j, m));
                    }
                    Route::Beyond => self.add_pair_beyond(i, n, j, m),
                    Route::NoId => self.add_pair_unowned(i, n, j, m),
                },
            );
        }
    }

    /// The pair add on the base row, made (`row` its first line).
    ///
    /// # Safety
    ///
    /// `i < len()` and `j < len()`.
    #[inline(always)]
    unsafe fn add_pair_base(
        &self,
        head: Head,
        row: *const Line,
        (i, n): (usize, u64),
        (j, m): (usize, u64),
    ) {
        // SAFETY: the base row has room for `len + 1` words; `i` and `j`
        // are below `len`.
        let (at, and) = unsafe { (flat_word_at(row, i), flat_word_at(row, j)) };
        shared_add(and, m);
        let prev = shared_add(at, n);
        if sampler::sampled(prev, n) {
            self.check_base_add(head, at, prev, n, i);
        }
    }

    /// The pair add on the base row before it is made (the set's first
    /// add): makes it, then adds.
    ///
    /// # Safety
    ///
    /// `i < len()` and `j < len()`.
    #[cold]
    #[inline(never)]
    unsafe fn add_pair_base_unmade(&self, head: Head, i: (usize, u64), j: (usize, u64)) {
        let row = self.base_first();
        // SAFETY: the caller's promise, passed on.
        unsafe { self.add_pair_base(head, row, i, j) }
    }

    /// The pair add of a thread whose id is beyond the table it loaded:
    /// one pin, two adds, each counted wherever it lands.
    ///
    /// # Safety
    ///
    /// `i < len()` and `j < len()`.
    #[inline(never)]
    unsafe fn add_pair_beyond(&self, i: usize, n: u64, j: usize, m: u64) {
        let _pin = crate::thread::grace::pin();
        let id = crate::thread::owner::owner();
        // SAFETY: the caller's promise, passed on; pinned.
        unsafe {
            self.add_leased(id, i, n);
            self.add_leased(id, j, m);
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
    unsafe fn add_pair_unowned(&self, i: usize, n: u64, j: usize, m: u64) {
        // SAFETY: the caller's promise, passed on.
        unsafe {
            self.add_unowned(i, n);
            self.add_unchecked(j, m);
        }
    }
}
