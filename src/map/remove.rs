//! Removal (`remove`, `retain`, `evict_idle`) and the compaction that
//! follows it.

use super::counter_map::CounterMap;
use super::index::{self, Locked, Writer};
use super::store::{Place, CHUNK};
use crate::primitive::sync::atomic::Ordering;
use crate::primitive::sync::lock;
use crate::thread::grace;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// Why keys leave the map (`CounterMap::depart`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gone {
    /// By `evict_idle`: the integrations report them once more.
    Evicted,
    /// By `remove` or `retain`: their series end.
    Removed,
}

/// The departed list a removal will leave (`None`: unchanged), planned
/// before the map changes (`CounterMap::plan_departure`).
struct Departure<K>(Option<Vec<(K, u64)>>);

/// Compaction moves keys once the used chunks' free places reach the keys'
/// count plus this: chunks at most half full, and two chunks' worth to
/// spare, so that no single removal moves keys.
#[cfg(not(shardcount_loom))]
const COMPACT_SLACK: usize = 2 * CHUNK + 1;
/// Models compact two half-full chunks (of 2).
#[cfg(shardcount_loom)]
const COMPACT_SLACK: usize = 0;

impl<K: Hash + Eq + Clone + Send + Sync> CounterMap<K> {
    /// Removes `key` and returns its total, or `None` if it has no counter
    /// (as [`get`](Self::get)). Lossless: each add to `key` is in the
    /// total returned, in an earlier take, or (an add racing the removal,
    /// by a thread that looked the key up after it was unlinked) in the
    /// fresh counter a later add made for it; never lost, never counted
    /// twice. The key's memory (its entry, and its chunk once no key is
    /// left in it) is freed before this returns.
    ///
    /// A key [held](Self::handle) by a handle is not removed: its handles
    /// must keep counting under it. For it, `remove` is a
    /// [`take`](Self::take): it returns the total and leaves the key at
    /// zero.
    ///
    /// Waits for lookups in progress on other threads (up to three grace
    /// periods, each waiting for every pinned read or lookup in the
    /// process, typically microseconds) while holding the lock that new
    /// keys take. Called from inside a [`retain`](Self::retain) or
    /// [`read_each`](crate::CountFamily::read_each) closure on the same map
    /// (it would wait for its own lock), or from a key's `Hash`, `Eq` or
    /// `Borrow` (they run inside lookups), it panics before changing the
    /// map, on any thread and in a thread-local destructor too (a panic out
    /// of a thread-local destructor aborts the process, so catch it there).
    /// A key's `Clone` or `Hash` that panics during the call leaves the map
    /// as it was; a key's `Drop` runs last, after the removal, so if it
    /// panics the total goes with the panic.
    ///
    /// ```
    /// let m = shardcount::CounterMap::<String>::new();
    /// m.add("/old", 3);
    /// assert_eq!(m.remove("/old"), Some(3));
    /// assert_eq!((m.get("/old"), m.len()), (None, 0));
    /// assert_eq!(m.remove("/old"), None);
    ///
    /// let kept = m.handle("/"); // held: stays
    /// kept.add(2);
    /// assert_eq!(m.remove("/"), Some(2));
    /// kept.inc();
    /// assert_eq!(m.get("/"), Some(1));
    /// ```
    pub fn remove<Q>(&self, key: &Q) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let w = self.index.lock();
        let e = self.index.find_locked(&w, hash, key)?;
        if e.is_pinned() {
            return Some(self.place(e.place()).take());
        }
        let pos = e.pos(&w);
        let mut total = 0;
        self.unlink(w, vec![pos], Gone::Removed, |_, t| total = t);
        Some(total)
    }

    /// Keeps only the keys for which `keep(&key, total)` returns `true`,
    /// as `HashMap::retain` does; the others are removed (see
    /// [`remove`](Self::remove): racing adds are in the discarded total or
    /// a fresh counter) and their totals dropped. A key held by a handle
    /// stays and is set to zero instead. Totals are read as
    /// [`get`](Self::get) reads them. `keep` runs under the lock that new
    /// keys take: it may add to the map (a new key's add counts in the
    /// [`overflow`](Self::overflow)); a removal or a whole-map read of it
    /// from there (`snapshot`, `read_each`, `remove`, ...) panics, as it
    /// would wait for this call's own lock. Its adds to another map's new
    /// keys take that map's lock (two threads doing so in opposite orders
    /// would wait for each other, as with any two locks).
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// for k in 0..10u32 {
    ///     m.add(&k, u64::from(k));
    /// }
    /// m.retain(|_, total| total >= 8);
    /// let mut left = m.snapshot();
    /// left.sort();
    /// assert_eq!(left, vec![(8, 8), (9, 9)]);
    /// ```
    pub fn retain(&self, mut keep: impl FnMut(&K, u64) -> bool) {
        let w = self.index.lock();
        let mut victims = Vec::new();
        for e in w.entries() {
            let h = self.place(e.place());
            if index::callers_code(|| keep(&e.key, h.sum())) {
                continue;
            }
            if e.is_pinned() {
                h.reset();
            } else {
                victims.push(e.pos(&w));
            }
        }
        self.unlink(w, victims, Gone::Removed, |_, _| ());
    }

    /// Removes every key whose total has stayed the same for at least
    /// `idle`, as seen by calls to this method, and returns each with its
    /// final total (losslessly, as [`remove`](Self::remove)). Until the
    /// next call, the integrations (which read through the map's
    /// `read_each`) still report each evicted key at its final total: a
    /// scrape after the eviction reports what the key gained since the
    /// scrape before. A key that comes back is reported at that total plus
    /// its new counter for as long as it stays (until it is evicted again,
    /// when the two are reported together once more, or removed, when its
    /// series ends), so an exported total never falls while its key is in
    /// use. At the next call a key not back yet leaves the list and starts
    /// from zero when it returns: if it returns before a scrape saw it
    /// gone, its exported total falls (a negative delta for the
    /// [`Exporter`](crate::export::Exporter)).
    /// Call it periodically, less often than the map is scraped: the first
    /// call that sees a key (or a new total) notes the time; a later call
    /// `idle` or more after that evicts the key if its total is still the
    /// same. A key held by a handle is never evicted. Adds that sum to zero
    /// between two calls look untouched.
    ///
    /// ```
    /// use std::time::Duration;
    /// let m = shardcount::CounterMap::new();
    /// m.add(&"quiet", 1);
    /// m.add(&"busy", 1);
    /// assert!(m.evict_idle(Duration::ZERO).is_empty()); // notes both
    /// m.add(&"busy", 1); // changed: noted again, not evicted
    /// assert_eq!(m.evict_idle(Duration::ZERO), vec![("quiet", 1)]);
    /// assert_eq!((m.get(&"quiet"), m.get(&"busy")), (None, Some(2)));
    /// ```
    pub fn evict_idle(&self, idle: Duration) -> Vec<(K, u64)> {
        let idle = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        let w = self.index.lock();
        // Read under the lock: the times noted never go back.
        let now = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        let mut victims = Vec::new();
        for e in w.entries() {
            if e.is_pinned() {
                continue;
            }
            let total = self.place(e.place()).sum();
            let [last, since] = &e.seen;
            // Relaxed: read and written under the lock only.
            let noted = since.load(Ordering::Relaxed);
            if noted == u64::MAX || last.load(Ordering::Relaxed) != total {
                last.store(total, Ordering::Relaxed);
                since.store(now, Ordering::Relaxed);
            } else if now.saturating_sub(noted) >= idle {
                victims.push(e.pos(&w));
            }
        }
        let mut out = Vec::with_capacity(victims.len());
        self.unlink(w, victims, Gone::Evicted, |k, t| out.push((k, t)));
        out
    }

    /// Plans the list of departed keys the integrations report
    /// (`read_each_key`) once the keys `gone` leave the map, under the map's
    /// lock `w` so that no key comes back meanwhile:
    /// * evicted: the list is `gone`, each at its final total plus what the
    ///   list held for it (it had come back since the eviction before, and
    ///   its series carried that total), and every key the list held that
    ///   is back in the map, at what it held: a series never falls while
    ///   its key is in use;
    /// * removed: the list less `gone`'s keys: their series end.
    ///
    /// Planned before the map changes, because it runs the keys' code
    /// (hashing, comparing, cloning), which may panic: a panic then leaves
    /// the map, its counts and the list as they were.
    /// [`depart`](Self::depart) applies it once the final totals are taken.
    fn plan_departure(&self, w: &Writer<K>, gone: &[&K], why: Gone) -> Departure<K> {
        let departed = lock(&self.departed);
        if departed.is_empty() && why == Gone::Removed {
            return Departure(None);
        }
        // Hashing, comparing and cloning keys under the lock, as
        // `read_each_key` does: with the thread still marked as holding a
        // map's lock (no `callers_code`), so that what this allocates, or
        // the keys' code adds, from a global allocator counting with a map
        // goes to the overflow and never waits for another map's lock.
        let mut held: HashMap<&K, u64> = HashMap::with_capacity(departed.len());
        for (k, t) in departed.iter() {
            let h = held.entry(k).or_insert(0);
            *h = h.wrapping_add(*t);
        }
        let mut next = Vec::new();
        for &k in gone {
            let before = held.remove(k).unwrap_or(0);
            if why == Gone::Evicted {
                next.push((k.clone(), before));
            }
        }
        match why {
            Gone::Evicted if !held.is_empty() => {
                for e in w.entries() {
                    if let Some(t) = held.remove(&e.key) {
                        next.push((e.key.clone(), t));
                    }
                }
            }
            Gone::Evicted => {}
            Gone::Removed => {
                next = departed
                    .iter()
                    .filter(|(k, _)| held.contains_key(k))
                    .cloned()
                    .collect();
            }
        }
        Departure(Some(next))
    }

    /// Applies a [`plan_departure`](Self::plan_departure) for keys whose
    /// final totals are `totals` (in the plan's order), running no code of
    /// the keys'. Returns the list it replaced, for the caller to drop once
    /// the lock is let go (a key's `drop` is the caller's code).
    #[must_use]
    fn depart(&self, plan: Departure<K>, totals: &[u64], why: Gone) -> Vec<(K, u64)> {
        let Departure(Some(mut next)) = plan else {
            return Vec::new();
        };
        if why == Gone::Evicted {
            for ((_, t), total) in next.iter_mut().zip(totals) {
                *t = t.wrapping_add(*total);
            }
        }
        std::mem::replace(&mut *lock(&self.departed), next)
    }

    /// Removes the keys at positions `victims` (found under `w`, none
    /// held, each once) and hands each key with its final total to
    /// `each`: unlinks them, waits out every lookup that may still use
    /// them, takes their counters and frees them (and chunks left empty),
    /// compacts, and only then, with the lock let go, runs `each` (and so
    /// the keys' `drop`): no code of the caller's runs while the map is
    /// half changed.
    fn unlink(
        &self,
        mut w: Locked<'_, K>,
        victims: Vec<usize>,
        why: Gone,
        mut each: impl FnMut(K, u64),
    ) {
        if victims.is_empty() {
            if why == Gone::Evicted {
                let plan = self.plan_departure(&w, &[], why);
                let old = self.depart(plan, &[], why);
                drop(w);
                drop(old);
            }
            return;
        }
        // Before changing anything: the grace period below would panic
        // with the keys unlinked but their counters not yet taken, and the
        // keys' code, which the plan runs, may panic.
        grace::assert_outside();
        let plan = {
            let keys: Vec<&K> = victims.iter().map(|&pos| &w.at(pos).key).collect();
            self.plan_departure(&w, &keys, why)
        };
        // Release: before the tombstones, whose Release stores a lookup
        // that misses the key reads, so such a miss sees room for it.
        self.next.store(w.len() - victims.len(), Ordering::Release);
        let unlinked = self.index.unlink(&mut w, &victims);
        // Every lookup that found a victim was pinned; new ones miss it.
        // After this, nobody adds to the victims' counters: their takes
        // below are final. Pinned sections never wait for the lock held
        // here.
        grace::wait();
        // SAFETY: the grace period began after the unlink, and has ended.
        let gone = unsafe { self.index.free(unlinked) };
        let mut empty = Vec::new();
        let totals: Vec<u64> = gone
            .iter()
            .map(|e| self.empty_place(&mut w, e.number(), &mut empty))
            .collect();
        for c in empty {
            self.free_chunk(c);
        }
        self.compact(&mut w);
        // `gone` is in the order of `victims`, as the plan.
        let old = self.depart(plan, &totals, why);
        drop(w);
        drop(old);
        for (e, total) in gone.into_iter().zip(totals) {
            each(e.key, total);
        }
    }

    /// Takes place number `s`'s total (final: nobody adds to it any more)
    /// and gives the place back, noting its chunk in `empty` if that chunk now
    /// holds no key. Should the take leave a residue (its table could not
    /// allocate the baselines a take of an owned row needs), the residue is
    /// counted in the total and the place is never reused, so it is neither
    /// lost nor handed to another key.
    fn empty_place(&self, w: &mut Writer<K>, s: usize, empty: &mut Vec<usize>) -> u64 {
        let h = self.numbered(s);
        let taken = h.take();
        let rest = h.sum();
        if rest == 0 {
            empty.extend(w.places.give_back(s));
        }
        taken.wrapping_add(rest)
    }

    /// Moves keys out of the highest chunks into free places of lower ones
    /// once the chunks without a held key are less than half full (and
    /// more than two chunks' worth is free there), then frees the emptied
    /// chunks: removed keys scattered over many chunks would otherwise keep
    /// them all. Held keys stay where their handles point, and a chunk
    /// holding one is left as it is.
    ///
    /// A move stores the key's new place into its entry (`Release`; the
    /// place's counter is zero and its chunk allocated); after a grace
    /// period no add reaches the old place, whose total is then taken and
    /// added to the new one. Meanwhile a lookup of the key may read the new
    /// counter without the counts still to be moved: nothing is lost, and
    /// whole-map reads (under the lock) never see the move half done. No
    /// code of `K`'s runs.
    fn compact(&self, w: &mut Writer<K>) {
        // Only chunks no handle holds a key of can be emptied: with one
        // held key in every chunk, every removal sorted every key and
        // freed nothing (a review measured 1,500 times the cost).
        let (mut used, mut keys) = (0, 0);
        for (&k, &h) in w.places.keys.iter().zip(&w.places.held) {
            if k > 0 && h == 0 {
                used += 1;
                keys += k;
            }
        }
        if used * CHUNK - keys < keys + COMPACT_SLACK {
            return;
        }
        #[cfg(all(test, not(shardcount_loom)))]
        tests::PASSES.with(|p| p.set(p.get() + 1));
        let held = &w.places.held;
        let mut movable: Vec<(usize, usize)> = w
            .entries()
            .filter(|e| held[e.number() / CHUNK] == 0)
            .map(|e| (e.number(), e.pos(w)))
            .collect();
        movable.sort_unstable_by_key(|m| std::cmp::Reverse(m.0));
        let mut moves = Vec::new();
        for (from, pos) in movable {
            match w.places.free.first() {
                Some(&to) if to / CHUNK < from / CHUNK => {
                    w.places.free.remove(&to);
                    w.places.keys[to / CHUNK] += 1;
                    moves.push((pos, from, to));
                }
                _ => break,
            }
        }
        if moves.is_empty() {
            return;
        }
        for &(pos, _, to) in &moves {
            let place = Place {
                chunk: self.ensure_chunk(to / CHUNK),
                i: to % CHUNK,
            };
            w.at(pos).move_to(place, to);
        }
        grace::wait();
        let mut empty = Vec::new();
        for (_, from, to) in moves {
            let moved = self.empty_place(w, from, &mut empty);
            self.numbered(to).add(moved);
        }
        for c in empty {
            self.free_chunk(c);
        }
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::super::store::CHUNK;
    use crate::CounterMap;
    use std::cell::Cell;

    std::thread_local! {
        /// Compaction passes past the trigger on this thread.
        pub(super) static PASSES: Cell<usize> = const { Cell::new(0) };
    }

    /// With a held key in every chunk no chunk can be freed, so removals
    /// never start a compaction (each sorted every key, under the lock
    /// new keys take, and freed nothing); once the held chunks are few,
    /// the sparse rest compacts as before.
    #[test]
    fn chunks_that_hold_a_held_key_start_no_compaction() {
        let m: CounterMap<usize> = CounterMap::unbounded();
        let chunks = 20;
        for k in 0..chunks * CHUNK {
            m.inc(&k);
        }
        let held: Vec<_> = (0..chunks).map(|c| m.handle(&(c * CHUNK))).collect();
        for k in (0..chunks * CHUNK).filter(|k| k % CHUNK != 0) {
            assert_eq!(m.remove(&k), Some(1));
        }
        assert_eq!((PASSES.get(), m.allocated_chunks()), (0, chunks));
        // New keys fill the held chunks' free places, then ten chunks of
        // their own; thinned out, those compact.
        let (start, fill) = (chunks * CHUNK, chunks * (CHUNK - 1));
        for k in start..start + fill + 10 * CHUNK {
            m.inc(&k);
        }
        assert_eq!(m.allocated_chunks(), chunks + 10);
        for k in (start + fill..start + fill + 10 * CHUNK).filter(|k| k % 10 != 0) {
            assert_eq!(m.remove(&k), Some(1));
        }
        assert!(PASSES.get() > 0);
        // Within the slack: two chunks' worth free, and one.
        assert!(
            m.allocated_chunks() <= chunks + 4,
            "{}",
            m.allocated_chunks()
        );
        drop(held);
    }
}
