//! The one choice every add makes: which word of a shard table takes it.
//!
//! `Counter`, `CounterSet` (and through it the histogram and the labelled
//! counters) all add through [`ShardTable::route`], then write the word it
//! names with one of two adds:
//!
//! * [`store_add`] on a row the thread owns: a
//!   load and a store, its only writer (`owned.rs`);
//! * [`shared_add`] on every other word (the base, a shared row): a
//!   read-modify-write, sampled for contention by the caller.
//!
//! The order of the tests is the hot path's: the row cache first (one
//! compare and one load), then "is there a table", then the owner id.
//!
//! The route and the owned add are a window (`thread::owner`,
//! "Sleepers"): no system call, no lock, no allocation between the head's
//! load and the store, so a thread seen asleep is outside it and a merge
//! need not wait for it. Every other way leaves the window before its
//! closure runs, and one that reads the table again pins first. On x86_64
//! Linux the row cache's hit is a restartable block of its own
//! (`thread::window`), tried first by [`ShardTable::route_add`]; the miss
//! opens a marked window only for a head that names a table.
//!
//! Orderings: counts publish nothing, so every add is `Relaxed`. Readers
//! need only each word's coherence; what makes a table safe to read is the
//! head's `Acquire` load ([`ShardTable::load`]) and the merge protocol
//! (`merge.rs`), never the adds.

use super::owned::store_add;
use super::table::{Head, Row, ShardTable, Table};
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::thread::{owner, window, MAX_SHARDS};
use std::marker::PhantomData;

/// Where an add goes when it is not to the thread's own row: see
/// [`ShardTable::route`].
pub(crate) enum Route {
    /// No plain table (a tag, or one a merge retires): the base, with
    /// `shared_add`, sampled; `Head` is the head as loaded.
    Base(Head),
    /// A table this thread, holding an id, owns no row of: pin, then
    /// [`ShardTable::route_leased`] with [`owner::owner`] (the table may
    /// be gone: the route left its window).
    Beyond,
    /// A table, but this thread holds no id and must not read it: lease
    /// (or acknowledge a revocation), pin, then
    /// [`ShardTable::route_leased`].
    NoId,
}

/// Where a pinned add goes when it is not to the thread's own row: see
/// [`ShardTable::route_leased`].
pub(crate) enum Leased<'a> {
    /// No plain table: the base, as [`Route::Base`].
    Base(Head),
    /// A table the thread owns no row of (the pin keeps it): its probe's
    /// shared row, with `shared_add`, sampled.
    Shared(Head, &'a Table),
}

impl ShardTable {
    /// Adds `n` to word `i` of the calling thread's own row when its row
    /// cache names the table (the hit: a restartable window where there is
    /// one, `thread::window`), or routes the add ([`route`](Self::route)),
    /// passing what is not its own row's to `elsewhere`.
    ///
    /// # Safety
    ///
    /// Word `i` is inside a row (every row has the same words).
    #[inline(always)]
    pub(crate) unsafe fn route_add(&self, i: usize, n: u64, elsewhere: impl FnOnce(Route)) {
        window::restartable! { stmt:
            // SAFETY: the head and this thread's owner cell, live; a hit
            // names this thread's row in the table the head holds, and word
            // `i` is in it (the caller's promise).
            if unsafe { window::add(self.head.as_ptr().cast(), owner::way(), i, n) } {
                return;
            }
        }
        self.route(
            // SAFETY: the caller's promise.
            |row| store_add(unsafe { row.word(i) }, n),
            elsewhere,
        );
    }

    /// [`route_add`](Self::route_add) for word 0 (a `Counter`'s, whose
    /// rows have one word).
    #[inline(always)]
    pub(crate) fn route_add_first(&self, n: u64, elsewhere: impl FnOnce(Route)) {
        window::restartable! { stmt:
            // SAFETY: as in `route_add`; every row has a word 0.
            if unsafe { window::add_first(self.head.as_ptr().cast(), owner::way(), n) } {
                return;
            }
        }
        self.route(
            // SAFETY: every row has a word 0.
            |row| store_add(unsafe { row.word(0) }, n),
            elsewhere,
        );
    }

    /// [`route_add`](Self::route_add) for two words of one row: `m` to
    /// word `j`, then `n` to word `i`.
    ///
    /// # Safety
    ///
    /// Words `i` and `j` are inside a row.
    #[inline(always)]
    pub(crate) unsafe fn route_add_pair(
        &self,
        (i, n): (usize, u64),
        (j, m): (usize, u64),
        elsewhere: impl FnOnce(Route),
    ) {
        window::restartable! { stmt:
            // SAFETY: as in `route_add`, for both words.
            if unsafe { window::add_pair(self.head.as_ptr().cast(), owner::way(), i, n, j, m) } {
                return;
            }
        }
        self.route(
            |row| {
                // SAFETY: the caller's promise.
                let (at, and) = unsafe { (row.word(i), row.word(j)) };
                store_add(and, m);
                store_add(at, n);
            },
            elsewhere,
        );
    }

    /// Routes the calling thread's add: `owned` with its own row on a row
    /// cache hit (an add's whole row-finding, one compare and one load) or
    /// when it finds its row past a miss, `elsewhere` with the base while
    /// there is no plain table, or by owner id.
    ///
    /// Two closures rather than one enum: each place that reaches the
    /// owned row gets its own copy of `owned`'s add, so the hit's code
    /// falls straight back into a caller's loop (one instruction fewer per
    /// add than a shared block, callgrind). Mark `elsewhere`
    /// `#[inline(always)]`: an idle add's whole path is in it, and left to
    /// the inliner it cost a histogram record 12 more instructions.
    ///
    /// `owned` runs inside the window (module docs): it adds to the row
    /// and nothing else (no allocation, no lock, no other add).
    ///
    /// Where the hit is restartable, `route_add` tried it first: this is
    /// the miss. It skips the cache, and opens the window only for a head
    /// that names a table, loading the head again inside it (a nudge may
    /// have answered for this thread before the mark, `thread::nudge`).
    #[inline(always)]
    fn route<R>(&self, owned: impl FnOnce(Row<'_>) -> R, elsewhere: impl FnOnce(Route) -> R) -> R {
        let (head, mark) = if window::RESTARTABLE {
            let head = self.load();
            if !head.is_table() {
                return elsewhere(Route::Base(head));
            }
            let mark = owner::enter();
            (self.load(), mark)
        } else {
            let mark = owner::enter();
            let head = self.load();
            if let Some(row) = self.cached(head) {
                let r = owned(row);
                owner::leave(mark);
                return r;
            }
            (head, mark)
        };
        if !head.is_table() {
            owner::leave(mark);
            return elsewhere(Route::Base(head));
        }
        match self.route_by_id(head) {
            Ok(row) => {
                let r = owned(row);
                owner::leave(mark);
                r
            }
            Err(route) => {
                owner::leave(mark);
                elsewhere(route)
            }
        }
    }

    /// `route` past a row cache miss, `head` a plain table: its own row
    /// (cached for the next add), a table it owns no row of, or nowhere it
    /// may look. A thread with no id (never leased, or exiting) is told so
    /// before the table is read or borrowed: it is neither pinned nor
    /// counted by a merge's acknowledgements, so the table it loaded may be
    /// gone (`merge.rs`).
    #[inline(always)]
    fn route_by_id(&self, head: Head) -> Result<Row<'_>, Route> {
        debug_assert!(head.is_table());
        let i = owner::row();
        if i >= MAX_SHARDS {
            return Err(Route::NoId);
        }
        // SAFETY: a plain table's address, loaded by this thread, which
        // holds an owner id, inside a window: a merge frees the table only
        // after this thread acknowledged its retirement (on a later slow
        // path) or was seen asleep, outside every window (`thread::owner`).
        let t = unsafe { &*head.0 };
        match t.first_line_of(i) {
            Some(first) => {
                owner::missed(head.0.addr(), first.cast(), i);
                Ok(Row {
                    first,
                    table: PhantomData,
                })
            }
            None => Err(Route::Beyond),
        }
    }

    /// [`route`](Self::route) for a thread that just leased id `id` (not
    /// 0): its row found by id from a head loaded now, inside a window,
    /// never [`Route::NoId`]. The cold path after a lease, not
    /// pinned (a pin's thread-local would be one more to drop at exit).
    #[inline(always)]
    pub(crate) fn route_id<R>(
        &self,
        id: usize,
        owned: impl FnOnce(Row<'_>) -> R,
        elsewhere: impl FnOnce(Route) -> R,
    ) -> R {
        debug_assert_ne!(id, 0);
        let mark = owner::enter();
        let head = self.load();
        let Some(t) = self.table(head) else {
            owner::leave(mark);
            return elsewhere(Route::Base(head));
        };
        match t.first_line_of(id - 1) {
            Some(first) => {
                let r = owned(Row {
                    first,
                    table: PhantomData,
                });
                owner::leave(mark);
                r
            }
            None => {
                owner::leave(mark);
                elsewhere(Route::Beyond)
            }
        }
    }

    /// Where a pinned add goes, from a head loaded now (after any lease, so
    /// after any acknowledgement it made): `id` is what `owner::lease` or
    /// `owner::owner` returned (0: none, at thread exit or revoked since).
    /// The caller is pinned (`thread::grace`), which keeps the table whole
    /// until the add is done: a merge drains it only after a grace period
    /// that began after the retirement. So the caller may also add to the
    /// row its id owns (it is that row's only writer, as ever).
    #[inline]
    pub(crate) fn route_leased(&self, id: usize) -> Result<Row<'_>, Leased<'_>> {
        let head = self.load();
        let Some(t) = self.table(head) else {
            return Err(Leased::Base(head));
        };
        match t.first_line_of(id.wrapping_sub(1)) {
            Some(first) => Ok(Row {
                first,
                table: PhantomData,
            }),
            None => Err(Leased::Shared(head, t)),
        }
    }
}

/// Adds `n` to a word other threads may write too (the base, a shared
/// row) and returns the value before, for the caller's contention sample.
#[inline(always)]
pub(crate) fn shared_add(w: &AtomicU64, n: u64) -> u64 {
    // Relaxed: a lone read-modify-write; nothing is published through
    // counts (module docs).
    w.fetch_add(n, Ordering::Relaxed)
}
