//! Each thread's identity: its shard probe, from a process-wide sequence,
//! moved by rehashing when it keeps colliding (see the `thread` module
//! docs), and its token.

use crate::primitive::sync::atomic::{AtomicU32, Ordering};
use std::cell::Cell;

crate::primitive::const_thread_local! {
    /// 0 until first use; never 0 afterwards.
    static PROBE: Cell<u32> = Cell::new(0);
}

/// The calling thread's probe: mask it with a table's size.
#[inline]
pub(crate) fn probe() -> u32 {
    PROBE.with(|p| {
        let probe = p.get();
        if probe == 0 {
            first_probe(p)
        } else {
            probe
        }
    })
}

#[cold]
fn first_probe(p: &Cell<u32>) -> u32 {
    // An odd multiplier keeps consecutive sequence numbers apart in the low
    // bits used for masking (their parity differs), and spreads the high bits.
    let probe = next_sequence().wrapping_mul(0x9E37_79B9);
    let probe = if probe == 0 { 1 } else { probe };
    p.set(probe);
    probe
}

/// The calling thread's probe as it is: 0 until the thread first
/// collides (then [`rehash`] gives it one from the sequence). No first-use
/// test, for a hot path that can start every thread on shard 0.
#[inline(always)]
pub(crate) fn probe_or_zero() -> u32 {
    PROBE.with(Cell::get)
}

/// A non-zero word naming the calling thread among live threads (the
/// address of its probe cell): cheap, no first-use test. A thread that has
/// exited may pass its token to a later one.
#[inline]
pub(crate) fn token() -> usize {
    #[cfg(shardcount_loom)]
    return crate::primitive::thread::loom_token();
    #[cfg(not(shardcount_loom))]
    PROBE.with(|p| std::ptr::from_ref(p).addr())
}

/// Moves the calling thread to another probe (its first, if it had none).
#[cold]
pub(crate) fn rehash() {
    PROBE.with(|p| {
        let probe = p.get();
        if probe == 0 {
            first_probe(p);
        } else {
            p.set(xorshift(probe));
        }
    });
}

/// One step of a 32-bit xorshift: never 0 from a non-zero input.
pub(crate) fn xorshift(mut x: u32) -> u32 {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    x
}

/// A process-wide sequence number, distinct for every call (until it wraps).
fn next_sequence() -> u32 {
    crate::primitive::global! {
        static NEXT: AtomicU32 = AtomicU32::new(1);
    }
    // Relaxed: only uniqueness matters; nothing is published through it.
    NEXT.fetch_add(1, Ordering::Relaxed)
}
