//! Two adds to one row at once, for a [`Histogram`](crate::Histogram)'s
//! record (a bucket and the sum): one head load, one row, and the
//! contention sample on the first counter only. The row choice is
//! `add_unchecked`'s, and a change to one belongs in the other.

use super::CounterSet;
use crate::primitive::sync::atomic::Ordering;
use crate::shard::{flat_word, store_add, Check};
use crate::thread::{owner, sampler};

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
        let row = match self.table.table(head) {
            None => &self.base[..],
            Some(t) => match t.owned_row(owner::owner()) {
                Some(row) => {
                    // SAFETY: every row has room for `len + 1` words; `i`
                    // and `j` are below `len` (the caller's promise).
                    let (at, and) = unsafe { (flat_word(row, i), flat_word(row, j)) };
                    // A row this thread alone writes: loads and stores,
                    // not sampled (`shard/owned.rs`).
                    store_add(and, b);
                    store_add(at, a);
                    return;
                }
                None => {
                    // SAFETY: the caller's promise, passed on. A thread
                    // beyond the table (rare, and out of line): two adds,
                    // each counted wherever it lands.
                    unsafe {
                        self.add_unowned(head, t, i, a);
                        self.add_unowned(head, t, j, b);
                    }
                    return;
                }
            },
        };
        // SAFETY: as above.
        let (at, and) = unsafe { (flat_word(row, i), flat_word(row, j)) };
        // Relaxed: as above.
        and.fetch_add(b, Ordering::Relaxed);
        let prev = at.fetch_add(a, Ordering::Relaxed);
        if sampler::sampled(prev, a) {
            let c = Check {
                head,
                word: at,
                prev,
                n: a,
                row_lines: self.row_lines(),
            };
            self.check(c, row, i);
        }
    }
}
