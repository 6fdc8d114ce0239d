//! The contention signal, read from the value an add returns.
//!
//! A locked add cannot say whether its cache line was contended, and a load
//! and compare-exchange almost never loses the race even when it is (the
//! load fetches the line and the exchange follows within cycles). So a
//! counter watches values instead:
//!
//! * **Which adds are sampled.** [`sampled`] looks at the value the add
//!   returned and picks one add in [`SAMPLE_ONE_IN`], whatever `n` is (see
//!   there). It touches no thread-local: an unsampled `inc` is the
//!   `fetch_add`, a test and a branch.
//! * **What a sampled add learns.** It re-loads the word at once
//!   ([`verdict`]): anything but the value it left means another thread
//!   wrote the same word within those few nanoseconds, so the line is being
//!   fought over. Some cores almost never lose the line in so short a
//!   window, so one add in [`WATCH_ONE_IN`] keeps looking a few
//!   hundred nanoseconds ([`watch`]). A thread that adds to a row another
//!   thread owns (and never samples) watches the whole line instead, more
//!   often ([`watch_line`]). A write that is not an add (a counter's
//!   `take`) shows in the word's take epoch and gives no verdict.
//! * **What the thread remembers.** Only on the cold path: how many times in
//!   a row one counter showed interference ([`collided`], keyed by the
//!   address of the counter's shard table), so that moving to another shard
//!   is tried before a table doubles.
//!
//! Limits: threads that take strict turns, never overlapping, are never
//! seen by the re-load (they would gain nothing from shards); sharing at a
//! low rate is seen late, after hundreds or thousands of adds; and strikes
//! more than a millisecond apart never add up to a growth. (A
//! `CounterSet`'s row mark sees turn-taking threads too, when the turns
//! are shorter than that: their lines do move between cores every turn.)

use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use std::cell::Cell;

/// One add in about this many is sampled (a power of two).
#[cfg(not(shardcount_loom))]
pub(crate) const SAMPLE_ONE_IN: u64 = 128;
/// Under loom every add is sampled, so the short models reach growth.
#[cfg(shardcount_loom)]
pub(crate) const SAMPLE_ONE_IN: u64 = 1;

/// Interference on one counter in this many samples in a row (without a
/// quiet one between, each within [`STRIKES_WITHIN`] of the last) means
/// moving did not help: grow. One under loom, whose models are short.
#[cfg(not(shardcount_loom))]
const STRIKES_TO_GROW: u32 = 2;
#[cfg(shardcount_loom)]
const STRIKES_TO_GROW: u32 = 1;

/// Whether the add of `n` that returned `prev` is sampled.
///
/// One add in [`SAMPLE_ONE_IN`]: the one whose `prev`, counted in steps of
/// `n`'s lowest set bit, is a multiple of it. Shifting out `n`'s trailing
/// zeros first keeps every stride sampled (a plain `prev % 64 == 0` would
/// sample every add of 64 bytes, or none of them); for a constant `n` the
/// shift is folded away and the test is one instruction.
#[inline(always)]
// Under loom the mask is 0: every add is sampled, on purpose.
#[cfg_attr(shardcount_loom, allow(clippy::bad_bit_mask))]
pub(crate) fn sampled(prev: u64, n: u64) -> bool {
    one_in(prev, n, SAMPLE_ONE_IN)
}

/// Whether the add of `n` that returned `prev` is the one in `k` (a power
/// of two) that [`sampled`] describes, counting in steps of `n`'s lowest
/// set bit.
#[inline(always)]
fn one_in(prev: u64, n: u64, k: u64) -> bool {
    // `wrapping_shr`: for n == 0 the shift of 64 wraps to 0 (an add of 0
    // changes nothing, so whether it samples does not matter).
    prev.wrapping_shr(n.trailing_zeros()) & (k - 1) == 0
}

/// One add in this many (a power of two, counted as [`sampled`] counts, so
/// one sampled add in 128) also *watches* its word for a short while when
/// the quick re-load showed nothing (see [`watch`]).
#[cfg(not(shardcount_loom))]
const WATCH_ONE_IN: u64 = 16384;

/// How many pauses a watch lasts: a pause (`std::hint::spin_loop`) took
/// about 25 ns where it was measured (it varies by CPU), so a watch
/// lasts about 200 ns and, one add in 16,384, costs about 0.01 ns per add.
#[cfg(not(shardcount_loom))]
const WATCH_SPINS: u32 = 8;

/// Re-loads `at` after a sampled add of `n` that returned `prev`, and
/// returns what it found: the value the add left when nobody else wrote
/// the word, else the first other value seen.
///
/// The quick re-load alone misses most contention on some cores: right
/// after its locked add a core owns the line, and its load hits before
/// another core's pending write can take the line away (one CPU measured
/// went millions of adds between hits while two threads hammered one
/// word). So one add in [`WATCH_ONE_IN`] keeps re-loading through
/// [`WATCH_SPINS`] pauses, long enough for any thread adding in a loop to
/// show. Under loom there is no watch: a model's interleavings already
/// place other threads' writes between the add and the re-load.
#[inline]
pub(crate) fn watch(at: &AtomicU64, prev: u64, n: u64) -> u64 {
    let left = prev.wrapping_add(n);
    // Acquire, here and in the watch: pairs with a take's Release swap
    // (`Take::swap`, `TakeRow::take`), so a value it left makes the take's
    // start visible to the epoch read after (`shard`'s "Orderings").
    let now = at.load(Ordering::Acquire);
    if now == left && watched(prev, n) {
        #[cfg(not(shardcount_loom))]
        for _ in 0..WATCH_SPINS {
            crate::primitive::hint::spin_loop();
            let now = at.load(Ordering::Acquire);
            if now != left {
                return now;
            }
        }
    }
    now
}

/// One add in this many by a thread beyond a set's table watches its line
/// ([`watch_line`], one sample in 8): strikes must come within
/// [`STRIKES_WITHIN`] of each other, and a thread that false-shares a line
/// with a busy owner may take 100 ns an add, so one watch in 16,384 adds
/// would come too late to ever make two. Only such threads pay it: about
/// 200 ns per 1,024 adds.
#[cfg(not(shardcount_loom))]
const LINE_WATCH_ONE_IN: u64 = 1024;

/// Whether a sampled add of `n` that returned `prev`, by a thread beyond a
/// set's table, watches its line ([`LINE_WATCH_ONE_IN`]).
#[inline(always)]
pub(crate) fn line_watched(prev: u64, n: u64) -> bool {
    #[cfg(not(shardcount_loom))]
    return one_in(prev, n, LINE_WATCH_ONE_IN);
    #[cfg(shardcount_loom)]
    return {
        let _ = (prev, n);
        false
    };
}

/// Watches a whole line as [`watch`] watches a word: whether any of its
/// words changed through [`WATCH_SPINS`] pauses. For a thread that may
/// share a line with an owner who never samples (`CounterSet`'s owned
/// rows): only this shows the owner writing other words of the line. Under
/// loom, one re-read.
#[cold]
pub(crate) fn watch_line(line: &[AtomicU64]) -> bool {
    // Acquire: pairs with `TakeRow::take`'s Release swap of a shared
    // word, so that a swap read here shows in the epoch read after. A
    // wrapping sum: two changes that cancel exactly within a few hundred
    // nanoseconds are not a concern.
    let read = || {
        line.iter()
            .fold(0u64, |s, w| s.wrapping_add(w.load(Ordering::Acquire)))
    };
    let first = read();
    #[cfg(not(shardcount_loom))]
    for _ in 0..WATCH_SPINS {
        crate::primitive::hint::spin_loop();
        if read() != first {
            return true;
        }
    }
    #[cfg(shardcount_loom)]
    if read() != first {
        return true;
    }
    false
}

/// Whether a sampled add of `n` that returned `prev`, whose quick re-load
/// found the word unchanged, still calls the cold check: it is one picked
/// for a [`watch`].
#[inline(always)]
pub(crate) fn watched(prev: u64, n: u64) -> bool {
    #[cfg(not(shardcount_loom))]
    return one_in(prev, n, WATCH_ONE_IN);
    #[cfg(shardcount_loom)]
    return {
        let _ = (prev, n);
        false
    };
}

/// What a sampled add learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// Nobody else wrote the word between the add and the re-load.
    Quiet,
    /// Another adder wrote it in between.
    Interference,
    /// A take rewrote it, or one was under way: no verdict.
    Unknown,
}

/// What a sampled add read, for its [`verdict`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Readings {
    /// What the add returned.
    pub(crate) prev: u64,
    /// What it added.
    pub(crate) n: u64,
    /// The word's value re-loaded (`Acquire`) right after.
    pub(crate) now: u64,
    /// The word's take epoch read before the add (`None`: a take was under
    /// way).
    pub(crate) before: Option<u64>,
    /// The word's take epoch read after the re-load.
    pub(crate) after: u64,
}

/// The verdict of a sampled add, from what it read.
#[inline]
pub(crate) fn verdict(r: Readings) -> Seen {
    if r.now == r.prev.wrapping_add(r.n) {
        // Only our add shows: quiet, whatever else happened around it.
        Seen::Quiet
    } else if r.before != Some(r.after) {
        Seen::Unknown
    } else {
        Seen::Interference
    }
}

struct Strikes {
    /// The counter (its shard table's address) the strikes were seen on;
    /// 0: none.
    key: Cell<usize>,
    /// Interference seen on it in a row.
    count: Cell<u32>,
    /// When the last of them was seen.
    #[cfg(not(shardcount_loom))]
    last: Cell<Option<std::time::Instant>>,
}

crate::primitive::const_thread_local! {
    static STRIKES: Strikes = Strikes {
        key: Cell::new(0),
        count: Cell::new(0),
        #[cfg(not(shardcount_loom))]
        last: Cell::new(None),
    };
}

/// Strikes further apart than this do not add up: interference this rare
/// costs less than the rows growing would, and brief, separate bouts of
/// contention (or a slow writer next to a busy one) must not double a
/// table for good. The clock is read only when a strike is seen.
#[cfg(not(shardcount_loom))]
const STRIKES_WITHIN: std::time::Duration = std::time::Duration::from_millis(1);

/// How many counters' epochs a thread remembers, direct-mapped by address.
const EPOCH_WAYS: usize = 4;

/// The take epoch each of a few counters' newest tables showed at the
/// thread's last sampled check on it: `(key, table, epoch)`, epoch `None`
/// if a take was in progress then.
struct Epochs {
    ways: [Cell<(usize, usize, Option<u64>)>; EPOCH_WAYS],
}

crate::primitive::const_thread_local! {
    static EPOCHS: Epochs = Epochs {
        ways: [const { Cell::new((0, 0, None)) }; EPOCH_WAYS],
    };
}

/// Remembers `now` as the epoch of the table at address `table` of the
/// counter keyed `key`, and returns the one remembered before (from this
/// thread's previous sampled check on them), if any. A check reads the
/// epoch after its re-load; the one it compares with must have been read
/// before its add, and the previous check's was. Each table counts its own
/// takes, so an epoch of an older table of the same counter is no reading
/// at all (two tables' counts can be equal): `None`.
#[cold]
pub(crate) fn swap_epoch(key: usize, table: usize, now: Option<u64>) -> Option<u64> {
    EPOCHS
        .try_with(|e| {
            let way = &e.ways[(key >> 4) % EPOCH_WAYS];
            let (k, t, before) = way.replace((key, table, now));
            if (k, t) == (key, table) {
                before
            } else {
                None
            }
        })
        .unwrap_or(None)
}

/// Records interference on the counter keyed `key` and moves the
/// calling thread to another probe.
///
/// Returns `true` when that counter showed interference in
/// [`STRIKES_TO_GROW`] samples in a row, each within [`STRIKES_WITHIN`] of
/// the one before, so the caller should grow its table if it can.
#[cold]
pub(crate) fn collided(key: usize) -> bool {
    super::probe::rehash();
    STRIKES.with(|s| {
        #[cfg(not(shardcount_loom))]
        let recent = {
            let now = std::time::Instant::now();
            s.last
                .replace(Some(now))
                .is_some_and(|t| now.duration_since(t) <= STRIKES_WITHIN)
        };
        // Under loom one strike grows (a model is a handful of adds) and
        // there is no clock to read.
        #[cfg(shardcount_loom)]
        let recent = true;
        if s.key.get() != key || !recent {
            s.key.set(key);
            s.count.set(0);
        }
        let strikes = s.count.get() + 1;
        if strikes >= STRIKES_TO_GROW {
            s.count.set(0);
            true
        } else {
            s.count.set(strikes);
            false
        }
    })
}

/// Records a quiet sample on the counter keyed `key`: its strikes start
/// over.
#[cold]
pub(crate) fn quiet(key: usize) {
    // Ignoring the error: during thread teardown there is nothing to reset.
    let _ = STRIKES.try_with(|s| {
        if s.key.get() == key {
            s.count.set(0);
        }
    });
}

/// Drops the calling thread's strikes on `key`: the counter (its shard
/// table) keyed `key` is going away, and one created later at the same
/// address must not inherit them. Called once, where the table drops.
pub(crate) fn forget(key: usize) {
    quiet(key);
}
