//! Adds by key and `handle`: a lock-free lookup, else the key interned
//! under the index's lock.

use super::counter_map::CounterMap;
use super::handle::{CounterHandle, IntoKey};
use super::index::{self, Entry, Writer};
use super::store::{Place, CHUNK};
use crate::primitive::sync::atomic::Ordering;
use crate::thread::grace;
use std::borrow::Borrow;
use std::hash::Hash;

impl<K: Hash + Eq + Clone + Send + Sync> CounterMap<K> {
    fn overflow_handle(&self) -> CounterHandle<'_> {
        CounterHandle {
            set: &self.overflow,
            i: 0,
        }
    }

    /// The counter for `key` (or any borrowed form of it, `&str` for a
    /// `String` key), created (at zero) if the key is new: only then is the
    /// key made owned. For a key beyond [`max_keys`](Self::max_keys), the
    /// overflow counter. Keep it to add without hashing.
    ///
    /// ```
    /// let m = shardcount::CounterMap::<String>::new();
    /// let h = m.handle("jobs"); // no `String` unless "jobs" is new
    /// h.inc();
    /// assert_eq!(m.len(), 1);
    /// assert_eq!(m.get("jobs"), Some(1));
    /// ```
    ///
    /// A handle *holds* its key: the key keeps its counter until the map
    /// drops, whatever [`remove`](Self::remove), [`retain`](Self::retain)
    /// or [`evict_idle`](Self::evict_idle) are asked, so every add through
    /// a handle is counted under its key (those calls take its total
    /// instead; see [`remove`](Self::remove)). For keys that come and go,
    /// add by key. A handle made while the map was full is the overflow
    /// counter's, and stays so after removals make room (adds by key then
    /// give the key a counter of its own).
    #[inline]
    pub fn handle<'q, Q>(&self, key: &'q Q) -> CounterHandle<'_>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        &'q Q: IntoKey<K>,
    {
        let hash = self.hash(key);
        {
            let pin = grace::pin();
            if let Some(e) = self.index.find(&pin, hash, key) {
                if e.is_pinned() {
                    // A pinned entry is never freed before the map.
                    return self.place(e.place());
                }
            }
        }
        self.missed(hash, key, true, |h| h)
    }

    /// Runs `f` on `key`'s counter (created if new; the overflow counter
    /// beyond the bound) while the key cannot be freed, without holding
    /// the key: how adds by key count. Always inlined: outlined, the
    /// call cost a by-key add 25 instructions more (callgrind, no LTO).
    #[inline(always)]
    fn with_counter<'a, 'q, Q, R>(&'a self, key: &'q Q, f: impl FnOnce(CounterHandle<'a>) -> R) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        &'q Q: IntoKey<K>,
    {
        let hash = self.hash(key);
        {
            let pin = grace::pin();
            if let Some(e) = self.index.find(&pin, hash, key) {
                return f(self.place(e.place()));
            }
        }
        // Unpinned: `missed` may wait for the index's lock, which a
        // removal holds while it waits for pinned sections to end.
        self.missed(hash, key, false, f)
    }

    /// After a lock-free miss (or, for `hold`, a find of a key not held
    /// yet): runs `f` on the overflow counter if the map is full, else on
    /// the key's counter, interned (held if `hold`) or found under the
    /// lock, while the lock or a pin keeps it.
    #[cold]
    #[inline(never)]
    fn missed<'a, 'q, Q, R>(
        &'a self,
        hash: u64,
        key: &'q Q,
        hold: bool,
        f: impl FnOnce(CounterHandle<'a>) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        &'q Q: IntoKey<K>,
    {
        #[cfg(all(test, not(shardcount_loom)))]
        tests::after_miss();
        // Two cases where the key is looked for once more, lock-free, and
        // the overflow counter takes the add if it is not there:
        // * this thread holds this map's lock (an add from code run under
        //   it), or a global allocator counting with the map is called
        //   while this thread allocates under any map's lock or in one of
        //   the crate's slow paths (`thread::reentry`, which may run
        //   inside a lookup's pinned section): interning would wait for
        //   ever for the lock (or, across maps, for another thread doing
        //   the same) or an insert's grace period, and it allocates. A
        //   handle needs the lock to hold its key, so it is the
        //   overflow's. The same inside a pinned section (a key's `Eq`
        //   run by a lookup, adding to another map): the lock's holder may
        //   be waiting for a grace period, which waits for this section.
        // * the map is full. Acquire: pairs with the Release store in
        //   `intern`. The key may have taken the last index since the
        //   miss; `next` is stored only after its entry is published, so
        //   once it reads full, the look below sees every key that has a
        //   counter and is final.
        if index::writing()
            || crate::thread::reentry::inside()
            || self.index.held_here()
            || grace::inside()
            || (!hold && self.next.load(Ordering::Acquire) >= self.max_keys)
        {
            let pin = grace::pin();
            return match self.index.find(&pin, hash, key) {
                Some(e) if !hold || e.is_pinned() => f(self.place(e.place())),
                _ => f(self.overflow_handle()),
            };
        }
        let mut w = self.index.lock();
        // Another thread may have interned it since the miss.
        if let Some(e) = self.index.find_locked(&w, hash, key) {
            let newly = hold && !e.is_pinned();
            if newly {
                // Relaxed: under the lock, which every removal takes
                // before it reads the flag.
                e.pinned.store(true, Ordering::Relaxed);
            }
            let (place, number) = (e.place(), e.number());
            if newly {
                w.places.hold(number);
            }
            return f(self.place(place));
        }
        match self.intern(&mut w, hash, key, hold) {
            Some(p) => f(self.place(p)),
            // Filled since the check above, by other keys (the look under
            // the lock missed), or full for a handle.
            None => f(self.overflow_handle()),
        }
    }

    /// Interns a key that the look under `w` missed: `None` if the map is
    /// full.
    fn intern<'q, Q>(&self, w: &mut Writer<K>, hash: u64, key: &'q Q, hold: bool) -> Option<Place>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        &'q Q: IntoKey<K>,
    {
        // Relaxed: `next` is stored only under this lock.
        let n = self.next.load(Ordering::Relaxed);
        if n >= self.max_keys {
            return None;
        }
        // Owned first: a panicking `into_key` (`clone`) must leave nothing
        // half done.
        let key = key.into_key();
        let number = w.places.take();
        if hold {
            w.places.hold(number);
        }
        let place = Place {
            chunk: self.ensure_chunk(number / CHUNK),
            i: number % CHUNK,
        };
        self.index
            .insert(w, Entry::new(hash, key, place, number, hold));
        // Release: pairs with the Acquire in `missed`: the entry is
        // published before the count that includes it.
        self.next.store(n + 1, Ordering::Release);
        Some(place)
    }

    /// Adds `n` to `key`'s counter (created if new; the overflow counter
    /// beyond the bound): one lock-free lookup, then the add.
    /// `key` may be any borrowed form of `K`; it is made owned only when
    /// it is new (see [`handle`](Self::handle)).
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.add(&"a", 2);
    /// m.add(&"a", 3);
    /// assert_eq!(m.get(&"a"), Some(5));
    ///
    /// let paths = shardcount::CounterMap::<String>::new();
    /// paths.add("/about", 2); // a `&str` for a `String` key
    /// assert_eq!(paths.get("/about"), Some(2));
    /// ```
    pub fn add<'q, Q>(&self, key: &'q Q, n: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        &'q Q: IntoKey<K>,
    {
        self.with_counter(key, |h| h.add(n));
    }

    /// Adds one to `key`'s counter (see [`add`](Self::add)).
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.inc(&'x');
    /// assert_eq!(m.get(&'x'), Some(1));
    ///
    /// let paths = shardcount::CounterMap::<String>::new();
    /// paths.inc("/about");
    /// assert_eq!(paths.get("/about"), Some(1));
    /// ```
    pub fn inc<'q, Q>(&self, key: &'q Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        &'q Q: IntoKey<K>,
    {
        self.with_counter(key, |h| h.add(1));
    }

    /// Subtracts `n` from `key`'s counter, wrapping below zero (created if
    /// new; the overflow counter beyond the bound; see [`add`](Self::add)).
    ///
    /// ```
    /// let m = shardcount::CounterMap::<String>::new();
    /// m.add("open", 3);
    /// m.sub("open", 1);
    /// assert_eq!(m.get("open"), Some(2));
    /// ```
    pub fn sub<'q, Q>(&self, key: &'q Q, n: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        &'q Q: IntoKey<K>,
    {
        self.with_counter(key, |h| h.sub(n));
    }

    /// Subtracts one from `key`'s counter, wrapping below zero (see
    /// [`sub`](Self::sub)).
    ///
    /// ```
    /// let m = shardcount::CounterMap::<String>::new();
    /// m.add("open", 3);
    /// m.dec("open");
    /// assert_eq!(m.get("open"), Some(2));
    /// ```
    pub fn dec<'q, Q>(&self, key: &'q Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        &'q Q: IntoKey<K>,
    {
        self.with_counter(key, |h| h.dec());
    }
}

/// Unit tests that need to act between two steps of `handle`.
#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::CounterMap;
    use std::cell::RefCell;

    thread_local! {
        /// Run once, right after the next lookup miss on this thread.
        static AFTER_MISS: RefCell<Option<Box<dyn FnOnce()>>> = const { RefCell::new(None) };
    }

    pub(super) fn after_miss() {
        if let Some(f) = AFTER_MISS.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    /// The key takes the map's last index between this thread's lookup
    /// miss and its "map full" check: the add must still reach the key's
    /// counter, not the overflow.
    #[test]
    fn a_key_interned_between_the_miss_and_the_full_check_keeps_its_add() {
        let m: &'static CounterMap<u32> = Box::leak(Box::new(CounterMap::with_max_keys(1)));
        AFTER_MISS.with(|h| *h.borrow_mut() = Some(Box::new(move || m.add(&7, 1))));
        m.add(&7, 2);
        assert_eq!((m.get(&7), m.overflow()), (Some(3), 0));
    }

    /// What a global allocator counting with the map does when called
    /// from the crate's own allocation: an add by a new key made while
    /// the thread holds the map's lock, or inside a slow path, counts in
    /// the overflow (waiting would never end) and interns nothing; a key
    /// the map holds still gets its add. Afterwards, keys intern again.
    #[test]
    fn a_new_key_added_under_the_lock_or_inside_a_slow_path_counts_in_the_overflow() {
        let m: &'static CounterMap<u32> = Box::leak(Box::new(CounterMap::new()));
        m.add(&1, 1);
        // On a thread of its own, so that a wait fails the test.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _w = m.index.lock();
            m.add(&2, 10); // the lock is this thread's
            m.add(&1, 100);
            m.handle(&3).add(10_000); // the overflow's handle
            m.handle(&1).add(100_000); // held by no handle yet: the same
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("an add under the map's lock waited for it");
        {
            let _inside = crate::thread::reentry::enter().expect("not inside yet");
            m.add(&4, 1000);
        }
        assert_eq!((m.len(), m.get(&1), m.overflow()), (1, Some(101), 111_010));
        m.add(&2, 5);
        assert_eq!((m.len(), m.get(&2)), (2, Some(5)));
    }

    /// Code the map runs under its lock (`retain`'s closure, `read_each`'s):
    /// its adds to another map's new keys intern them as anywhere else;
    /// its adds to the locked map's own new keys count in the overflow
    /// (they would wait for the lock their own thread holds).
    #[test]
    fn adds_from_a_retain_closure_intern_elsewhere_and_never_wait_here() {
        use crate::contract::CountFamily;
        let m: &'static CounterMap<u32> = Box::leak(Box::new(CounterMap::new()));
        let copy: CounterMap<u32> = CounterMap::new();
        m.add(&1, 1);
        m.add(&2, 2);
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            m.retain(|_, _| {
                m.add(&9, 1); // new to the locked map
                true
            });
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("an add from retain's closure waited for the map's lock");
        assert_eq!((m.len(), m.get(&9), m.overflow()), (2, None, 2));
        m.read_each(|k, v| copy.add(k, v));
        m.retain(|k, v| {
            copy.add(&(k + 10), v);
            true
        });
        let mut keys = copy.snapshot();
        keys.sort_unstable();
        assert_eq!(keys, [(1, 1), (2, 2), (11, 1), (12, 2)]);
        assert_eq!(copy.overflow(), 0);
    }

    /// While the crate holds a map's lock (where it allocates), an add by
    /// a new key to *another* map counts in that map's overflow: two
    /// threads allocating under two maps' locks must not wait for each
    /// other. The caller's code run there is unmarked, and the mark comes
    /// back after it, also from nested calls.
    #[test]
    fn under_a_maps_lock_a_new_key_of_another_map_counts_in_its_overflow() {
        use super::index::{callers_code, writing};
        let a: CounterMap<u32> = CounterMap::new();
        let b: CounterMap<u32> = CounterMap::new();
        {
            let _w = a.index.lock();
            assert!(writing());
            b.add(&1, 3);
            callers_code(|| {
                assert!(!writing());
                let _v = b.index.lock();
                assert!(writing());
                callers_code(|| assert!(!writing()));
                assert!(writing());
            });
            assert!(writing());
        }
        assert!(!writing());
        assert_eq!((b.len(), b.overflow()), (0, 3));
        b.add(&1, 4);
        assert_eq!((b.len(), b.get(&1)), (1, Some(4)));
    }
}
