//! A set's base row, made at construction (`CounterSet::new`) or on the
//! first add to it or `split` (a `const` set: `LabelledCounter::new`,
//! `Histogram::new`).
//!
//! The row is one pointer, null until made. Making it is a zeroed
//! allocation published by a compare-exchange from null; a thread that
//! loses the race frees its own allocation and uses the winner's. Reads
//! of an unmade row see zeros and make nothing. The pointer never changes
//! once set, until the set is dropped.
//!
//! Why not a `OnceLock<CounterSet>` around the whole set (as before): its
//! state is checked on every add, including an owner's add to its own
//! row, which never touches the base. Here the adds that test the pointer
//! are adds to the base (an uncontended set's), which load it anyway.

use crate::primitive::sync::atomic::{AtomicPtr, Ordering};
use crate::shard::{try_zeroed_lines, Line};

pub(super) struct BaseRow {
    ptr: AtomicPtr<Line>,
    lines: usize,
}

impl BaseRow {
    crate::primitive::const_fn! {
        /// A row of `lines` lines, not made yet.
        pub(super) const fn unmade(lines: usize) -> BaseRow {
            BaseRow {
                ptr: AtomicPtr::new(std::ptr::null_mut()),
                lines,
            }
        }
    }

    /// A row of `lines` lines, made now; `None` if it cannot be allocated.
    pub(super) fn made(lines: usize) -> Option<BaseRow> {
        let row = BaseRow::unmade(lines);
        row.make()?;
        Some(row)
    }

    /// Lines in the row, made or not.
    #[inline(always)]
    pub(super) fn lines(&self) -> usize {
        self.lines
    }

    /// The row's first line, or null if it is not made yet: for an add,
    /// which needs the address alone.
    #[inline(always)]
    pub(super) fn first(&self) -> *const Line {
        // Acquire: pairs with `make`'s AcqRel publish, so the allocator's
        // zeroes are seen before any count written here.
        self.ptr.load(Ordering::Acquire)
    }

    /// The row, if made.
    #[inline(always)]
    pub(super) fn get(&self) -> Option<&[Line]> {
        let p = self.first();
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null pointer was published by `make` from a
        // `Box<[Line]>` of `self.lines` lines, and is freed only in `drop`
        // (`&mut self`), so it outlives `&self`.
        Some(unsafe { &*std::ptr::slice_from_raw_parts(p, self.lines) })
    }

    /// The row, made now if no thread has made it; `None` if it cannot be
    /// allocated.
    #[cold]
    #[inline(never)]
    pub(super) fn make(&self) -> Option<&[Line]> {
        if let Some(row) = self.get() {
            return Some(row);
        }
        let mine = Box::into_raw(try_zeroed_lines(self.lines)?).cast::<Line>();
        // AcqRel: Release publishes the zeroed row; Acquire, on failure,
        // sees the winner's.
        if let Err(theirs) = self.ptr.compare_exchange(
            std::ptr::null_mut(),
            mine,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: `mine` came from `Box::into_raw` above, of `lines`
            // lines, and was never published.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(mine, self.lines)) });
            debug_assert!(!theirs.is_null());
        }
        self.get()
    }
}

impl Drop for BaseRow {
    fn drop(&mut self) {
        // Relaxed: `&mut self` means every other access already
        // happened-before this one.
        let p = self.ptr.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: published by `make` from a `Box<[Line]>` of `lines`
            // lines; `&mut self`: no one else can reach it.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, self.lines)) });
        }
    }
}
