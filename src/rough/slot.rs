//! The fold protocol: per-thread slots, the tally, and how a slot's counts
//! move into the tally without loss, double counting or a lag beyond the
//! batch.
//!
//! # Protocol
//!
//! The counter itself is one pointer, `shared: AtomicPtr<Core>`: null until
//! first use, then an `Arc<Core>` turned into a raw pointer, installed once
//! by a compare-exchange (`AcqRel`; readers that dereference it use
//! `Acquire`). `Core` holds:
//!
//! * `tally: AtomicU64`: the folded counts. Only folds write it, each with one
//!   `fetch_add(.., Release)`; `approx` loads it with `Acquire`.
//! * `slots: SlotTable<Slot>`: one slot per thread index (see
//!   `thread::slots`), allocated in buckets on first use and freed only when
//!   `Core` is. A thread reaches its slot in O(1), however many counters
//!   it uses.
//! * `orphan: Slot`: a slot no thread owns, for adds made after the calling
//!   thread's slot table was destroyed (from another thread-local's
//!   destructor). Each such add is a `fetch_add` of its `total`, a bump of
//!   its `armed` (below) and a fold, at once.
//! * `dropped: AtomicBool`: set when the counter is dropped, a hint for
//!   exit registries and folders to let go early: `Relaxed` both ways, as
//!   each reader holds its own reference, so seeing it late only delays
//!   freeing.
//!
//! Each `Slot` holds:
//!
//! * `total: AtomicU64`: the cumulative sum of every add ever made through the
//!   slot. Only the owning thread writes it, with a `Relaxed` load + store (no
//!   locked instruction), and reads it back `Relaxed` ([`Slot::own_total`]);
//!   folds read it `Relaxed` after their `Acquire` loads below, sums by
//!   coherence alone. It is never reset: when a thread exits, its slot
//!   is folded and freed, and the next thread to take the same thread index
//!   continues the same total. So `sum()` is simply the sum of every slot's `total`; it
//!   never reads the tally and folding cannot make it count anything twice.
//! * `folded: AtomicU64`: the part of `total` already added to the tally.
//!   Any thread may fold any slot: it loads `armed` and `folded` (both
//!   `Acquire`), then `total`, claims the range by a compare-exchange of
//!   `folded` from the old value to the loaded total (`AcqRel`), adds the
//!   difference to the tally, and loads `armed` again (`Acquire`); if that
//!   moved, it claims again from the total it installed (see below). Every
//!   write of `folded` is a read-modify-write. The tally always changes by
//!   exactly what `folded` changed by, so once all folds are finished,
//!   `tally == Σ folded`, and after a final fold, `approx() == sum()`.
//! * `tallied: AtomicU64`: the claimed amounts that have reached the tally.
//!   After its tally add, each claim adds its amount here (`Release` RMW), so
//!   `tallied == folded` exactly when no claim of the slot is in flight. A
//!   fold that finds nothing left to claim may be racing a claim that is
//!   not in the tally yet (an exit fold after `thread::scope`, a `Folder`
//!   pass); `flush`, `flush_all` and the exit fold therefore fold and then
//!   wait, with `Acquire` loads, until `tallied` reaches the `folded` they
//!   saw (`fold_and_wait`): every write of `tallied` is an RMW, so the load
//!   that reads that value synchronises with every claim's tally add. The
//!   wait ends when the claimants run a few more instructions; a slot
//!   whose `folded` moves meanwhile (its owner adds and folds) is not
//!   waited for, so the wait never chases a busy owner.
//! * `armed: AtomicU64`: the slot's generation. The owner, its only writer,
//!   bumps it (`Relaxed` load, `Release` store) at each slow check, when it
//!   takes the slot and before the fold that gives the slot back, and then
//!   reads `folded` by a `fetch_add(0, Release)`. The orphan's is bumped by every orphan add,
//!   with `fetch_add(1, Release)`, followed by the same read of `folded`.
//! * `in_use: AtomicBool`: whether a thread owns the slot. Only the thread
//!   holding the slot's index writes it: `true` at its first add (the
//!   takeover, `Relaxed`: `live_slots` needs no more than a current value),
//!   `false` with `Release` when it exits. The next holder of the
//!   index happens-after that exit (the index pool is a mutex), so it sees
//!   the last `total` its predecessor wrote.
//! * owner-only bookkeeping (`lo`, `width`, `last_fold`), `Relaxed`, and
//!   `left` and `hi`, plain cells for the hot path's test: only the thread
//!   holding the slot's index touches them, and the index pool's mutex
//!   hands them over with the index.
//!
//! # Why `approx() ≤ sum()` for add-only use
//!
//! A fold reads `total` before its `Release` add to the tally. A thread whose
//! `Acquire` load of the tally sees that add (or a later one: all tally writes
//! are read-modify-writes, so they continue the release sequence) therefore
//! happens-after the fold's read of `total`, and its later `sum()` reads that
//! total or a newer one. The `Acquire`/`AcqRel` chain on `folded` makes each
//! fold read a total no older than the one the previous fold claimed (a
//! fold's second round claims from its own claim to a total it read later),
//! so for add-only use every claimed range is non-negative and the tally never
//! holds more than the totals a following `sum()` reads.
//!
//! # Why each live slot's unfolded delta stays below `batch`
//!
//! At a slow check the owner bumps `armed`, reads `folded` by an RMW (call
//! it R, and the distance `u = |t0 - folded|`, `t0` being the total then),
//! folds if `u ≥ batch` (then `u = 0`), and arms a window: the hot path
//! checks again before `total` moves `w` from `t0`, with
//! `w ≤ batch - u` and `w ≤ ⌈batch/2⌉`. While the owner is not inside an add,
//! `total` is within `w - 1` of `t0`, so `|total - folded| < batch` as long
//! as `folded` holds what R read (or the owner's fold left, `t0`) or any
//! total inside the window. A claim C of `folded` by another thread is
//! before or after R in `folded`'s modification order:
//!
//! * before: R reads C's value or a later one, and the window allows for it;
//! * after: C reads from R's release sequence (every write of `folded` is an
//!   RMW), so it synchronises with R, and the fold's load of `armed` after C
//!   sees the bump. If its load before reading `total` saw that generation
//!   too, it synchronised with the bump's `Release` store, so the total it
//!   claimed is `t0` or a newer one, inside the window. If not, its total
//!   may be from before the check, and it claims again, from that total to
//!   one it reads now, which is inside the window.
//!
//! So at an instant when the owner is not inside an add and no fold of the
//! slot is in progress, `|total - folded| < batch`. R must be an RMW: the
//! check's store to `armed` then load of `folded`, against a fold's claim
//! then load of `armed`, is the store-buffering shape, where plain loads
//! could both miss the other side's write. It costs the check one locked
//! instruction on the owner's own cache line; `bump` is unchanged.
//!
//! The same argument with the owner's exit fold in place of the window (and
//! every orphan add in place of the owner, for the orphan slot) shows that a
//! free slot, and the orphan, hold `folded == total` once their folds and
//! the claims racing them are finished. Hence, with no thread inside an add
//! and no fold in progress, `sum - approx` (a signed distance) is at most
//! live slots × (`batch` - 1) in magnitude, and 0 with no live slot.
//!
//! A fold claims again only if the generation moved between its two loads
//! of `armed`, which takes another check (at least one count by the owner)
//! or another orphan add: folds are lock-free, not wait-free.
//!
//! # Finding the slot
//!
//! The hot path compares the counter's shared block with the thread's
//! last-used cache (`thread::slots`) and, on a hit, adds to the cached
//! slot: a subtraction from `left` (in memory, the borrow tested) and an
//! add to `total`. `arm` sets `hi` to the window's upper end (`t0 + w`),
//! and `left` to `hi - total - 1`, so an add of at most `left` stays
//! inside the window; a sub (an add of 2^64 - n) is always due, and the slow path
//! tests the window both ways (`lo`, `width`). Where `t0 + w` is within
//! `CHECK_EVERY` of 2^64, `hi` is 0 (every add due) until a check further
//! from it, so the hot compare never misses a wrap.
//!
//! On a miss (another counter was used last), it loads the thread's
//! position (a `const` thread-local without a destructor), the position's
//! bucket in `slots` (`Acquire`) and the slot, adds, and caches the slot
//! if the add was not due. A slot the thread has not taken over yet has
//! `hi` and `left` 0 and an empty window (`width` 0), so the first add runs the slow
//! check, which takes it over: marks it in use, starts a generation, arms
//! a window and asks the thread's exit registry for a [`ThreadExit`] call,
//! which folds and frees the slot when the thread exits. An add that is
//! not due therefore proves the slot taken over by the calling thread.
use crate::primitive::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::primitive::sync::Arc;
use crate::thread::slots::{SlotTable, ThreadExit};
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
use std::time::Instant;

/// A thread reads the clock for the interval rule when its count on a
/// counter has moved this many counts (or half of `batch`, if smaller) since its
/// last check: for `inc`, once every 512 adds. A tuning constant, not
/// API: `RoughCounter`'s docs give the behaviour.
const CHECK_EVERY: u64 = 512;

/// One per-thread slot, padded to its own cache lines.
pub(super) struct Slot {
    /// Cumulative adds through this slot; written only by its owner.
    total: AtomicU64,
    /// Owner-only, the hot path's whole test: an add of `n` is due for the
    /// slow check unless `n <= left`, which is `hi - total - 1` (0 from
    /// `hi` on, and when `hi` is 0). A plain cell beside `total`, so the test is one compare with a
    /// memory operand and the update one subtraction in memory (an atomic
    /// would be loaded into a register first).
    left: UnsafeCell<u64>,
    /// Owner-only: an add that brings `total` to `hi` or above is due
    /// (`hi` = `lo + width`, or 0, "always due": see `arm`). Read only to
    /// set `left` again after the slow path moved `total` or `hi`.
    hi: UnsafeCell<u64>,
    /// The prefix of `total` already moved into the tally.
    folded: AtomicU64,
    /// The slot's generation: bumped when its owner checks, takes or gives
    /// back the slot, and at every orphan add. A fold that sees it move
    /// between its read of `total` and its claim claims again.
    armed: AtomicU64,
    /// Owner-only: the window. The slow path checks when
    /// `total - lo >= width` (wrapping), i.e. once the total has moved `w`
    /// away from where the last check left it, with `width = 2w - 1`; the
    /// hot path tests the upper end only (`hi`).
    lo: AtomicU64,
    /// Owner-only: see `lo`.
    width: AtomicU64,
    /// The part of `folded` whose claims have reached the tally: each claim
    /// adds its amount here after its tally add, so `tallied == folded` once no
    /// claim is in flight.
    tallied: AtomicU64,
    /// Owner-only: nanoseconds after `Core::epoch` of the last timed fold.
    pub(super) last_fold: AtomicU64,
    /// Whether a thread owns this slot.
    in_use: AtomicBool,
}

impl Slot {
    fn new(in_use: bool) -> Self {
        Slot {
            total: AtomicU64::new(0),
            left: UnsafeCell::new(0),
            hi: UnsafeCell::new(0),
            folded: AtomicU64::new(0),
            armed: AtomicU64::new(0),
            lo: AtomicU64::new(0),
            width: AtomicU64::new(0),
            tallied: AtomicU64::new(0),
            last_fold: AtomicU64::new(0),
            in_use: AtomicBool::new(in_use),
        }
    }

    /// The owner's add, unless a slow check is due: then it changes
    /// nothing and returns `false`, and the caller takes the slow path
    /// (which may first have to take the slot over: a slot not taken over
    /// has an empty window and `left` 0, so every add to it is due, and an
    /// add of 0 is due here too, so that an add that is not due proves the
    /// slot taken over).
    ///
    /// `n <= left` is exactly "stays below `hi`": `total + n < hi`, with
    /// no wrap, as `arm` keeps `hi` clear of it. A sub (an add of 2^64 - n)
    /// is always due; `bump` on the slow path tests the window both ways.
    #[inline]
    pub(super) fn try_bump(&self, n: u64) -> bool {
        // SAFETY: `left` is owner-only (see `Slot`'s `Sync`): the caller is
        // the thread holding the slot's index.
        let left = unsafe { *self.left.get() };
        if n == 0 || n > left {
            return false;
        }
        // SAFETY: as above.
        unsafe { *self.left.get() = left - n };
        self.add_total(n);
        true
    }

    /// [`try_bump`](Self::try_bump) on a slot the calling thread has taken
    /// over (its cached slot), in fewer instructions: the subtraction
    /// from `left` is made in memory before the test, and undone out of
    /// line when the add is due. An add of 0 is never due here (it changes
    /// nothing).
    #[inline]
    pub(super) fn try_bump_owned(&self, n: u64) -> bool {
        let left = self.left.get();
        // SAFETY: `left` is owner-only (see `Slot`'s `Sync`): the caller is
        // the thread holding the slot's index.
        let (rest, due) = unsafe { *left }.overflowing_sub(n);
        // SAFETY: as above.
        unsafe { *left = rest };
        if due {
            self.unbump(n);
            return false;
        }
        self.add_total(n);
        true
    }

    /// The owner's add to `total`, inside the window.
    #[inline(always)]
    fn add_total(&self, n: u64) {
        let t = self.own_total();
        self.total.store(t.wrapping_add(n), Ordering::Relaxed);
    }

    /// Owner only: `total` as the calling thread last stored it (or its
    /// predecessor, handed over with the index).
    #[inline(always)]
    fn own_total(&self) -> u64 {
        // Relaxed: the only writer reading its own last store.
        self.total.load(Ordering::Relaxed)
    }

    /// Undoes `try_bump_owned`'s subtraction from `left` for a due add. Out of
    /// line, reading `left` afresh: the hot path keeps no copy of it.
    #[cold]
    #[inline(never)]
    fn unbump(&self, n: u64) {
        // SAFETY: owner-only, as in `try_bump`.
        unsafe { *self.left.get() = (*self.left.get()).wrapping_add(n) };
    }

    /// The owner's add on the slow path. Returns whether a check is due.
    pub(super) fn bump(&self, n: u64) -> bool {
        let t = self.own_total().wrapping_add(n);
        self.total.store(t, Ordering::Relaxed);
        self.set_left(t);
        t.wrapping_sub(self.lo.load(Ordering::Relaxed)) >= self.width.load(Ordering::Relaxed)
    }

    /// Owner only: `left` for a total of `t` (`hi - t - 1`, or 0 from `hi`
    /// on).
    fn set_left(&self, t: u64) {
        // SAFETY: owner-only, as in `try_bump`.
        unsafe {
            let hi = *self.hi.get();
            *self.left.get() = hi.saturating_sub(t).saturating_sub(1);
        }
    }

    /// Owner only: starts a new generation and returns the unfolded distance
    /// `|total - folded|` as of then. Every claim of the slot is either in
    /// that distance or, if it lands later, sees the new generation.
    pub(super) fn begin_generation(&self) -> u64 {
        // Relaxed: only the owner writes `armed`; a new owner sees its
        // predecessor's last store through the index pool's mutex.
        let g = self.armed.load(Ordering::Relaxed);
        // Release: pairs with the Acquire loads of `armed` in
        // `Core::fold`: a fold that reads this generation reads a total
        // no older than the owner's last store before it.
        self.armed.store(g.wrapping_add(1), Ordering::Release);
        let f = self.folded_after_bump();
        let t = self.own_total();
        (t.wrapping_sub(f) as i64).unsigned_abs()
    }

    /// Reads `folded` after a bump of `armed`, by a read-modify-write.
    fn folded_after_bump(&self) -> u64 {
        // Release, and an RMW rather than a load: a claim later in
        // `folded`'s order reads from its release sequence, so it
        // synchronises with it and then sees the bump; an earlier claim is
        // in the value read. A load could miss a claim that misses the bump
        // too (store buffering), leaving a stale claim unnoticed.
        self.folded.fetch_add(0, Ordering::Release)
    }

    /// Owner only: sets the window so the next slow check comes after at most
    /// `CHECK_EVERY` counts, and before the unfolded distance `u` (from
    /// `begin_generation`, 0 after a fold) can reach `batch`.
    ///
    /// The window is also at most half a batch wide: a fold by another
    /// thread (`flush_all`, a `Folder`) can set `folded` to any total inside
    /// the window, and with subs the total can then swing to the far side of
    /// it before the next check; two half-widths stay below `batch`. (A
    /// claim of a total from before the window is claimed again: see
    /// `Core::fold`.)
    fn arm(&self, u: u64, batch: u64) {
        debug_assert!(u < batch, "the check folds at a distance of a batch");
        let w = (batch - u).min(batch.div_ceil(2)).min(CHECK_EVERY);
        let t = self.own_total();
        self.lo.store(t.wrapping_sub(w - 1), Ordering::Relaxed);
        self.width.store(2 * w - 1, Ordering::Relaxed);
        // The window's upper end, if an add of up to CHECK_EVERY from
        // inside the window cannot wrap past it; else 0, and every add is
        // due until a check far enough from 2^64 (at most a window's worth
        // of adds, once per wrap of the total).
        let hi = t
            .checked_add(w)
            .filter(|&h| h <= u64::MAX - CHECK_EVERY)
            .unwrap_or(0);
        self.set_hi(hi);
    }

    /// Owner only: sets the hot path's bound (0: every add is due).
    pub(super) fn set_hi(&self, hi: u64) {
        // SAFETY: owner-only, as in `try_bump`.
        unsafe { *self.hi.get() = hi };
        self.set_left(self.own_total());
    }
}

/// What a counter shares with the threads that use it; reference-counted so
/// a thread's exit registry can outlive the counter.
pub(super) struct Core {
    pub(super) tally: CachePadded<AtomicU64>,
    /// One slot per thread index.
    pub(super) slots: SlotTable<CachePadded<Slot>>,
    orphan: CachePadded<Slot>,
    /// Set when the counter is dropped, so exit registries and folders let
    /// go early.
    pub(super) dropped: AtomicBool,
    /// Origin of the owner-only `last_fold` timestamps.
    epoch: Instant,
}

// SAFETY: every field but `left` and `hi` is an atomic. Those two are read and written only
// by the thread holding the slot's index (its owner, or the thread about to
// take it over); the next holder of an index happens-after the previous one
// gave it back (the index pool is a mutex), and a slot's initial state is
// published with its bucket (Release/Acquire).
unsafe impl Sync for Slot {}

impl Default for Slot {
    fn default() -> Self {
        Slot::new(false)
    }
}

impl Core {
    pub(super) fn new(initial: u64) -> Self {
        let orphan = Slot::new(true);
        // Relaxed, all three: not shared yet; the AcqRel exchange in
        // `RoughCounter::install` publishes them.
        orphan.total.store(initial, Ordering::Relaxed);
        orphan.folded.store(initial, Ordering::Relaxed);
        // The initial claim is in the tally already: none in flight, or
        // `fold_and_wait` would wait for it for ever.
        orphan.tallied.store(initial, Ordering::Relaxed);
        Core {
            tally: CachePadded::new(AtomicU64::new(initial)),
            slots: SlotTable::new(),
            orphan: CachePadded::new(orphan),
            dropped: AtomicBool::new(false),
            epoch: Instant::now(),
        }
    }

    pub(super) fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Moves `slot`'s unfolded delta into the tally. Any thread may call it,
    /// at any time, concurrently with the owner's adds and other folds.
    ///
    /// If the slot's generation moved between our read of `total` and our
    /// claim, the owner checked in between and may have armed its window
    /// around a newer total, reading `folded` from before our claim: we claim
    /// again, from the total we installed, until a claim sees no new
    /// generation. Each extra round needs another bump: a check by the owner
    /// (at least one count), a takeover or give-back, or an orphan add.
    pub(super) fn fold(&self, slot: &Slot) {
        // Acquire: pairs with the Release bumps (`Slot::begin_generation`,
        // `add_orphan`), so the total read below is no older than the one
        // the bumping thread stored before it.
        let mut seen = slot.armed.load(Ordering::Acquire);
        // Acquire: pairs with the AcqRel claim of the previous fold, so the
        // total read below is no older than the one that fold claimed.
        let mut f = slot.folded.load(Ordering::Acquire);
        loop {
            // Relaxed: coherence after the Acquire above bounds its age; the
            // Release on the tally publishes this read to `approx` readers.
            let t = slot.total.load(Ordering::Relaxed);
            if t == f {
                return;
            }
            // AcqRel: Release so the next fold's Acquire load of `folded`
            // happens-after our read of `total`; Acquire as the load above
            // when we retry, and so that a claim after a bump's RMW on
            // `folded` synchronises with it (see below).
            match slot
                .folded
                .compare_exchange(f, t, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    // Release: pairs with the Acquire load in
                    // `RoughCounter::approx`: an `approx` that sees this add
                    // happens-after our read of `total`, so a following `sum`
                    // reads at least that total (approx ≤ sum for add-only
                    // use).
                    self.tally.fetch_add(t.wrapping_sub(f), Ordering::Release);
                    // Release: pairs with the Acquire loads of `tallied` in
                    // `fold_and_wait`: a waiter that reads this (or a later)
                    // value sees our tally add.
                    slot.tallied.fetch_add(t.wrapping_sub(f), Ordering::Release);
                    // Acquire: pairs with the Release bumps, for the next
                    // round's total. If our claim came after a bump's RMW
                    // on `folded`, it synchronised with it, so this sees
                    // the bump.
                    let now = slot.armed.load(Ordering::Acquire);
                    if now == seen {
                        return;
                    }
                    seen = now;
                    f = t;
                }
                Err(now) => f = now,
            }
        }
    }

    /// Calls `f` on every thread slot (not the orphan).
    fn for_each_thread_slot(&self, mut f: impl FnMut(&Slot)) {
        self.slots.for_each(|s| f(s));
    }

    /// Calls `f` on every slot, then on the orphan slot.
    fn for_each_slot(&self, mut f: impl FnMut(&Slot)) {
        self.for_each_thread_slot(&mut f);
        f(&self.orphan);
    }

    pub(super) fn fold_all(&self) {
        self.for_each_slot(|s| self.fold_and_wait(s));
    }

    /// Folds `slot`, then waits until every claim of it so far, this one's
    /// and any other thread's in flight, has reached the tally, unless the
    /// slot's owner claims more meanwhile (it is adding: nothing to be
    /// exact about). Without the wait, a fold that finds everything claimed
    /// returns while another thread's claim is still on its way to the tally
    /// (an exit fold after `thread::scope`, a `Folder` pass).
    pub(super) fn fold_and_wait(&self, slot: &Slot) {
        self.fold(slot);
        // Acquire: pairs with the claims' AcqRel exchanges of `folded`;
        // every claim up to this value is one we may wait for.
        let target = slot.folded.load(Ordering::Acquire);
        #[cfg(not(shardcount_loom))]
        let mut spins = 0u32;
        // Acquire: pairs with each claim's Release add to `tallied`, made after
        // its tally add; every write of `tallied` is an RMW, so reading the
        // final value synchronises with all of them.
        while slot.tallied.load(Ordering::Acquire) != target {
            // Relaxed: only whether a claim beyond `target` was made.
            if slot.folded.load(Ordering::Relaxed) != target {
                return;
            }
            // The claimant is a few instructions from done, unless it was
            // descheduled: then give it the core.
            crate::primitive::hint::spin_loop();
            #[cfg(not(shardcount_loom))]
            {
                spins += 1;
                if spins > 64 {
                    std::thread::yield_now();
                }
            }
        }
    }

    pub(super) fn sum(&self) -> u64 {
        let mut total = 0u64;
        // Relaxed loads of `total`: coherence alone makes each include every
        // add that happened-before this call (see the module docs).
        self.for_each_slot(|s| total = total.wrapping_add(s.total.load(Ordering::Relaxed)));
        total
    }

    /// Owner only: whether the calling thread has taken `slot` over.
    #[inline]
    pub(super) fn owns(slot: &Slot) -> bool {
        slot.in_use.load(Ordering::Relaxed)
    }

    /// The calling thread's first add to `slot` (the one at its index):
    /// takes it over. Returns `false` if the thread is exiting and cannot
    /// promise to hand the slot back, in which case nothing changed.
    /// `shared` is a strong reference for the thread's exit registry.
    pub(super) fn take_over(shared: Arc<Self>, slot: &Slot, index: usize) -> bool {
        let now = shared.now();
        if !crate::thread::slots::on_exit(Box::new(Exit { shared, index })) {
            return false;
        }
        slot.in_use.store(true, Ordering::Relaxed);
        slot.last_fold.store(now, Ordering::Relaxed);
        true
    }

    /// Folds the slot and marks it free, for the next thread to hold its index.
    fn release_slot(&self, slot: &Slot) {
        // A new generation first: a claim of an older total that lands after
        // our fold is then claimed again, so the free slot ends fully folded.
        slot.begin_generation();
        self.fold_and_wait(slot);
        // An empty window: the next holder's first add takes the slot over.
        slot.width.store(0, Ordering::Relaxed);
        slot.set_hi(0);
        // Release: pairs with `live_slots`'s Acquire, so a slot read as free
        // has its exit fold visible.
        slot.in_use.store(false, Ordering::Release);
    }

    /// An add with no slot to go to: count it on the shared orphan slot, with
    /// a locked add, and fold it at once.
    #[cold]
    pub(super) fn add_orphan(&self, n: u64) {
        // Relaxed: one RMW; `fold` reads it back in program order, and the
        // Release bump below publishes it to other folds.
        self.orphan.total.fetch_add(n, Ordering::Relaxed);
        // Release: pairs with the Acquire loads of `armed` in `fold`, as an
        // owner's bump does; an RMW since every thread may bump the
        // orphan's generation.
        self.orphan.armed.fetch_add(1, Ordering::Release);
        // Every other add's claim is then either folded over by our fold or
        // claimed again by its own, so the orphan ends fully folded.
        self.orphan.folded_after_bump();
        self.fold(&self.orphan);
    }

    /// Owner only: the slow check of `slot`. Starts a new generation, folds
    /// if the unfolded distance reached `batch` or `timed()` says a timed
    /// fold is due (not called if the batch rule folds), and arms the window
    /// for the next check.
    pub(super) fn check(&self, slot: &Slot, batch: u64, timed: impl FnOnce() -> bool) {
        let mut u = slot.begin_generation();
        if u >= batch || timed() {
            self.fold(slot);
            u = 0;
        }
        slot.arm(u, batch);
    }

    /// How many slots have ever been taken over: one per thread index that
    /// used the counter.
    pub(super) fn slots(&self) -> usize {
        let mut n = 0;
        // Relaxed: a diagnostic; `armed` moves at every takeover.
        self.for_each_thread_slot(|s| n += usize::from(s.armed.load(Ordering::Relaxed) != 0));
        n
    }

    pub(super) fn live_slots(&self) -> usize {
        let mut n = 0;
        self.for_each_thread_slot(|s| {
            // Acquire: pairs with the Release in `release_slot`, so once a
            // slot reads as free, the fold that preceded its release is
            // visible (to `approx` too).
            n += usize::from(s.in_use.load(Ordering::Acquire));
        });
        n
    }
}

/// A thread's promise to hand its slot in one counter back at exit.
struct Exit {
    shared: Arc<Core>,
    index: usize,
}

impl ThreadExit for Exit {
    fn thread_exit(&self, index: usize) {
        debug_assert_eq!(index, self.index);
        if let Some(slot) = self.shared.slots.get(self.index) {
            if Core::owns(slot) {
                self.shared.release_slot(slot);
            }
        }
    }

    fn is_dropped(&self) -> bool {
        self.shared.dropped.load(Ordering::Relaxed)
    }
}
