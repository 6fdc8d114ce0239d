//! `Counter` against a shared `AtomicU64`, the three measures of its issue:
//! 1-thread `add` cost, 2-thread aggregate throughput, idle `sum` cost.
//!
//! Criterion reports each side; then a paired section interleaves the two
//! sides in every repetition and prints the median of the per-repetition
//! ratios, which is what survives this host's noisy phases. Set
//! `SHARDCOUNT_PAIRED=skip` to skip it, `=only` to run only it, and
//! `SHARDCOUNT_REPS` for its repetitions (default 9).

#[path = "common/mod.rs"]
mod common;

use common::{escape, opaque, run_threads};
use criterion::{criterion_group, Criterion};
use crossbeam_utils::CachePadded;
use shardcount::Counter;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What a bench drives: a shared `AtomicU64` or a `Counter`.
trait Subject: Sync {
    fn add1(&self);
    fn read(&self) -> u64;
}

impl Subject for AtomicU64 {
    #[inline(always)]
    fn add1(&self) {
        self.fetch_add(1, Ordering::Relaxed);
    }
    #[inline(always)]
    fn read(&self) -> u64 {
        self.load(Ordering::Relaxed)
    }
}

impl Subject for Counter {
    #[inline(always)]
    fn add1(&self) {
        self.add(1);
    }
    #[inline(always)]
    fn read(&self) -> u64 {
        self.sum()
    }
}

/// `iters` adds on this thread; the count is checked so no work is elided.
fn adds_1t<S: Subject>(s: &S, iters: u64) -> Duration {
    let s = escape(s);
    let before = s.read();
    let start = Instant::now();
    for _ in 0..iters {
        s.add1();
        opaque();
    }
    let t = start.elapsed();
    assert_eq!(s.read().wrapping_sub(before), iters, "lost adds");
    t
}

/// `per_thread` adds on each of `threads` pinned threads; checked.
fn adds_nt<S: Subject>(s: &S, threads: usize, per_thread: u64) -> Duration {
    let before = s.read();
    let t = run_threads(threads, |_| {
        for _ in 0..per_thread {
            s.add1();
            opaque();
        }
    });
    assert_eq!(
        s.read().wrapping_sub(before),
        threads as u64 * per_thread,
        "lost adds"
    );
    t
}

/// `per_thread` adds on each of `threads` pinned threads, each to its own
/// cache-padded atomic; checked.
fn padded_per_thread(threads: usize, per_thread: u64) -> Duration {
    let slots: Vec<CachePadded<AtomicU64>> = (0..threads).map(|_| CachePadded::default()).collect();
    let t = run_threads(threads, |i| {
        for _ in 0..per_thread {
            slots[i].fetch_add(1, Ordering::Relaxed);
            opaque();
        }
    });
    let total: u64 = slots.iter().map(|s| s.load(Ordering::Relaxed)).sum();
    assert_eq!(total, threads as u64 * per_thread, "lost adds");
    t
}

/// `iters` reads; their results are folded into a checked value.
fn reads<S: Subject>(s: &S, iters: u64) -> Duration {
    let s = escape(s);
    let expect = s.read();
    let mut acc = 0u64;
    let start = Instant::now();
    for _ in 0..iters {
        acc = acc.wrapping_add(s.read());
        opaque();
    }
    let t = start.elapsed();
    assert_eq!(acc, expect.wrapping_mul(iters));
    t
}

fn criterion_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("add_1_thread");
    g.bench_function("AtomicU64::fetch_add", |b| {
        let a = AtomicU64::new(0);
        b.iter_custom(|n| adds_1t(&a, n))
    });
    g.bench_function("Counter::add", |b| {
        let c = Counter::new();
        b.iter_custom(|n| adds_1t(&c, n))
    });
    g.finish();

    // Per-iteration time is wall time / adds per thread; throughput is
    // 2 adds per iteration, so criterion's per-iteration time compares
    // directly.
    let mut g = c.benchmark_group("add_2_threads");
    g.bench_function("AtomicU64::fetch_add", |b| {
        let a = AtomicU64::new(0);
        b.iter_custom(|n| adds_nt(&a, 2, n))
    });
    g.bench_function("Counter::add", |b| {
        let c = Counter::new();
        b.iter_custom(|n| adds_nt(&c, 2, n))
    });
    g.finish();

    let mut g = c.benchmark_group("read_idle");
    g.bench_function("AtomicU64::load", |b| {
        let a = AtomicU64::new(7);
        b.iter_custom(|n| reads(&a, n))
    });
    g.bench_function("Counter::sum", |b| {
        let c = Counter::from(7);
        b.iter_custom(|n| reads(&c, n))
    });
    g.finish();
}

criterion_group!(benches, criterion_benches);

fn paired_report() {
    let reps = common::reps(9);
    // ≥ 100 ms per side per repetition, as the measuring notes advise.
    const N1: u64 = 30_000_000;
    const N2: u64 = 10_000_000;
    const NR: u64 = 50_000_000;
    common::pin(0);
    println!("\npaired ratios, median of {reps} interleaved repetitions (min..max):");

    let (m, lo, hi) = common::paired(
        reps,
        || adds_1t(&AtomicU64::new(0), N1).as_secs_f64(),
        || adds_1t(&Counter::new(), N1).as_secs_f64(),
    );
    println!(
        "  1 thread, Counter::add cost / AtomicU64::fetch_add cost: {m:.3}x ({lo:.3}..{hi:.3})"
    );

    // Throughput ratio = baseline time / candidate time for the same work.
    let (m, lo, hi) = common::paired(
        reps,
        || adds_nt(&Counter::new(), 2, N2).as_secs_f64(),
        || adds_nt(&AtomicU64::new(0), 2, N2).as_secs_f64(),
    );
    println!(
        "  2 threads, Counter throughput / shared AtomicU64 throughput: {m:.2}x ({lo:.2}..{hi:.2})"
    );

    // The ceiling for any sharded counter: one padded atomic per thread,
    // indexed by the thread number (no lookup, no sharing at all).
    let (m, lo, hi) = common::paired(
        reps,
        || padded_per_thread(2, N2).as_secs_f64(),
        || adds_nt(&AtomicU64::new(0), 2, N2).as_secs_f64(),
    );
    println!("  (reference) 2 threads, one padded AtomicU64 per thread / shared AtomicU64: {m:.2}x ({lo:.2}..{hi:.2})");

    let (m, lo, hi) = common::paired(
        reps,
        || reads(&AtomicU64::new(7), NR).as_secs_f64(),
        || reads(&Counter::from(7), NR).as_secs_f64(),
    );
    println!("  idle Counter::sum cost / AtomicU64::load cost: {m:.3}x ({lo:.3}..{hi:.3})");
}

fn main() {
    common::bench_main(benches, paired_report);
}
