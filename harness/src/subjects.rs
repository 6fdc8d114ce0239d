//! Every counting subject: shardcount's counters, the references they are
//! measured against, and the peers a user would pick instead.
//!
//! Each kind is one [`Subject`] impl plus one line in [`for_each`]; the
//! contention demo, the criterion suite and `hotpath` all walk that list, so
//! a new kind shows up in each at once. Workers are generic over
//! `S: Subject` (monomorphised), so a hot loop calls `add_one` directly, not
//! through a vtable.
//!
//! The references, from the measuring notes:
//!
//! * `AtomicU64`: a bare `fetch_add(1, Relaxed)`. On one thread, the cost of
//!   any counter that must do one locked add; on N threads, one shared word.
//! * [`Stripe`]: one padded atomic per thread, found through a `const`
//!   thread-local index. The ceiling of an exact sharded counter.
//! * [`TlLimit`]: a `const` thread-local `Cell<u64>` add, folded at thread
//!   exit by a separate guard. The floor of any counter that loses nothing
//!   when a thread exits.

use crate::measure::{escape, opaque, run_threads, run_window, Did};
use crossbeam_utils::CachePadded;
use shardcount::{Counter, RoughCounter};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use thread_local::ThreadLocal;

/// One counter kind under test.
pub trait Subject: Sync + Sized {
    /// The name shown in tables, charts and criterion ids.
    const NAME: &'static str;
    /// A short lower-case id for command lines (`hotpath KEY N`).
    const KEY: &'static str;
    /// A fresh counter at zero.
    fn new() -> Self;
    /// The hot path: count one event. Implementations are
    /// `#[inline(always)]`, so every subject is inlined into the timing
    /// loop as a direct call in a user's code would be.
    fn add_one(&self);
    /// The exact total once every writer has finished (been joined).
    fn total(&self) -> u64;
    /// What a reader calls while writers run (its cheap or approximate
    /// read); never more than the total.
    fn read(&self) -> u64;
}

/// Visits every counter kind, by type.
pub trait Visit {
    /// Called once per counter kind.
    fn visit<S: Subject>(&mut self);
}

/// Visits every counter kind, in display order: the first six are the
/// kinds the demo has always shown, then the newer peers and the two
/// references. To add one: impl [`Subject`] for it and add a line here.
pub fn for_each(v: &mut impl Visit) {
    v.visit::<AtomicU64>();
    v.visit::<Mutex<u64>>();
    v.visit::<Counter>();
    v.visit::<RoughCounter>();
    v.visit::<fast_counter::ConcurrentCounter>();
    v.visit::<ThreadLocal<AtomicU64>>();
    v.visit::<contatori::counters::unsigned::Unsigned>();
    v.visit::<fast_telemetry::Counter>();
    v.visit::<Stripe>();
    v.visit::<TlLimit>();
    v.visit::<Local>();
}

/// The baseline: one shared word.
impl Subject for AtomicU64 {
    const NAME: &'static str = "AtomicU64";
    const KEY: &'static str = "atomic";
    fn new() -> Self {
        AtomicU64::new(0)
    }
    #[inline(always)]
    fn add_one(&self) {
        // Relaxed: the usual statistics counter; nothing is published.
        self.fetch_add(1, Ordering::Relaxed);
    }
    fn total(&self) -> u64 {
        // Relaxed: called after the writers were joined, which synchronises.
        self.load(Ordering::Relaxed)
    }
    #[inline]
    fn read(&self) -> u64 {
        // Relaxed: a statistics read; orders nothing else.
        self.load(Ordering::Relaxed)
    }
}

impl Subject for Mutex<u64> {
    const NAME: &'static str = "Mutex<u64>";
    const KEY: &'static str = "mutex";
    fn new() -> Self {
        Mutex::new(0)
    }
    #[inline(always)]
    fn add_one(&self) {
        *self.lock().unwrap() += 1;
    }
    fn total(&self) -> u64 {
        *self.lock().unwrap()
    }
    #[inline]
    fn read(&self) -> u64 {
        *self.lock().unwrap()
    }
}

impl Subject for Counter {
    const NAME: &'static str = "Counter";
    const KEY: &'static str = "counter";
    fn new() -> Self {
        Counter::new()
    }
    #[inline(always)]
    fn add_one(&self) {
        self.inc();
    }
    fn total(&self) -> u64 {
        self.sum()
    }
    #[inline]
    fn read(&self) -> u64 {
        self.sum()
    }
}

/// Readers call `approx` (one load of the tally), its cheap read; the check
/// uses the exact `sum`.
impl Subject for RoughCounter {
    const NAME: &'static str = "RoughCounter";
    const KEY: &'static str = "rough";
    fn new() -> Self {
        RoughCounter::new()
    }
    #[inline(always)]
    fn add_one(&self) {
        self.inc();
    }
    fn total(&self) -> u64 {
        self.sum()
    }
    #[inline]
    fn read(&self) -> u64 {
        self.approx()
    }
}

/// The `fast-counter` crate: a fixed table of padded shards, one per core
/// (rounded up to a power of two), picked by a thread-local id.
impl Subject for fast_counter::ConcurrentCounter {
    const NAME: &'static str = "fast-counter";
    const KEY: &'static str = "fast-counter";
    fn new() -> Self {
        fast_counter::ConcurrentCounter::new(crate::measure::cores())
    }
    #[inline(always)]
    fn add_one(&self) {
        self.add(1);
    }
    fn total(&self) -> u64 {
        to_u64(self.sum())
    }
    #[inline]
    fn read(&self) -> u64 {
        to_u64(self.sum())
    }
}

/// The hand-rolled per-thread counter many programs use: a `ThreadLocal`
/// slot per thread, written only by its owner (load + store, no locked
/// instruction), summed by iterating. The slots are not cache-padded, as in
/// typical code.
impl Subject for ThreadLocal<AtomicU64> {
    const NAME: &'static str = "ThreadLocal";
    const KEY: &'static str = "tl-atomic";
    fn new() -> Self {
        ThreadLocal::new()
    }
    #[inline(always)]
    fn add_one(&self) {
        let slot = self.get_or(|| AtomicU64::new(0));
        // Relaxed load + store: only the owning thread writes its slot, so no
        // update can be lost; readers need no ordering with other data.
        slot.store(slot.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
    fn total(&self) -> u64 {
        self.read()
    }
    #[inline]
    fn read(&self) -> u64 {
        // Relaxed: each slot is read on its own; a statistics read.
        self.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }
}

/// The `contatori` crate's plain unsigned counter: a fixed array of 128
/// padded slots, the slot picked by a lazily initialised thread-local index
/// handed out round-robin, one `fetch_add` per add.
impl Subject for contatori::counters::unsigned::Unsigned {
    const NAME: &'static str = "contatori";
    const KEY: &'static str = "contatori";
    fn new() -> Self {
        contatori::counters::unsigned::Unsigned::new()
    }
    #[inline(always)]
    fn add_one(&self) {
        self.add(1);
    }
    fn total(&self) -> u64 {
        self.read()
    }
    #[inline]
    fn read(&self) -> u64 {
        use contatori::counters::Observable;
        self.value().as_u64()
    }
}

/// The `fast-telemetry` crate's counter (a fork of `fast-counter`): a
/// table of padded shards sized per counter, picked by a thread id handed
/// out on first use. Sized like `fast-counter`, one shard per core.
impl Subject for fast_telemetry::Counter {
    const NAME: &'static str = "fast-telemetry";
    const KEY: &'static str = "fast-telemetry";
    fn new() -> Self {
        fast_telemetry::Counter::new(crate::measure::cores())
    }
    #[inline(always)]
    fn add_one(&self) {
        self.inc();
    }
    fn total(&self) -> u64 {
        to_u64(self.sum())
    }
    #[inline]
    fn read(&self) -> u64 {
        to_u64(self.sum())
    }
}

/// Slots in a [`Stripe`]: a power of two, above any thread count measured
/// here, so threads that start together never share one.
const STRIPES: usize = 64;

/// Marks a thread that has no stripe index yet.
const NO_INDEX: usize = usize::MAX;

/// Next stripe index to hand out.
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    /// This thread's stripe index (`const`: no lazy-init or destructor
    /// state to check, only the `NO_INDEX` test).
    static STRIPE_INDEX: Cell<usize> = const { Cell::new(NO_INDEX) };
}

/// The ideal stripe: one cache-padded `AtomicU64` per thread, found through
/// a `const` thread-local index handed out in order of first use. Exact,
/// and never shared by threads that start together: the ceiling for an
/// exact sharded counter, which must also find its shard and may share it.
pub struct Stripe {
    /// Inline (not boxed): one load fewer on the hot path.
    slots: [CachePadded<AtomicU64>; STRIPES],
}

impl Stripe {
    /// The calling thread's index, handed out on its first add.
    #[cold]
    #[inline(never)]
    fn assign_index() -> usize {
        // Relaxed: a ticket; nothing else is published with it.
        let i = NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES;
        STRIPE_INDEX.with(|c| c.set(i));
        i
    }
}

impl Subject for Stripe {
    const NAME: &'static str = "stripe";
    const KEY: &'static str = "stripe";
    fn new() -> Self {
        Stripe {
            slots: [const { CachePadded::new(AtomicU64::new(0)) }; STRIPES],
        }
    }
    #[inline(always)]
    fn add_one(&self) {
        let mut i = STRIPE_INDEX.with(Cell::get);
        if i == NO_INDEX {
            i = Stripe::assign_index();
        }
        // Relaxed: as for `AtomicU64`. The mask drops the bounds check.
        self.slots[i & (STRIPES - 1)].fetch_add(1, Ordering::Relaxed);
    }
    fn total(&self) -> u64 {
        self.read()
    }
    #[inline]
    fn read(&self) -> u64 {
        // Relaxed: each slot is read on its own; a statistics read.
        self.slots.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }
}

/// The value of a thread's limit cell until its exit guard is registered
/// (and again once the guard has run): the first add wraps it to 0, and the
/// carry of that add is the only check the hot path makes.
const UNREGISTERED: u64 = u64::MAX;

std::thread_local! {
    /// The thread-local limit's count: `const`, no destructor, so an add is
    /// a plain read-modify-write of thread-local memory with no state check.
    static LIMIT_CELL: Cell<u64> = const { Cell::new(UNREGISTERED) };
    /// Folds `LIMIT_CELL` into `LIMIT_SINK` at thread exit. Separate from the
    /// cell, so that only the cold path pays for its destructor state.
    static LIMIT_GUARD: LimitGuard = const { LimitGuard };
}

/// Where exited threads' counts go.
static LIMIT_SINK: AtomicU64 = AtomicU64::new(0);

struct LimitGuard;

impl Drop for LimitGuard {
    fn drop(&mut self) {
        // The cell has no destructor, so it is still there. Marked
        // unregistered again: a later add (from another thread-local's
        // destructor) then goes to the tally.
        let n = LIMIT_CELL.with(|c| c.replace(UNREGISTERED));
        // Relaxed: the joining thread's join orders this before its reads.
        LIMIT_SINK.fetch_add(own_count(n), Ordering::Relaxed);
    }
}

/// What a cell value counts.
fn own_count(cell: u64) -> u64 {
    if cell == UNREGISTERED {
        0
    } else {
        cell
    }
}

/// The thread-local limit: one `const` thread-local `Cell<u64>` add per
/// event, no atomic at all, and nothing lost at thread exit (a guard with a
/// destructor, registered from the cold path on a thread's first add, folds
/// the cell into a shared `AtomicU64`).
///
/// It is the floor, not a usable counter: there is one cell per thread, so
/// every `TlLimit` is a window onto one process-wide count, starting where
/// that count stood when the window was made. Use one at a time. `total`
/// is exact once every other writer has been joined (the join waits for the
/// guard); `read` from another thread sees only exited threads' counts.
pub struct TlLimit {
    /// The process-wide count when this window was made.
    base: u64,
}

impl TlLimit {
    /// A thread's first add, which wrapped its cell from `UNREGISTERED` to
    /// 0: registers the exit guard and counts the add. If the thread is
    /// already exiting and its guard has run, the add goes to the tally.
    #[cold]
    #[inline(never)]
    fn register(cell: &Cell<u64>) {
        if LIMIT_GUARD.try_with(|_| ()).is_ok() {
            cell.set(1);
        } else {
            cell.set(UNREGISTERED);
            // Relaxed: as in the guard.
            LIMIT_SINK.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Subject for TlLimit {
    const NAME: &'static str = "tl-limit";
    const KEY: &'static str = "tl-limit";
    fn new() -> Self {
        // Move this thread's count into the tally (keeping it registered), so
        // that the count is the tally plus the reading thread's own cell, and
        // a reader on another thread never starts below the base.
        let mine = LIMIT_CELL.with(|c| {
            let v = c.get();
            if v == UNREGISTERED {
                return 0;
            }
            c.set(0);
            v
        });
        // Relaxed: a single thread's bookkeeping; joins order the rest.
        let base = LIMIT_SINK.fetch_add(mine, Ordering::Relaxed) + mine;
        TlLimit { base }
    }
    #[inline(always)]
    fn add_one(&self) {
        LIMIT_CELL.with(|c| {
            let (v, first) = c.get().overflowing_add(1);
            c.set(v);
            if first {
                TlLimit::register(c);
            }
        });
    }
    fn total(&self) -> u64 {
        let mine = LIMIT_CELL.with(|c| own_count(c.get()));
        // Relaxed: exited writers were joined; the caller's cell is its own.
        LIMIT_SINK.load(Ordering::Relaxed) + mine - self.base
    }
    #[inline]
    fn read(&self) -> u64 {
        self.total()
    }
}

shardcount::local_counter!(static LOCAL_COUNT);

/// `local_counter!`: shardcount's counter at the thread-local limit. Like
/// [`TlLimit`] it is one static, so each `Local` is a window onto one
/// process-wide count, starting where it stood when the window was made:
/// use one at a time.
pub struct Local {
    base: u64,
}

impl Subject for Local {
    const NAME: &'static str = "local_counter!";
    const KEY: &'static str = "local";
    fn new() -> Self {
        Local {
            base: LOCAL_COUNT.sum(),
        }
    }
    #[inline(always)]
    fn add_one(&self) {
        LOCAL_COUNT.inc();
    }
    fn total(&self) -> u64 {
        LOCAL_COUNT.sum() - self.base
    }
    fn read(&self) -> u64 {
        LOCAL_COUNT.approx().saturating_sub(self.base)
    }
}

/// A signed sum as the `u64` it should be; a negative one (which an add-only
/// counter must never show) maps to `u64::MAX` so the check fails loudly.
fn to_u64(x: isize) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}

/// `per_thread` adds to `s` on each of `threads` threads: on the calling
/// thread when `threads` is 1, else on pinned threads started together.
/// Checks that the total grew by exactly the adds made; returns the wall
/// time.
pub fn time_adds<S: Subject>(s: &S, threads: usize, per_thread: u64) -> Duration {
    let s = escape(s);
    let before = s.total();
    let elapsed = if threads == 1 {
        let start = Instant::now();
        for _ in 0..per_thread {
            s.add_one();
            opaque();
        }
        start.elapsed()
    } else {
        run_threads(threads, |_| {
            for _ in 0..per_thread {
                s.add_one();
                opaque();
            }
        })
    };
    assert_eq!(
        s.total().wrapping_sub(before),
        threads as u64 * per_thread,
        "{} at {threads} thread(s): lost or extra counts",
        S::NAME
    );
    elapsed
}

/// [`time_adds`] on a fresh, cache-padded counter (so only the counter's
/// own layout is measured).
pub fn time_adds_fresh<S: Subject>(threads: usize, per_thread: u64) -> Duration {
    time_adds(&*CachePadded::new(S::new()), threads, per_thread)
}

/// One window of adds to `s` on each of `threads` threads released
/// together ([`run_window`]); checks that the total grew by exactly the
/// adds made and returns what each thread did.
pub fn window_adds<S: Subject>(s: &S, threads: usize, window: Duration) -> Vec<Did> {
    let s = escape(s);
    let before = s.total();
    let did = run_window(threads, window, || s.add_one());
    assert_eq!(
        s.total().wrapping_sub(before),
        did.iter().map(|d| d.adds).sum::<u64>(),
        "{} at {threads} thread(s): lost or extra counts",
        S::NAME
    );
    did
}

/// [`window_adds`] on a fresh, cache-padded counter.
pub fn window_adds_fresh<S: Subject>(threads: usize, window: Duration) -> Vec<Did> {
    window_adds(&*CachePadded::new(S::new()), threads, window)
}

/// `iters` calls of `read(x)` on the calling thread, each expected to return
/// `expect` (an idle counter); `x`'s address escapes first, and the results
/// are summed and checked, so that no read can be hoisted or elided.
/// Returns the time.
pub fn time_reads<T: ?Sized>(x: &T, iters: u64, expect: u64, read: impl Fn(&T) -> u64) -> Duration {
    let x = escape(x);
    let mut acc = 0u64;
    let start = Instant::now();
    for _ in 0..iters {
        acc = acc.wrapping_add(read(x));
        opaque();
    }
    let elapsed = start.elapsed();
    assert_eq!(acc, expect.wrapping_mul(iters), "an idle read changed");
    elapsed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held by every test that uses `TlLimit`: its windows must not overlap.
    static LIMIT: Mutex<()> = Mutex::new(());

    /// Every kind, on one thread and on three (oversubscribed on small
    /// hosts), counts exactly: `time_adds` asserts it.
    #[test]
    fn every_subject_counts_exactly() {
        let _one_at_a_time = LIMIT.lock().unwrap();
        struct V;
        impl Visit for V {
            fn visit<S: Subject>(&mut self) {
                let s = S::new();
                time_adds(&s, 1, 1000);
                time_adds(&s, 3, 1000);
                assert_eq!(s.total(), 4000, "{}", S::NAME);
                assert!(s.read() <= 4000, "{}", S::NAME);
            }
        }
        // On a thread joined before the lock is released: a limit count
        // left in this test thread's cell would fold into the tally when the
        // thread exits, inside another test's window.
        std::thread::spawn(|| for_each(&mut V)).join().unwrap();
    }

    /// A window counts exactly (`window_adds` asserts it), makes whole
    /// chunks, and lasts at least its length on every thread.
    #[test]
    fn windows_count_exactly_and_last_the_window() {
        let window = Duration::from_micros(200);
        let c = Counter::new();
        c.split(2);
        for did in [
            window_adds(&c, 2, window),
            window_adds_fresh::<Stripe>(2, window),
        ] {
            assert_eq!(did.len(), 2);
            for d in did {
                assert!(d.adds >= crate::measure::WINDOW_CHUNK);
                assert_eq!(d.adds % crate::measure::WINDOW_CHUNK, 0);
                assert!(d.elapsed >= window && d.first <= d.elapsed);
            }
        }
    }

    /// The limit's counts survive thread exit, and a new window starts at
    /// zero whatever this thread counted before.
    #[test]
    fn the_limit_folds_at_exit_and_windows_start_at_zero() {
        let _one_at_a_time = LIMIT.lock().unwrap();
        std::thread::spawn(limit_windows).join().unwrap();
    }

    fn limit_windows() {
        let a = TlLimit::new();
        a.add_one();
        a.add_one();
        assert_eq!(a.total(), 2);
        std::thread::spawn(|| {
            let b = TlLimit::new();
            b.add_one();
        })
        .join()
        .unwrap();
        assert_eq!(a.total(), 3, "a joined thread's count is folded");
        let c = TlLimit::new();
        assert_eq!(c.total(), 0);
        c.add_one();
        assert_eq!(c.total(), 1);
        // The creating thread's earlier adds were moved, not lost.
        assert_eq!(a.total(), 4);
    }
}
