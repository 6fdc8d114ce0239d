//! Measuring helpers shared by every bench (see `shared/notes/measuring-here.md`).
//!
//! * [`opaque`] is an empty `asm!` compiler barrier: unlike
//!   `std::hint::black_box(i)` it emits no store for locked ops to wait on.
//! * [`run_threads`] pins one thread per core (round-robin when
//!   oversubscribed) and starts them through a barrier; it returns the wall
//!   time from the first thread starting to the last one finishing, as the
//!   threads themselves clocked it.
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

/// Hands `x`'s address to the optimiser's unknown once, so that every later
/// [`opaque`] barrier must assume `x` may have changed. Without it, loads
/// from a local that never escapes can be hoisted out of a timed loop
/// (`asm!` can only touch memory whose address escaped). Call it once before
/// the loop, never inside.
pub fn escape<T>(x: &T) -> &T {
    std::hint::black_box(x)
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
/// barrier; returns the time from the first thread leaving the barrier to
/// the last one finishing its work.
///
/// The threads time themselves: the spawning thread is not pinned, and with
/// every core busy it may not run again until the work is over, so a clock
/// it read after the barrier would say almost nothing had elapsed.
pub fn run_threads<F>(threads: usize, work: F) -> Duration
where
    F: Fn(usize) + Sync,
{
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                s.spawn(move || {
                    pin(t);
                    barrier.wait();
                    let start = Instant::now();
                    work(t);
                    (start, Instant::now())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread panicked"))
            .collect()
    });
    let first = spans
        .iter()
        .map(|s| s.0)
        .min()
        .expect("at least one thread");
    let last = spans
        .iter()
        .map(|s| s.1)
        .max()
        .expect("at least one thread");
    last - first
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

/// Median over `reps` interleaved repetitions of `candidate() / baseline()`,
/// with the smallest and largest ratio: `(median, min, max)`.
pub fn paired(
    reps: usize,
    mut baseline: impl FnMut() -> f64,
    mut candidate: impl FnMut() -> f64,
) -> (f64, f64, f64) {
    let mut ratios = Vec::with_capacity(reps);
    for _ in 0..reps {
        let b = baseline();
        let c = candidate();
        ratios.push(c / b);
    }
    let med = median(&mut ratios);
    (med, ratios[0], ratios[reps - 1])
}

/// Repetitions for a paired section: `SHARDCOUNT_REPS`, else `default`.
pub fn reps(default: usize) -> usize {
    std::env::var("SHARDCOUNT_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}

/// The `main` of a bench with a paired section: criterion's groups, then the
/// paired ratios. `SHARDCOUNT_PAIRED=skip` leaves out the paired section,
/// `=only` runs only it.
pub fn bench_main(criterion_groups: impl FnOnce(), paired: impl FnOnce()) {
    let mode = std::env::var("SHARDCOUNT_PAIRED").unwrap_or_default();
    if mode != "only" {
        criterion_groups();
        criterion::Criterion::default()
            .configure_from_args()
            .final_summary();
    }
    if mode != "skip" {
        paired();
    }
}
