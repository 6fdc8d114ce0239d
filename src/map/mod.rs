//! `CounterMap<K>`: counters created on first use of a key, in chunks of
//! [`CounterSet`]s that never move.
//!
//! # Protocol
//!
//! * `index` (`map/index.rs`, protocol at its top) interns keys: a lookup
//!   of an interned key loads the current table and probes it, no lock,
//!   store but to its own thread's word, inside a pinned section
//!   (`thread::grace`); new keys go in,
//!   and removed keys out, one writer at a time under the index's lock.
//!   Each entry holds the key, its hash (`map/hasher.rs`, seeded per map)
//!   and its `Place`: the address of the key's chunk with the counter's
//!   index in its low bits (one word, `Acquire`), so an add by key reads
//!   no chunk table. Adds through a [`CounterHandle`] look nothing up.
//! * **Removal** (`remove`, `retain`, `evict_idle`), under the lock: the
//!   count of keys goes down (`Release`), the entries are unlinked
//!   (tombstones), then a grace period waits out every pinned lookup that
//!   may still hold them. Only then is each counter taken (final: nobody
//!   can add to it any more), its place given back, the entry freed, and a
//!   chunk left with no key freed. An add that looked the key up after the
//!   unlink misses and interns it afresh. The keys are handed back (and
//!   dropped) last, after the lock is let go: no code of `K`'s runs while
//!   the map is half changed. A *held* key (a handle was made
//!   for it, `Entry::pinned`, set under the lock) is never removed, so a
//!   handle's `&CounterSet` stays valid for the map's life without any
//!   check on its adds.
//! * **Compaction**, after a removal leaves the used chunks under half
//!   full: each key (not held) in the highest chunks gets a free place of a
//!   lower chunk, stored into its entry's place (`Release`); after a grace
//!   period no add reaches the old place, whose counter is taken and added
//!   to the new one; the emptied chunks are freed.
//! * Places (`Places`, under the lock): a new key takes the lowest free
//!   place number of an allocated chunk, else a freed chunk, else the next
//!   new number; a given-back place's counter is zero (taken).
//! * A miss takes the slow path, unpinned (it may wait for the lock, which
//!   a removal holds while it waits for pinned sections): if `next`
//!   (`Acquire`) shows the map full, it looks once more (pinned) and else
//!   counts in the overflow; otherwise it takes the index's lock, looks
//!   again (two threads racing on a new key get one counter), and interns:
//!   a place taken, its chunk made sure of, the entry published (`Release`,
//!   in the index), and only then `next + 1` stored (`Release`); the add
//!   is made under the lock. So a thread that loads `next == max_keys`
//!   (`Acquire`) sees every key that has a counter then: its second look
//!   is final unless a removal runs meanwhile (then a new key's add may
//!   land in the overflow though room was just made), and keys beyond the
//!   bound never take the lock.
//! * Counters live in chunks: chunk `c` is a `CounterSet` of `CHUNK`
//!   counters at places `c·CHUNK ..`, allocated when the first of them
//!   is handed out and freed when the last key in it is removed (above) or
//!   the map drops. The chunk
//!   pointers live in `segments: [AtomicPtr<AtomicPtr<Chunk>>;
//!   SEGMENTS]`, fixed in the map: segment `b` is null or an array of
//!   `SEG0 << b` chunk pointers (`SEG0` is 8; 1 under loom), all null when
//!   installed, for chunks `SEG0·(2^b − 1) .. SEG0·(2^(b+1) − 1)` (so `c +
//!   SEG0` has its top bit at `b + log2(SEG0)`, and `c`'s offset is the
//!   bits below it). A segment is allocated with its first chunk, so memory
//!   follows the keys interned, never the bound; the `SEGMENTS = 64 −
//!   log2(SEG0)` doublings cover every chunk index a `usize` can reach.
//! * Both levels are installed under the index's lock, by one writer at a
//!   time: a plain `Release` store of the initialised array or set.
//!   Segments are freed only when the map drops; a chunk pointer is reset
//!   to null (under the lock) when its chunk is freed. Readers without the
//!   lock (`allocated_chunks`) only test pointers for null; lookups reach
//!   chunks through entries, which the grace period covers.
//! * Whole-map reads (`snapshot`, `top`, `take_all`, `reset`, `retain`,
//!   `read_each`) hold the index's lock: no key is interned or removed
//!   meanwhile, so the entries list is every key, in the order of first
//!   use, each with its chunk allocated; a take swaps only counters whose
//!   keys it reports.
//! * Counting is the chunk's `CounterSet` protocol (`src/set.rs`): base row
//!   first, shard rows on contention, lossless `take_all`.
//! * `overflow`: a one-counter `CounterSet` that takes every add for a key
//!   beyond the bound.

mod handle;
mod hasher;
mod index;
mod places;

// `CounterMap`'s methods, a concept a file. Rustdoc lists them in the
// order the files are declared: the constructors first.
mod new;

mod intern;
mod reads;
mod remove;
mod rows;
mod store;

pub use handle::{CounterHandle, IntoKey};

use crate::primitive::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use crate::primitive::sync::Mutex;
use crate::set::CounterSet;
use hasher::KeyedState;
use index::Index;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::time::Instant;
use store::{Chunk, SEGMENTS};

/// A map from keys to exact counters, each created on the key's first use.
///
/// Each key is interned once to a counter place in chunks of
/// [`CounterSet`] counters that never move; [`handle`](Self::handle)
/// returns a [`CounterHandle`] whose adds go straight to the cell, no
/// hashing, no lock: about the cost of a `CounterSet::add`.
/// [`add`](Self::add) by key hashes the key and looks it up in a lock-free
/// index (a key already interned takes no lock and no locked instruction;
/// the lookup marks a word of its own thread so that a removal can wait
/// for it), then does the same add. Only a key's first use takes a lock.
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
/// dropped, and memory stays bounded whatever keys arrive.
/// [`unbounded`](Self::unbounded) sets no bound: memory grows with every
/// distinct key.
///
/// # Memory
///
/// The bound costs nothing: memory follows the keys the map holds. An
/// empty map is a table of 16 bin pointers, a lock and a table of 61
/// segment pointers. Counters come in chunks of 127, each a `CounterSet`
/// of 1 KB while never contended (8 bytes per counter and one for the
/// chunk's contention mark), allocated with the chunk's first key; chunk
/// pointers in segments of doubling sizes (8, 16, 32, ... pointers), each
/// allocated with its first chunk. Each key is once in the index: the
/// key, its hash, place number, chunk address, position and eviction notes (56
/// bytes besides the key), one pointer in the list of keys, and 2 to 4
/// bins of 8 bytes in the index's table (at most half full; up to 5
/// after many removals, before it shrinks). A contended chunk grows shard
/// rows of 1 KB (2, then doubling up to the cap, older rows kept): about
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
    index: Index<K>,
    /// Hashes keys for `index`.
    hasher: KeyedState,
    /// How many keys have a counter (at most `max_keys`): stored under the
    /// index's lock, after a new key's entry is published and before a
    /// removed key's is unlinked.
    next: AtomicUsize,
    /// Segment `b`: null or `segment_len(b)` chunk pointers (see the
    /// protocol notes).
    segments: [AtomicPtr<AtomicPtr<Chunk>>; SEGMENTS],
    max_keys: usize,
    overflow: CounterSet,
    /// The clock eviction passes read their times from.
    born: Instant,
    /// The members' label name, for the integrations.
    pub(crate) label: [&'static str; 1],
    /// The keys the last `evict_idle` call evicted, with their final
    /// totals: the integrations' reads (`read_each`) report them until the
    /// next call.
    departed: Mutex<Vec<(K, u64)>>,
}

impl<K: Hash + Eq + Clone + Send + Sync> CounterMap<K> {
    /// `key`'s hash (or any borrowed form's: equal forms hash alike).
    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
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
