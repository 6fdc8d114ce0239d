//! The grow-only shard table: a chain of tables of power-of-two counts of
//! cache-line-aligned rows of atomic words, summed together, freed only when
//! the owner drops it.
//!
//! A row is `row_lines` whole [`Line`]s (16 words, 128 bytes each): one
//! line for a `Counter` (its word is the line's first), `ceil((n + 1) / 16)`
//! lines for a set of `n` counters (and its row mark), whose cells sit side by side so that one
//! thread's updates to different counters share that thread's own lines.
//!
//! # Protocol
//!
//! * `head: AtomicPtr<Table>` is either a *tag* (an odd value: no table
//!   yet; it carries the shard cap and a take epoch) or a pointer to the
//!   newest table. A table is published once, by a compare-exchange with
//!   `AcqRel`; readers load the head with `Acquire`, so the zeroed shards
//!   are visible before use.
//! * Each table links to the older, smaller one it replaced. Older tables
//!   are never freed before the owner drops and are always visited by
//!   [`ShardTable::for_each_shard`], so an add that lands in an old table
//!   after a growth is still counted: growth moves no counts and so can
//!   neither lose nor duplicate one.
//! * `grow` replaces the newest table by compare-exchange, so racing growers
//!   allocate at most one table each and the loser frees its own.
//! * **Take epochs.** A take rewrites the words adders write, which the
//!   contention check must not mistake for another adder. One word holds
//!   the number of takes *in progress* (low [`IN_PROGRESS_BITS`] bits) and
//!   the number *completed* (the bits above): the tag while there is no
//!   table, the newest table's `takes` once there is one. A take adds one
//!   in progress (an RMW), swaps the words with `Release`, then moves itself
//!   from in progress to completed (a `Release` RMW). Every such RMW changes
//!   the word, so its values never repeat (short of wrapping).
//!
//!   A sampled add compares two readings of the epoch: one read (`Acquire`)
//!   at some point before its add (on the base, the tag it loaded to find
//!   the word; on a shard, what this thread read at its previous sampled
//!   check on the same counter, so the hot path reads nothing extra), which
//!   must show no take in progress, and one read after it re-reads the word
//!   it added to with `Acquire`. They must be equal for a verdict. If a take's swap landed between the add and the re-read, the
//!   re-read synchronises with that swap, so the second epoch includes the
//!   take's start; the first cannot (it saw nothing in progress, and had it
//!   seen the take completed, the swap would have come before the add).
//!   So they differ: no verdict.

use crate::primitive::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use crate::thread::sampler::{self, Seen};
use crossbeam_utils::CachePadded;

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
pub(crate) fn lines_for(words: usize) -> usize {
    words.div_ceil(LINE_WORDS).max(1)
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

/// A tag's bits: 0 is set, 1..8 hold the cap (0: the default), and from
/// bit 8 up is the take epoch (see the module docs).
const CAP_MASK: usize = 0xfe;
const EPOCH_SHIFT: u32 = 8;

/// The low bits of an epoch count takes in progress; one more completed
/// takes one off them and adds one above them. At most 2^16 - 1 takes may
/// run at once (far beyond any real use).
const IN_PROGRESS_BITS: u32 = 16;
const IN_PROGRESS: u64 = (1 << IN_PROGRESS_BITS) - 1;
/// What ending a take adds to its epoch: one completed, one fewer running.
const END_TAKE: u64 = (1 << IN_PROGRESS_BITS) - 1;

/// Tags are odd; tables are at least 8-aligned, so their addresses are even.
#[inline]
fn is_table(p: *mut Table) -> bool {
    p.addr() & 1 == 0
}

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
}

impl Table {
    /// The shard for a thread's probe, in a table of one-line rows (its
    /// first word).
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

    /// The shard the thread with index `index` (see `thread::index`) owns
    /// in a table of one-line rows: row `index - 1`, while the table has
    /// it. Indexes are unique among live threads, so no other thread owns
    /// it; `None` for index 0 (none) and for indexes beyond the table.
    #[inline(always)]
    pub(crate) fn owned_shard(&self, index: usize) -> Option<&AtomicU64> {
        debug_assert_eq!(self.row_lines, 1);
        let i = index.wrapping_sub(1);
        if i > self.mask {
            return None;
        }
        debug_assert!(i < self.lines.len());
        // SAFETY: there are `mask + 1` rows of at least one line each, and
        // `i <= mask` was just checked.
        let line = unsafe { self.lines.get_unchecked(i) };
        Some(&line[0])
    }

    /// The row the thread with index `index` owns: row `index - 1`, while
    /// the table has it (as [`owned_shard`](Self::owned_shard), for rows of
    /// any width).
    #[inline(always)]
    pub(crate) fn owned_row(&self, index: usize) -> Option<&[Line]> {
        let i = index.wrapping_sub(1);
        if i > self.mask {
            return None;
        }
        let start = i * self.row_lines;
        debug_assert!(start + self.row_lines <= self.lines.len());
        // SAFETY: there are `mask + 1` rows of `row_lines` lines each, and
        // `i <= mask` was just checked.
        Some(unsafe { self.lines.get_unchecked(start..start + self.row_lines) })
    }

    /// The row for a thread's probe: `row_lines` lines.
    #[inline]
    pub(crate) fn row(&self, probe: u32) -> &[Line] {
        let start = (probe as usize & self.mask) * self.row_lines;
        debug_assert!(start + self.row_lines <= self.lines.len());
        // SAFETY: there are `mask + 1` rows of `row_lines` lines each, and
        // the row's index is at most `mask`.
        unsafe { self.lines.get_unchecked(start..start + self.row_lines) }
    }

    /// How many rows the table has.
    fn rows(&self) -> usize {
        self.mask + 1
    }
}

/// A value of the head, as loaded once: a tag or the newest table then.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Head(*mut Table);

/// A grow-only chain of shard rows behind one word.
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

    /// The table `head` names, if it names one.
    #[inline]
    pub(crate) fn table(&self, head: Head) -> Option<&Table> {
        if is_table(head.0) {
            // SAFETY: an even value was published by `grow` from a live Box,
            // and tables are freed only in `drop`, which has `&mut self`, so
            // the table outlives this borrow of `self`.
            Some(unsafe { &*head.0 })
        } else {
            None
        }
    }

    /// How many shards (rows) the newest table has; 0 without one.
    pub(crate) fn shards(&self) -> usize {
        self.table(self.load()).map_or(0, Table::rows)
    }

    /// The most shards this table will grow to (a power of two).
    pub(crate) fn max_shards(&self) -> usize {
        let head = self.load();
        1 << self
            .table(head)
            .map_or_else(|| tag_max_log2(head.0.addr()), |t| t.max_log2)
    }

    /// Replaces `current` (a tag or the newest table) by a table twice as
    /// large (or 2 rows) of `row_lines`-line rows, unless the cap is
    /// reached. Returns the head after. The owner passes the same
    /// `row_lines` every time.
    #[cold]
    #[inline(never)]
    pub(crate) fn grow(&self, current: Head, row_lines: usize) -> Head {
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

    /// Visits every row of the newest table and of the older ones.
    #[inline]
    pub(crate) fn for_each_row(&self, mut f: impl FnMut(&[Line])) {
        let mut head = self.load();
        while let Some(t) = self.table(head) {
            t.lines.chunks_exact(t.row_lines).for_each(&mut f);
            head = Head(t.older);
        }
    }

    /// Visits every shard (the first word of each one-line row).
    #[inline]
    pub(crate) fn for_each_shard(&self, mut f: impl FnMut(&AtomicU64)) {
        self.for_each_row(|row| f(&row[0][0]));
    }

    /// The take epoch of the words `current` covers, as a "before" reading:
    /// `None` while a take is in progress. On a table it is a fresh load,
    /// for the thread's next check on this counter (see the module docs).
    #[inline]
    pub(crate) fn epoch_before(&self, current: Head) -> Option<u64> {
        let epoch = match self.table(current) {
            // Acquire: had it seen a take completed, that take's swaps
            // come before any add after it (see the module docs).
            Some(t) => t.takes.load(Ordering::Acquire),
            // `current` itself was loaded with Acquire before the add.
            None => tag_epoch(current.0.addr()),
        };
        (epoch & IN_PROGRESS == 0).then_some(epoch)
    }

    /// The take epoch of the same words, read after the `Acquire` re-load
    /// of the word added to.
    #[inline]
    pub(crate) fn epoch_after(&self, current: Head) -> u64 {
        match self.table(current) {
            // Relaxed: the Acquire re-load before it provides the ordering.
            Some(t) => t.takes.load(Ordering::Relaxed),
            // Relaxed: as above. A table published meanwhile has another
            // epoch too: no verdict, which is right, as the base is no
            // longer written.
            None => {
                let now = self.head.load(Ordering::Relaxed);
                if is_table(now) {
                    u64::MAX
                } else {
                    tag_epoch(now.addr())
                }
            }
        }
    }

    /// Counts a take as in progress, in the newest table's epoch or the
    /// tag's; returns which, for [`end_take`](Self::end_take).
    pub(crate) fn begin_take(&self) -> Head {
        let mut head = self.load();
        loop {
            if let Some(t) = self.table(head) {
                // Relaxed: the Release swaps that follow publish it.
                t.takes.fetch_add(1, Ordering::Relaxed);
                return head;
            }
            let bumped = head.0.map_addr(|a| a.wrapping_add(1 << EPOCH_SHIFT));
            // Relaxed on success: the Release swaps that follow publish it.
            // Acquire on failure: the value may be a new table we then use.
            match self.head.compare_exchange_weak(
                head.0,
                bumped,
                Ordering::Relaxed,
                Ordering::Acquire,
            ) {
                Ok(_) => return Head(bumped),
                Err(now) => head = Head(now),
            }
        }
    }

    /// Counts the take begun on `started_in` as completed.
    pub(crate) fn end_take(&self, started_in: Head) {
        if let Some(t) = self.table(started_in) {
            // Release: an add that sees it completed also sees its swaps.
            t.takes.fetch_add(END_TAKE, Ordering::Release);
            return;
        }
        // Relaxed: only the tag's bits are used; a table ends the loop.
        let mut now = self.head.load(Ordering::Relaxed);
        // A table published meanwhile retires the tag: nobody reads its
        // epoch any more.
        while !is_table(now) {
            // Release: as above. Relaxed on failure: we only retry. The add
            // wraps off the top of the word, which only shortens the count
            // of completed takes.
            let ended = now.map_addr(|a| a.wrapping_add((END_TAKE as usize) << EPOCH_SHIFT));
            match self
                .head
                .compare_exchange_weak(now, ended, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(h) => now = h,
            }
        }
    }
}

/// Contention checks, written once for every owner of a table. `key` is
/// the owner's address (the sampler's strikes are kept per owner);
/// `row_lines` is what the owner passes to [`ShardTable::grow`].
impl ShardTable {
    /// A sampled add of `n` that returned `prev` on a word outside the
    /// table (the owner's base), whose quick re-load showed another value
    /// or which is picked for a watch (`sampler::watched`): interference
    /// grows the first table at once (there is nowhere to move to). `head`
    /// is the tag loaded before the add. Returns whether it saw
    /// interference.
    #[cold]
    #[inline(never)]
    pub(crate) fn check_base(
        &self,
        head: Head,
        at: &AtomicU64,
        prev: u64,
        n: u64,
        row_lines: usize,
    ) -> bool {
        let before = self.epoch_before(head);
        // Acquire loads inside: if one reads what a take's swap (Release)
        // left, the take's start shows in `epoch_after` (module docs).
        let now = sampler::watch(at, prev, n);
        if now == prev.wrapping_add(n) {
            return false;
        }
        let after = self.epoch_after(head);
        if sampler::verdict(prev, n, now, before, after) == Seen::Interference {
            self.grow(head, row_lines);
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
    /// the same owner as the "before" reading, so the hot path reads no
    /// epoch. On interference the thread moves at once; interference again,
    /// with no quiet check between, doubles the table.
    #[cold]
    #[inline(never)]
    pub(crate) fn check_shard(
        &self,
        key: usize,
        head: Head,
        at: &AtomicU64,
        prev: u64,
        n: u64,
        row_lines: usize,
    ) {
        // Acquire loads inside: as in `check_base`.
        let now = sampler::watch(at, prev, n);
        let before = sampler::swap_epoch(key, head.0.addr(), self.epoch_before(head));
        if now == prev.wrapping_add(n) {
            sampler::quiet(key);
            return;
        }
        let after = self.epoch_after(head);
        if sampler::verdict(prev, n, now, before, after) == Seen::Interference
            && sampler::collided(key)
        {
            self.grow(head, row_lines);
        }
    }

    /// Another writer changed a word between this thread's read of it and
    /// its compare-exchange (a failed exchange): interference unless a take
    /// ran meanwhile. `before` is [`epoch_before`](Self::epoch_before) read
    /// before that read of the word; the failed exchange must have read the
    /// word with `Acquire`. On the base (`on_base`) this grows the first
    /// table; on a shard it moves the thread, and persisting, grows.
    #[cold]
    #[inline(never)]
    pub(crate) fn exchange_lost(
        &self,
        key: usize,
        head: Head,
        before: Option<u64>,
        on_base: bool,
        row_lines: usize,
    ) {
        let after = self.epoch_after(head);
        if before != Some(after) {
            return;
        }
        if on_base || sampler::collided(key) {
            self.grow(head, row_lines);
        }
    }
}

impl Drop for ShardTable {
    fn drop(&mut self) {
        // Relaxed: `&mut self` means every other access already
        // happened-before this one.
        let mut t = self.head.load(Ordering::Relaxed);
        while is_table(t) {
            // SAFETY: every table in the chain came from Box::into_raw in
            // `grow`, is owned by this chain alone and is freed once, here.
            let table = unsafe { Box::from_raw(t) };
            t = table.older;
        }
    }
}
