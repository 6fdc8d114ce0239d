//! A tiny driver for `valgrind --tool=callgrind`: the single-thread hot path
//! of `RoughCounter::inc` against `AtomicU64::fetch_add`, in separate
//! non-inlined functions so their instruction counts can be read apart.
//!
//! ```text
//! cargo build --release --example rough_hot
//! valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/rough_hot
//! callgrind_annotate /tmp/cg.out | grep -E 'rough_hot::(rough|atomic)'
//! ```
//!
//! Pass `time` as the first argument to print wall-clock ns/op instead
//! (noisy; the benches measure properly).

use shardcount::RoughCounter;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

static ATOMIC: AtomicU64 = AtomicU64::new(0);
static ROUGH: RoughCounter = RoughCounter::new();
static ROUGH_NO_CLOCK: RoughCounter = RoughCounter::new().with_interval(Duration::MAX);

#[inline(always)]
fn opaque() {
    // SAFETY: an empty asm block touches no memory, stack or flags.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) }
}

#[inline(never)]
fn atomic_loop(n: u64) {
    for _ in 0..n {
        ATOMIC.fetch_add(1, Ordering::Relaxed);
        opaque();
    }
}

#[inline(never)]
fn rough_loop(n: u64) {
    for _ in 0..n {
        ROUGH.inc();
        opaque();
    }
}

#[inline(never)]
fn rough_no_clock_loop(n: u64) {
    for _ in 0..n {
        ROUGH_NO_CLOCK.inc();
        opaque();
    }
}

fn main() {
    let time = std::env::args().nth(1).as_deref() == Some("time");
    let n: u64 = if time { 200_000_000 } else { 1_000_000 };
    // First use takes the slow path; keep it out of the counted loops.
    ROUGH.inc();
    ROUGH_NO_CLOCK.inc();
    for (name, f) in [
        ("atomic", atomic_loop as fn(u64)),
        ("rough", rough_loop),
        ("rough_no_clock", rough_no_clock_loop),
    ] {
        let start = Instant::now();
        f(n);
        if time {
            println!(
                "{name}: {:.3} ns/op",
                start.elapsed().as_secs_f64() * 1e9 / n as f64
            );
        }
    }
    assert_eq!(ATOMIC.load(Ordering::Relaxed), n);
    assert_eq!(ROUGH.sum(), n + 1);
    assert_eq!(ROUGH_NO_CLOCK.sum(), n + 1);
}
