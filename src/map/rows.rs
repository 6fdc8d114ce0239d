//! The chunks' shard rows: split ahead of a burst, merged back after.

use super::counter_map::CounterMap;
use super::store::CHUNK;
use crate::set::CounterSet;
use crate::shard::merge_all;
use std::hash::Hash;

impl<K: Hash + Eq + Clone + Send + Sync> CounterMap<K> {
    /// Folds the shard rows that contention grew on the map's chunks back
    /// into their base rows and frees them, as
    /// [`Counter::merge`](crate::Counter::merge) does for one counter
    /// (with the same semantics: nothing lost, pending while threads that
    /// added hold it, [`quiesce`](crate::quiesce())): every chunk, and the
    /// overflow counter, in one batch. Returns `true` when every chunk is
    /// back to its base row. Keys, totals and handles are unchanged. A
    /// [`Merger`](crate::Merger) can watch a map (an `Arc` of it or a
    /// `&'static`) and merge it once contention has stayed away.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.add(&"a", 1);
    /// std::thread::scope(|s| {
    ///     let t: Vec<_> = (0..2)
    ///         .map(|_| s.spawn(|| (0..100_000).for_each(|_| m.inc(&"a"))))
    ///         .collect();
    ///     t.into_iter().for_each(|t| t.join().unwrap());
    /// });
    /// // The adders are gone: nothing holds the merge back.
    /// assert!(m.merge());
    /// assert_eq!(m.get(&"a"), Some(200_001));
    /// ```
    pub fn merge(&self) -> bool {
        // Under the lock: no chunk is freed meanwhile. Pinned sections never
        // wait for it (see `unlink`), so the grace periods may run here.
        let w = self.index.lock();
        let mut parts: Vec<_> = self.overflow.merge_part().into_iter().collect();
        for c in 0..w.places.high.div_ceil(CHUNK) {
            if let Some(part) = self.chunk(c).and_then(CounterSet::merge_part) {
                parts.push(part);
            }
        }
        let n = parts.len();
        merge_all(&mut parts) == n
    }

    /// Grows the shard rows of every chunk the map has now to at least `n`,
    /// up to the cap (as [`CounterSet::split`] does for one), instead of waiting for
    /// contention to show: before a burst on keys that exist. Returns the
    /// most rows a chunk has after (0 without a chunk). Chunks made later
    /// start as every chunk does; [`merge`](Self::merge) gives the rows
    /// back.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.add(&"a", 1);
    /// let rows = m.split(4); // 4, or the cap: the cores, to a power of two
    /// assert!((1..=4).contains(&rows));
    /// assert!(m.merge());
    /// assert_eq!(m.get(&"a"), Some(1));
    /// ```
    pub fn split(&self, n: usize) -> usize {
        // Under the lock: no chunk is freed meanwhile.
        let w = self.index.lock();
        (0..w.places.high.div_ceil(CHUNK))
            .filter_map(|c| self.chunk(c))
            .map(|set| set.split(n))
            .max()
            .unwrap_or(0)
    }

    /// Each row's total of every chunk's table (see
    /// `ShardTable::row_totals`), for a `Merger`.
    #[cfg(not(shardcount_loom))]
    pub(crate) fn row_totals(&self, out: &mut Vec<u64>) {
        let w = self.index.lock();
        self.overflow.row_totals(out);
        for c in 0..w.places.high.div_ceil(CHUNK) {
            if let Some(set) = self.chunk(c) {
                set.row_totals(out);
            }
        }
    }
}
