//! The per-thread shard index every sharded type uses.
//!
//! Each thread gets a probe value once (from a process-wide sequence, so the
//! first threads spread over distinct shards), kept in a `const`-initialised
//! thread-local: reading it is a bare TLS load, never a hash of the thread id.
//! A thread that keeps colliding with others moves by rehashing its probe
//! (xorshift, which never yields zero from a non-zero input).
//!
//! The same thread-local also carries a tick used to sample contention: one
//! operation in [`CHECK_PERIOD`] takes the slower, contention-detecting path.

use crate::sync::{const_thread_local, next_sequence};
use std::cell::Cell;

/// One operation in this many checks for contention (a power of two).
///
/// Under loom every operation checks, so the models reach the growth paths.
#[cfg(not(loom))]
pub(crate) const CHECK_PERIOD: u32 = 64;
#[cfg(loom)]
pub(crate) const CHECK_PERIOD: u32 = 1;

struct State {
    /// 0 until first use; never 0 afterwards.
    probe: Cell<u32>,
    tick: Cell<u32>,
    /// Collisions seen since the last uncontended check.
    strikes: Cell<u32>,
}

const_thread_local! {
    static STATE: State = State {
        probe: Cell::new(0),
        tick: Cell::new(0),
        strikes: Cell::new(0),
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
            check: tick & (CHECK_PERIOD - 1) == 0,
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
    s.tick.set(1);
    Sample { probe, check: true }
}

/// Records that the calling thread collided; moves it to another probe.
///
/// Returns `true` when this is a repeated collision, meaning moving did not
/// help and the caller should grow its table if it can.
#[cold]
pub(crate) fn collided() -> bool {
    STATE.with(|s| {
        let mut p = s.probe.get();
        p ^= p << 13;
        p ^= p >> 17;
        p ^= p << 5;
        s.probe.set(p);
        let strikes = s.strikes.get() + 1;
        if strikes >= 2 {
            s.strikes.set(0);
            true
        } else {
            s.strikes.set(strikes);
            false
        }
    })
}

/// Records that a sampled check found no contention.
#[inline]
pub(crate) fn uncontended() {
    STATE.with(|s| s.strikes.set(0));
}

/// The calling thread's probe without ticking the sampler.
#[inline]
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
