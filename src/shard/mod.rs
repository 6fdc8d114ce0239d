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
//! * **Contention checks** (below) take the sampled add as a [`Check`] (a
//!   lost compare-exchange as a [`Lost`]). The sampler's per-thread state
//!   (strikes, the remembered epoch) is keyed by the `ShardTable`'s
//!   address, so owners pass no key, and dropping the table forgets this
//!   thread's strikes on it, as well as freeing the chain: owners need no
//!   `Drop` of their own.
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

use crate::primitive::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use crate::primitive::sync::Mutex;
use crate::thread::sampler::{self, Readings, Seen};
use crate::thread::{grace, owner};
use crossbeam_utils::CachePadded;
use std::marker::PhantomData;
use std::ptr::NonNull;

#[cfg(test)]
mod grow_once;
mod merge;
mod owned;
mod route;
mod take;

#[cfg(test)]
pub(crate) use grow_once::GrowOnce;
pub(crate) use merge::{merge_all, Part, Rows};
pub(crate) use owned::store_add;
pub(crate) use route::{shared_add, Route};

/// Words per [`Line`].
pub(crate) const LINE_WORDS: usize = 16;

/// One 128-byte-aligned block of words: the unit a row is made of.
pub(crate) type Line = CachePadded<[AtomicU64; LINE_WORDS]>;

/// `n` zeroed lines, or `None` when they cannot be allocated (more bytes
/// than the address space allows, or the allocator refuses). Callers that
/// take a size from a user turn `None` into a panic naming it; growth
/// skips a table it cannot allocate. Either way, never an abort.
///
/// Zeroed by the allocator (`alloc_zeroed`): a large table's pages are not
/// touched until a thread writes them, so a size the host cannot back
/// fails here, not later in a write.
#[cfg(not(shardcount_loom))]
pub(crate) fn try_zeroed_lines(n: usize) -> Option<Box<[Line]>> {
    use std::alloc::{alloc_zeroed, Layout};
    if n == 0 {
        return Some(Box::new([]));
    }
    let layout = Layout::array::<Line>(n).ok()?;
    // SAFETY: `layout` has a non-zero size: `n > 0` lines of 128 bytes.
    let p = unsafe { alloc_zeroed(layout) }.cast::<Line>();
    if p.is_null() {
        return None;
    }
    // SAFETY: `p` is a fresh allocation by the global allocator with
    // `Layout::array::<Line>(n)`, the layout a `Box<[Line]>` of `n` lines
    // frees with; all-zero bytes are a valid `Line` (`CachePadded` of
    // `AtomicU64`s, which have `u64`'s representation), so all `n` are
    // initialised.
    Some(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) })
}

/// Loom's atomics are not plain words: built one by one.
#[cfg(shardcount_loom)]
pub(crate) fn try_zeroed_lines(n: usize) -> Option<Box<[Line]>> {
    let mut lines = Vec::new();
    lines.try_reserve_exact(n).ok()?;
    lines.extend((0..n).map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0)))));
    Some(lines.into_boxed_slice())
}

/// How many lines a row of `words` words needs (at least one).
pub(crate) const fn lines_for(words: usize) -> usize {
    match words.div_ceil(LINE_WORDS) {
        0 => 1,
        n => n,
    }
}

/// Word `i` of the row made of `lines`.
#[inline]
pub(crate) fn word(lines: &[Line], i: usize) -> &AtomicU64 {
    &lines[i / LINE_WORDS][i % LINE_WORDS]
}

/// Word `i` of the row made of `lines`, without bounds checks: for a hot
/// path whose index was checked once, earlier.
///
/// # Safety
///
/// `i < lines.len() * LINE_WORDS`.
#[inline(always)]
pub(crate) unsafe fn word_unchecked(lines: &[Line], i: usize) -> &AtomicU64 {
    debug_assert!(i < lines.len() * LINE_WORDS);
    // SAFETY: `i / LINE_WORDS < lines.len()` by the caller's promise, and
    // `i % LINE_WORDS < LINE_WORDS`, the words in a line.
    unsafe {
        lines
            .get_unchecked(i / LINE_WORDS)
            .get_unchecked(i % LINE_WORDS)
    }
}

/// Word `i` of the row whose first line is at `first`, addressed as one
/// flat array where a line is exactly its words (128-byte alignment:
/// `x86_64`, `aarch64`, ...), so the compiler need not split `i` into a
/// line and a word; elsewhere (and under loom, whose atomics are larger)
/// as `word_unchecked`.
///
/// # Safety
///
/// `first` points to a live line followed by enough lines in the same
/// allocation to hold word `i`.
#[inline(always)]
pub(crate) unsafe fn flat_word_at<'a>(first: *const Line, i: usize) -> &'a AtomicU64 {
    if cfg!(not(shardcount_loom))
        && std::mem::size_of::<Line>() == LINE_WORDS * std::mem::size_of::<AtomicU64>()
    {
        // SAFETY: `CachePadded` is `repr(C)` with its value at offset 0
        // (crossbeam-utils 0.8.22 and later), and a line is no larger than
        // its array of words: the row's words lie back to back, `i` of them
        // before word `i`, all inside the lines the caller promises.
        unsafe { &*first.cast::<AtomicU64>().add(i) }
    } else {
        // SAFETY: the caller's promise: line `i / LINE_WORDS` is in the
        // row, and `i % LINE_WORDS < LINE_WORDS`, the words in a line.
        unsafe {
            let line: &'a Line = &*first.add(i / LINE_WORDS);
            line.get_unchecked(i % LINE_WORDS)
        }
    }
}

/// A tag's bits: 0 is set, 1..8 hold the cap (0: the default), and from
/// bit 8 up is the take epoch (see the module docs).
const CAP_MASK: usize = 0xfe;
const EPOCH_SHIFT: u32 = 8;

/// Tags are odd; tables are at least 8-aligned, so their addresses have
/// the low bits clear; a table a merge is retiring has bit 1 set
/// (`merge.rs`). Adders see only plain tables: the hot path's test is one
/// `test` of two bits, as it was of one.
#[inline(always)]
fn is_table(p: *mut Table) -> bool {
    p.addr() & 3 == 0
}

/// A tag (no table), as opposed to a plain or retiring table.
#[inline]
fn is_tag(p: *mut Table) -> bool {
    p.addr() & 1 == 1
}

/// Bit 1 of a head: a merge is retiring the table it names; bits 1 and 2:
/// the merge is folding it (`merge.rs`). Tables are 128-aligned (their
/// take epoch is cache-padded), so these bits of a table's address are 0.
const RETIRING: usize = 2;
const FOLDING: usize = 6;

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
fn tag_epoch(tag: usize) -> u64 {
    (tag >> EPOCH_SHIFT) as u64
}

/// One table of the chain.
pub(crate) struct Table {
    /// A power of two of rows, each `row_lines` lines, row after row.
    lines: Box<[Line]>,
    /// Lines per row.
    row_lines: usize,
    /// Rows - 1.
    mask: usize,
    /// The table this one replaced, or a tag when this is the first.
    older: *mut Table,
    /// The cap on `shards.len()`, as a power of two.
    max_log2: u32,
    /// The take epoch, on its own line so takes do not disturb adders'
    /// reads of the header above.
    takes: CachePadded<AtomicU64>,
    /// The shared rows, for adds by threads that own no row (`owned.rs`).
    shared: owned::Lazy,
    /// The owned rows' take baselines (`owned.rs`).
    taken: owned::Lazy,
    /// Held by a take while it visits this table's rows (`owned.rs`), and
    /// by a merge while it folds them.
    take_lock: Mutex<()>,
    /// The owner-id revocation that retired this table (`merge.rs`).
    retired_at: AtomicU64,
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
    #[cfg(all(test, not(shardcount_loom)))]
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
    first: NonNull<Line>,
    table: PhantomData<&'a Table>,
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
pub(crate) struct Head(*mut Table);

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
    head: AtomicPtr<Table>,
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
            lines,
            row_lines,
            mask: new_len - 1,
            older: current.0,
            max_log2,
            takes: CachePadded::new(AtomicU64::new(0)),
            shared: owned::Lazy::new(),
            taken: owned::Lazy::new(),
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
