//! The key index of a `CounterMap`: lookups of interned keys take no lock
//! and write nothing shared; removed keys are freed after a grace period.
//!
//! # Protocol
//!
//! * An entry `{hash, key, place, number, pinned, pos, seen}` is boxed once;
//!   `place` and `number` change when compaction moves the key (under the
//!   lock; `place` is `Release`-stored, lookups load it `Acquire`),
//!   `pinned` is set once (under the lock) when a handle is made, and
//!   `pos` and `seen` are read and written under the lock only. `Writer::order` lists the live ones in the
//!   order they were inserted (`pos` is an entry's position there; a
//!   removed entry leaves a hole until the list is compacted).
//! * `table` points to the current table: open addressing, linear probing,
//!   a power of two of bins, each null, an entry pointer, or `TOMBSTONE`
//!   (a removed entry's bin: probes go on past it). A null bin only ever
//!   becomes an entry; an entry only becomes `TOMBSTONE`; a `TOMBSTONE`
//!   may become an entry again. Live entries and tombstones together fill
//!   at most half the bins, so every probe meets a null.
//! * Writers (an insert, a removal, a rebuild) hold the `writer` lock, so
//!   there is one at a time. An insert stores the new entry's pointer into
//!   the first null or tombstone bin of its probe, `Release`; a lookup
//!   loads bins `Acquire`, so a pointer it sees comes with the entry's
//!   fields (and the chunk the entry's place points to, made before).
//! * A rebuild (before an insert would fill more than half the table, or
//!   after removals leave it under a fifth full) builds a table holding
//!   every live entry, with `Relaxed` stores (no one sees it yet), then
//!   publishes it by storing `table`, `Release`; lookups load `table`,
//!   `Acquire`. The old table is freed after a grace period.
//! * **Freeing.** Lock-free lookups run inside a pinned section
//!   (`thread::grace`, their `Pin` is an argument) and use what they found
//!   before the section ends. A removed entry and a replaced table are
//!   unlinked first (a tombstone; a new `table`), and freed by the map
//!   only after a grace period that began after the unlink: any lookup
//!   that could still reach them has left its section.
//! * A lookup is one probe of the table it loaded. A key inserted after
//!   that load may be missed: a miss is not final until the caller looks
//!   again under the lock (`CounterMap` does, or relies on its own
//!   published count, see `intern.rs`).
//! * Whole-index reads (`entries`) and lookups under the lock see a fixed
//!   set of entries: nothing is inserted or freed meanwhile.

use super::places::Places;
use super::store::{Chunk, Place};
use crate::primitive::const_thread_local;
use crate::primitive::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use crate::primitive::sync::{lock, Mutex, MutexGuard};
use crate::thread::grace::{self, Pin};
use std::borrow::Borrow;
use std::cell::Cell;
use std::ops::{Deref, DerefMut};
use std::ptr::{self, NonNull};

/// Bins in a new index's table. Loom models grow at the second key.
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

/// An interned key.
pub(super) struct Entry<K> {
    pub(super) hash: u64,
    pub(super) key: K,
    /// The key's chunk, with the counter's index there in the low bits
    /// (`Chunk` is 128-aligned): stored under the lock when the key is
    /// interned or moved (`Release`, after the chunk was made), loaded by
    /// lookups (`Acquire`).
    place: AtomicPtr<Chunk>,
    /// The key's place number (`places.rs`); under the lock only.
    number: AtomicUsize,
    /// Whether a handle was made: then the entry lives until the map
    /// drops. Set once, under the lock; read without it (`Relaxed`: a
    /// reader that sees `true` needs nothing else from the store, and the
    /// lock orders it before every removal's check).
    pub(super) pinned: AtomicBool,
    /// Position in `Writer::order`; read and written under the lock only.
    pos: AtomicUsize,
    /// The total the last eviction pass read, and when (milliseconds
    /// since the map was made; `u64::MAX`: not read yet). Under the lock
    /// only.
    pub(super) seen: [AtomicU64; 2],
}

impl<K> Entry<K> {
    pub(super) fn new(hash: u64, key: K, place: Place, number: usize, pinned: bool) -> Self {
        Entry {
            hash,
            key,
            place: AtomicPtr::new(tag(place)),
            number: AtomicUsize::new(number),
            pinned: AtomicBool::new(pinned),
            pos: AtomicUsize::new(0),
            seen: [AtomicU64::new(0), AtomicU64::new(u64::MAX)],
        }
    }

    /// Where the key counts now.
    #[inline]
    pub(super) fn place(&self) -> Place {
        // Acquire: pairs with the Release store of a move, so the new
        // chunk is initialised before it is used.
        let p = self.place.load(Ordering::Acquire);
        Place {
            chunk: NonNull::new(p.map_addr(|a| a & !(align_of::<Chunk>() - 1)))
                .expect("shardcount: an entry names a chunk"),
            i: p.addr() & (align_of::<Chunk>() - 1),
        }
    }

    /// The key's place number; under the lock (or on an unlinked entry).
    pub(super) fn number(&self) -> usize {
        // Relaxed: written under the lock only.
        self.number.load(Ordering::Relaxed)
    }

    /// Moves the key to `place` (place number `number`, whose counter is
    /// zero);
    /// under the lock.
    pub(super) fn move_to(&self, place: Place, number: usize) {
        // Release: publishes the chunk (made before) to `place`'s Acquire.
        self.place.store(tag(place), Ordering::Release);
        // Relaxed: read under the lock only.
        self.number.store(number, Ordering::Relaxed);
    }

    /// Whether a handle holds this entry.
    pub(super) fn is_pinned(&self) -> bool {
        self.pinned.load(Ordering::Relaxed)
    }

    /// Position in the insertion order; under the lock only.
    pub(super) fn pos(&self, _w: &Writer<K>) -> usize {
        // Relaxed: written under the lock the caller holds.
        self.pos.load(Ordering::Relaxed)
    }
}

type EntryPtr<K> = *mut Published<Entry<K>>;

/// `place` as one pointer: the chunk's address with the index in its low
/// bits.
fn tag(place: Place) -> *mut Chunk {
    debug_assert!(place.i < align_of::<Chunk>());
    place.chunk.as_ptr().map_addr(|a| a | place.i)
}

/// A removed entry's bin: never dereferenced (an aligned address no
/// allocation has).
fn tombstone<K>() -> EntryPtr<K> {
    NonNull::dangling().as_ptr()
}

/// A table's bins: each null, an entry or `TOMBSTONE`.
type Bins<K> = Box<[AtomicPtr<Published<Entry<K>>>]>;

/// One table: `bins.len()` is a power of two.
struct Table<K> {
    bins: Published<Bins<K>>,
}

impl<K> Table<K> {
    /// A table of `len` null bins, boxed and leaked.
    fn alloc(len: usize) -> *mut Table<K> {
        let bins = (0..len).map(|_| AtomicPtr::new(ptr::null_mut())).collect();
        Box::into_raw(Box::new(Table {
            bins: Published::new(bins),
        }))
    }

    /// Stores `e` in the first null or tombstone bin of `hash`'s probe,
    /// and says whether it was a tombstone. Only the lock holder stores.
    fn put(&self, hash: u64, e: EntryPtr<K>, order: Ordering) -> bool {
        let bins = self.bins.get();
        let mask = bins.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            // Relaxed: only the lock holder writes bins, and it wrote (or
            // saw, through the lock) every store here.
            let p = bins[i].load(Ordering::Relaxed);
            if p.is_null() || p == tombstone() {
                bins[i].store(e, order);
                return p == tombstone();
            }
            i = (i + 1) & mask;
        }
    }

    /// The bin holding `e` (a live entry of this table, hash `hash`).
    fn bin_of(&self, hash: u64, e: EntryPtr<K>) -> &AtomicPtr<Published<Entry<K>>> {
        let bins = self.bins.get();
        let mask = bins.len() - 1;
        let mut i = hash as usize & mask;
        // Relaxed: under the lock, as in `put`.
        while bins[i].load(Ordering::Relaxed) != e {
            i = (i + 1) & mask;
        }
        &bins[i]
    }
}

/// What the lock guards.
pub(super) struct Writer<K> {
    /// The live entries in insertion order, with holes (null) where
    /// entries were removed; owned here.
    order: Vec<EntryPtr<K>>,
    /// Non-null pointers in `order`.
    live: usize,
    /// Tombstones in the current table.
    tombstones: usize,
    /// The map's place numbers (`places.rs`): guarded by the same lock.
    pub(super) places: Places,
}

impl<K> Writer<K> {
    /// Every live entry, in insertion order.
    pub(super) fn entries(&self) -> impl Iterator<Item = &Entry<K>> + '_ {
        // SAFETY: a pointer in `order` is a live entry, freed only after
        // it leaves `order`, under this lock, which `self` borrows.
        self.order
            .iter()
            .filter(|e| !e.is_null())
            .map(|&e| unsafe { &*e }.get())
    }

    /// How many live entries there are.
    pub(super) fn len(&self) -> usize {
        self.live
    }

    /// The live entry at position `pos` of the order.
    pub(super) fn at(&self, pos: usize) -> &Entry<K> {
        let e = self.order[pos];
        assert!(!e.is_null(), "shardcount: no entry at that position");
        // SAFETY: as in `entries`.
        unsafe { &*e }.get()
    }
}

/// Entries unlinked by [`Index::unlink`]: free them with [`Index::free`]
/// after a grace period.
pub(super) struct Unlinked<K> {
    entries: Vec<EntryPtr<K>>,
}

/// The index: see the module notes.
pub(super) struct Index<K> {
    /// The current table; never null.
    table: AtomicPtr<Table<K>>,
    writer: Mutex<Writer<K>>,
    /// The thread holding `writer` ([`token`]), 0 if none. A std atomic
    /// under loom too: only the holder stores its token, and a thread
    /// compares it with its own, which no other thread's equals.
    holder: std::sync::atomic::AtomicUsize,
}

// SAFETY: the index owns its entries and tables: sending it moves them
// (and so `K`s) to another thread, which then alone reaches them. The raw
// pointers are its own allocations, freed only by itself.
unsafe impl<K: Send> Send for Index<K> {}
// SAFETY: through `&Index` any thread reads entries (`K: Sync`), inserts a
// `K` it made (`K: Send`) and drops removed ones (`K: Send`); entries are
// freed only after a grace period past their unlinking (module notes).
// The tables are atomics and a lock.
unsafe impl<K: Send + Sync> Sync for Index<K> {}

impl<K> Index<K> {
    pub(super) fn new() -> Self {
        Index {
            table: AtomicPtr::new(Table::alloc(FIRST_SLOTS)),
            writer: Mutex::new(Writer {
                order: Vec::new(),
                live: 0,
                tombstones: 0,
                places: Places::default(),
            }),
            holder: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The entry equal to `key` (whose hash is `hash`) in the table this
    /// lookup loads, if any. The pin keeps it alive.
    #[inline]
    fn probe<Q>(&self, hash: u64, key: &Q) -> Option<&Entry<K>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        // Acquire: pairs with the Release store of a rebuilt table, so its
        // bins are initialised before they are read.
        let t = self.table.load(Ordering::Acquire);
        // SAFETY: `table` is never null, and a table is freed only after
        // a grace period past its replacement; the caller is pinned or
        // holds the lock (module notes).
        let bins = unsafe { &*t }.bins.get();
        let mask = bins.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            // Acquire: pairs with the Release store in `insert`, so the
            // entry's fields are initialised before they are read.
            let e = bins[i].load(Ordering::Acquire);
            if e.is_null() {
                return None;
            }
            if e != tombstone() {
                // SAFETY: an entry pointer in a bin is freed only after a
                // grace period past its tombstone, as above.
                let e = unsafe { &*e }.get();
                if e.hash == hash && e.key.borrow() == key {
                    return Some(e);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// [`probe`](Self::probe) without the lock: no lock, no store (the
    /// caller's pin marked its own word). The
    /// entry stays alive while `pin` lives.
    #[inline]
    pub(super) fn find<'a, Q>(&'a self, _pin: &'a Pin, hash: u64, key: &Q) -> Option<&'a Entry<K>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.probe(hash, key)
    }

    /// [`probe`](Self::probe) under the lock: final, and the entry stays
    /// alive while the guard lives.
    pub(super) fn find_locked<'a, Q>(
        &'a self,
        _w: &'a Writer<K>,
        hash: u64,
        key: &Q,
    ) -> Option<&'a Entry<K>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.probe(hash, key)
    }

    /// The writers' lock (inserts, removals; whole-index reads), with the
    /// calling thread marked as holding one ([`writing`]).
    ///
    /// # Panics
    ///
    /// If the calling thread holds it already (a removal or whole-map read
    /// from a `retain` or `read_each` closure, or a key's code, on the same
    /// map), which would wait for itself for ever; or if it is inside a
    /// pinned section (a lookup running a key's `Eq` or `Borrow`, on any
    /// map): the lock's holder may be in a removal's grace period, which
    /// waits for that section to end.
    #[track_caller]
    pub(super) fn lock(&self) -> Locked<'_, K> {
        assert!(
            !self.held_here(),
            "shardcount: CounterMap: a removal or whole-map read from inside a call on the same map \
             (a retain or read_each closure, or a key's own code) would wait for itself"
        );
        assert!(
            !grace::inside(),
            "shardcount: CounterMap: a removal or whole-map read inside a pinned section (from a \
             key's `Eq` or `Borrow`, run by a lookup) could wait for a removal waiting for it"
        );
        self.lock_unchecked()
    }

    /// [`lock`](Self::lock) without its checks: for `drop` (`&mut self`:
    /// no other thread holds it, and nothing waits for a grace period).
    fn lock_unchecked(&self) -> Locked<'_, K> {
        let guard = lock(&self.writer);
        // Where the flag is gone (loom's thread-locals at thread exit),
        // nothing is marked: as before the flag.
        let outermost = WRITING.try_with(|w| !w.replace(true)).unwrap_or(false);
        self.holder
            .store(token(), std::sync::atomic::Ordering::Relaxed);
        Locked {
            guard,
            index: self,
            outermost,
        }
    }

    /// Whether the calling thread holds this index's lock.
    pub(super) fn held_here(&self) -> bool {
        let me = token();
        me != 0 && self.holder.load(std::sync::atomic::Ordering::Relaxed) == me
    }

    /// Inserts a key that is not in the index: the caller looked it up
    /// under the same guard `w`, which must be this index's.
    pub(super) fn insert(&self, w: &mut Writer<K>, entry: Entry<K>) {
        // Relaxed: under the lock, the last store of `table` (by a holder
        // of the lock) happened-before.
        let mut t = self.table.load(Ordering::Relaxed);
        // SAFETY: the current table is freed only after it is replaced.
        let len = unsafe { &*t }.bins.get().len();
        if (w.live + w.tombstones + 1) * 2 > len {
            let len = if (w.live + 1) * 2 > len { len * 2 } else { len };
            t = self.rebuild(w, t, len);
        }
        let hash = entry.hash;
        entry.pos.store(w.order.len(), Ordering::Relaxed);
        let e = Box::into_raw(Box::new(Published::new(entry)));
        // Release: publishes the entry's fields to `find`'s Acquire.
        // SAFETY: `t` is the current table.
        if unsafe { &*t }.put(hash, e, Ordering::Release) {
            w.tombstones -= 1;
        }
        w.order.push(e);
        w.live += 1;
    }

    /// Unlinks the live entries at positions `victims` (each
    /// [`Entry::pos`] of an entry found under `w`, listed once): their
    /// bins become tombstones and they leave the order. A table under a
    /// fifth full is rebuilt smaller (a quarter to a half full: no insert
    /// or removal soon after undoes it). Returns what to free after a grace
    /// period.
    pub(super) fn unlink(&self, w: &mut Writer<K>, victims: &[usize]) -> Unlinked<K> {
        // Relaxed: under the lock, as in `insert`.
        let t = self.table.load(Ordering::Relaxed);
        let mut entries = Vec::with_capacity(victims.len());
        for &pos in victims {
            let e = w.order[pos];
            assert!(!e.is_null(), "shardcount: an entry unlinked twice");
            // SAFETY: a live entry, as in `entries`.
            let hash = unsafe { &*e }.get().hash;
            // Release: a lookup that sees the tombstone sees what the
            // caller did before the unlink (the map's count of keys).
            // SAFETY: `t` is the current table, and `e` is in it.
            unsafe { &*t }
                .bin_of(hash, e)
                .store(tombstone(), Ordering::Release);
            w.order[pos] = ptr::null_mut();
            entries.push(e);
        }
        w.live -= victims.len();
        w.tombstones += victims.len();
        // SAFETY: as above.
        let len = unsafe { &*t }.bins.get().len();
        if len > FIRST_SLOTS && w.live * 5 < len {
            // A quarter to a half full: the next growth is as far away.
            let small = ((w.live + 1) * 2).next_power_of_two().max(FIRST_SLOTS);
            self.rebuild(w, t, small);
        }
        if w.order.len() > 16 && w.live * 2 < w.order.len() {
            w.order.retain(|e| !e.is_null());
            w.order.shrink_to_fit();
            for (pos, &e) in w.order.iter().enumerate() {
                // SAFETY: a live entry, as in `entries`.
                unsafe { &*e }.get().pos.store(pos, Ordering::Relaxed);
            }
        }
        Unlinked { entries }
    }

    /// Frees what [`unlink`](Self::unlink) returned, handing back the
    /// entries by value (the map takes their counts, then drops the keys).
    ///
    /// # Safety
    ///
    /// A grace period ([`grace::wait`]) began
    /// after the `unlink` that returned `u` and has ended.
    pub(super) unsafe fn free(&self, u: Unlinked<K>) -> Vec<Entry<K>> {
        u.entries
            .into_iter()
            // SAFETY: unlinked before the grace period (the caller's
            // contract), so no lookup reaches it; no longer in `order` or
            // any table; boxed in `insert`, listed once.
            .map(|e| unsafe { Box::from_raw(e) }.into_inner())
            .collect()
    }

    /// Replaces the table `old` by one of `len` bins holding every live
    /// entry, and frees `old` after a grace period. The caller is not
    /// pinned (it holds the lock, which no pinned section waits for).
    #[cold]
    fn rebuild(&self, w: &mut Writer<K>, old: *mut Table<K>, len: usize) -> *mut Table<K> {
        let new = Table::alloc(len);
        // SAFETY: `new` was just allocated and is not shared yet.
        let table = unsafe { &*new };
        for &e in w.order.iter().filter(|e| !e.is_null()) {
            // SAFETY: a live entry, as in `entries`.
            let hash = unsafe { &*e }.get().hash;
            // Relaxed: nobody sees this table before the Release below.
            table.put(hash, e, Ordering::Relaxed);
        }
        // Release: publishes the filled table to `find`'s Acquire.
        self.table.store(new, Ordering::Release);
        w.tombstones = 0;
        // Every lookup that loaded `old` was pinned (or holds the lock).
        grace::wait();
        // SAFETY: replaced above, and every lookup that could reach it has
        // ended; it came from `Table::alloc` and is freed once.
        drop(unsafe { Box::from_raw(old) });
        new
    }
}

const_thread_local! {
    /// Whether this thread holds a map's writer lock (see [`writing`]).
    static WRITING: Cell<bool> = Cell::new(false);
}

/// Whether the calling thread holds some map's writer lock. What a map
/// does under it allocates and frees; a global allocator counting with a
/// map is then called on this thread, and its add by a new key must not
/// wait for a lock its own thread may hold (`intern.rs`).
#[inline]
pub(super) fn writing() -> bool {
    WRITING.try_with(Cell::get).unwrap_or(false)
}

/// Runs `f`, the caller's code, with the thread unmarked ([`writing`])
/// while it holds a map's lock: adds it makes to other maps intern their
/// keys as anywhere else. (Its adds to the locked map's new keys count in
/// the overflow all the same: `intern.rs` asks [`Index::held_here`].)
pub(super) fn callers_code<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            let _ = WRITING.try_with(|w| w.set(self.0));
        }
    }
    let _restore = Restore(WRITING.try_with(|w| w.replace(false)).unwrap_or(false));
    f()
}

/// The calling thread's token: the address of its flag, which no other
/// live thread shares (0 where the flag is gone).
fn token() -> usize {
    WRITING
        .try_with(|w| std::ptr::from_ref(w).addr())
        .unwrap_or(0)
}

/// An index's writer lock, held; derefs to the writers' state.
pub(super) struct Locked<'a, K> {
    guard: MutexGuard<'a, Writer<K>>,
    index: &'a Index<K>,
    /// Whether this guard marked the thread (its outermost map lock).
    outermost: bool,
}

impl<K> Deref for Locked<'_, K> {
    type Target = Writer<K>;

    fn deref(&self) -> &Writer<K> {
        &self.guard
    }
}

impl<K> DerefMut for Locked<'_, K> {
    fn deref_mut(&mut self) -> &mut Writer<K> {
        &mut self.guard
    }
}

impl<K> Drop for Locked<'_, K> {
    fn drop(&mut self) {
        self.index
            .holder
            .store(0, std::sync::atomic::Ordering::Relaxed);
        if self.outermost {
            let _ = WRITING.try_with(|w| w.set(false));
        }
    }
}

impl<K> Drop for Index<K> {
    fn drop(&mut self) {
        let w = self.lock_unchecked();
        // Relaxed: `&mut self`: every other access happened-before.
        let t = self.table.load(Ordering::Relaxed);
        // SAFETY: the current table came from `Table::alloc` (replaced
        // ones were freed by `rebuild`), and nothing reads it again.
        drop(unsafe { Box::from_raw(t) });
        for &e in w.order.iter().filter(|e| !e.is_null()) {
            // SAFETY: each live entry came from `Box::into_raw` in
            // `insert`, is listed once, and no table that points to it
            // survives.
            drop(unsafe { Box::from_raw(e) }.into_inner());
        }
    }
}
