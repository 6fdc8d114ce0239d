//! Measuring helpers shared by every bench (see `shared/notes/measuring-here.md`).
//!
//! * [`opaque`] is an empty `asm!` compiler barrier: unlike
//!   `std::hint::black_box(i)` it emits no store for locked ops to wait on.
//! * [`run_threads`] pins one thread per core (round-robin when
//!   oversubscribed) and starts them through a barrier; it returns the wall
//!   time from the barrier to the last thread finishing.
//! * [`median`] of paired ratios: measure the baseline and the candidate in
//!   the same repetition, divide, and take the median over repetitions.
#![allow(dead_code)]

use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

/// A compiler barrier that emits no instruction: keeps loops from being
/// folded or hoisted without adding a store to each iteration.
#[inline(always)]
pub fn opaque() {
    // SAFETY: an empty asm block touches no memory, stack or flags.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) }
}

/// Pins the calling thread to core `i` modulo the core count, if possible.
///
/// The core list is read once: `get_core_ids` lists only the cores the
/// *calling* thread may use, so after one pin it would shrink to that core
/// and every later thread (which inherits the mask) would pile onto it.
pub fn pin(i: usize) {
    static CORES: OnceLock<Vec<core_affinity::CoreId>> = OnceLock::new();
    let cores = CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default());
    if !cores.is_empty() {
        core_affinity::set_for_current(cores[i % cores.len()]);
    }
}

/// Runs `work(thread_index)` on `threads` pinned threads started through a
/// barrier; returns the time from the release of the barrier until all joined.
pub fn run_threads<F>(threads: usize, work: F) -> Duration
where
    F: Fn(usize) + Sync,
{
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (barrier, work) = (&barrier, &work);
            s.spawn(move || {
                pin(t);
                barrier.wait();
                work(t);
            });
        }
        barrier.wait();
        let start = Instant::now();
        // The scope joins every thread before returning.
        start
    })
    .elapsed()
}

/// The median of `xs` (sorts in place). Panics on an empty slice.
pub fn median(xs: &mut [f64]) -> f64 {
    assert!(!xs.is_empty(), "median of nothing");
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}
