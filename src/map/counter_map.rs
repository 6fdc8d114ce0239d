//! `CounterMap` itself: its fields, which the files beside it extend with
//! its methods (the protocol notes are in the `map` module docs).

use super::hasher::KeyedState;
use super::index::Index;
use super::store::{Chunk, SEGMENTS};
use crate::primitive::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use crate::primitive::sync::Mutex;
use crate::set::CounterSet;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::time::Instant;

/// A map from keys to exact counters, each created on the key's first use.
///
/// Each key is interned once to a counter place in chunks of
/// [`CounterSet`] counters that never move; [`handle`](Self::handle)
/// returns a [`CounterHandle`] whose adds go straight to the counter, no
/// hashing, no lock: about the cost of a `CounterSet::add`.
/// [`add`](Self::add) by key hashes the key and looks it up in a lock-free
/// index (a key already interned takes no lock and no locked instruction;
/// the lookup marks a word of its own thread so that a removal can wait
/// for it), then does the same add. Only a key's first use takes a lock.
///
/// [`CounterHandle`]: super::handle::CounterHandle
///
/// # Keys that come and go
///
/// [`remove`](Self::remove), [`retain`](Self::retain) and
/// [`evict_idle`](Self::evict_idle) (keys whose total has not moved for a
/// while, for exporters that would otherwise report a dead series for
/// ever) free a key's memory. An add racing a removal is counted exactly
/// once: in the total the removal returns, or in a fresh counter for the
/// key. A key for which a [`handle`](Self::handle) was made is *held*: it
/// keeps its counter until the map drops, and those calls take (or reset)
/// its total instead of removing it, so a handle never counts into a
/// counter nobody reads.
///
/// # Bound
///
/// At most [`max_keys`](Self::max_keys) keys get their own counter (65,536
/// for [`new`](Self::new), any number with
/// [`with_max_keys`](Self::with_max_keys)). Adds for further keys are
/// counted in one overflow counter ([`overflow`](Self::overflow)): never
/// dropped, and memory stays bounded whatever keys arrive. The overflow
/// has no key, so the integrations, which export members by key, do not
/// export it: read it with `overflow()` (or move it with
/// [`take_overflow`](Self::take_overflow) into a counter you export) and
/// watch it, as a map that overflows is under-reporting its keys.
/// [`unbounded`](Self::unbounded) sets no bound: memory grows with every
/// distinct key.
///
/// # Memory
///
/// The bound costs nothing: memory follows the keys the map holds. An
/// empty map is a table of 16 bin pointers, a lock and a table of 61
/// segment pointers. Counters come in chunks of 127, each a `CounterSet`
/// of 1,152 bytes while never contended (9 lines of 128 bytes: 8 bytes
/// per counter, one word for the chunk's contention mark and 64 bytes no
/// thread writes), allocated with the chunk's first key; chunk
/// pointers in segments of doubling sizes (8, 16, 32, ... pointers), each
/// allocated with its first chunk. Each key is once in the index: the
/// key, its hash, place number, chunk address, position and eviction notes (56
/// bytes besides the key), one pointer in the list of keys, and 2 to 4
/// bins of 8 bytes in the index's table (at most half full; up to 5
/// after many removals, before it shrinks). A contended chunk grows shard
/// rows of 1,152 bytes (2, then doubling up to the cap, older rows kept): about
/// 8 bytes × (1 + 2 × cap) per counter of that chunk only, kept until the
/// chunk is freed or the map is merged ([`merge`](Self::merge), or a
/// [`Merger`](crate::Merger) watching the map).
///
/// Removing a key frees its entry at once; a chunk is freed when its last
/// key leaves. Keys evicted by [`evict_idle`](Self::evict_idle) are kept,
/// with their final totals, until its next call (the integrations report
/// them one last time). Once removals leave the chunks in use less than half full,
/// the next removal moves keys (not held ones) down into free places so
/// that whole chunks empty and are freed. Measured: 90,000 of 100,000
/// keys removed frees 89% to 90% of the memory the keys took
/// (`tests/merge_alloc.rs`).
///
/// # Hostile keys
///
/// Keys are hashed with a fast keyed hash (a folded multiply over 16 bytes
/// a step) whose seeds are drawn from std's `RandomState` for every map:
/// without the seeds, no key stream can be planned to collide. What a
/// stream from outside can cost, at worst:
///
/// * Keys beyond the bound: each add hashes, misses (two probes of a table
///   at most half full) and counts in the [`overflow`](Self::overflow)
///   counter; no lock, no allocation, nothing lost.
/// * Keys that share a hash (possible only with the seeds, or with a key
///   type whose `Hash` ignores its data): an add compares with every
///   interned key of that hash before it. A new key, or one beyond the
///   bound, is looked up twice (lock-free, then again under the lock or
///   once the map is full), so an add costs up to `2 × max_keys`
///   comparisons; memory is unchanged, counts stay exact.
///
/// So a bound caps both memory and the length of any probe.
///
/// # Reads
///
/// As for [`CounterSet`]: exact at quiescence; under concurrent adds not a
/// snapshot of one instant; [`take`](Self::take) and
/// [`take_all`](Self::take_all) lose nothing. While a removal moves keys
/// (see *Memory*), a lookup of a moving key ([`get`](Self::get),
/// [`take`](Self::take)) may miss counts still to be moved (they are
/// moved, not lost); whole-map reads wait for the move to end.
///
/// # In a global allocator
///
/// Adds by a key the map holds allocate nothing and may come from a
/// `#[global_allocator]`. A key's first add interns it under the map's
/// lock, and that allocates. So an add that would intern a key (a new
/// key's, or a [`handle`](Self::handle)'s for a key no handle holds yet)
/// never waits for a lock its own thread may hold: made while its thread
/// holds this map's lock (from [`retain`](Self::retain)'s closure, say),
/// or from inside the crate's own allocation on its thread (an allocator
/// counting with the map, called while its thread holds any map's lock,
/// or runs a key's `Clone`, `Hash`, `Eq` or `Drop` under one, or an add
/// takes a slow path), or from a key's `Hash`, `Eq` or `Borrow` run by a
/// lookup of any map (whose pinned section a lock's holder may be waiting
/// out), it counts in the [`overflow`](Self::overflow) counter, and a
/// handle made then is the overflow's. Every add is
/// counted once; for exact per-key counts, add the map's keys before the
/// allocator counts with it. Adds to *other* maps from `retain`'s or
/// `read_each`'s closure intern as anywhere else, taking those maps'
/// locks; a removal or a whole-map read of the *same* map from there (or
/// from a key's own code) panics: it would wait for the lock its own call
/// holds. So does one of *any* map from a key's `Eq` or `Borrow` run by a
/// lookup: the lock's holder may be in a removal waiting out that
/// lookup.
///
/// # Example
///
/// ```
/// use shardcount::CounterMap;
///
/// let hits: CounterMap<&str> = CounterMap::new();
/// let home = hits.handle(&"/");
/// std::thread::scope(|s| {
///     for _ in 0..2 {
///         s.spawn(|| {
///             for _ in 0..1000 {
///                 home.inc(); // no hashing, no lock
///             }
///             hits.add(&"/about", 1);
///         });
///     }
/// });
/// assert_eq!(hits.get(&"/"), Some(2000));
/// let mut all = hits.snapshot();
/// all.sort();
/// assert_eq!(all, vec![("/", 2000), ("/about", 2)]);
/// ```
pub struct CounterMap<K> {
    /// Interned keys (see the protocol notes).
    pub(super) index: Index<K>,
    /// Hashes keys for `index`.
    pub(super) hasher: KeyedState,
    /// How many keys have a counter (at most `max_keys`): stored under the
    /// index's lock, after a new key's entry is published and before a
    /// removed key's is unlinked.
    pub(super) next: AtomicUsize,
    /// Segment `b`: null or `segment_len(b)` chunk pointers (see the
    /// protocol notes).
    pub(super) segments: [AtomicPtr<AtomicPtr<Chunk>>; SEGMENTS],
    pub(super) max_keys: usize,
    pub(super) overflow: CounterSet,
    /// The clock eviction passes read their times from.
    pub(super) born: Instant,
    /// The members' label name, for the integrations.
    pub(crate) label: [&'static str; 1],
    /// The keys the last `evict_idle` call evicted, with their final
    /// totals, and keys evicted before that came back since, with the
    /// totals they carry: the integrations' reads (`read_each`) add each
    /// to its key's counter, or report it alone (`remove.rs`, `depart`).
    pub(super) departed: Mutex<Vec<(K, u64)>>,
}

impl<K: Hash + Eq + Clone + Send + Sync> CounterMap<K> {
    /// `key`'s hash (or any borrowed form's: equal forms hash alike).
    #[inline]
    pub(super) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> Default for CounterMap<K> {
    /// Same as [`CounterMap::new`].
    ///
    /// ```
    /// let m: shardcount::CounterMap<u8> = Default::default();
    /// assert!(m.is_empty());
    /// ```
    fn default() -> Self {
        CounterMap::new()
    }
}

impl<K> fmt::Debug for CounterMap<K> {
    /// Shows the number of keys, the bound and the overflow total.
    ///
    /// ```
    /// let m = shardcount::CounterMap::with_max_keys(4);
    /// m.inc(&"a");
    /// assert_eq!(format!("{m:?}"), "CounterMap { keys: 1, max_keys: 4, overflow: 0 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CounterMap")
            .field(
                "keys",
                // Relaxed: a count, as `len` reads it.
                &self.next.load(Ordering::Relaxed),
            )
            .field("max_keys", &self.max_keys)
            .field("overflow", &self.overflow.total(0))
            .finish()
    }
}
