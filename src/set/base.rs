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
use std::sync::atomic::AtomicBool;

pub(super) struct BaseRow {
    ptr: AtomicPtr<Line>,
    lines: usize,
    /// Whether the row came from the system allocator, which then frees
    /// it: made from inside this thread's own allocation (a global
    /// allocator that counts with this set, `thread::reentry`), where the
    /// global allocator would be entered again. std's atomic even under
    /// loom: stored once before `drop` reads it, and the models never make
    /// a row from the system allocator.
    system: AtomicBool,
}

impl BaseRow {
    crate::primitive::const_fn! {
        /// A row of `lines` lines, not made yet.
        pub(super) const fn unmade(lines: usize) -> BaseRow {
            BaseRow {
                ptr: AtomicPtr::new(std::ptr::null_mut()),
                lines,
                system: AtomicBool::new(false),
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
        let inside = crate::thread::reentry::enter();
        let system = inside.is_none();
        let mine = if system {
            system_lines(self.lines)?
        } else {
            Box::into_raw(try_zeroed_lines(self.lines)?).cast::<Line>()
        };
        // AcqRel: Release publishes the zeroed row; Acquire, on failure,
        // sees the winner's.
        match self.ptr.compare_exchange(
            std::ptr::null_mut(),
            mine,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // Relaxed: read only in `drop`, which `&mut self` orders after.
            Ok(_) => self.system.store(system, Ordering::Relaxed),
            // SAFETY: `mine` was made above by the allocator `system`
            // names, of `lines` lines, and never published.
            Err(_) => unsafe { free_lines(mine, self.lines, system) },
        }
        self.get()
    }
}

/// `n` zeroed lines from the system allocator (not the global one).
#[cfg(not(shardcount_loom))]
fn system_lines(n: usize) -> Option<*mut Line> {
    use std::alloc::{GlobalAlloc, Layout, System};
    let layout = Layout::array::<Line>(n).ok()?;
    // SAFETY: `n >= 1` lines of 128 bytes: a non-zero size. All-zero
    // bytes are valid `Line`s (as in `try_zeroed_lines`).
    let p = unsafe { System.alloc_zeroed(layout) }.cast::<Line>();
    (!p.is_null()).then_some(p)
}

/// Loom's models run no global allocator that counts.
#[cfg(shardcount_loom)]
fn system_lines(n: usize) -> Option<*mut Line> {
    Some(Box::into_raw(try_zeroed_lines(n)?).cast::<Line>())
}

/// Frees `n` lines at `p`.
///
/// # Safety
///
/// `p` came from [`system_lines`] if `system`, else from a
/// `Box<[Line]>` of `n` lines, and no one uses it after.
unsafe fn free_lines(p: *mut Line, n: usize, system: bool) {
    #[cfg(not(shardcount_loom))]
    if system {
        use std::alloc::{GlobalAlloc, Layout, System};
        // SAFETY: the caller's promise: `System` made it with this layout
        // (`system_lines` computed it from the same `n`).
        unsafe { System.dealloc(p.cast(), Layout::array::<Line>(n).expect("made with it")) };
        return;
    }
    let _ = system;
    // SAFETY: the caller's promise.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) });
}

impl Drop for BaseRow {
    fn drop(&mut self) {
        // Relaxed: `&mut self` means every other access already
        // happened-before this one.
        let p = self.ptr.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: published by `make`, made by the allocator `system`
            // names, of `lines` lines; `&mut self`: no one else can reach it.
            unsafe { free_lines(p, self.lines, self.system.load(Ordering::Relaxed)) };
        }
    }
}
