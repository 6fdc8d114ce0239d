//! The one choice every add makes: which word of a shard table takes it.
//!
//! `Counter`, `CounterSet` (and through it the histogram and the labelled
//! counters) all add through [`ShardTable::route`], then write the word it
//! names with one of two adds:
//!
//! * [`store_add`](super::owned::store_add) on a row the thread owns: a
//!   load and a store, its only writer (`owned.rs`);
//! * [`shared_add`] on every other word (the base, a shared row): a
//!   read-modify-write, sampled for contention by the caller.
//!
//! The order of the tests is the hot path's: the row cache first (one
//! compare and one load), then "is there a table", then the owner id.
//!
//! Orderings: counts publish nothing, so every add is `Relaxed`. Readers
//! need only each word's coherence; what makes a table safe to read is the
//! head's `Acquire` load ([`ShardTable::load`]) and the merge protocol
//! (`merge.rs`), never the adds.

use super::table::{Head, Row, ShardTable, Table};
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::thread::{owner, MAX_SHARDS};
use std::marker::PhantomData;

/// Where an add goes when it is not to the thread's own row: see
/// [`ShardTable::route`].
pub(crate) enum Route<'a> {
    /// No plain table (a tag, or one a merge retires): the base, with
    /// `shared_add`, sampled; `Head` is the head as loaded.
    Base(Head),
    /// A table this thread, holding an id, owns no row of: its probe's
    /// shared row, with `shared_add`, sampled.
    Beyond(Head, &'a Table),
    /// A table, but this thread holds no id and must not read it: lease
    /// (or acknowledge a revocation), then [`ShardTable::route_leased`].
    NoId,
}

impl ShardTable {
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
    #[inline(always)]
    pub(crate) fn route<R>(
        &self,
        owned: impl FnOnce(Row<'_>) -> R,
        elsewhere: impl FnOnce(Route<'_>) -> R,
    ) -> R {
        let head = self.load();
        if let Some(row) = self.cached(head) {
            owned(row)
        } else if !head.is_table() {
            elsewhere(Route::Base(head))
        } else {
            match self.route_by_id(head) {
                Ok(row) => owned(row),
                Err(route) => elsewhere(route),
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
    fn route_by_id(&self, head: Head) -> Result<Row<'_>, Route<'_>> {
        debug_assert!(head.is_table());
        let i = owner::row();
        if i >= MAX_SHARDS {
            return Err(Route::NoId);
        }
        // SAFETY: a plain table's address, loaded by this thread, which
        // holds an owner id: a merge frees the table only after this thread
        // acknowledged its retirement, which it does on a later slow path.
        let t = unsafe { &*head.0 };
        match t.first_line_of(i) {
            Some(first) => {
                owner::missed(head.0.addr(), first.cast(), i);
                Ok(Row {
                    first,
                    table: PhantomData,
                })
            }
            None => Err(Route::Beyond(head, t)),
        }
    }

    /// Where the add of a thread that just leased goes, from a head loaded
    /// now (after the lease, so after any acknowledgement it made): `id` is
    /// what `owner::lease` returned, and a caller with id 0 (at thread
    /// exit) is pinned (`thread::grace`), so it may read the table but
    /// owns no row of it. Never [`Route::NoId`].
    #[inline]
    pub(crate) fn route_leased(&self, id: usize) -> Result<Row<'_>, Route<'_>> {
        let head = self.load();
        let Some(t) = self.table(head) else {
            return Err(Route::Base(head));
        };
        match t.first_line_of(id.wrapping_sub(1)) {
            Some(first) => Ok(Row {
                first,
                table: PhantomData,
            }),
            None => Err(Route::Beyond(head, t)),
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
