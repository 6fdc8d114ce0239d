//! Arenas: one dense array of hot words per thread index, a word per
//! counter, so a thread that adds to many counters touches each counter's
//! own line and one word of its own arena (`RoughCounter` uses them).
//!
//! * A counter takes a **position** at first use: a small, dense, reused
//!   number from a pool of its own, kept packed as `(bucket << 32) |
//!   offset` so the hot path does no arithmetic on it but a shift. 0
//!   (bucket 0, never allocated) is what a counter has before first use,
//!   or beyond the arenas' reach; its adds take the counter's own slow
//!   path.
//! * An **arena** belongs to a thread index, not to a thread: it is made
//!   for the index's first holder and handed, with the index, to every
//!   later one (`thread::index`), and never freed (its size follows the
//!   counters alive at once, as the index pool follows the threads). Its
//!   buckets hold 1, 1, 2, 4, ... words and never move, so a counter's
//!   slot can point at its word. The bucket pointers are plain cells:
//!   only the index's holder reads or writes them, and the index pool's
//!   mutex hands them over with the index. The holder keeps a copy in
//!   its `Held` thread-local, one load from the hot path.
//! * A word is **free** (`u64::MAX`) unless it is the hot word of the
//!   slot that its index's holder took over in the counter holding its
//!   position; any add of at least 1 to a free word carries, so the hot
//!   path's carry test also says "not taken over". A slot handed back
//!   leaves its word free, and a counter's block (and so its position)
//!   is freed only after every slot in it was handed back, so the next
//!   counter at a position finds every word there free.
use super::buckets::{bucket_len, locate};
use super::index::held;
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::primitive::sync::{lock, Arc, Mutex};
use std::cell::Cell;
use std::ptr;

/// Positions at or above `2^MAX_POSITION_LOG2` are beyond reach (about
/// 16.8 M counters alive at once).
#[cfg(not(shardcount_loom))]
const MAX_POSITION_LOG2: usize = 24;
/// Models use one or two counters.
#[cfg(shardcount_loom)]
const MAX_POSITION_LOG2: usize = 2;
const BUCKETS: usize = MAX_POSITION_LOG2 + 1;

/// A free word: any add of at least 1 carries.
pub(crate) const FREE: u64 = u64::MAX;

/// Where one thread index's words are: a pointer per bucket, null until
/// allocated.
pub(crate) type Buckets = [Cell<*mut AtomicU64>; BUCKETS];

/// No bucket: a thread without an index, or a new arena.
#[allow(clippy::declare_interior_mutable_const)] // a fresh array each use
pub(crate) const NO_BUCKETS: Buckets = [const { Cell::new(ptr::null_mut()) }; BUCKETS];

/// One thread index's words, in buckets allocated on first use. The
/// index's holder keeps a copy of the bucket pointers in its `Held`
/// thread-local, so the hot path reaches a word in one load from it.
pub(crate) struct Arena {
    buckets: Buckets,
}

// SAFETY: the bucket pointers (the only non-`Sync` part) are read and
// written only by the thread holding the arena's index; the index pool's
// mutex orders one holder's accesses before the next one's. The words
// themselves are atomics.
unsafe impl Sync for Arena {}
// SAFETY: as for `Sync`: handed from holder to holder under a mutex.
unsafe impl Send for Arena {}

impl Arena {
    /// A new arena for a thread index, kept for the process's life.
    pub(super) fn leak() -> &'static Arena {
        Box::leak(Box::new(Arena {
            buckets: NO_BUCKETS,
        }))
    }

    /// Copies the bucket pointers into `to` (the new holder's copy).
    pub(super) fn copy_to(&self, to: &Buckets) {
        for (to, from) in to.iter().zip(&self.buckets) {
            to.set(from.get());
        }
    }
}

/// The cache's key while it holds nothing: no position packs to it.
pub(crate) const NO_POSITION: u64 = u64::MAX;

/// The calling thread's word at `pos` if it is the position the thread
/// cached last ([`remember`]): a compare and a load. The cache holds only
/// an address (a word of the thread's own arena, never freed), so it stays
/// right whichever counter holds the position; it is cleared when the
/// thread's index (and so its arena) changes.
///
/// A raw pointer (a word of the thread's arena, never freed), so the hit
/// tests the key alone: as a reference in an `Option`, it was tested for
/// null too.
#[inline(always)]
pub(crate) fn cached(pos: u64) -> Option<*const AtomicU64> {
    held(|h| (h.last_pos.get() == pos).then(|| h.last_word.get())).flatten()
}

/// The calling thread's word at `pos` (packed), if its bucket exists.
#[inline(always)]
pub(crate) fn find(pos: u64) -> Option<&'static AtomicU64> {
    let b = (pos >> 32) as usize;
    debug_assert!(b < BUCKETS);
    held(|h| {
        // SAFETY: every position's bucket is below `BUCKETS`
        // (`Position::take`), within the array.
        let p = unsafe { h.words.get_unchecked(b) }.get();
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null bucket holds `bucket_len(b)` words, never
        // freed, and a position's offset is below its bucket's length.
        Some(unsafe { &*p.add(pos as u32 as usize) })
    })
    .flatten()
}

/// Caches `word` as the calling thread's word at `pos`. Only the slow
/// paths call it (a takeover, a due check), so a thread's busiest counter
/// stays cached while it adds to others now and then, and an add that
/// misses writes nothing but its word. Two stores, and the hit two loads:
/// a signal handler that caches another word between them leaves a pair
/// that mixes the two (`RoughCounter`'s docs: adds are not
/// async-signal-safe).
pub(crate) fn remember(pos: u64, word: &'static AtomicU64) {
    held(|h| {
        h.last_pos.set(pos);
        h.last_word.set(word);
    });
}

/// The calling thread's word at `pos` (packed), allocating its bucket if
/// needed; `None` for position 0 or a thread without an arena.
#[cold]
pub(crate) fn word_or_alloc(pos: u64) -> Option<&'static AtomicU64> {
    let b = (pos >> 32) as usize;
    if b == 0 || b >= BUCKETS {
        return None;
    }
    held(|h| {
        let arena = h.arena.get()?;
        if h.words[b].get().is_null() {
            // Padded to whole 128-byte pairs of lines on both sides: a
            // small bucket (1, 1, 2 words) beside other heap data would
            // share its line with whatever other threads write there.
            const PAD: usize = 128 / std::mem::size_of::<u64>();
            let words: Box<[AtomicU64]> = (0..bucket_len(b) + 2 * PAD)
                .map(|_| AtomicU64::new(FREE))
                .collect();
            let base: *mut AtomicU64 = Box::into_raw(words).cast();
            // SAFETY: fewer than `PAD` words in, inside the allocation,
            // which goes on for `bucket_len(b) + PAD` more (never freed).
            let p = unsafe { base.add(base.align_offset(128).min(PAD - 1)) };
            // Only this thread (the index's holder) touches either copy.
            arena.buckets[b].set(p);
            h.words[b].set(p);
        }
        Some(())
    })
    .flatten()?;
    find(pos)
}

crate::primitive::global! {
    // Behind an Arc that each position shares, so giving one back never
    // needs the static (as the index pool: under loom, statics are gone
    // before the main thread's thread-local destructors run).
    static POSITIONS: Arc<Mutex<super::pool::Pool>> = Arc::new(Mutex::new(super::pool::Pool::new()));
}

/// A counter's position in every arena, held while the counter lives;
/// dropping it gives the position back (after the counter freed its
/// words).
pub(crate) struct Position {
    number: usize,
    /// Packed, as the hot path reads it.
    pos: u64,
    pool: Arc<Mutex<super::pool::Pool>>,
}

impl Position {
    /// Takes the smallest free position.
    ///
    /// Inside the re-entry guard (`thread::reentry`): the pool's set-up
    /// allocates, and an allocator that counts with a `RoughCounter` not
    /// yet used would otherwise install it here, taking a position inside
    /// the pool's own set-up. Under the guard such an add counts on the
    /// counter's own word instead.
    pub(crate) fn take() -> Position {
        let _inside = super::reentry::enter();
        let pool = Arc::clone(&POSITIONS);
        let number = lock(&pool).take();
        let pos = match locate(number) {
            (b, off) if b < BUCKETS => ((b as u64) << 32) | off as u64,
            _ => 0,
        };
        Position { number, pos, pool }
    }

    /// The position as the hot path reads it, packed: 0 (bucket 0, never
    /// allocated) if beyond reach.
    pub(crate) fn get(&self) -> u64 {
        self.pos
    }
}

impl Drop for Position {
    fn drop(&mut self) {
        // Giving back may allocate under the lock (the pool's heap grows):
        // as in `take`, an add that allocation makes must not install a
        // counter, which would wait here for the lock this thread holds.
        let _inside = super::reentry::enter();
        lock(&self.pool).give(self.number);
    }
}

/// Sets `word` free again after the calling thread's add to it carried
/// while it was free. Only the calling thread writes the word.
pub(crate) fn free(word: &AtomicU64) {
    // Relaxed: the word's next writer is this thread, or the next holder
    // of its index, which happens-after it through the index pool's mutex.
    word.store(FREE, Ordering::Relaxed);
}
