//! The table chain itself: the head and its tags, the tables, their rows,
//! and the growth that publishes a new table (the protocol is in the
//! `shard` module docs).

use super::lines::{flat_word_at, try_zeroed_lines, Lazy, Line};
use crate::primitive::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use crate::primitive::sync::Mutex;
use crate::thread::{grace, owner};
use crossbeam_utils::CachePadded;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// A tag's bits: 0 is set, 1..8 hold the cap (0: the default), and from
/// bit 8 up is the take epoch (see the `shard` module docs).
pub(super) const CAP_MASK: usize = 0xfe;
pub(super) const EPOCH_SHIFT: u32 = 8;

/// Tags are odd; tables are at least 8-aligned, so their addresses have
/// the low bits clear; a table a merge is retiring has bit 1 set
/// (`merge.rs`). Adders see only plain tables: the hot path's test is one
/// `test` of two bits, as it was of one.
#[inline(always)]
pub(super) fn is_table(p: *mut Table) -> bool {
    p.addr() & 3 == 0
}

/// A tag (no table), as opposed to a plain or retiring table.
#[inline]
pub(super) fn is_tag(p: *mut Table) -> bool {
    p.addr() & 1 == 1
}

/// Bit 1 of a head: a merge is retiring the table it names; bits 1 and 2:
/// the merge is folding it (`merge.rs`). Tables are 128-aligned (their
/// take epoch is cache-padded), so these bits of a table's address are 0.
pub(super) const RETIRING: usize = 2;
pub(super) const FOLDING: usize = 6;

/// The tag for "no table yet, cap `2^log2`", or the default cap for `None`.
const fn tag(max_log2: Option<u32>) -> usize {
    match max_log2 {
        Some(log2) => ((log2 as usize + 1) << 1) | 1,
        None => 1,
    }
}

/// The cap (as a power of two) that a tag carries.
fn tag_max_log2(tag: usize) -> u32 {
    match (tag & CAP_MASK) >> 1 {
        0 => crate::thread::default_max_shards().trailing_zeros(),
        field => field as u32 - 1,
    }
}

/// The take epoch a tag carries.
#[inline]
pub(super) fn tag_epoch(tag: usize) -> u64 {
    (tag >> EPOCH_SHIFT) as u64
}

/// One table of the chain.
pub(crate) struct Table {
    /// A power of two of rows, each `row_lines` lines, row after row.
    pub(super) lines: Box<[Line]>,
    /// Lines per row.
    pub(super) row_lines: usize,
    /// Bytes per row, and per area (`lines`, and the shared rows and the
    /// baselines alike): a read's walk steps in bytes, with no shift per
    /// table (`owned.rs`).
    pub(super) row_bytes: usize,
    pub(super) area_bytes: usize,
    /// Rows - 1.
    pub(super) mask: usize,
    /// The table this one replaced, or a tag when this is the first.
    pub(super) older: *mut Table,
    /// The cap on `shards.len()`, as a power of two.
    max_log2: u32,
    /// The take epoch, on its own line so takes do not disturb adders'
    /// reads of the header above.
    pub(super) takes: CachePadded<AtomicU64>,
    /// The shared rows, for adds by threads that own no row (`owned.rs`).
    pub(super) shared: Lazy,
    /// The owned rows' take baselines (`owned.rs`).
    pub(super) taken: Lazy,
    /// Which of the two areas above exist, as reads see them: bits
    /// `owned::TAKEN` and `owned::SHARED`, each set after its area is
    /// published and before anything is written to it (`owned.rs`), so
    /// that a read of a table with neither tests one word.
    pub(super) areas: AtomicUsize,
    /// Held by a take while it visits this table's rows (`owned.rs`), and
    /// by a merge while it folds them.
    pub(super) take_lock: Mutex<()>,
    /// The owner-id revocation that retired this table (`merge.rs`).
    pub(super) retired_at: AtomicU64,
}

impl Drop for Table {
    fn drop(&mut self) {
        let len = self.lines.len();
        self.shared.free(len);
        self.taken.free(len);
    }
}

impl Table {
    /// The shard for a thread's probe, in a table of one-line rows (its
    /// first word): for owners whose rows have no single writer (the
    /// maximum and minimum); counting owners use the shared rows
    /// (`shared_shard`).
    #[inline]
    pub(crate) fn shard(&self, probe: u32) -> &AtomicU64 {
        debug_assert_eq!(self.row_lines, 1);
        let i = probe as usize & self.mask;
        debug_assert!(i < self.lines.len());
        // SAFETY: there are `mask + 1` rows of at least one line each, so
        // `i <= mask < lines.len()`.
        let line = unsafe { self.lines.get_unchecked(i) };
        &line[0]
    }

    /// The first line of row `i`, if the table has it (the row owner id
    /// `i + 1` owns), with the provenance of the whole table's lines.
    #[inline]
    pub(super) fn first_line_of(&self, i: usize) -> Option<NonNull<Line>> {
        if i > self.mask {
            return None;
        }
        let start = i * self.row_lines;
        debug_assert!(start + self.row_lines <= self.lines.len());
        // SAFETY: there are `mask + 1` rows of `row_lines` lines each, and
        // `i <= mask`: `start` is inside `lines`, a non-empty box.
        Some(unsafe { NonNull::new_unchecked(self.lines.as_ptr().add(start).cast_mut()) })
    }

    /// Owned row `probe` (masked): `row_lines` lines, for tests reading
    /// where an add landed.
    #[cfg(all(test, not(shardcount_loom), not(miri)))]
    pub(crate) fn row(&self, probe: u32) -> &[Line] {
        let start = (probe as usize & self.mask) * self.row_lines;
        debug_assert!(start + self.row_lines <= self.lines.len());
        // SAFETY: there are `mask + 1` rows of `row_lines` lines each, and
        // the row's index is at most `mask`.
        unsafe { self.lines.get_unchecked(start..start + self.row_lines) }
    }

    /// How many rows the table has.
    pub(crate) fn rows(&self) -> usize {
        self.mask + 1
    }
}

/// The row a thread owns in a table: its first line, as the row cache
/// (`thread::owner`) keeps it. The lifetime is the shard table's borrow,
/// but a merge may free the row sooner: like an owned add's row found
/// without the cache, it is valid for the add that found it (the thread
/// acknowledges no revocation before that add ends), and must be used at
/// once, not kept.
#[derive(Clone, Copy)]
pub(crate) struct Row<'a> {
    pub(super) first: NonNull<Line>,
    pub(super) table: PhantomData<&'a Table>,
}

impl<'a> Row<'a> {
    /// Word `i` of the row.
    ///
    /// # Safety
    ///
    /// `i` is below the row's words (`row_lines * LINE_WORDS`).
    #[inline(always)]
    pub(crate) unsafe fn word(self, i: usize) -> &'a AtomicU64 {
        // SAFETY: the row's lines lie from `first` on, inside their
        // table's `lines`, alive during the add that found the row (the
        // type's docs); the caller promises `i` is inside the row.
        unsafe { flat_word_at(self.first.as_ptr(), i) }
    }
}

/// A value of the head, as loaded once: a tag or the newest table then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head(pub(super) *mut Table);

impl Head {
    /// Whether it names a plain table (not a tag, nor one a merge retires):
    /// where adds go to rows rather than the base.
    #[inline(always)]
    pub(crate) fn is_table(self) -> bool {
        is_table(self.0)
    }

    /// Whether it is a tag (no table), not a plain or retiring table.
    #[inline(always)]
    pub(crate) fn is_tag(self) -> bool {
        is_tag(self.0)
    }
}

/// A chain of shard rows behind one word, grown and merged.
pub(crate) struct ShardTable {
    pub(super) head: AtomicPtr<Table>,
}

// SAFETY: the tables are reached only through `&self` as shared atomics, and
// freed in `drop` (`&mut self`); nothing in them is tied to a thread.
unsafe impl Send for ShardTable {}
// SAFETY: as above: every access through `&self` is atomic.
unsafe impl Sync for ShardTable {}

impl ShardTable {
    crate::primitive::const_fn! {
        /// No table yet; the cap is `2^max_log2`, or the default for `None`.
        pub(crate) const fn new(max_log2: Option<u32>) -> Self {
            ShardTable {
                head: AtomicPtr::new(std::ptr::without_provenance_mut(tag(max_log2))),
            }
        }
    }

    /// The head as it is now.
    #[inline]
    pub(crate) fn load(&self) -> Head {
        // Acquire: pairs with the AcqRel publish in `grow`, so a table's
        // zeroed shards are initialised before anyone touches them.
        Head(self.head.load(Ordering::Acquire))
    }

    /// The table `head` names, if it names a plain one (not retiring): the
    /// adders' view.
    ///
    /// The caller is either pinned (`thread::grace`) or an add that loaded
    /// `head` itself and reads the table only after finding that its thread
    /// holds an owner id (as [`route`](Self::route) checks first): a merge frees a
    /// table only after a grace period and after every holder acknowledged
    /// its retirement (`merge.rs`). A thread with no id (never leased, or
    /// exiting) is neither, and must not read the table it names.
    #[inline(always)]
    pub(crate) fn table(&self, head: Head) -> Option<&Table> {
        if is_table(head.0) {
            // SAFETY: a value with the low bits clear was published by
            // `grow` from a live Box, and is freed only in `drop` (`&mut
            // self`) or by a merge once no such caller can hold it (above).
            Some(unsafe { &*head.0 })
        } else {
            None
        }
    }

    /// The row this thread owns in the table `head` names, if its row
    /// cache (`thread::owner`) holds that table: an add's whole
    /// row-finding on a hit, one compare and one load.
    #[inline(always)]
    pub(crate) fn cached(&self, head: Head) -> Option<Row<'_>> {
        // The cache names a plain table this thread loaded as a head while
        // holding its id, and `first` is its row there, alive while `head`
        // (just loaded) still names it, as in `route_by_id`.
        owner::cached(head.0.addr()).map(|first| Row {
            first: first.cast(),
            table: PhantomData,
        })
    }

    /// The address the head holds now.
    #[cfg(test)]
    pub(crate) fn head_addr(&self) -> usize {
        self.load().0.addr()
    }

    /// Whether the calling thread's row cache holds the head as it is now.
    #[cfg(all(test, shardcount_loom))]
    pub(crate) fn cached_here(&self) -> bool {
        owner::cached(self.load().0.addr()).is_some()
    }

    /// The table `head` names, plain or retiring: the readers' view (the
    /// counts of a retiring table are still the owner's until folded).
    /// The caller is pinned, as for [`table`](Self::table).
    #[inline]
    pub(crate) fn any_table(&self, head: Head) -> Option<&Table> {
        if is_tag(head.0) {
            return None;
        }
        let p = head.0.map_addr(|a| a & !FOLDING);
        // SAFETY: as in `table`: a retiring head is a published table's
        // address with bit 1 set (so `p`, its address, is not null).
        Some(unsafe {
            std::hint::assert_unchecked(!p.is_null());
            &*p
        })
    }

    /// How many shards (rows) the newest table has, retiring or not: 0
    /// once no table is left (never grown, or merged and freed).
    pub(crate) fn shards(&self) -> usize {
        let _pin = grace::pin();
        self.any_table(self.load()).map_or(0, Table::rows)
    }

    /// The most shards this table will grow to (a power of two).
    pub(crate) fn max_shards(&self) -> usize {
        let _pin = grace::pin();
        let head = self.load();
        1 << self
            .any_table(head)
            .map_or_else(|| tag_max_log2(head.0.addr()), |t| t.max_log2)
    }

    /// Replaces `current` (a tag or the newest table) by a table twice as
    /// large (or 2 rows) of `row_lines`-line rows, unless the cap is
    /// reached. Returns the head after. The owner passes the same
    /// `row_lines` every time.
    #[cold]
    #[inline(never)]
    pub(crate) fn grow(&self, current: Head, row_lines: usize) -> Head {
        // Not from inside this thread's own allocation (`thread::reentry`):
        // the table and the cap's first read allocate. The adds keep going
        // where they go.
        let Some(_inside) = crate::thread::reentry::enter() else {
            return current;
        };
        if !is_table(current.0) && !is_tag(current.0) {
            // Contention on a counter whose merge is pending: keep the
            // table instead (`merge.rs`).
            return self.unretire(current);
        }
        let (max_log2, len) = match self.table(current) {
            Some(t) => (t.max_log2, t.rows()),
            None => (tag_max_log2(current.0.addr()), 0),
        };
        let max = 1usize << max_log2;
        let new_len = if len == 0 { max.min(2) } else { len * 2 };
        if max <= 1 || new_len > max {
            return current;
        }
        // A table too large to allocate is not grown into: the adds keep
        // going to the rows there are.
        let Some(lines) = new_len.checked_mul(row_lines).and_then(try_zeroed_lines) else {
            return current;
        };
        let new = Box::into_raw(Box::new(Table {
            areas: AtomicUsize::new(0),
            row_bytes: row_lines * std::mem::size_of::<Line>(),
            area_bytes: std::mem::size_of_val::<[Line]>(&lines),
            lines,
            row_lines,
            mask: new_len - 1,
            older: current.0,
            max_log2,
            takes: CachePadded::new(AtomicU64::new(0)),
            shared: Lazy::new(),
            taken: Lazy::new(),
            take_lock: Mutex::new(()),
            retired_at: AtomicU64::new(0),
        }));
        // AcqRel on success: Release publishes the zeroed shards to the
        // Acquire loads in `load`. Acquire on failure: the caller goes on to
        // use the winner's table, so it needs its initialisation too.
        match self
            .head
            .compare_exchange(current.0, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => Head(new),
            Err(winner) => {
                // SAFETY: `new` came from Box::into_raw above and was never
                // shared; dropping a Table does not free its `older`.
                drop(unsafe { Box::from_raw(new) });
                Head(winner)
            }
        }
    }

    /// Grows until the newest table has at least `n` rows, or the cap
    /// (or memory) stops it; returns the rows it has then.
    pub(crate) fn split(&self, n: usize, row_lines: usize) -> usize {
        let _pin = grace::pin();
        let mut head = self.load();
        loop {
            if !is_tag(head.0) && head.0.addr() & FOLDING == FOLDING {
                // A merge's fold, which no growth puts back: wait for the
                // tag it leaves (as `read_pinned` does), then grow from it.
                crate::primitive::hint::spin_loop();
                #[cfg(not(shardcount_loom))]
                std::thread::yield_now();
                head = self.load();
                continue;
            }
            let rows = self.table(head).map_or(0, Table::rows);
            if rows >= n {
                return rows;
            }
            let next = self.grow(head, row_lines);
            if next == head {
                return rows; // at the cap, or no memory
            }
            head = next;
        }
    }

    /// Visits every row of the newest table and of the older ones.
    #[inline]
    pub(crate) fn for_each_row(&self, mut f: impl FnMut(&[Line])) {
        let _pin = grace::pin();
        let mut head = self.load();
        while let Some(t) = self.any_table(head) {
            t.lines.chunks_exact(t.row_lines).for_each(&mut f);
            head = Head(t.older);
        }
    }

    /// Visits every shard (the first word of each one-line row).
    #[inline]
    pub(crate) fn for_each_shard(&self, mut f: impl FnMut(&AtomicU64)) {
        self.for_each_row(|row| f(&row[0][0]));
    }
}
