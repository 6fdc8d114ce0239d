//! The key index of a `CounterMap`: lookups of interned keys take no lock
//! and write nothing shared.
//!
//! # Protocol
//!
//! * An entry `{hash, key, place}` is boxed once, never changed, and freed
//!   only when the index drops. `Writer::entries` owns them, in the order
//!   they were inserted (a key's dense index is its position there).
//! * `table` points to the current table: open addressing, linear probing,
//!   a power of two of slots, each null or an entry pointer. A slot goes
//!   from null to an entry once and never changes again in that table. At
//!   most half the slots are full, so every probe meets a null.
//! * Writers (an insert, a growth) hold the `writer` lock, so there is one
//!   at a time. An insert stores the new entry's pointer into the first
//!   null slot of its probe, `Release`; a lookup loads slots `Acquire`, so
//!   a pointer it sees comes with the entry's fields (and the chunk the
//!   entry's place points to, allocated before the entry).
//! * Growth (before an insert would fill more than half the table) builds
//!   a table twice as large holding every entry, with `Relaxed` stores (no
//!   one sees it yet), then publishes it by storing `table`, `Release`;
//!   lookups load `table`, `Acquire`. The old table is kept in
//!   `Writer::old` until the index drops: a lookup still probing it reads
//!   live memory, and finds every entry inserted before the growth.
//! * A lookup is one probe of the table it loaded. A key inserted after
//!   that load (into it or into a newer table) may be missed: a miss is
//!   not final until the caller looks again under the lock (`CounterMap`
//!   does, or relies on its own published count, see `map.rs`).
//! * Whole-index reads (`entries`) hold the lock: no entry is added
//!   meanwhile.

use super::Place;
use crate::primitive::sync::atomic::{AtomicPtr, Ordering};
use crate::primitive::sync::{lock, Mutex, MutexGuard};
use std::borrow::Borrow;
use std::ptr::{self, NonNull};

/// Slots in a new index's table. Loom models grow at the second key.
#[cfg(not(shardcount_loom))]
const FIRST_SLOTS: usize = 16;
#[cfg(shardcount_loom)]
const FIRST_SLOTS: usize = 2;

/// A value written once before it is shared and only read afterwards.
/// Under loom it lives in loom's cell, so that a model reading it without
/// a happens-before edge from its creation (a missing `Release` or
/// `Acquire`) fails.
#[cfg(not(shardcount_loom))]
struct Published<T>(T);

#[cfg(not(shardcount_loom))]
impl<T> Published<T> {
    fn new(v: T) -> Self {
        Published(v)
    }

    #[inline(always)]
    fn get(&self) -> &T {
        &self.0
    }

    fn into_inner(self) -> T {
        self.0
    }
}

#[cfg(shardcount_loom)]
struct Published<T>(loom::cell::UnsafeCell<T>);

#[cfg(shardcount_loom)]
impl<T> Published<T> {
    fn new(v: T) -> Self {
        Published(loom::cell::UnsafeCell::new(v))
    }

    fn get(&self) -> &T {
        // SAFETY: the value is never written after `new`, so shared
        // references to it never alias a write; `with` is loom's check
        // that `new` happened-before this read.
        self.0.with(|p| unsafe { &*p })
    }

    fn into_inner(self) -> T {
        self.0.into_inner()
    }
}

/// An interned key: never changed after it is boxed.
pub(super) struct Entry<K> {
    pub(super) hash: u64,
    pub(super) key: K,
    pub(super) place: Place,
}

type EntryPtr<K> = *mut Published<Entry<K>>;

/// A table's slots: each null or an entry.
type Slots<K> = Box<[AtomicPtr<Published<Entry<K>>>]>;

/// One table: `slots.len()` is a power of two.
struct Table<K> {
    slots: Published<Slots<K>>,
}

impl<K> Table<K> {
    /// A table of `len` null slots, boxed and leaked.
    fn alloc(len: usize) -> *mut Table<K> {
        let slots = (0..len).map(|_| AtomicPtr::new(ptr::null_mut())).collect();
        Box::into_raw(Box::new(Table {
            slots: Published::new(slots),
        }))
    }

    /// Stores `e` in the first null slot of `hash`'s probe. Only the lock
    /// holder stores, so the slot found null stays null until this store.
    fn put(&self, hash: u64, e: EntryPtr<K>, order: Ordering) {
        let slots = self.slots.get();
        let mask = slots.len() - 1;
        let mut i = hash as usize & mask;
        // Relaxed: only the lock holder writes slots, and it wrote (or saw,
        // through the lock) every store here.
        while !slots[i].load(Ordering::Relaxed).is_null() {
            i = (i + 1) & mask;
        }
        slots[i].store(e, order);
    }
}

/// What the lock guards.
pub(super) struct Writer<K> {
    /// Every entry, in insertion order; owned here.
    entries: Vec<NonNull<Published<Entry<K>>>>,
    /// Tables replaced by growth, kept for lookups still probing them.
    old: Vec<*mut Table<K>>,
}

impl<K> Writer<K> {
    /// Every entry, in insertion order.
    pub(super) fn entries(&self) -> impl ExactSizeIterator<Item = &Entry<K>> + '_ {
        // SAFETY: entries are freed only when the index drops, and `self`
        // borrows it.
        self.entries.iter().map(|e| unsafe { e.as_ref() }.get())
    }
}

/// The index: see the module notes.
pub(super) struct Index<K> {
    /// The current table; never null.
    table: AtomicPtr<Table<K>>,
    writer: Mutex<Writer<K>>,
}

// SAFETY: the index owns its entries and tables: sending it moves them
// (and so `K`s) to another thread, which then alone reaches them. The raw
// pointers are its own allocations, freed only in `drop`.
unsafe impl<K: Send> Send for Index<K> {}
// SAFETY: through `&Index` any thread reads entries (`K: Sync`) and
// inserts a `K` it made (`K: Send`); entries are dropped only in `drop`,
// which takes `&mut self`. The tables are atomics and a lock.
unsafe impl<K: Send + Sync> Sync for Index<K> {}

impl<K> Index<K> {
    pub(super) fn new() -> Self {
        Index {
            table: AtomicPtr::new(Table::alloc(FIRST_SLOTS)),
            writer: Mutex::new(Writer {
                entries: Vec::new(),
                old: Vec::new(),
            }),
        }
    }

    /// The place of the key equal to `key` (whose hash is `hash`), if it
    /// is in the table this lookup loads: no lock, no store.
    #[inline]
    pub(super) fn find<Q>(&self, hash: u64, key: &Q) -> Option<Place>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        // Acquire: pairs with the Release store of a grown table (`grow`),
        // so its slots are initialised before they are read.
        let t = self.table.load(Ordering::Acquire);
        // SAFETY: `table` is never null, and every table lives until the
        // index drops (replaced ones in `Writer::old`).
        let slots = unsafe { &*t }.slots.get();
        let mask = slots.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            // Acquire: pairs with the Release store in `insert`, so the
            // entry's fields are initialised before they are read.
            let e = slots[i].load(Ordering::Acquire);
            if e.is_null() {
                return None;
            }
            // SAFETY: a non-null slot points to an entry owned by
            // `Writer::entries`, freed only when the index drops.
            let e = unsafe { &*e }.get();
            if e.hash == hash && e.key.borrow() == key {
                return Some(e.place);
            }
            i = (i + 1) & mask;
        }
    }

    /// The writers' lock (inserts; whole-index reads).
    pub(super) fn lock(&self) -> MutexGuard<'_, Writer<K>> {
        lock(&self.writer)
    }

    /// Inserts a key that is not in the index: the caller looked it up
    /// under the same guard `w`, which must be this index's.
    pub(super) fn insert(&self, w: &mut Writer<K>, entry: Entry<K>) {
        // Relaxed: under the lock, the last store of `table` (by a holder
        // of the lock) happened-before.
        let mut t = self.table.load(Ordering::Relaxed);
        // SAFETY: as in `find`.
        let len = unsafe { &*t }.slots.get().len();
        if (w.entries.len() + 1) * 2 > len {
            t = self.grow(w, t, len * 2);
        }
        let hash = entry.hash;
        let e = NonNull::from(Box::leak(Box::new(Published::new(entry))));
        // Release: publishes the entry's fields to `find`'s Acquire.
        // SAFETY: `t` is the current table, alive until the index drops.
        unsafe { &*t }.put(hash, e.as_ptr(), Ordering::Release);
        w.entries.push(e);
    }

    /// Replaces the table `old` by one of `len` slots holding every entry.
    #[cold]
    fn grow(&self, w: &mut Writer<K>, old: *mut Table<K>, len: usize) -> *mut Table<K> {
        let new = Table::alloc(len);
        // SAFETY: `new` was just allocated and is not shared yet.
        let table = unsafe { &*new };
        for e in &w.entries {
            // SAFETY: entries are freed only when the index drops.
            let hash = unsafe { e.as_ref() }.get().hash;
            // Relaxed: nobody sees this table before the Release below.
            table.put(hash, e.as_ptr(), Ordering::Relaxed);
        }
        // Release: publishes the filled table to `find`'s Acquire.
        self.table.store(new, Ordering::Release);
        w.old.push(old);
        new
    }
}

impl<K> Drop for Index<K> {
    fn drop(&mut self) {
        let w = self.lock();
        // Relaxed: `&mut self`: every other access happened-before.
        let t = self.table.load(Ordering::Relaxed);
        for &p in w.old.iter().chain(std::iter::once(&t)) {
            // SAFETY: every table came from `Table::alloc`, is listed once
            // (the current one in `table`, replaced ones in `old`), and
            // nothing reads it again.
            drop(unsafe { Box::from_raw(p) });
        }
        for e in &w.entries {
            // SAFETY: each entry came from `Box::leak` in `insert`, is
            // listed once, and no table that points to it survives.
            drop(unsafe { Box::from_raw(e.as_ptr()) }.into_inner());
        }
    }
}
