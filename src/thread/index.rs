//! Thread indexes: small, dense and reused, so a table indexed by them stays
//! as small as the number of threads alive at once.
//!
//! Index 0 means "none": a thread has none until a slot table first needs
//! one, and has none again once its exit hook has run (adds from later
//! thread-local destructors then take a slower path that does not need
//! one). `slots` owns the lifetime: it holds the [`IndexLease`] that
//! [`take_index`] gives, and drops it (giving the index back) after every
//! slot under it has been handed over.

use super::arena::{Arena, Buckets, NO_BUCKETS, NO_POSITION};
use super::pool::Pool;
use crate::primitive::sync::atomic::AtomicU64;
use crate::primitive::sync::{lock, Arc, Mutex};
use std::cell::Cell;

crate::primitive::global! {
    // Behind an Arc that each lease shares, so giving an index back never
    // needs the static: under loom, statics are gone before the main
    // thread's thread-local destructors run.
    static POOL: Arc<Mutex<Indexes>> = Arc::new(Mutex::new(Indexes {
        pool: Pool::new(),
        arenas: Vec::new(),
    }));
}

/// The index pool, and each index's arena (`thread::arena`), handed over
/// with it.
struct Indexes {
    pool: Pool,
    /// `arenas[i - 1]` is index `i`'s, once an index in the slot tables'
    /// reach took it.
    arenas: Vec<&'static Arena>,
}

/// A thread's index, where its slot is in every slot table (computed
/// once when the index is taken, so the hot path does no arithmetic on
/// it), and its index's arena (`thread::arena`). One thread-local, so a
/// rough add's arena word and its slot through the table share one base
/// address.
pub(crate) struct Held {
    index: Cell<usize>,
    /// The slot table bucket (0, never allocated, for "none").
    bucket: Cell<usize>,
    /// The slot's position in the bucket.
    offset: Cell<usize>,
    /// The index's arena, while the thread has an index in the slot
    /// tables' reach.
    pub(crate) arena: Cell<Option<&'static Arena>>,
    /// The arena's bucket pointers, copied (`thread::arena`); null while
    /// the thread has none.
    pub(crate) words: Buckets,
    /// The position the thread found a word at last (`arena::cached`).
    pub(crate) last_pos: Cell<u64>,
    /// That word.
    pub(crate) last_word: Cell<*const AtomicU64>,
}

crate::primitive::const_thread_local! {
    /// The calling thread's index (0 if none), its slot position and its
    /// arena. No destructor: the hot path reads it with a bare
    /// TLS load.
    static INDEX: Held = Held {
        index: Cell::new(0),
        bucket: Cell::new(0),
        offset: Cell::new(0),
        arena: Cell::new(None),
        words: NO_BUCKETS,
        last_pos: Cell::new(NO_POSITION),
        last_word: Cell::new(std::ptr::null()),
    };
}

/// Runs `f` on the calling thread's `Held`; `None` once it is gone (at
/// thread exit).
#[inline(always)]
pub(crate) fn held<R>(f: impl FnOnce(&Held) -> R) -> Option<R> {
    INDEX.try_with(f).ok()
}

/// The calling thread's index, or 0 if it has none.
#[inline]
pub(crate) fn index() -> usize {
    // During thread teardown the cell may be gone: no index.
    INDEX.try_with(|h| h.index.get()).unwrap_or(0)
}

/// The calling thread's slot position `(bucket, offset)` (see
/// `thread::slots`); bucket 0 if it has no index.
#[inline]
pub(crate) fn slot_position() -> (usize, usize) {
    INDEX
        .try_with(|h| (h.bucket.get(), h.offset.get()))
        .unwrap_or((0, 0))
}

fn set(i: usize, arena: Option<&'static Arena>) {
    let (bucket, offset) = super::buckets::position(i);
    // Ignoring the error: a thread being torn down keeps no index.
    let _ = INDEX.try_with(|h| {
        h.index.set(i);
        h.bucket.set(bucket);
        h.offset.set(offset);
        h.arena.set(arena);
        h.last_pos.set(NO_POSITION);
        match arena {
            Some(a) => a.copy_to(&h.words),
            None => h.words.iter().for_each(|w| w.set(std::ptr::null_mut())),
        }
    });
}

/// The calling thread's hold on its index; dropping it gives the index
/// back.
///
/// The pool's mutex orders everything: a thread that takes an index
/// another gave back happens-after everything that thread did before.
pub(crate) struct IndexLease {
    index: usize,
    pool: Arc<Mutex<Indexes>>,
}

impl IndexLease {
    pub(crate) fn index(&self) -> usize {
        self.index
    }
}

/// Gives the calling thread an index (it must have none).
pub(crate) fn take_index() -> IndexLease {
    let pool = Arc::clone(&POOL);
    let mut indexes = lock(&pool);
    let index = indexes.pool.take();
    // Only indexes with a slot get an arena: a word is a slot's hot word.
    let arena = if super::buckets::position(index).0 == 0 {
        None
    } else {
        if indexes.arenas.len() < index {
            indexes.arenas.resize_with(index, Arena::leak);
        }
        Some(indexes.arenas[index - 1])
    };
    drop(indexes);
    set(index, arena);
    IndexLease { index, pool }
}

impl Drop for IndexLease {
    fn drop(&mut self) {
        set(0, None);
        lock(&self.pool).pool.give(self.index);
    }
}
