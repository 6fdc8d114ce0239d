//! `CounterSet`: `n` exact counters in one shard-major block: a base row,
//! then a [`ShardTable`] of rows of the same width once threads contend.
//!
//! # Protocol
//!
//! * `base: BaseRow` is the base row: counter `i` is word `i` of it.
//!   It holds every count added while no table exists, and stays part of
//!   every sum for ever (as `Counter`'s base word does). A `lazy` set
//!   makes it on the first add to it, or on `split`: every table is grown
//!   after it (by a split, or by a sampled add to it), so a merge's fold
//!   always finds it made. Reads of an unmade row see zeros.
//! * `table: ShardTable` is the chain of rows (grown, merged), each the same
//!   width as the base row (`lines_per_row(n)` 128-byte lines), published and
//!   grown as that module's docs say; counter `i` of a row is its word
//!   `i`.
//! * The last 64 bytes of every row are never written: rows of a table lie
//!   back to back, and a core's next-line prefetch from a row's written
//!   end would pull in the first line of the next row, another thread's
//!   (issue 32 reported rows of 14 or 15 counters, which filled one line,
//!   scaling 1.5× from 1 to 2 threads where other widths scaled 1.95×).
//! * Word `n` of every row is its *mark*: the token of the last thread
//!   whose sampled add landed in that row. It is never counted, summed or
//!   taken.
//! * Counting on the base row and on shared rows uses `Relaxed`
//!   read-modify-writes, one per add, on one word; an owner adds to its
//!   owned row with a plain load and store, as its only writer, and takes
//!   keep baselines for owned words (`shard/owned.rs`). Nothing is
//!   published through counts.
//! * Contention, on a sampled add (one in 128, as `Counter` picks them):
//!   - the thread swaps its token into the row's mark; finding another
//!     thread's token means another thread sampled an add to this row
//!     since this thread's last sample here, whether to the same counter
//!     or to a neighbour (false sharing, which a per-word check cannot
//!     see);
//!   - otherwise, the word is re-loaded with `Acquire` exactly as `Counter`
//!     does (the same code, in `shard`): another adder's write to the same
//!     counter shows. The whole set shares one take epoch, bumped by
//!     [`take_all`](CounterSet::take_all) and [`take`](CounterSet::take)
//!     alike (a take of one counter is a take of the set for the
//!     contention check), whose swaps are `Release`.
//!
//!   Either is a strike for the thread on this set: it moves to another
//!   row, and two in a row, less than a millisecond apart (see
//!   `sampler::collided`), grow the table. So a slow writer next to a busy
//!   one, or threads taking turns that last longer than that, do not grow
//!   it (unless a thread is descheduled at the wrong moment: the clock is
//!   read after the mark, so the growth then costs one doubling, never a
//!   count); short turns do (the lines move between cores every turn). The
//!   mark is per row, not per line: threads on different lines of one row
//!   count as sharing it.
//! * **Owned rows** (as `Counter`'s owned shards): once there is a table,
//!   the thread with owner id `i` (`thread::owner`, unique among live
//!   threads, leased on a thread's first add to a sharded table) owns row
//!   `i - 1` while the table has it, and adds there without sampling.
//!   Only threads beyond the table (ids are process-wide, as for
//!   `Counter`) and threads without an id take the probed path above, on
//!   the table's shared rows. One sample in 8 such a thread also watches
//!   the line of the counter it added to (`sampler::watch_line`): another
//!   thread writing it is a strike. Quiet quick looks on a table say
//!   nothing (as in `Counter`), so strikes seen at line watches add up.
//! * **Orderings.** Adds go through `shard::route` (its module docs give
//!   their orderings). Reads load every word `Relaxed`: a count read
//!   publishes nothing, and each word's coherence alone makes it include
//!   every update that happened-before the read; what makes a table safe
//!   to read is the pin and the head's `Acquire` (`shard`).

use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::shard::{
    lines_for, merge_all, shared_add, word, Line, Part, Route, ShardTable, LINE_WORDS,
};
use crate::thread::MAX_SHARDS;
use std::fmt;

mod add;
mod base;
mod pair;

use base::BaseRow;

/// Lines per row for `n` counters: the counters, the mark, and 64 bytes
/// no one writes at the end (see the module docs); `None` on overflow.
const fn lines_per_row(n: usize) -> Option<usize> {
    match n.checked_add(1 + LINE_WORDS / 2) {
        Some(words) => Some(lines_for(words)),
        None => None,
    }
}

/// The panic for a length whose row cannot be allocated.
#[cold]
#[track_caller]
fn too_many(n: usize) -> ! {
    panic!(
        "shardcount: CounterSet: cannot allocate a row of {n} counters \
         ({} bytes and more)",
        n.saturating_mul(8)
    )
}

/// A fixed number of exact `u64` counters, indexed `0..len()`, that share
/// their shards.
///
/// Shard-major: each shard is a *row* of `len()` words side by side,
/// 128-byte aligned, so a thread updating many counters of its own row
/// writes only its own cache lines. Like [`Counter`](crate::Counter) it is
/// base-first: a set that is never contended is a single row, and an add is
/// one `fetch_add` and a test on the value it returned. Rows are added (2,
/// then doubling, up to a cap) when threads are seen adding to the same
/// row's lines at the same time, to one counter or to neighbouring ones:
/// one add in 128 checks for that. Once there are rows, each thread that
/// adds to a grown set or counter holds a small owner id (the smallest
/// free, until it exits), owns the row its id names and is its only
/// writer: an add there is a load and a store, no locked instruction and
/// no check. A thread beyond the rows adds to a shared row with a
/// `fetch_add`, and moves (then grows the table, up to the cap) when it
/// sees another thread writing the lines it writes.
///
/// Arithmetic is modulo 2<sup>64</sup> per counter, as with `AtomicU64`.
///
/// # Reads
///
/// [`get`](Self::get) and [`snapshot_into`](Self::snapshot_into) are exact at
/// quiescence and include every update that happened-before them; under
/// concurrent updates they are not a snapshot of one instant.
/// [`take`](Self::take) and [`take_all`](Self::take_all) lose nothing:
/// every update is counted by exactly one take, or stays in the set.
///
/// # Memory
///
/// A row is `ceil((len + 9) / 16)` lines of 128 bytes: 8 bytes per
/// counter, one word for the row's contention mark and 64 bytes left
/// unwritten (so that rows written by different threads never sit on
/// neighbouring 64-byte lines, which prefetchers pull in pairs), rounded
/// up to the line. An uncontended set is one row. A contended one
/// grows tables of 2, 4, ... up to the cap rows, all kept until the set is
/// dropped: at most about `1 + 2 × cap` rows (cap: see
/// [`with_max_shards`](Self::with_max_shards)). A table gets as many rows
/// again the first time a thread without a row of its own adds to it
/// (more threads than the cap, adds from thread-local destructors), and as
/// many again on its first take (the take baselines): at most about
/// `1 + 6 × cap` rows in all.
///
/// Rows go to the threads that add to grown sets and counters, not to
/// every thread in the process: threads that never do (a main thread
/// holding a `RoughCounter` slot, a logger) own no row. So with the
/// default cap, the core count, N threads adding on N cores each own a
/// row however many other threads exist; raising the cap costs a row per
/// step and only helps when more threads than that add at once.
///
/// # Example
///
/// ```
/// use shardcount::CounterSet;
///
/// const GET: usize = 0;
/// const PUT: usize = 1;
/// let requests = CounterSet::new(2);
/// std::thread::scope(|s| {
///     for _ in 0..2 {
///         s.spawn(|| {
///             for _ in 0..1000 {
///                 requests.inc(GET);
///             }
///             requests.add(PUT, 3);
///         });
///     }
/// });
/// assert_eq!(requests.get(GET), Some(2000));
/// assert_eq!(requests.take_all(), vec![2000, 6]);
/// assert_eq!(requests.get(PUT), Some(0));
/// ```
pub struct CounterSet {
    base: BaseRow,
    len: usize,
    table: ShardTable,
    /// The members' label name, for the integrations.
    pub(crate) label: [&'static str; 1],
}

impl CounterSet {
    /// `n` counters at zero, with the default shard cap (as
    /// [`Counter::new`](crate::Counter::new)).
    ///
    /// # Panics
    ///
    /// If a row of `n` counters cannot be allocated (more than the address
    /// space holds, or the allocator refuses), with `n` in the message: a
    /// panic, never an abort. (A table of shard rows that cannot be
    /// allocated later is not grown into: adds keep going to the rows there
    /// are.)
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(3);
    /// assert_eq!(s.len(), 3);
    /// assert_eq!(s.get(2), Some(0));
    /// ```
    #[must_use]
    pub fn new(n: usize) -> Self {
        CounterSet::build(n, ShardTable::new(None))
    }

    /// `n` counters at zero that grow to at most `max_shards` rows besides
    /// the base row (rounded up to a power of two; 1: never grows).
    ///
    /// # Panics
    ///
    /// If `max_shards` is 0 or above 65536, or as [`new`](Self::new).
    ///
    /// ```
    /// let s = shardcount::CounterSet::with_max_shards(10, 3);
    /// assert_eq!(s.max_shards(), 4);
    /// ```
    #[must_use]
    pub fn with_max_shards(n: usize, max_shards: usize) -> Self {
        assert!(
            (1..=MAX_SHARDS).contains(&max_shards),
            "shardcount: CounterSet::with_max_shards: need 1..=65536 shards, got {max_shards}"
        );
        let log2 = max_shards.next_power_of_two().trailing_zeros();
        CounterSet::build(n, ShardTable::new(Some(log2)))
    }

    fn build(n: usize, table: ShardTable) -> Self {
        CounterSet {
            // Word `n` of each row is its mark (see `check`).
            base: lines_per_row(n)
                .and_then(BaseRow::made)
                .unwrap_or_else(|| too_many(n)),
            len: n,
            table,
            label: ["index"],
        }
    }

    /// Names the members' label `name` in every integration that exports
    /// the set (prometheus-client, tikv `prometheus`, OpenTelemetry,
    /// `metrics`' `publish`, serde), instead of `index`.
    ///
    /// # Panics
    ///
    /// If `name` is not a label name in every format those write:
    /// `[a-zA-Z_][a-zA-Z0-9_]*`, as `#[derive(Label)]` requires.
    ///
    /// ```
    /// use shardcount::contract::CountFamily;
    /// let by_status = shardcount::CounterSet::new(600).with_label_name("status");
    /// by_status.add(404, 1);
    /// assert_eq!(by_status.label_names(), ["status"]); // status="404" once exported
    ///
    /// let dashed = std::panic::catch_unwind(|| {
    ///     shardcount::CounterSet::new(2).with_label_name("http-status")
    /// });
    /// assert!(dashed.is_err());
    /// ```
    #[must_use]
    #[track_caller]
    pub fn with_label_name(mut self, name: &'static str) -> Self {
        crate::contract::assert_label_name(name, "CounterSet::with_label_name");
        self.label = [name];
        self
    }

    crate::primitive::const_fn! {
        /// `n` counters at zero, allocating nothing: the base row is made on
        /// the first add to it or the first `split` (for
        /// `LabelledCounter::new` and `Histogram::new`, which are `const`).
        /// A length whose row cannot be allocated panics there, as `new`
        /// does.
        pub(crate) const fn lazy(n: usize) -> Self {
            CounterSet {
                base: BaseRow::unmade(match lines_per_row(n) {
                    Some(lines) => lines,
                    // Cannot be allocated: `make` says so, and `base` panics.
                    None => usize::MAX,
                }),
                len: n,
                table: ShardTable::new(None),
                label: ["index"],
            }
        }
    }

    /// The base row, made now if it is not yet (a `lazy` set's first
    /// write to it).
    ///
    /// # Panics
    ///
    /// If it cannot be allocated, as `new` does.
    #[inline(always)]
    fn base(&self) -> &[Line] {
        match self.base.get() {
            Some(row) => row,
            None => self.make_base(),
        }
    }

    /// The base row's first line, made now if it is not yet: an add's
    /// view, the address alone (see `base`).
    #[inline(always)]
    fn base_first(&self) -> *const Line {
        let p = self.base.first();
        if p.is_null() {
            self.make_base().as_ptr()
        } else {
            p
        }
    }

    #[cold]
    #[inline(never)]
    fn make_base(&self) -> &[Line] {
        self.base.make().unwrap_or_else(|| too_many(self.len))
    }

    /// Whether the base row is made (a `lazy` set's, by a first write).
    #[cfg(all(test, not(shardcount_loom)))]
    pub(crate) fn base_is_made(&self) -> bool {
        self.base.get().is_some()
    }

    /// How many counters the set holds.
    ///
    /// ```
    /// assert_eq!(shardcount::CounterSet::new(4).len(), 4);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set holds no counter.
    ///
    /// ```
    /// assert!(shardcount::CounterSet::new(0).is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[cold]
    #[inline(never)]
    #[track_caller]
    fn out_of_range(&self, i: usize) -> ! {
        panic!(
            "shardcount: CounterSet index out of range: the len is {} but the index is {i}",
            self.len
        )
    }

    /// Lines per row.
    #[inline]
    fn row_lines(&self) -> usize {
        self.base.lines()
    }

    /// Adds `n` to counter `i`, wrapping at 2<sup>64</sup>.
    ///
    /// # Panics
    ///
    /// If `i >= len()`, naming both (as slice indexing does; see
    /// [`try_add`](Self::try_add)).
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(2);
    /// s.add(1, 5);
    /// assert_eq!(s.get(1), Some(5));
    /// ```
    #[inline(always)]
    #[track_caller]
    pub fn add(&self, i: usize, n: u64) {
        if self.try_add(i, n).is_none() {
            self.out_of_range(i);
        }
    }

    /// Adds `n` to counter `i` if there is one; `None` (and no change) if
    /// `i >= len()`.
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(2);
    /// assert_eq!(s.try_add(1, 5), Some(()));
    /// assert_eq!(s.try_add(2, 5), None);
    /// ```
    #[inline]
    pub fn try_add(&self, i: usize, n: u64) -> Option<()> {
        if i >= self.len {
            return None;
        }
        // SAFETY: just checked.
        unsafe { self.add_unchecked(i, n) };
        Some(())
    }

    /// Adds `n` to counter `i`, for a caller that knows `i` is in range
    /// (a map's handle checked it once, when made). The row is
    /// `shard::route`'s choice, as for every add.
    ///
    /// # Safety
    ///
    /// `i < len()`.
    #[inline(always)]
    pub(crate) unsafe fn add_unchecked(&self, i: usize, n: u64) {
        debug_assert!(i < self.len);
        // SAFETY: every row has room for `len + 1` words, and `i < len`.
        unsafe {
            self.table.route_add(
                i,
                n,
                // SAFETY: the caller's promise, passed on.
                #[inline(always)]
                |route| match route {
                    Route::Base(head) => self.add_base(head, i, n),
                    Route::Beyond => self.add_beyond(i, n),
                    Route::NoId => self.add_unowned(i, n),
                },
            );
        }
    }

    /// Subtracts `n` from counter `i`, wrapping below zero.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(1);
    /// s.sub(0, 1);
    /// assert_eq!(s.get(0), Some(u64::MAX));
    /// ```
    #[inline]
    #[track_caller]
    pub fn sub(&self, i: usize, n: u64) {
        self.add(i, n.wrapping_neg());
    }

    /// Adds one to counter `i`.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(1);
    /// s.inc(0);
    /// assert_eq!(s.get(0), Some(1));
    /// ```
    #[inline(always)]
    #[track_caller]
    pub fn inc(&self, i: usize) {
        self.add(i, 1);
    }

    /// Subtracts one from counter `i`, wrapping below zero.
    ///
    /// # Panics
    ///
    /// If `i >= len()`.
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(1);
    /// s.add(0, 3);
    /// s.dec(0);
    /// assert_eq!(s.get(0), Some(2));
    /// ```
    #[inline]
    #[track_caller]
    pub fn dec(&self, i: usize) {
        self.add(i, u64::MAX);
    }

    /// Counter `i`'s total, modulo 2<sup>64</sup>, or `None` if
    /// `i >= len()` (never a panic, as `slice::get`). Exact at quiescence;
    /// includes every update that happened-before the call.
    ///
    /// Cost: one load per row.
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(1);
    /// s.add(0, 2);
    /// assert_eq!(s.get(0), Some(2));
    /// assert_eq!(s.get(1), None);
    /// ```
    #[must_use]
    pub fn get(&self, i: usize) -> Option<u64> {
        (i < self.len).then(|| self.total(i))
    }

    /// Counter `i`'s total, for `i < len()` (a handle's index, or checked
    /// by the caller).
    pub(crate) fn total(&self, i: usize) -> u64 {
        debug_assert!(i < self.len);
        // Inlined where `read` calls it, pinned or not.
        self.table.read(
            #[inline(always)]
            |rows| {
                // An unmade base row holds zeros.
                let base = self
                    .base
                    .get()
                    .map_or(0, |b| word(b, i).load(Ordering::Relaxed));
                base.wrapping_add(rows.sum_word(i))
            },
        )
    }

    /// Passes each row's part of each counter, `Some((i, part))`, to `f`:
    /// the parts of counter `i` add up (wrapping) to its total, read as
    /// [`snapshot_into`](Self::snapshot_into) reads it, allocating nothing.
    /// `None` means "start over": a merge folded meanwhile, and the parts
    /// passed so far are to be forgotten.
    pub(crate) fn fold_into(&self, mut f: impl FnMut(Option<(usize, u64)>)) {
        let mut first = true;
        self.table.read(|rows| {
            if !std::mem::take(&mut first) {
                f(None);
            }
            for (i, w) in self
                .base
                .get()
                .unwrap_or_default()
                .iter()
                .flat_map(|l| l.iter())
                .take(self.len)
                .enumerate()
            {
                f(Some((i, w.load(Ordering::Relaxed))));
            }
            rows.for_each_count_row(|_, row| {
                for i in 0..self.len {
                    f(Some((i, row.read(i))));
                }
            });
        });
    }

    /// Every counter's total, added up (wrapping), read one after
    /// another: exact at quiescence, as [`get`](Self::get). Allocates
    /// nothing.
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(3);
    /// s.add(0, 2);
    /// s.inc(2);
    /// assert_eq!(s.sum(), 3);
    /// ```
    #[must_use]
    pub fn sum(&self) -> u64 {
        let mut total = 0u64;
        self.fold_into(|part| match part {
            Some((_, v)) => total = total.wrapping_add(v),
            None => total = 0,
        });
        total
    }

    /// Takes counter `i`'s total, leaving it at zero, or `None` (and no
    /// change) if `i >= len()`. Lossless, as
    /// [`take_all`](Self::take_all): every add to counter `i` is counted by
    /// exactly one take, or stays in the set.
    ///
    /// Cost: one swap per row.
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(2);
    /// s.add(0, 4);
    /// s.add(1, 1);
    /// assert_eq!(s.take(0), Some(4));
    /// assert_eq!(s.snapshot(), vec![0, 1]);
    /// assert_eq!(s.take(2), None);
    /// ```
    pub fn take(&self, i: usize) -> Option<u64> {
        (i < self.len).then(|| self.take_at(i))
    }

    /// Counter `i`'s take, for `i < len()`: the sequence of
    /// [`take_all_into`](Self::take_all_into), on word `i` of each row.
    pub(crate) fn take_at(&self, i: usize) -> u64 {
        debug_assert!(i < self.len);
        // The take ends when `take` drops, after the last swap.
        let take = self.table.take();
        // An unmade base row holds nothing: an add that makes it after
        // this look is left for a later take.
        let mut total = self.base.get().map_or(0, |b| take.swap(word(b, i)));
        take.for_each_row(|row| total = total.wrapping_add(row.take(i)));
        total
    }

    /// Adds what `f` makes of each word of the base row into `out[..len]`.
    fn fold_base(&self, out: &mut [u64], mut f: impl FnMut(&AtomicU64) -> u64) {
        let base = self.base.get().unwrap_or_default();
        for (chunk, line) in out.chunks_mut(LINE_WORDS).zip(base) {
            for (o, w) in chunk.iter_mut().zip(line.iter()) {
                *o = o.wrapping_add(f(w));
            }
        }
    }

    #[track_caller]
    fn check_out(&self, out: &[u64]) {
        assert_eq!(
            out.len(),
            self.len,
            "shardcount: CounterSet: the output slice's len is {} but the set's is {}",
            out.len(),
            self.len
        );
    }

    /// Writes every counter's total into `out`, reading each row (each of
    /// its lines) once, in order. Exact at quiescence; under concurrent
    /// updates not a snapshot of one instant.
    ///
    /// # Panics
    ///
    /// If `out.len() != len()`.
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(3);
    /// s.add(0, 1);
    /// s.add(2, 3);
    /// let mut out = [9; 3];
    /// s.snapshot_into(&mut out);
    /// assert_eq!(out, [1, 0, 3]);
    /// ```
    #[track_caller]
    pub fn snapshot_into(&self, out: &mut [u64]) {
        self.check_out(out);
        self.table.read(|rows| {
            out.fill(0);
            self.fold_base(out, |w| w.load(Ordering::Relaxed));
            rows.for_each_count_row(|_, row| {
                for (i, o) in out.iter_mut().enumerate() {
                    *o = o.wrapping_add(row.read(i));
                }
            });
        });
    }

    /// Every counter's total, as a new vector (see
    /// [`snapshot_into`](Self::snapshot_into)).
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(2);
    /// s.inc(1);
    /// assert_eq!(s.snapshot(), vec![0, 1]);
    /// ```
    #[must_use]
    pub fn snapshot(&self) -> Vec<u64> {
        let mut out = vec![0; self.len];
        self.snapshot_into(&mut out);
        out
    }

    /// Moves every counter's total into `out` and leaves the counters at
    /// zero, losing nothing while other threads keep adding: each word is
    /// swapped with zero, so every update is counted by exactly one take or
    /// stays in the set.
    ///
    /// # Panics
    ///
    /// If `out.len() != len()`.
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(2);
    /// s.add(0, 4);
    /// let mut out = [0; 2];
    /// s.take_all_into(&mut out);
    /// assert_eq!(out, [4, 0]);
    /// assert_eq!(s.get(0), Some(0));
    /// ```
    #[track_caller]
    pub fn take_all_into(&self, out: &mut [u64]) {
        self.check_out(out);
        out.fill(0);
        // The take ends when `take` drops, after the last swap.
        let take = self.table.take();
        self.fold_base(out, |w| take.swap(w));
        take.for_each_row(|row| {
            for (i, o) in out.iter_mut().enumerate() {
                *o = o.wrapping_add(row.take(i));
            }
        });
    }

    /// Every counter's total, as a new vector, leaving the counters at zero
    /// (see [`take_all_into`](Self::take_all_into)).
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(2);
    /// s.add(1, 2);
    /// assert_eq!(s.take_all(), vec![0, 2]);
    /// assert_eq!(s.take_all(), vec![0, 0]);
    /// ```
    #[must_use]
    pub fn take_all(&self) -> Vec<u64> {
        let mut out = vec![0; self.len];
        self.take_all_into(&mut out);
        out
    }

    /// Sets every counter to zero: [`take_all`](Self::take_all) with the
    /// totals dropped. An add concurrent with it is either dropped or kept
    /// whole.
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(2);
    /// s.add(1, 2);
    /// s.reset();
    /// assert_eq!(s.snapshot(), vec![0, 0]);
    /// ```
    pub fn reset(&self) {
        let _ = self.take_all();
    }

    /// How many rows the newest table has besides the base row: 0 while
    /// the set was never contended (or since a [`merge`](Self::merge), or
    /// while one is pending). A diagnostic.
    ///
    /// ```
    /// assert_eq!(shardcount::CounterSet::new(8).shards(), 0);
    /// ```
    #[must_use]
    pub fn shards(&self) -> usize {
        self.table.shards()
    }

    /// Folds every row back into the base row and frees the tables, as
    /// [`Counter::merge`](crate::Counter::merge) (the same guarantees, the
    /// same wait for threads that held owner ids): `true` when the set is
    /// back to its base row alone, `false` while the merge is pending.
    ///
    /// ```
    /// let s = shardcount::CounterSet::with_max_shards(3, 4);
    /// s.split(4);
    /// std::thread::scope(|sc| {
    ///     // Joined: see `Counter::merge` on when a thread has exited.
    ///     sc.spawn(|| s.add(2, 5)).join().unwrap();
    /// });
    /// assert!(s.merge());
    /// assert_eq!((s.shards(), s.snapshot()), (0, vec![0, 0, 5]));
    /// ```
    pub fn merge(&self) -> bool {
        match self.merge_part() {
            Some(part) => merge_all(&mut [part]) == 1,
            None => true,
        }
    }

    /// This set's part in a batch of merges (`shard::merge::merge_all`);
    /// `None` if it was never written nor split (both make the base row
    /// first): no table to fold.
    pub(crate) fn merge_part(&self) -> Option<Part<'_>> {
        let base = self.base.get()?;
        Some(Part::new(
            &self.table,
            self.len,
            // Made, so the fold never allocates: a panic here would leave
            // the head folding.
            Box::new(move |i, n| _ = shared_add(word(base, i), n)),
        ))
    }

    /// Each row's total over its counters (see `ShardTable::row_totals`),
    /// for a `Merger`.
    #[cfg(not(shardcount_loom))]
    pub(crate) fn row_totals(&self, out: &mut Vec<u64>) {
        self.table.row_totals(self.len, out);
    }

    /// Grows to at least `n` rows besides the base row now (a power of two,
    /// at most [`max_shards`](Self::max_shards)), instead of waiting for
    /// contention to show, as [`Counter::split`](crate::Counter::split).
    /// Returns the row count after.
    ///
    /// ```
    /// let s = shardcount::CounterSet::with_max_shards(3, 4);
    /// assert_eq!(s.split(2), 2);
    /// s.inc(1);
    /// assert_eq!(s.snapshot(), [0, 1, 0]);
    /// ```
    pub fn split(&self, n: usize) -> usize {
        // The base row first: a merge folds into it and must not allocate
        // (or panic) mid-fold, so a set with a table always has it.
        self.base();
        self.table.split(n, self.row_lines())
    }

    /// The most rows this set grows to besides the base row.
    ///
    /// ```
    /// assert_eq!(shardcount::CounterSet::with_max_shards(8, 2).max_shards(), 2);
    /// ```
    #[must_use]
    pub fn max_shards(&self) -> usize {
        self.table.max_shards()
    }

    /// What counter `i` holds in the base row and in each row of the
    /// newest table (none without a table): for tests of which row an add
    /// landed in.
    #[cfg(all(test, not(shardcount_loom), not(miri)))]
    pub(crate) fn base_and_newest_rows_of(&self, i: usize) -> (u64, Vec<u64>) {
        // Relaxed: tests read at quiescence.
        let rows = self
            .table
            .table(self.table.load())
            .map_or_else(Vec::new, |t| {
                (0..t.rows())
                    .map(|r| word(t.row(r as u32), i).load(Ordering::Relaxed))
                    .collect()
            });
        let base = self
            .base
            .get()
            .map_or(0, |b| word(b, i).load(Ordering::Relaxed));
        (base, rows)
    }
}

#[cfg(test)]
impl crate::shard::GrowOnce for CounterSet {
    fn table_to_grow(&self) -> (&ShardTable, usize) {
        self.base(); // as in `split`
        (&self.table, self.row_lines())
    }
}

impl fmt::Debug for CounterSet {
    /// The length, the shard count and up to 16 totals.
    ///
    /// ```
    /// let s = shardcount::CounterSet::new(2);
    /// s.inc(0);
    /// assert_eq!(format!("{s:?}"), "CounterSet { len: 2, shards: 0, totals: [1, 0] }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<u64> = (0..self.len.min(16)).map(|i| self.total(i)).collect();
        let mut d = f.debug_struct("CounterSet");
        d.field("len", &self.len)
            .field("shards", &self.shards())
            .field("totals", &shown);
        if self.len > 16 {
            d.finish_non_exhaustive()
        } else {
            d.finish()
        }
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::*;
    use crate::shard::GrowOnce;
    use crate::thread::owner;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;

    /// A `lazy` set split before any add makes its base row then, so
    /// that a later merge folds owners' counts into a row that exists
    /// (the fold must not allocate: a panic there would leave the head
    /// folding); one never written merges without making it.
    #[test]
    fn a_lazy_set_makes_its_base_row_before_its_first_table() {
        let never = CounterSet::lazy(3);
        assert!(never.merge());
        assert!(!never.base_is_made());
        let s = CounterSet::lazy(3);
        assert_eq!(s.split(2), 2);
        assert!(s.base_is_made(), "a table without a base row to merge into");
        // Joined: see `Counter::merge` on when a thread has exited.
        std::thread::scope(|sc| sc.spawn(|| s.add(2, 7)).join().unwrap());
        // Threads of tests running alongside may hold owner ids, running,
        // for a moment: a merge is pending until they add, sleep or exit.
        assert!((0..10_000).any(|_| s.merge() || {
            std::thread::sleep(std::time::Duration::from_millis(1));
            false
        }));
        assert_eq!((s.shards(), s.snapshot()), (0, vec![0, 0, 7]));
    }

    /// A `lazy` length whose row cannot be allocated panics on `split`,
    /// as `new` panics, instead of growing nothing.
    #[test]
    #[should_panic(expected = "cannot allocate a row")]
    fn a_lazy_set_too_long_to_allocate_panics_on_split() {
        let _ = CounterSet::lazy(usize::MAX - 3).split(2);
    }

    /// Leases the calling thread an owner id and keeps it (the thread
    /// stays alive) until `done`; tells `taken` which id it got.
    fn hold_id(done: &AtomicBool, taken: &mpsc::Sender<usize>) {
        let i = owner::lease();
        taken.send(i).unwrap();
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// `sum` (LabelledCounter's too) equals the snapshot's sum on
    /// the base row, owned rows with baselines, and shared rows.
    #[test]
    fn sum_matches_the_snapshot_through_rows_and_takes() {
        let s = CounterSet::with_max_shards(20, 2);
        s.add(3, 5);
        assert_eq!(s.sum(), 5);
        s.split(2);
        s.add(19, 7); // this thread's owned row
        std::thread::scope(|sc| {
            for _ in 0..3 {
                sc.spawn(|| (0..1000).for_each(|i| s.inc(i % 20)));
            }
        });
        assert_eq!(s.take(19), Some(7 + 150));
        s.add(0, 1);
        let snap: u64 = s.snapshot().iter().sum();
        assert_eq!(s.sum(), snap);
        assert_eq!(snap, 5 + 3000 - 150 + 1);
    }

    /// Issue 32: no row ends in a written 64-byte line, whatever the
    /// length, so a next-line prefetch from one thread's row never reaches
    /// the next row's first line. 14 and 15 counters (a histogram with 12
    /// or 13 bounds) once filled one line exactly.
    #[test]
    fn every_row_ends_in_64_unwritten_bytes() {
        for n in 0..100 {
            let s = CounterSet::new(n);
            let words = s.row_lines() * LINE_WORDS;
            // Counters and the mark are words `0..=n`.
            assert!(
                words >= n + 1 + LINE_WORDS / 2,
                "{n} counters: {words} words"
            );
            assert!(
                words < n + 1 + LINE_WORDS / 2 + LINE_WORDS,
                "{n}: a line too many"
            );
        }
        assert_eq!(CounterSet::new(14).row_lines(), 2);
        assert_eq!(CounterSet::new(7).row_lines(), 1);
    }

    /// A thread beyond the rows adding alone to a grown set: nobody else
    /// writes its lines, so the set keeps its two rows. (An earlier rule
    /// counted every sample of such a thread as a strike, and this grew
    /// the set to 16 rows.)
    #[test]
    fn a_lone_thread_beyond_the_rows_never_grows_the_set() {
        let s = CounterSet::with_max_shards(64, 64);
        s.grow_once();
        assert_eq!(s.shards(), 2);
        let done = AtomicBool::new(false);
        let (tx, rx) = mpsc::channel();
        let id = std::thread::scope(|sc| {
            // Threads hold owner ids until the two rows' owners, 1 and 2,
            // are held: the next thread is beyond the rows. (Tests running
            // alongside hold and give back ids too.)
            let mut held = Vec::new();
            while !(held.contains(&1) && held.contains(&2)) && held.len() < 64 {
                let (done, tx) = (&done, tx.clone());
                sc.spawn(move || hold_id(done, &tx));
                held.push(rx.recv().unwrap());
            }
            let id = sc
                .spawn(|| {
                    for _ in 0..1_000_000 {
                        s.inc(5);
                    }
                    owner::held()
                })
                .join()
                .unwrap();
            done.store(true, Ordering::Relaxed);
            id
        });
        assert!(id > 2, "the lone thread owned a row (id {id})");
        assert_eq!(s.get(5), Some(1_000_000));
        assert_eq!(s.shards(), 2, "a lone writer grew the set");
    }
}
