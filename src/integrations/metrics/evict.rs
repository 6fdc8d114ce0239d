//! Idle-key eviction ([`ShardedLayer::evict_idle_after`]; off by default):
//! [`Evicted`], the entries taken out of the map and folded until freed,
//! and the eviction flag's reads by registration and the caches' sweeps.
//! Like `entry.rs`, it names no `metrics` type: the loom model
//! `loom_models::metrics_evict` runs it.
//!
//! [`ShardedLayer::evict_idle_after`]: super::ShardedLayer::evict_idle_after
//!
//! Protocol (maintainers' notes). Counts never depend on a handle noticing
//! an eviction: an evicted entry is folded until nothing but the pass can
//! reach it. The atomics here only decide when memory is let go of.
//!
//! * `Folded::moved` (under the fold lock) is set by a fold that moved a
//!   delta; the background pass clears it and stamps `Folded::active_at`.
//! * [`Evicted::take_out`] (the pass, after its folds): under the map lock,
//!   for each entry whose fold lock it gets at once (`try_lock`: a fold in
//!   progress may be calling an inner recorder that registers through the
//!   facade) with `moved` clear, `active_at` at least the idle time ago and
//!   no reference outside the layer (`Entry::reachable`, a heuristic on
//!   strong counts, for kept handles' speed only), stores
//!   `Entry::evicted = true`, removes it from the map and pushes it to the
//!   list, all under the three locks. Then, once per pass that evicted,
//!   it moves the count of evicting passes on, with Release.
//! * `Entry::evicted`: written once, by that pass, under the entry's fold
//!   lock. Registration ([`Entry::list`]) reads it under the same lock when
//!   it lists a new handle: an entry evicted since the map lookup is not
//!   used (the lookup is retried and makes a new entry), so no handle is
//!   listed in an entry after it left the map. A cache sweep reads it
//!   without a lock ([`Local::evicted`]), after reading the count with
//!   Acquire ([`Evicted::passes`]): the sweep sees the flag of every entry
//!   evicted by the passes counted. A later eviction moves the count on,
//!   and the thread's next `counter!` (whose hit path compares its cache's
//!   count with [`Evicted::passes_hint`]) takes the slow path and sweeps
//!   again. The count is read before the registration's map lookup, and a
//!   new cache starts with that value.
//! * A sweep (by the cache's owner) retires each handle of an evicted entry
//!   (`Local::retire`: the Release store of 0 after the owner's last store
//!   to `own`) and lets go of it. The entry's next fold reads the 0
//!   (Acquire), folds the word's last growth and drops the handle from its
//!   list. A thread that never calls `counter!` again does the same at its
//!   exit.
//! * The list is folded on every pass and flush (its lock held throughout,
//!   so a flush waits for a concurrent one's folds), like the map's
//!   entries: increments through a cached handle before its sweep, through
//!   a kept `metrics::Counter` (retired or not), or by a registration that
//!   found the entry just before it left the map all reach the inner
//!   counter. An entry leaves the list when `Arc::get_mut` succeeds: no
//!   handle, cache or registration holds it (each `Local` holds its entry,
//!   so its handle list is empty too), and none can again (it is in no
//!   map). `get_mut` synchronises with every other reference's drop (their
//!   Release decrements, its Acquire), and each increment through a
//!   reference is sequenced before its drop, so the last fold, on the
//!   unique entry, takes everything. The list is folded in place, so a
//!   fold that panics leaves every entry in it.
//! * A key counted again after eviction gets a new entry and registers with
//!   the inner recorder again; both entries fold into the inner counter the
//!   recorder hands for the key (the same series for the usual recorders).
//! * Lock order: evicted list, map, fold. `take_out` holds the list over
//!   the map's lock, so an entry is in one or the other at every moment and
//!   no flush misses it; it only tries the fold locks. Folds call the inner
//!   recorder under their fold lock (and the list's), never the map's, so
//!   an inner recorder that registers through the facade takes the map's
//!   lock last.
//! * Loom: `loom_models::metrics_evict` runs this code and `entry.rs`'s:
//!   a pass's `take_out` and folds until unique ownership, racing a cached
//!   handle's owner (increment, sweep, retire) and a kept handle's
//!   increments.

use super::entry::{Entry, Folded, Inner, Local};
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::primitive::sync::{lock, try_lock, Arc, Mutex};
use crate::unwind::FirstPanic;
use crossbeam_utils::CachePadded;
#[cfg(test)]
use std::cell::Cell;
use std::collections::HashMap;
use std::time::{Duration, Instant};

#[cfg(test)]
std::thread_local! {
    /// Evicts keys with handles kept, as a pass racing a `counter!` call
    /// can (`Entry::reachable`); set on the thread running the pass.
    pub(crate) static IGNORE_HANDLES: Cell<bool> = const { Cell::new(false) };
}

/// Entries taken out of the map that a handle may still count into:
/// folded on every pass and flush until the pass holds the only reference.
pub(crate) struct Evicted<I> {
    list: Mutex<Vec<Arc<Entry<I>>>>,
    /// How many passes have evicted counter keys: a thread whose cache saw
    /// an older value sweeps it. Padded: read by every `counter!` hit,
    /// written once per evicting pass, beside locks that registration
    /// writes.
    passes: CachePadded<AtomicU64>,
}

impl<I: Inner> Evicted<I> {
    pub(crate) fn new() -> Self {
        Evicted {
            list: Mutex::new(Vec::new()),
            passes: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Takes out of `map` every key with nothing moved since `idle` before
    /// `now` and no handle outside the caches, and tells the threads'
    /// caches.
    pub(crate) fn take_out<K: Eq + std::hash::Hash, S: std::hash::BuildHasher>(
        &self,
        map: &Mutex<HashMap<K, Arc<Entry<I>>, S>>,
        now: Instant,
        idle: Duration,
    ) {
        // Locked first and held over the map's lock: an entry is always in
        // the map or the list, so no flush misses it.
        let mut list = lock(&self.list);
        let before = list.len();
        let mut map = lock(map);
        map.retain(|_, e| {
            // A fold in progress holds the lock (and calls the inner
            // recorder, which may register through the facade and want
            // the map's lock): that key is busy anyway.
            let Some(folded) = try_lock(&e.fold) else {
                return true;
            };
            let quiet = !folded.moved && now.saturating_duration_since(folded.active_at) >= idle;
            if !quiet || Entry::reachable(e, &folded) {
                return true;
            }
            // Relaxed: registration reads it under the `fold` lock, held
            // here; a cache sweep reads it after an Acquire load of
            // `passes`, which the Release below publishes.
            e.evicted.store(true, Ordering::Relaxed);
            drop(folded);
            list.push(Arc::clone(e));
            false
        });
        // Memory follows the keys in use, not the most there ever were.
        shrink(&mut map);
        drop(map);
        if list.len() != before {
            // Release: a thread that reads this value (Acquire) before its
            // sweep reads every flag stored above.
            self.passes.fetch_add(1, Ordering::Release);
        }
    }

    /// Folds every evicted entry, and frees each one nobody else holds any
    /// more. The list stays locked throughout, so a flush that returns has
    /// waited for the folds of a concurrent one.
    pub(crate) fn fold(&self, panics: &mut FirstPanic) {
        // Also drops the handles retired since the last fold: each holds a
        // reference to the entry.
        fold_listed(&mut lock(&self.list), |e| drop(e.fold()), panics);
    }
}

/// Folds each entry of an evicted list, and lets go of each one the list
/// alone holds, after one more fold. Unique: no handle, cache or
/// registration holds the entry, and none can again (it is in no map);
/// `Arc::get_mut` synchronises with every other reference's drop, so the
/// last fold reads every increment made through one. Until then, every fold
/// takes what was added since the last: nothing lost, nothing twice.
///
/// In place, each fold on its own: a fold that panics (the recorder
/// underneath did, and the fold handed its delta back) keeps its entry
/// listed for the next pass, and the others are folded all the same.
/// Taken out of the list first, the entries not yet folded would go with
/// the unwind, and their counts with them.
pub(super) fn fold_listed<E>(list: &mut Vec<Arc<E>>, fold: impl Fn(&E), panics: &mut FirstPanic) {
    let mut i = 0;
    while i < list.len() {
        let folded = panics.run(|| fold(&list[i])).is_some();
        if folded && Arc::get_mut(&mut list[i]).is_some() && panics.run(|| fold(&list[i])).is_some()
        {
            drop(list.swap_remove(i));
        } else {
            i += 1;
        }
    }
}

impl<I> Evicted<I> {
    /// The evicting passes so far, read before a sweep.
    pub(crate) fn passes(&self) -> u64 {
        // Acquire: pairs with `take_out`'s Release, so a sweep after this
        // read sees the flag of every entry evicted by the passes counted.
        self.passes.load(Ordering::Acquire)
    }

    /// The evicting passes so far, for a `counter!` hit that only compares
    /// it with its cache's.
    pub(super) fn passes_hint(&self) -> u64 {
        // Relaxed: a stale count only puts the sweep off to a later call;
        // the slow path reads it again with `passes`.
        self.passes.load(Ordering::Relaxed)
    }

    /// Lets go of the listed entries' handles, as the recorder's drop does
    /// for the map's (`Entry::let_go_of_handles`).
    pub(super) fn let_go_of_handles(&self) {
        for e in lock(&self.list).iter() {
            e.let_go_of_handles();
        }
    }

    /// How many evicted entries are still held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.list).len()
    }
}

impl<I> Entry<I> {
    /// Registration: a handle owned by the calling thread, listed for the
    /// folds; `None` if the entry was evicted since the map lookup found it
    /// (it is in no map: look again, for a new one). (Not a method on
    /// `&Arc<Self>`: loom's `Arc` cannot be a receiver.)
    pub(crate) fn list(this: &Arc<Self>) -> Option<Arc<Local<I>>> {
        let local = Arc::new(Local::owned(Arc::clone(this)));
        let Some(mut folded) =
            super::entry::fold_lock(std::ptr::from_ref::<Self>(this).cast(), &this.fold)
        else {
            // Registered from inside a fold (the recorder underneath counts
            // its work through the facade) of this entry, whose lock is
            // ours, or of another while this one's is taken. Unlisted and
            // retired, the handle adds to the entry's counter, which the
            // next fold takes.
            local.retire();
            return Some(local);
        };
        // Relaxed: written under this lock.
        if this.evicted.load(Ordering::Relaxed) {
            return None;
        }
        folded.locals.push((Arc::clone(&local), 0));
        Some(local)
    }

    /// Whether anything outside the layer may still hold this entry: a
    /// handle the user kept, or one being handed out or folded right now.
    /// A heuristic under the `fold` lock, not a guarantee: the strong
    /// counts move without our locks (a thread clones its cached handle
    /// with no lock at all). What it gets wrong only keeps a key longer, or
    /// evicts a key with a handle that then counts into the evicted entry,
    /// which is folded until the last handle goes (protocol notes).
    fn reachable(this: &Arc<Self>, folded: &Folded<I>) -> bool {
        #[cfg(test)]
        if IGNORE_HANDLES.with(Cell::get) {
            return false;
        }
        // The map's reference, and one per listed handle.
        Arc::strong_count(this) != 1 + folded.locals.len()
            || folded.locals.iter().any(|(local, _)| {
                // The list's reference, and the owner's cache's unless
                // retired. Relaxed: a stale value only misjudges.
                let cached = if local.0.owner.load(Ordering::Relaxed) == 0 {
                    0
                } else {
                    local.0.cached.load(Ordering::Relaxed)
                };
                Arc::strong_count(local) > 1 + usize::from(cached)
            })
    }
}

impl<I> Local<I> {
    /// Whether this handle's entry was evicted: for its owner's sweep,
    /// after [`Evicted::passes`].
    pub(crate) fn evicted(&self) -> bool {
        // Relaxed: the caller read `passes` with Acquire after the flags it
        // must see were stored; a flag stored later is seen by the sweep
        // after the next count.
        self.0.entry.evicted.load(Ordering::Relaxed)
    }
}

/// Gives back a map's room once it is under a quarter full (keeping twice
/// what it holds), so that its memory follows its keys.
pub(super) fn shrink<K: Eq + std::hash::Hash, V, S: std::hash::BuildHasher>(
    map: &mut HashMap<K, V, S>,
) {
    if map.len() < map.capacity() / 4 {
        map.shrink_to(map.len() * 2);
    }
}
