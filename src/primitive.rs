//! The std/loom switch, and nothing else.
//!
//! Every atomic, lock, thread-local and spin hint in the crate comes from
//! here, under std-shaped paths (`primitive::sync::atomic::AtomicU64`). A
//! normal build uses `std`; the crate's own cfg, `shardcount_loom`, swaps in
//! `loom`, so the code the models check is the code users run. The cfg is
//! crate-specific on purpose: a user who runs loom on their own code with
//! `--cfg loom` gets the ordinary shardcount, `const fn`s and all.

// Each module takes what it needs from here.
#![allow(unused_imports, dead_code)]

pub(crate) mod sync {
    pub mod atomic {
        // Loom has no compiler fence; nothing under loom relies on one.
        #[cfg(shardcount_loom)]
        pub use loom::sync::atomic::{
            fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
        };
        #[cfg(shardcount_loom)]
        pub use std::sync::atomic::compiler_fence;
        pub use std::sync::atomic::Ordering;
        /// A word only its owning thread reads and writes, handed to the
        /// next owner through a lock the models do see: std's atomic under
        /// loom too, so the models do not branch on the owner's own
        /// bookkeeping (each loom atomic operation is a point where another
        /// thread may run).
        pub type UnsharedU64 = std::sync::atomic::AtomicU64;
        /// A 32-bit word kept the same way (see [`UnsharedU64`]).
        pub type UnsharedU32 = std::sync::atomic::AtomicU32;
        /// A pointer kept the same way (see [`UnsharedU64`]).
        pub type UnsharedPtr<T> = std::sync::atomic::AtomicPtr<T>;
        #[cfg(not(shardcount_loom))]
        pub use std::sync::atomic::{
            compiler_fence, fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU32, AtomicU64,
            AtomicU8, AtomicUsize,
        };
    }

    #[cfg(shardcount_loom)]
    pub(crate) use loom::sync::{
        Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    };
    /// Only the `metrics` layer's thread caches, which loom never builds,
    /// use it (loom has no `Weak`).
    #[cfg(not(shardcount_loom))]
    pub(crate) use std::sync::Weak;
    #[cfg(not(shardcount_loom))]
    pub(crate) use std::sync::{
        Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    };

    /// Locks `m`, ignoring poison: the crate's locks guard nothing that a
    /// panicking holder could leave half-updated.
    #[inline]
    pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
        // Both std's and loom's `lock` return std's `LockResult`.
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Tries to lock `m`: `None` only when another thread holds it. Poison
    /// is ignored (as [`lock`]): reading a poisoned lock as "busy" would
    /// turn a background pass off for good.
    #[inline]
    pub(crate) fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
        match m.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Read-locks `l`, ignoring poison (as [`lock`]).
    #[inline]
    pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
        l.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Write-locks `l`, ignoring poison (as [`lock`]).
    #[inline]
    pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
        l.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

pub(crate) mod hint {
    /// Tells the CPU (or loom's scheduler) that this thread waits on another.
    #[inline]
    pub(crate) fn spin_loop() {
        #[cfg(not(shardcount_loom))]
        std::hint::spin_loop();
        // Under loom a spin must yield, or the model would never let the
        // other thread run and the loop would not end.
        #[cfg(shardcount_loom)]
        loom::thread::yield_now();
    }
}

pub(crate) mod thread {
    /// How many threads can run at once (`available_parallelism`, or 1).
    ///
    /// A loom mock: models use a handful of threads and a fixed answer
    /// keeps them deterministic.
    pub(crate) fn available_parallelism() -> usize {
        #[cfg(not(shardcount_loom))]
        return std::thread::available_parallelism().map_or(1, |n| n.get());
        #[cfg(shardcount_loom)]
        return 4;
    }

    /// A non-zero number naming the current loom thread, the same in every
    /// run of a model (the address of a loom thread-local is not: the
    /// heap differs from run to run, and a model must take the same
    /// branches whenever loom makes the same choices).
    #[cfg(shardcount_loom)]
    pub(crate) fn loom_token() -> usize {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let fixed = BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default();
        fixed.hash_one(loom::thread::current().id()) as usize | 1
    }
}

/// Declares a thread-local with a `const` initialiser.
///
/// On std this is `thread_local!` with `const { .. }`, a bare TLS access
/// (no lazy-init check) when the type needs no drop. Loom's macro takes no
/// `const` block, so there the same declaration is lazily initialised.
macro_rules! const_thread_local {
    ($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;) => {
        #[cfg(not(shardcount_loom))]
        ::std::thread_local! { $(#[$attr])* static $name: $t = const { $init }; }
        #[cfg(shardcount_loom)]
        ::loom::thread_local! { $(#[$attr])* static $name: $t = $init; }
    };
}
pub(crate) use const_thread_local;

/// Declares a lazily initialised process-wide value. Loom's primitives
/// must be created inside a model, so there it is loom's lazy static (reset
/// for each model run).
macro_rules! global {
    ($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;) => {
        #[cfg(not(shardcount_loom))]
        $(#[$attr])* static $name: ::std::sync::LazyLock<$t> = ::std::sync::LazyLock::new(|| $init);
        #[cfg(shardcount_loom)]
        ::loom::lazy_static! { $(#[$attr])* static ref $name: $t = $init; }
    };
}
pub(crate) use global;

/// Writes a function that is `const` except under `shardcount_loom`, whose
/// atomics have no `const fn new`. The `const` stays in the source, so a
/// reader (or grep) sees that the function is `const`.
macro_rules! const_fn {
    ($(#[$attr:meta])* $vis:vis const fn $($rest:tt)*) => {
        #[cfg(not(shardcount_loom))]
        $(#[$attr])* $vis const fn $($rest)*
        #[cfg(shardcount_loom)]
        $(#[$attr])* $vis fn $($rest)*
    };
}
pub(crate) use const_fn;
