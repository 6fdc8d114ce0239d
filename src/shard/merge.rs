//! Merge: the inverse of growth. A sharded owner folds its tables' counts
//! back into its base and frees the tables, once no thread can still
//! write or read them.
//!
//! # Protocol
//!
//! A merge runs in two halves, one merge at a time in the process (the
//! `MERGES` lock; merges are rare). A batch ([`merge_all`]: a map's
//! chunks, the `metrics` layer's quiet keys) takes each step for all its
//! tables before the next, so it pays one revocation and two grace periods
//! in all; each table still sees the steps in this order:
//!
//! 1. **Retire.** The head goes from the newest table `X` to `X | RETIRING`
//!    (a compare-exchange), then [`owner::revoke`] stores 0 into every
//!    leased thread's owner id and returns the revocation's number, kept in
//!    `X.retired_at`. From then on adds load a head that names no plain
//!    table and count on the owner's base, as before the first growth.
//! 2. **Complete**, now or on a later call to `merge`:
//!    * wait for [`owner::acknowledged`]: every thread that held an id has
//!      since come to `owner::lease` (its next add to any sharded table
//!      takes that path, its id being 0), exited, declared itself idle
//!      (`owner::quiesce`: its next add takes that path too, and leaves
//!      the idle state under the owners' mutex), or, on x86_64 Linux, was
//!      seen asleep in the kernel after the revocation (a parked pool
//!      thread is), so outside every window (`owner`, "Sleepers"), or
//!      answered a nudge there (`owner`, "Nudges"). Owners' hot adds are
//!      not pinned; an acknowledgement is their promise that every add they
//!      began with a head loaded before the revocation is done (program
//!      order, published by the `Release` store of the acknowledgement)
//!      and that their later loads of the head see the retirement (they
//!      read the revocation's number with `SeqCst` after it was stored);
//!    * a grace period ([`grace::wait`]): every pinned section (reads,
//!      takes, adds by threads without an id) that could have loaded `X`
//!      before the retirement has ended;
//!    * now nobody writes the chain: the head goes to `X | FOLDING` (a
//!      compare-exchange from `X | RETIRING`: it fails if contention came
//!      back meanwhile and [`ShardTable::unretire`] put `X` back), then a
//!      `Release` fence, then every table of the chain is drained into the
//!      owner's base (`Table::drain`, under each table's take lock, so a
//!      take never sees a word half moved);
//!    * the head becomes a fresh tag (the cap, the take epoch past every
//!      earlier one), a second grace period lets every pinned reader that
//!      loaded the old head leave, and the chain is freed.
//!
//! **Holders' reads.** A thread whose lease is registered (its owner id
//! not revoked, so not given back either) reads a *plain* table's head
//! without pinning and without looking at the head again, inside a window
//! opened before it loaded the head (`owner`, "Sleepers"): a merge that
//! retires that table frees it, and folds it, only after every thread
//! registered at its revocation acknowledged or was seen asleep after it
//! (never inside a window); this thread acknowledges
//! only in `owner::lease`, on a later add (reads add nothing), and its
//! window ends after the read. Had it
//! acknowledged that revocation before, it read the revocation's number
//! (`SeqCst`), and its head load would see the retirement, not a plain
//! head. A table unretired since is not folded by that merge, and a later
//! one revokes again. So the table, and every table older in its chain,
//! stays whole until the read is over; the read's loads of it
//! happen-before the fold through the acknowledgement (`Release`, then the
//! merge's `Acquire`).
//!
//! **Other readers** ([`ShardTable::read`]) pin, load the head, read the owner's
//! base and the chain from that head, then (after an `Acquire` fence)
//! load the head again, and start over if it changed or was folding. If a
//! read saw any word the drain wrote, the fence makes the `FOLDING` head
//! (stored before the drain's `Release` fence) visible to the second load,
//! so a read never mixes a folded base with unfolded rows. The head may
//! come back to a value the reader saw (a retire and an unretire), but
//! only while nothing is folded; no fold can finish while the reader is
//! pinned (the first grace period waits for it), and a folding head only
//! moves on to a tag.
//!
//! A table may be **unretired** (the head back to `X`) until the fold
//! begins: by contention on the base while the merge is pending, or by a
//! `split`. Nothing was moved yet, and owners only write `X` again after
//! they acknowledged, which they may.

use super::table::{is_table, is_tag, tag_epoch, Head, ShardTable, Table, CAP_MASK, EPOCH_SHIFT};
use super::table::{FOLDING, RETIRING};
use crate::primitive::sync::atomic::{fence, Ordering};
use crate::primitive::sync::{lock, Mutex};
use crate::thread::{grace, owner};

crate::primitive::global! {
    /// One merge at a time: grace periods and revocations are global.
    static MERGES: Mutex<()> = Mutex::new(());
}

/// The tables `head` names, for a read that keeps them alive: pinned, or
/// by a holder (see [`ShardTable::read`] and [`ShardTable::held_rows`]).
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    table: &'a ShardTable,
    head: Head,
}

impl<'a> Rows<'a> {
    /// Folds `f` over the tables of the chain, newest first.
    #[inline(always)]
    fn fold_tables<T>(&self, mut acc: T, mut f: impl FnMut(T, &'a Table) -> T) -> T {
        let Some(mut t) = self.table.any_table(self.head) else {
            return acc;
        };
        loop {
            acc = f(acc, t);
            // A table's `older` is a plain table or a tag, never retiring
            // (`grow` unretires instead): no bits to clear.
            if is_tag(t.older) {
                return acc;
            }
            // SAFETY: an older table is freed only with the chain it ends
            // (`free_chain`), which the caller's read keeps alive as it
            // keeps the newest (`ShardTable::read`).
            t = unsafe { &*t.older };
        }
    }

    /// Visits every owned and shared row of the chain, as reads see them
    /// (owned words less their baselines), with the row's index in its
    /// table.
    #[inline]
    pub(crate) fn for_each_count_row(&self, mut f: impl FnMut(usize, super::owned::RowRef<'_>)) {
        self.fold_tables((), |(), t| t.for_each_count_row(&mut f));
    }

    /// Word `i` of every row of the chain, added up (wrapping), as
    /// [`for_each_count_row`](Self::for_each_count_row) reads them: the
    /// rows' part of counter `i`'s total. `i` is inside a row.
    #[inline(always)]
    pub(crate) fn sum_word(&self, i: usize) -> u64 {
        self.fold_tables(0, |total: u64, t| total.wrapping_add(t.sum_word(i)))
    }

    /// [`sum_word`](Self::sum_word)`(0)` of a chain of one-line rows (a
    /// `Counter`'s).
    #[inline(always)]
    pub(crate) fn sum_first_word(&self) -> u64 {
        self.fold_tables(0, |total: u64, t| total.wrapping_add(t.sum_first_word()))
    }

    /// How many rows the newest table has (0: none).
    pub(crate) fn shards(&self) -> usize {
        self.table.any_table(self.head).map_or(0, Table::rows)
    }
}

/// Frees the chain that starts at `t` (a table, or a tag: nothing).
///
/// # Safety
///
/// No thread can reach any table of the chain any more, and it is freed
/// once.
pub(super) unsafe fn free_chain(t: *mut Table) {
    let mut t = t.map_addr(|a| a & !FOLDING);
    while !is_tag(t) {
        // SAFETY: every table in the chain came from Box::into_raw in
        // `grow`, is owned by this chain alone, and the caller promises no
        // one else reaches it.
        let table = unsafe { Box::from_raw(t) };
        t = table.older;
    }
}

/// One sharded owner in a batch of merges ([`merge_all`]): its table,
/// its counting words per row, and how a word's count folds into its base
/// (a read-modify-write: adders may be adding to the base meanwhile).
pub(crate) struct Part<'a> {
    pub(crate) table: &'a ShardTable,
    pub(crate) words: usize,
    pub(crate) fold: Box<dyn FnMut(usize, u64) + 'a>,
    /// Set by [`merge_all`] when this part is done.
    pub(crate) done: bool,
}

impl<'a> Part<'a> {
    /// A part not merged yet.
    pub(crate) fn new(
        table: &'a ShardTable,
        words: usize,
        fold: Box<dyn FnMut(usize, u64) + 'a>,
    ) -> Self {
        Part {
            table,
            words,
            fold,
            done: false,
        }
    }
}

/// Merges every part (module docs) with one revocation and two grace
/// periods for the whole batch, not per table: the per-table order of
/// steps is a single merge's. Returns how many parts are done (folded and
/// freed, or had nothing to merge), and marks each (`Part::done`); the
/// others are pending, and a later call completes them.
pub(crate) fn merge_all(parts: &mut [Part<'_>]) -> usize {
    let _one = lock(&MERGES);
    let mut heads: Vec<Option<Head>> = Vec::with_capacity(parts.len());
    {
        let _pin = grace::pin();
        let mut retired = false;
        for p in parts.iter() {
            let (head, now) = p.table.retire();
            heads.push(head);
            retired |= now;
        }
        if retired {
            let n = owner::revoke();
            for (p, head) in parts.iter().zip(&heads) {
                if let Some(t) = head.and_then(|h| p.table.any_table(h)) {
                    // Relaxed: under `MERGES`, as in `retire`. A table
                    // retired by an earlier call keeps its own number.
                    if t.retired_at.load(Ordering::Relaxed) == u64::MAX {
                        t.retired_at.store(n, Ordering::Relaxed);
                    }
                }
            }
        }
    }
    for (p, head) in parts.iter_mut().zip(&heads) {
        p.done = head.is_none();
    }
    let mut done = heads.iter().filter(|h| h.is_none()).count();
    // The retiring chains every holder acknowledged.
    let ready: Vec<usize> = (0..parts.len())
        .filter(|&i| heads[i].is_some_and(|h| parts[i].table.acknowledged(h)))
        .collect();
    if ready.is_empty() {
        return done;
    }
    grace::wait();
    let folding: Vec<usize> = ready
        .into_iter()
        .filter(|&i| heads[i].is_some_and(|h| parts[i].table.start_fold(h)))
        .collect();
    fence(Ordering::Release);
    for &i in &folding {
        let p = &mut parts[i];
        if let Some(h) = heads[i] {
            p.table.fold(h, p.words, &mut *p.fold);
        }
    }
    grace::wait();
    for &i in &folding {
        if let Some(h) = heads[i] {
            // SAFETY: the head no longer names the chain, every owner-id
            // holder acknowledged the retirement (so loads the head
            // afresh), and the grace period saw out every pinned section
            // that could hold it. Only this merge (under MERGES) frees it.
            unsafe { free_chain(h.0) };
        }
        parts[i].done = true;
    }
    done += folding.len();
    done
}

impl ShardTable {
    /// Runs `read` on the chain as it is, so that it sees a merge's fold
    /// wholly or not at all: `read` reads the owner's base and walks the
    /// [`Rows`] it is given, and runs again (from scratch) if a merge
    /// folded meanwhile. Pinned, unless the calling thread holds an owner
    /// id and the head names a plain table (module docs, "Holders'
    /// reads").
    ///
    /// `read` must not add to any counter, nor allocate (a global
    /// allocator may count): an add may acknowledge a revocation, which an
    /// unpinned read relies on not happening before it ends. A `read` that
    /// allocates uses [`read_pinned`](Self::read_pinned).
    ///
    /// Each way is a function of its own with one call of `read` (which
    /// callers mark `#[inline(always)]`, as it has two callers), so that
    /// this is a test and a jump.
    #[inline]
    pub(crate) fn read<R>(&self, read: impl FnMut(Rows<'_>) -> R) -> R {
        if owner::holds() {
            self.read_held(read)
        } else {
            self.read_pinned(read)
        }
    }

    /// [`read`](Self::read) by a thread that holds an owner id, inside a
    /// window (left also if `read` panics).
    #[inline(never)]
    fn read_held<R>(&self, mut read: impl FnMut(Rows<'_>) -> R) -> R {
        let Some(window) = owner::Reading::enter() else {
            return self.read_pinned(read);
        };
        let Some(rows) = self.held_rows(self.load()) else {
            drop(window);
            return self.read_pinned(read);
        };
        #[cfg(debug_assertions)]
        let acks = owner::acks();
        let r = read(rows);
        #[cfg(debug_assertions)]
        debug_assert_eq!(owner::acks(), acks, "an unpinned read acknowledged");
        drop(window);
        r
    }

    /// The chain `head` (loaded by the caller) names, to be read once,
    /// unpinned and without looking at the head again, if it names a plain
    /// table and the calling thread holds an owner id (module docs,
    /// "Holders' reads"); `None` otherwise, when the caller reads through
    /// [`read_pinned`](Self::read_pinned). The head may be loaded before
    /// the test: only this thread leases or acknowledges, and it does
    /// neither here, so an id it holds now it held at the load.
    ///
    /// The caller opened a read window (`owner::Reading`, which holders
    /// and readers get: a revocation after it opened has the merge wait
    /// for the window's end or, for an adder, its acknowledgement) before
    /// it loaded `head`, and closes it only when done with the rows; it must not add to any counter, nor allocate,
    /// meanwhile (as [`read`](Self::read)'s `read`).
    #[inline(always)]
    pub(crate) fn held_rows(&self, head: Head) -> Option<Rows<'_>> {
        if !is_table(head.0) {
            return None;
        }
        // SAFETY: a plain table's head is its 128-aligned address, and the
        // folding bits come with the retiring bit, clear here: no bits
        // for `any_table` to clear.
        unsafe { std::hint::assert_unchecked(head.0.addr() & FOLDING == 0) };
        Some(Rows { table: self, head })
    }

    /// [`read`](Self::read), pinned whoever calls it: for a `read` that
    /// allocates, since a global allocator may count with a sharded
    /// counter, and that add may acknowledge a revocation.
    #[inline(never)]
    pub(crate) fn read_pinned<R>(&self, mut read: impl FnMut(Rows<'_>) -> R) -> R {
        if !owner::holds() {
            // Its next reads skip the pin (`owner`, "Readers").
            owner::read_lease();
        }
        let _pin = grace::pin();
        loop {
            let head = self.load();
            if !is_tag(head.0) && head.0.addr() & FOLDING == FOLDING {
                // A fold moves the counts now: wait for its end.
                crate::primitive::hint::spin_loop();
                #[cfg(not(shardcount_loom))]
                std::thread::yield_now();
                continue;
            }
            let r = read(Rows { table: self, head });
            if is_tag(head.0) {
                // No chain: the base is everything.
                return r;
            }
            // Acquire: pairs with the Release fence after the head went to
            // FOLDING, if `read` saw any word the fold wrote (module docs).
            fence(Ordering::Acquire);
            if self.head.load(Ordering::Relaxed) == head.0 {
                return r;
            }
        }
    }

    /// Appends the total of the first `words` words of each row of the
    /// chain (owned rows less their baselines, then shared rows, newest
    /// table first), read as a sum reads them; nothing without a table.
    #[cfg(not(shardcount_loom))]
    pub(crate) fn row_totals(&self, words: usize, out: &mut Vec<u64>) {
        let start = out.len();
        // Pinned: `out` may grow (`read_pinned`).
        self.read_pinned(|rows| {
            out.truncate(start);
            rows.for_each_count_row(|_, row| {
                out.push((0..words).fold(0u64, |t, i| t.wrapping_add(row.read(i))));
            });
        });
    }

    /// Retires the chain if the head names a plain table (returns `true`
    /// then: the caller revokes and records it); the head as it is after,
    /// `None` for a tag (nothing to merge). Pinned, under `MERGES`.
    fn retire(&self) -> (Option<Head>, bool) {
        loop {
            let head = self.load();
            if is_tag(head.0) {
                return (None, false);
            }
            if !is_table(head.0) {
                return (Some(head), false); // retired by an earlier call
            }
            let retiring = Head(head.0.map_addr(|a| a | RETIRING));
            // SeqCst: before the revocation's SeqCst count (owner.rs), so a
            // thread that reads that count sees the retirement. Failure: a
            // growth; look again.
            if self
                .head
                .compare_exchange(head.0, retiring.0, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                if let Some(t) = self.any_table(retiring) {
                    // Until the revocation's number is known, no
                    // acknowledgement completes this merge: a revocation
                    // that panics halfway leaves it pending, not freeable.
                    // Relaxed: read under `MERGES`, which every writer holds.
                    t.retired_at.store(u64::MAX, Ordering::Relaxed);
                }
                return (Some(retiring), true);
            }
        }
    }

    /// Whether the retiring chain `head` names may be folded now: every
    /// holder acknowledged its revocation. Under `MERGES`.
    fn acknowledged(&self, head: Head) -> bool {
        // The table is alive: only a merge frees it, under MERGES.
        self.any_table(head).is_none_or(|newest| {
            // Relaxed: written under MERGES.
            owner::acknowledged(newest.retired_at.load(Ordering::Relaxed))
        })
    }

    /// Starts folding the chain `head` names (retiring, acknowledged, a
    /// grace period past): `false` if it was unretired meanwhile.
    fn start_fold(&self, head: Head) -> bool {
        let folding = head.0.map_addr(|a| a | FOLDING);
        // Relaxed, then the caller's Release fence (module docs). Failure:
        // unretired, contention came back.
        self.head
            .compare_exchange(head.0, folding, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Drains the chain `head` names (folding) into the base through
    /// `fold` and puts a fresh tag in its place.
    fn fold(&self, head: Head, words: usize, fold: &mut dyn FnMut(usize, u64)) {
        let mut bottom = head;
        while let Some(t) = self.any_table(bottom) {
            t.drain(words, &mut |i, v| fold(i, v));
            bottom = Head(t.older);
        }
        // The first tag's cap, and its take epoch with no take in progress
        // and one more completed: every pinned take that began on that
        // tag ended in the grace period, and the value differs from every
        // earlier one, so a sampled add that read the old tag gives no
        // verdict.
        let epoch = (tag_epoch(bottom.0.addr()) >> super::take::IN_PROGRESS_BITS) + 1;
        let fresh = (bottom.0.addr() & (CAP_MASK | 1))
            | ((epoch << super::take::IN_PROGRESS_BITS) as usize) << EPOCH_SHIFT;
        debug_assert!(is_tag(std::ptr::without_provenance_mut::<Table>(fresh)));
        // Release: the drained zeros (and the base's adds) come before any
        // reader that loads the tag and so reads the base alone.
        self.head
            .store(std::ptr::without_provenance_mut(fresh), Ordering::Release);
    }

    /// Puts a retiring table back (contention came back before the fold
    /// began): returns the head after.
    #[cold]
    pub(crate) fn unretire(&self, current: Head) -> Head {
        if current.0.addr() & FOLDING != RETIRING {
            return current;
        }
        let plain = current.0.map_addr(|a| a & !RETIRING);
        // AcqRel/Acquire: the head's publication role (`ShardTable::load`
        // pairs with it), though the table is not new.
        match self
            .head
            .compare_exchange(current.0, plain, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Head(plain),
            Err(now) => Head(now),
        }
    }
}
