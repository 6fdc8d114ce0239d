//! Owner ids: which rows of a shard table the adding threads own.
//!
//! A sharded `Counter` or `CounterSet` gives row `id - 1` of its table to
//! the thread holding owner id `id`, while the table has that row. Ids are
//! leased only to threads that add to a sharded table (one that exists
//! because threads contended on it), on their first such add, from a pool
//! of their own, smallest free id first. So a thread that only holds a
//! thread index (`thread::index`, which a `RoughCounter` slot takes) or
//! adds only to unsharded counters never pushes a busy thread beyond a
//! table: N threads adding to sharded tables on N cores hold ids 1..=N and
//! own N distinct rows of any table that has N rows, whatever other
//! threads exist.
//!
//! # Protocol
//!
//! * `OWNER` (a `const` thread-local without a destructor, so the hot
//!   path reads it with a bare TLS load) holds the calling thread's id
//!   less one (`NONE` while it has none), and its row cache ([`Own`]).
//! * `LEASE` (a thread-local with a destructor) holds the lease. At thread
//!   exit its destructor sets `OWNER`'s id to `NONE`, empties the cache,
//!   and only then gives the id back to the pool, under the pool's mutex:
//!   every owned add the thread made happens-before the next thread's
//!   lease of the same id, so two threads never add to one row *as its
//!   owner* at once. Adds the thread makes later (from other
//!   thread-locals' destructors) see `NONE` and take the unowned path,
//!   which cannot lease again once `LEASE` is gone.
//! * An owned row has one writer: its owner adds with a plain load and
//!   store (`shard/owned.rs`). Threads beyond the table, or without an id,
//!   add to the table's shared rows instead, and takes keep baselines
//!   rather than writing owned words; the hand-off above is what lets the
//!   next holder of an id load its predecessor's last store.
//! * **Revocation and acknowledgement** (for a merge, `shard/merge.rs`):
//!   `revoke` counts a revocation and stores `NONE` into every holder's
//!   id; each holder's next add to a sharded table comes to `lease`,
//!   which acknowledges the count it reads (`ack`). A thread about to
//!   sleep may give its id back at once (`quiesce`), as its exit would:
//!   it is no holder until its next add leases again.
//! * **Sleepers** (x86_64 Linux, `sleepers.rs`): a holder asleep in the
//!   kernel needs to acknowledge nothing, so a parked thread holds no
//!   merge back. Every place where a holder loads a shard table's head
//!   and then uses the table unpinned (an owned add, a holder's read) is
//!   a *window*, between [`enter`] and [`leave`], that makes no system
//!   call, takes no lock and allocates nothing (an allocation may add,
//!   from a counting allocator, or block on the allocator's lock): adds
//!   that leave the owned row leave the window first and pin. So a thread
//!   seen sleeping (`S`) after a revocation is outside every window: each
//!   window it ran before is done and visible, and each it runs after
//!   loads the retired head (`sleepers.rs` says why). `acknowledged`
//!   remembers it per holder. On std the window marks cost nothing;
//!   under loom they store into a word of the thread (`busy`), which
//!   stands for the state the kernel reports, so the models check that
//!   every unpinned use of a table lies inside a window.
//! * **Readers**: a thread with no id that reads a sharded table pinned
//!   registers with an id from a range of its own (above `READER_BASE`:
//!   beyond every table's rows, so it owns none and takes no adder's), and
//!   its later reads are unpinned, in *read windows* ([`Reading`]) that
//!   mark its `busy` word: a store of 1, the light barrier, the head's
//!   load and the rows', then a `Release` store of 0. A revocation stores
//!   `NONE` into a reader's row as into an adder's, and runs the heavy
//!   barrier; a merge then counts a reader whose word reads 0 as done with
//!   it: its window, if one was open when the barrier ran, had its mark
//!   seen, so a 0 means it ended (the `Acquire` load pairs with the
//!   store); a window opened later loads the retired head. A reader that
//!   keeps reading acknowledges at its next read, as an adder at its next
//!   add (its row is `NONE`, so it reads pinned and acknowledges in
//!   [`read_lease`]); one that stops reading, asleep or computing, reads 0
//!   at once. Its first add trades the id for an adder's. A holder's read
//!   window marks the word too (cheaper than telling the two apart), but
//!   merges do not read it: a holder acknowledges or is seen asleep, as
//!   for its adds. Readers exist only where the light barrier is a
//!   compiler fence (`membarrier`); elsewhere a reading thread pins. Not
//!   covered: a signal handler that reads a sharded counter while it
//!   interrupts a read of its thread (the inner window's end unmarks the
//!   outer one), as adds from a handler that blocks inside a window are
//!   not ("Sleepers").
//! * **Nudges** (x86_64 Linux, `nudge.rs`, `window.rs`): a holder that
//!   runs without adding is sent a signal whose handler answers for it
//!   (`answer`). There the owned add's hit is a restartable block of
//!   assembly (the handler moves a thread stopped inside it back to its
//!   start), and the windows past a miss (`enter`, `leave`) mark
//!   `adding` (only the outermost: `mark`), as read windows mark `busy`:
//!   the handler answers only with both clear.
//!
//! Ids are process-wide, not per table: a thread holds its id from its
//! first add to any sharded table until it exits (or quiesces), so threads that added to
//! sharded tables once and now sit idle still hold theirs, and a thread
//! that got an id beyond a table keeps it when smaller ones are given
//! back (it adds on its probe's row, sampled, as before).

use super::grace;
use super::pool::Pool;
use crate::primitive::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering, UnsharedU64};
use crate::primitive::sync::{lock, Arc, Mutex};
use std::cell::RefCell;
use std::collections::BTreeMap;

// The calling thread's owner id less one, its row (`NONE` if it has no
// id, or its id is revoked, below), and its row cache (`Own`). No
// destructor: the hot path reads it with a bare TLS load (a `Relaxed` load
// of an atomic is a plain `mov`). Atomics because a merge and a table's
// drop store into it from another thread; the registry holds its address
// while the thread holds a lease, and the memory of a destructor-free
// thread-local lives until the thread is gone, after every destructor
// (the lease's, which removes the address, included).
#[cfg(not(shardcount_loom))]
std::thread_local! {
    static OWNER: Own = const { Own::new() };
}

// Loom builds thread-locals lazily and may drop them before the lease's
// destructor runs: a leaked cell keeps the address valid for the model.
#[cfg(shardcount_loom)]
loom::thread_local! {
    static OWNER: &'static Own = Box::leak(Box::new(Own::new()));
}

/// A thread's owner id and its row cache.
///
/// # The row cache
///
/// * `last.head` is 0 or the address of a plain table that this thread
///   loaded as a shard table's head while holding its id, and `last.at`
///   the first line of the row that id owns there. Only this thread writes
///   `at`, always before `head` (so a matching `head` means `at` is that
///   row's); others only store 0 into `head`. A hit is an add's whole
///   row-finding: the head compared, `at` loaded.
/// * **Filling** waits for the fourth miss in a row on the same table
///   (`missed`: a table address, only compared, never followed, and a
///   count in its low bits; written by this thread alone): a thread that
///   moves between tables keeps finding its rows by owner id, as without
///   the cache, instead of refilling for adds that the next one undoes; a
///   thread that stays on one table fills on its fourth add there.
/// * **Revocation** (`revoke`) stores `NONE` into every holder's `row`,
///   runs the heavy barrier (`grace`), then stores 0 into every `head`.
///   A fill stores the entry, runs the light barrier, then loads `row`
///   again and stores 0 into `head` if it changed. Either the fill's
///   stores are ordered before the revoker's barrier, and the revoker's 0
///   comes after them, or the fill's reload comes after the barrier and
///   sees `NONE`: a revoked thread never keeps a cache hit, so its next add
///   to a sharded table takes the slow path and acknowledges (`lease`), as
///   without the cache. Until then its hits go to the rows of the id it
///   still holds, which the acknowledgement covers.
/// * So once every holder acknowledged a revocation, no cache names a
///   table retired before it (a fill after the acknowledgement loads a
///   head that no longer names it), unless it was unretired since (then
///   the merge's compare-exchange to folding fails), and a merge may free
///   it.
/// * **Giving the id back** (the lease's drop) stores 0 into `head` before
///   the id can be another thread's: later adds from thread-local
///   destructors must not hit a row that is no longer theirs.
/// * **A table's drop** (`forget`) stores 0 into every registered `head`
///   naming it, under the registry's mutex, before the memory is freed.
///   The drop happens-after every add to the table, so after every fill
///   naming it (a fill writes only the table its add loaded), and
///   happens-before any table later allocated at the same address, which
///   happens-before any add that loads that table's head: such an add
///   finds 0 (or a later fill of its own), never the dropped entry.
#[repr(C)]
pub(crate) struct Own {
    row: AtomicUsize,
    /// 1 while this thread is inside a read window (module docs,
    /// "Readers"); under loom also inside every window: the model of "not
    /// asleep" ("Sleepers").
    busy: AtomicUsize,
    /// Where the hit is restartable: 1 while this thread is inside an add
    /// window past a miss (set by the outermost, `mark`).
    #[cfg_attr(shardcount_loom, allow(dead_code))]
    adding: AtomicUsize,
    /// `repr(C)`, its head first and its row's line next: the restartable
    /// hit reads them at those offsets (`window.rs`).
    last: Way,
    /// The table of this thread's last miss (see above).
    missed: AtomicUsize,
    /// The revocation a merge's nudge asks about, and the last one a nudge
    /// answered (`nudge.rs`).
    #[cfg_attr(shardcount_loom, allow(dead_code))]
    ask: UnsharedU64,
    #[cfg_attr(shardcount_loom, allow(dead_code))]
    answer: UnsharedU64,
    /// The last revocation a nudge was heard about, answered or not.
    #[cfg_attr(shardcount_loom, allow(dead_code))]
    heard: UnsharedU64,
    /// The thread's signal mask when it registered: a nudge answers only
    /// code that runs with it (`nudge.rs`).
    #[cfg_attr(shardcount_loom, allow(dead_code))]
    mask: UnsharedU64,
}

/// The row cache's entry: a table's address and this thread's row there.
#[repr(C)]
struct Way {
    head: AtomicUsize,
    at: AtomicPtr<()>,
}

impl Own {
    crate::primitive::const_fn! {
        const fn new() -> Own {
            Own {
                row: AtomicUsize::new(NONE),
                busy: AtomicUsize::new(0),
                adding: AtomicUsize::new(0),
                last: Way::new(),
                missed: AtomicUsize::new(0),
                ask: UnsharedU64::new(0),
                answer: UnsharedU64::new(0),
                heard: UnsharedU64::new(0),
                mask: UnsharedU64::new(0),
            }
        }
    }

    /// Empties the entry.
    fn clear(&self) {
        // Relaxed: see `Own`'s protocol for what orders each caller's.
        self.last.head.store(0, Ordering::Relaxed);
    }
}

impl Way {
    crate::primitive::const_fn! {
        const fn new() -> Way {
            Way {
                head: AtomicUsize::new(0),
                at: AtomicPtr::new(std::ptr::null_mut()),
            }
        }
    }

    /// The row cached for `head`, if this entry holds it.
    #[inline(always)]
    fn get(&self, head: usize) -> Option<std::ptr::NonNull<()>> {
        // Relaxed: this thread wrote both (others only store 0 into
        // `head`), `at` first (`Own`).
        if self.head.load(Ordering::Relaxed) == head {
            // SAFETY: a `head` other than 0 was stored after a non-null
            // `at` by this thread, and heads are never 0.
            Some(unsafe { std::ptr::NonNull::new_unchecked(self.at.load(Ordering::Relaxed)) })
        } else {
            None
        }
    }
}

/// `OWNER`'s value for "no id": id 0, less one.
const NONE: usize = usize::MAX;

/// Runs `f` on the calling thread's owner cell, if it still exists.
#[inline(always)]
fn with_owner<R>(f: impl FnOnce(&Own) -> R) -> Option<R> {
    // Under loom `o` is a `&&AtomicUsize`, which the call derefs.
    OWNER.try_with(|o| f(o)).ok()
}

/// Whether the calling thread is inside a marked window (an add past a
/// miss, or a read): only when a signal handler interrupted it there, as
/// every other way leaves its window before a slow path runs. It must not
/// acknowledge, lease or give its id back then: the add or read it
/// interrupted still uses a table it loaded, which a merge could free once
/// this thread acknowledged.
fn in_window() -> bool {
    with_owner(|o| {
        // Relaxed: this thread's own stores (program order).
        o.busy.load(Ordering::Relaxed) != 0 || o.adding.load(Ordering::Relaxed) != 0
    })
    .unwrap_or(false)
}

/// A pointer to a thread's owner cell, kept in the registry while the
/// thread holds its lease (see `OWNER`). It relies on the lease's
/// destructor running before the thread's thread-locals are freed, as it
/// does for every thread std or a `pthread_exit` ends; a main thread whose
/// destructors are skipped at process exit keeps its thread-locals mapped.
struct CellPtr(*const Own);

// SAFETY: it is only dereferenced under the owners' mutex while its thread
// is registered, and the cell is an atomic, shared by design.
unsafe impl Send for CellPtr {}

/// A leased thread, as the registry sees it.
struct Registered {
    cell: CellPtr,
    /// The last revocation this thread acknowledged (`ack`).
    acked: Arc<AtomicU64>,
    /// The last revocation made before a merge saw this thread asleep
    /// (`acknowledged`): as good as an acknowledgement of it. Under the
    /// owners' mutex.
    quiet: u64,
    /// The thread's id, for `sleepers::asleep` (loom models it instead).
    #[cfg_attr(shardcount_loom, allow(dead_code))]
    tid: i32,
}

/// The ids, and who holds them.
struct Held {
    pool: Pool,
    /// Readers' ids, less [`READER_BASE`] (module docs, "Readers").
    readers: Pool,
    holders: BTreeMap<usize, Registered>,
}

/// Everything the leases share.
struct Owners {
    held: Mutex<Held>,
    /// Revocations so far (`revoke`).
    revoked: AtomicU64,
}

crate::primitive::global! {
    // Behind an Arc that each lease shares, so giving an id back never
    // needs the static: under loom, statics are gone before the main
    // thread's thread-local destructors run.
    static OWNERS: Arc<Owners> = Arc::new(Owners {
        held: Mutex::new(Held { pool: Pool::new(), readers: Pool::new(), holders: BTreeMap::new() }),
        revoked: AtomicU64::new(0),
    });
}

/// A thread's hold on its owner id; dropping it gives the id back.
struct Lease {
    id: usize,
    acked: Arc<AtomicU64>,
    owners: Arc<Owners>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        // First the thread stops owning, then the id may go to another.
        // Leaving the registry under the mutex also acknowledges every
        // revocation: the thread's adds happen-before whoever locks next.
        with_owner(|o| {
            o.row.store(NONE, Ordering::Relaxed);
            o.clear();
        });
        // Giving the id back may (de)allocate under the owners' lock: an
        // add from there must not lease (`reentry`).
        let _inside = super::reentry::enter();
        let mut held = lock(&self.owners.held);
        held.holders.remove(&self.id);
        match self.id.checked_sub(READER_BASE) {
            Some(r) => held.readers.give(r),
            None => held.pool.give(self.id),
        }
    }
}

/// Readers' ids start above it: beyond every table's rows (so a reader
/// never owns one, nor pushes an adder beyond a table), below `NONE`, and
/// apart from adders' ids.
pub(crate) const READER_BASE: usize = usize::MAX / 2;

/// Registers the calling thread with a fresh id, an adder's or (`reader`)
/// a reader's, as having acknowledged every revocation so far (in the
/// registry only while its owner cell exists: not at exit).
fn register(reader: bool) -> Lease {
    // Fills use the light barrier from now on (`Own`).
    grace::prepare_barrier();
    let owners = Arc::clone(&OWNERS);
    let mut held = lock(&owners.held);
    // A new holder has loaded no head as one: it starts as having
    // acknowledged every revocation so far. (SeqCst: as in `ack`; under
    // the mutex `revoke` bumps it in.)
    let acked = Arc::new(AtomicU64::new(owners.revoked.load(Ordering::SeqCst)));
    let id = if reader {
        READER_BASE + held.readers.take()
    } else {
        held.pool.take()
    };
    let cell = with_owner(|o| {
        // Relaxed: read on this thread only, by its nudge handler.
        o.mask.store(super::nudge::mask(), Ordering::Relaxed);
        CellPtr(std::ptr::from_ref(o))
    });
    if let Some(cell) = cell {
        held.holders.insert(
            id,
            Registered {
                cell,
                acked: Arc::clone(&acked),
                quiet: 0,
                tid: super::sleepers::tid(),
            },
        );
    }
    drop(held);
    Lease { id, acked, owners }
}

crate::primitive::const_thread_local! {
    static LEASE: RefCell<Option<Lease>> = RefCell::new(None);
}

/// The calling thread's owner id, or 0 if it has none (or its id was
/// revoked and it has not added through [`lease`] since).
#[inline(always)]
pub(crate) fn owner() -> usize {
    row().wrapping_add(1)
}

/// The row the calling thread owns in any table that has it (its id less
/// one), or a value at or above `MAX_SHARDS` if it has no id (or its id
/// was revoked): the hot path's one load.
#[inline(always)]
pub(crate) fn row() -> usize {
    // Relaxed: a revocation is only a request to come to `lease`; the
    // acknowledgement there carries the ordering.
    with_owner(|o| o.row.load(Ordering::Relaxed)).unwrap_or(NONE)
}

/// Opens a window (module docs, "Sleepers"): before loading a head
/// whose table the caller may use unpinned, as a holder. Nothing on std;
/// under loom, the mark that models "not asleep".
#[inline(always)]
pub(crate) fn enter() -> Mark {
    #[cfg(not(shardcount_loom))]
    if super::window::RESTARTABLE {
        let outer = with_owner(|o| mark(&o.adding)).unwrap_or(false);
        // The nudge's handler runs on this thread: program order is the
        // only order it needs.
        crate::primitive::sync::atomic::compiler_fence(Ordering::SeqCst);
        return Mark(outer);
    }
    #[cfg(shardcount_loom)]
    {
        with_owner(|o| {
            debug_assert_eq!(
                o.busy.load(Ordering::Relaxed),
                0,
                "a window inside a window"
            );
            o.busy.store(1, Ordering::Relaxed);
        });
        crate::primitive::sync::atomic::fence(Ordering::SeqCst);
    }
    Mark(true)
}

/// Closes the window [`enter`] opened, once the caller is done with every
/// table it loaded in it.
#[inline(always)]
pub(crate) fn leave(mark: Mark) {
    #[cfg(not(shardcount_loom))]
    if super::window::RESTARTABLE && mark.0 {
        crate::primitive::sync::atomic::compiler_fence(Ordering::SeqCst);
        with_owner(|o| o.adding.store(0, Ordering::Relaxed));
    }
    // Release: the model's stand-in for the kernel's ordering of a
    // thread's stores before its sleeping state (`sleepers.rs`).
    #[cfg(shardcount_loom)]
    {
        let _ = mark;
        with_owner(|o| o.busy.store(0, Ordering::Release));
    }
}

/// Whether a window set its thread's mark (the outermost one) and so
/// clears it when it ends.
#[derive(Clone, Copy)]
#[must_use]
pub(crate) struct Mark(#[cfg_attr(shardcount_loom, allow(dead_code))] bool);

/// Sets `word`, a window mark, if no window holds it: whether this one
/// does now. A window a signal handler opens inside another finds it set
/// and leaves it to the outer one. The stores are constants (1, then 0)
/// and the load only steers a branch: no chain through the word from one
/// window to the next (a load and a store of a count chained each mark to
/// the last: ten cycles a window here).
#[cfg_attr(shardcount_loom, allow(dead_code))]
#[inline(always)]
fn mark(word: &AtomicUsize) -> bool {
    // Relaxed: only this thread writes it and only its nudge handler reads
    // it (`nudge.rs`).
    if word.load(Ordering::Relaxed) == 0 {
        word.store(1, Ordering::Relaxed);
        true
    } else {
        false
    }
}

super::window::restartable! {
    /// The calling thread's owner cell, for the restartable hit
    /// (`window.rs`), which reads its row cache entry at [`WAY_AT`]: the
    /// cell's address rather than the entry's, so that the add's other paths
    /// (which reach the cell) keep one register for both.
    #[inline(always)]
    pub(crate) fn way() -> *const usize {
        // A const thread-local without a destructor: always there.
        OWNER.with(|o| std::ptr::from_ref(o).cast())
    }

    /// Where the row cache entry lies in an owner cell: its head, then its
    /// row's first line (`Own` and `Way` are `repr(C)`).
    pub(crate) const WAY_AT: usize = std::mem::offset_of!(Own, last);
}

super::window::restartable! {
    impl Own {
        /// In a nudge's handler (`nudge.rs`), on this cell's thread: notes
        /// that the nudge was heard, and answers the revocation asked about if
        /// the thread stopped `outside` every hit (or was moved back to a
        /// hit's start), inside no marked window, and runs with its own mask
        /// (not inside another signal's handler).
        pub(crate) fn nudged(&self, outside: bool, mask: u64) {
            // Relaxed: this thread's own words, and `ask`, stored before the
            // signal was sent (the kernel orders the send before the handler).
            let ask = self.ask.load(Ordering::Relaxed);
            if outside
                && self.busy.load(Ordering::Relaxed) == 0
                && self.adding.load(Ordering::Relaxed) == 0
                && self.mask.load(Ordering::Relaxed) == mask
            {
                // Release: every window this thread ran before happens-before
                // the merge that reads the answer (Acquire, `acknowledged`).
                self.answer.store(ask, Ordering::Release);
            }
            // Release: after the answer, so a merge that sees this sees it.
            self.heard.store(ask, Ordering::Release);
        }
    }
}

/// A read window (module docs, "Readers"), closed when dropped (also in a
/// panic): open one before loading a head whose rows the caller reads
/// unpinned. It marks `busy` for holders too: two plain stores cost less
/// than the branches that would tell them apart, and holders' merges do
/// not look at it (their reads need no mark).
pub(crate) struct Reading {
    busy: *const AtomicUsize,
}

impl Reading {
    /// Opens a read window if the calling thread may read unpinned (it
    /// holds an id, an adder's or a reader's, not revoked); `None` when it
    /// must pin.
    #[inline(always)]
    pub(crate) fn enter() -> Option<Reading> {
        let o = with_owner(std::ptr::from_ref)?;
        // SAFETY: this thread's `OWNER`, which has no destructor and so
        // lives as long as the thread does; used here, on the thread.
        let o = unsafe { &*o };
        // Relaxed: as in `row`.
        if o.row.load(Ordering::Relaxed) == NONE {
            return None;
        }
        #[cfg(shardcount_loom)]
        let _ = enter();
        #[cfg(not(shardcount_loom))]
        {
            // Relaxed, then the light barrier, a compiler fence where
            // readers exist (`read_lease`): it orders the mark before the
            // head's load (module docs, "Readers").
            o.busy.store(1, Ordering::Relaxed);
            crate::primitive::sync::atomic::compiler_fence(Ordering::SeqCst);
        }
        Some(Reading { busy: &o.busy })
    }
}

impl Drop for Reading {
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: this thread's `OWNER` cell's word (see `enter`).
        let busy = unsafe { &*self.busy };
        // Release: the window's reads of a table happen-before a merge
        // that reads this 0 (`acknowledged`, Acquire). Under loom the
        // mark is 1 (`enter`).
        busy.store(0, Ordering::Release);
    }
}

/// Whether the calling thread holds a lease whose id is not revoked: no
/// merge frees a table it loads as a plain head before the thread's next
/// acknowledgement (`shard/merge.rs`, "Holders' reads").
#[inline(always)]
pub(crate) fn holds() -> bool {
    row() != NONE
}

#[cfg(debug_assertions)]
crate::primitive::const_thread_local! {
    /// Acknowledgements the calling thread made: an unpinned read checks
    /// that it made none.
    static ACKS: std::cell::Cell<u64> = std::cell::Cell::new(0);
}

/// How many acknowledgements the calling thread made (debug builds).
#[cfg(debug_assertions)]
pub(crate) fn acks() -> u64 {
    ACKS.try_with(std::cell::Cell::get).unwrap_or(0)
}

/// The first line of the row this thread owns in the table at address
/// `head`, if its row cache holds that table (`Own`): an add's whole
/// row-finding on a hit.
#[inline(always)]
pub(crate) fn cached(head: usize) -> Option<std::ptr::NonNull<()>> {
    with_owner(|o| o.last.get(head)).flatten()
}

/// After a miss that found this thread's row `at` (as row `row`, what
/// [`row`] returned) in the table at address `head` by owner id: caches
/// it if the thread's last few misses were all on that table (`Own`).
#[inline(always)]
pub(crate) fn missed(head: usize, at: std::ptr::NonNull<()>, row: usize) {
    // The cell's address, then the work outside the closure: LLVM would
    // not inline `try_with` with this body in it.
    let Some(o) = with_owner(std::ptr::from_ref) else {
        return;
    };
    // SAFETY: this thread's `OWNER`, which has no destructor and so lives
    // as long as the thread does; used here, on the thread, at once.
    let o = unsafe { &*o };
    // Relaxed: only this thread touches `missed`: the table's address,
    // and in its low bits (tables are 128-aligned) how many misses in a
    // row it has had.
    let m = o.missed.load(Ordering::Relaxed);
    if m & !STREAK != head {
        // A new table, a streak of one. What is stored must not depend on
        // `m`: a thread moving between tables would chain each add to the
        // last through this word (a store forwarded to the next load, then
        // the compare, on every add); a branch, mostly predicted, does not.
        o.missed.store(head | 1, Ordering::Relaxed);
    } else if (m & STREAK) + 1 == FILL_AFTER {
        fill(o, head, at, row);
    } else {
        o.missed.store(m + 1, Ordering::Relaxed);
    }
}

/// Misses in a row on one table before the cache takes it: a thread that
/// moves between tables at random rarely reaches it (1 in 512 adds over
/// 8 tables), so its adds do not pay for fills that the next add undoes,
/// nor for a branch that goes both ways.
const FILL_AFTER: usize = 4;

/// The bits of `Own::missed` that count misses.
const STREAK: usize = 127;

/// Stores the entry (`Own`).
#[cold]
#[inline(never)]
fn fill(o: &Own, head: usize, at: std::ptr::NonNull<()>, row: usize) {
    // Relaxed: program order is all this thread's reads need; against a
    // revocation, the barrier below.
    o.last.at.store(at.as_ptr(), Ordering::Relaxed);
    o.last.head.store(head, Ordering::Relaxed);
    grace::light_barrier();
    // Relaxed: ordered by the barrier pair (`Own`).
    if o.row.load(Ordering::Relaxed) != row {
        o.clear();
    }
}

/// Empties every thread's row cache that names a table `dying` says is
/// being freed (`Own`). Call it before freeing tables that no merge
/// retired (a drop).
pub(crate) fn forget(dying: impl Fn(usize) -> bool) {
    let owners = Arc::clone(&OWNERS);
    // Inside while the mutex is held: an add from a signal handler here
    // leases nothing (`register` takes this mutex), as in `revoke`.
    let _inside = super::reentry::enter();
    let held = lock(&owners.held);
    for r in held.holders.values() {
        // SAFETY: as in `revoke`: registered, so its cell is alive.
        let head = &unsafe { &*r.cell.0 }.last.head;
        // Relaxed: the drop happens-after every fill naming these tables
        // (`Own`).
        let h = head.load(Ordering::Relaxed);
        if h != 0 && dying(h) {
            // A failure means the thread cached another table since.
            let _ = head.compare_exchange(h, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// The calling thread's owner id, leasing one if it has none, and
/// acknowledging any revocation; 0 once the thread's lease has been handed
/// back at exit (it takes no other).
///
/// The caller must load the shard table's head again after this returns:
/// a head it loaded before may name a table a merge is retiring, which
/// only threads that have not acknowledged may still write.
#[cold]
#[inline(never)]
pub(crate) fn lease() -> usize {
    #[cfg(test)]
    if EXITING.try_with(std::cell::Cell::get).unwrap_or(true) {
        return 0;
    }
    // Registering allocates, and so may first use of the process-wide
    // state: an add from inside (a global allocator that counts with a
    // sharded counter) goes on without an id, pinned (`reentry`); so does
    // a signal handler's add inside a window.
    if in_window() {
        return 0;
    }
    let Some(_inside) = super::reentry::enter() else {
        return 0;
    };
    LEASE
        .try_with(|l| {
            // A failed borrow is a registration on this thread (its
            // allocation, counted by a global allocator that adds to a
            // sharded counter): that add goes on without an id, pinned.
            let Ok(mut l) = l.try_borrow_mut() else {
                return 0;
            };
            if l.as_ref().is_some_and(|l| l.id > READER_BASE) {
                // A reader that adds: it trades its id for an adder's
                // (the drop gives it back; its row was no table's).
                *l = None;
            }
            let lease = l.get_or_insert_with(|| register(false));
            ack(lease);
            lease.id
        })
        .unwrap_or(0)
}

/// Before a pinned read by a thread that holds no id: it registers as a
/// *reader* (module docs, "Readers"), or acknowledges if its id was
/// revoked, so that its next reads skip the pin. A no-op inside a lease
/// (a read from an allocator's add), and where the light barrier is not
/// a compiler fence (its fence would cost a reader's window what a pin
/// costs).
#[cold]
pub(crate) fn read_lease() {
    if !readers_exist() {
        return;
    }
    #[cfg(test)]
    if EXITING.try_with(std::cell::Cell::get).unwrap_or(true) {
        return;
    }
    // As in `lease`: a read from inside this thread's own allocation, or
    // from a signal handler inside a window, stays pinned.
    if in_window() {
        return;
    }
    let Some(_inside) = super::reentry::enter() else {
        return;
    };
    let _ = LEASE.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            let lease = l.get_or_insert_with(|| register(true));
            if owner() == 0 {
                ack(lease);
            }
        }
    });
}

/// Acknowledges every revocation so far and owns again: from here on the
/// thread loads heads afresh, so it cannot write a table retired before.
fn ack(lease: &Lease) {
    #[cfg(debug_assertions)]
    let _ = ACKS.try_with(|a| a.set(a.get() + 1));
    loop {
        // SeqCst, all four: against `revoke`'s store of the count and of 0
        // into the cell. If this re-read sees no new revocation, the cell's
        // store below comes before any later revocation's store of 0 (so
        // that one is not lost); reading a revocation's count makes the
        // head it retired (stored before it) visible to this thread's next
        // loads of the head.
        let seen = lease.owners.revoked.load(Ordering::SeqCst);
        with_owner(|o| o.row.store(lease.id - 1, Ordering::SeqCst));
        if lease.owners.revoked.load(Ordering::SeqCst) == seen {
            // Release: every add this thread made before (to a retired
            // table, with a head it loaded earlier) happens-before a merge
            // that reads this (`acknowledged`, Acquire).
            lease.acked.store(seen, Ordering::Release);
            return;
        }
    }
}

/// The calling thread adds nothing before its next add (a pool thread
/// about to park): it gives its id back now, as its exit would, so that
/// no merge waits for it and busy threads get the small ids (rows of the
/// tables that exist). Its next add to a sharded table leases again
/// (`lease`). Not inside an unpinned read (`shard/merge.rs`, "Holders'
/// reads"): the crate calls no outside code from one.
pub(crate) fn quiesce() {
    // From a signal handler inside a window: the id stays (`in_window`).
    if in_window() {
        return;
    }
    let lease = LEASE
        .try_with(|l| {
            // A failed borrow is `lease` on this thread (from a global
            // allocator's add, say): it keeps its id.
            l.try_borrow_mut().ok().and_then(|mut l| l.take())
        })
        .ok()
        .flatten();
    if lease.is_some() {
        #[cfg(debug_assertions)]
        let _ = ACKS.try_with(|a| a.set(a.get() + 1));
    }
    // The drop gives the id back (`Lease`), outside the borrow.
    drop(lease);
}

/// Whether the calling thread holds a lease (revoked or not).
pub(crate) fn leased() -> bool {
    LEASE
        .try_with(|l| l.try_borrow().is_ok_and(|l| l.is_some()))
        .unwrap_or(false)
}

/// Acknowledges every revocation so far if the calling thread holds a
/// lease whose id was revoked: for a sampled add on a base whose table is
/// retiring, which never reads the owner id (a thread adding only to that
/// counter would otherwise hold its merge pending).
#[cold]
pub(crate) fn acknowledge() {
    if in_window() {
        return;
    }
    let _ = LEASE.try_with(|l| {
        if let Ok(l) = l.try_borrow() {
            if let Some(lease) = l.as_ref() {
                if owner() == 0 {
                    ack(lease);
                }
            }
        }
    });
}

/// Revokes every leased thread's id, so that each comes to [`lease`]
/// (and acknowledges) on its next add to a sharded table; the calling
/// thread, which is not in an add, acknowledges at once. Returns the
/// revocation's number, for [`acknowledged`]. Called after the heads to
/// retire were replaced.
pub(crate) fn revoke() -> u64 {
    let owners = Arc::clone(&OWNERS);
    let n = {
        // Inside while the owners' mutex (and the barrier's lock) is held:
        // a signal handler's add on this thread then leases nothing and
        // pins on a stripe, never waiting for either lock (`reentry`).
        let _inside = super::reentry::enter();
        let held = lock(&owners.held);
        // SeqCst: the store half of `ack`'s store-load pattern (its comment
        // gives the four accesses).
        let n = owners.revoked.fetch_add(1, Ordering::SeqCst) + 1;
        for r in held.holders.values() {
            // SAFETY: the thread is registered (its lease not dropped: the
            // drop removes it under this mutex first), so its owner cell
            // is alive (`OWNER`).
            unsafe { &*r.cell.0 }.row.store(NONE, Ordering::SeqCst);
        }
        // Then no holder keeps a cache hit (`Own`).
        grace::heavy_barrier();
        for r in held.holders.values() {
            // Relaxed: the barrier above orders it (`Own`).
            // SAFETY: as above.
            unsafe { &*r.cell.0 }.clear();
        }
        n
    };
    // The caller is between adds: it owns again at once.
    acknowledge();
    n
}

/// Whether every thread holding a lease has acknowledged revocation `n`,
/// given its lease back, or (where sleepers are read) was seen asleep
/// since: none can still write or read a table retired before it with a
/// head loaded before it. Called after `revoke` returned `n`.
///
/// A holder seen awake is looked at again a few times (a pool thread
/// about to park); seen asleep once, it is done with every revocation so
/// far. If one is still awake, the answer is "not yet".
#[cfg_attr(shardcount_loom, allow(unused_variables, unused_assignments))]
pub(crate) fn acknowledged(n: u64) -> bool {
    let owners = Arc::clone(&OWNERS);
    // As in `revoke`: it takes the owners' mutex.
    let _inside = super::reentry::enter();
    let sleepers = sleepers_seen();
    let nudges = sleepers && super::nudge::available();
    #[cfg(not(shardcount_loom))]
    let began = std::time::Instant::now();
    let mut round = 0;
    loop {
        let mut awake = false;
        // A nudge not heard yet, or sent again.
        let mut waiting = false;
        {
            let mut held = lock(&owners.held);
            // Every revocation counted so far retired its heads before it
            // was counted (Relaxed: the mutex orders it).
            let revoked = owners.revoked.load(Ordering::Relaxed);
            for (&id, r) in &mut held.holders {
                // Acquire: pairs with the Release store in `ack`.
                if r.acked.load(Ordering::Acquire) >= n || r.quiet >= n {
                    continue;
                }
                if id > READER_BASE {
                    // Outside every read window since the revocation's
                    // heavy barrier (module docs, "Readers"). Acquire:
                    // pairs with the Release store in `Reading`'s drop.
                    // SAFETY: as in `revoke`: registered, so alive.
                    if unsafe { &*r.cell.0 }.busy.load(Ordering::Acquire) == 0 {
                        r.quiet = revoked;
                    } else {
                        awake = true;
                    }
                    continue;
                }
                if !sleepers {
                    return false;
                }
                if let Some(a) = answered(r, n) {
                    r.quiet = a;
                    continue;
                }
                if asleep(r) {
                    r.quiet = revoked;
                    continue;
                }
                awake = true;
                if nudges {
                    // Running, or preempted: a nudge answers for it
                    // (`nudge.rs`), now or when it next runs. One heard
                    // but not answered (it stopped inside a window) is
                    // sent again a few times: the window ends within
                    // moments, unless it is a long read.
                    // SAFETY: as in `revoke`: registered, so alive.
                    let o = unsafe { &*r.cell.0 };
                    // Relaxed: only merges, under the mutex, store it.
                    let asked = o.ask.load(Ordering::Relaxed);
                    // Acquire: pairs with the Release store in `nudged`.
                    let heard = o.heard.load(Ordering::Acquire) >= asked;
                    if round == 0 || (heard && round <= RESENDS) {
                        waiting |= nudge(r, revoked);
                    } else if !heard {
                        waiting = true;
                    }
                }
            }
        }
        if !awake {
            return true;
        }
        round += 1;
        #[cfg(not(shardcount_loom))]
        if waiting && began.elapsed() < NUDGE_WAIT {
            std::thread::yield_now();
            continue;
        }
        if cfg!(shardcount_loom) || round > AWAKE_ROUNDS {
            return false;
        }
        #[cfg(not(shardcount_loom))]
        std::thread::yield_now();
    }
}

/// How many times [`acknowledged`] looks again at a holder seen awake.
const AWAKE_ROUNDS: u32 = 4;

/// How many times [`acknowledged`] nudges again a holder that heard a
/// nudge and did not answer.
const RESENDS: u32 = 3;

/// How long [`acknowledged`] waits, at most, for its nudges to be heard:
/// one delivery to a running thread takes microseconds; a preempted one
/// is heard when it next runs, and a later merge call sees its answer.
#[cfg(not(shardcount_loom))]
const NUDGE_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// The last revocation a nudge answered for `r`, if it is `n` or later.
fn answered(r: &Registered, n: u64) -> Option<u64> {
    // SAFETY: as in `revoke`: registered, so its cell is alive.
    let o = unsafe { &*r.cell.0 };
    // Acquire: pairs with the Release store in `nudged`. (A nudge's answer
    // covers every revocation before its ask, and each ask is the count
    // of revocations when it was sent: `nudge`.)
    let a = o.answer.load(Ordering::Acquire);
    (a >= n).then_some(a)
}

/// Asks `r`, through a nudge, to answer revocation `revoked` (every
/// revocation so far: the heads they retired were replaced before).
/// Whether it was sent: not to a thread that cannot hear it
/// (`nudge::hears`).
fn nudge(r: &Registered, revoked: u64) -> bool {
    // SAFETY: as in `revoke`: registered, so its cell is alive.
    let o = unsafe { &*r.cell.0 };
    // Relaxed: stored at registration under the owners' mutex, which the
    // caller holds.
    if !super::nudge::hears(o.mask.load(Ordering::Relaxed)) {
        return false;
    }
    // Relaxed: the signal's delivery orders it before the handler.
    o.ask.store(revoked, Ordering::Relaxed);
    #[cfg(not(shardcount_loom))]
    let _ = super::nudge::send(r.tid, r.cell.0);
    true
}

/// Whether threads that only read register as readers in this process
/// (module docs, "Readers"): under loom always, on std where the light
/// barrier is free.
pub(crate) fn readers_exist() -> bool {
    cfg!(shardcount_loom) || grace::light_is_free()
}

/// Whether merges read sleepers in this process (module docs): under
/// loom always (the `busy` words model it), on std where `sleepers.rs` can.
pub(crate) fn sleepers_seen() -> bool {
    cfg!(shardcount_loom) || super::sleepers::available()
}

/// Whether the registered thread `r` is asleep (module docs, "Sleepers").
fn asleep(r: &Registered) -> bool {
    #[cfg(shardcount_loom)]
    {
        // Acquire: pairs with the Release store in `leave`.
        // SAFETY: as in `revoke`: registered, so its cell is alive.
        unsafe { &*r.cell.0 }.busy.load(Ordering::Acquire) == 0
    }
    #[cfg(not(shardcount_loom))]
    {
        super::sleepers::asleep(r.tid)
    }
}

#[cfg(test)]
crate::primitive::const_thread_local! {
    /// Set by [`exit_now`]: `lease` acts as after the thread's lease was
    /// dropped at exit.
    static EXITING: std::cell::Cell<bool> = std::cell::Cell::new(false);
}

/// Gives the calling thread's id back and makes it act as a thread whose
/// lease is gone (its later adds are those of thread-local destructors at
/// exit): for models and tests of that path.
#[cfg(test)]
pub(crate) fn exit_now() {
    hand_back();
    let _ = EXITING.try_with(|e| e.set(true));
}

/// The id the calling thread's lease holds (0 without one), whether or
/// not a merge's revocation has it reading 0 from [`owner`] right now: for
/// tests that ask which row a thread owns while merges run alongside.
#[cfg(all(test, not(shardcount_loom)))]
pub(crate) fn held() -> usize {
    LEASE
        .try_with(|l| l.borrow().as_ref().map_or(0, |l| l.id))
        .unwrap_or(0)
}

/// Hands the calling thread's id back now, as its exit would: for tests
/// and models that reuse an id without waiting for a thread to end.
#[cfg(test)]
pub(crate) fn hand_back() {
    let lease = LEASE.try_with(|l| l.borrow_mut().take()).ok().flatten();
    drop(lease);
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_kept_until_handed_back_and_ids_are_reused() {
        std::thread::spawn(|| {
            assert_eq!(owner(), 0);
            let id = lease();
            assert_ne!(id, 0);
            assert_eq!(held(), id);
            assert_eq!(lease(), id, "a second lease must keep the first");
            hand_back();
            assert_eq!(owner(), 0);
        })
        .join()
        .unwrap();
    }

    /// `quiesce` gives the id back at once (a parked pool thread must not
    /// keep one: merges would wait for it, and busy threads would get ids
    /// beyond the tables' rows); the next lease takes one again.
    #[test]
    fn quiesce_gives_the_id_back_and_the_next_lease_takes_one() {
        std::thread::spawn(|| {
            let id = lease();
            assert_ne!(id, 0);
            quiesce();
            assert_eq!((held(), owner()), (0, 0), "the id is kept after quiesce");
            assert_ne!(lease(), 0);
            assert_ne!(held(), 0);
        })
        .join()
        .unwrap();
    }

    /// Inside a marked window (where only a signal handler that
    /// interrupted it can call them), a thread whose id was revoked leases
    /// nothing, acknowledges nothing and keeps its id: the interrupted add
    /// still holds the table it loaded, which a merge frees once the thread
    /// acknowledged (a review freed it so: heap corruption). Out of the
    /// window, its next lease acknowledges.
    #[test]
    fn inside_a_window_a_revoked_thread_neither_acknowledges_nor_gives_its_id_back() {
        if !super::super::window::RESTARTABLE {
            return; // windows past a miss are marked there only
        }
        let (revoked_tx, revoked_rx) = std::sync::mpsc::channel();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            // `held`, not `owner`: a merge in a test alongside may revoke
            // too, and only this thread's acknowledgement restores `owner`.
            let id = lease();
            assert_ne!(id, 0);
            ready_tx.send(()).unwrap();
            revoked_rx.recv().unwrap();
            assert_eq!(owner(), 0, "revoked");
            let mark = enter();
            assert_eq!(lease(), 0);
            acknowledge();
            read_lease();
            quiesce();
            assert_eq!(
                (owner(), held()),
                (0, id),
                "acknowledged or gave its id back"
            );
            leave(mark);
            assert_eq!((lease(), held()), (id, id));
        });
        ready_rx.recv().unwrap();
        let _ = revoke();
        revoked_tx.send(()).unwrap();
        t.join().unwrap();
    }

    /// Two live threads never hold the same id, and a thread's exit gives
    /// its id back (ids stay dense: a later thread gets one at most as
    /// large as the number of holders alive at once, tests alongside
    /// included).
    #[test]
    fn live_holders_have_distinct_ids() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let stop_rx = std::sync::Mutex::new(stop_rx);
        std::thread::scope(|s| {
            for _ in 0..4 {
                let (tx, stop_rx) = (tx.clone(), &stop_rx);
                s.spawn(move || {
                    tx.send(lease()).unwrap();
                    // Hold the id until the test has seen all four.
                    let _ = stop_rx.lock().unwrap().recv();
                });
            }
            let mut ids: Vec<usize> = (0..4).map(|_| rx.recv().unwrap()).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), 4, "two live threads shared an id: {ids:?}");
            drop(stop_tx);
        });
    }
}
