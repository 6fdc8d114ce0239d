//! Per-thread slots, written once for every type that keeps one per thread.
//!
//! * [`SlotTable`] belongs to one owner (a counter) and holds one slot per
//!   thread index (see `thread::index`), so a thread finds its slot in any
//!   owner in O(1): one thread-local load, one bucket load, an offset. Slots
//!   live in buckets of 1, 1, 2, 4, 8, ... slots, allocated on first use and
//!   never moved or freed before the table drops, so a slot reference stays
//!   valid while the owner lives. Indexes are dense and reused, so a table
//!   is as large as the number of threads alive at once, not as the number
//!   that ever came and went.
//! * The **exit registry** is a thread-local with a destructor that lists
//!   the owners whose slots the thread used. At thread exit it calls each
//!   owner's [`ThreadExit::thread_exit`] with the thread's index (which
//!   folds and frees the slot), and only then gives the index back, so the
//!   next thread to take it finds every slot under it handed over.
//!
//! Orderings: buckets are published with a `Release` compare-exchange
//! (`get_or_alloc`) and every load of a bucket (`at`, `get_or_alloc`,
//! `for_each`) is `Acquire`, so a slot's initial state is visible to every
//! reader; the drop loads `Relaxed` (`&mut self`: every other access
//! happened-before).

use super::buckets::{assert_position, bucket_len, locate, position, BUCKETS, BUCKETS_POW2};
use crate::primitive::sync::atomic::{AtomicPtr, Ordering};
use std::cell::{Cell, RefCell};
use std::ptr;

/// One slot per thread index, allocated in buckets on first use.
pub(crate) struct SlotTable<S> {
    buckets: [AtomicPtr<S>; BUCKETS_POW2],
}

impl<S: Default> SlotTable<S> {
    pub(crate) fn new() -> Self {
        SlotTable {
            buckets: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
        }
    }

    /// The slot of thread index `i`, if its bucket exists (never for 0).
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&S> {
        let (b, off) = position(i);
        self.at(b, off)
    }

    /// The slot at a position from [`position`] (the calling thread's, from
    /// `thread::slot_position`), if its bucket exists.
    #[inline]
    pub(crate) fn at(&self, bucket: usize, offset: usize) -> Option<&S> {
        // Acquire: pairs with the Release publish in `get_or_alloc`, so the
        // slot's initial state is visible. The mask is free of cost and
        // keeps the index in range without a check: `position` never gives
        // a bucket beyond the array.
        let p = self.buckets[bucket & (BUCKETS_POW2 - 1)].load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        assert_position(bucket, offset);
        // SAFETY: a non-null bucket `b` points at `bucket_len(b)` slots,
        // live until `self` drops, and `offset < bucket_len(bucket)` holds
        // for every position `position` gives (checked in debug builds).
        Some(unsafe { &*p.add(offset) })
    }

    /// The slot of thread index `i` (at least 1), allocating its bucket if
    /// needed; `None` if `i` is beyond the table's reach.
    #[cold]
    pub(crate) fn get_or_alloc(&self, i: usize) -> Option<&S> {
        debug_assert!(i != 0, "index 0 means no index");
        let (b, _) = locate(i);
        if b == 0 || b >= BUCKETS {
            return None;
        }
        if self.buckets[b].load(Ordering::Acquire).is_null() {
            let new: Box<[S]> = (0..bucket_len(b)).map(|_| S::default()).collect();
            let new = Box::into_raw(new).cast::<S>();
            // Release: pairs with the Acquire bucket loads (`at`, above,
            // `for_each`), publishing the slots' initial state. Acquire on
            // failure: we go on to use the winner's bucket.
            if self.buckets[b]
                .compare_exchange(ptr::null_mut(), new, Ordering::Release, Ordering::Acquire)
                .is_err()
            {
                // SAFETY: `new` came from the Box above and was never shared.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(new, bucket_len(b))) });
            }
        }
        self.get(i)
    }

    /// Calls `f` on every allocated slot.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&S)) {
        for (b, bucket) in self.buckets.iter().enumerate() {
            let p = bucket.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: as in `get`: `bucket_len(b)` live slots.
                let slots = unsafe { &*ptr::slice_from_raw_parts(p, bucket_len(b)) };
                slots.iter().for_each(&mut f);
            }
        }
    }
}

impl<S> Drop for SlotTable<S> {
    fn drop(&mut self) {
        for (b, bucket) in self.buckets.iter().enumerate() {
            let p = bucket.load(Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: allocated in `get_or_alloc` as a boxed slice of
                // `bucket_len(b)` slots, owned by this table alone.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(p, bucket_len(b))) });
            }
        }
    }
}

/// An owner of per-thread slots, told when a thread that used one exits.
pub(crate) trait ThreadExit {
    /// The thread with index `index` is exiting: hand its slot over (fold
    /// it, mark it free). Runs on that thread, before the index is reused.
    fn thread_exit(&self, index: usize);
    /// Whether the owner is gone, so the registry may let go of it early.
    fn is_dropped(&self) -> bool;
}

struct Registry {
    /// The thread's index while it holds one.
    lease: RefCell<Option<super::index::IndexLease>>,
    owners: RefCell<Vec<Box<dyn ThreadExit>>>,
    /// Prune dropped owners when the list reaches this length.
    prune_at: Cell<usize>,
}

impl Registry {
    fn index(&self) -> usize {
        self.lease
            .borrow()
            .as_ref()
            .map_or(0, super::index::IndexLease::index)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let index = self.index();
        for owner in self.owners.get_mut().drain(..) {
            owner.thread_exit(index);
        }
        // Only now, with every slot under it handed over, is the index
        // given back (the lease drops after this body).
    }
}

crate::primitive::const_thread_local! {
    static REGISTRY: Registry = Registry {
        lease: RefCell::new(None),
        owners: RefCell::new(Vec::new()),
        prune_at: Cell::new(8),
    };
}

/// The calling thread's index, taking one if it has none; `None` once the
/// thread's exit registry is gone (a thread-local destructor at exit).
#[cold]
pub(crate) fn index_or_take() -> Option<usize> {
    REGISTRY
        .try_with(|r| {
            let mut lease = r.lease.borrow_mut();
            lease.get_or_insert_with(super::index::take_index).index()
        })
        .ok()
}

/// Asks for `owner.thread_exit(index)` when the calling thread exits.
/// Returns `false` if the thread's registry is already gone.
#[cold]
pub(crate) fn on_exit(owner: Box<dyn ThreadExit>) -> bool {
    REGISTRY
        .try_with(|r| {
            let mut owners = r.owners.borrow_mut();
            if owners.len() >= r.prune_at.get() {
                // Owners dropped meanwhile get their exit call now: the
                // list then follows the owners alive, not all ever used.
                let index = r.index();
                owners.retain(|o| {
                    let gone = o.is_dropped();
                    if gone {
                        o.thread_exit(index);
                    }
                    !gone
                });
                r.prune_at.set((owners.len() * 2).max(8));
            }
            owners.push(owner);
        })
        .is_ok()
}
