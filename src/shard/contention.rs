//! Contention checks, written once for every owner of a table, and the
//! shard table's drop (the protocol is in the `shard` module docs, under
//! "Contention checks").

use super::lines::Line;
use super::merge;
use super::table::{is_table, is_tag, Head, ShardTable, FOLDING};
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::thread::owner;
use crate::thread::sampler::{self, Readings, Seen};

/// A sampled add, as a contention check sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Check<'a> {
    /// The head loaded before the add: the tag (whose epoch is the
    /// "before" reading on the base) or the table `word` is in.
    pub(crate) head: Head,
    /// The word added to.
    pub(crate) word: &'a AtomicU64,
    /// What the add returned.
    pub(crate) prev: u64,
    /// What it added.
    pub(crate) n: u64,
    /// Lines per row: what the owner passes to [`ShardTable::grow`].
    pub(crate) row_lines: usize,
}

/// A compare-exchange on a word that another writer changed between this
/// thread's read of it and the exchange.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lost {
    /// The head loaded before that read.
    pub(crate) head: Head,
    /// [`ShardTable::epoch_before`] of `head`, read before that read; the
    /// failed exchange must have read the word with `Acquire`.
    pub(crate) before: Option<u64>,
    /// Whether the word was the owner's base (else a shard of the table).
    pub(crate) on_base: bool,
    /// Lines per row: what the owner passes to [`ShardTable::grow`].
    pub(crate) row_lines: usize,
}

/// Contention checks, written once for every owner of a table. The
/// sampler's per-thread strikes and epochs are keyed by the table's
/// address, and forgotten when it is dropped.
impl ShardTable {
    /// The sampler's key for this table.
    #[inline]
    fn key(&self) -> usize {
        std::ptr::from_ref(self).addr()
    }

    /// A sampled add on a word outside the table (the owner's base), whose
    /// quick re-load showed another value or which is picked for a watch
    /// (`sampler::watched`): interference grows the first table at once
    /// (there is nowhere to move to). `c.head` is the tag loaded before
    /// the add. Returns whether it saw interference.
    #[cold]
    #[inline(never)]
    pub(crate) fn check_base(&self, c: Check<'_>) -> bool {
        if !is_tag(c.head.0) {
            // This thread adds to a retiring table's base, so it is done
            // with the table: it acknowledges (`merge.rs`).
            owner::acknowledge();
            // The base of a counter whose merge is pending: a change is
            // contention coming back (or a take: then the merge only
            // waits for the next call), so keep the table. The retiring
            // table is not read: this thread may have acknowledged.
            let now = sampler::watch(c.word, c.prev, c.n);
            if now != c.prev.wrapping_add(c.n) {
                self.unretire(c.head);
                return true;
            }
            return false;
        }
        let before = self.epoch_before(c.head);
        let now = sampler::watch(c.word, c.prev, c.n);
        if now == c.prev.wrapping_add(c.n) {
            return false;
        }
        let after = self.epoch_after(c.head);
        let seen = sampler::verdict(Readings {
            prev: c.prev,
            n: c.n,
            now,
            before,
            after,
        });
        if seen == Seen::Interference {
            self.grow(c.head, c.row_lines);
            return true;
        }
        false
    }

    /// Whether another thread writes `line`, a line of the table `head`
    /// names, while this one watches it (`sampler::watch_line`); a take
    /// in between gives no verdict (`false`). The epoch is read before the
    /// first reading of the line and after the last, with `Acquire` loads
    /// of the words between: a change a take's swap made shows in it.
    #[cold]
    #[inline(never)]
    pub(crate) fn line_written(&self, head: Head, line: &Line) -> bool {
        let Some(before) = self.epoch_before(head) else {
            return false;
        };
        sampler::watch_line(&line[..]) && self.epoch_after(head) == before
    }

    /// A sampled add on a word of the table whose quick re-load showed
    /// another value, or which is picked for a watch (or, in a set, a line
    /// watch that saw nothing): re-loads (watching) and acts on
    /// what it sees, with the epoch read at this thread's previous check on
    /// the same table as the "before" reading, so the hot path reads no
    /// epoch. On interference the thread moves at once; interference again,
    /// with no quiet check between, doubles the table.
    #[cold]
    #[inline(never)]
    pub(crate) fn check_shard(&self, c: Check<'_>) {
        let now = sampler::watch(c.word, c.prev, c.n);
        let before = sampler::swap_epoch(self.key(), c.head.0.addr(), self.epoch_before(c.head));
        if now == c.prev.wrapping_add(c.n) {
            sampler::quiet(self.key());
            return;
        }
        let after = self.epoch_after(c.head);
        let seen = sampler::verdict(Readings {
            prev: c.prev,
            n: c.n,
            now,
            before,
            after,
        });
        if seen == Seen::Interference && sampler::collided(self.key()) {
            self.grow(c.head, c.row_lines);
        }
    }

    /// Interference the owner saw by its own means (a set's row mark, a
    /// watched line) on the rows of `c.head`: the thread moves, and when
    /// it persists the table grows.
    #[cold]
    #[inline(never)]
    pub(crate) fn strike(&self, c: Check<'_>) {
        if !is_tag(c.head.0) && !is_table(c.head.0) {
            // As in `check_base`.
            owner::acknowledge();
        }
        if sampler::collided(self.key()) {
            self.grow(c.head, c.row_lines);
        }
    }

    /// A check the owner found quiet by its own means: this thread's
    /// strikes on the table start over.
    #[inline]
    pub(crate) fn quiet(&self) {
        sampler::quiet(self.key());
    }

    /// A lost exchange: interference unless a take ran meanwhile. On the
    /// base this grows the first table; on a shard it moves the thread,
    /// and persisting, grows.
    #[cold]
    #[inline(never)]
    pub(crate) fn exchange_lost(&self, l: Lost) {
        let after = self.epoch_after(l.head);
        if l.before != Some(after) {
            return;
        }
        if l.on_base || sampler::collided(self.key()) {
            self.grow(l.head, l.row_lines);
        }
    }
}

impl Drop for ShardTable {
    fn drop(&mut self) {
        // Strikes this thread counted against the table must not count
        // against one that later takes its place in memory.
        sampler::forget(self.key());
        let t = self.head.load(Ordering::Relaxed);
        if !is_tag(t) {
            // No thread's row cache may name a table of the chain once its
            // memory can be another table's (`thread::owner`).
            owner::forget(|h| {
                let mut p = t.map_addr(|a| a & !FOLDING);
                while !is_tag(p) {
                    if p.addr() == h {
                        return true;
                    }
                    // SAFETY: the chain is freed only below.
                    p = unsafe { (*p).older };
                }
                false
            });
        }
        // SAFETY: `&mut self`: no thread can reach the chain any more.
        unsafe { merge::free_chain(t) };
    }
}

#[cfg(all(test, not(shardcount_loom)))]
mod tests {
    use super::*;

    /// Dropping a table forgets this thread's strikes on it: a table made
    /// later at the same address starts with none. (Strikes more than a
    /// millisecond apart never add up, so a descheduled thread makes this
    /// weaker, never failing wrongly.)
    #[test]
    fn dropping_the_table_forgets_its_strikes() {
        // Boxed, so that `drop` does not move it to another address first.
        let t = Box::new(ShardTable::new(None));
        let key = t.key();
        assert!(!sampler::collided(key), "one strike is not enough");
        drop(t);
        assert!(!sampler::collided(key), "the strike outlived its table");
    }
}
