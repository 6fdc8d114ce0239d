//! The slow paths of a set's add (`CounterSet::add_unchecked` routes;
//! `shard::route`): beyond the table, without an owner id, on the base
//! row, and the contention check a sampled add runs.

use super::CounterSet;
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::shard::{
    flat_word_at, shared_add, store_add, word_unchecked, Check, Head, Leased, Line, Route, Table,
    LINE_WORDS,
};
use crate::thread::{self, grace, owner, sampler};

impl CounterSet {
    /// An add by a thread whose owner id is beyond the table it loaded:
    /// pinned, on its probe's shared row (sampled) of the table it loads
    /// now.
    ///
    /// # Safety
    ///
    /// `i < len()`.
    #[inline(never)]
    pub(super) unsafe fn add_beyond(&self, i: usize, n: u64) {
        let _pin = grace::pin();
        // SAFETY: the caller's promise, passed on.
        unsafe { self.add_leased(owner::owner(), i, n) }
    }

    /// An add by a thread without an owner id (none yet, or revoked by a
    /// merge: `shard/merge.rs`): it leases or acknowledges, then adds
    /// afresh with a head loaded after that (id 0, at its exit: pinned, on
    /// a shared row).
    ///
    /// # Safety
    ///
    /// `i < len()`.
    #[inline(never)]
    pub(crate) unsafe fn add_unowned(&self, i: usize, n: u64) {
        let id = owner::lease();
        if id == 0 {
            let _pin = grace::pin();
            // SAFETY: the caller's promise, passed on.
            return unsafe { self.add_leased(0, i, n) };
        }
        self.table.route_id(
            id,
            // SAFETY: every row has room for `len + 1` words, and `i < len`.
            |row| store_add(unsafe { row.word(i) }, n),
            // SAFETY: the caller's promise, passed on.
            |route| unsafe {
                match route {
                    Route::Base(head) => self.add_base(head, i, n),
                    Route::Beyond | Route::NoId => self.add_beyond(i, n),
                }
            },
        );
    }

    /// A pinned add by a thread whose id is `id` (0: none): its own row,
    /// the base row, or its probe's shared row
    /// (`ShardTable::route_leased`).
    ///
    /// # Safety
    ///
    /// `i < len()`, and the caller is pinned.
    #[inline(always)]
    pub(super) unsafe fn add_leased(&self, id: usize, i: usize, n: u64) {
        match self.table.route_leased(id) {
            // SAFETY: every row has room for `len + 1` words, and `i < len`.
            Ok(row) => store_add(unsafe { row.word(i) }, n),
            // SAFETY: the caller's promise, passed on.
            Err(Leased::Base(head)) => unsafe { self.add_base(head, i, n) },
            // SAFETY: as above.
            Err(Leased::Shared(head, t)) => unsafe { self.add_probed(head, t, i, n) },
        }
    }

    /// An add to the base row, sampled (the head names no plain table):
    /// an idle set's whole add, so inlined.
    ///
    /// # Safety
    ///
    /// `i < len()`.
    #[inline(always)]
    pub(super) unsafe fn add_base(&self, head: Head, i: usize, n: u64) {
        let row = self.base.first();
        if row.is_null() {
            // Out of line and not back: were the call to make the row on
            // the path to the add, `head` would live across a call, and
            // LLVM would spill it to the stack on every add, a store the
            // locked add then waits for (`docs/benchmarks.md`).
            // SAFETY: the caller's promise, passed on.
            return unsafe { self.add_base_unmade(head, i, n) };
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.add_base_made(head, row, i, n) }
    }

    /// [`add_base`](Self::add_base) on the made row (`row` its first
    /// line).
    ///
    /// # Safety
    ///
    /// `i < len()`.
    #[inline(always)]
    unsafe fn add_base_made(&self, head: Head, row: *const Line, i: usize, n: u64) {
        // SAFETY: the base row has room for `len + 1` words; `i < len`.
        let at = unsafe { flat_word_at(row, i) };
        let prev = shared_add(at, n);
        if sampler::sampled(prev, n) {
            self.check_base_add(head, at, prev, n, i);
        }
    }

    /// [`add_base`](Self::add_base) when the base row is not made yet
    /// (a set's first add): makes it, then adds.
    ///
    /// # Safety
    ///
    /// `i < len()`.
    #[cold]
    #[inline(never)]
    unsafe fn add_base_unmade(&self, head: Head, i: usize, n: u64) {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.add_base_made(head, self.base_first(), i, n) }
    }

    /// `check` for a sampled add to the base row, out of line: the add's
    /// inlined path loads nothing the check alone needs (the row's width).
    #[cold]
    #[inline(never)]
    pub(super) fn check_base_add(&self, head: Head, at: &AtomicU64, prev: u64, n: u64, i: usize) {
        self.check_add(head, at, prev, n, self.base(), i);
    }

    /// `check` for a sampled add of `n` to word `at` (counter `i` of `row`),
    /// which held `prev`.
    #[inline(always)]
    pub(super) fn check_add(
        &self,
        head: Head,
        at: &AtomicU64,
        prev: u64,
        n: u64,
        row: &[Line],
        i: usize,
    ) {
        let c = Check {
            head,
            word: at,
            prev,
            n,
            row_lines: self.row_lines(),
        };
        self.check(c, row, i);
    }

    /// An add on the probe's shared row of `t`, sampled: for threads that
    /// own no row of it.
    ///
    /// # Safety
    ///
    /// `i < len()`.
    #[inline]
    pub(super) unsafe fn add_probed(&self, head: Head, t: &Table, i: usize, n: u64) {
        let Some(row) = t.shared_row(thread::probe()) else {
            // No memory for the shared rows: the base row takes it.
            // SAFETY: as above.
            shared_add(unsafe { word_unchecked(self.base(), i) }, n);
            return;
        };
        // SAFETY: as above.
        let at = unsafe { word_unchecked(row, i) };
        let prev = shared_add(at, n);
        if sampler::sampled(prev, n) {
            self.check_add(head, at, prev, n, row, i);
        }
    }

    /// A sampled add `c` to counter `i` of `row`: is another thread
    /// writing this row's lines? Three signals,
    /// any of which counts as interference:
    ///
    /// * the row's mark (word `len`) names another thread: it sampled an
    ///   add to this row since this thread's last sample here, so the two
    ///   write the same lines (false sharing, when the counters differ);
    /// * on a table, at a line watch (one sample in 8), another thread
    ///   writes the line of counter `i`: the row's owner, who never marks
    ///   it;
    /// * the re-loaded word shows another adder's write (`shard`'s check,
    ///   take epochs and all).
    #[cold]
    #[inline(never)]
    pub(super) fn check(&self, c: Check<'_>, row: &[Line], i: usize) {
        let me = thread::token() as u64;
        // SAFETY: word `len` is in every row (see `build`).
        let mark = unsafe { word_unchecked(row, self.len) };
        // Relaxed: only the value matters; nothing is published through it.
        let last = mark.swap(me, Ordering::Relaxed);
        if last != 0 && last != me {
            // Shared lines: move (on a table), and grow once it persists.
            self.table.strike(c);
        } else if self.table.table(c.head).is_none() {
            if !self.table.check_base(c) {
                self.table.quiet();
            }
        } else if sampler::line_watched(c.prev, c.n) {
            // A thread beyond the table: its row's owner never marks it,
            // so watch the line itself.
            if self.table.line_written(c.head, &row[i / LINE_WORDS]) {
                self.table.strike(c);
            } else {
                self.table.check_shard(c);
            }
        } else if c.word.load(Ordering::Acquire) != c.prev.wrapping_add(c.n) {
            // Acquire: pairs with a take's Release swap (`TakeRow::take`), so
            // a take's start shows in the epoch (`shard`'s Orderings).
            self.table.check_shard(c);
        }
        // Otherwise a quiet quick look on a table says nothing, as in
        // `Counter`: quiet samples count only at watches, so strikes seen
        // at watches can add up.
    }
}
