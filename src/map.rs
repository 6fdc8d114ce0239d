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
//!   can add to it any more), its slot given back, the entry freed, and a
//!   chunk left with no key freed. An add that looked the key up after the
//!   unlink misses and interns it afresh. The keys are handed back (and
//!   dropped) last, after the lock is let go: no code of `K`'s runs while
//!   the map is half changed. A *held* key (a handle was made
//!   for it, `Entry::pinned`, set under the lock) is never removed, so a
//!   handle's `&CounterSet` stays valid for the map's life without any
//!   check on its adds.
//! * **Compaction**, after a removal leaves the used chunks under half
//!   full: each key (not held) in the highest chunks gets a free slot of a
//!   lower chunk, stored into its entry's place (`Release`); after a grace
//!   period no add reaches the old slot, whose counter is taken and added
//!   to the new one; the emptied chunks are freed.
//! * Slots (`Slots`, under the lock): a new key takes the lowest free slot
//!   of an allocated chunk, else a freed chunk, else the next new slot; a
//!   given-back slot's counter is zero (taken).
//! * A miss takes the slow path, unpinned (it may wait for the lock, which
//!   a removal holds while it waits for pinned sections): if `next`
//!   (`Acquire`) shows the map full, it looks once more (pinned) and else
//!   counts in the overflow; otherwise it takes the index's lock, looks
//!   again (two threads racing on a new key get one counter), and interns:
//!   a slot taken, its chunk made sure of, the entry published (`Release`,
//!   in the index), and only then `next + 1` stored (`Release`); the add
//!   is made under the lock. So a thread that loads `next == max_keys`
//!   (`Acquire`) sees every key that has a counter then: its second look
//!   is final unless a removal runs meanwhile (then a new key's add may
//!   land in the overflow though room was just made), and keys beyond the
//!   bound never take the lock.
//! * Counters live in chunks: chunk `c` is a `CounterSet` of `CHUNK`
//!   counters holding slots `c·CHUNK ..`, allocated when the first of them
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

mod hasher;
mod index;

use crate::primitive::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use crate::primitive::sync::{lock, Mutex, MutexGuard};
use crate::set::CounterSet;
use crate::shard::merge_all;
use crate::thread::grace;
use hasher::KeyedState;
use index::{Entry, Index, Writer};
use std::borrow::Borrow;
use std::collections::BTreeSet;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::ptr::{self, NonNull};
use std::time::{Duration, Instant};

/// Counters per chunk: with the row's mark word (see `CounterSet`), 1 KB
/// of base row (8 lines); a contended chunk grows rows of the same size, so
/// one hot key costs rows of 127 counters, not of the whole map.
#[cfg(not(shardcount_loom))]
const CHUNK: usize = 127;
/// Models need a second chunk within a handful of keys.
#[cfg(shardcount_loom)]
const CHUNK: usize = 2;

/// Compaction moves keys once the used chunks' free slots reach the keys'
/// count plus this: chunks at most half full, and two chunks' worth to
/// spare, so that no single removal moves keys.
#[cfg(not(shardcount_loom))]
const COMPACT_SLACK: usize = 2 * CHUNK + 1;
/// Models compact two half-full chunks (of 2).
#[cfg(shardcount_loom)]
const COMPACT_SLACK: usize = 0;

/// Chunk pointers in the first segment (`SEG0`), as a power of two: 8
/// pointers, 64 bytes, for the first 1,016 keys.
#[cfg(not(shardcount_loom))]
const SEG0_BITS: u32 = 3;
/// Models cross into a second segment at the third key.
#[cfg(shardcount_loom)]
const SEG0_BITS: u32 = 0;

/// Segments of doubling sizes: enough for every chunk index of a `usize`.
const SEGMENTS: usize = (usize::BITS - SEG0_BITS) as usize;

/// Chunk pointers in segment `b`.
#[inline]
fn segment_len(b: usize) -> usize {
    1 << (b + SEG0_BITS as usize)
}

/// The segment holding chunk `c`, and `c`'s offset in it.
#[inline]
fn locate(c: usize) -> (usize, usize) {
    // No overflow: `c < usize::MAX / CHUNK`.
    let p = c + (1 << SEG0_BITS);
    let top = (usize::BITS - 1 - p.leading_zeros()) as usize;
    (top - SEG0_BITS as usize, p - (1 << top))
}

/// The bound [`CounterMap::new`] sets.
#[cfg(not(shardcount_loom))]
const DEFAULT_MAX_KEYS: usize = 1 << 16;
#[cfg(shardcount_loom)]
const DEFAULT_MAX_KEYS: usize = 4;

/// Where an interned key counts: its chunk and its counter there, kept in
/// the key's entry (one tagged pointer, see `index::Entry`), so a lookup
/// by key reads no chunk index.
#[derive(Clone, Copy)]
struct Place {
    chunk: NonNull<Chunk>,
    i: usize,
}

/// A chunk of counters, aligned so that a pointer to it has room for a
/// counter's index (below `CHUNK`) in its low bits.
#[repr(align(128))]
struct Chunk(CounterSet);

const _: () = assert!(CHUNK < 128);

// SAFETY: `set` points to a chunk the map owns: allocated before the key
// is inserted, never moved, and freed only once no live key's slot is in
// it and a grace period has passed since the last such key was unlinked
// (so no lookup still holds the `Place`), or when the map drops. Sending
// it sends a `&CounterSet`, and `CounterSet` is `Sync`.
unsafe impl Send for Place {}
// SAFETY: as for `Send`: sharing it shares a `&CounterSet`.
unsafe impl Sync for Place {}

/// Which counter slots hold a key: guarded by the index's lock (it lives
/// in the index's `Writer`). Slot `s` is counter `s % CHUNK` of chunk `s /
/// CHUNK`.
#[derive(Default)]
struct Slots {
    /// Unused slots of allocated chunks below `high`, lowest first: each
    /// counter at zero (taken when its key left).
    free: BTreeSet<usize>,
    /// Chunks below `high`'s chunk that were freed, lowest first.
    free_chunks: BTreeSet<usize>,
    /// Slots `high..` were never handed out (or lie in freed chunks past
    /// every allocated one).
    high: usize,
    /// Keys per chunk, for chunks below `high`'s.
    keys: Vec<usize>,
}

impl Slots {
    /// A slot for a new key: the lowest free one, else the first of the
    /// lowest freed chunk, else the next never used (its chunk may need
    /// allocating: `ensure_chunk`).
    fn take(&mut self) -> usize {
        let s = if let Some(s) = self.free.pop_first() {
            s
        } else if let Some(c) = self.free_chunks.pop_first() {
            self.free.extend(c * CHUNK + 1..(c + 1) * CHUNK);
            c * CHUNK
        } else {
            let s = self.high;
            self.high += 1;
            if s % CHUNK == 0 {
                self.keys.push(0);
            }
            s
        };
        self.keys[s / CHUNK] += 1;
        s
    }

    /// Gives back `s` (its counter at zero); returns its chunk if that
    /// chunk now holds no key and is to be freed.
    fn give_back(&mut self, s: usize) -> Option<usize> {
        let c = s / CHUNK;
        self.keys[c] -= 1;
        self.free.insert(s);
        if self.keys[c] > 0 {
            return None;
        }
        for x in c * CHUNK..((c + 1) * CHUNK).min(self.high) {
            self.free.remove(&x);
        }
        self.free_chunks.insert(c);
        // Freed chunks at the top lower `high`.
        while let Some(&top) = self.free_chunks.last() {
            if (top + 1) * CHUNK < self.high {
                break;
            }
            self.free_chunks.remove(&top);
            self.high = top * CHUNK;
            self.keys.truncate(top);
        }
        Some(c)
    }
}

/// A map from keys to exact counters, each created on the key's first use.
///
/// Each key is interned once to a counter slot in chunks of
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
/// empty map is a table of 16 slot pointers, a lock and a table of 61
/// segment pointers. Counters come in chunks of 127, each a `CounterSet`
/// of 1 KB while never contended (8 bytes per counter and one for the
/// chunk's contention mark), allocated with the chunk's first key; chunk
/// pointers in segments of doubling sizes (8, 16, 32, ... pointers), each
/// allocated with its first chunk. Each key is once in the index: the
/// key, its hash, slot, chunk address, position and eviction notes (56
/// bytes besides the key), one pointer in the list of keys, and 2 to 4
/// slots of 8 bytes in the index's table (at most half full; up to 5
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
/// the next removal moves keys (not held ones) down into free slots so
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
    label: [&'static str; 1],
    /// The keys the last `evict_idle` call evicted, with their final
    /// totals: the integrations' reads (`read_each`) report them until the
    /// next call.
    departed: Mutex<Vec<(K, u64)>>,
}

/// One counter of a [`CounterMap`]: where its cell is, found once. `Copy`;
/// its adds hash nothing and lock nothing.
///
/// ```
/// let m = shardcount::CounterMap::new();
/// let h = m.handle(&7u32);
/// let h2 = h; // Copy
/// h.add(2);
/// h2.inc();
/// assert_eq!(h.sum(), 3);
/// assert_eq!(m.get(&7), Some(3));
/// ```
#[derive(Clone, Copy)]
pub struct CounterHandle<'a> {
    set: &'a CounterSet,
    /// Always `< set.len()`: both constructors (`at`, `overflow_handle`)
    /// make it so, and the fields are private.
    i: usize,
}

impl CounterHandle<'_> {
    /// Adds `n`, wrapping at 2<sup>64</sup>.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.handle(&"a").add(4);
    /// assert_eq!(m.get(&"a"), Some(4));
    /// ```
    #[inline(always)]
    pub fn add(&self, n: u64) {
        // SAFETY: `i < set.len()`, the field's invariant.
        unsafe { self.set.add_unchecked(self.i, n) };
    }

    /// Subtracts `n`, wrapping below zero.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.handle(&"a").sub(1);
    /// assert_eq!(m.get(&"a"), Some(u64::MAX));
    /// ```
    #[inline]
    pub fn sub(&self, n: u64) {
        self.add(n.wrapping_neg());
    }

    /// Adds one.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// m.handle(&"a").inc();
    /// assert_eq!(m.get(&"a"), Some(1));
    /// ```
    #[inline(always)]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Subtracts one, wrapping below zero.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&"open");
    /// h.add(2);
    /// h.dec();
    /// assert_eq!(h.sum(), 1);
    /// ```
    #[inline]
    pub fn dec(&self) {
        self.add(u64::MAX);
    }

    /// This counter's total (the overflow counter's, for a handle to a key
    /// beyond the bound); exact at quiescence.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&"a");
    /// h.add(3);
    /// assert_eq!(h.sum(), 3);
    /// ```
    #[must_use]
    pub fn sum(&self) -> u64 {
        self.set.total(self.i)
    }

    /// [`sum`](Self::sum) as a signed value: the same bits, for counters
    /// that go up and down around zero.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&"a");
    /// h.sub(3);
    /// assert_eq!(h.sum_i64(), -3);
    /// ```
    #[must_use]
    pub fn sum_i64(&self) -> i64 {
        self.sum() as i64
    }

    /// Takes this counter's total, leaving it at zero; lossless, as
    /// [`CounterSet::take`] (each add is counted by exactly one take, or
    /// stays).
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&"a");
    /// h.add(5);
    /// assert_eq!(h.take(), 5);
    /// assert_eq!(m.get(&"a"), Some(0));
    /// ```
    pub fn take(&self) -> u64 {
        self.set.take_at(self.i)
    }

    /// Sets this counter to zero (a [`take`](Self::take) whose total is
    /// dropped).
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&"a");
    /// h.add(5);
    /// h.reset();
    /// assert_eq!(h.sum(), 0);
    /// ```
    pub fn reset(&self) {
        self.take();
    }
}

impl fmt::Debug for CounterHandle<'_> {
    /// Shows the counter's total.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// let h = m.handle(&1u8);
    /// h.inc();
    /// assert_eq!(format!("{h:?}"), "CounterHandle { total: 1 }");
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CounterHandle")
            .field("total", &self.sum())
            .finish()
    }
}

/// How a [`CounterMap`] makes its key from the key a lookup was given,
/// when that key is new: a clone of `&k` for a `Clone` key, `to_owned()`
/// for the standard borrowed forms (`&str` for a `String`, `&[T]` for a
/// `Vec<T>`, `&Path`, `&OsStr`, `&CStr`), and the reference itself for a
/// `&'static str` key, so `handle("/")` works on a `CounterMap<&'static
/// str>`. A lookup that may create a key takes `&'q Q` where `&'q Q:
/// IntoKey<K>`; reads (`get`, `take`) need only `K: Borrow<Q>`.
///
/// For a `&'static str` key, a new key must be `'static` (a literal, a
/// leaked string): a `&str` that borrows a shorter-lived buffer does not
/// compile, as a map of `&'static str` cannot keep it.
///
/// ```
/// use shardcount::CounterMap;
///
/// let routes: CounterMap<&'static str> = CounterMap::new();
/// routes.handle("/").inc(); // a literal: the key itself, no allocation
/// routes.add(&"/about", 2); // a `&&'static str`, as before
/// let path = String::from("/about");
/// assert_eq!(routes.get(path.as_str()), Some(2)); // reads take any `&str`
///
/// let owned: CounterMap<String> = CounterMap::new();
/// owned.inc(path.as_str()); // `to_owned()` only because "/about" is new
/// assert_eq!(owned.get("/about"), Some(1));
/// ```
pub trait IntoKey<K> {
    /// The key to store: owned, or the `'static` reference itself.
    ///
    /// ```
    /// use shardcount::IntoKey;
    /// let k: String = "a".into_key();
    /// let s: &'static str = "a".into_key();
    /// assert_eq!(k, s);
    /// ```
    fn into_key(self) -> K;
}

// One impl per borrowed form, not one over `ToOwned`: a blanket
// `&Q: IntoKey<Q::Owned>` would overlap the `&'static str` impl (coherence
// does not see that `str`'s owned form is `String`).
impl<K: Clone> IntoKey<K> for &K {
    #[inline]
    fn into_key(self) -> K {
        self.clone()
    }
}

// A literal is already the key a map of `&'static str` stores.
impl IntoKey<&'static str> for &'static str {
    #[inline]
    fn into_key(self) -> &'static str {
        self
    }
}

/// Implements `IntoKey` for unsized borrowed forms through `to_owned`.
macro_rules! into_owned_key {
    ($($borrowed:ty => $owned:ty),* $(,)?) => {$(
        impl IntoKey<$owned> for &$borrowed {
            #[inline]
            fn into_key(self) -> $owned {
                self.to_owned()
            }
        }
    )*};
}

into_owned_key! {
    str => String,
    std::path::Path => std::path::PathBuf,
    std::ffi::OsStr => std::ffi::OsString,
    std::ffi::CStr => std::ffi::CString,
}

impl<T: Clone> IntoKey<Vec<T>> for &[T] {
    #[inline]
    fn into_key(self) -> Vec<T> {
        self.to_vec()
    }
}

impl<K: Hash + Eq + Clone + Send + Sync> CounterMap<K> {
    /// An empty map that gives up to 65,536 keys their own counter.
    ///
    /// ```
    /// let m: shardcount::CounterMap<String> = shardcount::CounterMap::new();
    /// assert_eq!(m.max_keys(), 65_536);
    /// assert!(m.is_empty());
    /// ```
    #[must_use]
    pub fn new() -> Self {
        CounterMap::with_max_keys(DEFAULT_MAX_KEYS)
    }

    /// An empty map that gives up to `max_keys` keys their own counter and
    /// counts every add for a further key in [`overflow`](Self::overflow).
    /// Any bound, up to `usize::MAX`: memory follows the keys interned,
    /// not the bound.
    ///
    /// ```
    /// let m = shardcount::CounterMap::with_max_keys(1);
    /// m.add(&"a", 1);
    /// m.add(&"b", 2); // beyond the bound
    /// m.add(&"c", 3);
    /// assert_eq!(m.get(&"a"), Some(1));
    /// assert_eq!(m.get(&"b"), None);
    /// assert_eq!(m.overflow(), 5);
    /// ```
    #[must_use]
    pub fn with_max_keys(max_keys: usize) -> Self {
        CounterMap {
            index: Index::new(),
            hasher: KeyedState::new(),
            next: AtomicUsize::new(0),
            segments: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            max_keys,
            overflow: CounterSet::new(1),
            born: Instant::now(),
            label: ["key"],
            departed: Mutex::new(Vec::new()),
        }
    }

    /// Names the keys' label `name` in every integration that exports the
    /// map (prometheus-client, tikv `prometheus`, OpenTelemetry, `metrics`'
    /// `publish`, serde), instead of `key`.
    ///
    /// ```
    /// use shardcount::contract::CountFamily;
    /// use shardcount::CounterMap;
    ///
    /// let visits: CounterMap<u64> = CounterMap::new().with_label_name("user_id");
    /// visits.add(&42, 3);
    /// assert_eq!(visits.label_names(), ["user_id"]); // user_id="42" once exported
    /// ```
    #[must_use]
    pub fn with_label_name(mut self, name: &'static str) -> Self {
        self.label = [name];
        self
    }

    /// An empty map with no bound on keys: memory grows with every
    /// distinct key. Every key gets its own counter, so
    /// [`overflow`](Self::overflow) stays zero; `max_keys()` is
    /// `usize::MAX`. For keys from outside (paths, user agents), prefer a
    /// bound: it caps memory whatever arrives.
    ///
    /// ```
    /// let m = shardcount::CounterMap::unbounded();
    /// assert_eq!(m.max_keys(), usize::MAX);
    /// for k in 0..100_000u32 {
    ///     m.inc(&k);
    /// }
    /// assert_eq!(m.len(), 100_000);
    /// assert_eq!(m.overflow(), 0);
    /// ```
    #[must_use]
    pub fn unbounded() -> Self {
        CounterMap::with_max_keys(usize::MAX)
    }

    /// `key`'s hash (or any borrowed form's: equal forms hash alike).
    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Segment `b`, if allocated.
    #[inline]
    fn segment(&self, b: usize) -> Option<&[AtomicPtr<Chunk>]> {
        // Acquire: pairs with the Release store in `ensure_segment`, so
        // the segment's null pointers are initialised before they are read.
        let p = self.segments[b].load(Ordering::Acquire);
        // SAFETY: a non-null segment pointer came from `new_segment(b)`,
        // points to `segment_len(b)` initialised
        // pointers and is freed only in `drop`, which takes `&mut self`.
        (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, segment_len(b)) })
    }

    /// The chunk `c`, if allocated.
    #[inline]
    fn chunk(&self, c: usize) -> Option<&CounterSet> {
        let (b, at) = locate(c);
        // Acquire: pairs with the Release store in `ensure_chunk`, so the
        // set is initialised before it is used.
        let p = self.segment(b)?[at].load(Ordering::Acquire);
        // SAFETY: a non-null entry came from `Box::into_raw` in
        // `ensure_chunk`; it is freed by `free_chunk` (under the lock,
        // which every caller of this holds) or in `drop` (`&mut self`).
        (!p.is_null()).then(|| &unsafe { &*p }.0)
    }

    /// Counter `s % CHUNK` of chunk `s / CHUNK`, which holds a key; under
    /// the lock.
    fn slot(&self, s: usize) -> CounterHandle<'_> {
        CounterHandle {
            set: self
                .chunk(s / CHUNK)
                .expect("shardcount: a used slot's chunk is allocated"),
            i: s % CHUNK,
        }
    }

    /// The handle of an interned key's counter: valid while the key's
    /// entry is (a pinned lookup, the index's lock, or a pinned entry).
    #[inline]
    fn place(&self, p: Place) -> CounterHandle<'_> {
        CounterHandle {
            // SAFETY: the chunk lives while a key whose place names it is
            // reachable (see `Place`), which the caller makes sure of for
            // as long as it uses the handle.
            set: &unsafe { p.chunk.as_ref() }.0,
            i: p.i,
        }
    }

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
        // Acquire: pairs with the Release store in `intern`. The key may
        // have taken the last index since the miss; `next` is stored only
        // after its entry is published, so once it reads full, the look
        // below sees every key that has a counter and is final.
        if !hold && self.next.load(Ordering::Acquire) >= self.max_keys {
            let pin = grace::pin();
            return match self.index.find(&pin, hash, key) {
                Some(e) => f(self.place(e.place())),
                None => f(self.overflow_handle()),
            };
        }
        let mut w = self.index.lock();
        // Another thread may have interned it since the miss.
        if let Some(e) = self.index.find_locked(&w, hash, key) {
            if hold {
                // Relaxed: under the lock, which every removal takes
                // before it reads the flag.
                e.pinned.store(true, Ordering::Relaxed);
            }
            return f(self.place(e.place()));
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
        let slot = w.slots.take();
        let place = Place {
            chunk: self.ensure_chunk(slot / CHUNK),
            i: slot % CHUNK,
        };
        self.index
            .insert(w, Entry::new(hash, key, place, slot, hold));
        // Release: pairs with the Acquire in `missed`: the entry is
        // published before the count that includes it.
        self.next.store(n + 1, Ordering::Release);
        Some(place)
    }

    /// Segment `b`, allocated unless it exists. Only under the index's
    /// lock.
    fn ensure_segment(&self, b: usize) -> &[AtomicPtr<Chunk>] {
        if let Some(seg) = self.segment(b) {
            return seg;
        }
        let seg = new_segment(b);
        // Release: publishes the initialised pointers to `segment`'s
        // Acquire.
        self.segments[b].store(seg, Ordering::Release);
        // SAFETY: `seg` came from `new_segment(b)`: `segment_len(b)`
        // initialised pointers, freed only in `drop`.
        unsafe { std::slice::from_raw_parts(seg, segment_len(b)) }
    }

    /// Chunk `c`, allocated (with its segment) unless it exists. Only under
    /// the index's lock.
    fn ensure_chunk(&self, c: usize) -> NonNull<Chunk> {
        let (b, at) = locate(c);
        let slot = &self.ensure_segment(b)[at];
        // Relaxed: slots are stored only under the lock, which this thread
        // holds.
        let mut set = slot.load(Ordering::Relaxed);
        if set.is_null() {
            set = Box::into_raw(Box::new(Chunk(CounterSet::new(CHUNK))));
            // Release: publishes the initialised set to `chunk`'s Acquire.
            slot.store(set, Ordering::Release);
        }
        NonNull::new(set).expect("a chunk just made sure of")
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
    /// keys take. Must not be called from inside a
    /// [`retain`](Self::retain) or
    /// [`read_each`](crate::CountFamily::read_each) closure on the same map
    /// (it would wait for its own lock), nor from a key's `Hash`, `Eq` or
    /// `Borrow` (they run inside lookups: it panics, on any thread and
    /// in a thread-local destructor too, before changing the map; a panic
    /// out of a thread-local destructor aborts the process, so catch it
    /// there).
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
        self.unlink(w, vec![pos], |_, t| total = t);
        Some(total)
    }

    /// Keeps only the keys for which `keep(&key, total)` returns `true`,
    /// as `HashMap::retain` does; the others are removed (see
    /// [`remove`](Self::remove): racing adds are in the discarded total or
    /// a fresh counter) and their totals dropped. A key held by a handle
    /// stays and is set to zero instead. Totals are read as
    /// [`get`](Self::get) reads them. `keep` runs under the lock that new
    /// keys take and must not use the map.
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
            if keep(&e.key, h.sum()) {
                continue;
            }
            if e.is_pinned() {
                h.reset();
            } else {
                victims.push(e.pos(&w));
            }
        }
        self.unlink(w, victims, |_, _| ());
    }

    /// Removes every key whose total has stayed the same for at least
    /// `idle`, as seen by calls to this method, and returns each with its
    /// final total (losslessly, as [`remove`](Self::remove)). Until the
    /// next call, the integrations (which read through
    /// [`CountFamily::read_each`](crate::contract::CountFamily::read_each))
    /// still report each evicted key at its final total, added to the
    /// key's new counter if it came back meanwhile: a scrape after the
    /// eviction reports what the key gained since the scrape before.
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
        self.unlink(w, victims, |k, t| out.push((k, t)));
        // Cloned outside the index lock: no code of `K`'s runs under it.
        *lock(&self.departed) = out.clone();
        out
    }

    /// Folds the shard rows that contention grew on the map's chunks back
    /// into their base rows and frees them, as
    /// [`Counter::merge`](crate::Counter::merge) does for one counter
    /// (with the same semantics: nothing lost, pending while threads that
    /// added hold it, [`quiesce`](crate::quiesce)): every chunk, and the
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
        for c in 0..w.slots.high.div_ceil(CHUNK) {
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
        (0..w.slots.high.div_ceil(CHUNK))
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
        for c in 0..w.slots.high.div_ceil(CHUNK) {
            if let Some(set) = self.chunk(c) {
                set.row_totals(out);
            }
        }
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
        mut w: MutexGuard<'_, Writer<K>>,
        victims: Vec<usize>,
        mut each: impl FnMut(K, u64),
    ) {
        if victims.is_empty() {
            return;
        }
        // Before changing anything: the grace period below would panic
        // with the keys unlinked but their counters not yet taken.
        grace::assert_outside();
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
            .map(|e| self.empty_slot(&mut w, e.slot(), &mut empty))
            .collect();
        for c in empty {
            self.free_chunk(c);
        }
        self.compact(&mut w);
        drop(w);
        for (e, total) in gone.into_iter().zip(totals) {
            each(e.key, total);
        }
    }

    /// Takes slot `s`'s total (final: nobody adds to it any more) and
    /// gives the slot back, noting its chunk in `empty` if that chunk now
    /// holds no key. Should the take leave a residue (its table could not
    /// allocate the baselines a take of an owned row needs), the residue is
    /// counted in the total and the slot is never reused, so it is neither
    /// lost nor handed to another key.
    fn empty_slot(&self, w: &mut Writer<K>, s: usize, empty: &mut Vec<usize>) -> u64 {
        let h = self.slot(s);
        let taken = h.take();
        let rest = h.sum();
        if rest == 0 {
            empty.extend(w.slots.give_back(s));
        }
        taken.wrapping_add(rest)
    }

    /// Moves keys out of the highest chunks into free slots of lower ones
    /// once the used chunks are less than half full (and more than two
    /// chunks' worth is free), then frees the emptied chunks: removed keys
    /// scattered over many chunks would otherwise keep them all. Held keys
    /// stay where their handles point.
    ///
    /// A move stores the key's new place into its entry (`Release`; the
    /// slot's counter is zero and its chunk allocated); after a grace
    /// period no add reaches the old slot, whose total is then taken and
    /// added to the new one. Meanwhile a lookup of the key may read the new
    /// counter without the counts still to be moved: nothing is lost, and
    /// whole-map reads (under the lock) never see the move half done. No
    /// code of `K`'s runs.
    fn compact(&self, w: &mut Writer<K>) {
        let used = w.slots.keys.iter().filter(|&&n| n > 0).count();
        if used * CHUNK - w.len() < w.len() + COMPACT_SLACK {
            return;
        }
        let mut movable: Vec<(usize, usize)> = w
            .entries()
            .filter(|e| !e.is_pinned())
            .map(|e| (e.slot(), e.pos(w)))
            .collect();
        movable.sort_unstable_by_key(|m| std::cmp::Reverse(m.0));
        let mut moves = Vec::new();
        for (from, pos) in movable {
            match w.slots.free.first() {
                Some(&to) if to / CHUNK < from / CHUNK => {
                    w.slots.free.remove(&to);
                    w.slots.keys[to / CHUNK] += 1;
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
            let moved = self.empty_slot(w, from, &mut empty);
            self.slot(to).add(moved);
        }
        for c in empty {
            self.free_chunk(c);
        }
    }

    /// Frees chunk `c`, which holds no key since a grace period past the
    /// unlinking of its last one: no lookup still holds a place in it, no
    /// handle names it (held keys are never removed), and every reader of
    /// chunk pointers holds the lock (held here) or reads nullness only.
    fn free_chunk(&self, c: usize) {
        let (b, at) = locate(c);
        let seg = self
            .segment(b)
            .expect("shardcount: a used chunk's segment is allocated");
        // Relaxed: see above.
        let p = seg[at].swap(ptr::null_mut(), Ordering::Relaxed);
        assert!(!p.is_null(), "shardcount: a chunk freed twice");
        // SAFETY: `p` came from `Box::into_raw` in `ensure_chunk`, is
        // unlinked just above, and nothing reaches it any more.
        drop(unsafe { Box::from_raw(p) });
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
        let mut totals = vec![0u64; w.slots.high.div_ceil(CHUNK) * CHUNK];
        for (c, out) in totals.chunks_mut(CHUNK).enumerate() {
            // A freed chunk holds no key.
            if let Some(set) = self.chunk(c) {
                read_chunk(set, out);
            }
        }
        then(
            prepared,
            w.entries().map(|e| (&e.key, totals[e.slot()])).collect(),
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

    /// How many chunks of 127 counters are allocated: a diagnostic of
    /// memory use. At quiescence, `ceil(len() / 127)` for a map that never
    /// removed a key; after removals, the chunks that still hold a key
    /// (compaction keeps them at least half full, bar two chunks' worth and
    /// held keys).
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// assert_eq!(m.allocated_chunks(), 0);
    /// m.inc(&"a");
    /// assert_eq!(m.allocated_chunks(), 1);
    /// ```
    #[must_use]
    pub fn allocated_chunks(&self) -> usize {
        // Relaxed: a diagnostic; a key interned after this load is missed,
        // as if this ran a moment earlier (and a chunk stored just before
        // it may be too: nothing here waits for its Release).
        (0..SEGMENTS)
            .map(|b| {
                // Acquire, as in `segment`; only nullness is read below.
                let seg = self.segments[b].load(Ordering::Acquire);
                if seg.is_null() {
                    return 0;
                }
                // SAFETY: a non-null segment holds `segment_len(b)`
                // pointers and is freed only in `drop` (`&mut self`).
                let seg = unsafe { std::slice::from_raw_parts(seg, segment_len(b)) };
                seg.iter()
                    .filter(|c| !c.load(Ordering::Relaxed).is_null())
                    .count()
            })
            .sum()
    }
}

/// The pairs with their keys cloned.
fn owned<K: Clone>(pairs: Vec<(&K, u64)>) -> Vec<(K, u64)> {
    pairs.into_iter().map(|(k, v)| (k.clone(), v)).collect()
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
                // Relaxed: as in `len`.
                &self.next.load(Ordering::Relaxed),
            )
            .field("max_keys", &self.max_keys)
            .field("overflow", &self.overflow.total(0))
            .finish()
    }
}

impl<K> Drop for CounterMap<K> {
    fn drop(&mut self) {
        for (b, seg) in self.segments.iter().enumerate() {
            // Relaxed (here and below): `&mut self` means every other
            // access happened-before.
            let p = seg.load(Ordering::Relaxed);
            if p.is_null() {
                continue;
            }
            // SAFETY: a non-null segment came from `new_segment(b)`, was
            // stored once (`ensure_segment`) and is freed only below, after
            // this last use.
            let slots = unsafe { std::slice::from_raw_parts(p, segment_len(b)) };
            for slot in slots {
                let c = slot.load(Ordering::Relaxed);
                if !c.is_null() {
                    // SAFETY: a non-null entry came from `Box::into_raw` in
                    // `ensure_chunk`, was stored once, is owned by this map
                    // alone and is freed once, here.
                    drop(unsafe { Box::from_raw(c) });
                }
            }
            // SAFETY: as above; its chunks are freed and nothing reads it
            // again.
            unsafe { free_segment(p, b) };
        }
    }
}

/// A zeroed segment `b` (`segment_len(b)` null chunk pointers), as a thin
/// pointer to its first element.
#[cold]
fn new_segment(b: usize) -> *mut AtomicPtr<Chunk> {
    let seg: Box<[AtomicPtr<Chunk>]> = (0..segment_len(b))
        .map(|_| AtomicPtr::new(ptr::null_mut()))
        .collect();
    Box::into_raw(seg).cast()
}

/// Frees a segment made by [`new_segment`].
///
/// # Safety
///
/// `p` came from `new_segment(b)` (the same `b`), is freed once, and is not
/// used afterwards.
unsafe fn free_segment(p: *mut AtomicPtr<Chunk>, b: usize) {
    let seg = ptr::slice_from_raw_parts_mut(p, segment_len(b));
    // SAFETY: the caller's contract: `seg` is the boxed slice
    // `new_segment(b)` leaked, with its length.
    drop(unsafe { Box::from_raw(seg) });
}

/// A family labelled by key (`K: Display` shows it), each member read as
/// [`get`](CounterMap::get) reads it. Keys are visited in the order of
/// first use under the lock that new keys take (new keys wait; adds and
/// lookups of interned keys do not); nothing is cloned or allocated. `f`
/// must not use the map (it runs under the lock). The
/// [`overflow`](CounterMap::overflow) counter is not a member: it has no
/// key.
///
/// ```
/// use shardcount::{CountFamily, CounterMap};
/// let m: CounterMap<String> = CounterMap::new();
/// m.add(&"/about".to_string(), 2);
/// let mut v = Vec::new();
/// m.read_each(|k, n| v.push(format!("{k} {n}")));
/// assert_eq!(v, ["/about 2"]);
/// ```
impl<K> crate::contract::CountFamily for CounterMap<K>
where
    K: fmt::Display + Hash + Eq + Clone + Send + Sync,
{
    const MEMBER_KIND: crate::contract::Kind = crate::contract::Kind::Counter;
    const LABEL_NAME: Option<&'static str> = Some("key");
    type Label = K;

    fn label_names(&self) -> &[&'static str] {
        &self.label
    }

    fn read_each(&self, mut f: impl FnMut(&K, u64)) {
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
            f(&e.key, before.wrapping_add(self.place(e.place()).sum()));
        }
        for (k, total) in gone {
            f(k, total);
        }
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
}
