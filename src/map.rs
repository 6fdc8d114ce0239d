//! `CounterMap<K>`: counters created on first use of a key, in chunks of
//! [`CounterSet`]s that never move.
//!
//! # Protocol
//!
//! * `shards: [RwLock<HashMap<K, Place>>]` intern keys to dense indices
//!   `0, 1, 2, ...` (a `Place` also holds the address of the index's
//!   chunk, so a lookup by key reads no chunk index: the address is
//!   published with the key, by the shard's unlock); a key lives in the shard its hash picks, so lookups of
//!   different keys mostly take different locks. A lookup takes its shard
//!   for reading. A new key takes its shard for writing, looks again (two
//!   threads racing on a new key get one index), takes the next index from
//!   `next` (a capped RMW: every index is handed out once, none beyond
//!   `max_keys`), makes sure the index's chunk exists, and only then
//!   inserts the key. Adds through a [`CounterHandle`] take no lock.
//! * Counters live in chunks: chunk `c` is a `CounterSet` of `CHUNK`
//!   counters holding indices `c·CHUNK ..`, allocated when the first of
//!   them is handed out and freed only when the map drops. The chunk
//!   pointers live in `segments: [AtomicPtr<AtomicPtr<CounterSet>>;
//!   SEGMENTS]`, fixed in the map: segment `b` is null or an array of
//!   `SEG0 << b` chunk pointers (`SEG0` is 8; 1 under loom), all null when
//!   installed, for chunks `SEG0·(2^b − 1) .. SEG0·(2^(b+1) − 1)` (so `c +
//!   SEG0` has its top bit at `b + log2(SEG0)`, and `c`'s offset is the
//!   bits below it). A segment is allocated with its first chunk, so memory
//!   follows the keys interned, never the bound; the `SEGMENTS = 64 −
//!   log2(SEG0)` doublings cover every chunk index a `usize` can reach.
//! * Both levels are installed the same way. Writers of different intern
//!   shards may race to create one segment or one chunk: each allocates
//!   its own and installs it by compare-exchange from null (`Release` on
//!   success, publishing the initialised array or set); a loser frees its
//!   own and uses the winner's, loaded by the failed exchange with
//!   `Acquire` (a segment) or again by `chunk` (a chunk). Readers load
//!   both levels with `Acquire` (a writer's first look at a chunk slot is
//!   `Relaxed`: a null only means "try the exchange"). Nothing is
//!   replaced or freed before the map drops, so a non-null pointer stays
//!   valid for every `&self`.
//! * `allocated_chunks` takes no lock: it loads `next` (`Relaxed`) and
//!   looks up the chunks of the indices below it, as `chunk` does.
//! * Whole-map reads (`snapshot`, `top`, `take_all`, `reset`) hold every shard's read lock
//!   at once: no index is being handed out meanwhile, so every index below
//!   `next` has its key in a shard and its chunk allocated, and a take
//!   swaps only counters whose keys it reports.
//! * Counting is the chunk's `CounterSet` protocol (`src/set.rs`): base row
//!   first, shard rows on contention, lossless `take_all`.
//! * `overflow`: a one-counter `CounterSet` that takes every add for a key
//!   beyond the bound.

use crate::primitive::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use crate::primitive::sync::{read, write, RwLock, RwLockReadGuard};
use crate::CounterSet;
use crossbeam_utils::CachePadded;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::ptr::{self, NonNull};

/// Counters per chunk: with the row's mark word (see `CounterSet`), 1 KB
/// of base row (8 lines); a contended chunk grows rows of the same size, so
/// one hot key costs rows of 127 counters, not of the whole map.
#[cfg(not(shardcount_loom))]
const CHUNK: usize = 127;
/// Models need a second chunk within a handful of keys.
#[cfg(shardcount_loom)]
const CHUNK: usize = 2;

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

/// One intern shard: the keys whose hash picks it, with their indices.
type Shard<K> = RwLock<HashMap<K, Place>>;

/// Where an interned key counts: its dense index (the order of first use,
/// for whole-map reads) and its chunk, found once when the key is
/// interned, so a lookup by key reads no chunk index.
#[derive(Clone, Copy)]
struct Place {
    index: usize,
    set: NonNull<CounterSet>,
}

// SAFETY: `set` points to a chunk the map owns: allocated before the key
// is inserted, never moved, freed only when the map drops (`drop` takes
// `&mut self`, so no `Place` is in use then). Sending it sends a
// `&CounterSet`, and `CounterSet` is `Sync`.
unsafe impl Send for Place {}
// SAFETY: as for `Send`: sharing it shares a `&CounterSet`.
unsafe impl Sync for Place {}

/// Picks intern shards: seeded per map, so that no fixed key set can pile
/// into one shard in every process.
#[cfg(not(shardcount_loom))]
type KeyHasher = std::collections::hash_map::RandomState;
/// Loom replays a model many times and needs every run to take the same
/// locks: a fixed hasher.
#[cfg(shardcount_loom)]
type KeyHasher = std::hash::BuildHasherDefault<std::collections::hash_map::DefaultHasher>;

/// How many intern shards a map has: four per shard a counter may grow
/// to (so about four per core), at most 64. Two under loom.
fn intern_shards() -> usize {
    if cfg!(shardcount_loom) {
        2
    } else {
        (4 * crate::thread::default_max_shards()).min(64)
    }
}

/// A map from keys to exact counters, each created on the key's first use.
///
/// Each key is interned once (under the lock of the shard its hash picks)
/// to a stable index into chunks of [`CounterSet`] counters that never
/// move; [`handle`](Self::handle)
/// returns a [`CounterHandle`] whose adds go straight to the cell, no
/// hashing, no lock: about the cost of a `CounterSet::add`.
/// [`add`](Self::add) by key does one lookup under a read lock, then the
/// same add.
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
/// The bound costs nothing: memory follows the keys interned. An empty
/// map is its intern shards (one cache line each, up to 64) and a table of
/// 61 segment pointers. Counters come in chunks of 127, each a
/// `CounterSet` of 1 KB while never contended (8 bytes per counter and one
/// for the chunk's contention mark), allocated with the chunk's first key;
/// chunk pointers in segments of doubling sizes (8, 16, 32, ... pointers),
/// each allocated with its first chunk: at most 2 pointers per chunk plus
/// 8. Each key is once in the intern map with its index and its chunk's
/// address (16 bytes besides the key). A contended chunk grows shard rows of 1 KB (2, then doubling
/// up to the cap, older rows kept): about 8 bytes × (1 + 2 × cap) per
/// counter of that chunk only. Nothing is freed before the map drops.
///
/// # Reads
///
/// As for [`CounterSet`]: exact at quiescence; under concurrent adds not a
/// snapshot of one instant; [`take`](Self::take) and
/// [`take_all`](Self::take_all) lose nothing.
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
    shards: Box<[CachePadded<Shard<K>>]>,
    /// Picks a key's shard.
    hasher: KeyHasher,
    /// How many indices have been handed out (at most `max_keys`).
    next: AtomicUsize,
    /// Segment `b`: null or `segment_len(b)` chunk pointers (see the
    /// protocol notes).
    segments: [AtomicPtr<AtomicPtr<CounterSet>>; SEGMENTS],
    max_keys: usize,
    overflow: CounterSet,
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
    #[inline]
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
    #[inline]
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
            shards: (0..intern_shards())
                .map(|_| CachePadded::new(RwLock::new(HashMap::new())))
                .collect(),
            hasher: KeyHasher::default(),
            next: AtomicUsize::new(0),
            segments: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            max_keys,
            overflow: CounterSet::new(1),
        }
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

    /// The intern shard that holds `key` (or any borrowed form of it: equal
    /// forms hash alike).
    #[inline]
    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> &Shard<K> {
        &self.shards[self.shard_index(key)]
    }

    #[inline]
    pub(crate) fn shard_index<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        let h = self.hasher.hash_one(key);
        // The high bits: the shard's own map uses the low ones.
        (h >> 32) as usize & (self.shards.len() - 1)
    }

    /// Every shard's read lock, in order: no index is handed out while
    /// they are held.
    fn read_all(&self) -> Vec<RwLockReadGuard<'_, HashMap<K, Place>>> {
        self.shards.iter().map(|s| read(s)).collect()
    }

    /// Segment `b`, if allocated.
    #[inline]
    fn segment(&self, b: usize) -> Option<&[AtomicPtr<CounterSet>]> {
        // Acquire: pairs with the Release exchange in `ensure_segment`, so
        // the segment's null pointers are initialised before they are read.
        let p = self.segments[b].load(Ordering::Acquire);
        // SAFETY: a non-null segment pointer came from `new_segment(b)`
        // (the winning exchange), points to `segment_len(b)` initialised
        // pointers and is freed only in `drop`, which takes `&mut self`.
        (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, segment_len(b)) })
    }

    /// The chunk `c`, if allocated.
    #[inline]
    fn chunk(&self, c: usize) -> Option<&CounterSet> {
        let (b, at) = locate(c);
        // Acquire: pairs with the Release exchange in `ensure_chunk`, so the
        // set is initialised before it is used.
        let p = self.segment(b)?[at].load(Ordering::Acquire);
        // SAFETY: a non-null entry came from `Box::into_raw` in
        // `ensure_chunk` (the winning exchange) and is freed only in
        // `drop`, which takes `&mut self`: it outlives this borrow.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// The handle of an interned key's counter.
    #[inline]
    fn place(&self, p: Place) -> CounterHandle<'_> {
        CounterHandle {
            // SAFETY: the chunk outlives `&self` (see `Place`).
            set: unsafe { p.set.as_ref() },
            i: p.index % CHUNK,
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
    pub fn handle<Q>(&self, key: &Q) -> CounterHandle<'_>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(&p) = read(self.shard(key)).get(key) {
            return self.place(p);
        }
        #[cfg(all(test, not(shardcount_loom)))]
        tests::after_miss();
        // Relaxed: a hint that spares a stream of new keys beyond the bound
        // the write lock.
        if self.next.load(Ordering::Relaxed) >= self.max_keys {
            // Full. But the key may have taken the last index since the
            // lookup above: that index came before this value of `next`
            // in its modification order, under the shard's write lock, so
            // a second lookup (taking the read lock after that writer let
            // go) finds it.
            if let Some(&p) = read(self.shard(key)).get(key) {
                return self.place(p);
            }
            return self.overflow_handle();
        }
        self.intern(key)
    }

    #[cold]
    #[inline(never)]
    fn intern<Q>(&self, key: &Q) -> CounterHandle<'_>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut keys = write(self.shard(key));
        // Another thread may have interned it since our read.
        if let Some(&p) = keys.get(key) {
            return self.place(p);
        }
        // Owned first: a panicking `to_owned` (`clone`) must not leave an
        // index handed out with no key.
        let key = key.to_owned();
        // Relaxed: only uniqueness and the cap matter; the chunk and the
        // key are published by their own Release (the exchange, the
        // unlock).
        let Ok(i) = self
            .next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_keys).then_some(n + 1)
            })
        else {
            return self.overflow_handle();
        };
        self.ensure_chunk(i / CHUNK);
        let place = Place {
            index: i,
            set: NonNull::from(
                self.chunk(i / CHUNK)
                    .expect("shardcount: the chunk was just made sure of"),
            ),
        };
        keys.insert(key, place);
        drop(keys);
        self.place(place)
    }

    /// Segment `b`, allocated unless it exists; writers of two shards may
    /// race here, and one segment wins.
    fn ensure_segment(&self, b: usize) -> &[AtomicPtr<CounterSet>] {
        if let Some(seg) = self.segment(b) {
            return seg;
        }
        let mine = new_segment(b);
        // Release on success: publishes the initialised pointers to
        // `segment`'s Acquire. Acquire on failure: the winner's segment is
        // used at once, so its initialisation must be visible here.
        let won = match self.segments[b].compare_exchange(
            ptr::null_mut(),
            mine,
            Ordering::Release,
            Ordering::Acquire,
        ) {
            Ok(_) => mine,
            Err(winner) => {
                // SAFETY: `mine` came from `new_segment(b)` above and was
                // never shared.
                unsafe { free_segment(mine, b) };
                winner
            }
        };
        // SAFETY: `won` is the installed segment: from `new_segment(b)`,
        // `segment_len(b)` initialised pointers, freed only in `drop`.
        unsafe { std::slice::from_raw_parts(won, segment_len(b)) }
    }

    /// Allocates chunk `c` (and its segment) unless it exists; writers of
    /// two shards may race here, and one set wins.
    fn ensure_chunk(&self, c: usize) {
        let (b, at) = locate(c);
        let slot = &self.ensure_segment(b)[at];
        // Relaxed: a null only means "try"; the exchange below decides.
        if !slot.load(Ordering::Relaxed).is_null() {
            return;
        }
        let set = Box::into_raw(Box::new(CounterSet::new(CHUNK)));
        // Release on success: publishes the initialised set to `chunk`'s
        // Acquire. Relaxed on failure: the winner's set is not used here
        // (`at` loads it again with Acquire).
        if slot
            .compare_exchange(ptr::null_mut(), set, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            // SAFETY: `set` came from `Box::into_raw` above and was never
            // shared.
            drop(unsafe { Box::from_raw(set) });
        }
    }

    /// Adds `n` to `key`'s counter (created if new; the overflow counter
    /// beyond the bound): one lookup under a read lock, then the add.
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
    pub fn add<Q>(&self, key: &Q, n: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.handle(key).add(n);
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
    pub fn inc<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.handle(key).add(1);
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
    pub fn sub<Q>(&self, key: &Q, n: u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.handle(key).sub(n);
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
    pub fn dec<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.handle(key).dec();
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
        let p = *read(self.shard(key)).get(key)?;
        Some(self.place(p).sum())
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
        let p = *read(self.shard(key)).get(key)?;
        Some(self.place(p).take())
    }

    /// Every key with its total, in the order keys were first used. Holds
    /// every intern shard's read lock throughout (new keys wait; adds do
    /// not). Exact at quiescence.
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
        self.collect(CounterSet::take_all_into, owned)
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
    /// `then` while every intern shard is still read-locked.
    fn collect<R>(
        &self,
        read_chunk: impl Fn(&CounterSet, &mut [u64]),
        then: impl FnOnce(Vec<(&K, u64)>) -> R,
    ) -> R {
        let shards = self.read_all();
        // Relaxed: the read locks order this after every index handed out
        // (each under a write lock since released) and stop new ones.
        let n = self.next.load(Ordering::Relaxed);
        let mut totals = vec![0u64; n.div_ceil(CHUNK) * CHUNK];
        for (c, out) in totals.chunks_mut(CHUNK).enumerate() {
            let set = self
                .chunk(c)
                .expect("shardcount: an interned index's chunk is allocated");
            read_chunk(set, out);
        }
        let mut by_index: Vec<(usize, &K)> = shards
            .iter()
            .flat_map(|keys| keys.iter().map(|(k, p)| (p.index, k)))
            .collect();
        // Fewer only if a key's `Hash` or `Eq` panicked while it was being
        // inserted: its index stays unused.
        debug_assert!(by_index.len() <= n);
        by_index.sort_unstable_by_key(|&(i, _)| i);
        then(by_index.into_iter().map(|(i, k)| (k, totals[i])).collect())
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
        self.shards.iter().map(|s| read(s).len()).sum()
    }

    /// Whether no key has a counter yet.
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
    /// memory use, `ceil(len() / 127)` at quiescence (fewer only while new
    /// keys are being interned), at most `ceil(max_keys / 127)`.
    ///
    /// ```
    /// let m = shardcount::CounterMap::new();
    /// assert_eq!(m.allocated_chunks(), 0);
    /// m.inc(&"a");
    /// assert_eq!(m.allocated_chunks(), 1);
    /// ```
    #[must_use]
    pub fn allocated_chunks(&self) -> usize {
        // Relaxed: a chunk is allocated only after its index is handed
        // out; one handed out after this load is missed, as if this ran
        // a moment earlier.
        let n = self.next.load(Ordering::Relaxed);
        (0..n.div_ceil(CHUNK))
            .filter(|&c| self.chunk(c).is_some())
            .count()
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
                &self.shards.iter().map(|s| read(s).len()).sum::<usize>(),
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
            // SAFETY: a non-null segment came from `new_segment(b)`, won its
            // exchange and is freed only below, after this last use.
            let slots = unsafe { std::slice::from_raw_parts(p, segment_len(b)) };
            for slot in slots {
                let c = slot.load(Ordering::Relaxed);
                if !c.is_null() {
                    // SAFETY: a non-null entry came from `Box::into_raw` in
                    // `ensure_chunk`, won its exchange (a loser frees its
                    // own at once), is owned by this map alone and is freed
                    // once, here.
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
fn new_segment(b: usize) -> *mut AtomicPtr<CounterSet> {
    let seg: Box<[AtomicPtr<CounterSet>]> = (0..segment_len(b))
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
unsafe fn free_segment(p: *mut AtomicPtr<CounterSet>, b: usize) {
    let seg = ptr::slice_from_raw_parts_mut(p, segment_len(b));
    // SAFETY: the caller's contract: `seg` is the boxed slice
    // `new_segment(b)` leaked, with its length.
    drop(unsafe { Box::from_raw(seg) });
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

/// A family labelled by key (`K: Display` shows it), each member read as
/// [`get`](CounterMap::get) reads it. Keys are visited one intern shard at
/// a time under that shard's read lock (new keys of that shard wait;
/// adds do not), in no particular order; nothing is cloned or allocated.
/// `f` must not use the map (it runs under the lock). The
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

    fn read_each(&self, mut f: impl FnMut(&K, u64)) {
        for shard in self.shards.iter() {
            // A key is inserted after its chunk exists (`intern`), so
            // every key seen under the lock has its counter.
            for (k, &p) in read(shard).iter() {
                f(k, self.place(p).sum());
            }
        }
    }
}
