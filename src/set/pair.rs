//! Two adds to one row at once, for a [`Histogram`](crate::Histogram)'s
//! record (a bucket and the sum): one head load, one row, and the
//! contention sample on the first counter only. The row choice is
//! `add_unchecked`'s, and a change to one belongs in the other.

use super::CounterSet;
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::shard::{store_add, word_unchecked, Check, Line, LINE_WORDS};
use crate::thread::{owner, sampler};

/// Word `i` of `row`, addressed as one flat array where a line is exactly
/// its words (128-byte alignment: `x86_64`, `aarch64`, ...), so the
/// compiler need not split `i` into a line and a word; elsewhere (and
/// under loom, whose atomics are larger) as `word_unchecked`.
///
/// # Safety
///
/// `i < row.len() * LINE_WORDS`.
#[inline(always)]
unsafe fn flat_word(row: &[Line], i: usize) -> &AtomicU64 {
    debug_assert!(i < row.len() * LINE_WORDS);
    if cfg!(not(shardcount_loom))
        && std::mem::size_of::<Line>() == LINE_WORDS * std::mem::size_of::<AtomicU64>()
    {
        // SAFETY: `CachePadded` is `repr(C)` with its value at offset 0
        // (crossbeam-utils 0.8.22 and later), and a line is no larger than
        // its array of words: the row's words lie back to back, `i` of them
        // before word `i`, all inside the slice `row.as_ptr()` covers.
        unsafe { &*row.as_ptr().cast::<AtomicU64>().add(i) }
    } else {
        // SAFETY: the caller's promise.
        unsafe { word_unchecked(row, i) }
    }
}

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
