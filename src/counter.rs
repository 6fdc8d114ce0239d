//! `Counter`: one base atomic that grows into a [`ShardTable`] when, and only
//! when, threads are seen to contend.
//!
//! # Protocol
//!
//! * `base: AtomicU64` holds counts added while no table exists (and any that
//!   were there when it was created; it stays part of the sum for ever).
//! * `table: ShardTable` is the chain of padded shards, grown and merged (its own
//!   module docs give its protocol: publication, growth, take epochs).
//! * Orderings: counting on the base and on shared shards uses `Relaxed`
//!   read-modify-writes; an owner adds to its owned shard with a plain
//!   load and store, as its only writer (`shard/owned.rs`). Nothing is
//!   published through the counts, so every count is read `Relaxed` too:
//!   coherence alone makes a read include every update that
//!   happened-before it. The one `Acquire` is a sampled add's re-load of
//!   its word, which pairs with a take's `Release` swap (the shard module
//!   docs, "Orderings").
//!
//! # Detecting contention
//!
//! One add in 128, picked by the value its `fetch_add` returned,
//! re-loads the word at once (see `thread::sampler`): any value but the one
//! it left means another thread wrote the word in those few nanoseconds (one
//! in 16,384 keeps watching a few hundred nanoseconds more). On
//! the base that creates the first table. The uncontended path reads no
//! thread-local at all.
//!
//! # Owned rows
//!
//! Once there is a table, the thread holding owner id `i`
//! (`thread::owner`: small, dense, unique among live threads, leased on a
//! thread's first add to any sharded table and given back at its exit)
//! owns shard `i - 1` while the table has it, and is its only writer: an
//! owner's add is a load and a store, no locked instruction and no test
//! (`shard/owned.rs`: takes keep baselines instead of swapping owned
//! words). Only threads that add to sharded tables hold ids, so idle
//! threads (a main thread that touched a `RoughCounter`) do not push busy
//! ones beyond the table.
//!
//! Threads beyond the table (an id above its shard count: ids are
//! process-wide, so this happens when more live threads have added to
//! sharded tables than this table has shards) and threads without an id
//! add on their probe's *shared* shard (a second set of shards, made on
//! the first such add) with an RMW, and sample as on the base: a change
//! moves the thread to another shard, and when the same counter shows
//! interference twice in a row the table doubles, up to the cap. A `take`
//! in between gives no verdict (the shard table's take epoch), so takes
//! never grow a counter.

use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::shard::{
    merge_all, shared_add, store_add, Check, Head, Leased, Part, Route, Rows, ShardTable, Table,
};
use crate::thread::grace;
use crate::thread::sampler;
use crate::thread::{self, owner, MAX_SHARDS};
use std::fmt;

/// A sharded `u64` counter: a drop-in for a hot `AtomicU64` counter.
///
/// It starts as a single atomic word and costs about what
/// `AtomicU64::fetch_add` costs while one thread at a time updates it. When
/// threads are seen to contend, it grows a table of cache-padded shards so
/// that each thread mostly writes its own cache line.
///
/// Arithmetic is modulo 2<sup>64</sup>, exactly as `AtomicU64::fetch_add` and
/// `fetch_sub`: decrementing below zero wraps, and [`sum_i64`](Self::sum_i64)
/// reads the same bits as a signed value for up/down counters.
///
/// # Consistency of reads
///
/// * [`sum`](Self::sum) is **exact at quiescence** and includes every update
///   that happened-before the call. While other threads update the counter it
///   is **not an atomic snapshot**: it reads the shards one after another, so
///   it may include some concurrent updates and miss others, and a mix of adds
///   and subs running concurrently can yield a value the counter never held.
///   For add-only use, successive `sum`s by one thread never decrease (also
///   across growth), and a `sum` never exceeds the number of adds started.
/// * [`take`](Self::take) loses nothing: every update is counted by exactly
///   one `take`, or is still in the counter for a later `sum`/`take`.
///
/// # Memory
///
/// An idle counter is 16 bytes and allocates nothing. Under contention it
/// allocates at most about twice its shard cap in 128-byte padded shards
/// (the tables of 2, 4, ... up to the cap), freed when it is dropped. A
/// table gets as many again the first time a thread without a shard of
/// its own adds to it (more threads than the cap, or adds from
/// thread-local destructors), and as many again on its first
/// [`take`](Self::take) (the take baselines): at most about six times the
/// cap in all.
///
/// Shards go to the threads that add to sharded counters and sets (each
/// leases a small owner id on its first such add, the smallest free, and
/// gives it back when it exits), not to every thread in the process: an
/// idle thread (a main thread that touched a `RoughCounter`, a logger)
/// owns none. So with the default cap, the core count, N threads adding on
/// N cores each own a shard however many other threads exist. A higher
/// cap costs 128 bytes per shard (about 256 per unit of cap, with the
/// smaller tables kept) and only helps when more threads than cores add at
/// once.
///
/// # Signal handlers and `fork`
///
/// Adds are not async-signal-safe. A thread's first add to a sharded
/// counter registers it (an allocation, which must not run inside the
/// thread's own `malloc`), growth allocates a table, and a handler's add
/// may acknowledge a merge for its thread while the add it interrupted
/// still holds a shard table, which the merge then frees. Count in a
/// handler with an `AtomicU64`, and add that to a counter outside it.
///
/// In the child of a `fork` from a multithreaded process, merges wait for
/// the parent's other threads, which are not there: a merge never
/// completes (the shards stay, the counts exact), and may wait for ever
/// for a read those threads had begun. Merge before forking, or not in
/// the child.
///
/// # Example
///
/// ```
/// use shardcount::Counter;
///
/// static REQUESTS: Counter = Counter::new();
///
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| {
///             for _ in 0..1000 {
///                 REQUESTS.inc();
///             }
///         });
///     }
/// });
/// assert_eq!(REQUESTS.sum(), 4000);
/// ```
pub struct Counter {
    base: AtomicU64,
    table: ShardTable,
}

impl Counter {
    crate::primitive::const_fn! {
        /// A counter at zero, with the default shard cap: the next power of
        /// two at or above `std::thread::available_parallelism()`, and at
        /// least 2, read once per process when first needed. (The floor of 2
        /// is there because `available_parallelism` follows the calling
        /// thread's affinity: a thread pinned to one core sees 1. If the
        /// first read happens on a pinned thread of a larger machine, the cap
        /// is too low; set it with [`with_max_shards`](Self::with_max_shards).)
        ///
        /// `const`, so it can initialise a `static`.
        ///
        /// ```
        /// use shardcount::Counter;
        /// static HITS: Counter = Counter::new();
        /// HITS.inc();
        /// assert_eq!(HITS.sum(), 1);
        /// ```
        #[must_use]
        pub const fn new() -> Self {
            Counter {
                base: AtomicU64::new(0),
                table: ShardTable::new(None),
            }
        }
    }

    crate::primitive::const_fn! {
        /// A counter at zero that grows to at most `max_shards` shards.
        ///
        /// `max_shards` is rounded up to a power of two. `1` means the counter
        /// never grows: it stays a single atomic.
        ///
        /// # Panics
        ///
        /// If `max_shards` is 0 or above 65536 (in a `const` context, this is
        /// a compile error).
        ///
        /// ```
        /// use shardcount::Counter;
        /// static SMALL: Counter = Counter::with_max_shards(3); // rounds up to 4
        /// assert_eq!(SMALL.max_shards(), 4);
        /// ```
        #[must_use]
        pub const fn with_max_shards(max_shards: usize) -> Self {
            assert!(max_shards >= 1, "shardcount: Counter::with_max_shards(0): need at least 1 shard");
            assert!(
                max_shards <= MAX_SHARDS,
                "shardcount: Counter::with_max_shards: at most 65536 shards"
            );
            let log2 = max_shards.next_power_of_two().trailing_zeros();
            Counter {
                base: AtomicU64::new(0),
                table: ShardTable::new(Some(log2)),
            }
        }
    }

    /// Adds `n`, wrapping at 2<sup>64</sup> like `AtomicU64::fetch_add`.
    ///
    /// While the counter has no table this is one `fetch_add` on the base
    /// word and a sampling test on the value it returns, after one compare
    /// with a thread-local. Once sharded, a thread adds to the shard its
    /// owner id owns (an id is leased on a thread's first add to a sharded
    /// counter or set), of which it is the only writer, with a load and a
    /// store: no locked instruction. Each thread caches where its shard is
    /// in one sharded counter, set or histogram, the last it added to four
    /// times in a row: an add there finds the shard with a compare and a
    /// thread-local load; others look it up (a few more loads and tests).
    /// A thread beyond the table adds to a shared shard with a `fetch_add`
    /// and samples it.
    ///
    /// ```
    /// let c = shardcount::Counter::new();
    /// c.add(5);
    /// assert_eq!(c.sum(), 5);
    /// ```
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.table.route_add_first(
            n,
            #[inline(always)]
            |route| match route {
                Route::Base(head) => self.add_base(head, n),
                Route::Beyond => self.add_beyond(n),
                Route::NoId => self.add_unowned(n),
            },
        );
    }

    /// An add on a sharded counter by a thread whose owner id is beyond
    /// the table it loaded: pinned, on its probe's shared shard (checked
    /// for sharing) of the table it loads now.
    #[inline(never)]
    fn add_beyond(&self, n: u64) {
        let _pin = grace::pin();
        self.add_leased(owner::owner(), n);
    }

    /// An add on the base word, while the head (`head`) names no table
    /// (or one a merge retires), sampled for contention.
    #[inline(always)]
    fn add_base(&self, head: Head, n: u64) {
        let prev = shared_add(&self.base, n);
        // A sampled add re-loads the word at once, inline, as nearly every
        // such check is quiet; the cold check runs on a change, or to watch
        // the word a while (`sampler::watch`).
        // Acquire: pairs with the Release swap of the base in `Take::swap`.
        // A sampled add on the base of a retiring table checks too, to
        // acknowledge the merge (`ShardTable::check_base`).
        if sampler::sampled(prev, n)
            && (self.base.load(Ordering::Acquire) != prev.wrapping_add(n)
                || sampler::watched(prev, n)
                || !head.is_tag())
        {
            // The tag's epoch is bits of `head`, loaded before the add.
            self.table.check_base(Check {
                head,
                word: &self.base,
                prev,
                n,
                row_lines: 1,
            });
        }
    }

    /// An add on a sharded counter by a thread without an owner id (none
    /// yet, or revoked by a merge: `shard/merge.rs`): it leases or
    /// acknowledges, then adds afresh with a head loaded after that (id 0,
    /// at thread exit: pinned, on a shared shard).
    #[inline(never)]
    fn add_unowned(&self, n: u64) {
        let id = owner::lease();
        if id == 0 {
            let _pin = grace::pin();
            return self.add_leased(0, n);
        }
        self.table.route_id(
            id,
            // SAFETY: a row has at least one word.
            |row| store_add(unsafe { row.word(0) }, n),
            |route| match route {
                Route::Base(head) => self.add_base(head, n),
                Route::Beyond | Route::NoId => self.add_beyond(n),
            },
        );
    }

    /// A pinned add by a thread whose id is `id` (0: none): its own row,
    /// the base, or its probe's shared shard (`ShardTable::route_leased`).
    #[inline(always)]
    fn add_leased(&self, id: usize, n: u64) {
        match self.table.route_leased(id) {
            // SAFETY: a row has at least one word.
            Ok(row) => store_add(unsafe { row.word(0) }, n),
            Err(Leased::Base(head)) => self.add_base(head, n),
            Err(Leased::Shared(head, t)) => self.add_probed(head, t, n),
        }
    }

    /// An add on the probe's shared shard of `t`, the table `head` names,
    /// sampled for sharing: a shard other threads may write too.
    #[inline]
    fn add_probed(&self, head: Head, t: &Table, n: u64) {
        // Threads start on shard 0; the first collision gives one a probe
        // of its own (`sampler::collided` rehashes).
        let Some(at) = t.shared_shard(thread::probe_or_zero()) else {
            // No memory for the shared rows: the base takes it.
            shared_add(&self.base, n);
            return;
        };
        let prev = shared_add(at, n);
        // As on the base: the cold check only on a change or a watch.
        // Acquire: pairs with the Release swap of a shared shard in
        // `TakeRow::take`.
        if sampler::sampled(prev, n)
            && (at.load(Ordering::Acquire) != prev.wrapping_add(n) || sampler::watched(prev, n))
        {
            self.table.check_shard(Check {
                head,
                word: at,
                prev,
                n,
                row_lines: 1,
            });
        }
    }

    /// An add that skips the owned-row path, so that models and tests of
    /// the shared shards run it from any thread.
    #[cfg(test)]
    pub(crate) fn add_probed_for_test(&self, n: u64) {
        let _pin = grace::pin();
        let head = self.table.load();
        match self.table.table(head) {
            Some(t) => self.add_probed(head, t, n),
            None => self.add(n),
        }
    }

    /// The current total, modulo 2<sup>64</sup>.
    ///
    /// Exact when no update runs concurrently; includes every update that
    /// happened-before the call. Not an atomic snapshot under concurrent
    /// updates (see [the type docs](Counter#consistency-of-reads)). For
    /// add-only use, successive calls by one thread never decrease.
    ///
    /// Cost: one load per shard, up to about twice the shard cap (a counter
    /// never split: one load). A thread that adds to sharded counters
    /// reads them with two plain stores more (marks around the read). On
    /// Linux so does a thread that only reads (an exporter's): its first
    /// read of a sharded counter pins (a heavier mark) and registers it as
    /// a *reader* (an id beyond every shard, which owns none and takes
    /// none from adding threads), and a merge looks at a reader's marks:
    /// a reader holds a merge back only while it is inside a read, or
    /// until its next read if it reads without pause. Elsewhere every read
    /// by a thread that never added pins.
    ///
    /// ```
    /// let c = shardcount::Counter::new();
    /// c.add(2);
    /// c.add(3);
    /// assert_eq!(c.sum(), 5);
    /// ```
    #[must_use]
    #[inline(always)]
    pub fn sum(&self) -> u64 {
        // No table: the base is everything (a table grown later holds only
        // adds that did not happen-before this read), and no window is
        // needed, as no table is read.
        if self.table.load().is_tag() {
            return self.base.load(Ordering::Relaxed);
        }
        self.sum_sharded()
    }

    /// [`sum`](Self::sum) once the counter had a table: a thread that
    /// holds an id (an adder's or a reader's) reads inline, unpinned,
    /// inside a read window (`thread::owner`); others (and retiring
    /// tables) take the call.
    #[inline(always)]
    fn sum_sharded(&self) -> u64 {
        if let Some(window) = owner::Reading::enter() {
            let head = self.table.load();
            // A plain table first: one test of the head's low bits.
            let rows = self.table.held_rows(head);
            let total = if crate::shard::likely(rows.is_some()) {
                rows.map(|rows| self.total_of(rows))
            } else if head.is_tag() {
                Some(self.base.load(Ordering::Relaxed))
            } else {
                None
            };
            drop(window);
            if let Some(total) = total {
                return total;
            }
        }
        self.sum_pinned()
    }

    /// The base and the rows of a read that keeps them alive.
    #[inline(always)]
    fn total_of(&self, rows: Rows<'_>) -> u64 {
        self.base
            .load(Ordering::Relaxed)
            .wrapping_add(rows.sum_first_word())
    }

    /// [`sum`](Self::sum) through a pinned read.
    #[inline(never)]
    fn sum_pinned(&self) -> u64 {
        self.table.read_pinned(|rows| self.total_of(rows))
    }

    /// Returns the current total and resets the counter to zero, losing
    /// nothing while other threads keep updating.
    ///
    /// Each shard is swapped with zero atomically, so every update is counted
    /// by exactly one `take`, or stays in the counter for a later `sum` or
    /// `take`. As with `sum`, the result is not a snapshot of one instant.
    ///
    /// ```
    /// let c = shardcount::Counter::new();
    /// c.add(7);
    /// assert_eq!(c.take(), 7);
    /// assert_eq!(c.sum(), 0);
    /// ```
    pub fn take(&self) -> u64 {
        // The take ends when `take` drops, after the last swap.
        let take = self.table.take();
        let mut total = take.swap(&self.base);
        take.for_each_row(|row| total = total.wrapping_add(row.take(0)));
        total
    }

    /// Sets the counter to zero.
    ///
    /// Every update that happened-before the call is discarded; every update
    /// that happens-after it is kept. An update concurrent with `reset` is
    /// either discarded or kept whole, never split. Use [`take`](Self::take)
    /// to keep what is discarded.
    ///
    /// ```
    /// let c = shardcount::Counter::from(9);
    /// c.reset();
    /// assert_eq!(c.sum(), 0);
    /// ```
    pub fn reset(&self) {
        self.take();
    }

    /// Consumes the counter and returns its total (exact: no one else can be
    /// updating it).
    ///
    /// ```
    /// let c = shardcount::Counter::from(4);
    /// assert_eq!(c.into_inner(), 4);
    /// ```
    #[must_use]
    pub fn into_inner(self) -> u64 {
        self.sum()
    }

    /// How many shards the newest table has: 0 while the counter is a single
    /// atomic (never contended, or since a [`merge`](Self::merge)
    /// completed). A pending merge's shards are still counted: they are
    /// allocated until it completes. A diagnostic.
    ///
    /// ```
    /// let c = shardcount::Counter::new();
    /// assert_eq!(c.shards(), 0);
    /// ```
    #[must_use]
    pub fn shards(&self) -> usize {
        self.table.shards()
    }

    /// Grows to at least `n` shards now (a power of two, at most
    /// [`max_shards`](Self::max_shards)) instead of waiting for contention
    /// to show: before a burst the caller knows is coming, or for one
    /// thread's hot loop (an adding thread then owns a shard and adds with
    /// a plain load and store instead of a locked `fetch_add`). Returns the
    /// shard count after. Memory: as a contended counter's (see
    /// [Memory](Self#memory)); `split(0)` does nothing.
    ///
    /// ```
    /// let c = shardcount::Counter::with_max_shards(8);
    /// assert_eq!(c.split(3), 4);
    /// assert_eq!(c.split(100), 8); // the cap
    /// c.inc();
    /// assert_eq!(c.sum(), 1);
    /// ```
    pub fn split(&self, n: usize) -> usize {
        self.table.split(n, 1)
    }

    /// Folds the shards back into the base word and frees them: the
    /// inverse of [`split`](Self::split) and of growth, when a burst is
    /// over. Returns `true` when the counter is back to its idle form (16
    /// bytes, nothing allocated; [`shards`](Self::shards) 0), `false`
    /// while the merge is pending.
    ///
    /// Nothing is lost or counted twice, whatever runs meanwhile: adds,
    /// sums, takes, growth, thread exit. A shard's owner adds without a
    /// locked instruction, so the shards are freed only once no thread
    /// can still be inside an add (or a read) that loaded them, and every
    /// pinned read that could see them has ended. Until then the merge is
    /// *pending*: adds go to the base word (as on an idle counter),
    /// `shards()` still counts the shards (they are still allocated), and
    /// a later `merge` call completes it; contention on the base meanwhile
    /// cancels it and the shards are used again.
    ///
    /// * **On x86_64 Linux** (where [`merges_need_quiesce`](crate::merges_need_quiesce())
    ///   is `false`) the merge reads each such thread's state from
    ///   `/proc`: one asleep in the kernel is outside every add (adds make
    ///   no system call), so a merge completes within moments while the
    ///   threads that added sleep, park (tokio, rayon) or block. It stays
    ///   pending while one of them runs (adding to other counters, say)
    ///   until that one sleeps, adds to a sharded counter through its slow
    ///   path once, or exits.
    /// * **Elsewhere** a thread that added to a sharded counter or set
    ///   since the last merge holds it pending until it adds to one again
    ///   (each comes through a slow path once, and so acknowledges), exits
    ///   or calls [`quiesce`](crate::quiesce()): in a tokio or rayon
    ///   service, see there how each pool makes its idle workers call it.
    ///   A thread has exited for this once its `join` returned; the end of
    ///   a `std::thread::scope` does not wait for that (it returns before
    ///   the threads' thread-locals, which hold the ids, are dropped).
    ///
    /// ```
    /// let c = shardcount::Counter::with_max_shards(4);
    /// c.split(4);
    /// std::thread::scope(|s| {
    ///     let adders: Vec<_> = (0..2)
    ///         .map(|_| s.spawn(|| (0..1000).for_each(|_| c.inc())))
    ///         .collect();
    ///     // Joined, not left to the scope: a scope's end does not wait for
    ///     // its threads' thread-locals (the owner ids) to be dropped.
    ///     adders.into_iter().for_each(|a| a.join().unwrap());
    /// }); // the adders exited: nothing holds the merge back
    /// assert!(c.merge());
    /// assert_eq!((c.shards(), c.sum()), (0, 2000));
    /// ```
    pub fn merge(&self) -> bool {
        merge_all(&mut [self.merge_part()]) == 1
    }

    /// Merges every counter of `counters` as [`merge`](Self::merge) does,
    /// in one batch: one revocation and two grace periods for all, not per
    /// counter. Returns how many are done.
    #[cfg(feature = "metrics")]
    pub(crate) fn merge_batch<'a>(counters: impl IntoIterator<Item = &'a Counter>) -> usize {
        let mut parts: Vec<_> = counters.into_iter().map(Counter::merge_part).collect();
        merge_all(&mut parts)
    }

    /// This counter's part in a batch of merges (`shard::merge::merge_all`).
    pub(crate) fn merge_part(&self) -> Part<'_> {
        let base = &self.base;
        Part::new(
            &self.table,
            1,
            Box::new(move |_, n| _ = shared_add(base, n)),
        )
    }

    /// Each row's total (see `ShardTable::row_totals`), for a `Merger`.
    #[cfg(not(shardcount_loom))]
    pub(crate) fn row_totals(&self, out: &mut Vec<u64>) {
        self.table.row_totals(1, out);
    }

    /// The most shards this counter will grow to (a power of two).
    ///
    /// ```
    /// let c = shardcount::Counter::with_max_shards(8);
    /// assert_eq!(c.max_shards(), 8);
    /// ```
    #[must_use]
    pub fn max_shards(&self) -> usize {
        self.table.max_shards()
    }

    /// Each part of the total, for watching or debugging contention: the
    /// base word first, then one value per shard of the newest table
    /// (`1 + shards()` values).
    ///
    /// A growth moves no counts: the older, smaller tables stay and are
    /// still counted. Here shard `j` of each older table is added into
    /// shard `j` of the newest one, so the values (with wrapping) add up to
    /// the total. Like [`sum`](Self::sum), this reads each word once, one
    /// after another: exact at quiescence, not a snapshot of one instant
    /// while others update. It only reads.
    ///
    /// ```
    /// use shardcount::Counter;
    ///
    /// let c = Counter::new();
    /// c.add(5);
    /// // No contention yet: everything is in the base word.
    /// assert_eq!(c.shard_values(), vec![5]);
    ///
    /// std::thread::scope(|s| {
    ///     for _ in 0..2 {
    ///         s.spawn(|| (0..100_000).for_each(|_| c.inc()));
    ///     }
    /// });
    /// let values = c.shard_values();
    /// assert_eq!(values.len(), 1 + c.shards());
    /// assert_eq!(values.iter().sum::<u64>(), c.sum());
    /// ```
    #[must_use]
    pub fn shard_values(&self) -> Vec<u64> {
        // A chain's newest table is its largest, so row `r` of any table
        // (owned or shared) goes to shard `r`; a growth or a merge racing
        // the visit changes the head, and `read` looks again. Pinned: it
        // allocates (`ShardTable::read_pinned`).
        self.table.read_pinned(|rows| {
            let mut values = vec![self.base.load(Ordering::Relaxed)];
            values.resize(1 + rows.shards(), 0);
            rows.for_each_count_row(|r, row| {
                if let Some(v) = values.get_mut(1 + r) {
                    *v = v.wrapping_add(row.read(0));
                }
            });
            values
        })
    }

    /// Whether either entry of the calling thread's row cache holds this
    /// counter's newest table: its next add would be a hit.
    #[cfg(all(test, shardcount_loom))]
    pub(crate) fn cache_hits(&self) -> bool {
        self.table.cached_here()
    }

    /// The address the head holds now.
    #[cfg(test)]
    pub(crate) fn head_addr(&self) -> usize {
        self.table.head_addr()
    }

    /// The base and what each shard of the newest table holds (none
    /// without a table): for tests of which shard an add landed in.
    #[cfg(all(test, not(shardcount_loom)))]
    pub(crate) fn base_and_newest_shards(&self) -> (u64, Vec<u64>) {
        let shards = self
            .table
            .table(self.table.load())
            .map_or_else(Vec::new, |t| {
                (0..t.rows())
                    .map(|r| t.shard(r as u32).load(Ordering::Relaxed))
                    .collect()
            });
        (self.base.load(Ordering::Relaxed), shards)
    }
}

#[cfg(test)]
impl crate::shard::GrowOnce for Counter {
    fn table_to_grow(&self) -> (&ShardTable, usize) {
        (&self.table, 1)
    }
}

crate::surface::u64_counter_surface!(Counter);

impl From<u64> for Counter {
    /// A counter starting at `n`.
    ///
    /// ```
    /// let c = shardcount::Counter::from(42);
    /// assert_eq!(c.sum(), 42);
    /// ```
    fn from(n: u64) -> Self {
        let c = Counter::new();
        c.base.store(n, Ordering::Relaxed);
        c
    }
}

impl fmt::Debug for Counter {
    /// Shows the current [`sum`](Counter::sum) and the shard count.
    ///
    /// ```
    /// let c = shardcount::Counter::from(3);
    /// assert_eq!(format!("{c:?}"), "Counter { sum: 3, shards: 0 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter")
            .field("sum", &self.sum())
            .field("shards", &self.shards())
            .finish()
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::*;
    use crate::shard::GrowOnce;

    #[test]
    fn owner_id_i_owns_shard_i_minus_one_while_the_table_has_it() {
        let c = Counter::with_max_shards(4);
        c.grow_once();
        let t = c.table.table(c.table.load()).expect("grown");
        let owned = |id| {
            let row = c.table.route_leased(id).ok()?;
            // SAFETY: a row has at least one word.
            Some(unsafe { row.word(0) } as *const AtomicU64)
        };
        assert!(owned(0).is_none(), "id 0 means none");
        assert!(std::ptr::eq(owned(1).unwrap(), t.shard(0)));
        assert!(std::ptr::eq(owned(2).unwrap(), t.shard(1)));
        assert!(owned(3).is_none(), "beyond a table of 2");
    }

    #[test]
    fn shard_values_fold_each_older_table_row_into_the_same_shard() {
        let c = Counter::with_max_shards(8);
        c.add(3);
        let add = |row: u32, n: u64| {
            let t = c.table.table(c.table.load()).expect("grown");
            t.shard(row).fetch_add(n, Ordering::Relaxed);
        };
        c.grow_once();
        add(0, 10);
        add(1, 20);
        c.grow_once();
        for (row, n) in [1, 2, 3, 4].into_iter().enumerate() {
            add(row as u32, n);
        }
        c.grow_once();
        add(5, 100);
        assert_eq!(c.shards(), 8);
        let values = c.shard_values();
        assert_eq!(values, [3, 11, 22, 3, 4, 0, 100, 0, 0]);
        assert_eq!(values.iter().sum::<u64>(), c.sum());
    }

    #[test]
    fn shard_values_add_up_to_the_sum_after_two_threads_contend() {
        let c = Counter::new();
        assert_eq!(c.shard_values(), [0]);
        let go = std::sync::Barrier::new(2);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    go.wait();
                    for _ in 0..200_000 {
                        c.inc();
                    }
                });
            }
        });
        let values = c.shard_values();
        assert_eq!(values.len(), 1 + c.shards());
        assert_eq!(values.iter().sum::<u64>(), 400_000);
        assert_eq!(c.sum(), 400_000);
    }

    /// Each owned shard holds exactly its owner's adds (one writer), and
    /// the shared shards exactly the adds of the threads beyond the table.
    #[test]
    fn owned_shards_hold_exactly_their_owners_adds() {
        let c = Counter::with_max_shards(2);
        assert_eq!(c.split(2), 2);
        let go = std::sync::Barrier::new(4);
        let done: Vec<(usize, u64)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4u64)
                .map(|t| {
                    let (c, go) = (&c, &go);
                    s.spawn(move || {
                        let n = 50_000 + t;
                        go.wait();
                        (0..n).for_each(|_| c.inc());
                        // Alive until all are done: no id is handed on.
                        go.wait();
                        (owner::held(), n)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let (base, owned) = c.base_and_newest_shards();
        assert_eq!(base, 0);
        let mut beyond = 0;
        for (id, n) in &done {
            match id {
                1 | 2 => assert_eq!(owned[id - 1], *n, "shard of id {id}"),
                _ => beyond += n,
            }
        }
        let shared = c.sum() - owned.iter().sum::<u64>();
        assert_eq!(shared, beyond);
        assert_eq!(c.sum(), done.iter().map(|d| d.1).sum::<u64>());
    }

    #[test]
    fn a_sharded_add_lands_on_the_owned_shard_or_the_probed_one() {
        let c = Counter::with_max_shards(4);
        c.grow_once();
        std::thread::scope(|s| {
            s.spawn(|| {
                c.add(5);
                // The add leased the thread an owner id (tests running
                // alongside may hold the low ones).
                let i = owner::held();
                assert_ne!(i, 0);
                let t = c.table.table(c.table.load()).expect("grown");
                // Id i owns shard i - 1 of the two; beyond them, the add
                // took the probed path to a shared shard (probe 0 until a
                // collision).
                let at = if i <= 2 {
                    t.shard(i as u32 - 1)
                } else {
                    t.shared_shard(thread::probe_or_zero()).expect("allocated")
                };
                assert_eq!(at.load(Ordering::Relaxed), 5, "id {i}");
                assert_eq!(c.sum(), 5);
            });
        });
    }
}
