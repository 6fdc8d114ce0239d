//! A counter key's [`Entry`] and the owned handles ([`Local`]) that count
//! into it, and the fold that moves both into the inner recorder's counter.
//! Nothing here names a `metrics` type (the inner counter is any
//! [`Inner`]), so the loom model `loom_models::metrics_evict` runs it.
//!
//! Protocol (maintainers' notes):
//!
//! * `Entry::fold: Mutex<Folded>` is held while a key's delta is taken and
//!   handed to the inner counter (`take`, or `sum` less the sum folded
//!   before, then `add`), and while `absolute` does that and then calls the
//!   inner `absolute`. It holds the sum folded so far (used by
//!   `RoughCounter` entries). So a flush that returns has waited for any
//!   fold of the same key already in progress: the inner counter then holds
//!   every increment that happened-before the flush. For a `RoughCounter`,
//!   successive sums under the lock never decrease (every slot's total only
//!   grows, and a read that happens-after another read of the same word
//!   sees the same or a later value), so each delta is what was added in
//!   between: nothing is counted twice.
//! * A fold whose call into the inner recorder panics (`renew` or `add`)
//!   adds its delta back to the key's counter and leaves the renewal due
//!   before the panic goes on: the next fold hands the delta on, once. (A
//!   recorder that panics after counting an increment would count that
//!   delta twice; one that panics before, as a refused registration does,
//!   loses and repeats nothing.)
//! * While a fold calls the inner recorder, its thread is marked as folding
//!   that entry (`hand_on`). A registration of the same key from inside
//!   the call (a recorder counting its own work through the facade) gets
//!   an unlisted, retired handle, which adds to the entry's counter
//!   instead of waiting for the fold lock its own thread holds (and which
//!   registration leaves out of the thread's cache, so that it never holds
//!   the key against eviction). An `absolute` from there is kept in
//!   `deferred_absolute`, which the same fold passes on after the call
//!   returns (a few rounds; the rest goes to the next fold). The marks
//!   are a stack: folds nest when a key's recorder sets another key.
//! * A thread inside any fold waits for another key's fold lock only
//!   [`FOLD_WAIT`] ([`fold_lock`]): another thread may hold it and wait,
//!   from inside its own fold, for a lock this thread holds (each key's
//!   recorder setting the other's key). Past that it registers and defers
//!   as for its own key: the fold in progress or the next one hands the
//!   value on, after taking the key's delta again (so the increments
//!   counted before a deferred `absolute` go first).
//! * A `Local` has `owner` (the id of the thread whose cache holds it, from
//!   a process-wide sequence, never reused; 0 once retired) and `own`, which
//!   only the owner writes. An increment from any other thread (the handle
//!   was sent) adds to the entry's counter. The entry lists its cached
//!   `Local`s in its fold state with the word each had at the last fold; a
//!   fold adds every word's growth.
//! * Retiring: when the owner's cache is dropped (thread exit, or its
//!   recorder is gone) or swept (eviction), it stores 0 in `owner` with
//!   Release, after its last store to `own` (same thread). A fold that
//!   reads 0 with Acquire therefore reads the final word, folds its growth
//!   and drops the `Local` from the list. Later increments, by anyone, go to
//!   the entry.
//! * Entry and Local point at each other; dropping the recorder clears the
//!   lists after its last flush ([`Entry::let_go_of_handles`]), so both are
//!   freed.
//!
//! Orderings: `retire`'s Release store of 0 and the fold's Acquire load of
//! `owner` are the one pairing. Everything else is Relaxed: `own` has one
//! writer, its owner, and a fold that must see an increment (a flush after
//! it) happens-after it, so coherence gives it that value or a later one;
//! only the owner stores its own id in `owner` or replaces it, and ids are
//! never reused, so a thread comparing its id reads its own latest store or
//! a value that is not its id; `cached` feeds a heuristic
//! (`Entry::reachable`, in `evict.rs`).

use crate::counter::Counter;
#[cfg(not(shardcount_loom))]
use crate::merger::Quiet;
use crate::primitive::const_thread_local;
use crate::primitive::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use crate::primitive::sync::{lock, try_lock, Arc, Mutex, MutexGuard};
use crate::rough::RoughCounter;
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::time::Instant;

/// The inner recorder's counter for a key, as a fold hands it deltas
/// (`metrics::Counter` in the layer; a plain word in the loom model).
pub(crate) trait Inner {
    /// Adds what a fold took.
    fn add(&self, delta: u64);

    /// Asks the recorder underneath for the key's counter again, before the
    /// first delta after a quiet pass: it may have forgotten an idle series
    /// (an exporter's idle timeout), and a forgotten handle shows nothing.
    fn renew(&mut self) {}

    /// Passes an `absolute` on, after the deltas taken before it.
    fn absolute(&self, _value: u64) {}
}

/// A key's fold state, as [`hand_on`] uses it.
pub(crate) trait Handing {
    /// The recorder underneath's handle for the key.
    type Inner;
    /// The handle, and the background passes since a fold last moved
    /// anything (from 1, the next call renews the handle first).
    fn parts(&mut self) -> (&mut Self::Inner, &mut u32);
    /// Registers the key with the recorder underneath again.
    fn renew(inner: &mut Self::Inner);
}

impl<I: Inner> Handing for Folded<I> {
    type Inner = I;
    fn parts(&mut self) -> (&mut I, &mut u32) {
        (&mut self.inner, &mut self.quiet_passes)
    }
    fn renew(inner: &mut I) {
        inner.renew();
    }
}

/// Hands something to the recorder underneath: `hand` on `state`'s
/// handle, renewed first if a quiet pass came since the last delta (the
/// count then cleared). If the recorder panics, `undo` puts back what
/// `hand` had not handed on, the renewal stays due, and the panic goes on.
/// `entry` is the key's entry, whose fold lock (holding `state`) the
/// caller holds: the thread is marked as folding it meanwhile
/// ([`folding`]).
pub(crate) fn hand_on<S: Handing>(
    entry: *const (),
    state: &mut S,
    hand: impl FnOnce(&mut S::Inner),
    undo: impl FnOnce(),
) {
    let _mark = Folding::enter(entry);
    let (inner, quiet_passes) = state.parts();
    let due = std::mem::take(quiet_passes) > 0;
    let handed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if due {
            S::renew(inner);
        }
        hand(inner);
    }));
    if let Err(panic) = handed {
        undo();
        *quiet_passes = (*quiet_passes).max(u32::from(due));
        std::panic::resume_unwind(panic);
    }
}

/// How many nested folds a thread's marks record: a recorder underneath
/// that sets another key from inside a fold nests one (key A's fold calls
/// B's `absolute`, whose fold may call A's).
const MARKS: usize = 8;

const_thread_local! {
    /// The entries whose fold locks this thread holds while it calls the
    /// recorder underneath ([`hand_on`]), outermost first: the first
    /// `FOLDS` of them (up to `MARKS`).
    static FOLDING: [Cell<*const ()>; MARKS] = [const { Cell::new(std::ptr::null()) }; MARKS];
}

const_thread_local! {
    /// How many folds this thread is inside (see `FOLDING`).
    static FOLDS: Cell<usize> = Cell::new(0);
}

/// Marks the calling thread as folding an entry, until dropped (on
/// unwinding too).
struct Folding(usize);

impl Folding {
    fn enter(entry: *const ()) -> Folding {
        // Gone only in thread-local destructors after its own: no mark.
        let depth = FOLDS.try_with(|d| d.replace(d.get() + 1)).unwrap_or(0);
        if depth < MARKS {
            let _ = FOLDING.try_with(|f| f[depth].set(entry));
        }
        Folding(depth)
    }
}

impl Drop for Folding {
    fn drop(&mut self) {
        let _ = FOLDS.try_with(|d| d.set(self.0));
        if self.0 == 0 {
            let _ = WAITED_OUT.try_with(|w| w.set(false));
        }
    }
}

/// Whether the calling thread holds `entry`'s fold lock, calling the
/// recorder underneath: a registration or `absolute` of the same key from
/// there (a recorder that counts its own work through the facade) must not
/// wait for that lock.
pub(super) fn folding(entry: *const ()) -> bool {
    let depth = FOLDS.try_with(Cell::get).unwrap_or(0).min(MARKS);
    FOLDING
        .try_with(|f| f[..depth].iter().any(|m| m.get() == entry))
        .unwrap_or(false)
}

/// `entry`'s fold lock `m`, or `None` where waiting for it could
/// deadlock: this thread holds it ([`folding`] `entry`), or holds another
/// entry's and `m` stays taken for [`FOLD_WAIT`] (its holder may be
/// waiting, from inside its own fold, for a lock this thread holds). With
/// `None` the caller leaves its work to the entry's fold in progress or
/// the next one.
pub(super) fn fold_lock<'a, T>(entry: *const (), m: &'a Mutex<T>) -> Option<MutexGuard<'a, T>> {
    if folding(entry) {
        return None;
    }
    if FOLDS.try_with(Cell::get).unwrap_or(0) == 0 {
        return Some(lock(m));
    }
    // Loom: no waiting (its models never nest folds). Once a wait ran
    // out, the rest of this call into the recorder only tries: it may call
    // the facade many times, each on a lock that stays taken.
    if cfg!(shardcount_loom) || WAITED_OUT.try_with(Cell::get).unwrap_or(true) {
        return try_lock(m);
    }
    let start = Instant::now();
    loop {
        if let Some(held) = try_lock(m) {
            return Some(held);
        }
        if start.elapsed() >= FOLD_WAIT {
            let _ = WAITED_OUT.try_with(|w| w.set(true));
            #[cfg(test)]
            RAN_OUT.with(|n| n.set(n.get() + 1));
            return None;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
std::thread_local! {
    /// How many of this thread's waits in [`fold_lock`] ran out (tests).
    pub(super) static RAN_OUT: Cell<usize> = const { Cell::new(0) };
}

const_thread_local! {
    /// Whether a wait in [`fold_lock`] ran out during this thread's
    /// outermost call into the recorder underneath (cleared when it ends).
    static WAITED_OUT: Cell<bool> = Cell::new(false);
}

/// How long a thread inside a fold waits for another key's fold lock
/// before it defers instead: once per call into the recorder underneath
/// (after a wait ran out, that call's later facade calls defer at once; a
/// fold makes a few such calls, one per deferred round). Another fold
/// usually holds the lock far shorter; waiting keeps a deferred `absolute`
/// from being passed on after increments the same thread made after it (a
/// fold passes on the delta, then the `absolute`).
const FOLD_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// How many times a fold passes on what the recorder underneath deferred
/// from inside it (each pass may defer more) before it leaves the rest to
/// the next fold.
pub(super) const DEFERRED_ROUNDS: usize = 4;

/// What counts a key's increments.
pub(super) enum Backing {
    Exact(Counter),
    Rough(RoughCounter),
}

/// One counter key: its shardcount counter, the words of the threads that
/// count it in a handle of their own, and the inner recorder's counter.
pub(crate) struct Entry<I> {
    counter: Backing,
    /// Held while a delta moves to the inner counter (protocol notes
    /// above), which it holds.
    pub(super) fold: Mutex<Folded<I>>,
    /// Set once, by the pass that takes the entry out of the map (under
    /// this entry's `fold` lock); never cleared (`evict.rs`).
    pub(super) evicted: AtomicBool,
    /// The largest `absolute` made from inside this entry's own fold (the
    /// recorder underneath setting the key it is being handed), which could
    /// not take the fold lock its thread held; the next fold passes it on.
    /// 0: none (an `absolute` of 0 never raises a counter). std's atomic
    /// even under loom: the models make no `absolute`.
    deferred_absolute: std::sync::atomic::AtomicU64,
}

/// What an entry has folded so far, and where to.
pub(crate) struct Folded<I> {
    /// The inner recorder's counter.
    pub(super) inner: I,
    /// Background passes since a fold last moved a delta: from 1, the next
    /// delta renews `inner` first.
    pub(super) quiet_passes: u32,
    /// The `RoughCounter`'s sum at the last fold.
    rough: u64,
    /// The owned handles (see [`Local`]) and each one's word at the last
    /// fold. A retired handle is folded once more, then dropped from here.
    pub(super) locals: Vec<(Arc<Local<I>>, u64)>,
    /// A fold moved a delta since the last background pass looked.
    pub(super) moved: bool,
    /// The last background pass that saw a delta moved (or the entry's
    /// creation): the key's idle time runs from here.
    pub(super) active_at: Instant,
    /// When contention left the key's counter (as a `Merger` tells; loom
    /// builds no `Merger`).
    #[cfg(not(shardcount_loom))]
    pub(super) quiet: Quiet,
}

impl<I> Folded<I> {
    fn new(inner: I) -> Self {
        Folded {
            inner,
            quiet_passes: 0,
            rough: 0,
            locals: Vec::new(),
            moved: false,
            active_at: Instant::now(),
            #[cfg(not(shardcount_loom))]
            quiet: Quiet::new(Instant::now()),
        }
    }
}

impl<I> Entry<I> {
    /// A key backed by a [`RoughCounter`] if `rough`, else a [`Counter`],
    /// folding into `inner`.
    pub(crate) fn new(rough: bool, inner: I) -> Self {
        Entry {
            counter: if rough {
                Backing::Rough(RoughCounter::new())
            } else {
                Backing::Exact(Counter::new())
            },
            fold: Mutex::new(Folded::new(inner)),
            evicted: AtomicBool::new(false),
            deferred_absolute: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Adds to the key's counter: an increment that no owned word takes.
    #[inline]
    pub(super) fn add(&self, value: u64) {
        match &self.counter {
            Backing::Exact(c) => c.add(value),
            Backing::Rough(c) => c.add(value),
        }
    }

    /// What counts the key's increments.
    pub(super) fn backing(&self) -> &Backing {
        &self.counter
    }

    /// Drops the owned handles from the list: each holds the entry, so
    /// neither is freed while both are listed. For the recorder's drop,
    /// after its last flush.
    pub(super) fn let_go_of_handles(&self) {
        lock(&self.fold).locals.clear();
    }

    /// How many owned handles are listed.
    #[cfg(test)]
    pub(super) fn handles(&self) -> usize {
        lock(&self.fold).locals.len()
    }
}

impl<I: Inner> Entry<I> {
    /// Moves the key's delta into the inner counter; returns with the fold
    /// lock held.
    pub(crate) fn fold(&self) -> MutexGuard<'_, Folded<I>> {
        self.fold_locked(lock(&self.fold))
    }

    /// [`fold`](Self::fold) with the fold lock taken: `folded`.
    pub(crate) fn fold_locked<'a>(
        &'a self,
        mut folded: MutexGuard<'a, Folded<I>>,
    ) -> MutexGuard<'a, Folded<I>> {
        self.hand_delta_then(&mut folded, self.take_deferred());
        // An `absolute` deferred meanwhile (made from inside the calls
        // above, or by a thread inside another key's fold) is passed on
        // now, after the delta counted before it: each round takes the
        // delta again first.
        for _ in 0..DEFERRED_ROUNDS {
            let absolute = self.take_deferred();
            if absolute == 0 {
                break;
            }
            self.hand_delta_then(&mut folded, absolute);
        }
        folded
    }

    /// The deferred `absolute` (0: none), cleared.
    fn take_deferred(&self) -> u64 {
        // Acquire: pairs with `defer_absolute`'s Release, so the delta
        // taken after this holds every increment made before the deferral.
        self.deferred_absolute
            .swap(0, std::sync::atomic::Ordering::Acquire)
    }

    /// Takes the key's delta (the counter's, and each listed handle's
    /// growth) and hands it to the inner counter, then `absolute` if not 0.
    fn hand_delta_then(&self, folded: &mut Folded<I>, absolute: u64) {
        let mut delta = match &self.counter {
            Backing::Exact(c) => c.take(),
            Backing::Rough(c) => {
                let sum = c.sum();
                let delta = sum.wrapping_sub(folded.rough);
                folded.rough = sum;
                delta
            }
        };
        folded.locals.retain_mut(|(local, seen)| {
            // Acquire: pairs with `retire`'s Release, so a retired handle's
            // word is read with its owner's last store.
            let retired = local.0.owner.load(Ordering::Acquire) == 0;
            let word = local.0.own.load(Ordering::Relaxed);
            delta = delta.wrapping_add(word.wrapping_sub(*seen));
            *seen = word;
            !retired
        });
        if delta == 0 && absolute == 0 {
            return;
        }
        let added = std::cell::Cell::new(delta == 0);
        let hand = |i: &mut I| {
            if delta != 0 {
                i.add(delta);
                added.set(true);
            }
            if absolute != 0 {
                i.absolute(absolute);
            }
        };
        // A panic puts back what was not handed on (the call that panicked
        // counted as not handed): the next fold renews and hands it on.
        let undo = || {
            if !added.get() {
                self.add(delta);
            }
            if absolute != 0 {
                self.defer_absolute(absolute);
            }
        };
        hand_on(std::ptr::from_ref(self).cast(), folded, hand, undo);
        folded.moved = true;
    }

    /// Keeps `value` for the entry's fold in progress or its next one to
    /// pass on as an `absolute` (the largest, if several): for an
    /// `absolute` whose fold lock could not be taken (`fold_lock`).
    pub(super) fn defer_absolute(&self, value: u64) {
        // Release: the fold that takes it (Acquire) then takes every
        // increment made before it.
        self.deferred_absolute
            .fetch_max(value, std::sync::atomic::Ordering::Release);
    }
}

const_thread_local! {
    /// The calling thread's id for owned handles: 0 until it first owns
    /// one, then unique in the process (never reused, unlike the addresses
    /// and indexes of exited threads). No destructor: readable while the
    /// thread's other thread-locals are being destroyed.
    static THREAD_ID: Cell<u64> = Cell::new(0);
}

/// The calling thread's id, taking one on first use.
fn own_thread_id() -> u64 {
    THREAD_ID.with(|id| {
        if id.get() == 0 {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
            // Relaxed: only uniqueness matters.
            id.set(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        }
        id.get()
    })
}

/// A thread's own handle to an entry, cached by that thread and cloned by
/// each of its `counter!` calls.
///
/// Its owner counts in `own` with a load and a store (no locked
/// instruction: no other thread writes the word); any other thread the
/// handle was sent to adds to the entry's counter. Padded, so the
/// handle's reference count and word share a line with no other thread's.
pub(crate) struct Local<I>(pub(super) CachePadded<Owned<I>>);

pub(crate) struct Owned<I> {
    /// The owner's [`own_thread_id`]; 0 once the owner's cache is gone
    /// (`retire`): from then on every increment goes to the entry.
    pub(super) owner: AtomicU64,
    /// What the owner counted: written by the owner only, read by folds.
    pub(super) own: AtomicU64,
    /// How many references the owner's cache holds (0 to 2: its map and
    /// its front table), for `Entry::reachable`. Written by the owner when
    /// it caches the handle, before any eviction can concern it.
    pub(super) cached: AtomicU8,
    pub(super) entry: Arc<Entry<I>>,
}

impl<I> Local<I> {
    /// A handle owned by the calling thread.
    pub(super) fn owned(entry: Arc<Entry<I>>) -> Self {
        Local(CachePadded::new(Owned {
            owner: AtomicU64::new(own_thread_id()),
            own: AtomicU64::new(0),
            cached: AtomicU8::new(0),
            entry,
        }))
    }

    /// The entry this handle counts into.
    pub(super) fn entry(&self) -> &Arc<Entry<I>> {
        &self.0.entry
    }

    /// Notes how many references the owner's cache holds (`cached`).
    pub(super) fn set_cached(&self, refs: u8) {
        self.0.cached.store(refs, Ordering::Relaxed);
    }

    /// Whether the handle was retired (or made retired: unlisted).
    pub(super) fn is_retired(&self) -> bool {
        // Relaxed: the caller made it, on this thread.
        self.0.owner.load(Ordering::Relaxed) == 0
    }

    /// Sends this handle's later increments to the entry. Called by the
    /// owner only, after its last increment to `own`.
    pub(crate) fn retire(&self) {
        // Release: a fold that reads 0 also reads the owner's last store
        // to `own`, and folds it once more before letting the handle go.
        self.0.owner.store(0, Ordering::Release);
    }

    /// Counts `value`: in `own` if the calling thread owns the handle,
    /// else in the entry's counter.
    #[inline]
    pub(crate) fn increment(&self, value: u64) {
        let me = THREAD_ID.with(Cell::get);
        if me != 0 && self.0.owner.load(Ordering::Relaxed) == me {
            let own = &self.0.own;
            own.store(
                own.load(Ordering::Relaxed).wrapping_add(value),
                Ordering::Relaxed,
            );
        } else {
            self.0.entry.add(value);
        }
    }
}
