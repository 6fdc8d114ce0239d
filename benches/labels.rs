//! Typed labels: `LabelledCounter::inc(label)` against `CounterSet::inc(i)`
//! over the same number of counters, at 1 and 2 threads. A paired section
//! only (see `shardcount_harness::measure::Session`): every subject runs in
//! the same repetitions as the reference, and medians of the ratios are
//! printed. `SHARDCOUNT_REPS` sets the repetitions (default 9),
//! `SHARDCOUNT_ONLY=<substring>` picks figures by title.
//!
//! Each thread walks every value in turn (8 for the one-label enum, 32
//! for the two-label struct), the labels read from a table as a caller
//! holds them; the sets walk the same indices. The goal (issue 21): the
//! labelled add at 2 threads ≥ 0.95 of `CounterSet::inc`'s throughput.
//! The peer: `fast-telemetry`'s `LabeledCounter` over the same enum and
//! walk (a sharded counter per label, a shard per core).

use shardcount::{CounterSet, Label, LabelledCounter};
use shardcount_harness::labels::{Request, Route};
use shardcount_harness::measure::{
    bench_main, cores, escape, opaque, run_threads, Figure, Ratio, Session,
};
use shardcount_harness::peers::fast_telemetry::LabeledCounter;
use std::time::Duration;

/// Every value of `L`, in index order (an array, so that a masked index
/// needs no bounds check).
fn all<L: Label, const N: usize>() -> [L; N] {
    assert_eq!(L::COUNT, N);
    std::array::from_fn(|i| L::from_index(i).expect("in range"))
}

/// `n` adds of one on each of `threads` threads, the add given the walk's
/// step; checks the total `total()` reports afterwards.
fn adds(threads: usize, n: u64, add: impl Fn(usize) + Sync, total: impl Fn() -> u64) -> Duration {
    let before = total();
    let t = run_threads(threads, |_| {
        for i in 0..n {
            add(i as usize);
            opaque();
        }
    });
    assert_eq!(total() - before, threads as u64 * n, "lost or extra counts");
    t
}

fn figure(s: &mut Session, threads: usize) {
    let title =
        format!("{threads} thread(s), typed labels: throughput vs CounterSet::inc over 8 counters");
    if !s.wants(&title) {
        return;
    }
    // Sizes that are powers of two: the walk is a mask, for all subjects.
    let routes: [Route; 8] = all();
    let requests: [Request; 32] = all();
    s.run(
        Figure::new(title, threads, Ratio::Throughput)
            .reference("CounterSet::inc, 8 counters", |n| {
                let set = CounterSet::new(8);
                let set = escape(&set);
                adds(
                    threads,
                    n,
                    |i| set.inc(i & 7),
                    || set.snapshot().iter().sum(),
                )
            })
            .vs("CounterSet::inc, 8 counters, index from a table", |n| {
                // As a labelled add gets its index: a byte read from the
                // walk's table, not the loop's own counter.
                let set = CounterSet::new(8);
                let idx: [u8; 8] = std::array::from_fn(|i| routes[i].index() as u8);
                let (set, idx) = (escape(&set), escape(&idx));
                adds(
                    threads,
                    n,
                    |i| set.inc(usize::from(idx[i & 7])),
                    || set.snapshot().iter().sum(),
                )
            })
            .vs("LabelledCounter<enum of 8>::inc", |n| {
                let c: LabelledCounter<Route> = LabelledCounter::new();
                let (c, routes) = (escape(&c), escape(&routes));
                adds(threads, n, |i| c.inc(routes[i & 7]), || c.sum())
            })
            .vs("fast-telemetry LabeledCounter<enum of 8>::inc", |n| {
                let c: LabeledCounter<Route> = LabeledCounter::new(cores());
                let (c, routes) = (escape(&c), escape(&routes));
                // A negative sum (never, for adds of one) fails the check.
                let total = || u64::try_from(c.sum_all()).unwrap_or(u64::MAX);
                adds(threads, n, |i| c.inc(routes[i & 7]), total)
            })
            .vs("CounterSet::inc, 32 counters", |n| {
                let set = CounterSet::new(32);
                let set = escape(&set);
                adds(
                    threads,
                    n,
                    |i| set.inc(i & 31),
                    || set.snapshot().iter().sum(),
                )
            })
            .vs("LabelledCounter<struct of 2 labels, 32>::inc", |n| {
                let c: LabelledCounter<Request> = LabelledCounter::new();
                let (c, requests) = (escape(&c), escape(&requests));
                adds(threads, n, |i| c.inc(requests[i & 31]), || c.sum())
            })
            .compare(
                "LabelledCounter<enum of 8>::inc",
                "CounterSet::inc, 8 counters, index from a table",
            )
            .compare(
                "LabelledCounter<enum of 8>::inc",
                "fast-telemetry LabeledCounter<enum of 8>::inc",
            )
            .compare(
                "LabelledCounter<struct of 2 labels, 32>::inc",
                "CounterSet::inc, 32 counters",
            )
            // Issue 45's goal: our two-label add against the peer's one-label add.
            .compare(
                "LabelledCounter<struct of 2 labels, 32>::inc",
                "fast-telemetry LabeledCounter<enum of 8>::inc",
            ),
    );
}

fn paired_report() {
    let mut s = Session::new("labels", 9);
    figure(&mut s, 1);
    figure(&mut s, 2);
    s.finish();
}

fn main() {
    // No criterion groups: the paired section is the whole bench.
    bench_main(|| {}, paired_report);
}
