//! `Stock::try_sub` against a single `AtomicU64` whose compare-exchange loop
//! refuses to go below zero (the baseline, `CasStock`).
//!
//! Measures: 2 threads taking single units from a large stock (target: ≥ 3×
//! the baseline's throughput); the same near empty, where each thread takes
//! a unit and gives it back, so the stock hovers at a few units; and a drain
//! of a small stock to failure, where every take beyond the stock must fail.
//!
//! Criterion reports each side; a paired section (see
//! `shardcount_harness::measure::Session`) measures both in the same
//! repetitions and prints medians of the ratios. `SHARDCOUNT_PAIRED=skip`
//! skips it, `=only` runs only it; `SHARDCOUNT_REPS` sets its repetitions
//! (default 9); `SHARDCOUNT_ONLY=<substring>` picks figures by title.

use criterion::Criterion;
use shardcount::Stock;
use shardcount_harness::inventory::{CasStock, Inventory};
use shardcount_harness::measure::{bench_main, opaque, run_threads, Figure, Ratio, Session};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// `per_thread` single-unit takes on each of `threads` threads from a stock
/// large enough for all; checked.
fn takes_large<I: Inventory>(s: &I, threads: usize, per_thread: u64) -> Duration {
    let before = s.remaining();
    let t = run_threads(threads, |_| {
        for _ in 0..per_thread {
            assert!(s.take(1), "a large stock refused a take");
            opaque();
        }
    });
    assert_eq!(
        before - s.remaining(),
        threads as u64 * per_thread,
        "lost takes"
    );
    t
}

/// Near empty: each iteration takes one unit and returns it, on a stock of
/// `threads` units, so some take may find it momentarily short (counted,
/// not an error). Checked: the stock is back where it started.
fn take_return_near_empty<I: Inventory>(s: &I, threads: usize, per_thread: u64) -> Duration {
    let before = s.remaining();
    let t = run_threads(threads, |_| {
        for _ in 0..per_thread {
            if s.take(1) {
                s.put(1);
            }
            opaque();
        }
    });
    assert_eq!(s.remaining(), before, "lost units");
    t
}

/// Drain: `threads` threads take single units from a stock of
/// `threads * per_thread / 2`, each making `per_thread` attempts, so half
/// the attempts must fail. Checked: exactly the stock is taken.
fn drain_to_failure<I: Inventory>(s: &I, threads: usize, per_thread: u64) -> Duration {
    let initial = s.remaining();
    let taken = AtomicU64::new(0);
    let t = run_threads(threads, |_| {
        let mut mine = 0;
        for _ in 0..per_thread {
            mine += u64::from(s.take(1));
            opaque();
        }
        // Relaxed: read after the join.
        taken.fetch_add(mine, Ordering::Relaxed);
    });
    assert_eq!(
        taken.into_inner(),
        initial,
        "took more or less than there was"
    );
    assert_eq!(s.remaining(), 0);
    t
}

const LARGE: u64 = 1 << 40;

fn criterion_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("take_2_threads_large_stock");
    g.bench_function("AtomicU64 CAS loop", |b| {
        let a = CasStock::with_stock(LARGE);
        b.iter_custom(|n| takes_large(&a, 2, n))
    });
    g.bench_function("Stock::try_sub", |b| {
        let s = Stock::new(LARGE);
        b.iter_custom(|n| takes_large(&s, 2, n))
    });
    g.finish();

    let mut g = c.benchmark_group("take_return_2_threads_near_empty");
    g.bench_function("AtomicU64 CAS loop", |b| {
        let a = CasStock::with_stock(2);
        b.iter_custom(|n| take_return_near_empty(&a, 2, n))
    });
    g.bench_function("Stock::try_sub + add", |b| {
        let s = Stock::new(2);
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

/// A figure of `Stock` against the CAS baseline, both on 2 threads.
fn stock_vs_cas<'a>(
    title: &str,
    cas: impl FnMut(u64) -> Duration + 'a,
    stock: impl FnMut(u64) -> Duration + 'a,
) -> Figure<'a> {
    Figure::new(title, 2, Ratio::Throughput)
        .reference("AtomicU64 CAS loop", cas)
        .vs("Stock", stock)
}

fn paired_report() {
    let mut s = Session::new("stock", 9);
    s.run(stock_vs_cas(
        "2 threads, large stock: take throughput vs the CAS loop",
        |n| takes_large(&CasStock::with_stock(LARGE), 2, n),
        |n| takes_large(&Stock::new(LARGE), 2, n),
    ));
    s.run(stock_vs_cas(
        "2 threads, near empty (take + return): throughput vs the CAS loop",
        |n| take_return_near_empty(&CasStock::with_stock(2), 2, n),
        |n| take_return_near_empty(&Stock::new(2), 2, n),
    ));
    // A stock of n for 2 threads making n attempts each: half must fail.
    s.run(stock_vs_cas(
        "2 threads, drain to failure (half the attempts fail): throughput vs the CAS loop",
        |n| drain_to_failure(&CasStock::with_stock(n), 2, n),
        |n| drain_to_failure(&Stock::new(n), 2, n),
    ));
    s.finish();
}

fn main() {
    bench_main(benches, paired_report);
}
