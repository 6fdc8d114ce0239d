//! The counters that the contention demo and the criterion suite compare.
//!
//! Each counter kind is one [`Subject`] impl plus one line in [`for_each`];
//! both `examples/contention.rs` and `benches/suite.rs` include this file
//! (with `#[path]`), so a new counter shows up in both at once.
//!
//! Workers are generic over `S: Subject` (monomorphised), so the hot loop
//! calls `add_one` directly, not through a vtable.
#![allow(dead_code)]

use shardcount::{Counter, RoughCounter};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use thread_local::ThreadLocal;

/// One counter kind under test.
pub trait Subject: Sync + Sized {
    /// The name shown in tables, charts and criterion ids.
    const NAME: &'static str;
    /// A fresh counter at zero.
    fn new() -> Self;
    /// The hot path: count one event.
    fn add_one(&self);
    /// The exact total once every writer has finished.
    fn total(&self) -> u64;
    /// What a reader calls while writers run (cheap or approximate read).
    fn read(&self) -> u64;
}

/// Visits every counter kind, by type.
pub trait Visit {
    /// Called once per counter kind.
    fn visit<S: Subject>(&mut self);
}

/// Visits every counter kind, in display order. To add one: impl
/// [`Subject`] for it below and add a `v.visit::<T>()` line here.
pub fn for_each(v: &mut impl Visit) {
    v.visit::<AtomicU64>();
    v.visit::<Mutex<u64>>();
    v.visit::<Counter>();
    v.visit::<RoughCounter>();
    v.visit::<fast_counter::ConcurrentCounter>();
    v.visit::<ThreadLocal<AtomicU64>>();
}

/// The baseline every other kind is compared with.
impl Subject for AtomicU64 {
    const NAME: &'static str = "AtomicU64";
    fn new() -> Self {
        AtomicU64::new(0)
    }
    #[inline]
    fn add_one(&self) {
        // Relaxed: the usual statistics counter; nothing is published.
        self.fetch_add(1, Ordering::Relaxed);
    }
    fn total(&self) -> u64 {
        // Relaxed: called after the writers were joined, which synchronises.
        self.load(Ordering::Relaxed)
    }
    #[inline]
    fn read(&self) -> u64 {
        // Relaxed: a statistics read; orders nothing else.
        self.load(Ordering::Relaxed)
    }
}

impl Subject for Mutex<u64> {
    const NAME: &'static str = "Mutex<u64>";
    fn new() -> Self {
        Mutex::new(0)
    }
    #[inline]
    fn add_one(&self) {
        *self.lock().unwrap() += 1;
    }
    fn total(&self) -> u64 {
        *self.lock().unwrap()
    }
    #[inline]
    fn read(&self) -> u64 {
        *self.lock().unwrap()
    }
}

impl Subject for Counter {
    const NAME: &'static str = "Counter";
    fn new() -> Self {
        Counter::new()
    }
    #[inline]
    fn add_one(&self) {
        self.inc();
    }
    fn total(&self) -> u64 {
        self.sum()
    }
    #[inline]
    fn read(&self) -> u64 {
        self.sum()
    }
}

/// Readers call `approx` (one load of the sink), its cheap read; the check
/// uses the exact `sum`.
impl Subject for RoughCounter {
    const NAME: &'static str = "RoughCounter";
    fn new() -> Self {
        RoughCounter::new()
    }
    #[inline]
    fn add_one(&self) {
        self.inc();
    }
    fn total(&self) -> u64 {
        self.sum()
    }
    #[inline]
    fn read(&self) -> u64 {
        self.approx()
    }
}

/// The `fast-counter` crate: a fixed table of padded shards, one per core
/// (rounded up to a power of two), picked by a thread-local id.
impl Subject for fast_counter::ConcurrentCounter {
    const NAME: &'static str = "fast-counter";
    fn new() -> Self {
        fast_counter::ConcurrentCounter::new(cores())
    }
    #[inline]
    fn add_one(&self) {
        self.add(1);
    }
    fn total(&self) -> u64 {
        to_u64(self.sum())
    }
    #[inline]
    fn read(&self) -> u64 {
        to_u64(self.sum())
    }
}

/// The hand-rolled per-thread counter many programs use: a `ThreadLocal`
/// slot per thread, written only by its owner (load + store, no locked
/// instruction), summed by iterating. The slots are not cache-padded, as in
/// typical code.
impl Subject for ThreadLocal<AtomicU64> {
    const NAME: &'static str = "ThreadLocal";
    fn new() -> Self {
        ThreadLocal::new()
    }
    #[inline]
    fn add_one(&self) {
        let slot = self.get_or(|| AtomicU64::new(0));
        // Relaxed load + store: only the owning thread writes its slot, so no
        // update can be lost; readers need no ordering with other data.
        slot.store(slot.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
    fn total(&self) -> u64 {
        self.read()
    }
    #[inline]
    fn read(&self) -> u64 {
        // Relaxed: each slot is read on its own; a statistics read.
        self.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }
}

/// `available_parallelism`, or 1 if unknown.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A signed sum as the `u64` it should be; a negative one (which an add-only
/// counter must never show) maps to `u64::MAX` so the check fails loudly.
fn to_u64(x: isize) -> u64 {
    u64::try_from(x).unwrap_or(u64::MAX)
}
