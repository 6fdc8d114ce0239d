//! `Stock::try_sub` against a single `AtomicU64` whose compare-exchange loop
//! refuses to go below zero (the baseline).
//!
//! Measures: 2 threads taking single units from a large stock (target: ≥ 3×
//! the baseline's throughput); the same near empty, where each thread takes
//! a unit and gives it back, so the stock hovers at a few units; and a drain
//! of a small stock to failure, where every take beyond the stock must fail.
//!
//! Criterion reports each side; a paired section interleaves the two sides
//! in every repetition and prints the median of the per-repetition ratios.
//! `SHARDCOUNT_PAIRED=skip` skips it, `=only` runs only it;
//! `SHARDCOUNT_REPS` sets its repetitions (default 9).

#[path = "common/mod.rs"]
mod common;

use common::{opaque, run_threads};
use criterion::Criterion;
use shardcount::Stock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The baseline: one atomic, a CAS loop that never goes below zero.
struct Baseline(AtomicU64);

/// What a bench drives.
trait Subject: Sync {
    fn try_take(&self, n: u64) -> bool;
    fn put(&self, n: u64);
    fn total(&self) -> u64;
}

impl Subject for Baseline {
    #[inline(always)]
    fn try_take(&self, n: u64) -> bool {
        let mut cur = self.0.load(Ordering::Relaxed);
        while cur >= n {
            match self
                .0
                .compare_exchange_weak(cur, cur - n, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
        false
    }
    #[inline(always)]
    fn put(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    fn total(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Subject for Stock {
    #[inline(always)]
    fn try_take(&self, n: u64) -> bool {
        self.try_sub(n).is_ok()
    }
    #[inline(always)]
    fn put(&self, n: u64) {
        self.add(n);
    }
    fn total(&self) -> u64 {
        self.sum()
    }
}

fn baseline(initial: u64) -> Baseline {
    Baseline(AtomicU64::new(initial))
}

fn stock(initial: u64) -> Stock {
    Stock::new(initial)
}

/// `per_thread` single-unit takes on each of `threads` threads from a stock
/// large enough for all; checked.
fn takes_large<S: Subject>(s: &S, threads: usize, per_thread: u64) -> Duration {
    let before = s.total();
    let t = run_threads(threads, |_| {
        for _ in 0..per_thread {
            assert!(s.try_take(1), "a large stock refused a take");
            opaque();
        }
    });
    assert_eq!(
        before - s.total(),
        threads as u64 * per_thread,
        "lost takes"
    );
    t
}

/// Near empty: each iteration takes one unit and returns it, on a stock of
/// `threads` units, so some take may find it momentarily short (counted,
/// not an error). Checked: the stock is back where it started.
fn take_return_near_empty<S: Subject>(s: &S, threads: usize, per_thread: u64) -> Duration {
    let before = s.total();
    let t = run_threads(threads, |_| {
        for _ in 0..per_thread {
            if s.try_take(1) {
                s.put(1);
            }
            opaque();
        }
    });
    assert_eq!(s.total(), before, "lost units");
    t
}

/// Drain: `threads` threads take single units from a stock of
/// `threads * per_thread / 2`, each making `per_thread` attempts, so half
/// the attempts must fail. Checked: exactly the stock is taken.
fn drain_to_failure<S: Subject>(s: &S, threads: usize, per_thread: u64) -> Duration {
    let initial = s.total();
    let taken = AtomicU64::new(0);
    let t = run_threads(threads, |_| {
        let mut mine = 0;
        for _ in 0..per_thread {
            mine += u64::from(s.try_take(1));
            opaque();
        }
        taken.fetch_add(mine, Ordering::Relaxed);
    });
    assert_eq!(
        taken.into_inner(),
        initial,
        "took more or less than there was"
    );
    assert_eq!(s.total(), 0);
    t
}

const LARGE: u64 = 1 << 40;

fn criterion_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("take_2_threads_large_stock");
    g.bench_function("AtomicU64 CAS loop", |b| {
        let a = baseline(LARGE);
        b.iter_custom(|n| takes_large(&a, 2, n))
    });
    g.bench_function("Stock::try_sub", |b| {
        let s = stock(LARGE);
        b.iter_custom(|n| takes_large(&s, 2, n))
    });
    g.finish();

    let mut g = c.benchmark_group("take_return_2_threads_near_empty");
    g.bench_function("AtomicU64 CAS loop", |b| {
        let a = baseline(2);
        b.iter_custom(|n| take_return_near_empty(&a, 2, n))
    });
    g.bench_function("Stock::try_sub + add", |b| {
        let s = stock(2);
        b.iter_custom(|n| take_return_near_empty(&s, 2, n))
    });
    g.finish();
}

/// `criterion_group!` defines an undocumented `pub fn`; keep it contained.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::criterion_benches);
}
use group::benches;

fn paired_report() {
    let reps = common::reps(9);
    // ≥ 100 ms per side per repetition, as the measuring notes advise.
    const N: u64 = 5_000_000;
    const ND: u64 = 2_000_000;
    common::pin(0);
    println!("\npaired ratios, median of {reps} interleaved repetitions (min..max):");

    // Throughput ratio = baseline time / candidate time for the same work.
    let (m, lo, hi) = common::paired(
        reps,
        || takes_large(&stock(LARGE), 2, N).as_secs_f64(),
        || takes_large(&baseline(LARGE), 2, N).as_secs_f64(),
    );
    println!("  2 threads, large stock, Stock throughput / baseline: {m:.2}x ({lo:.2}..{hi:.2})");

    let (m, lo, hi) = common::paired(
        reps,
        || take_return_near_empty(&stock(2), 2, N).as_secs_f64(),
        || take_return_near_empty(&baseline(2), 2, N).as_secs_f64(),
    );
    println!(
        "  2 threads, near empty (take + return), Stock throughput / baseline: \
         {m:.2}x ({lo:.2}..{hi:.2})"
    );

    let (m, lo, hi) = common::paired(
        reps,
        || drain_to_failure(&stock(ND), 2, ND).as_secs_f64(),
        || drain_to_failure(&baseline(ND), 2, ND).as_secs_f64(),
    );
    println!(
        "  2 threads, drain to failure (half the attempts fail), Stock throughput / \
         baseline: {m:.2}x ({lo:.2}..{hi:.2})"
    );
    for (name, t) in [
        ("baseline large", takes_large(&baseline(LARGE), 2, N)),
        ("Stock large", takes_large(&stock(LARGE), 2, N)),
        (
            "baseline near empty",
            take_return_near_empty(&baseline(2), 2, N),
        ),
        ("Stock near empty", take_return_near_empty(&stock(2), 2, N)),
    ] {
        println!(
            "  ({name}: {:.1} ns per op per thread)",
            t.as_secs_f64() * 1e9 / N as f64
        );
    }
    let s = stock(ND);
    let start = Instant::now();
    drain_to_failure(&s, 2, ND);
    println!(
        "  (one drain: {:.1} ns per attempt, wall / attempts per thread)",
        start.elapsed().as_secs_f64() * 1e9 / ND as f64
    );
}

fn main() {
    common::bench_main(benches, paired_report);
}
