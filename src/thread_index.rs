//! The per-thread shard index every sharded type uses.
//!
//! Each thread gets a probe value once (from a process-wide sequence, so the
//! first threads spread over distinct shards), kept in a `const`-initialised
//! thread-local: reading it is a bare TLS load, never a hash of the thread id.
//! A thread that keeps colliding with others moves by rehashing its probe
//! (xorshift, which never yields zero from a non-zero input).
//!
//! The same thread-local drives contention sampling. A locked add cannot
//! say whether its cache line was contended, and a load + compare-exchange
//! almost never loses the race even when it is (the load fetches the line and
//! the exchange follows within cycles). So sampling watches the value instead:
//! two consecutive operations of a thread, one in [`CHECK_PERIOD`], take the
//! checked path. The first notes where its add left the location; the second
//! sees whether anything else wrote there in between. A thread in a tight loop
//! leaves only one add's gap, so another writer landing in it means the line is
//! being fought over (and even at low rates, that every such add pays a
//! cross-core transfer).

use crate::sync::{const_thread_local, next_sequence};
use std::cell::Cell;

/// Two consecutive operations in this many take the checked path (a power
/// of two, at least 2).
///
/// Under loom every operation is checked, so the models reach the growth
/// paths.
#[cfg(not(loom))]
pub(crate) const CHECK_PERIOD: u32 = 64;
#[cfg(loom)]
pub(crate) const CHECK_PERIOD: u32 = 2;

/// Interference seen this many checks in a row (without a quiet one between)
/// means moving did not help: grow. One under loom, whose models are short.
#[cfg(not(loom))]
const STRIKES_TO_GROW: u32 = 2;
#[cfg(loom)]
const STRIKES_TO_GROW: u32 = 1;

struct State {
    /// 0 until first use; never 0 afterwards.
    probe: Cell<u32>,
    tick: Cell<u32>,
    /// Interference seen since the last quiet check.
    strikes: Cell<u32>,
    /// Where the first checked op of a pair added (0: nowhere)...
    pending_at: Cell<usize>,
    /// ...and the value it left there.
    pending_value: Cell<u64>,
}

const_thread_local! {
    static STATE: State = State {
        probe: Cell::new(0),
        tick: Cell::new(0),
        strikes: Cell::new(0),
        pending_at: Cell::new(0),
        pending_value: Cell::new(0),
    };
}

/// What the calling thread should do for this operation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sample {
    /// The thread's shard probe; mask it with the table size.
    pub(crate) probe: u32,
    /// Whether this operation should check for contention.
    pub(crate) check: bool,
}

/// The calling thread's probe, and whether this operation is a sampled check.
#[inline]
pub(crate) fn sample() -> Sample {
    STATE.with(|s| {
        let probe = s.probe.get();
        if probe == 0 {
            return first_use(s);
        }
        let tick = s.tick.get();
        s.tick.set(tick.wrapping_add(1));
        Sample {
            probe,
            check: tick & (CHECK_PERIOD - 1) < 2,
        }
    })
}

#[cold]
fn first_use(s: &State) -> Sample {
    // Odd multiplier keeps consecutive sequence numbers apart in the low bits
    // used for masking, while spreading them in the high bits too.
    let probe = next_sequence().wrapping_mul(0x9E37_79B9);
    let probe = if probe == 0 { 1 } else { probe };
    s.probe.set(probe);
    // This call is tick 0: the first of a checked pair.
    s.tick.set(1);
    Sample { probe, check: true }
}

/// What a checked operation learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    /// First of a pair: noted, nothing to conclude yet.
    Noted,
    /// Nobody else wrote the location since this thread's previous add.
    Alone,
    /// Another thread wrote it in between.
    Shared,
}

/// For a checked operation that added `n` to the location at address `at`,
/// finding `prev` there.
#[cold]
pub(crate) fn observe(at: usize, prev: u64, n: u64) -> Seen {
    STATE.with(|s| {
        // `sample` already advanced the tick past this operation.
        let first = s.tick.get().wrapping_sub(1) & 1 == 0;
        if first {
            s.pending_at.set(at);
            s.pending_value.set(prev.wrapping_add(n));
            return Seen::Noted;
        }
        let pending = s.pending_at.replace(0);
        if pending != at {
            // The pair spanned two locations (another counter, or a move).
            Seen::Noted
        } else if s.pending_value.get() == prev {
            s.strikes.set(0);
            Seen::Alone
        } else {
            Seen::Shared
        }
    })
}

/// Records interference: moves the calling thread to another probe.
///
/// Returns `true` when interference persisted through
/// [`STRIKES_TO_GROW`] checks in a row, so the caller should grow its table if
/// it can.
#[cold]
pub(crate) fn collided() -> bool {
    STATE.with(|s| {
        let mut p = s.probe.get();
        p ^= p << 13;
        p ^= p >> 17;
        p ^= p << 5;
        s.probe.set(p);
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

/// The calling thread's probe without ticking the sampler.
#[inline]
#[allow(dead_code)] // used by the types that follow Counter
pub(crate) fn probe() -> u32 {
    STATE.with(|s| {
        let probe = s.probe.get();
        if probe == 0 {
            first_use(s).probe
        } else {
            probe
        }
    })
}
