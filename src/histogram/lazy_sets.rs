//! A labelled histogram's sets, one per label value, made together on the
//! first record and published by a compare-exchange from null (a thread
//! that loses frees its own and uses the winner's).
//!
//! Not a `OnceLock`: making the sets allocates, and a record made from
//! inside that allocation (a global allocator that records into the same
//! histogram) would wait for its own thread's initialisation. Such a
//! record makes the sets from the system allocator instead, whose
//! allocations re-enter nothing (`thread::reentry`), and usually wins the
//! race; `system` says which allocator frees them.

use crate::set::CounterSet;
use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

pub(super) struct LazySets {
    /// Null until made, then the first of `len` sets.
    first: AtomicPtr<CounterSet>,
    len: usize,
    /// Whether the sets came from the system allocator.
    system: AtomicBool,
}

impl LazySets {
    /// `len` sets, not made yet.
    pub(super) const fn new(len: usize) -> Self {
        LazySets {
            first: AtomicPtr::new(ptr::null_mut()),
            len,
            system: AtomicBool::new(false),
        }
    }

    /// The sets, if made.
    #[inline(always)]
    pub(super) fn get(&self) -> Option<&[CounterSet]> {
        // Acquire: pairs with the AcqRel publish in `get_or_make`, so the
        // sets are initialised before they are read.
        let p = self.first.load(Ordering::Acquire);
        // SAFETY: a non-null pointer was published by `get_or_make` with
        // `len` initialised sets, freed only in `drop` (`&mut self`).
        (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, self.len) })
    }

    /// The sets, made now by `make` (one call per set) if no thread has
    /// made them.
    #[cold]
    #[inline(never)]
    pub(super) fn get_or_make(&self, make: impl Fn() -> CounterSet) -> &[CounterSet] {
        if let Some(sets) = self.get() {
            return sets;
        }
        let inside = crate::thread::reentry::enter();
        let system = inside.is_none();
        let mine = if system {
            system_sets(self.len, &make)
        } else {
            let sets: Box<[CounterSet]> = (0..self.len).map(|_| make()).collect();
            Box::into_raw(sets).cast::<CounterSet>()
        };
        // AcqRel: Release publishes the sets; Acquire, on failure, sees the
        // winner's.
        match self.first.compare_exchange(
            ptr::null_mut(),
            mine,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // Relaxed: read only in `drop`, which `&mut self` orders after.
            Ok(_) => self.system.store(system, Ordering::Relaxed),
            // SAFETY: `mine` was made above, by the allocator `system`
            // names, with `len` sets, and never published.
            Err(_) => unsafe { free_sets(mine, self.len, system) },
        }
        self.get().expect("published above")
    }
}

impl Drop for LazySets {
    fn drop(&mut self) {
        // Relaxed: `&mut self`, every other access happened-before.
        let p = self.first.load(Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: published by `get_or_make`, by the allocator `system`
            // names, with `len` sets; `&mut self`: no one else can reach them.
            unsafe { free_sets(p, self.len, self.system.load(Ordering::Relaxed)) };
        }
    }
}

/// `len` sets made by `make` in memory from the system allocator.
fn system_sets(len: usize, make: &impl Fn() -> CounterSet) -> *mut CounterSet {
    if len == 0 {
        return NonNull::dangling().as_ptr();
    }
    let layout = Layout::array::<CounterSet>(len).expect("as many as a label type has values");
    // SAFETY: `len >= 1` sets of non-zero size: a non-zero layout.
    let p = unsafe { System.alloc(layout) }.cast::<CounterSet>();
    if p.is_null() {
        std::alloc::handle_alloc_error(layout);
    }
    for i in 0..len {
        // SAFETY: `i < len`, inside the allocation, each slot written once.
        unsafe { p.add(i).write(make()) };
    }
    p
}

/// Drops and frees `len` sets at `p`.
///
/// # Safety
///
/// `p` came from [`system_sets`] if `system`, else from a
/// `Box<[CounterSet]>` of `len` sets; all `len` are initialised, and no
/// one uses them after.
unsafe fn free_sets(p: *mut CounterSet, len: usize, system: bool) {
    let sets = ptr::slice_from_raw_parts_mut(p, len);
    if !system {
        // SAFETY: the caller's promise: a `Box<[CounterSet]>`'s.
        drop(unsafe { Box::from_raw(sets) });
        return;
    }
    // SAFETY: the caller's promise: `len` initialised sets, dropped once.
    unsafe { ptr::drop_in_place(sets) };
    if len > 0 {
        let layout = Layout::array::<CounterSet>(len).expect("made with it");
        // SAFETY: `System` made it with this layout (`system_sets`).
        unsafe { System.dealloc(p.cast(), layout) };
    }
}
