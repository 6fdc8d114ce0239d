//! The contention signal.
//!
//! A locked add cannot say whether its cache line was contended, and a load
//! and compare-exchange almost never loses the race even when it is (the load
//! fetches the line and the exchange follows within cycles). So sampling
//! watches the value instead. About once every [`CHECK_PERIOD`] operations a
//! thread *notes* the location it added to and the value its add left there.
//! Its next add to that same location within the following
//! [`CHECK_WINDOW`] - 1 operations *resolves* the note: if the value found is
//! not the one left, another thread wrote the location in between. The
//! window (rather than just the next operation) lets a thread that updates a
//! few counters in rotation still resolve its notes. The gap is a few
//! operations, so a writer landing in it means the line is being fought over.
//!
//! Writes that are not adds (a counter's `take`) announce themselves through
//! an [`Epoch`], so they are never mistaken for another adder.

use std::cell::Cell;

/// One operation in this many notes a location (a power of two).
///
/// Under loom every other operation notes and the next resolves, so the
/// models reach the growth paths.
#[cfg(not(shardcount_loom))]
pub(crate) const CHECK_PERIOD: u32 = 64;
#[cfg(shardcount_loom)]
pub(crate) const CHECK_PERIOD: u32 = 2;

/// How many operations, counting the noting one, may resolve a note.
#[cfg(not(shardcount_loom))]
pub(crate) const CHECK_WINDOW: u32 = 8;
#[cfg(shardcount_loom)]
pub(crate) const CHECK_WINDOW: u32 = 2;

/// Interference on one counter in this many resolved checks in a row
/// (without a quiet one between) means moving did not help: grow. One under
/// loom, whose models are short.
#[cfg(not(shardcount_loom))]
const STRIKES_TO_GROW: u32 = 2;
#[cfg(shardcount_loom)]
const STRIKES_TO_GROW: u32 = 1;

/// Up to this many ticks are skipped at random after each window. None
/// under loom, to keep its models deterministic.
#[cfg(not(shardcount_loom))]
const JITTER_MASK: u32 = 15;
#[cfg(shardcount_loom)]
const JITTER_MASK: u32 = 0;

struct State {
    tick: Cell<u32>,
    /// Interference seen in a row on the counter `strike_key`.
    strikes: Cell<u32>,
    /// The counter (its address) the strikes were seen on.
    strike_key: Cell<usize>,
    /// The noted location's address (0: no note open)...
    noted_at: Cell<usize>,
    /// ...and the value the noting add left there...
    noted_value: Cell<u64>,
    /// ...and the location's take epoch at that moment (see [`checked`]).
    noted_epoch: Cell<u64>,
    /// State of the jitter sequence (0: not seeded).
    jitter: Cell<u32>,
}

crate::primitive::const_thread_local! {
    static STATE: State = State {
        tick: Cell::new(0),
        strikes: Cell::new(0),
        strike_key: Cell::new(0),
        noted_at: Cell::new(0),
        noted_value: Cell::new(0),
        noted_epoch: Cell::new(0),
        jitter: Cell::new(0),
    };
}

/// The calling thread's probe, and whether this operation is checked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    /// The thread's shard probe; mask it with the table size.
    pub(crate) probe: u32,
    /// Whether this operation falls in the check window: the caller then adds
    /// with `fetch_add` and passes what it found to [`checked`].
    pub(crate) check: bool,
}

/// Advances the calling thread's tick and says whether this operation checks.
#[inline]
// Under loom the window is the whole period, so the compare is always true.
#[cfg_attr(shardcount_loom, allow(clippy::bad_bit_mask))]
pub(crate) fn sample() -> Sample {
    let probe = super::probe();
    STATE.with(|s| {
        let tick = s.tick.get();
        s.tick.set(tick.wrapping_add(1));
        Sample {
            probe,
            check: tick & (CHECK_PERIOD - 1) < CHECK_WINDOW,
        }
    })
}

/// What a checked operation learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// It opened a note, or its location was not the noted one.
    Nothing,
    /// It closed the note: nobody else wrote the location in between.
    Quiet,
    /// It closed the note: another thread wrote the location in between.
    Interference,
}

/// A location's take epoch, as a checked operation reads it: writes that are
/// not adds (a counter's `take`) announce themselves by changing it, so a
/// value they rewrote is not mistaken for another adder's.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Epoch {
    /// Read before the add: `None` while a take is in progress (then the
    /// operation notes nothing).
    pub(crate) before: Option<u64>,
    /// Read after the add (which must be an `Acquire` RMW).
    pub(crate) after: u64,
}

/// For a checked operation on the counter at address `key`, whose add of `n`
/// at address `at` found `prev`.
///
/// A note records `epoch.before`; a resolution whose `epoch.after` differs
/// from it is inconclusive (a take ran in between), never interference.
#[cold]
pub(crate) fn checked(key: usize, at: usize, prev: u64, n: u64, epoch: Epoch) -> Seen {
    STATE.with(|s| {
        // `sample` already advanced the tick past this operation.
        let op = s.tick.get().wrapping_sub(1);
        let phase = op & (CHECK_PERIOD - 1);
        if phase == 0 {
            if let Some(e) = epoch.before {
                s.noted_at.set(at);
                s.noted_value.set(prev.wrapping_add(n));
                s.noted_epoch.set(e);
            }
            return Seen::Nothing;
        }
        let seen = if s.noted_at.get() != at {
            Seen::Nothing
        } else if s.noted_epoch.get() != epoch.after {
            // A take rewrote the word in between: no verdict.
            Seen::Nothing
        } else if s.noted_value.get() == prev {
            if s.strike_key.get() == key {
                s.strikes.set(0);
            }
            Seen::Quiet
        } else {
            Seen::Interference
        };
        if seen != Seen::Nothing || phase == CHECK_WINDOW - 1 {
            // The window is done. Skip the rest of it, and a few ticks more at
            // random: with a fixed period, a thread bumping k counters in
            // rotation (k dividing the period) would note the same one forever.
            s.noted_at.set(0);
            let jitter = next_jitter(s);
            s.tick
                .set((op & !(CHECK_PERIOD - 1)).wrapping_add(CHECK_WINDOW + jitter));
        }
        seen
    })
}

/// Records interference on the counter at address `key` and moves the
/// calling thread to another probe.
///
/// Returns `true` when that counter showed interference in
/// [`STRIKES_TO_GROW`] resolved checks in a row, so the caller should grow
/// its table if it can. Keyed by counter, so a thread that rotates over
/// several counters keeps their strikes apart.
#[cold]
pub(crate) fn collided(key: usize) -> bool {
    super::rehash();
    STATE.with(|s| {
        if s.strike_key.get() != key {
            s.strike_key.set(key);
            s.strikes.set(0);
        }
        let strikes = s.strikes.get() + 1;
        if strikes >= STRIKES_TO_GROW {
            s.strikes.set(0);
            true
        } else {
            s.strikes.set(strikes);
            false
        }
    })
}

/// Drops the calling thread's open note and its strikes on `key`: the
/// counter at `key` is going away, and a counter created later at the same
/// address must not inherit them.
pub(crate) fn forget(key: usize) {
    // Ignoring the error: during thread teardown the state may be gone, and
    // then there is nothing to forget.
    let _ = STATE.try_with(|s| {
        s.noted_at.set(0);
        if s.strike_key.get() == key {
            s.strike_key.set(0);
            s.strikes.set(0);
        }
    });
}

/// A few bits of a per-thread xorshift sequence, seeded by the probe.
fn next_jitter(s: &State) -> u32 {
    let mut x = s.jitter.get();
    if x == 0 {
        x = super::probe() | 1;
    }
    x = super::xorshift(x);
    s.jitter.set(x);
    x & JITTER_MASK
}
