//! `RoughCounter`: each thread counts in its own slot with no locked
//! instruction; the counts are folded now and then into one global sink that
//! [`approx`](RoughCounter::approx) reads with a single load.
//!
//! # Protocol
//!
//! The counter itself is one pointer, `shared: AtomicPtr<Shared>`: null until
//! first use, then an `Arc<Shared>` turned into a raw pointer, installed once
//! by a compare-exchange (`AcqRel`; readers that dereference it use
//! `Acquire`). `Shared` holds:
//!
//! * `sink: AtomicU64`: the folded counts. Only folds write it, each with one
//!   `fetch_add(.., Release)`; `approx` loads it with `Acquire`.
//! * `head: AtomicPtr<Slot>`: a push-only list of every slot ever created.
//!   A slot is pushed with a `Release` compare-exchange and the list is walked
//!   from an `Acquire` load; slots are freed only when `Shared` is.
//! * `orphan: Slot`: a slot no thread owns, for adds made after the calling
//!   thread's slot table was destroyed (from another thread-local's
//!   destructor). Each such add is a `fetch_add` of its `total`, a bump of
//!   its `armed` (below) and a fold, at once.
//!
//! Each `Slot` holds:
//!
//! * `total: AtomicU64`: the cumulative sum of every add ever made through the
//!   slot. Only the owning thread writes it, with a `Relaxed` load + store (no
//!   locked instruction). It is never reset: when a thread exits, its slot
//!   goes back to a free pool and the next thread to take it continues the
//!   same total. So `sum()` is simply the sum of every slot's `total`; it
//!   never reads the sink and folding cannot make it count anything twice.
//! * `folded: AtomicU64`: the part of `total` already added to the sink.
//!   Any thread may fold any slot: it loads `armed` and `folded` (both
//!   `Acquire`), then `total`, claims the range by a compare-exchange of
//!   `folded` from the old value to the loaded total (`AcqRel`), adds the
//!   difference to the sink, and loads `armed` again (`Acquire`); if that
//!   moved, it claims again from the total it installed (see below). Every
//!   write of `folded` is a read-modify-write. The sink always changes by
//!   exactly what `folded` changed by, so once all folds are finished,
//!   `sink == Σ folded`, and after a final fold, `approx() == sum()`.
//! * `armed: AtomicU64`: the slot's generation. The owner, its only writer,
//!   bumps it (`Relaxed` load, `Release` store) at each slow check, when it
//!   takes the slot and before the fold that gives the slot back, and then
//!   reads `folded` by a `fetch_add(0, Release)`. The orphan's is bumped by every orphan add,
//!   with `fetch_add(1, Release)`, followed by the same read of `folded`.
//! * `in_use: AtomicBool`: whether a thread owns the slot. Taken with a
//!   compare-exchange (`Acquire`) and given back with a `Release` store, so
//!   the next owner sees the last `total` its predecessor wrote.
//! * owner-only bookkeeping (`lo`, `width`, `last_fold`), `Relaxed`.
//!
//! # Why `approx() ≤ sum()` for add-only use
//!
//! A fold reads `total` before its `Release` add to the sink. A thread whose
//! `Acquire` load of the sink sees that add (or a later one: all sink writes
//! are read-modify-writes, so they continue the release sequence) therefore
//! happens-after the fold's read of `total`, and its later `sum()` reads that
//! total or a newer one. The `Acquire`/`AcqRel` chain on `folded` makes each
//! fold read a total no older than the one the previous fold claimed (a
//! fold's second round claims from its own claim to a total it read later),
//! so for add-only use every claimed range is non-negative and the sink never
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
//! # The per-thread cache
//!
//! Each thread keeps a table of `(Arc<Shared>, slot)` entries, one per
//! counter it used, in a thread-local with a destructor (`LOCAL`). The strong
//! reference keeps the slot's memory alive even if the counter is dropped
//! first. A second, `const`-initialised thread-local without a destructor
//! (`FAST`) caches up to four recently used entries, direct-mapped by the
//! counter's address, each as two raw pointers: the counter's `Shared`
//! address (the key) and its slot. The hot path compares the counter's
//! pointer with the key of its way and, on a match, adds to the slot.
//! `LOCAL`'s destructor first clears `FAST`, then folds every slot of the
//! thread and returns it to its counter's free pool.

use crate::primitive::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use crate::primitive::sync::Arc;
use crossbeam_utils::CachePadded;
use std::cell::{Cell, RefCell};
use std::fmt;
use std::ptr;
use std::time::{Duration, Instant};

/// One per-thread slot, padded to its own cache lines by its allocation.
struct Slot {
    /// Cumulative adds through this slot; written only by its owner.
    total: AtomicU64,
    /// The prefix of `total` already moved into the sink.
    folded: AtomicU64,
    /// The slot's generation: bumped when its owner checks, takes or gives
    /// back the slot, and at every orphan add. A fold that sees it move
    /// between its read of `total` and its claim claims again.
    armed: AtomicU64,
    /// Owner-only: the hot path takes the slow check when
    /// `total - lo >= width` (wrapping), i.e. once the total has moved `w`
    /// away from where the last check left it, with `width = 2w - 1`.
    lo: AtomicU64,
    /// Owner-only: see `lo`.
    width: AtomicU64,
    /// Owner-only: nanoseconds after `Shared::epoch` of the last timed fold.
    last_fold: AtomicU64,
    /// Whether a thread owns this slot.
    in_use: AtomicBool,
    /// The next-older slot in the counter's list (null at the end).
    next: AtomicPtr<CachePadded<Slot>>,
}

impl Slot {
    fn new(in_use: bool) -> Self {
        Slot {
            total: AtomicU64::new(0),
            folded: AtomicU64::new(0),
            armed: AtomicU64::new(0),
            lo: AtomicU64::new(0),
            width: AtomicU64::new(0),
            last_fold: AtomicU64::new(0),
            in_use: AtomicBool::new(in_use),
            next: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The owner's add. Returns whether the slow check is due.
    #[inline]
    fn bump(&self, n: u64) -> bool {
        // Relaxed: only the owner writes `total`, so its own last store is
        // what it reads; folds and sums read it without synchronising.
        let t = self.total.load(Ordering::Relaxed).wrapping_add(n);
        // Relaxed: single writer; nothing else is published with it.
        self.total.store(t, Ordering::Relaxed);
        // Relaxed: owner-only bookkeeping.
        t.wrapping_sub(self.lo.load(Ordering::Relaxed)) >= self.width.load(Ordering::Relaxed)
    }

    /// Owner only: starts a new generation and returns the unfolded distance
    /// `|total - folded|` as of then. Every claim of the slot is either in
    /// that distance or, if it lands later, sees the new generation.
    fn begin_generation(&self) -> u64 {
        // Relaxed: only the owner writes `armed`; a new owner sees its
        // predecessor's last store through the `in_use` handoff.
        let g = self.armed.load(Ordering::Relaxed);
        // Release: a fold whose Acquire load reads this generation reads a
        // total no older than the owner's last store before it.
        self.armed.store(g.wrapping_add(1), Ordering::Release);
        let f = self.folded_after_bump();
        // Relaxed: owner reading its own writes.
        let t = self.total.load(Ordering::Relaxed);
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
    /// `Shared::fold`.)
    fn arm(&self, u: u64, batch: u64) {
        debug_assert!(u < batch, "the check folds at a distance of a batch");
        let w = (batch - u)
            .min(batch.div_ceil(2))
            .min(RoughCounter::CHECK_EVERY);
        // Relaxed: owner reading its own writes.
        let t = self.total.load(Ordering::Relaxed);
        // Relaxed: owner-only bookkeeping.
        self.lo.store(t.wrapping_sub(w - 1), Ordering::Relaxed);
        // Relaxed: owner-only bookkeeping.
        self.width.store(2 * w - 1, Ordering::Relaxed);
    }
}

/// What a counter shares with the threads that use it; reference-counted so
/// a thread's cache can outlive the counter.
struct Shared {
    sink: CachePadded<AtomicU64>,
    head: AtomicPtr<CachePadded<Slot>>,
    orphan: CachePadded<Slot>,
    /// Set when the counter is dropped, so caches and folders let go.
    dropped: AtomicBool,
    /// Origin of the owner-only `last_fold` timestamps.
    epoch: Instant,
}

impl Shared {
    fn new(initial: u64) -> Self {
        let orphan = Slot::new(true);
        // Relaxed: not shared yet; the Release publish of `Shared` covers it.
        orphan.total.store(initial, Ordering::Relaxed);
        // Relaxed: as above.
        orphan.folded.store(initial, Ordering::Relaxed);
        Shared {
            sink: CachePadded::new(AtomicU64::new(initial)),
            head: AtomicPtr::new(ptr::null_mut()),
            orphan: CachePadded::new(orphan),
            dropped: AtomicBool::new(false),
            epoch: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Moves `slot`'s unfolded delta into the sink. Any thread may call it,
    /// at any time, concurrently with the owner's adds and other folds.
    ///
    /// If the slot's generation moved between our read of `total` and our
    /// claim, the owner checked in between and may have armed its window
    /// around a newer total, reading `folded` from before our claim: we claim
    /// again, from the total we installed, until a claim sees no new
    /// generation. Each extra round needs another bump: a check by the owner
    /// (at least one count), a takeover or give-back, or an orphan add.
    fn fold(&self, slot: &Slot) {
        // Acquire: pairs with the Release bump, so the total read below is no
        // older than the one the bumping thread stored before it.
        let mut seen = slot.armed.load(Ordering::Acquire);
        // Acquire: pairs with the AcqRel claim of the previous fold, so the
        // total read below is no older than the one that fold claimed.
        let mut f = slot.folded.load(Ordering::Acquire);
        loop {
            // Relaxed: coherence after the Acquire above bounds its age; the
            // Release on the sink publishes this read to `approx` readers.
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
                    // Release: an `approx` that sees this add happens-after
                    // our read of `total`, so a following `sum` reads at
                    // least that total (approx ≤ sum for add-only use).
                    self.sink.fetch_add(t.wrapping_sub(f), Ordering::Release);
                    // Acquire: as the first load of `armed`, for the next
                    // round. If our claim came after a bump's RMW on
                    // `folded`, it synchronised with it, so this sees the
                    // bump.
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

    /// Calls `f` on every thread slot ever created (not the orphan).
    fn for_each_thread_slot(&self, mut f: impl FnMut(&Slot)) {
        // Acquire: pairs with the Release push in `acquire_slot`, so the
        // slots we walk are initialised.
        let mut p = self.head.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: every pointer in the list came from Box::into_raw in
            // `acquire_slot`, and slots are freed only when `Shared` drops.
            let slot: &Slot = unsafe { &*p };
            f(slot);
            // Relaxed: `next` was written before the slot was published by
            // the Release push we synchronised with above, and never changes.
            p = slot.next.load(Ordering::Relaxed);
        }
    }

    /// Calls `f` on every slot ever created, then on the orphan slot.
    fn for_each_slot(&self, mut f: impl FnMut(&Slot)) {
        self.for_each_thread_slot(&mut f);
        f(&self.orphan);
    }

    fn fold_all(&self) {
        self.for_each_slot(|s| self.fold(s));
    }

    fn sum(&self) -> u64 {
        let mut total = 0u64;
        // Relaxed loads of `total`: coherence alone makes each include every
        // add that happened-before this call (see the module docs).
        self.for_each_slot(|s| total = total.wrapping_add(s.total.load(Ordering::Relaxed)));
        total
    }

    /// Takes a free slot, or creates one, for the calling thread.
    fn acquire_slot(&self) -> *const Slot {
        let mut found: *const Slot = ptr::null();
        self.for_each_thread_slot(|s| {
            // Relaxed pre-check avoids a locked op on slots that are busy.
            if found.is_null()
                && !s.in_use.load(Ordering::Relaxed)
                // Acquire: pairs with the Release in `release_slot`, so we
                // continue from the previous owner's last `total`.
                && s.in_use
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                found = s;
            }
        });
        if !found.is_null() {
            return found;
        }
        let new = Box::into_raw(Box::new(CachePadded::new(Slot::new(true))));
        // Relaxed: the Release compare-exchange below publishes it.
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: `new` is ours alone until the exchange succeeds.
            let slot: &Slot = unsafe { &*new };
            // Relaxed: published by the Release exchange below.
            slot.next.store(head, Ordering::Relaxed);
            // Release: publishes the slot's initial state and `next` to the
            // Acquire walks. Relaxed on failure: we only retry.
            match self
                .head
                .compare_exchange(head, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return slot,
                Err(h) => head = h,
            }
        }
    }

    /// Folds the slot and gives it back to the free pool.
    fn release_slot(&self, slot: &Slot) {
        // A new generation first: a claim of an older total that lands after
        // our fold is then claimed again, so the free slot ends fully folded.
        slot.begin_generation();
        self.fold(slot);
        // Release: the next owner's Acquire takeover sees our last `total`.
        slot.in_use.store(false, Ordering::Release);
    }

    /// An add with no slot to go to: count it on the shared orphan slot, with
    /// a locked add, and fold it at once.
    #[cold]
    fn add_orphan(&self, n: u64) {
        // Relaxed: one RMW; `fold` reads it back in program order, and the
        // Release bump below publishes it to other folds.
        self.orphan.total.fetch_add(n, Ordering::Relaxed);
        // Release: as an owner's bump (`Slot::begin_generation`), here an
        // RMW since every thread may bump the orphan's generation.
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
    fn check(&self, slot: &Slot, batch: u64, timed: impl FnOnce() -> bool) {
        let mut u = slot.begin_generation();
        if u >= batch || timed() {
            self.fold(slot);
            u = 0;
        }
        slot.arm(u, batch);
    }

    fn slots(&self) -> usize {
        let mut n = 0;
        self.for_each_thread_slot(|_| n += 1);
        n
    }

    fn live_slots(&self) -> usize {
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

impl Drop for Shared {
    fn drop(&mut self) {
        // Relaxed: `&mut self`: every other access happened-before this.
        let mut p = self.head.load(Ordering::Relaxed);
        while !p.is_null() {
            // SAFETY: each slot came from Box::into_raw in `acquire_slot`, is
            // owned by this list alone and is freed once, here.
            let slot = unsafe { Box::from_raw(p) };
            // Relaxed: as above.
            p = slot.next.load(Ordering::Relaxed);
        }
    }
}

/// How many `(counter, slot)` pairs a thread caches for the hot path,
/// direct-mapped by the counter's address: a thread that bumps a few
/// counters in turn (requests, bytes, errors) keeps all of them on the fast
/// path instead of missing on every switch (a power of two).
const FAST_WAYS: usize = 4;

/// The thread's recently used `(counter, slot)` pairs, way `i` being
/// `keys[i]` and `slots[i]`. Two arrays rather than one of pairs, so that a
/// way is reached by one scaled-index TLS load each, with no multiply.
struct Fast {
    /// The `Shared` address of each way's counter, or `NO_KEY`.
    keys: [Cell<*const Shared>; FAST_WAYS],
    slots: [Cell<*const Slot>; FAST_WAYS],
}

/// A key no `Shared` can have: odd, and not null (the uninitialised counter).
const NO_KEY: *const Shared = ptr::without_provenance(1);

/// The way that caches the counter whose shared block is at `p`.
#[inline]
fn way(p: *const Shared) -> usize {
    // `Shared` is 128-aligned (it holds cache-padded fields), so the bits
    // from 7 up tell blocks apart.
    (p.addr() >> 7) & (FAST_WAYS - 1)
}

impl Fast {
    fn clear(&self) {
        for (k, s) in self.keys.iter().zip(&self.slots) {
            k.set(NO_KEY);
            s.set(ptr::null());
        }
    }
}

struct Entry {
    shared: Arc<Shared>,
    slot: *const Slot,
}

/// The thread's slots, one per counter it has used. Dropped at thread exit.
struct Local {
    entries: RefCell<Vec<Entry>>,
}

impl Local {
    /// The calling thread's slot for `p` (a live counter's `Shared`),
    /// creating it if needed, and makes it the fast-cache entry.
    fn slot_for(&self, p: *const Shared, batch: u64) -> *const Slot {
        let mut entries = self.entries.borrow_mut();
        let slot = match entries.iter().find(|e| Arc::as_ptr(&e.shared) == p) {
            Some(e) => e.slot,
            None => {
                // The fast cache may point at an entry about to be pruned.
                // Ignoring the error: FAST only fails under loom during
                // thread teardown, when there is nothing to clear.
                let _ = FAST.try_with(Fast::clear);
                // Prune counters that were dropped, so a thread that uses
                // many short-lived counters does not grow without bound.
                entries.retain(|e| {
                    // Relaxed: a hint; a late prune only delays freeing.
                    let keep = !e.shared.dropped.load(Ordering::Relaxed);
                    if !keep {
                        // SAFETY: the entry's Arc keeps the slot alive.
                        e.shared.release_slot(unsafe { &*e.slot });
                    }
                    keep
                });
                // SAFETY: the caller holds the counter, whose own reference
                // keeps `p` alive; we add a reference for the cache.
                let shared = unsafe {
                    Arc::increment_strong_count(p);
                    Arc::from_raw(p)
                };
                let slot = shared.acquire_slot();
                // SAFETY: just acquired; its memory lives as long as `shared`.
                let s = unsafe { &*slot };
                // Relaxed: owner-only bookkeeping.
                s.last_fold.store(shared.now(), Ordering::Relaxed);
                // The first check: a new generation (for folds still
                // claiming from the previous owner's time) and a window.
                shared.check(s, batch, || false);
                entries.push(Entry { shared, slot });
                slot
            }
        };
        let _ = FAST.try_with(|f| {
            let w = way(p);
            f.keys[w].set(p);
            f.slots[w].set(slot);
        });
        slot
    }

    /// The calling thread's slot for `p`, if it has one.
    fn find(&self, p: *const Shared) -> Option<*const Slot> {
        self.entries
            .borrow()
            .iter()
            .find(|e| Arc::as_ptr(&e.shared) == p)
            .map(|e| e.slot)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // Later adds on this thread must not use a slot we give away; they
        // miss the cache, find LOCAL gone and go to the orphan slot.
        // Ignoring the error: under loom FAST may already be gone too.
        let _ = FAST.try_with(Fast::clear);
        for e in self.entries.get_mut().drain(..) {
            // SAFETY: the entry's Arc keeps the slot alive.
            e.shared.release_slot(unsafe { &*e.slot });
        }
    }
}

crate::primitive::const_thread_local! {
    static FAST: Fast = Fast {
        keys: [const { Cell::new(NO_KEY) }; FAST_WAYS],
        slots: [const { Cell::new(ptr::null()) }; FAST_WAYS],
    };
}

crate::primitive::const_thread_local! {
    static LOCAL: Local = Local {
        entries: RefCell::new(Vec::new()),
    };
}

/// A `u64` counter whose adds cost about a thread-local add: each thread
/// counts in its own slot, and the slots are folded into one global sink now
/// and then. [`approx`](Self::approx) reads the sink (one load, lags a
/// little); [`sum`](Self::sum) reads every slot (exact).
///
/// Use it for very hot counters that are read rarely or roughly, such as
/// metrics scraped every few seconds. For exact cheap reads, use
/// [`Counter`](crate::Counter).
///
/// Arithmetic is modulo 2<sup>64</sup>, as with `AtomicU64::fetch_add`.
///
/// # When a thread's counts reach the sink
///
/// A thread's unfolded delta is folded into the sink when:
///
/// * **batch:** its magnitude reaches `batch` counts
///   ([`with_batch`](Self::with_batch), default
///   [`DEFAULT_BATCH`](Self::DEFAULT_BATCH));
/// * **interval:** at a check, `interval` has passed since the slot's last
///   timed fold ([`with_interval`](Self::with_interval), default
///   [`DEFAULT_INTERVAL`](Self::DEFAULT_INTERVAL)). The clock is not read on
///   every add: a thread checks it when its count has moved
///   [`CHECK_EVERY`](Self::CHECK_EVERY) (or `batch`, if smaller) since its
///   last check. **A thread that adds rarely, or stops adding, is not folded
///   by the interval rule**; its counts reach the sink when it exits, calls
///   [`flush`](Self::flush), someone calls [`flush_all`](Self::flush_all),
///   or a background [`Folder`](crate::Folder) runs;
/// * **thread exit:** a thread-local destructor folds every slot of the
///   thread and returns the slots for reuse. `JoinHandle::join` waits for
///   thread-local destructors; `std::thread::scope` may return before they
///   have run, so join explicitly when you rely on exit folding.
///
/// # Consistency of reads
///
/// * [`sum`](Self::sum) is **exact**: it adds up every slot, never the sink,
///   so a concurrent fold cannot make it count anything twice. It includes
///   every add that happened-before the call; for add-only use, successive
///   calls by one thread never decrease. Like `Counter::sum` it is not an
///   atomic snapshot while others add. Cost: one load per slot; there are
///   as many slots as the peak number of threads that used the counter at
///   once.
/// * [`approx`](Self::approx) is one load of the sink. For add-only use it
///   never exceeds a `sum` that the same thread calls after it. At an
///   instant when no thread is inside an add to the counter and no fold of
///   it is in progress (a batch or interval fold, `flush`, `flush_all`, a
///   [`Folder`](crate::Folder) pass), it differs from `sum` by at most
///   **live slots × (`batch` − 1)** counts, up or down: each live slot's
///   unfolded delta is below `batch` in magnitude, and an exited thread's is
///   0. An idle thread's delta stays unfolded, within that bound, until
///   something folds it (see above). After every thread that added has
///   exited (and been joined), or after [`flush_all`](Self::flush_all) with
///   no concurrent adds or folds, it is exact.
///
/// # Memory and lifetime
///
/// Nothing is allocated until first use. Then the counter owns a shared
/// block with the sink and one 128-byte slot per thread that is using it at
/// once; slots of exited threads are reused, so memory follows the peak
/// number of concurrent threads, not how many came and went. Each thread
/// holds a reference to the block, so dropping the counter while threads
/// still hold slots is safe: the block is freed when the last of them exits
/// or notices the drop.
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
    /// Null until first use, then an `Arc<Shared>` from `Arc::into_raw`.
    shared: AtomicPtr<Shared>,
    batch: u64,
    /// Nanoseconds; `u64::MAX` means never.
    interval: u64,
}

impl RoughCounter {
    /// The default `batch`: a thread folds once its unfolded delta reaches
    /// this many counts.
    ///
    /// ```
    /// assert_eq!(shardcount::RoughCounter::DEFAULT_BATCH, 1024);
    /// ```
    pub const DEFAULT_BATCH: u64 = 1024;

    /// The default `interval`: 100 ms.
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(shardcount::RoughCounter::DEFAULT_INTERVAL, Duration::from_millis(100));
    /// ```
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

    /// A thread reads the clock for the interval rule when its count on a
    /// counter has moved this many counts (or `batch`, if smaller) since its
    /// last check: for `inc`, once every 256 adds.
    ///
    /// ```
    /// assert_eq!(shardcount::RoughCounter::CHECK_EVERY, 256);
    /// ```
    pub const CHECK_EVERY: u64 = 256;

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
                batch: Self::DEFAULT_BATCH,
                interval: Self::DEFAULT_INTERVAL.as_nanos() as u64,
            }
        }
    }

    crate::primitive::const_fn! {
        /// Sets `batch`: a thread folds into the sink once its unfolded
        /// delta reaches `batch` counts (in either direction). `1` folds on
        /// every add (then every add costs a locked add on the sink).
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
        /// timed fold. `Duration::ZERO` folds at every check;
        /// `Duration::MAX` never reads the clock.
        ///
        /// ```
        /// use shardcount::RoughCounter;
        /// use std::time::Duration;
        /// static HITS: RoughCounter =
        ///     RoughCounter::new().with_interval(Duration::ZERO);
        /// for _ in 0..256 {
        ///     HITS.inc(); // the 256th add checks, and folds
        /// }
        /// assert_eq!(HITS.approx(), 256);
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
    /// Costs a relaxed load and store on the thread's own slot; no locked
    /// instruction and no clock, except at a slow check (see
    /// [`CHECK_EVERY`](Self::CHECK_EVERY)), which costs one locked
    /// instruction on that slot and more if a fold is due.
    ///
    /// ```
    /// let c = shardcount::RoughCounter::new();
    /// c.add(5);
    /// assert_eq!(c.sum(), 5);
    /// ```
    #[inline]
    pub fn add(&self, n: u64) {
        // Relaxed: only compared with this thread's cached key; the slot the
        // key names was reached through an Acquire load on the slow path.
        let p = self.shared.load(Ordering::Relaxed).cast_const();
        let hit = FAST.try_with(|f| {
            let w = way(p);
            if f.keys[w].get() != p {
                return false;
            }
            // SAFETY: FAST holds a key only together with a slot of that
            // counter owned by this thread; LOCAL's entry for it holds an
            // Arc that keeps the slot alive, and clears FAST before letting
            // go of it.
            let slot = unsafe { &*f.slots[w].get() };
            if slot.bump(n) {
                // SAFETY: `p` is this counter's live shared block (it matched).
                self.check(unsafe { &*p }, slot);
            }
            true
        });
        if !matches!(hit, Ok(true)) {
            self.add_slow(n);
        }
    }

    /// Subtracts `n`, wrapping below zero.
    ///
    /// ```
    /// let c = shardcount::RoughCounter::from(10);
    /// c.sub(3);
    /// assert_eq!(c.sum(), 7);
    /// c.sub(8);
    /// assert_eq!(c.sum(), u64::MAX);
    /// assert_eq!(c.sum_i64(), -1);
    /// ```
    #[inline]
    pub fn sub(&self, n: u64) {
        self.add(n.wrapping_neg());
    }

    /// Adds one.
    ///
    /// ```
    /// let c = shardcount::RoughCounter::new();
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
    /// let c = shardcount::RoughCounter::from(1);
    /// c.dec();
    /// assert_eq!(c.sum(), 0);
    /// ```
    #[inline]
    pub fn dec(&self) {
        self.add(u64::MAX);
    }

    /// The owner's slow check: fold by batch or interval, then rearm.
    #[cold]
    #[inline(never)]
    fn check(&self, shared: &Shared, slot: &Slot) {
        shared.check(slot, self.batch, || {
            if self.interval == u64::MAX {
                return false;
            }
            let now = shared.now();
            // Relaxed: owner-only bookkeeping.
            let last = slot.last_fold.load(Ordering::Relaxed);
            let due = now.saturating_sub(last) >= self.interval;
            if due {
                // Relaxed: owner-only bookkeeping.
                slot.last_fold.store(now, Ordering::Relaxed);
            }
            due
        });
    }

    /// First add of this thread to this counter, or a cache miss.
    #[cold]
    #[inline(never)]
    fn add_slow(&self, n: u64) {
        let p = self.shared_or_init();
        // SAFETY: our own reference keeps `p` alive while we are borrowed.
        let shared = unsafe { &*p };
        match LOCAL.try_with(|l| l.slot_for(p, self.batch)) {
            Ok(slot) => {
                // SAFETY: LOCAL's entry holds an Arc keeping the slot alive,
                // and only this thread uses it.
                let slot = unsafe { &*slot };
                if slot.bump(n) {
                    self.check(shared, slot);
                }
            }
            // The thread's slot table is gone (we are in a thread-local
            // destructor at thread exit): count it where it cannot be lost.
            Err(_) => shared.add_orphan(n),
        }
    }

    /// The shared block, if the counter has been used.
    #[inline]
    fn shared(&self) -> Option<&Shared> {
        // Acquire: pairs with the AcqRel install in `shared_or_init`, so the
        // block is initialised before we read it.
        let p = self.shared.load(Ordering::Acquire);
        // SAFETY: non-null means installed from Arc::into_raw; our own
        // reference is released only in `drop`, which takes `&mut self`.
        unsafe { p.as_ref() }
    }

    #[cold]
    fn shared_or_init(&self) -> *const Shared {
        // Acquire: as in `shared`.
        let p = self.shared.load(Ordering::Acquire);
        if !p.is_null() {
            return p;
        }
        self.install(Shared::new(0))
    }

    #[cold]
    fn install(&self, shared: Shared) -> *const Shared {
        let new = Arc::into_raw(Arc::new(shared)).cast_mut();
        // AcqRel on success: Release publishes the block to Acquire loads.
        // Acquire on failure: we go on to use the winner's block.
        match self.shared.compare_exchange(
            ptr::null_mut(),
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => new,
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
    /// while others add. Cost: one load per slot (the peak number of threads
    /// that used the counter at once, plus one).
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
        self.shared().map_or(0, Shared::sum)
    }

    /// [`sum`](Self::sum) as a signed value, for counters that go up and down
    /// around zero.
    ///
    /// ```
    /// let c = shardcount::RoughCounter::new();
    /// c.sub(3);
    /// assert_eq!(c.sum_i64(), -3);
    /// ```
    #[must_use]
    pub fn sum_i64(&self) -> i64 {
        self.sum() as i64
    }

    /// The folded total: one load of the sink.
    ///
    /// Approximate: for add-only use it never exceeds a [`sum`](Self::sum)
    /// the same thread calls after it. At an instant when no thread is inside
    /// an add to the counter and no fold of it is in progress, it is within
    /// [`live_slots`](Self::live_slots) × (`batch` − 1) counts of `sum`,
    /// below it for add-only use, either side with subs. Idle threads' deltas
    /// stay unfolded within that bound until something folds them (see [the
    /// type docs](RoughCounter#when-a-threads-counts-reach-the-sink)). Not
    /// monotonic under a mix of adds and subs. Exact once every thread that
    /// added has exited and been joined, or after [`flush_all`](Self::flush_all)
    /// with no concurrent adds or folds.
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
        // Acquire: pairs with the Release fold, so a later `sum` reads at
        // least the totals this value came from.
        self.shared().map_or(0, |s| s.sink.load(Ordering::Acquire))
    }

    /// Folds the calling thread's unfolded delta into the sink.
    ///
    /// After it, [`approx`](Self::approx) includes every add this thread
    /// made before the call (unless another thread's fold of the same slot is
    /// still in flight; it finishes in a few instructions).
    ///
    /// ```
    /// let c = shardcount::RoughCounter::new();
    /// c.add(7);
    /// c.flush();
    /// assert_eq!(c.approx(), 7);
    /// ```
    pub fn flush(&self) {
        let Some(shared) = self.shared() else { return };
        let p: *const Shared = shared;
        if let Ok(Some(slot)) = LOCAL.try_with(|l| l.find(p)) {
            // SAFETY: LOCAL's entry holds an Arc keeping the slot alive.
            shared.fold(unsafe { &*slot });
        }
    }

    /// Folds every thread's unfolded delta into the sink. Safe while the
    /// owners keep adding: what they add meanwhile is folded now or later,
    /// never lost or counted twice.
    ///
    /// After it, [`approx`](Self::approx) includes every add that
    /// happened-before the call, unless another fold of the same slot was
    /// in flight at the same time. Cost: one fold per slot.
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

    /// How many per-thread slots the counter has allocated: the peak number
    /// of threads that used it at once. A diagnostic; it never shrinks.
    ///
    /// ```
    /// let c = shardcount::RoughCounter::new();
    /// assert_eq!(c.slots(), 0);
    /// c.inc();
    /// assert_eq!(c.slots(), 1);
    /// ```
    #[must_use]
    pub fn slots(&self) -> usize {
        self.shared().map_or(0, Shared::slots)
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
        self.shared().map_or(0, Shared::live_slots)
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
    pub(crate) fn shared_ref(&self) -> SharedRef {
        let p = self.shared_or_init();
        // SAFETY: `p` is alive (we hold our reference); we add one for the
        // caller.
        SharedRef(unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        })
    }
}

/// An opaque strong reference to a counter's shared block, for the
/// background folder.
#[cfg(not(shardcount_loom))]
#[derive(Clone)]
pub(crate) struct SharedRef(Arc<Shared>);

#[cfg(not(shardcount_loom))]
impl SharedRef {
    /// Folds every slot; returns `false` once the counter has been dropped.
    pub(crate) fn fold_all(&self) -> bool {
        // Relaxed: a hint; folding a dropped counter once more is harmless.
        if self.0.dropped.load(Ordering::Relaxed) {
            return false;
        }
        self.0.fold_all();
        true
    }

    /// Whether the counter is still alive (not dropped).
    pub(crate) fn is_live(&self) -> bool {
        // Relaxed: a hint, as in `fold_all`.
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
            // Relaxed: a hint for thread caches and folders to let go; they
            // hold their own references, so nothing depends on seeing it.
            shared.dropped.store(true, Ordering::Relaxed);
        }
    }
}

impl Default for RoughCounter {
    /// Same as [`RoughCounter::new`].
    ///
    /// ```
    /// let c = shardcount::RoughCounter::default();
    /// assert_eq!(c.sum(), 0);
    /// ```
    fn default() -> Self {
        RoughCounter::new()
    }
}

impl From<u64> for RoughCounter {
    /// A counter starting at `n` (already folded: `approx() == n`).
    ///
    /// ```
    /// let c = shardcount::RoughCounter::from(42);
    /// assert_eq!((c.sum(), c.approx()), (42, 42));
    /// ```
    fn from(n: u64) -> Self {
        let c = RoughCounter::new();
        c.install(Shared::new(n));
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
