//! Lines: the 128-byte blocks of atomic words that every row of a shard
//! table is made of, how they are allocated, and how a row's word is found
//! in them.

use crate::primitive::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// Words per [`Line`].
pub(crate) const LINE_WORDS: usize = 16;

/// One 128-byte-aligned block of words: the unit a row is made of.
pub(crate) type Line = CachePadded<[AtomicU64; LINE_WORDS]>;

/// `n` zeroed lines, or `None` when they cannot be allocated (more bytes
/// than the address space allows, or the allocator refuses). Callers that
/// take a size from a user turn `None` into a panic naming it; growth
/// skips a table it cannot allocate. Either way, never an abort.
///
/// Zeroed by the allocator (`alloc_zeroed`): a large table's pages are not
/// touched until a thread writes them, so a size the host cannot back
/// fails here, not later in a write.
#[cfg(not(shardcount_loom))]
pub(crate) fn try_zeroed_lines(n: usize) -> Option<Box<[Line]>> {
    use std::alloc::{alloc_zeroed, Layout};
    if n == 0 {
        return Some(Box::new([]));
    }
    let layout = Layout::array::<Line>(n).ok()?;
    // SAFETY: `layout` has a non-zero size: `n > 0` lines of 128 bytes.
    let p = unsafe { alloc_zeroed(layout) }.cast::<Line>();
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is a fresh allocation by the global allocator with
    // `Layout::array::<Line>(n)`, the layout a `Box<[Line]>` of `n` lines
    // frees with; all-zero bytes are a valid `Line` (`CachePadded` of
    // `AtomicU64`s, which have `u64`'s representation), so all `n` are
    // initialised.
    Some(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) })
}

/// Loom's atomics are not plain words: built one by one.
#[cfg(shardcount_loom)]
pub(crate) fn try_zeroed_lines(n: usize) -> Option<Box<[Line]>> {
    let mut lines = Vec::new();
    lines.try_reserve_exact(n).ok()?;
    lines.extend((0..n).map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0)))));
    Some(lines.into_boxed_slice())
}

/// How many lines a row of `words` words needs (at least one).
pub(crate) const fn lines_for(words: usize) -> usize {
    match words.div_ceil(LINE_WORDS) {
        0 => 1,
        n => n,
    }
}

/// Word `i` of the row made of `lines`.
#[inline]
pub(crate) fn word(lines: &[Line], i: usize) -> &AtomicU64 {
    &lines[i / LINE_WORDS][i % LINE_WORDS]
}

/// Word `i` of the row made of `lines`, without bounds checks: for a hot
/// path whose index was checked once, earlier.
///
/// # Safety
///
/// `i < lines.len() * LINE_WORDS`.
#[inline(always)]
pub(crate) unsafe fn word_unchecked(lines: &[Line], i: usize) -> &AtomicU64 {
    debug_assert!(i < lines.len() * LINE_WORDS);
    // SAFETY: `i / LINE_WORDS < lines.len()` by the caller's promise, and
    // `i % LINE_WORDS < LINE_WORDS`, the words in a line.
    unsafe {
        lines
            .get_unchecked(i / LINE_WORDS)
            .get_unchecked(i % LINE_WORDS)
    }
}

/// Word `i` of the row whose first line is at `first`, addressed as one
/// flat array where a line is exactly its words (128-byte alignment:
/// `x86_64`, `aarch64`, ...), so the compiler need not split `i` into a
/// line and a word; elsewhere (and under loom, whose atomics are larger)
/// as `word_unchecked`.
///
/// # Safety
///
/// `first` points to a live line followed by enough lines in the same
/// allocation to hold word `i`.
#[inline(always)]
pub(crate) unsafe fn flat_word_at<'a>(first: *const Line, i: usize) -> &'a AtomicU64 {
    if cfg!(not(shardcount_loom))
        && std::mem::size_of::<Line>() == LINE_WORDS * std::mem::size_of::<AtomicU64>()
    {
        // SAFETY: `CachePadded` is `repr(C)` with its value at offset 0
        // (crossbeam-utils 0.8.22 and later), and a line is no larger than
        // its array of words: the row's words lie back to back, `i` of them
        // before word `i`, all inside the lines the caller promises.
        unsafe { &*first.cast::<AtomicU64>().add(i) }
    } else {
        // SAFETY: the caller's promise: line `i / LINE_WORDS` is in the
        // row, and `i % LINE_WORDS < LINE_WORDS`, the words in a line.
        unsafe {
            let line: &'a Line = &*first.add(i / LINE_WORDS);
            line.get_unchecked(i % LINE_WORDS)
        }
    }
}

/// An area of `len` lines allocated on first use and freed with its
/// table: the shared rows or the baselines.
pub(super) struct Lazy {
    ptr: AtomicPtr<Line>,
}

impl Lazy {
    pub(super) fn new() -> Lazy {
        Lazy {
            ptr: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The area if it exists.
    #[inline]
    pub(super) fn get(&self, len: usize) -> Option<&[Line]> {
        // Acquire: pairs with the Release publish in `get_or_make`, so the
        // zeroed lines are initialised before use.
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was published by `get_or_make` from a
        // live `Box<[Line]>` of `len` lines (the table's fixed size), freed
        // only in `free`, which has `&mut`.
        (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, len) })
    }

    /// The area, allocated (zeroed) if it does not exist yet; `None` if it
    /// cannot be allocated.
    #[cold]
    #[inline(never)]
    pub(super) fn get_or_make(&self, len: usize) -> Option<&[Line]> {
        if let Some(area) = self.get(len) {
            return Some(area);
        }
        // An add from inside this thread's own allocation has none: the
        // callers' fallback, as when memory is short (`thread::reentry`).
        let _inside = crate::thread::reentry::enter()?;
        let fresh = Box::into_raw(try_zeroed_lines(len)?).cast::<Line>();
        // AcqRel on success: Release publishes the zeroed lines to `get`.
        // Acquire on failure: we go on to use the winner's lines.
        match self.ptr.compare_exchange(
            std::ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {}
            Err(_) => {
                // SAFETY: `fresh` came from `Box::into_raw` of `len` lines
                // just above and was never shared.
                drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(fresh, len)) });
            }
        }
        self.get(len)
    }

    /// Frees the area: only from the table's drop.
    pub(super) fn free(&mut self, len: usize) {
        // Relaxed: `&mut self`, every other access happened-before.
        let p = self.ptr.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: published by `get_or_make` from a `Box<[Line]>` of
            // `len` lines, freed once, here.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, len)) });
        }
    }
}
