//! The one place that imports atomics, thread-locals and spin hints.
//!
//! A normal build uses `std`; `RUSTFLAGS="--cfg loom"` swaps in `loom`, so the
//! code the loom models check is the code users run. Nothing else in the
//! crate names `std::sync::atomic`, `std::thread_local!` or `loom` directly.

// Each counter type takes what it needs from here.
#![allow(unused_imports, dead_code)]

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

pub(crate) use std::sync::atomic::Ordering;

/// Locks `m`, ignoring poison: the crate's locks guard no data of their own
/// (`Mutex<()>`), so a panic in another holder leaves nothing half-updated
/// that the poison flag could warn about.
#[inline]
pub(crate) fn lock_ignoring_poison<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Both std's and loom's `lock` return std's `LockResult`.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Tells the CPU (or loom's scheduler) that this thread is waiting on another.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    // Under loom a spin must yield, or the model would never let the other
    // thread run and the loop would not terminate.
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Declares a thread-local with a `const` initialiser.
///
/// On std this is `thread_local!` with `const { .. }`, which compiles to a bare
/// TLS access (no lazy-init check) when the type needs no drop. Loom's macro
/// takes no `const` block, so the same declaration is lazily initialised there.
macro_rules! const_thread_local {
    ($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;) => {
        #[cfg(not(loom))]
        ::std::thread_local! { $(#[$attr])* static $name: $t = const { $init }; }
        #[cfg(loom)]
        ::loom::thread_local! { $(#[$attr])* static $name: $t = $init; }
    };
}
pub(crate) use const_thread_local;

/// A process-wide sequence number, distinct for every call (until it wraps).
///
/// Used to give each thread its first shard index, so the first threads land
/// on distinct shards without a collision phase.
pub(crate) fn next_sequence() -> u32 {
    #[cfg(not(loom))]
    {
        static NEXT: AtomicU32 = AtomicU32::new(1);
        // Relaxed: only uniqueness matters; nothing is published through it.
        NEXT.fetch_add(1, Ordering::Relaxed)
    }
    #[cfg(loom)]
    {
        loom::lazy_static! {
            static ref NEXT: AtomicU32 = AtomicU32::new(1);
        }
        // Relaxed: only uniqueness matters; nothing is published through it.
        NEXT.fetch_add(1, Ordering::Relaxed)
    }
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
    #[cfg(not(loom))]
    {
        static CACHED: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *CACHED.get_or_init(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .max(2)
                .next_power_of_two()
        })
    }
    // Loom models use at most a handful of threads; a fixed cap keeps them
    // deterministic.
    #[cfg(loom)]
    {
        4
    }
}

/// Defines a function that is `const` on std and plain under loom, whose
/// atomics have no `const fn new`.
macro_rules! const_fn_unless_loom {
    ($(#[$attr:meta])* $vis:vis fn $name:ident($($args:tt)*) -> $ret:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$attr])* $vis const fn $name($($args)*) -> $ret $body
        #[cfg(loom)]
        $(#[$attr])* $vis fn $name($($args)*) -> $ret $body
    };
}
pub(crate) use const_fn_unless_loom;
