//! The shard table: a chain of tables of power-of-two counts of
//! cache-line-aligned rows of atomic words, summed together, grown on
//! contention and merged back into the owner's base on demand (`merge.rs`,
//! the inverse of growth), or freed when the owner drops it.
//!
//! A row is `row_lines` whole [`Line`]s (16 words, 128 bytes each): one
//! line for a `Counter` (its word is the line's first), `ceil((n + 9) / 16)`
//! lines for a set of `n` counters (and its row mark), whose cells sit side
//! by side so that one thread's updates to different counters share that
//! thread's own lines.
//!
//! # Protocol
//!
//! * `head: AtomicPtr<Table>` is either a *tag* (an odd value: no table
//!   yet; it carries the shard cap and a take epoch) or a pointer to the
//!   newest table. A table is published once, by a compare-exchange with
//!   `AcqRel`; readers load the head with `Acquire`, so the zeroed shards
//!   are visible before use.
//! * **Merge** (`merge.rs`): the head goes to a *retiring* mark of the
//!   newest table (adders see no table and use the base), owner ids are
//!   revoked, and once every holder acknowledged and a grace period
//!   (`thread::grace`) passed, the chain is folded into the base and freed.
//!   So a table may be freed while the owner lives: adders reach a table
//!   only with a head they loaded while holding an owner id (covered by
//!   the acknowledgement) or inside a pinned section (reads, takes, adds
//!   without an id).
//! * **Owned rows** (`owned.rs`): row `id - 1` of a table is written only
//!   by the thread holding owner id `id`, with a plain load and store; the
//!   others add to the table's shared rows; takes keep baselines for owned
//!   words instead of swapping them. Its protocol is at the top of that
//!   file.
//! * Each table links to the older, smaller one it replaced. Older tables
//!   are freed only with the whole chain (a merge, or the owner's drop),
//!   and are always visited by
//!   [`ShardTable::for_each_shard`], so an add that lands in an old table
//!   after a growth is still counted: growth moves no counts and so can
//!   neither lose nor duplicate one.
//! * `grow` replaces the newest table by compare-exchange, so racing growers
//!   allocate at most one table each and the loser frees its own.
//! * **Take epochs** (`take.rs`). A take rewrites the words adders write,
//!   which the contention check must not mistake for another adder. One
//!   word holds the number of takes *in progress* (the low
//!   `IN_PROGRESS_BITS` bits) and the number *completed* (the bits above):
//!   the tag while there is no table, the newest table's `takes` once there
//!   is one. A take adds one in progress (an RMW), swaps the words with
//!   `Release`, then moves itself from in progress to completed (a
//!   `Release` RMW). Every such RMW changes the word, so its values never
//!   repeat (short of wrapping).
//!
//!   A sampled add compares two readings of the epoch: one read (`Acquire`)
//!   at some point before its add (on the base, the tag it loaded to find
//!   the word; on a shard, what this thread read at its previous sampled
//!   check on the same counter, so the hot path reads nothing extra), which
//!   must show no take in progress, and one read after it re-reads the word
//!   it added to with `Acquire`. They must be equal for a verdict. If a
//!   take's swap landed between the add and the re-read, the re-read
//!   synchronises with that swap, so the second epoch includes the take's
//!   start; the first cannot (it saw nothing in progress, and had it seen
//!   the take completed, the swap would have come before the add). So they
//!   differ: no verdict.
//! * **The take guard.** Owners never run that sequence themselves:
//!   [`ShardTable::take`] counts the take in progress and returns a
//!   [`take::Take`]; the owner empties its base and every row through the
//!   guard (its `swap`, and the rows it hands out, whose shared words
//!   `TakeRow::take` swaps: the two places a take's `Release` swap is
//!   written), and dropping the guard counts the take completed, on unwind
//!   too, so a panic cannot leave a take in progress (which would silence
//!   every check on the table for good).
//! * **Contention checks** (`contention.rs`) take the sampled add as a
//!   [`Check`] (a lost compare-exchange as a [`Lost`]). The sampler's
//!   per-thread state (strikes, the remembered epoch) is keyed by the
//!   `ShardTable`'s address, so owners pass no key, and dropping the table
//!   forgets this thread's strikes on it, as well as freeing the chain:
//!   owners need no `Drop` of their own.
//!
//! Orderings, by role (a comment at a use names only its partner):
//!
//! * **Counts** (the base, every row's words): `Relaxed` adds and loads;
//!   they publish nothing (`route.rs`).
//! * **The head as a table's publication**: `grow` installs a table with
//!   an `AcqRel` compare-exchange (`Acquire` on failure: the loser goes on
//!   with the winner's table) and [`ShardTable::load`] reads the head with
//!   `Acquire`, so a table's zeroed lines are seen before any of its words.
//!   A merge's writes of the head have their reasons in `merge.rs`.
//! * **A sampled add's re-load** of the word it added to
//!   (`sampler::watch`, `sampler::watch_line`, the owners' inline
//!   re-loads): `Acquire`, pairing with a take's `Release` swap of that
//!   word ([`take::Take::swap`], `TakeRow::take` in `owned.rs`), so that a
//!   swap read there shows its take's start in `epoch_after`.
//! * **Take epochs** (`take.rs`): a take's start is a `Relaxed` RMW (the
//!   `Release` swaps after it carry it), its end a `Release` RMW;
//!   `epoch_before` loads a table's epoch with `Acquire`, pairing with
//!   that end, and `epoch_after` loads `Relaxed`, after the re-load's
//!   `Acquire`.
//! * Anything under `&mut self` (the drops) loads `Relaxed`: every other
//!   access happened-before.

mod contention;
#[cfg(test)]
mod grow_once;
mod lines;
mod merge;
mod owned;
mod route;
mod table;
mod take;

pub(crate) use contention::{Check, Lost};
#[cfg(test)]
pub(crate) use grow_once::GrowOnce;
pub(crate) use lines::{
    flat_word_at, lines_for, try_zeroed_lines, word, word_unchecked, Line, LINE_WORDS,
};
pub(crate) use merge::{merge_all, Part, Rows};
pub(crate) use owned::store_add;
pub(crate) use route::{shared_add, Leased, Route};
pub(crate) use table::{Head, ShardTable, Table};

/// `b`, with the branch it steers laid out for `true` (the fall-through):
/// a call to a cold function on the other side, which LLVM weighs.
#[inline(always)]
pub(crate) fn likely(b: bool) -> bool {
    #[cold]
    #[inline(always)]
    fn unlikely() {}
    if !b {
        unlikely();
    }
    b
}
