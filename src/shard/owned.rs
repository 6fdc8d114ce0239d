//! Owned rows written with a plain load and store, and what that asks of
//! everything else that touches a table's words.
//!
//! # Protocol
//!
//! * **One writer per owned word.** Row `id - 1` of a table's `lines` is
//!   written only by the thread holding owner id `id` (`thread::owner`),
//!   with a `Relaxed` load and a `Relaxed` store ([`store_add`]; on
//!   x86-64 one unlocked `add` to memory, which is both). Nobody
//!   else writes those words: not a take, not a reset, not a thread beyond
//!   the table, not a destructor at thread exit.
//! * **Hand-off.** An id changes hands only through the owner pool's
//!   mutex, after the old holder stopped owning (`OWNER` set to 0 before
//!   the give-back): the old holder's last store happens-before the new
//!   holder's first load, so the new holder adds to the latest value.
//! * **Everyone else** (ids beyond the table, threads with no id: adds
//!   from thread-local destructors, after the lease is gone) adds with a
//!   read-modify-write to the table's *shared rows*, a second area of as
//!   many rows, allocated on the first such add (`shared`, published with
//!   an `AcqRel` compare-exchange, read with `Acquire`). If it cannot be
//!   allocated the owner of the table adds to its base instead.
//! * **Takes keep baselines** (`taken`, one word per owned word, allocated
//!   by the first take, under `take_lock`): a take of owned word `w` reads
//!   it, stores the value into its baseline (`Release`) and returns the
//!   growth since the baseline it replaced. Takes of one table run one at
//!   a time under `take_lock`, so a baseline only moves forward: the lock
//!   orders each taker's read of `w` after the previous taker's, and
//!   coherence makes it see at least that value. Shared words (and the
//!   owner's base) are still swapped with zero (`Take::swap`).
//! * **Reads** of an owned word subtract its baseline, loading the
//!   baseline first (`Acquire`, pairing with the taker's `Release` store)
//!   and then the word: the word read is at least the value the baseline
//!   was taken from, so the difference is never "negative" (a wrapped
//!   huge value), whatever takes run meanwhile.
//! * Growth, sums and takes visit every table of the chain, owned and
//!   shared rows alike: an owner that stores into an older table after a
//!   growth (it loaded the head before) is still counted there.
//!
//! Orderings not named above: reads load the words themselves `Relaxed`
//! (counts, `route.rs`); a take loads baselines and owned words `Relaxed`,
//! under `take_lock`, which orders it after the previous take; a merge's
//! `drain` swaps every word `Relaxed`, as nobody writes the table any more
//! and readers order themselves by the head (`merge.rs`).
//!
//! * **Which areas exist** (`Table::areas`): a bit per lazy area, set
//!   (`Release`) after the area is published and before the setter writes
//!   to it (the first take's baselines; a thread's first add to a shared
//!   row). A read loads it (`Acquire`) and, while neither bit is set,
//!   walks the owned rows alone: a take or a shared add that
//!   happened-before the read set its bit first, so the read sees it and
//!   walks every area as above.
//!
//! Memory: a table of `R` rows has its `R` owned rows; the shared rows
//! come with the first add of a thread without one (`R` more), the
//! baselines with the first take (`R` more). All are freed with the table.

use super::lines::{flat_word_at, word, Line, LINE_WORDS};
use super::table::{Head, Table};
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::primitive::sync::{lock, MutexGuard};

/// Adds `n` to a word only the calling thread writes: a load and a store,
/// no locked instruction.
#[inline(always)]
pub(crate) fn store_add(w: &AtomicU64, n: u64) {
    // One unlocked `add` to memory: a load and a store of the word, each
    // single-copy atomic for an aligned quadword, as below, in one
    // instruction, so that a signal handler adding to the same row while
    // it interrupts this add adds on top of it, never underneath (the
    // restartable hit's add is one instruction too, `thread::window`).
    #[cfg(all(target_arch = "x86_64", not(miri), not(shardcount_loom)))]
    // SAFETY: the word's address, valid and 8-aligned for the borrow; no
    // stack, no other memory.
    unsafe {
        std::arch::asm!(
            "add qword ptr [{p}], {n}",
            p = in(reg) w.as_ptr(),
            n = in(reg) n,
            options(nostack),
        );
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri), not(shardcount_loom))))]
    {
        // Relaxed: this thread is the word's only writer (module docs);
        // readers need only coherence, and the owner pool's mutex orders a
        // hand-off.
        let v = w.load(Ordering::Relaxed);
        w.store(v.wrapping_add(n), Ordering::Relaxed);
    }
}

/// A row as a read sees it: its words, and for an owned row the baselines
/// the takes left.
#[derive(Clone, Copy)]
pub(crate) struct RowRef<'a> {
    pub(crate) lines: &'a [Line],
    taken: Option<&'a [Line]>,
}

impl RowRef<'_> {
    /// What word `i` holds that no take has taken yet.
    #[inline]
    pub(crate) fn read(&self, i: usize) -> u64 {
        // Acquire: pairs with the Release baseline store in
        // `TakeRow::take`, so the word loaded next is at least the value
        // the baseline was taken from.
        let b = self.taken.map_or(0, |t| word(t, i).load(Ordering::Acquire));
        word(self.lines, i).load(Ordering::Relaxed).wrapping_sub(b)
    }
}

/// A row as a take sees it, with its table's take lock held.
pub(crate) struct TakeRow<'a> {
    lines: &'a [Line],
    /// The baselines of an owned row (`None`: a shared row, or an owned
    /// row whose baselines could not be allocated).
    taken: Option<&'a [Line]>,
    owned: bool,
}

impl TakeRow<'_> {
    /// Takes what word `i` holds that no take has taken yet, leaving it
    /// counted for no later take.
    #[inline]
    pub(crate) fn take(&self, i: usize) -> u64 {
        let w = word(self.lines, i);
        match (self.owned, self.taken) {
            // Release: pairs with the Acquire re-loads of sampled adds
            // (shard module docs, "Orderings"), as `Take::swap` does.
            (false, _) => w.swap(0, Ordering::Release),
            (true, Some(t)) => {
                let b = word(t, i);
                let before = b.load(Ordering::Relaxed);
                let now = w.load(Ordering::Relaxed);
                // Release: pairs with the Acquire baseline loads in
                // `RowRef::read` and `sum_rows`.
                b.store(now, Ordering::Release);
                now.wrapping_sub(before)
            }
            // No baselines: nothing can be taken from the owned word, so
            // it stays for a later take (lossless all the same).
            (true, None) => 0,
        }
    }
}

/// `Table::areas`: the baselines exist.
pub(super) const TAKEN: usize = 1;
/// `Table::areas`: the shared rows exist.
pub(super) const SHARED: usize = 2;

impl Table {
    /// Lines of one area (owned rows, shared rows or baselines).
    fn area_len(&self) -> usize {
        self.lines.len()
    }

    /// Notes in `areas` that the area `bit` names exists, before the
    /// caller writes to it: a read that loads `areas` after that write
    /// (ordered after it some way) sees the bit, by coherence if this
    /// thread found it already set, else through the `Release`.
    #[inline]
    fn note_area(&self, bit: usize) {
        // Relaxed: see above; the store is rare (once per area).
        if self.areas.load(Ordering::Relaxed) & bit == 0 {
            self.areas.fetch_or(bit, Ordering::Release);
        }
    }

    /// The shared row for a thread's probe, allocating the shared rows
    /// on first use; `None` if they cannot be allocated.
    #[inline]
    pub(crate) fn shared_row(&self, probe: u32) -> Option<&[Line]> {
        let len = self.area_len();
        let area = match self.shared.get(len) {
            Some(a) => a,
            None => self.shared.get_or_make(len)?,
        };
        self.note_area(SHARED);
        let start = (probe as usize & self.mask) * self.row_lines;
        area.get(start..start + self.row_lines)
    }

    /// The shared shard (first word of a one-line row) for a probe.
    #[inline]
    pub(crate) fn shared_shard(&self, probe: u32) -> Option<&AtomicU64> {
        debug_assert_eq!(self.row_lines, 1);
        self.shared_row(probe).map(|r| &r[0][0])
    }

    /// Every owned and shared row of this table, as reads see them, with
    /// its index among the table's owned or shared rows.
    #[inline]
    pub(super) fn for_each_count_row(&self, f: &mut impl FnMut(usize, RowRef<'_>)) {
        let len = self.area_len();
        let taken = self.taken.get(len);
        // Rows by index, not `chunks_exact`: its count is a division by
        // `row_lines`, which a sum would pay twice per table.
        for r in 0..self.rows() {
            let at = r * self.row_lines..(r + 1) * self.row_lines;
            let lines = &self.lines[at.clone()];
            f(
                r,
                RowRef {
                    lines,
                    taken: taken.map(|t| &t[at]),
                },
            );
        }
        if let Some(shared) = self.shared.get(len) {
            for r in 0..self.rows() {
                let lines = &shared[r * self.row_lines..(r + 1) * self.row_lines];
                f(r, RowRef { lines, taken: None });
            }
        }
    }

    /// Word `i` of every owned row (less its baseline) and of every shared
    /// row, added up (wrapping), as [`for_each_count_row`] reads them: a
    /// sum's walk, one load (two with baselines) and an add per row.
    ///
    /// [`for_each_count_row`]: Self::for_each_count_row
    #[inline(always)]
    pub(super) fn sum_word(&self, i: usize) -> u64 {
        assert!(i < self.row_lines * LINE_WORDS, "a word beyond a row");
        self.sum_rows(i)
    }

    /// [`sum_word`](Self::sum_word)`(0)`, which needs no assertion.
    #[inline(always)]
    pub(super) fn sum_first_word(&self) -> u64 {
        self.sum_rows(0)
    }

    /// Word `i` of every row, rows `step` lines apart (the table's
    /// `row_lines`): one pass per area (few registers, and one short loop
    /// when there are neither baselines nor shared rows), each a pointer
    /// walk: no division, no per-row bounds check, and a step the
    /// compiler does not know, so no unrolling for the few rows a table
    /// has.
    #[inline(always)]
    fn sum_rows(&self, i: usize) -> u64 {
        let len = self.area_len();
        let (step, bytes) = (self.row_bytes, self.area_bytes);
        let pass = |area: *const Line, order: Ordering| {
            let mut total = 0u64;
            let mut at = area;
            // SAFETY: every area is `len` lines, `bytes` bytes
            // (`ShardTable::grow`): one past its end.
            let end = unsafe { area.byte_add(bytes) };
            // A table has an even number of rows, 2 or more (`grow`): two
            // rows a turn, no test before the first (a 2-row table, the
            // common one, takes no branch back).
            debug_assert!(bytes >= 2 * step && step > 0 && bytes % (2 * step) == 0);
            loop {
                // SAFETY: `bytes` is a multiple of `2 * step`, so `at` and
                // the row after it start rows of the area, alive with the
                // table; `i` is inside a row (the callers' assertion).
                let (w, v) = unsafe { (flat_word_at(at, i), flat_word_at(at.byte_add(step), i)) };
                total = total
                    .wrapping_add(w.load(order))
                    .wrapping_add(v.load(order));
                // SAFETY: at most one past the end, as `bytes` is a
                // multiple of `2 * step`.
                at = unsafe { at.byte_add(2 * step) };
                if at >= end {
                    return total;
                }
            }
        };
        // Acquire: pairs with `note_area`'s Release, so the areas it names
        // are seen (published before it). Neither: the owned rows alone.
        let areas = self.areas.load(Ordering::Acquire);
        if super::likely(areas == 0) {
            return pass(self.lines.as_ptr(), Ordering::Relaxed);
        }
        // The baselines first, Acquire: each pairs with the Release store
        // in `TakeRow::take`, so every owned word loaded after it is at
        // least the value that baseline was taken from.
        let taken = self
            .taken
            .get(len)
            .map_or(0, |t| pass(t.as_ptr(), Ordering::Acquire));
        let mut total = pass(self.lines.as_ptr(), Ordering::Relaxed).wrapping_sub(taken);
        if let Some(s) = self.shared.get(len) {
            total = total.wrapping_add(pass(s.as_ptr(), Ordering::Relaxed));
        }
        total
    }

    /// Moves what the first `words` words of every owned and shared row
    /// hold (less any take's baseline) to `f(i, v)` (zeros skipped),
    /// leaving the words and baselines at zero: a merge's fold, once no
    /// thread writes the table (`merge.rs`). Under the take lock, so a
    /// take never sees a word half folded.
    pub(super) fn drain(&self, words: usize, f: &mut impl FnMut(usize, u64)) {
        let _held: MutexGuard<'_, ()> = lock(&self.take_lock);
        let len = self.area_len();
        let taken = self.taken.get(len);
        for (r, lines) in self.lines.chunks_exact(self.row_lines).enumerate() {
            let taken = taken.map(|t| &t[r * self.row_lines..(r + 1) * self.row_lines]);
            for i in 0..words {
                let w = word(lines, i);
                let b = taken.map_or(0, |t| word(t, i).swap(0, Ordering::Relaxed));
                let v = w.swap(0, Ordering::Relaxed).wrapping_sub(b);
                if v != 0 {
                    f(i, v);
                }
            }
        }
        if let Some(shared) = self.shared.get(len) {
            for lines in shared.chunks_exact(self.row_lines) {
                for i in 0..words {
                    let v = word(lines, i).swap(0, Ordering::Relaxed);
                    if v != 0 {
                        f(i, v);
                    }
                }
            }
        }
    }

    /// Every owned and shared row of this table, as a take sees them,
    /// under the table's take lock (baselines allocated on first use).
    fn for_each_take_row(&self, f: &mut impl FnMut(&TakeRow<'_>)) {
        let _held: MutexGuard<'_, ()> = lock(&self.take_lock);
        let len = self.area_len();
        let taken = self.taken.get_or_make(len);
        if taken.is_some() {
            self.note_area(TAKEN);
        }
        for (r, lines) in self.lines.chunks_exact(self.row_lines).enumerate() {
            let taken = taken.map(|t| &t[r * self.row_lines..(r + 1) * self.row_lines]);
            f(&TakeRow {
                lines,
                taken,
                owned: true,
            });
        }
        if let Some(shared) = self.shared.get(len) {
            for lines in shared.chunks_exact(self.row_lines) {
                f(&TakeRow {
                    lines,
                    taken: None,
                    owned: false,
                });
            }
        }
    }
}

impl super::take::Take<'_> {
    /// Visits every row of every table of the chain, owned and shared, as
    /// this take sees them: each table's rows with its take lock held.
    pub(crate) fn for_each_row(&self, mut f: impl FnMut(&TakeRow<'_>)) {
        let table = self.table();
        let mut head = table.load();
        // Retiring tables too: the take is pinned.
        while let Some(t) = table.any_table(head) {
            t.for_each_take_row(&mut f);
            head = Head(t.older);
        }
    }
}
