//! `RoughCounter` itself: the API, and the add path over `thread::slots`
//! (the protocol is in the `rough` module docs and in `slot.rs`).

use super::slot::{self, Core, Slot};
use crate::primitive::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use crate::primitive::sync::Arc;
use crate::thread;
use std::fmt;
use std::ptr;
use std::time::Duration;

/// A `u64` counter whose adds cost about a thread-local add: each thread
/// counts in its own slot, and the slots are folded into one global tally now
/// and then. [`approx`](Self::approx) reads the tally (two loads, lags a
/// little); [`sum`](Self::sum) reads every slot (exact).
///
/// Use it for very hot counters that are read rarely or roughly, such as
/// metrics scraped every few seconds. For exact cheap reads, use
/// [`Counter`](crate::Counter).
///
/// Arithmetic is modulo 2<sup>64</sup>, as with `AtomicU64::fetch_add`.
///
/// # When a thread's counts reach the tally
///
/// A thread's unfolded delta is folded into the tally when:
///
/// * **batch:** its magnitude reaches `batch` counts
///   ([`with_batch`](Self::with_batch), default
///   [`DEFAULT_BATCH`](Self::DEFAULT_BATCH));
/// * **interval:** at a check, `interval` has passed since the slot's last
///   timed fold ([`with_interval`](Self::with_interval), default
///   [`DEFAULT_INTERVAL`](Self::DEFAULT_INTERVAL)). The clock is not read on
///   every add: a thread checks when its count has moved by its *span*
///   since its last check (or half of `batch`, if smaller). The span starts
///   at 512 counts, doubles while the thread's checks come less than a
///   quarter of `interval` apart, up to 32,768, and halves while they come
///   more than an `interval` apart, down to 512 again. So a thread adding
///   steadily at least 512 counts per interval checks one to four times
///   per interval (its timed folds come one to two intervals apart), and a
///   fast one pays for a check once per tens of thousands of adds; a
///   slower one checks every 512 counts (1,000 adds a second and the
///   default interval: a fold every half second, not every 100 ms), so
///   run a [`Folder`](crate::Folder) where that lag matters. On Linux the clock is
///   `CLOCK_MONOTONIC_COARSE`: one scheduler tick of resolution (1 to
///   10 ms). **A thread that adds rarely, or stops adding, is not folded
///   by the interval rule**; its counts reach the tally when it exits, calls
///   [`flush`](Self::flush), someone calls [`flush_all`](Self::flush_all),
///   or a background [`Folder`](crate::Folder) runs;
/// * **thread exit:** a thread-local destructor folds every slot of the
///   thread and returns the slots for reuse.
///
/// **Scoped threads.** `JoinHandle::join` waits for a thread's thread-local
/// destructors (and so its exit fold); `std::thread::scope` does not: it
/// returns once the closures have returned, possibly before. After a scope,
/// [`sum`](Self::sum) is exact. [`approx`](Self::approx) is exact after a
/// scope if each scoped thread called [`flush`](Self::flush) before it
/// returned, or once [`flush_all`](Self::flush_all) has been called after
/// the scope (it waits for exit folds already under way).
///
/// ```
/// use shardcount::RoughCounter;
/// static C: RoughCounter = RoughCounter::new();
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| (0..1000).for_each(|_| C.inc()));
///     }
/// });
/// assert_eq!(C.sum(), 4000); // exact
/// C.flush_all(); // approx() could lag here without it
/// assert_eq!(C.approx(), 4000);
/// ```
///
/// # Consistency of reads
///
/// * [`sum`](Self::sum) is **exact**: it adds up every slot, never the tally,
///   so a concurrent fold cannot make it count anything twice. It includes
///   every add that happened-before the call; for add-only use, successive
///   calls by one thread never decrease. Like `Counter::sum` it is not an
///   atomic snapshot while others add. Cost: one load per slot; slots
///   follow the peak number of threads alive at once in the process
///   (thread indexes are process-wide, dense and reused).
/// * [`approx`](Self::approx) is two loads: the tally, and the counter's
///   word for adds made inside its own allocations (a global allocator
///   that counts with it). For add-only use it
///   never exceeds a `sum` that the same thread calls after it. At an
///   instant when no thread is inside an add to the counter and no fold of
///   it is in progress (a batch or interval fold, `flush`, `flush_all`, a
///   [`Folder`](crate::Folder) pass), it differs from `sum` by at most
///   **live slots × (`batch` − 1)** counts, up or down: each live slot's
///   unfolded delta is below `batch` in magnitude, and an exited thread's is
///   0. An idle thread's delta stays unfolded, within that bound, until
///   something folds it (see above). It is exact after every thread that
///   added has exited and been joined with `JoinHandle::join`, or after a
///   [`flush_all`](Self::flush_all) while no thread adds (after a
///   `thread::scope`, for instance), or once each thread that added has
///   called [`flush`](Self::flush) after its last add.
///
/// It has no `take` or `reset`: each thread writes its slot with a plain
/// store, so no swap from another thread can take a count losslessly.
///
/// # Signal handlers and `fork`
///
/// Adds are not async-signal-safe. On a thread that adds to
/// `RoughCounter`s, a signal handler that adds to any `RoughCounter` may
/// lose its add or an interrupted one, or move a count from one counter to
/// another: the add's slower paths (a due check, the thread's first add
/// to a counter) write the slot with a load and a later store, and the
/// thread's cache of its last counter's word with two stores. For counts
/// made in signal handlers use an `AtomicU64` (no counter of this crate's
/// is async-signal-safe: [`Counter`](crate::Counter)'s docs say why). In the
/// child of a `fork` from a multithreaded process, [`flush_all`](Self::flush_all)
/// may wait forever for a fold another thread had begun (call it before
/// forking, or only `sum` in the child).
///
/// # Memory and lifetime
///
/// Nothing is allocated until first use. Then the counter owns a shared
/// block with the tally and 128-byte slots by thread index, in buckets of
/// 1, 1, 2, 4, ... slots: a thread's first add allocates its index's whole
/// bucket, so a thread of index `i` adds about `128 × i` bytes at most to a
/// counter it is the first of its bucket to use (about 130 KB at index
/// 1,100; one 128-byte slot at index 1). Thread indexes are dense and
/// reused once a thread exits, so memory follows the peak number of
/// threads alive at once in the process, not how many came and went. Each
/// thread's exit registry holds a reference to the block, so dropping the
/// counter while threads still hold slots is safe: the block is freed
/// when the last of them exits or notices the drop.
///
/// A slot's hot word lives apart from it, in its thread's *arena*: one
/// 8-byte word per counter, at the counter's *position* (a number it takes
/// at first use and gives back when its block is freed; positions are dense
/// and reused, so they follow the peak number of `RoughCounter`s alive at
/// once). An arena grows in buckets of 1, 1, 2, 4, ... words as its thread
/// uses counters at higher positions (8 KB for a thread using the 1,000th
/// counter alive), belongs to a thread index and goes with it to the next
/// thread, and is never freed.
///
/// # Example
///
/// ```
/// use shardcount::RoughCounter;
///
/// static HITS: RoughCounter = RoughCounter::new();
///
/// let workers: Vec<_> = (0..4)
///     .map(|_| std::thread::spawn(|| (0..10_000).for_each(|_| HITS.inc())))
///     .collect();
/// assert!(HITS.approx() <= HITS.sum());
/// for w in workers {
///     w.join().unwrap(); // runs the thread's exit fold
/// }
/// assert_eq!(HITS.sum(), 40_000);
/// assert_eq!(HITS.approx(), 40_000);
/// ```
pub struct RoughCounter {
    /// Null until first use, then an `Arc<Core>` from `Arc::into_raw`.
    shared: AtomicPtr<Core>,
    /// The shared block's position in the threads' arenas
    /// (`thread::arena`, packed), where each thread's hot word for this
    /// counter is: 0 until stored, after `shared`, by the thread that
    /// installed it. std's atomic even under loom: an adder uses it only
    /// to index its own arena, whose words reach it through the index
    /// pool's mutex (which the models do see), so a loom load here would
    /// only add a step to every add.
    pos: std::sync::atomic::AtomicU64,
    /// Adds made inside one of this thread's own slow paths (from a global
    /// allocator that counts with this counter: the path allocated), which
    /// must not allocate again (`thread::reentry`). Part of both reads.
    /// std's atomic even under loom: the models never count inside an
    /// allocator, so it stays 0 there and adds no interleavings.
    reentered: std::sync::atomic::AtomicU64,
    batch: u64,
    /// Nanoseconds; `u64::MAX` means never.
    interval: u64,
}

impl RoughCounter {
    /// The default `batch`: a thread folds once its unfolded delta reaches
    /// this many counts.
    ///
    /// Large, because a fold writes the one line every thread folds into:
    /// at 1,024, two threads adding as fast as they can spent a third of
    /// their time on it (`docs/benchmarks.md`). A thread that adds steadily
    /// is folded by the interval rule long before; the batch bounds what an
    /// idle thread leaves unfolded, and what
    /// [`approx`](Self::approx) can miss.
    ///
    /// ```
    /// assert_eq!(shardcount::RoughCounter::DEFAULT_BATCH, 65_536);
    /// ```
    pub const DEFAULT_BATCH: u64 = 65_536;

    /// The default `interval`: 100 ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(shardcount::RoughCounter::DEFAULT_INTERVAL, Duration::from_millis(100));
    /// ```
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

    crate::primitive::const_fn! {
        /// A counter at zero with the default batch and interval.
        ///
        /// `const`, so it can initialise a `static`; it allocates nothing until first used.
        ///
        /// ```
        /// use shardcount::RoughCounter;
        /// static HITS: RoughCounter = RoughCounter::new();
        /// HITS.inc();
        /// assert_eq!(HITS.sum(), 1);
        /// ```
        #[must_use]
        pub const fn new() -> Self {
            RoughCounter {
                shared: AtomicPtr::new(ptr::null_mut()),
                pos: std::sync::atomic::AtomicU64::new(0),
                reentered: std::sync::atomic::AtomicU64::new(0),
                batch: Self::DEFAULT_BATCH,
                interval: Self::DEFAULT_INTERVAL.as_nanos() as u64,
            }
        }
    }

    crate::primitive::const_fn! {
        /// Sets `batch`: a thread folds into the tally once its unfolded
        /// delta reaches `batch` counts (in either direction). `1` folds on
        /// every add (then every add costs a locked add on the tally).
        ///
        /// Use it on a fresh counter (it is a builder); a counter already
        /// used keeps the threads' current windows until their next check.
        ///
        /// # Panics
        ///
        /// If `batch` is 0 (in a `const` context, a compile error).
        ///
        /// ```
        /// use shardcount::RoughCounter;
        /// static HITS: RoughCounter = RoughCounter::new().with_batch(2);
        /// HITS.inc();
        /// HITS.inc(); // the unfolded delta reaches 2: folded
        /// assert_eq!(HITS.approx(), 2);
        /// ```
        #[must_use]
        pub const fn with_batch(self, batch: u64) -> Self {
            assert!(batch > 0, "shardcount: RoughCounter::with_batch(0): batch must be at least 1");
            let mut s = self;
            s.batch = batch;
            s
        }
    }

    crate::primitive::const_fn! {
        /// Sets `interval`: at a check (see [the type docs](RoughCounter)),
        /// a thread folds if this long has passed since its slot's last
        /// timed fold, so timed folds come at most once per interval.
        /// `Duration::ZERO` is the limit of that rule: a fold at every
        /// check (no thread sleeps here, so nothing is raised to 1 ms).
        /// `Duration::MAX` never reads the clock. A background thread's
        /// interval follows another rule: below 1 ms, zero included, it
        /// runs every 1 ms (see [`Folder::new`](crate::Folder::new)).
        ///
        /// ```
        /// use shardcount::RoughCounter;
        /// use std::time::Duration;
        /// static HITS: RoughCounter =
        ///     RoughCounter::new().with_interval(Duration::ZERO);
        /// for _ in 0..512 {
        ///     HITS.inc(); // the 512th add checks, and folds
        /// }
        /// assert_eq!(HITS.approx(), 512);
        /// ```
        #[must_use]
        pub const fn with_interval(self, interval: Duration) -> Self {
            let nanos = interval.as_nanos();
            let mut s = self;
            s.interval = if nanos > u64::MAX as u128 { u64::MAX } else { nanos as u64 };
            s
        }
    }

    /// The `batch` this counter folds at.
    ///
    /// ```
    /// let c = shardcount::RoughCounter::new().with_batch(10);
    /// assert_eq!(c.batch(), 10);
    /// ```
    #[must_use]
    pub fn batch(&self) -> u64 {
        self.batch
    }

    /// The `interval` of the interval rule.
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = shardcount::RoughCounter::new().with_interval(Duration::from_secs(1));
    /// assert_eq!(c.interval(), Duration::from_secs(1));
    /// ```
    #[must_use]
    pub fn interval(&self) -> Duration {
        if self.interval == u64::MAX {
            // "Never": anything from 2^64 - 1 ns (about 584 years) up.
            Duration::MAX
        } else {
            Duration::from_nanos(self.interval)
        }
    }

    /// Adds `n`, wrapping at 2<sup>64</sup>.
    ///
    /// Costs one add to the thread's word for this counter, with no locked
    /// instruction and no clock unless a check is due (every 512 to 32,768
    /// counts while only adding: see the type docs): the add's carry says
    /// when. The word of the counter the thread last checked (its busiest
    /// one, as a rule) is cached: a compare and a load. Any other is found
    /// in line by the counter's position in the thread's arena (see the
    /// type docs), with no search and no store but the add, however many
    /// counters the thread uses: a thread adding round-robin to 1,024
    /// counters reads each counter's first line and 8 bytes of its own
    /// arena. A `sub`, or an add larger than what is left before the next
    /// check, takes an out-of-line call (still no locked instruction
    /// unless a check is due); so does the thread's first add.
    ///
    /// ```
    /// let c = shardcount::RoughCounter::new();
    /// c.add(5);
    /// assert_eq!(c.sum(), 5);
    /// ```
    #[inline]
    pub fn add(&self, n: u64) {
        // Acquire: pairs with the Release store in `install`. (The
        // thread's word there is free or its own slot's: each word is
        // freed by its index's holder, and the index pool's mutex hands it
        // to the next one; the position pool's mutex orders a counter's
        // install after the last counter at its position was freed.)
        let pos = self.pos.load(Ordering::Acquire);
        // The cached word first; a miss takes the word from the thread's
        // arena in line (no call, no store but the add): a thread adding
        // round-robin to many counters misses every time. An add on each
        // path, so the hit takes no jump to a shared one.
        let cached = thread::arena::cached(pos);
        if let Some(word) = cached.filter(|_| crate::shard::likely(cached.is_some())) {
            // SAFETY: a cached word is a word of the thread's arena, never
            // freed (`thread::arena::cached`).
            let word = unsafe { &*word };
            slot::add_word(word, n, || self.due(word, n));
        } else if let Some(word) = thread::arena::find(pos) {
            slot::add_word(word, n, || self.due(word, n));
        } else {
            self.add_table::<true>(n);
        }
    }

    /// The hot path's add carried: the word was free (the thread's first
    /// add here: undo it, then add through the table), or the owner's
    /// window may be over.
    #[cold]
    #[inline(never)]
    fn due(&self, word: &'static AtomicU64, n: u64) {
        // Acquire: as in `shared` (a position is stored after its block).
        let p = self.shared.load(Ordering::Acquire);
        // SAFETY: non-null means installed from Arc::into_raw; our own
        // reference is released only in `drop`, which takes `&mut self`.
        if let Some(shared) = unsafe { p.as_ref() } {
            let (bucket, offset) = thread::slot_position();
            if let Some(slot) = shared.slots.at(bucket, offset) {
                if Core::owns(slot) && slot.is_at(word) {
                    if slot.window_passed() {
                        self.check(shared, slot);
                    }
                    // Relaxed: our own store, in `install` or seen by `add`.
                    thread::arena::remember(self.pos.load(Ordering::Relaxed), word);
                    return;
                }
            }
        }
        // No slot of this thread is at the word, so it was free: only this
        // thread writes it, and it carried.
        thread::arena::free(word);
        self.add_table::<false>(n);
    }

    /// An add through the table: the thread's slot, found in O(1) by its
    /// index. For a thread whose word here has no bucket yet, a counter
    /// beyond the arenas' reach, or the first add of a thread or a
    /// counter.
    ///
    /// Out of line, and generic only so that it is compiled in the
    /// caller's crate, where its thread-local reads are plain `fs:` loads
    /// (a copy compiled in this crate, in a user's build without LTO,
    /// calls `__tls_get_addr`).
    #[inline(never)]
    fn add_table<const IN_CALLER: bool>(&self, n: u64) {
        // Acquire: pairs with the AcqRel exchange in `install`, so the
        // block is initialised.
        let p = self.shared.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: non-null means installed from Arc::into_raw; our own
            // reference is released only in `drop`, which takes `&mut self`.
            let shared = unsafe { &*p };
            let (bucket, offset) = thread::slot_position();
            if let Some(slot) = shared.slots.at(bucket, offset) {
                if !slot.try_bump(n) {
                    self.add_due(shared, slot, n);
                }
                return;
            }
        }
        self.add_slow(n);
    }

    /// A due add through the table: the thread's first add to its slot
    /// (taken over here) or a check.
    #[cold]
    #[inline(never)]
    fn add_due(&self, shared: &Core, slot: &Slot, n: u64) {
        // Taking the slot over allocates (the thread's exit registry).
        let Some(_inside) = thread::reentry::enter() else {
            return self.add_reentered(n);
        };
        self.add_checked(shared, slot, n);
    }

    /// An add to the thread's slot that is due for a check: the slot's
    /// first add by this thread (take it over first, so its window starts
    /// before this add), or a check by count.
    #[cold]
    #[inline(never)]
    fn add_checked(&self, shared: &Core, slot: &Slot, n: u64) {
        if !Core::owns(slot) {
            if !self.take_over(slot) {
                // The thread is exiting and can no longer promise an exit
                // fold: count this add where it cannot be lost.
                shared.add_orphan(n);
                return;
            }
            // Its hot word moves to the thread's arena (a free word), so
            // later adds go there without the table; this also closes the
            // sequence lock a previous holder left open.
            let pos = shared.position.get();
            let word = thread::arena::word_or_alloc(pos);
            slot.attach(word);
            if let Some(word) = word {
                thread::arena::remember(pos, word);
            }
            // The first check: a new generation (for folds still claiming
            // from the previous owner's time) and a window.
            shared.check(slot, self.batch, None);
        }
        if slot.bump(n) {
            self.check(shared, slot);
        }
    }

    /// The owner's slow check: fold by batch or interval, then rearm.
    fn check(&self, shared: &Core, slot: &Slot) {
        shared.check(slot, self.batch, Some(self.interval));
    }

    /// Takes `slot` (at the calling thread's index) over. Needs our own
    /// strong reference to hand to the thread's exit registry.
    #[cold]
    fn take_over(&self, slot: &Slot) -> bool {
        let p = self.shared_or_init();
        // SAFETY: our own reference keeps `p` alive; we add one for the
        // registry.
        let shared = unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        };
        Core::take_over(shared, slot, thread::index())
    }

    /// The first add of this thread (no index yet), the first add to this
    /// counter, or an add from a thread-local destructor at thread exit.
    #[cold]
    #[inline(never)]
    fn add_slow(&self, n: u64) {
        // The block, the thread's index and its slot's bucket allocate.
        let Some(_inside) = thread::reentry::enter() else {
            return self.add_reentered(n);
        };
        let p = self.shared_or_init();
        // SAFETY: our own reference keeps `p` alive while we are borrowed.
        let shared = unsafe { &*p };
        let slot = thread::slots::index_or_take().and_then(|i| shared.slots.get_or_alloc(i));
        match slot {
            Some(slot) => {
                if !slot.try_bump(n) {
                    self.add_checked(shared, slot, n);
                }
            }
            // The thread's exit registry is gone (we are in a thread-local
            // destructor at thread exit), or its index is beyond the slot
            // table: count it where it cannot be lost.
            None => shared.add_orphan(n),
        }
    }

    /// An add from inside one of this thread's own slow paths: one locked
    /// add to a word of the counter itself, which needs no allocation.
    #[cold]
    fn add_reentered(&self, n: u64) {
        // Relaxed: a count; reads load it with the rest (see `sum`).
        self.reentered.fetch_add(n, Ordering::Relaxed);
    }

    /// The shared block, if the counter has been used.
    #[inline]
    fn shared(&self) -> Option<&Core> {
        // Acquire: pairs with the AcqRel exchange in `install`, so the
        // block is initialised before we read it.
        let p = self.shared.load(Ordering::Acquire);
        // SAFETY: non-null means installed from Arc::into_raw; our own
        // reference is released only in `drop`, which takes `&mut self`.
        unsafe { p.as_ref() }
    }

    #[cold]
    fn shared_or_init(&self) -> *const Core {
        // Acquire: pairs with the AcqRel exchange in `install`.
        let p = self.shared.load(Ordering::Acquire);
        if !p.is_null() {
            return p;
        }
        self.install(Core::new(0))
    }

    #[cold]
    fn install(&self, shared: Core) -> *const Core {
        let new = Arc::into_raw(Arc::new(shared)).cast_mut();
        // AcqRel on success: Release publishes the block to Acquire loads.
        // Acquire on failure: we go on to use the winner's block.
        match self.shared.compare_exchange(
            ptr::null_mut(),
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                // SAFETY: just installed; our own reference keeps it alive.
                let pos = unsafe { (*new).position.get() };
                // Release: pairs with the hot path's Acquire load (see
                // `add`).
                self.pos.store(pos, Ordering::Release);
                new
            }
            Err(winner) => {
                // SAFETY: `new` came from Arc::into_raw above, never shared.
                drop(unsafe { Arc::from_raw(new) });
                winner
            }
        }
    }

    /// The exact total, modulo 2<sup>64</sup>: every slot's count, folded or
    /// not.
    ///
    /// Includes every add that happened-before the call, and never counts a
    /// delta twice, even while it is being folded. For add-only use,
    /// successive calls by one thread never decrease. Not an atomic snapshot
    /// while others add. Cost: one load per slot (about the peak number of
    /// threads alive at once in the process), plus one.
    ///
    /// ```
    /// let c = shardcount::RoughCounter::new();
    /// c.add(2);
    /// c.add(3);
    /// assert_eq!(c.sum(), 5);
    /// assert_eq!(c.approx(), 0); // not folded yet
    /// ```
    #[must_use]
    pub fn sum(&self) -> u64 {
        // Relaxed: an add that happened-before the call is seen by
        // coherence; the word is no part of any fold.
        let reentered = self.reentered.load(Ordering::Relaxed);
        self.shared().map_or(0, Core::sum).wrapping_add(reentered)
    }

    /// The folded total: a load of the tally, and of the counter's word for
    /// adds made inside its own allocations.
    ///
    /// Approximate: for add-only use it never exceeds a [`sum`](Self::sum)
    /// the same thread calls after it. At an instant when no thread is inside
    /// an add to the counter and no fold of it is in progress, it is within
    /// [`live_slots`](Self::live_slots) × (`batch` − 1) counts of `sum`,
    /// below it for add-only use, either side with subs. Idle threads' deltas
    /// stay unfolded within that bound until something folds them (see [the
    /// type docs](RoughCounter#when-a-threads-counts-reach-the-tally)). Not
    /// monotonic under a mix of adds and subs. Exact once every thread that
    /// added has exited and been joined, after a [`flush_all`](Self::flush_all)
    /// while no thread adds, or once each thread that added has called
    /// [`flush`](Self::flush) after its last add (the way to make it exact
    /// after a `std::thread::scope`, see [the type
    /// docs](RoughCounter#when-a-threads-counts-reach-the-tally)).
    ///
    /// ```
    /// let c = shardcount::RoughCounter::new().with_batch(100);
    /// c.add(250); // reaches the batch: folded
    /// c.add(5);
    /// assert_eq!(c.approx(), 250);
    /// c.flush();
    /// assert_eq!(c.approx(), 255);
    /// ```
    #[must_use]
    #[inline]
    pub fn approx(&self) -> u64 {
        // Acquire: pairs with the Release tally add in `Core::fold`, so a
        // later `sum` reads at least the totals this value came from.
        let tally = self.shared().map_or(0, |s| s.tally.load(Ordering::Acquire));
        // Relaxed: as in `sum`.
        tally.wrapping_add(self.reentered.load(Ordering::Relaxed))
    }

    /// Folds the calling thread's unfolded delta into the tally.
    ///
    /// After it, [`approx`](Self::approx), in any thread that
    /// happens-after the call (one that joined a `thread::scope` this thread
    /// ran in, say), includes every add this thread made before the call. If
    /// another thread's fold of this slot (a `Folder` pass, a `flush_all`)
    /// has claimed counts that are not in the tally yet, `flush` waits for it:
    /// a few instructions, unless that thread was descheduled.
    ///
    /// ```
    /// let c = shardcount::RoughCounter::new();
    /// c.add(7);
    /// c.flush();
    /// assert_eq!(c.approx(), 7);
    /// ```
    pub fn flush(&self) {
        let Some(shared) = self.shared() else { return };
        if let Some(slot) = shared.slots.get(thread::index()) {
            if Core::owns(slot) {
                shared.fold_and_wait(slot);
            }
        }
    }

    /// Folds every thread's unfolded delta into the tally. Safe while the
    /// owners keep adding: what they add meanwhile is folded now or later,
    /// never lost or counted twice.
    ///
    /// After it, [`approx`](Self::approx) includes every add that
    /// happened-before the call, provided no thread adds to the counter
    /// meanwhile: folds by other threads that are under way (a thread's exit
    /// fold after `std::thread::scope` has returned, a `Folder` pass) are
    /// waited for, a few instructions each. A slot whose owner keeps adding
    /// is folded but not waited for. Cost: one fold per slot.
    ///
    /// ```
    /// use shardcount::RoughCounter;
    /// static C: RoughCounter = RoughCounter::new();
    /// let (tx, rx) = std::sync::mpsc::channel::<()>();
    /// let (done_tx, done_rx) = std::sync::mpsc::channel();
    /// let t = std::thread::spawn(move || {
    ///     C.add(5);
    ///     done_tx.send(()).unwrap();
    ///     rx.recv().unwrap(); // stays alive, holding its slot
    /// });
    /// done_rx.recv().unwrap();
    /// assert_eq!(C.approx(), 0);
    /// C.flush_all();
    /// assert_eq!(C.approx(), 5);
    /// tx.send(()).unwrap();
    /// t.join().unwrap();
    /// ```
    pub fn flush_all(&self) {
        if let Some(shared) = self.shared() {
            shared.fold_all();
        }
    }

    /// How many slots threads have taken in this counter: one per thread
    /// index that used it, so at most the peak number of threads alive at
    /// once in the process (an add of 0, which changes nothing, may take
    /// none). A diagnostic; it never shrinks.
    ///
    /// ```
    /// let c = shardcount::RoughCounter::new();
    /// assert_eq!(c.slots(), 0);
    /// c.inc();
    /// assert_eq!(c.slots(), 1);
    /// ```
    #[must_use]
    pub fn slots(&self) -> usize {
        self.shared().map_or(0, Core::slots)
    }

    /// How many slots are owned by a thread right now: threads that have
    /// used the counter and not yet exited (or noticed it was dropped). The
    /// [`approx`](Self::approx) lag bound is in terms of this number.
    ///
    /// Once it reads 0, every exited thread's exit fold is visible to
    /// `approx`: a thread folds its slot before it gives the slot back.
    ///
    /// ```
    /// use shardcount::RoughCounter;
    /// static C: RoughCounter = RoughCounter::new();
    /// std::thread::spawn(|| C.add(3)).join().unwrap();
    /// assert_eq!(C.live_slots(), 0);
    /// assert_eq!(C.approx(), 3);
    /// C.inc(); // this thread now holds a slot
    /// assert_eq!(C.live_slots(), 1);
    /// ```
    #[must_use]
    pub fn live_slots(&self) -> usize {
        self.shared().map_or(0, Core::live_slots)
    }

    /// Adds `n` the way an add from a thread-local destructor does after the
    /// thread's slots are gone. For loom models, whose thread-local
    /// destructors run in a random order that loom cannot replay.
    #[cfg(all(test, shardcount_loom))]
    pub(crate) fn add_orphan(&self, n: u64) {
        // SAFETY: our own reference keeps the block alive while borrowed.
        unsafe { &*self.shared_or_init() }.add_orphan(n);
    }

    /// For the background folder: this counter's shared block, created if
    /// needed, as a strong reference.
    #[cfg(not(shardcount_loom))]
    pub(crate) fn core_ref(&self) -> CoreRef {
        let p = self.shared_or_init();
        // SAFETY: `p` is alive (we hold our reference); we add one for the
        // caller.
        CoreRef(unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        })
    }
}

/// An opaque strong reference to a counter's shared block, for the
/// background folder.
#[cfg(not(shardcount_loom))]
#[derive(Clone)]
pub(crate) struct CoreRef(Arc<Core>);

#[cfg(not(shardcount_loom))]
impl CoreRef {
    /// Folds every slot; returns `false` once the counter has been dropped.
    pub(crate) fn fold_all(&self) -> bool {
        // Folding a dropped counter once more is harmless.
        if self.0.dropped.load(Ordering::Relaxed) {
            return false;
        }
        self.0.fold_all();
        true
    }

    /// Whether the counter is still alive (not dropped).
    pub(crate) fn is_live(&self) -> bool {
        !self.0.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for RoughCounter {
    fn drop(&mut self) {
        // Relaxed: `&mut self`: every access through `self` happened-before.
        let p = self.shared.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: installed from Arc::into_raw; this is our reference.
            let shared = unsafe { Arc::from_raw(p.cast_const()) };
            shared.dropped.store(true, Ordering::Relaxed);
        }
    }
}

crate::surface::u64_counter_surface!(RoughCounter);

impl From<u64> for RoughCounter {
    /// A counter starting at `n` (already folded: `approx() == n`).
    ///
    /// ```
    /// let c = shardcount::RoughCounter::from(42);
    /// assert_eq!((c.sum(), c.approx()), (42, 42));
    /// ```
    fn from(n: u64) -> Self {
        let c = RoughCounter::new();
        c.install(Core::new(n));
        c
    }
}

impl fmt::Debug for RoughCounter {
    /// Shows [`sum`](RoughCounter::sum) and [`approx`](RoughCounter::approx).
    ///
    /// ```
    /// let c = shardcount::RoughCounter::from(3);
    /// c.inc();
    /// assert_eq!(format!("{c:?}"), "RoughCounter { sum: 4, approx: 3 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoughCounter")
            .field("sum", &self.sum())
            .field("approx", &self.approx())
            .finish()
    }
}
