//! `LocalCounter`: a `static` counter whose `add` is a thread-local add and
//! one sign test, declared with [`local_counter!`](crate::local_counter).
//!
//! # Protocol
//!
//! Each thread has, per counter, a `cell: AtomicI64` in a `const`
//! thread-local with no destructor (so an access is a bare TLS load or
//! store, with no state check), written only by its thread with `Relaxed`
//! loads and stores (plain moves). A registered thread's cell holds
//! `pending - batch`, `pending` being its counts not yet in the tally, so it
//! is negative until `pending` reaches `batch`. The add is `cell += n`, and
//! the sign of the result is the whole test: non-negative means "fold" (or
//! "first use", as a fresh cell is 0). The cold path:
//!
//! * first use: registers the thread (a second thread-local, with a
//!   destructor, folds the cell at thread exit; the registry, a mutex'd list
//!   of cell addresses, lets `sum` read live cells), then folds;
//! * fold: stores `-batch` into the cell, then adds `pending` to the `tally`
//!   with a `Release` RMW. A reader that sees the tally's new value
//!   (`Acquire`) also sees the reset cell, so `sum` never counts a fold
//!   twice (it can miss one in flight);
//! * thread exit: the guard, holding the registry lock, unregisters the
//!   cell (so `sum` never reads a cell whose memory is gone), folds it and
//!   leaves it at 0; one step for `sum`, which reads under the same lock,
//!   so a `sum` racing an exit fold (after `thread::scope`, which returns
//!   before its threads' exit folds) is exact;
//! * after exit (an add from another thread-local's destructor): the guard
//!   is gone, so the add goes straight to the tally with a locked add. No
//!   count is ever lost.
//! * `flush_all` (another thread, a pool's workers never exiting): it may
//!   not write a cell (the owner's plain store would race it), so each
//!   thread has, beside its cell, a `Moved` (a third `const` thread-local
//!   without a destructor, so no `&mut` to it ever exists while others
//!   read it): `moved`, the cell's counts already put in the tally since
//!   the owner's last fold, and `busy`, a spin lock over `moved` and the
//!   fold. Under the registry lock and each `busy`, `flush_all` adds
//!   `pending - moved` to the tally (`Release`) and stores `pending` in
//!   `moved`; a fold, under its own `busy`, adds `pending - moved`, resets
//!   the cell and `moved` to 0, all before its `Release` RMW; `sum` reads
//!   each cell and `moved` under `busy` and counts `pending - moved`; the
//!   exit fold subtracts `moved` too (under the registry lock, which
//!   `flush_all` holds). Between folds a cell only grows, so `pending >=
//!   moved`. Lock order: the registry, then a `busy`; a first-use fold
//!   registers without holding `busy`. The add path is unchanged.
//!
//! Orderings, by role:
//!
//! * a cell: `Relaxed` loads and stores. Its thread is its only writer,
//!   and every other reader (`sum`, `flush_all`) reads it under a lock
//!   that orders the read after the owner's last fold: its `busy`, or the
//!   registry lock for the store a first use makes before registering;
//! * `moved`: `Relaxed`, read and written only under `busy` or the
//!   registry lock;
//! * `busy`: a spin lock, taken with an `Acquire` exchange and left with a
//!   `Release` store;
//! * the tally: every add to it is a `Release` RMW, and `approx` and `sum`
//!   load it with `Acquire`, so a reader that sees a fold sees the cell
//!   reset and `moved` before it.
//!
//! Subtractions and adds of `2^63` or more take the cold path and go
//! straight to the tally, so a cell only ever counts up.

use crate::primitive::hint::spin_loop;
use crate::primitive::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use crate::primitive::sync::{lock, Mutex};
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

/// What a [`local_counter!`](crate::local_counter) declaration gives its
/// counter: its own thread-locals. Implemented by the macro; not for use
/// by hand.
#[doc(hidden)]
pub trait LocalKey: 'static {
    /// Runs `f` on the calling thread's cell.
    fn with_cell<R>(f: impl FnOnce(&AtomicI64) -> R) -> R;
    /// Runs `f` on the calling thread's guard; `None` once it is destroyed.
    fn with_guard<R>(f: impl FnOnce(&Guard) -> R) -> Option<R>;
    /// Runs `f` on the calling thread's record of what `flush_all` moved.
    fn with_moved<R>(f: impl FnOnce(&Moved) -> R) -> R;
    /// The counter this key belongs to.
    fn counter() -> &'static LocalCounter<Self>
    where
        Self: Sized;
}

/// A thread's registration with one `LocalCounter`: folds the thread's cell
/// when the thread exits. Not for use by hand.
#[doc(hidden)]
pub struct Guard {
    /// The exit action, set at registration: fold and unregister.
    on_exit: Cell<Option<fn()>>,
}

impl Guard {
    /// An unregistered guard, for the macro's thread-local.
    #[doc(hidden)]
    pub const fn new() -> Self {
        Guard {
            on_exit: Cell::new(None),
        }
    }
}

/// What `flush_all` has moved out of a thread's cell, and the lock over
/// it. Not for use by hand.
#[doc(hidden)]
pub struct Moved {
    /// Counts of the cell that `flush_all` has put in the tally since the
    /// owner's last fold. Only under `busy`.
    moved: AtomicU64,
    /// A spin lock over `moved` and the owner's fold: held by the owner's
    /// fold and, under the registry lock, by `flush_all` and `sum`.
    busy: AtomicBool,
}

impl Moved {
    crate::primitive::const_fn! {
        /// Nothing moved, for the macro's thread-local.
        #[doc(hidden)]
        pub const fn new() -> Self {
            Moved {
                moved: AtomicU64::new(0),
                busy: AtomicBool::new(false),
            }
        }
    }

    fn lock(&self) {
        #[cfg(not(shardcount_loom))]
        let mut spins = 0u32;
        // Acquire: pairs with `unlock`'s Release, so the holder sees the
        // previous holder's cell reset and `moved`.
        while self
            .busy
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            // The holder is a few instructions from done, unless it was
            // descheduled: then give it the core.
            spin_loop();
            #[cfg(not(shardcount_loom))]
            {
                spins += 1;
                if spins > 64 {
                    std::thread::yield_now();
                }
            }
        }
    }

    fn unlock(&self) {
        self.busy.store(false, Ordering::Release);
    }
}

impl Default for Moved {
    fn default() -> Self {
        Moved::new()
    }
}

impl fmt::Debug for Moved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Moved").finish_non_exhaustive()
    }
}

impl Default for Guard {
    fn default() -> Self {
        Guard::new()
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("registered", &self.on_exit.get().is_some())
            .finish()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(exit) = self.on_exit.take() {
            exit();
        }
    }
}

/// A registered thread's cell and its `Moved`, by address.
struct CellRef(*const AtomicI64, *const Moved);

// SAFETY: both addresses are only dereferenced under the registry lock,
// while their thread is registered (it unregisters, under the same lock,
// before its thread-locals are freed), and only for their atomics.
unsafe impl Send for CellRef {}

/// A `static` add-mostly counter at the thread-local limit: `add` is a
/// thread-local add and a sign test, with no locked instruction and no
/// thread-local destructor check. Declare one with
/// [`local_counter!`](crate::local_counter).
///
/// Like [`RoughCounter`](crate::RoughCounter), each thread counts on its
/// own and folds into a shared tally every `batch` counts and at thread
/// exit, and nothing is ever lost, not even adds from other thread-locals'
/// destructors. It trades `RoughCounter`'s generality for speed: it is only
/// a `static` (each declaration has its own thread-locals), and a `sub` is a
/// locked add on the tally.
///
/// It has no `take` or `reset`: each thread writes its cell with a plain
/// store, so no swap from another thread can take a count losslessly.
///
/// # Consistency of reads
///
/// * [`sum`](Self::sum) is **exact at quiescence**: the tally plus every
///   live thread's pending counts, read with every thread's fold held
///   back. While threads add it includes every add that happened-before
///   the call and may miss adds in flight; for add-only use it never
///   counts one twice, never exceeds the adds started, and one thread's
///   successive sums never decrease.
/// * [`approx`](Self::approx) is one load of the tally: below `sum` by less
///   than `batch` per thread that has added and not yet exited (for
///   add-only use), exact once every thread that added has exited and been
///   joined, after each has called [`flush`](Self::flush), or after a
///   [`flush_all`](Self::flush_all) once they stopped adding.
///
/// **Scoped threads.** A thread's exit fold runs in its thread-local
/// destructors; `JoinHandle::join` waits for them, `std::thread::scope`
/// does not (it returns once the closures have returned). After a scope,
/// `sum` is exact (an exit fold moves a cell's counts to the tally in one
/// step under the lock `sum` reads with); `approx` is exact after a scope
/// if each scoped thread called `flush` before it returned:
///
/// ```
/// shardcount::local_counter!(static HITS);
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| {
///             (0..1000).for_each(|_| HITS.inc());
///             HITS.flush(); // so approx() is exact once the scope returns
///         });
///     }
/// });
/// assert_eq!(HITS.sum(), 4000);
/// assert_eq!(HITS.approx(), 4000);
/// ```
///
/// # Signal handlers and `fork`
///
/// Do not add from a signal handler: a handler that interrupts a fold on
/// its own thread and folds too waits forever for the fold it
/// interrupted, and one that interrupts a plain add may be overwritten by
/// it. Use an `AtomicU64` there (no counter of this crate's is
/// async-signal-safe: [`Counter`](crate::Counter)'s docs say why). In the child of a `fork`
/// from a multithreaded process, `sum` and `flush_all` may wait forever
/// for a fold another thread had begun.
///
/// # Thread pools
///
/// A pool's workers never exit, so their exit folds never run, and a
/// worker that stops adding keeps up to `batch - 1` counts out of the tally:
/// `approx` stays short while `sum` is exact. Call
/// [`flush_all`](Self::flush_all) before reading `approx` (before each
/// scrape, say): it moves every live thread's pending counts from any
/// thread. Or have each worker flush its own cell, with rayon's
/// [`broadcast`](https://docs.rs/rayon/latest/rayon/fn.broadcast.html),
/// which runs a closure once on every thread of the pool:
///
/// ```
/// use rayon::prelude::*;
/// shardcount::local_counter!(static ROWS);
///
/// let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
/// pool.install(|| (0..10_000).into_par_iter().for_each(|_| ROWS.inc()));
/// assert_eq!(ROWS.sum(), 10_000); // exact: reads every live cell
/// pool.broadcast(|_| ROWS.flush()); // each worker folds its own cell
/// assert_eq!(ROWS.approx(), 10_000);
/// ```
///
/// Memory orderings: like every counter here, counting synchronises
/// nothing; do not publish data through it.
///
/// # Example
///
/// ```
/// shardcount::local_counter!(static REQUESTS);
///
/// let workers: Vec<_> = (0..4)
///     .map(|_| std::thread::spawn(|| (0..10_000).for_each(|_| REQUESTS.inc())))
///     .collect();
/// for w in workers {
///     w.join().unwrap(); // the exit fold has run
/// }
/// assert_eq!(REQUESTS.sum(), 40_000);
/// assert_eq!(REQUESTS.approx(), 40_000);
/// ```
pub struct LocalCounter<K: 'static> {
    tally: CachePadded<AtomicU64>,
    /// Cells of registered, live threads.
    registry: Mutex<Vec<CellRef>>,
    batch: u64,
    _key: PhantomData<fn() -> K>,
}

impl<K> LocalCounter<K> {
    /// The default `batch`: a thread folds into the tally every this many
    /// counts. Large, as `RoughCounter`'s: a fold writes the one line every
    /// thread folds into, and at 8,192 two threads adding as fast as they
    /// can ran at 0.92 of the thread-local limit, at 65,536 at 0.98
    /// (`docs/benchmarks.md`). A smaller batch keeps
    /// [`approx`](Self::approx) closer.
    ///
    /// ```
    /// assert_eq!(shardcount::LocalCounter::<()>::DEFAULT_BATCH, 65_536);
    /// ```
    pub const DEFAULT_BATCH: u64 = 65_536;
}

impl<K: LocalKey> LocalCounter<K> {
    crate::primitive::const_fn! {
        /// For [`local_counter!`](crate::local_counter); not for use by hand.
        ///
        /// # Panics
        ///
        /// If `batch` is 0 or above `i64::MAX` (a compile error in the
        /// macro's `static`).
        #[doc(hidden)]
        pub const fn __new(batch: u64) -> Self {
            assert!(
                batch >= 1 && batch <= i64::MAX as u64,
                "shardcount: local_counter! batch must be in 1..=i64::MAX"
            );
            LocalCounter {
                tally: CachePadded::new(AtomicU64::new(0)),
                registry: Mutex::new(Vec::new()),
                batch,
                _key: PhantomData,
            }
        }
    }

    /// Adds `n`, wrapping at 2<sup>64</sup>.
    ///
    /// A thread-local add and a sign test; every `batch` counts (and on the
    /// thread's first add) a fold into the tally.
    ///
    /// ```
    /// shardcount::local_counter!(static BYTES);
    /// BYTES.add(1500);
    /// assert_eq!(BYTES.sum(), 1500);
    /// ```
    #[inline(always)]
    pub fn add(&'static self, n: u64) {
        if n > i64::MAX as u64 {
            return self.add_to_tally(n);
        }
        K::with_cell(|cell| {
            let v = cell.load(Ordering::Relaxed).wrapping_add(n as i64);
            cell.store(v, Ordering::Relaxed);
            if v >= 0 {
                self.fold(cell, v);
            }
        });
    }

    /// Adds one.
    ///
    /// ```
    /// shardcount::local_counter!(static HITS);
    /// HITS.inc();
    /// assert_eq!(HITS.sum(), 1);
    /// ```
    #[inline(always)]
    pub fn inc(&'static self) {
        self.add(1);
    }

    /// Subtracts `n`, wrapping below zero: a locked add on the tally (cells
    /// only count up, which keeps `add` to one sign test).
    ///
    /// ```
    /// shardcount::local_counter!(static LEVEL);
    /// LEVEL.add(5);
    /// LEVEL.sub(2);
    /// assert_eq!(LEVEL.sum(), 3);
    /// ```
    pub fn sub(&'static self, n: u64) {
        self.add_to_tally(n.wrapping_neg());
    }

    /// Subtracts one, wrapping below zero: as [`sub`](Self::sub), a locked
    /// add on the tally.
    ///
    /// ```
    /// shardcount::local_counter!(static OPEN);
    /// OPEN.add(2);
    /// OPEN.dec();
    /// assert_eq!(OPEN.sum(), 1);
    /// ```
    pub fn dec(&'static self) {
        self.sub(1);
    }

    #[cold]
    #[inline(never)]
    fn add_to_tally(&'static self, n: u64) {
        self.tally.fetch_add(n, Ordering::Release);
    }

    /// The cold path: a cell that reached zero (a fold is due) or a thread's
    /// first add (its cell was 0 and it is not registered).
    #[cold]
    #[inline(never)]
    fn fold(&'static self, cell: &AtomicI64, v: i64) {
        let folded = K::with_guard(|g| {
            if g.on_exit.get().is_none() {
                // First use: the cell counted from 0.
                cell.store(-(self.batch as i64), Ordering::Relaxed);
                // Only now, holding `pending - batch`, may `sum` read the
                // cell: registered earlier, its count from 0 would read as
                // that plus `batch` (the loom model `exit_fold_races_sum`
                // caught it). Not under `g`'s lock: `flush_all` takes the
                // registry lock first.
                // The exit action first: registering allocates, and an add
                // from there (a global allocator counting with this, batch
                // 1) then folds as usual instead of registering again
                // under the lock we hold.
                g.on_exit.set(Some(Self::thread_exit));
                K::with_moved(|m| self.register(cell, m));
                self.tally.fetch_add(v as u64, Ordering::Release);
                return;
            }
            // `v` is `pending - batch`; `flush_all` may have moved part of
            // `pending` already.
            let pending = (v as u64).wrapping_add(self.batch);
            K::with_moved(|m| {
                m.lock();
                let moved = m.moved.load(Ordering::Relaxed);
                m.moved.store(0, Ordering::Relaxed);
                cell.store(-(self.batch as i64), Ordering::Relaxed);
                // Release: pairs with the Acquire tally loads in `sum` and
                // `approx`: a `sum` that sees this sees the reset cell and
                // `moved`, so it does not count `pending` twice.
                self.tally
                    .fetch_add(pending.wrapping_sub(moved), Ordering::Release);
                m.unlock();
            });
        });
        if folded.is_none() {
            // The guard is gone (an add from a thread-local destructor at
            // thread exit): no cell to keep counts in. Fold and keep it 0,
            // so the next add comes here too.
            cell.store(0, Ordering::Relaxed);
            self.add_to_tally(v as u64);
        }
    }

    /// Runs the calling thread's exit fold now, as its guard's destructor
    /// would. For models: loom destroys every thread-local before running
    /// any destructor, so a guard there cannot reach its cell.
    #[cfg(all(test, shardcount_loom))]
    pub(crate) fn exit_now(&'static self) {
        if let Some(Some(exit)) = K::with_guard(|g| g.on_exit.take()) {
            exit();
        }
    }

    fn register(&'static self, cell: &AtomicI64, moved: &Moved) {
        lock(&self.registry).push(CellRef(cell, moved));
    }

    /// The guard's exit action: fold the thread's cell, unregister it, and
    /// leave it at 0, so later adds go to the tally. The fold and the
    /// unregistering are one step under the registry lock, so a `sum` sees
    /// the counts either in the cell or in the tally: exact even while exit
    /// folds run after `thread::scope` has returned.
    fn thread_exit() {
        let this = K::counter();
        K::with_cell(|cell| {
            let mut registry = lock(&this.registry);
            registry.retain(|c| !std::ptr::eq(c.0, cell));
            // Under the registry lock: no `flush_all` moves more meanwhile.
            let moved = K::with_moved(|m| m.moved.load(Ordering::Relaxed));
            let v = cell.load(Ordering::Relaxed);
            cell.store(0, Ordering::Relaxed);
            let pending = (v as u64).wrapping_add(this.batch);
            this.add_to_tally(pending.wrapping_sub(moved));
            drop(registry);
        });
    }

    /// The folded total: one load of the tally. See [the type
    /// docs](LocalCounter#consistency-of-reads) for its lag.
    ///
    /// ```
    /// shardcount::local_counter!(static HITS);
    /// HITS.inc(); // a thread's first add folds at once
    /// HITS.inc();
    /// assert_eq!(HITS.approx(), 1);
    /// HITS.flush();
    /// assert_eq!(HITS.approx(), 2);
    /// ```
    #[must_use]
    #[inline]
    pub fn approx(&'static self) -> u64 {
        // Acquire: pairs with the Release tally add in `fold`.
        self.tally.load(Ordering::Acquire)
    }

    /// The exact total at quiescence: the tally plus every live thread's
    /// pending counts, read under the registry lock with every thread's
    /// fold held back (see [the type docs](LocalCounter#consistency-of-reads)).
    /// Cost: a lock and two loads per thread that has added; a thread whose
    /// batch fills meanwhile waits for it.
    ///
    /// ```
    /// shardcount::local_counter!(static HITS);
    /// HITS.add(3);
    /// HITS.add(4);
    /// assert_eq!(HITS.sum(), 7);
    /// ```
    #[must_use]
    pub fn sum(&'static self) -> u64 {
        let registry = lock(&self.registry);
        // SAFETY: a registered thread unregisters under this lock before its
        // thread-locals are freed, so each cell and its `Moved` are alive
        // while we hold it.
        let cells = || registry.iter().map(|c| unsafe { (&*c.0, &*c.1) });
        // Every thread's fold stopped first, then the tally: a fold cannot
        // move counts from a cell read later into a tally read earlier
        // (the loom model `sum_counts_every_add_that_happened_before_it`).
        // A fold waits on its own lock for the few loads below; no one
        // holding one waits for the registry.
        cells().for_each(|(_, m)| m.lock());
        // Acquire: pairs with the Release tally add in `fold`, as the locks
        // already order every fold before us.
        let mut total = self.tally.load(Ordering::Acquire);
        for (cell, m) in cells() {
            let v = cell.load(Ordering::Relaxed);
            let moved = m.moved.load(Ordering::Relaxed);
            let pending = (v as u64).wrapping_add(self.batch);
            total = total.wrapping_add(pending.wrapping_sub(moved));
        }
        cells().for_each(|(_, m)| m.unlock());
        total
    }

    /// [`sum`](Self::sum) as a signed value: the same bits, for counters
    /// that go up and down around zero.
    ///
    /// ```
    /// shardcount::local_counter!(static LEVEL);
    /// LEVEL.sub(3);
    /// assert_eq!(LEVEL.sum_i64(), -3);
    /// ```
    #[must_use]
    pub fn sum_i64(&'static self) -> i64 {
        self.sum() as i64
    }

    /// Folds the calling thread's pending counts into the tally.
    ///
    /// ```
    /// shardcount::local_counter!(static HITS);
    /// HITS.add(2);
    /// HITS.add(5);
    /// HITS.flush();
    /// assert_eq!(HITS.approx(), 7);
    /// ```
    pub fn flush(&'static self) {
        let registered = K::with_guard(|g| g.on_exit.get().is_some()).unwrap_or(false);
        if registered {
            K::with_cell(|cell| {
                let v = cell.load(Ordering::Relaxed);
                if v != -(self.batch as i64) {
                    self.fold(cell, v);
                }
            });
        }
    }

    /// Moves every live thread's pending counts into the tally, from any
    /// thread, while the owners keep adding: for a pool whose workers never
    /// exit, before a scrape that reads [`approx`](Self::approx). Nothing
    /// is lost or counted twice: an owner's cell is never written here;
    /// what was moved is recorded beside it and left out of its owner's
    /// next fold.
    ///
    /// After it, `approx` includes every add that happened-before the call
    /// (for add-only use). Cost: the registry lock, and per live thread a
    /// spin lock its owner takes only to fold (every `batch` adds).
    ///
    /// ```
    /// use rayon::prelude::*;
    /// shardcount::local_counter!(static ROWS);
    ///
    /// let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    /// pool.install(|| (0..10_000).into_par_iter().for_each(|_| ROWS.inc()));
    /// assert!(ROWS.approx() < 10_000); // the workers live on, counts pending
    /// ROWS.flush_all();
    /// assert_eq!(ROWS.approx(), 10_000);
    /// ```
    pub fn flush_all(&'static self) {
        let registry = lock(&self.registry);
        for c in registry.iter() {
            // SAFETY: as in `sum`: alive while registered.
            let (cell, m) = unsafe { (&*c.0, &*c.1) };
            m.lock();
            // Any value later than the owner's last fold is its count so
            // far.
            let pending = (cell.load(Ordering::Relaxed) as u64).wrapping_add(self.batch);
            let moved = m.moved.load(Ordering::Relaxed);
            // Cells only count up between folds: `pending >= moved`.
            if pending != moved {
                self.tally
                    .fetch_add(pending.wrapping_sub(moved), Ordering::Release);
                m.moved.store(pending, Ordering::Relaxed);
            }
            m.unlock();
        }
    }

    /// The `batch` this counter folds at.
    ///
    /// ```
    /// shardcount::local_counter!(static HITS, batch = 100);
    /// assert_eq!(HITS.batch(), 100);
    /// ```
    #[must_use]
    pub fn batch(&'static self) -> u64 {
        self.batch
    }
}

impl<K: LocalKey> fmt::Debug for LocalCounter<K> {
    /// Shows `sum` and `approx`.
    ///
    /// ```
    /// shardcount::local_counter!(static HITS);
    /// HITS.add(2);
    /// assert_eq!(format!("{HITS:?}"), "LocalCounter { sum: 2, approx: 2 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let this = K::counter();
        f.debug_struct("LocalCounter")
            .field("sum", &this.sum())
            .field("approx", &this.approx())
            .finish()
    }
}

/// Declares a `static` [`LocalCounter`]: `add` at the thread-local limit.
///
/// `local_counter!(static NAME);` or, with a batch (default
/// [`LocalCounter::DEFAULT_BATCH`]), `local_counter!(pub static NAME, batch
/// = 1024);`. Attributes (doc comments) before `static` are kept. Each
/// declaration gets its own thread-locals, so `add` reaches them directly;
/// that is why the counter is a macro and not a type you construct.
///
/// ```
/// shardcount::local_counter!(
///     /// Requests served.
///     pub static SERVED, batch = 1024
/// );
/// SERVED.inc();
/// assert_eq!(SERVED.sum(), 1);
/// ```
#[macro_export]
macro_rules! local_counter {
    ($(#[$attr:meta])* $vis:vis static $name:ident $(,)?) => {
        $crate::local_counter!($(#[$attr])* $vis static $name, batch = $crate::LocalCounter::<()>::DEFAULT_BATCH);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident, batch = $batch:expr $(,)?) => {
        // The key type shares the static's name in the type namespace only
        // (a braced struct defines no value), so it needs no second name.
        #[doc(hidden)]
        #[allow(non_camel_case_types, dead_code)]
        $vis struct $name {}

        impl $crate::__private::LocalKey for $name {
            #[inline(always)]
            fn with_cell<R>(f: impl FnOnce(&$crate::__private::AtomicI64) -> R) -> R {
                ::std::thread_local! {
                    static CELL: $crate::__private::AtomicI64 =
                        const { $crate::__private::AtomicI64::new(0) };
                }
                CELL.with(f)
            }

            #[inline]
            fn with_guard<R>(
                f: impl FnOnce(&$crate::__private::Guard) -> R,
            ) -> ::std::option::Option<R> {
                ::std::thread_local! {
                    static GUARD: $crate::__private::Guard =
                        const { $crate::__private::Guard::new() };
                }
                GUARD.try_with(f).ok()
            }

            #[inline]
            fn with_moved<R>(f: impl FnOnce(&$crate::__private::Moved) -> R) -> R {
                ::std::thread_local! {
                    static MOVED: $crate::__private::Moved =
                        const { $crate::__private::Moved::new() };
                }
                MOVED.with(f)
            }

            #[inline]
            fn counter() -> &'static $crate::LocalCounter<Self> {
                &$name
            }
        }

        $(#[$attr])*
        $vis static $name: $crate::LocalCounter<$name> = $crate::LocalCounter::__new($batch);
    };
}
