//! `Stock`: a non-negative quantity spread over padded shards, whose takes
//! fail cleanly when the whole stock is short, and only then.
//!
//! # Protocol
//!
//! * `shards[i]: AtomicU64` holds a `CLOSED` flag (bit 63) and an amount
//!   (the low bits). An open shard's amount never exceeds `cap` =
//!   [`Stock::MAX`] / shard count, so an amount never reaches the flag, an
//!   open word never equals a closed one, and the shards' sum never exceeds
//!   `MAX` (nor wraps when summed).
//! * `lock: Mutex<()>` is held by *consolidations* (the slow path of
//!   `try_sub` and of `add`, and `merge`) and by `sum`. Only a consolidation
//!   sets `CLOSED` or moves stock between shards.
//! * Writers of an open shard, all lock-free compare-exchanges that expect an
//!   open value: a *take* (`x ≥ n` to `x − n`; the fast path on the caller's
//!   own shard, or a *borrow* from another shard) and an *add* (`x` to
//!   `x + n` if that stays within `cap`).
//! * A consolidation swaps every shard to `CLOSED` with amount 0, keeping the
//!   amounts it took in a private *pool*; it decides (take `n` from the pool,
//!   or fail), then reopens every shard by storing its new share.
//! * **A closed shard is frozen:** every compare-exchange by others expects an
//!   open value, so it fails on a closed word; only the lock holder writes a
//!   closed shard. Takers and adders that meet `CLOSED` go to the lock, which
//!   they get only after the holder has reopened everything. Hence, while
//!   the lock is free, every shard is open.
//!
//! Orderings: every write to a shard (compare-exchange, swap, store) is
//! `SeqCst`, which puts all stock changes in one total order *S*, consistent
//! with each shard's modification order and with happens-before; "the total
//! stock at an instant" below means at a point of *S*. (On x86 a locked
//! read-modify-write is a full fence anyway; only the reopening stores cost
//! extra, and they are on the slow path.) Loads ahead of a compare-exchange
//! are `Relaxed` ([`guess`]): they are a guess that the exchange validates,
//! and so is what a failed exchange read ([`exchange`]: `Relaxed` on
//! failure). `sum` loads `Relaxed` under the lock, where every shard is
//! open and no stock is in transit; coherence makes it see every change
//! that happened-before it. The `Mutex` orders consolidations among
//! themselves.
//!
//! # Why it is correct
//!
//! Let the total at a point of *S* be the sum of the open shards' amounts
//! plus the lock holder's pool (closed shards hold 0).
//!
//! * **Never below zero.** Every decrement is one compare-exchange from an
//!   observed open amount `x ≥ n` to `x − n`, and a consolidation takes `n`
//!   from its pool only if the pool holds at least `n`. Each unit is in one
//!   place at a time, so two takers cannot both get the last one.
//! * **Exactness.** A successful take or add changes the total by exactly
//!   `n`, at one atomic write. A consolidation moves stock without changing
//!   the total: each swap moves the whole amount into the pool (a
//!   read-modify-write, so no concurrent write is lost), and since closed
//!   shards are frozen the stores that reopen them overwrite `CLOSED | 0`
//!   and nothing else.
//! * **No spurious failure.** The fast path and the borrow never fail; they
//!   fall through to the lock. `try_sub(n)` fails only in a consolidation
//!   whose pool holds `p < n`. Let *T* be that consolidation's last swap. At
//!   *T* every shard has been swapped to `CLOSED | 0` and, being frozen,
//!   still holds it; so the total at *T* is exactly `p`, and *T* lies within
//!   the call. The error reports `p` as what was available.
//! * **No deadlock.** There is one lock. Its holder runs a bounded loop of
//!   atomic operations (two per shard, plus a few retries of its own
//!   compare-exchanges, which can only fail because another thread made
//!   progress): it never waits for anything, never allocates, and never runs
//!   user code, so it always releases the lock.
//! * **Starvation.** The fast path and the borrow are lock-free (a failed
//!   exchange means another thread's succeeded). A thread that needs the
//!   lock waits at most for the holders ahead of it, each holding it for a
//!   bounded time; how many may overtake it is up to `std::sync::Mutex`,
//!   which is not FIFO. In practice the wait is a few microseconds; there is
//!   no bound in theory.
//!
//! # Split and merge
//!
//! * A consolidation *spreads* what remains evenly over all shards when each
//!   would get at least `Stock::SPREAD_MIN` units, and otherwise *merges* it into
//!   the caller's shard. [`Stock::merge`] always merges (as far as `cap`
//!   allows). `new` places the initial stock by the same rule.
//! * Splitting follows demand: a consolidation happens when a thread's own
//!   shard runs short, which is when a second thread starts taking or the
//!   first one emptied its share. A thread whose exchange fails because
//!   another wrote its shard moves to another shard
//!   ([`rehash`](crate::thread::rehash)), so contended takers
//!   separate and then split the stock between them.
//! * A thread whose own shard is short first tries to *borrow*: take `n`
//!   directly from another open shard, lock-free, if that shard holds at
//!   least `n` but less than `SPREAD_MIN × shards` (too little to be worth
//!   spreading). A richer shard is split by a consolidation instead, so that
//!   threads stop sharing its cache line.
//! * So near empty the stock sits in one shard and every thread takes from
//!   it, as from a single atomic; a take fails only after a consolidation
//!   has collected everything.

mod error;

use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::primitive::sync::{lock, Mutex};
use crate::thread::{self, MAX_SHARDS};
use crossbeam_utils::CachePadded;
pub use error::Insufficient;
use std::fmt;

/// The flag bit of a shard word; the amount is in the bits below it.
const CLOSED: u64 = 1 << 63;

/// Where a consolidation puts what remains.
#[derive(Clone, Copy)]
enum Place {
    /// Spread if each shard gets at least `SPREAD_MIN`, else merge.
    Auto,
    /// Into the caller's shard, as far as `cap` allows.
    Merge,
}

/// A sharded, never-negative stock of units: `try_sub` fails cleanly, and
/// only when the whole stock is short.
///
/// Each thread takes from and restocks its own cache-padded shard while that
/// shard holds enough, lock-free and without touching any other shard. When
/// it runs short, it borrows from another shard or briefly takes a lock to
/// collect every shard's stock, so a take never fails while the stock as a
/// whole could cover it.
///
/// # Guarantees
///
/// * **Never below zero:** no interleaving takes more than there is; two
///   threads never both get the last unit.
/// * **No spurious failure:** `try_sub(n)` fails only if, at some instant
///   during the call, the whole stock was below `n`.
/// * **Exact:** every successful `try_sub(n)` removes exactly `n`, every
///   `add(n)` adds exactly `n`; at quiescence `sum()` is initial + adds −
///   successful takes.
/// * The total is limited to [`Stock::MAX`] (2<sup>62</sup>); exceeding it
///   panics, it never wraps.
///
/// Failure is decided only by a *consolidation*: under a lock, it atomically
/// swaps every shard to "closed, 0" and pools what they held. A closed shard
/// can be written by no one else (takers and restockers that meet it wait
/// for the lock), so once the last shard is closed the pool is the whole
/// stock at that instant; the take fails only if that pool is short.
///
/// # Slow path: when it blocks, and why it cannot deadlock
///
/// * Lock-free: a take or restock on the caller's own shard, and a *borrow*
///   (a take directly from another shard that holds enough).
/// * Blocking: a consolidation, run when neither works (or to split a rich
///   shard, see below), and any take or restock that meets a shard closed by
///   one: it waits for the lock, by which time the shard is open again.
///   [`sum`](Self::sum), [`merge`](Self::merge) and
///   [`shard_amounts`](Self::shard_amounts) take the lock too.
/// * No deadlock: there is one lock, and its holder runs a bounded loop of
///   atomic operations (two per shard): it never waits for anything else,
///   allocates nothing and runs no user code.
/// * Starvation: each holder keeps the lock for a bounded time, but the lock
///   is a `std::sync::Mutex`, which is not FIFO, so the number of times a
///   waiter can be overtaken is not bounded in theory.
///
/// # Split and merge
///
/// * A consolidation *spreads* what remains evenly over all shards when each
///   would get at least 32 units (a tuning value, not a promise), and otherwise *merges*
///   it into the caller's shard, so that the last units sit in one place
///   that every thread can take from. [`merge`](Self::merge) merges on
///   demand. [`new`](Self::new) places the initial stock by the same rule.
/// * Splitting follows demand: a consolidation runs when a thread's own
///   shard is short, i.e. when another thread starts taking or a thread has
///   used up its share. A thread whose compare-exchange fails because another
///   thread wrote its shard moves to another shard, so contending takers
///   separate and then split the stock between them.
/// * A short thread borrows from a shard holding at least `n` but less than
///   `SPREAD_MIN × shards`; a richer shard is split by a consolidation
///   instead, so threads stop sharing its cache line. Near empty, then, the
///   stock sits in one shard and every thread takes from it, like from a
///   single atomic, and a take fails only after a consolidation has gathered
///   everything.
///
/// # Example
///
/// ```
/// use shardcount::Stock;
///
/// let tickets = Stock::new(1000);
/// let sold: u64 = std::thread::scope(|s| {
///     let workers: Vec<_> = (0..4)
///         .map(|_| {
///             s.spawn(|| {
///                 let mut got = 0;
///                 while tickets.try_sub(3).is_ok() {
///                     got += 3;
///                 }
///                 got
///             })
///         })
///         .collect();
///     workers.into_iter().map(|w| w.join().unwrap()).sum()
/// });
/// assert_eq!(sold, 999); // 333 takes of 3; the last unit cannot cover a take
/// assert_eq!(tickets.sum(), 1);
/// ```
pub struct Stock {
    /// A power of two in length.
    shards: Box<[CachePadded<AtomicU64>]>,
    /// The most an open shard holds: `MAX / shards.len()`.
    cap: u64,
    /// Padded: slow paths write it, fast paths read the fields above.
    lock: CachePadded<Mutex<()>>,
}

impl Stock {
    /// The largest total stock: 2<sup>62</sup> (about 4.6 × 10<sup>18</sup>).
    ///
    /// Each shard holds at most `MAX / shards`, which keeps a restock's
    /// overflow check local to one shard. `new` or `add` beyond it panics.
    ///
    /// ```
    /// use shardcount::Stock;
    /// let s = Stock::new(Stock::MAX);
    /// assert_eq!(s.sum(), Stock::MAX);
    /// ```
    pub const MAX: u64 = 1 << 62;

    /// A consolidation spreads the remaining stock evenly over all shards
    /// only when each would get at least this many units; less is merged
    /// into the caller's shard. Shards holding less than `SPREAD_MIN ×
    /// shards` are borrowed from rather than split. A tuning constant, not
    /// API: the type docs give the behaviour (currently 32 units).
    pub(crate) const SPREAD_MIN: u64 = 32;

    /// A stock holding `initial` units, with as many shards as the machine
    /// has hardware threads (rounded up to a power of two).
    ///
    /// # Panics
    ///
    /// If `initial` exceeds [`Stock::MAX`].
    ///
    /// ```
    /// let s = shardcount::Stock::new(10);
    /// assert_eq!(s.sum(), 10);
    /// ```
    #[must_use]
    pub fn new(initial: u64) -> Self {
        let s = Stock::with_shards(thread::default_max_shards());
        s.place_initial(initial);
        s
    }

    /// An empty stock with `shards` shards, rounded up to a power of two.
    /// `1` gives a single atomic word behind the same protocol.
    ///
    /// # Panics
    ///
    /// If `shards` is 0 or above 65536.
    ///
    /// ```
    /// let s = shardcount::Stock::with_shards(3);
    /// assert_eq!(s.shards(), 4);
    /// s.add(5);
    /// assert_eq!(s.sum(), 5);
    /// ```
    #[must_use]
    pub fn with_shards(shards: usize) -> Self {
        assert!(
            shards >= 1,
            "shardcount: Stock::with_shards(0): need at least 1 shard"
        );
        assert!(
            shards <= MAX_SHARDS,
            "shardcount: Stock::with_shards({shards}): at most 65536 shards"
        );
        let len = shards.next_power_of_two();
        Stock {
            shards: (0..len)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            cap: Stock::MAX >> len.trailing_zeros(),
            lock: CachePadded::new(Mutex::new(())),
        }
    }

    /// Takes `n` units if the stock holds at least `n`; otherwise takes
    /// nothing and says how much there was.
    ///
    /// Fails only if, at some instant during the call, the whole stock was
    /// below `n` (never merely because this thread's shard was short).
    /// `try_sub(0)` always succeeds and changes nothing; `n` above
    /// [`Stock::MAX`] always fails.
    ///
    /// Cost: while the caller's shard holds `n`, one load and one
    /// compare-exchange on that shard alone, lock-free. Otherwise it borrows
    /// from another shard (lock-free) or briefly takes a lock to collect all
    /// shards (see [the slow path](Stock#slow-path-when-it-blocks-and-why-it-cannot-deadlock)).
    ///
    /// # Errors
    ///
    /// [`Insufficient`], carrying `n` and the whole stock at the instant that
    /// justified the failure.
    ///
    /// ```
    /// let s = shardcount::Stock::new(5);
    /// assert!(s.try_sub(3).is_ok());
    /// let err = s.try_sub(3).unwrap_err();
    /// assert_eq!((err.requested(), err.available()), (3, 2));
    /// assert_eq!(s.sum(), 2); // a failed take takes nothing
    /// ```
    #[inline]
    pub fn try_sub(&self, n: u64) -> Result<(), Insufficient> {
        let home = self.home();
        let shard = &self.shards[home];
        let cur = guess(shard);
        // Open words are below CLOSED; a closed one sends us to the lock.
        if cur < CLOSED && cur >= n {
            if let Err(now) = exchange(shard, cur, cur - n) {
                return self.try_sub_lost_race(n, home, now);
            }
            return Ok(());
        }
        self.try_sub_slow(n, home)
    }

    /// Adds `n` units (restocks).
    ///
    /// Cost: one load and one compare-exchange on the caller's shard,
    /// lock-free, unless a consolidation is running (then it waits for the
    /// lock) or the shard is full (then it consolidates).
    ///
    /// # Panics
    ///
    /// If the total would exceed [`Stock::MAX`]. Nothing is added then.
    ///
    /// ```
    /// let s = shardcount::Stock::new(1);
    /// s.add(4);
    /// assert_eq!(s.sum(), 5);
    /// ```
    #[inline]
    pub fn add(&self, n: u64) {
        let home = self.home();
        let shard = &self.shards[home];
        let cur = guess(shard);
        // A closed word is above `cap`, so it fails this test too.
        if let Some(new) = cur.checked_add(n).filter(|&v| v <= self.cap) {
            if let Err(now) = exchange(shard, cur, new) {
                return self.add_lost_race(n, home, now);
            }
            return;
        }
        self.add_slow(n, home);
    }

    /// The whole stock.
    ///
    /// Exact when nothing runs concurrently, and never above `MAX`. It takes
    /// the slow-path lock, so it never runs during a consolidation and never
    /// sees stock in transit; it reads the shards one after another, so under
    /// concurrent takes and adds it is not a snapshot: it equals the stock at
    /// its start plus some of the concurrent adds minus some of the
    /// concurrent takes. While only takes run, it lies between the stock at
    /// its end and at its start; while only adds run, likewise the other way.
    ///
    /// Cost: a lock, and one load per shard.
    ///
    /// ```
    /// let s = shardcount::Stock::new(7);
    /// s.try_sub(2).unwrap();
    /// assert_eq!(s.sum(), 5);
    /// ```
    #[must_use]
    pub fn sum(&self) -> u64 {
        let _guard = lock(&self.lock);
        self.shards.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }

    /// Collects the whole stock into the caller's shard (a consolidation
    /// that takes nothing), so the next takes by this thread need no other
    /// shard. If the stock exceeds one shard's capacity (`MAX / shards`), that
    /// shard is filled to capacity and the excess is spread evenly over the
    /// others.
    ///
    /// Consolidations merge by themselves when the stock runs low (see
    /// [split and merge](Stock#split-and-merge)); this is for callers that
    /// know better, e.g. one thread about to drain the stock.
    ///
    /// ```
    /// let s = shardcount::Stock::with_shards(4);
    /// s.add(100);
    /// s.merge();
    /// assert_eq!(s.shard_amounts().iter().filter(|&&a| a > 0).count(), 1);
    /// assert_eq!(s.sum(), 100);
    /// ```
    pub fn merge(&self) {
        let home = self.home();
        let _guard = lock(&self.lock);
        let pool = self.close_all();
        self.reopen(pool, home, Place::Merge);
    }

    /// How many shards this stock has (a power of two, fixed at creation).
    ///
    /// ```
    /// assert_eq!(shardcount::Stock::with_shards(2).shards(), 2);
    /// ```
    #[must_use]
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Each shard's amount: a diagnostic showing how the stock is split.
    ///
    /// Taken under the lock, with the same consistency as
    /// [`sum`](Self::sum), whose value is the sum of this vector.
    ///
    /// ```
    /// let s = shardcount::Stock::with_shards(2);
    /// assert_eq!(s.shard_amounts(), vec![0, 0]);
    /// ```
    #[must_use]
    pub fn shard_amounts(&self) -> Vec<u64> {
        // Allocated before the lock: an add from inside the allocation (a
        // global allocator counting with this stock) may take the lock.
        let mut amounts = Vec::with_capacity(self.shards.len());
        let _guard = lock(&self.lock);
        amounts.extend(self.shards.iter().map(|s| s.load(Ordering::Relaxed)));
        amounts
    }

    /// Consumes the stock and returns what it holds (exact: no one else can
    /// be using it).
    ///
    /// ```
    /// assert_eq!(shardcount::Stock::new(3).into_inner(), 3);
    /// ```
    #[must_use]
    pub fn into_inner(self) -> u64 {
        self.sum()
    }

    /// A stock whose shards hold exactly `amounts` (a power-of-two count), so
    /// models and tests can start from a given split.
    #[cfg(all(test, shardcount_loom))]
    pub(crate) fn with_amounts(amounts: &[u64]) -> Self {
        let s = Stock::with_shards(amounts.len());
        assert_eq!(s.shards.len(), amounts.len());
        for (shard, &a) in s.shards.iter().zip(amounts) {
            assert!(a <= s.cap);
            // Relaxed: not yet shared with any other thread.
            shard.store(a, Ordering::Relaxed);
        }
        s
    }

    /// `shards.len() - 1`: the length is a power of two.
    #[inline]
    fn mask(&self) -> usize {
        self.shards.len() - 1
    }

    /// The calling thread's shard index.
    #[inline]
    fn home(&self) -> usize {
        thread::probe() as usize & self.mask()
    }

    /// Takes `n` from shard `i` if it is open and holds `n`; lock-free.
    fn take_open(&self, i: usize, n: u64) -> bool {
        let shard = &self.shards[i];
        let mut cur = guess(shard);
        // Open words are below CLOSED; a closed one sends us to the lock.
        while cur < CLOSED && cur >= n {
            match exchange(shard, cur, cur - n) {
                Ok(_) => return true,
                Err(now) => {
                    collided(now);
                    cur = now;
                }
            }
        }
        false
    }

    /// Adds `n` to shard `i` if it is open and stays within `cap`; lock-free.
    fn add_open(&self, i: usize, n: u64) -> bool {
        let shard = &self.shards[i];
        let mut cur = guess(shard);
        // A closed word is above `cap`, so it fails this test too.
        while let Some(new) = cur.checked_add(n).filter(|&v| v <= self.cap) {
            match exchange(shard, cur, new) {
                Ok(_) => return true,
                Err(now) => {
                    collided(now);
                    cur = now;
                }
            }
        }
        false
    }

    /// Takes `n` from another open shard that holds too little to be worth
    /// spreading; lock-free.
    fn borrow(&self, n: u64, home: usize) -> bool {
        let rich = Stock::SPREAD_MIN.saturating_mul(self.shards.len() as u64);
        (1..self.shards.len())
            .map(|k| (home + k) & self.mask())
            .any(|i| {
                // `take_open` validates it.
                let cur = guess(&self.shards[i]);
                cur >= n && cur < rich && self.take_open(i, n)
            })
    }

    /// The fast path's exchange failed (kept out of line so that the fast
    /// path only makes tail calls and needs no stack frame).
    #[cold]
    #[inline(never)]
    fn try_sub_lost_race(&self, n: u64, home: usize, now: u64) -> Result<(), Insufficient> {
        collided(now);
        self.try_sub_slow(n, home)
    }

    /// As `try_sub_lost_race`, for `add`.
    #[cold]
    #[inline(never)]
    fn add_lost_race(&self, n: u64, home: usize, now: u64) {
        collided(now);
        self.add_slow(n, home);
    }

    #[cold]
    #[inline(never)]
    fn try_sub_slow(&self, n: u64, home: usize) -> Result<(), Insufficient> {
        // Retry our own shard first if the fast path lost a race on it.
        if n == 0 || self.take_open(home, n) || self.borrow(n, home) {
            return Ok(());
        }
        let _guard = lock(&self.lock);
        // A consolidation may have refilled our shard while we waited.
        if self.take_open(home, n) || self.borrow(n, home) {
            return Ok(());
        }
        let pool = self.close_all();
        // The proof's instant T is the last swap in `close_all`: the total
        // then was exactly `pool`.
        let (rest, result) = match pool.checked_sub(n) {
            Some(rest) => (rest, Ok(())),
            None => (pool, Err(Insufficient::new(n, pool))),
        };
        self.reopen(rest, home, Place::Auto);
        result
    }

    #[cold]
    #[inline(never)]
    fn add_slow(&self, n: u64, home: usize) {
        // Retry our own shard first if the fast path lost a race on it.
        if n == 0 || self.add_open(home, n) {
            return;
        }
        let guard = lock(&self.lock);
        // Closed while we looked, and now reopened; or our shard is full.
        if self.add_open(home, n) {
            return;
        }
        let pool = self.close_all();
        match pool.checked_add(n).filter(|&t| t <= Stock::MAX) {
            Some(total) => self.reopen(total, home, Place::Auto),
            None => {
                self.reopen(pool, home, Place::Auto);
                drop(guard);
                panic!(
                    "shardcount: Stock::add({n}): the stock holds {pool}, and the total \
                     would exceed Stock::MAX ({})",
                    Stock::MAX
                );
            }
        }
    }

    /// Closes every shard and returns the stock they held. Lock held.
    fn close_all(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| {
                // SeqCst: in the proof's total order; a read-modify-write,
                // so every take or add before it is in the amount it returns
                // and every one after it fails on CLOSED.
                let old = s.swap(CLOSED, Ordering::SeqCst);
                debug_assert!(
                    old <= self.cap,
                    "a shard was closed while the lock was free"
                );
                old
            })
            .sum()
    }

    /// Reopens every shard with its share of `pool`. Lock held, all closed.
    fn reopen(&self, pool: u64, home: usize, place: Place) {
        let len = self.shards.len() as u64;
        let merge = match place {
            Place::Auto => pool < Stock::SPREAD_MIN.saturating_mul(len),
            Place::Merge => true,
        };
        if merge {
            // The caller's shard takes all it can; any excess over its cap is
            // spread evenly over the others (each share ≤ cap, since
            // pool ≤ MAX = len × cap).
            let mine = pool.min(self.cap);
            let others = len - 1;
            let excess = pool - mine;
            let (q, r) = excess
                .checked_div(others)
                .map_or((0, 0), |q| (q, excess % others));
            for k in 0..self.shards.len() {
                let share = if k == 0 {
                    mine
                } else {
                    q + u64::from((k as u64 - 1) < r)
                };
                // SeqCst: in the proof's total order. A plain store loses
                // nothing: a closed shard is written by the lock holder only.
                self.shards[(home + k) & self.mask()].store(share, Ordering::SeqCst);
            }
        } else {
            // Each share is q or q + 1 ≤ cap, since pool ≤ MAX = len × cap.
            let (q, r) = (pool / len, pool % len);
            for k in 0..self.shards.len() {
                let share = q + u64::from((k as u64) < r);
                self.shards[(home + k) & self.mask()].store(share, Ordering::SeqCst);
            }
        }
    }

    /// Places the initial stock of a stock not yet shared.
    fn place_initial(&self, initial: u64) {
        assert!(
            initial <= Stock::MAX,
            "shardcount: Stock::new({initial}): more than Stock::MAX ({})",
            Stock::MAX
        );
        let _guard = lock(&self.lock);
        self.close_all();
        self.reopen(initial, self.home(), Place::Auto);
    }
}

/// A shard's value, as a guess that the exchange after it validates.
#[inline(always)]
fn guess(shard: &AtomicU64) -> u64 {
    // Relaxed: the exchange validates it (module docs, "Orderings").
    shard.load(Ordering::Relaxed)
}

/// Changes a shard from `cur` (an open value) to `new`: one stock change.
/// On failure, returns what it found there, the next guess.
#[inline(always)]
fn exchange(shard: &AtomicU64, cur: u64, new: u64) -> Result<u64, u64> {
    // SeqCst: puts the change in the total order *S* the no-spurious-failure
    // proof uses. Relaxed on failure: what it read is only a guess.
    shard.compare_exchange(cur, new, Ordering::SeqCst, Ordering::Relaxed)
}

/// A compare-exchange on an open shard failed: unless a consolidation closed
/// it, another thread wrote the same shard, so move this thread elsewhere.
#[inline]
fn collided(now: u64) {
    if now < CLOSED {
        moved();
    }
}

#[cold]
#[inline(never)]
fn moved() {
    thread::rehash();
}

impl Default for Stock {
    /// An empty stock, as [`Stock::new(0)`](Stock::new).
    ///
    /// ```
    /// let s = shardcount::Stock::default();
    /// assert_eq!(s.sum(), 0);
    /// assert!(s.try_sub(1).is_err());
    /// ```
    fn default() -> Self {
        Stock::new(0)
    }
}

impl From<u64> for Stock {
    /// Same as [`Stock::new`].
    ///
    /// ```
    /// let s = shardcount::Stock::from(4);
    /// assert_eq!(s.sum(), 4);
    /// ```
    fn from(initial: u64) -> Self {
        Stock::new(initial)
    }
}

impl fmt::Debug for Stock {
    /// Shows the current [`sum`](Stock::sum) and the shard count.
    ///
    /// ```
    /// let s = shardcount::Stock::with_shards(2);
    /// s.add(3);
    /// assert_eq!(format!("{s:?}"), "Stock { sum: 3, shards: 2 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stock")
            .field("sum", &self.sum())
            .field("shards", &self.shards())
            .finish()
    }
}
