//! Everything per-thread, written once: each thread's identity (its shard
//! probe), the contention sampler, the per-thread slot registry (thread
//! indexes), and the owner ids that give the threads adding to a sharded
//! table their own rows (`owner`).
//!
//! A thread gets a probe once, from a process-wide sequence so the first
//! threads spread over distinct shards, kept in a `const`-initialised
//! thread-local: reading it is a bare TLS load, never a hash of the thread
//! id. A thread that keeps colliding with others moves by rehashing its probe
//! (xorshift, which never yields zero from a non-zero input).

pub(crate) mod grace;
pub(crate) mod owner;
mod pool;
pub(crate) mod sampler;
pub(crate) mod slots;

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

/// Thread indexes: small, dense and reused, so a table indexed by them stays
/// as small as the number of threads alive at once.
///
/// Index 0 means "none": a thread has none until a slot table first needs
/// one, and has none again once its exit hook has run (adds from later
/// thread-local destructors then take a slower path that does not need
/// one). `slots` owns the lifetime: it holds the [`IndexLease`] that
/// [`take_index`] gives, and drops it (giving the index back) after every
/// slot under it has been handed over.
mod index {
    use super::pool::Pool;
    use crate::primitive::sync::{lock, Arc, Mutex};
    use std::cell::Cell;

    crate::primitive::global! {
        // Behind an Arc that each lease shares, so giving an index back never
        // needs the static: under loom, statics are gone before the main
        // thread's thread-local destructors run.
        static POOL: Arc<Mutex<Pool>> = Arc::new(Mutex::new(Pool::new()));
    }

    /// A thread's index, and where its slot is in every slot table:
    /// computed once when the index is taken, so the hot path does no
    /// arithmetic on it.
    struct Held {
        index: Cell<usize>,
        /// The slot table bucket (0, never allocated, for "none").
        bucket: Cell<usize>,
        /// The slot's position in the bucket.
        offset: Cell<usize>,
    }

    crate::primitive::const_thread_local! {
        /// The calling thread's index, 0 if none. No destructor: the hot
        /// path reads it with a bare TLS load.
        static INDEX: Held = Held {
            index: Cell::new(0),
            bucket: Cell::new(0),
            offset: Cell::new(0),
        };
    }

    /// The calling thread's index, or 0 if it has none.
    #[inline]
    pub(crate) fn index() -> usize {
        // During thread teardown the cell may be gone: no index.
        INDEX.try_with(|h| h.index.get()).unwrap_or(0)
    }

    /// The calling thread's slot position `(bucket, offset)` (see
    /// `thread::slots`); bucket 0 if it has no index.
    #[inline]
    pub(crate) fn slot_position() -> (usize, usize) {
        INDEX
            .try_with(|h| (h.bucket.get(), h.offset.get()))
            .unwrap_or((0, 0))
    }

    fn set(i: usize) {
        let (bucket, offset) = super::slots::position(i);
        // Ignoring the error: a thread being torn down keeps no index.
        let _ = INDEX.try_with(|h| {
            h.index.set(i);
            h.bucket.set(bucket);
            h.offset.set(offset);
        });
    }

    /// The calling thread's hold on its index; dropping it gives the index
    /// back.
    ///
    /// The pool's mutex orders everything: a thread that takes an index
    /// another gave back happens-after everything that thread did before.
    pub(crate) struct IndexLease {
        index: usize,
        pool: Arc<Mutex<Pool>>,
    }

    impl IndexLease {
        pub(crate) fn index(&self) -> usize {
            self.index
        }
    }

    /// Gives the calling thread an index (it must have none).
    pub(crate) fn take_index() -> IndexLease {
        let pool = Arc::clone(&POOL);
        let index = lock(&pool).take();
        set(index);
        IndexLease { index, pool }
    }

    impl Drop for IndexLease {
        fn drop(&mut self) {
            set(0);
            lock(&self.pool).give(self.index);
        }
    }
}
pub(crate) use index::{index, slot_position, take_index, IndexLease};
