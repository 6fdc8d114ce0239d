//! Everything per-thread, written once: each thread's identity (its shard
//! probe), the contention sampler, and the per-thread slot registry.
//!
//! A thread gets a probe once, from a process-wide sequence so the first
//! threads spread over distinct shards, kept in a `const`-initialised
//! thread-local: reading it is a bare TLS load, never a hash of the thread
//! id. A thread that keeps colliding with others moves by rehashing its probe
//! (xorshift, which never yields zero from a non-zero input).

pub(crate) mod sampler;

use crate::primitive::sync::atomic::{AtomicU32, Ordering};
use std::cell::Cell;

/// The most shards any sharded type accepts (a power of two): beyond this a
/// sum's walk over the shards costs more than contention could.
pub(crate) const MAX_SHARDS: usize = 1 << 16;

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

/// Moves the calling thread to another probe.
#[cold]
pub(crate) fn rehash() {
    PROBE.with(|p| p.set(xorshift(p.get().max(1))));
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

/// The default number of shards a sharded type may grow to: the next power
/// of two at or above `available_parallelism()`, and at least 2. Read once
/// per process, when first needed.
///
/// At least 2: `available_parallelism` follows the *calling thread's*
/// affinity mask, so on a thread pinned to one core it says 1, although
/// contention, which is what makes a counter grow, shows that threads do run
/// side by side. Read once: it costs syscalls and file reads.
pub(crate) fn default_max_shards() -> usize {
    static CACHED: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CACHED.get_or_init(|| {
        crate::primitive::thread::available_parallelism()
            .max(2)
            .next_power_of_two()
            .min(MAX_SHARDS)
    })
}
