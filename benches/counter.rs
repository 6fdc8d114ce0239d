//! `Counter` against its references: 1-thread `add` cost against a bare
//! `fetch_add`, 2-thread throughput as a fraction of the ideal stripe (and
//! against fast-counter), idle `sum` cost against a `load`.
//!
//! Criterion reports each side; then a paired section (see
//! `shardcount_harness::measure::Session`) measures every subject in the same
//! repetitions as its reference and prints medians of the ratios, which is
//! what survives this host's noisy phases. `SHARDCOUNT_PAIRED=skip` skips
//! it, `=only` runs only it; `SHARDCOUNT_REPS` sets its repetitions
//! (default 9); `SHARDCOUNT_ONLY=<substring>` picks figures by title.

use criterion::{criterion_group, Criterion};
use shardcount::Counter;
use shardcount_harness::measure::{bench_main, Figure, Ratio, Session};
use shardcount_harness::subjects::{time_adds, time_adds_fresh, time_reads, Stripe, Subject};
use std::sync::atomic::{AtomicU64, Ordering};

type FastCounter = shardcount_harness::peers::fast_counter::ConcurrentCounter;
type Contatori = shardcount_harness::peers::contatori::counters::unsigned::Unsigned;

fn criterion_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("add_1_thread");
    g.bench_function("AtomicU64::fetch_add", |b| {
        let a = AtomicU64::new(0);
        b.iter_custom(|n| time_adds(&a, 1, n))
    });
    g.bench_function("Counter::add", |b| {
        let c = Counter::new();
        b.iter_custom(|n| time_adds(&c, 1, n))
    });
    g.finish();

    // Per-iteration time is wall time / adds per thread; throughput is
    // 2 adds per iteration, so criterion's per-iteration time compares
    // directly.
    let mut g = c.benchmark_group("add_2_threads");
    g.bench_function("AtomicU64::fetch_add", |b| {
        let a = AtomicU64::new(0);
        b.iter_custom(|n| time_adds(&a, 2, n))
    });
    g.bench_function("Counter::add", |b| {
        let c = Counter::new();
        b.iter_custom(|n| time_adds(&c, 2, n))
    });
    g.finish();

    let mut g = c.benchmark_group("read_idle");
    g.bench_function("AtomicU64::load", |b| {
        let a = AtomicU64::new(7);
        b.iter_custom(|n| time_reads(&a, n, 7, |a| a.load(Ordering::Relaxed)))
    });
    g.bench_function("Counter::sum", |b| {
        let c = Counter::from(7);
        b.iter_custom(|n| time_reads(&c, n, 7, Counter::sum))
    });
    g.finish();
}

criterion_group!(benches, criterion_benches);

fn paired_report() {
    let mut s = Session::new("counter", 9);

    s.run(
        Figure::new(
            "1 thread: Counter::add cost vs a bare fetch_add",
            1,
            Ratio::Cost,
        )
        .reference("AtomicU64::fetch_add", |n| {
            time_adds_fresh::<AtomicU64>(1, n)
        })
        .vs("Counter::add", |n| time_adds_fresh::<Counter>(1, n))
        .vs("stripe (fetch_add + tls index)", |n| {
            time_adds_fresh::<Stripe>(1, n)
        })
        .compare("Counter::add", "stripe (fetch_add + tls index)"),
    );

    s.run(
        Figure::new(
            "2 threads: throughput as a fraction of the ideal stripe",
            2,
            Ratio::Throughput,
        )
        .reference(Stripe::NAME, |n| time_adds_fresh::<Stripe>(2, n))
        .vs(Counter::NAME, |n| time_adds_fresh::<Counter>(2, n))
        .vs(FastCounter::NAME, |n| time_adds_fresh::<FastCounter>(2, n))
        .vs(Contatori::NAME, |n| time_adds_fresh::<Contatori>(2, n))
        .vs("AtomicU64 (shared)", |n| time_adds_fresh::<AtomicU64>(2, n))
        .compare(Counter::NAME, FastCounter::NAME)
        .compare(Counter::NAME, "AtomicU64 (shared)"),
    );

    let a = AtomicU64::new(7);
    let c = Counter::from(7);
    s.run(
        Figure::new("idle: Counter::sum cost vs AtomicU64::load", 1, Ratio::Cost)
            .reference("AtomicU64::load", |n| {
                time_reads(&a, n, 7, |a| a.load(Ordering::Relaxed))
            })
            .vs("Counter::sum", |n| time_reads(&c, n, 7, Counter::sum)),
    );

    s.finish();
}

fn main() {
    bench_main(benches, paired_report);
}
