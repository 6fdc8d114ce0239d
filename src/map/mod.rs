//! `CounterMap<K>`: counters created on first use of a key, in chunks of
//! [`CounterSet`](crate::set::CounterSet)s that never move.
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

mod counter_map;
mod handle;
mod hasher;
mod index;
mod places;
mod store;

// `CounterMap`'s methods, a concept a file. Rustdoc lists them in the
// order the files are declared: the constructors first.
mod new;

mod intern;
mod reads;
mod remove;
mod rows;

// The map's chunks, last as when they were `store.rs`'s.
mod chunks;

pub use counter_map::CounterMap;
pub use handle::{CounterHandle, IntoKey};
