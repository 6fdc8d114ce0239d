//! Reads and takes: one key's, every key's (under the index's lock), the
//! overflow's; the map's size; the map as a `CountFamily`.

use super::counter_map::CounterMap;
use super::handle::CounterHandle;
use super::index;
use super::store::CHUNK;
use crate::primitive::sync::atomic::Ordering;
use crate::primitive::sync::lock;
use crate::set::CounterSet;
use crate::thread::grace;
use std::borrow::Borrow;
use std::hash::Hash;

impl<K: Hash + Eq + Clone + Send + Sync> CounterMap<K> {
    /// `key`'s total, or `None` if it has no counter (never used, or beyond
    /// the bound: then it is in [`overflow`](Self::overflow)). Exact at
    /// quiescence. Creates nothing.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.add(&"a".to_string(), 1);
    /// assert_eq!(m.get("a"), Some(1)); // any borrowed form of the key
    /// assert_eq!(m.get("b"), None);
    /// ```
    #[must_use]
    pub fn get<Q>(&self, key: &Q) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.found(key, |h| h.sum())
    }

    /// Takes `key`'s total, leaving its counter at zero, or `None` if it
    /// has no counter (as [`get`](Self::get); creates nothing). Lossless,
    /// as [`CounterHandle::take`].
    ///
    /// ```
    /// let m = shardcount::CounterMap::<String>::new();
    /// m.add("/about", 3);
    /// assert_eq!(m.take("/about"), Some(3));
    /// assert_eq!(m.get("/about"), Some(0));
    /// assert_eq!(m.take("/blog"), None);
    /// ```
    pub fn take<Q>(&self, key: &Q) -> Option<u64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.found(key, |h| h.take())
    }

    /// Runs `f` on `key`'s counter if it has one, while the key cannot be
    /// freed (a pinned lookup); creates nothing.
    fn found<Q, R>(&self, key: &Q, f: impl FnOnce(CounterHandle<'_>) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let pin = grace::pin();
        let e = self.index.find(&pin, self.hash(key), key)?;
        Some(f(self.place(e.place())))
    }

    /// Every key with its total, in the order keys were first used. Holds
    /// the lock that new keys take throughout (new keys wait; adds and
    /// lookups of interned keys do not). Exact at quiescence.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.add(&"b", 2);
    /// m.add(&"a", 1);
    /// assert_eq!(m.snapshot(), vec![("b", 2), ("a", 1)]);
    /// ```
    #[must_use]
    pub fn snapshot(&self) -> Vec<(K, u64)> {
        self.collect(CounterSet::snapshot_into, owned)
    }

    /// The `n` keys with the largest totals (all keys if fewer), largest
    /// first; keys with equal totals come in any order, so which of them
    /// make the cut is unspecified. Reads as [`snapshot`](Self::snapshot)
    /// does (exact at quiescence) but clones only the keys it returns.
    ///
    /// ```
    /// let m = shardcount::CounterMap::<String>::new();
    /// m.add("/", 50);
    /// m.add("/about", 7);
    /// m.add("/blog", 20);
    /// assert_eq!(
    ///     m.top(2),
    ///     vec![("/".to_string(), 50), ("/blog".to_string(), 20)]
    /// );
    /// assert_eq!(m.top(10).len(), 3);
    /// assert!(m.top(0).is_empty());
    /// ```
    #[must_use]
    pub fn top(&self, n: usize) -> Vec<(K, u64)> {
        self.collect(CounterSet::snapshot_into, |mut all| {
            let largest_first = |a: &(&K, u64), b: &(&K, u64)| b.1.cmp(&a.1);
            if n < all.len() {
                // Everything before position `n` is at least as large as
                // what lands there: the `n` largest, unordered.
                all.select_nth_unstable_by(n, largest_first);
                all.truncate(n);
            }
            all.sort_unstable_by(largest_first);
            owned(all)
        })
    }

    /// Every key with its total, leaving every counter at zero (the keys
    /// stay), losing nothing that other threads add meanwhile: each add is
    /// in exactly one take or stays. The overflow counter is not taken (see
    /// [`take_overflow`](Self::take_overflow)).
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.add(&"a", 1);
    /// assert_eq!(m.take_all(), vec![("a", 1)]);
    /// assert_eq!(m.get(&"a"), Some(0));
    /// ```
    #[must_use]
    pub fn take_all(&self) -> Vec<(K, u64)> {
        // The keys are cloned before any counter is emptied (`collect`
        // calls `before` first): a `clone` that panics leaves every count
        // in the map.
        self.collect_after(
            |entries| entries.map(K::clone).collect::<Vec<K>>(),
            CounterSet::take_all_into,
            |keys, taken| {
                keys.into_iter()
                    .zip(taken.into_iter().map(|(_, v)| v))
                    .collect()
            },
        )
    }

    /// Sets every key's counter to zero (the keys stay), the overflow
    /// counter too: a [`take_all`](Self::take_all) and a
    /// [`take_overflow`](Self::take_overflow) with the totals dropped.
    ///
    /// ```
    /// let m = shardcount::CounterMap::with_max_keys(1);
    /// m.add(&"a", 1);
    /// m.add(&"b", 2); // beyond the bound
    /// m.reset();
    /// assert_eq!((m.get(&"a"), m.overflow(), m.len()), (Some(0), 0, 1));
    /// ```
    pub fn reset(&self) {
        self.collect(CounterSet::take_all_into, |_| ());
        self.overflow.reset();
    }

    /// Reads every chunk with `read_chunk`, pairs the totals with their
    /// keys in index order (the order of first use), and hands them to
    /// `then` while the index is still locked.
    fn collect<R>(
        &self,
        read_chunk: impl Fn(&CounterSet, &mut [u64]),
        then: impl FnOnce(Vec<(&K, u64)>) -> R,
    ) -> R {
        self.collect_after(|_| (), read_chunk, |(), all| then(all))
    }

    /// [`collect`](Self::collect), calling `before` with the keys (in
    /// index order) before any chunk is read, under the same lock.
    fn collect_after<P, R>(
        &self,
        before: impl FnOnce(&mut dyn Iterator<Item = &K>) -> P,
        read_chunk: impl Fn(&CounterSet, &mut [u64]),
        then: impl FnOnce(P, Vec<(&K, u64)>) -> R,
    ) -> R {
        let w = self.index.lock();
        let prepared = before(&mut w.entries().map(|e| &e.key));
        // Under the lock the entries are every key with a counter, in the
        // order of first use (see the protocol notes).
        let mut totals = vec![0u64; w.places.high.div_ceil(CHUNK) * CHUNK];
        for (c, out) in totals.chunks_mut(CHUNK).enumerate() {
            // A freed chunk holds no key.
            if let Some(set) = self.chunk(c) {
                read_chunk(set, out);
            }
        }
        then(
            prepared,
            w.entries().map(|e| (&e.key, totals[e.number()])).collect(),
        )
    }

    /// How many keys have their own counter.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.inc(&1);
    /// m.inc(&2);
    /// m.inc(&1);
    /// assert_eq!(m.len(), 2);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        // Relaxed: a count; a key being interned meanwhile may or may not
        // be in it.
        self.next.load(Ordering::Relaxed)
    }

    /// Whether no key has a counter.
    ///
    /// ```
    /// assert!(shardcount::CounterMap::<u8>::new().is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many keys get their own counter.
    ///
    /// ```
    /// assert_eq!(shardcount::CounterMap::<u8>::with_max_keys(10).max_keys(), 10);
    /// ```
    #[must_use]
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The total of every add for keys beyond the bound.
    ///
    /// ```
    /// let m = shardcount::CounterMap::with_max_keys(0);
    /// m.add(&"a", 3);
    /// assert_eq!(m.overflow(), 3);
    /// ```
    #[must_use]
    pub fn overflow(&self) -> u64 {
        self.overflow.total(0)
    }

    /// Takes the overflow total, leaving it at zero (lossless, as
    /// [`take_all`](Self::take_all)).
    ///
    /// ```
    /// let m = shardcount::CounterMap::with_max_keys(0);
    /// m.add(&"a", 3);
    /// assert_eq!(m.take_overflow(), 3);
    /// assert_eq!(m.overflow(), 0);
    /// ```
    pub fn take_overflow(&self) -> u64 {
        self.overflow.take_at(0)
    }
}

/// The pairs with their keys cloned.
fn owned<K: Clone>(pairs: Vec<(&K, u64)>) -> Vec<(K, u64)> {
    pairs.into_iter().map(|(k, v)| (k.clone(), v)).collect()
}

impl<K: Hash + Eq + Clone + Send + Sync> CounterMap<K> {
    /// Every key with its total, the last eviction's keys included: the
    /// contract's `read_each` (`contract.rs`).
    pub(crate) fn read_each_key(&self, mut f: impl FnMut(&K, u64)) {
        let w = self.index.lock();
        let departed = lock(&self.departed);
        // The last eviction's keys, at their final totals (`evict_idle`):
        // each added to its key's new counter, or on its own.
        let mut gone: std::collections::HashMap<&K, u64> =
            std::collections::HashMap::with_capacity(departed.len());
        for (k, total) in departed.iter() {
            let t = gone.entry(k).or_insert(0);
            *t = t.wrapping_add(*total);
        }
        // A key's entry is made after its chunk exists (`intern`), so
        // every key listed has its counter.
        for e in w.entries() {
            // No hashing while nothing was evicted.
            let before = if gone.is_empty() {
                0
            } else {
                gone.remove(&e.key).unwrap_or(0)
            };
            let total = before.wrapping_add(self.place(e.place()).sum());
            index::callers_code(|| f(&e.key, total));
        }
        for (k, total) in gone {
            index::callers_code(|| f(k, total));
        }
    }
}
