//! `Counter`: one base atomic that grows into a table of padded shards when,
//! and only when, threads are seen to contend.
//!
//! # Protocol
//!
//! * `base: AtomicU64` holds counts added while no table exists (and any that
//!   were there when it was created; it stays part of the sum for ever).
//! * `table: AtomicPtr<Table>` is either a *tag* (an odd value: no table yet,
//!   carrying the configured shard cap) or a pointer to the newest table.
//!   A table is published once, by a compare-exchange with `AcqRel`; readers
//!   load it with `Acquire`, so the zeroed shards are visible before use.
//! * Each table links to the older, smaller one it replaced. Older tables are
//!   never freed before the counter is dropped and are always summed, so an
//!   add that lands in an old table after a growth is still counted: growth
//!   moves no counts and so can neither lose nor duplicate one.
//! * **Take epochs.** A `take` rewrites the words adders write, which the
//!   contention check below must not mistake for another adder. So each
//!   take first counts itself *started*, swaps with `Release`, then counts
//!   itself *finished* (`Release`). The two counts live in the tag while
//!   there is no table (fields of a `usize`, compared modulo their width)
//!   and in the newest table once there is one. A checked add reads them
//!   (`Acquire`) before its add and notes only if `started == finished`;
//!   the resolving add is an `Acquire` RMW, so if it reads a word a take
//!   swapped, that take's start is visible to the `started` it reads after,
//!   which then differs from the note's: no verdict. (`started == finished`
//!   at the note means every take it saw had finished, so none of them can
//!   land between note and resolution.)
//! * All counting uses `Relaxed` read-modify-writes: every add is a single
//!   atomic RMW on one location, so nothing is published through the counts
//!   and exactness follows from RMW atomicity alone.
//!
//! # Detecting contention
//!
//! A `lock xadd` cannot tell whether its line was contended, and a CAS on
//! every add costs ~1.8× here. So one add in
//! [`CHECK_PERIOD`](crate::thread_index::CHECK_PERIOD) of a thread notes the
//! value it left, and the thread's next add to the same word soon after
//! checks whether the value is still that (see `thread_index`). Both are
//! ordinary `fetch_add`s. Another writer in that short gap is interference.
//! On the base it creates the first table. On a shard the thread moves to
//! another shard, and when the same counter shows interference twice in a
//! row the table doubles, up to the cap. A counter forgets the dropping
//! thread's note when dropped, so a counter later built at the same address
//! cannot resolve it. `grow` replaces the newest table by compare-exchange, so racing
//! growers allocate at most one table each and the loser frees its own.

use crate::sync::{const_fn_unless_loom, AtomicPtr, AtomicU64, Ordering};
use crate::thread_index::{self, Seen, MAX_SHARDS};
use crossbeam_utils::CachePadded;
use std::fmt;

/// The tag meaning "no table yet, cap from `available_parallelism`".
const DEFAULT_TAG: usize = 1;

/// Tags are odd; tables are at least 8-aligned, so their addresses are even.
#[inline]
fn is_table(p: *mut Table) -> bool {
    p.addr() & 1 == 0
}

/// Tag for "no table yet, cap `2^log2`".
const fn cap_tag(log2: u32) -> usize {
    ((log2 as usize + 1) << 1) | 1
}

/// A tag's bits: 0 is set, 1..8 hold the cap (0: the default), and the rest
/// is split into the take epoch's started and finished counts.
const CAP_MASK: usize = 0xfe;
const EPOCH_SHIFT: u32 = 8;
const EPOCH_BITS: u32 = (usize::BITS - EPOCH_SHIFT) / 2;
const EPOCH_MASK: usize = (1 << EPOCH_BITS) - 1;

/// The tag's started and finished take counts.
#[inline]
fn tag_epoch(tag: usize) -> (usize, usize) {
    let e = tag >> EPOCH_SHIFT;
    (e & EPOCH_MASK, (e >> EPOCH_BITS) & EPOCH_MASK)
}

/// `tag` with one more take started (`field` 0) or finished (`field` 1),
/// wrapping within the field.
#[inline]
fn tag_bump(tag: usize, field: u32) -> usize {
    let shift = EPOCH_SHIFT + field * EPOCH_BITS;
    let mask = EPOCH_MASK << shift;
    (tag & !mask) | (tag.wrapping_add(1 << shift) & mask)
}

/// A table's take epoch (see the module docs), on its own cache line so
/// takes do not disturb the adders' reads of the table's header.
struct Takes {
    started: AtomicU64,
    finished: AtomicU64,
}

struct Table {
    /// A power of two in length.
    shards: Box<[CachePadded<AtomicU64>]>,
    /// The table this one replaced, or a tag when this is the first.
    older: *mut Table,
    /// The cap on `shards.len()`, as a power of two.
    max_log2: u32,
    takes: CachePadded<Takes>,
}

impl Table {
    #[inline]
    fn shard(&self, probe: u32) -> &AtomicU64 {
        &self.shards[probe as usize & (self.shards.len() - 1)]
    }
}

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
/// allocates at most about twice its shard cap in 128-byte padded shards,
/// freed when it is dropped.
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
    table: AtomicPtr<Table>,
}

impl Counter {
    const_fn_unless_loom! {
        /// A counter at zero, with the default shard cap: the next power of
        /// two at or above `std::thread::available_parallelism()`, and at
        /// least 2, read once per process when first needed. (The floor of 2
        /// is there because `available_parallelism` follows the calling
        /// thread's affinity: a thread pinned to one core sees 1. If the
        /// first read happens on a pinned thread of a larger machine, the cap
        /// is too low; set it with [`with_max_shards`](Self::with_max_shards).)
        ///
        /// `const` (except under `cfg(loom)`), so it can initialise a `static`.
        ///
        /// ```
        /// use shardcount::Counter;
        /// static HITS: Counter = Counter::new();
        /// HITS.inc();
        /// assert_eq!(HITS.sum(), 1);
        /// ```
        #[must_use]
        pub fn new() -> Self {
            Counter {
                base: AtomicU64::new(0),
                table: AtomicPtr::new(std::ptr::without_provenance_mut(DEFAULT_TAG)),
            }
        }
    }

    const_fn_unless_loom! {
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
        pub fn with_max_shards(max_shards: usize) -> Self {
            assert!(max_shards >= 1, "shardcount: Counter::with_max_shards(0): need at least 1 shard");
            assert!(
                max_shards <= MAX_SHARDS,
                "shardcount: Counter::with_max_shards: at most 65536 shards"
            );
            let log2 = max_shards.next_power_of_two().trailing_zeros();
            Counter {
                base: AtomicU64::new(0),
                table: AtomicPtr::new(std::ptr::without_provenance_mut(cap_tag(log2))),
            }
        }
    }

    /// Adds `n`, wrapping at 2<sup>64</sup> like `AtomicU64::fetch_add`.
    ///
    /// ```
    /// let c = shardcount::Counter::new();
    /// c.add(5);
    /// assert_eq!(c.sum(), 5);
    /// ```
    #[inline]
    pub fn add(&self, n: u64) {
        let s = thread_index::sample();
        // Acquire: pairs with the AcqRel publish in `grow`, so a table's
        // zeroed shards are initialised before we touch them.
        let t = self.table.load(Ordering::Acquire);
        if is_table(t) {
            // SAFETY: an even value was published by `grow` from a live Box,
            // and tables are freed only in `drop`, which has `&mut self`.
            let table = unsafe { &*t };
            self.add_at(t, table.shard(s.probe), n, s.check);
        } else {
            self.add_at(t, &self.base, n, s.check);
        }
    }

    #[inline(always)]
    fn add_at(&self, current: *mut Table, at: &AtomicU64, n: u64, check: bool) {
        if check {
            self.add_checked(current, at, n);
        } else {
            // Relaxed: a lone RMW; nothing is published through counts.
            at.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Subtracts `n`, wrapping below zero like `AtomicU64::fetch_sub`.
    ///
    /// ```
    /// let c = shardcount::Counter::from(10);
    /// c.sub(3);
    /// assert_eq!(c.sum(), 7);
    /// c.sub(8);
    /// assert_eq!(c.sum(), u64::MAX); // wrapped, as an AtomicU64 would
    /// assert_eq!(c.sum_i64(), -1);
    /// ```
    #[inline]
    pub fn sub(&self, n: u64) {
        self.add(n.wrapping_neg());
    }

    /// Adds one.
    ///
    /// ```
    /// let c = shardcount::Counter::new();
    /// c.inc();
    /// assert_eq!(c.sum(), 1);
    /// ```
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Subtracts one.
    ///
    /// ```
    /// let c = shardcount::Counter::from(1);
    /// c.dec();
    /// assert_eq!(c.sum(), 0);
    /// ```
    #[inline]
    pub fn dec(&self) {
        self.add(u64::MAX);
    }

    /// The sampled path: an ordinary add that also notes, or checks, the
    /// value it finds (see `thread_index`).
    #[cold]
    #[inline(never)]
    fn add_checked(&self, current: *mut Table, at: &AtomicU64, n: u64) {
        let before = self.epoch_before(current);
        // Acquire: if this reads a word a take swapped (Release), the take's
        // start is visible to `epoch_after` (see the module docs).
        let prev = at.fetch_add(n, Ordering::Acquire);
        let epoch = thread_index::Epoch {
            before,
            after: self.epoch_after(current),
        };
        let key = std::ptr::from_ref(self).addr();
        let seen = thread_index::checked(key, std::ptr::from_ref(at).addr(), prev, n, epoch);
        // On the base, interference grows the first table at once (there is
        // nowhere to move to). On a shard the thread moves at once, and only
        // interference that persists doubles the table.
        if seen == Seen::Interference && (!is_table(current) || thread_index::collided(key)) {
            self.grow(current);
        }
    }

    /// The take epoch of the words `current` covers, read before a checked
    /// add: `None` while a take is in progress.
    fn epoch_before(&self, current: *mut Table) -> Option<u64> {
        if is_table(current) {
            // SAFETY: as in `add`: a published table, alive until `drop`.
            let takes = &unsafe { &*current }.takes;
            // Acquire (both): a finished count we see makes its take's start
            // visible to the next load, so equal counts mean no take is
            // half done among those we see.
            let finished = takes.finished.load(Ordering::Acquire);
            let started = takes.started.load(Ordering::Acquire);
            (started == finished).then_some(started)
        } else {
            // `current` was loaded with Acquire just before this add.
            let (started, finished) = tag_epoch(current.addr());
            (started == finished).then_some(current.addr() as u64)
        }
    }

    /// The take epoch of the same words, read after the (Acquire) add.
    fn epoch_after(&self, current: *mut Table) -> u64 {
        if is_table(current) {
            // SAFETY: as in `add`: a published table, alive until `drop`.
            let takes = &unsafe { &*current }.takes;
            // Relaxed: the Acquire add before it provides the ordering.
            takes.started.load(Ordering::Relaxed)
        } else {
            // Relaxed: as above. A table published meanwhile also differs
            // from the noted tag: no verdict, which is right, as the base
            // is no longer written.
            self.table.load(Ordering::Relaxed).addr() as u64
        }
    }

    /// Counts a take as started in the epoch of the newest table, or of the
    /// tag if there is none; returns which.
    fn begin_take(&self) -> *mut Table {
        // Acquire: pairs with the publish in `grow` before we read a table.
        let mut t = self.table.load(Ordering::Acquire);
        loop {
            if is_table(t) {
                // SAFETY: as in `add`: a published table, alive until `drop`.
                let takes = &unsafe { &*t }.takes;
                // Relaxed: the Release swaps that follow publish it.
                takes.started.fetch_add(1, Ordering::Relaxed);
                return t;
            }
            let bumped = t.map_addr(|a| tag_bump(a, 0));
            // Relaxed on success: the Release swaps that follow publish it.
            // Acquire on failure: the value may be a new table we then use.
            match self
                .table
                .compare_exchange_weak(t, bumped, Ordering::Relaxed, Ordering::Acquire)
            {
                Ok(_) => return bumped,
                Err(now) => t = now,
            }
        }
    }

    /// Counts the take begun on `started_in` as finished.
    fn end_take(&self, started_in: *mut Table) {
        if is_table(started_in) {
            // SAFETY: as in `add`: a published table, alive until `drop`.
            let takes = &unsafe { &*started_in }.takes;
            // Release: a note that sees it also sees the swaps before it.
            takes.finished.fetch_add(1, Ordering::Release);
            return;
        }
        // Relaxed: only the tag's bits are used; a table ends the loop.
        let mut t = self.table.load(Ordering::Relaxed);
        // A table published meanwhile retires the tag: nobody reads its
        // epoch any more.
        while !is_table(t) {
            // Release: as above. Relaxed on failure: we only retry.
            match self.table.compare_exchange_weak(
                t,
                t.map_addr(|a| tag_bump(a, 1)),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(now) => t = now,
            }
        }
    }

    /// Replaces `current` (a tag or the newest table) by a table twice as
    /// large, unless the cap is reached. Returns the newest table, or the tag
    /// when the cap forbids any table.
    #[cold]
    #[inline(never)]
    fn grow(&self, current: *mut Table) -> *mut Table {
        let (max_log2, len) = if is_table(current) {
            // SAFETY: as in `add`: a published table, alive until `drop`.
            let t = unsafe { &*current };
            (t.max_log2, t.shards.len())
        } else {
            (tag_max_log2(current.addr()), 0)
        };
        let max = 1usize << max_log2;
        let new_len = if len == 0 { max.min(2) } else { len * 2 };
        if max <= 1 || new_len > max {
            return current;
        }
        let new = Box::into_raw(Box::new(Table {
            shards: (0..new_len)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            older: current,
            max_log2,
            takes: CachePadded::new(Takes {
                started: AtomicU64::new(0),
                finished: AtomicU64::new(0),
            }),
        }));
        // AcqRel on success: Release publishes the zeroed shards to the
        // Acquire loads in `add`/`sum`. Acquire on failure: we go on to use
        // the winner's table, so we need its initialisation too.
        match self
            .table
            .compare_exchange(current, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => new,
            Err(winner) => {
                // SAFETY: `new` came from Box::into_raw above and was never
                // shared; dropping a Table does not free its `older`.
                drop(unsafe { Box::from_raw(new) });
                winner
            }
        }
    }

    /// The current total, modulo 2<sup>64</sup>.
    ///
    /// Exact when no update runs concurrently; includes every update that
    /// happened-before the call. Not an atomic snapshot under concurrent
    /// updates (see [the type docs](Counter#consistency-of-reads)). For
    /// add-only use, successive calls by one thread never decrease.
    ///
    /// Cost: one load per shard, up to about twice the shard cap.
    ///
    /// ```
    /// let c = shardcount::Counter::new();
    /// c.add(2);
    /// c.add(3);
    /// assert_eq!(c.sum(), 5);
    /// ```
    #[must_use]
    #[inline]
    pub fn sum(&self) -> u64 {
        // Relaxed: a count read publishes nothing; coherence alone makes it
        // include every update that happened-before this call.
        let base = self.base.load(Ordering::Relaxed);
        // Acquire: pairs with the publish in `grow` before we read a table.
        let t = self.table.load(Ordering::Acquire);
        if is_table(t) {
            base.wrapping_add(self.sum_shards(t))
        } else {
            base
        }
    }

    #[cold]
    #[inline(never)]
    fn sum_shards(&self, newest: *mut Table) -> u64 {
        let mut total = 0u64;
        // Relaxed: as in `sum`, coherence is all a count read needs.
        Self::for_each_shard_from(newest, |s| {
            total = total.wrapping_add(s.load(Ordering::Relaxed))
        });
        total
    }

    /// The current total as a signed value: the same bits as
    /// [`sum`](Self::sum), for counters that go up and down around zero.
    ///
    /// ```
    /// let c = shardcount::Counter::new();
    /// c.sub(3);
    /// assert_eq!(c.sum_i64(), -3);
    /// ```
    #[must_use]
    pub fn sum_i64(&self) -> i64 {
        self.sum() as i64
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
        let epoch = self.begin_take();
        // Release: a checked add that reads what a swap left sees this
        // take's start (module docs). The counts themselves need only the
        // RMW: each swap takes exactly the updates before it in that word's
        // modification order.
        let mut total = self.base.swap(0, Ordering::Release);
        self.for_each_shard(|s| total = total.wrapping_add(s.swap(0, Ordering::Release)));
        self.end_take(epoch);
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
    /// atomic. A diagnostic; it only grows.
    ///
    /// ```
    /// let c = shardcount::Counter::new();
    /// assert_eq!(c.shards(), 0);
    /// ```
    #[must_use]
    pub fn shards(&self) -> usize {
        // Acquire: pairs with the publish in `grow` before we read the table.
        let t = self.table.load(Ordering::Acquire);
        if is_table(t) {
            // SAFETY: as in `add`: a published table, alive until `drop`.
            unsafe { &*t }.shards.len()
        } else {
            0
        }
    }

    /// The most shards this counter will grow to (a power of two).
    ///
    /// ```
    /// let c = shardcount::Counter::with_max_shards(8);
    /// assert_eq!(c.max_shards(), 8);
    /// ```
    #[must_use]
    pub fn max_shards(&self) -> usize {
        // Acquire: pairs with the publish in `grow` before we read the table.
        let t = self.table.load(Ordering::Acquire);
        if is_table(t) {
            // SAFETY: as in `add`: a published table, alive until `drop`.
            1 << unsafe { &*t }.max_log2
        } else {
            1 << tag_max_log2(t.addr())
        }
    }

    /// Forces one growth step, as a repeated collision would. For loom
    /// models, which must race an add against a growth deterministically,
    /// and miri tests, which must reach the table code.
    #[cfg(any(loom, miri))]
    #[doc(hidden)]
    pub fn grow_for_test(&self) {
        // Acquire: pairs with the publish in `grow` before we read the table.
        self.grow(self.table.load(Ordering::Acquire));
    }

    fn for_each_shard(&self, f: impl FnMut(&AtomicU64)) {
        // Acquire: pairs with the publish in `grow` before we read the table.
        Self::for_each_shard_from(self.table.load(Ordering::Acquire), f);
    }

    /// Visits every shard of `t` and of the older tables it links to.
    fn for_each_shard_from(mut t: *mut Table, mut f: impl FnMut(&AtomicU64)) {
        while is_table(t) {
            // SAFETY: as in `add`: a published table, alive until `drop`.
            let table = unsafe { &*t };
            table.shards.iter().for_each(|s| f(s));
            t = table.older;
        }
    }
}

/// The cap (as a power of two) that a tag carries.
fn tag_max_log2(tag: usize) -> u32 {
    if tag & CAP_MASK == 0 {
        crate::sync::default_max_shards()
            .min(MAX_SHARDS)
            .trailing_zeros()
    } else {
        ((tag & CAP_MASK) >> 1) as u32 - 1
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        // A note this thread left on our words must not be resolved against
        // a counter that later takes our place in memory.
        thread_index::forget(std::ptr::from_ref(self).addr());
        // Relaxed: `&mut self` means every other access already
        // happened-before this one.
        let mut t = self.table.load(Ordering::Relaxed);
        while is_table(t) {
            // SAFETY: every table in the chain came from Box::into_raw in
            // `grow`, is owned by this counter alone, and is freed once here.
            let table = unsafe { Box::from_raw(t) };
            t = table.older;
        }
    }
}

impl Default for Counter {
    /// Same as [`Counter::new`].
    ///
    /// ```
    /// let c = shardcount::Counter::default();
    /// assert_eq!(c.sum(), 0);
    /// ```
    fn default() -> Self {
        Counter::new()
    }
}

impl From<u64> for Counter {
    /// A counter starting at `n`.
    ///
    /// ```
    /// let c = shardcount::Counter::from(42);
    /// assert_eq!(c.sum(), 42);
    /// ```
    fn from(n: u64) -> Self {
        let c = Counter::new();
        // Relaxed: not yet shared with any other thread.
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
