//! The map's own reach into its store: finding, allocating and freeing
//! its chunks and their segments (the layout is in `store.rs`).

use super::counter_map::CounterMap;
use super::handle::CounterHandle;
use super::store::{locate, segment_len, Chunk, Place, CHUNK, SEGMENTS};
use crate::primitive::sync::atomic::{AtomicPtr, Ordering};
use crate::set::CounterSet;
use std::hash::Hash;
use std::ptr::{self, NonNull};

impl<K: Hash + Eq + Clone + Send + Sync> CounterMap<K> {
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
    pub(super) fn chunk(&self, c: usize) -> Option<&CounterSet> {
        let (b, at) = locate(c);
        // Acquire: pairs with the Release store in `ensure_chunk`, so the
        // set is initialised before it is used.
        let p = self.segment(b)?[at].load(Ordering::Acquire);
        // SAFETY: a non-null entry came from `Box::into_raw` in
        // `ensure_chunk`; it is freed by `free_chunk` (under the lock,
        // which every caller of this holds) or in `drop` (`&mut self`).
        (!p.is_null()).then(|| &unsafe { &*p }.0)
    }

    /// The counter of place number `s` (counter `s % CHUNK` of chunk
    /// `s / CHUNK`), which holds a key; under the lock.
    pub(super) fn numbered(&self, s: usize) -> CounterHandle<'_> {
        CounterHandle {
            set: self
                .chunk(s / CHUNK)
                .expect("shardcount: a used place's chunk is allocated"),
            i: s % CHUNK,
        }
    }

    /// The handle of an interned key's counter: valid while the key's
    /// entry is (a pinned lookup, the index's lock, or a pinned entry).
    #[inline]
    pub(super) fn place(&self, p: Place) -> CounterHandle<'_> {
        CounterHandle {
            // SAFETY: the chunk lives while a key whose place names it is
            // reachable (see `Place`), which the caller makes sure of for
            // as long as it uses the handle.
            set: &unsafe { p.chunk.as_ref() }.0,
            i: p.i,
        }
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
    pub(super) fn ensure_chunk(&self, c: usize) -> NonNull<Chunk> {
        let (b, at) = locate(c);
        let ptr = &self.ensure_segment(b)[at];
        // Relaxed: chunk pointers are stored only under the lock, which this
        // thread holds.
        let mut set = ptr.load(Ordering::Relaxed);
        if set.is_null() {
            set = Box::into_raw(Box::new(Chunk(CounterSet::new(CHUNK))));
            // Release: publishes the initialised set to `chunk`'s Acquire.
            ptr.store(set, Ordering::Release);
        }
        NonNull::new(set).expect("a chunk just made sure of")
    }

    /// Frees chunk `c`, which holds no key since a grace period past the
    /// unlinking of its last one: no lookup still holds a place in it, no
    /// handle names it (held keys are never removed), and every reader of
    /// chunk pointers holds the lock (held here) or reads nullness only.
    pub(super) fn free_chunk(&self, c: usize) {
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
            let ptrs = unsafe { std::slice::from_raw_parts(p, segment_len(b)) };
            for ptr in ptrs {
                let c = ptr.load(Ordering::Relaxed);
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
