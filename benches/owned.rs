//! Owned shards with the main thread holding a thread index, as in most
//! programs (issue 21, item 4): the main thread touches a `RoughCounter`
//! first, which gives it a thread index for good. Rows of a sharded
//! counter go to owner ids, which only adding threads hold, so the two
//! adding threads should each own a row all the same.
//!
//! A paired section only (see `shardcount_harness::measure::Session`):
//!
//! * 2 threads, `Counter::add` against one padded atomic per thread (the
//!   ideal stripe, the reference). Goal: ≥ 0.95.
//! * 2 threads, `CounterSet::add` over 10,000 counters, each thread
//!   walking `i -> (i + 7919) mod 10,000` from `i = 0` (near lockstep, the
//!   worst case for one word per counter), against one `AtomicU64` per
//!   counter walked the same way (the reference). Goal: ≥ 1.5×.
//! * 2 threads, a `CounterMap` handle on one hot key against the ideal
//!   stripe (the reference). Goal: ≥ 0.85.
//!
//! `SHARDCOUNT_REPS` sets the repetitions (default 9),
//! `SHARDCOUNT_ONLY=<substring>` picks figures by title. Without
//! cross-crate LTO, as users build:
//! `CARGO_PROFILE_BENCH_LTO=off CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 cargo bench --bench owned`.

use shardcount::{Counter, CounterMap, CounterSet, RoughCounter};
use shardcount_harness::measure::{
    bench_main, escape, opaque, run_threads, Figure, Ratio, Session,
};
use shardcount_harness::subjects::{time_adds_fresh, Stripe, Subject};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const KEYS: usize = 10_000;
/// A prime stride: the walk visits every counter once per 10,000 steps.
const STRIDE: usize = 7919;

/// `per_thread` adds of one on each of 2 threads, each walking the
/// counters from 0 by `STRIDE`; checks the total grew by the adds made.
fn lockstep(per_thread: u64, add: impl Fn(usize) + Sync, total: impl Fn() -> u64) -> Duration {
    let before = total();
    let t = run_threads(2, |_| {
        let mut i = 0;
        for _ in 0..per_thread {
            add(i);
            opaque();
            i += STRIDE;
            if i >= KEYS {
                i -= KEYS;
            }
        }
    });
    assert_eq!(total() - before, 2 * per_thread, "lost or extra counts");
    t
}

fn paired_report() {
    // The main thread takes a thread index and keeps it (the counter
    // lives as long as the process; its slot is this thread's).
    static MAIN_TOUCHED: RoughCounter = RoughCounter::new();
    MAIN_TOUCHED.inc();
    MAIN_TOUCHED.flush();

    let mut s = Session::new("owned", 9);

    s.run(
        Figure::new(
            "main holds a thread index, 2 threads: Counter::add throughput vs one padded atomic per thread",
            2,
            Ratio::Throughput,
        )
        .reference(Stripe::NAME, |n| time_adds_fresh::<Stripe>(2, n))
        .vs(Counter::NAME, |n| time_adds_fresh::<Counter>(2, n)),
    );

    if s.wants("lockstep") {
        s.run(
            Figure::new(
                "main holds a thread index, 2 threads, 10,000 counters in lockstep (i -> i + 7919): throughput vs one AtomicU64 per counter",
                2,
                Ratio::Throughput,
            )
            .reference("[AtomicU64; 10000] fetch_add", |n| {
                let a: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
                let a = escape(&a[..]);
                lockstep(
                    n,
                    // Relaxed: a count.
                    |i| {
                        a[i].fetch_add(1, Ordering::Relaxed);
                    },
                    // Relaxed: read after the join.
                    || a.iter().map(|x| x.load(Ordering::Relaxed)).sum(),
                )
            })
            .vs("CounterSet::add", |n| {
                let set = CounterSet::new(KEYS);
                let set = escape(&set);
                lockstep(n, |i| set.add(i, 1), || set.snapshot().iter().sum())
            }),
        );
    }

    s.run(
        Figure::new(
            "main holds a thread index, 2 threads, one hot key: CounterMap handle throughput vs one padded atomic per thread",
            2,
            Ratio::Throughput,
        )
        .reference(Stripe::NAME, |n| time_adds_fresh::<Stripe>(2, n))
        .vs("CounterMap handle inc", |n| {
            let m = CounterMap::new();
            let h = m.handle(&0u64);
            let h = escape(&h);
            let before = h.sum();
            let t = run_threads(2, |_| {
                for _ in 0..n {
                    h.inc();
                    opaque();
                }
            });
            assert_eq!(h.sum() - before, 2 * n, "lost or extra counts");
            t
        }),
    );

    s.finish();
    assert_eq!(MAIN_TOUCHED.sum(), 1);
}

fn main() {
    // No criterion groups: the paired section is the whole bench.
    bench_main(|| {}, paired_report);
}
