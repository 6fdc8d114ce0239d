//! Grace periods for the shard tables' slow paths and reads: a merge
//! frees a retired table only after every thread that may have loaded its
//! address in a *pinned* section has left that section.
//!
//! Owners' hot adds are not pinned (they would pay a locked instruction
//! per add); the owner ids' revocation covers them (`owner.rs`). Pinned
//! are the reads (sums, takes, snapshots), and adds by threads without an
//! owner id (from thread-local destructors, after the lease is gone).
//!
//! # Protocol
//!
//! Sleepable read-copy-update with two phases: a pinned section adds one
//! to `READERS[p][stripe]`, where `p` is the phase it read, then issues a
//! `SeqCst` fence, then loads heads; leaving, it subtracts one (`Release`).
//! A grace period ([`wait`]), run after the table was unlinked, issues a
//! `SeqCst` fence, then waits for every counter of both phases to read 0
//! at some moment (`Acquire`), flipping the phase between the two so that
//! new sections go to the phase not being waited on.
//!
//! Why that suffices: take a pinned section S and the grace period G. If
//! S's fence comes before G's in the fences' total order, G's loads see
//! S's increment (or later values), and a later 0 on that counter means
//! S's decrement came first: everything S did happens-before G returns.
//! Otherwise G's fence comes first, so S's loads of the head, after its
//! fence, see the unlink that came before G's fence: S never reaches the
//! table. The phases only keep G from waiting for ever on a stream of new
//! sections.

use crate::primitive::hint::spin_loop;
use crate::primitive::sync::atomic::{fence, AtomicUsize, Ordering};
use crate::primitive::sync::{lock, Mutex};
use crossbeam_utils::CachePadded;

crate::primitive::global! {
    /// One grace period at a time: two waits flipping the phase together
    /// could each flip it twice and never wait on the other phase.
    static WAITS: Mutex<()> = Mutex::new(());
}

/// Counters per phase (a power of two): threads spread over them so that
/// pinned reads on different threads do not share a line.
#[cfg(not(shardcount_loom))]
const STRIPES: usize = 16;
/// One per phase keeps the models' state space small.
#[cfg(shardcount_loom)]
const STRIPES: usize = 1;

/// Pinned sections per phase and stripe, and the phase.
struct Readers {
    phase: AtomicUsize,
    count: [[CachePadded<AtomicUsize>; STRIPES]; 2],
}

// A plain static on std: a pin reads no lazy-initialisation state.
#[cfg(not(shardcount_loom))]
static READERS: Readers = Readers {
    phase: AtomicUsize::new(0),
    count: [const { [const { CachePadded::new(AtomicUsize::new(0)) }; STRIPES] }; 2],
};

// Loom's atomics are made inside a model.
#[cfg(shardcount_loom)]
crate::primitive::global! {
    static READERS: Readers = Readers {
        phase: AtomicUsize::new(0),
        count: std::array::from_fn(|_| std::array::from_fn(|_| CachePadded::new(AtomicUsize::new(0)))),
    };
}

/// A pinned section: tables reached from heads loaded while it lives are
/// not freed before it ends.
#[must_use = "the section ends when the pin is dropped"]
pub(crate) struct Pin {
    count: &'static AtomicUsize,
}

impl std::fmt::Debug for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Pin")
    }
}

/// Starts a pinned section. Load heads only after this returns.
#[inline]
pub(crate) fn pin() -> Pin {
    let readers: &'static Readers = &READERS;
    // Relaxed: the phase only spreads sections out; any value is safe.
    let p = readers.phase.load(Ordering::Relaxed) & 1;
    // The token is an address: its high bits tell threads apart.
    let stripe = super::token().wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (usize::BITS - 4);
    let count = &*readers.count[p][stripe & (STRIPES - 1)];
    // Relaxed, then the fence: the fence orders the increment before the
    // head loads that follow (module docs).
    count.fetch_add(1, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    Pin { count }
}

impl Drop for Pin {
    #[inline]
    fn drop(&mut self) {
        // Release: the section's reads of a table happen-before the grace
        // period that sees this (its Acquire loads), and so before a free.
        self.count.fetch_sub(1, Ordering::Release);
    }
}

/// Waits until every section pinned before this call has ended. Call it
/// after unlinking a table (no new section can reach it), before freeing,
/// and never from inside a pinned section (it would wait for itself), nor
/// holding a lock that a pinned section may wait for.
pub(crate) fn wait() {
    let _one = lock(&WAITS);
    let readers: &'static Readers = &READERS;
    fence(Ordering::SeqCst);
    for _ in 0..2 {
        // Relaxed: the phase only steers new sections (module docs).
        let old = readers.phase.fetch_add(1, Ordering::Relaxed) & 1;
        for count in &readers.count[old] {
            // Acquire: pairs with the Release decrement in `Pin::drop`.
            while count.load(Ordering::Acquire) != 0 {
                spin_loop();
                #[cfg(not(shardcount_loom))]
                std::thread::yield_now();
            }
        }
    }
}
