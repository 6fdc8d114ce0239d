//! Where a map's counters live: chunks of `CHUNK` counters, each a
//! `CounterSet`, reached through segments of doubling sizes (the protocol
//! notes in `mod.rs`), and the `Place` a key's entry keeps.

use crate::set::CounterSet;
use std::ptr::NonNull;

/// Counters per chunk: with the row's mark word and unwritten half line
/// (see `CounterSet`), 1,152 bytes of base row (9 lines); a contended chunk
/// grows rows of the same size, so one hot key costs rows of 127 counters,
/// not of the whole map.
#[cfg(not(shardcount_loom))]
pub(super) const CHUNK: usize = 127;
/// Models need a second chunk within a handful of keys.
#[cfg(shardcount_loom)]
pub(super) const CHUNK: usize = 2;

/// Chunk pointers in the first segment (`SEG0`), as a power of two: 8
/// pointers, 64 bytes, for the first 1,016 keys.
#[cfg(not(shardcount_loom))]
const SEG0_BITS: u32 = 3;
/// Models cross into a second segment at the third key.
#[cfg(shardcount_loom)]
const SEG0_BITS: u32 = 0;

/// Segments of doubling sizes: enough for every chunk index of a `usize`.
pub(super) const SEGMENTS: usize = (usize::BITS - SEG0_BITS) as usize;

/// Chunk pointers in segment `b`.
#[inline]
pub(super) fn segment_len(b: usize) -> usize {
    1 << (b + SEG0_BITS as usize)
}

/// The segment holding chunk `c`, and `c`'s offset in it.
#[inline]
pub(super) fn locate(c: usize) -> (usize, usize) {
    // No overflow: `c < usize::MAX / CHUNK`.
    let p = c + (1 << SEG0_BITS);
    let top = (usize::BITS - 1 - p.leading_zeros()) as usize;
    (top - SEG0_BITS as usize, p - (1 << top))
}

/// Where an interned key counts: its chunk and its counter there, kept in
/// the key's entry (one tagged pointer, see `index::Entry`), so a lookup
/// by key reads no chunk index.
#[derive(Clone, Copy)]
pub(super) struct Place {
    pub(super) chunk: NonNull<Chunk>,
    pub(super) i: usize,
}

/// A chunk of counters, aligned so that a pointer to it has room for a
/// counter's index (below `CHUNK`) in its low bits.
#[repr(align(128))]
pub(super) struct Chunk(pub(super) CounterSet);

const _: () = assert!(CHUNK < 128);

// SAFETY: `set` points to a chunk the map owns: allocated before the key
// is inserted, never moved, and freed only once no live key's place is in
// it and a grace period has passed since the last such key was unlinked
// (so no lookup still holds the `Place`), or when the map drops. Sending
// it sends a `&CounterSet`, and `CounterSet` is `Sync`.
unsafe impl Send for Place {}
// SAFETY: as for `Send`: sharing it shares a `&CounterSet`.
unsafe impl Sync for Place {}
