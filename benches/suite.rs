//! The cross-counter criterion suite: every kind in
//! `shardcount_harness::subjects` side by side (shardcount's counters, the
//! references and the peers).
//!
//! * `add_1thread`: cost of one increment on one thread, nobody else around.
//! * `contended/N`: N pinned threads, started through a barrier, increment one
//!   shared counter; throughput is increments per second over all threads.
//!   N = 1, 2 and 4 (4 oversubscribes this 2-core machine on purpose).
//! * `read_after_writers/T`: cost of one read (`Subject::read`: `sum`,
//!   `approx`, ...) once T threads have written, which is what sizes the
//!   per-thread and sharded kinds.
//! * `sum_vs_shards`: `fast-counter`'s `sum` with 1 to 256 shards, next to
//!   `Counter::sum` at each shard count it actually reaches when grown by
//!   real contention under caps of 1 to 256 (on 2 cores: 0, 2 and 4, since it
//!   stops growing once its writers stop colliding).
//!
//! Every measured run checks the counter afterwards (`total()`/`read()`
//! against the operations done), so a broken counter cannot post a time.
//! Loops use the harness's `opaque` rather than `black_box` (see
//! `shared/notes/measuring-here.md`).
//!
//! `cargo bench --bench suite` runs it all in a few minutes; pass a filter
//! (`cargo bench --bench suite -- contended`) for one group.

// `criterion_group!` defines an undocumented `pub fn`.
#![allow(missing_docs)]

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode,
    Throughput,
};
use crossbeam_utils::CachePadded;
use shardcount::Counter;
use shardcount_harness::measure;
use shardcount_harness::peers::fast_counter;
use shardcount_harness::subjects::{self, Subject, Visit};
use std::time::{Duration, Instant};

/// Thread counts for the contended group: alone, one per core, and twice
/// oversubscribed (on this 2-core machine).
const CONTENDED_THREADS: [usize; 3] = [1, 2, 4];

/// Writer thread counts before the read benchmarks.
const WRITERS: [usize; 4] = [1, 4, 16, 64];

/// Shard counts for `sum_vs_shards`: exact for `fast-counter`, caps for
/// `Counter` (which stops growing once its writers stop colliding, so on a
/// small machine several caps end at the same size).
const SHARDS: [usize; 5] = [1, 2, 8, 64, 256];

/// The settings of the groups that time one operation at a time.
fn per_op_settings(g: &mut BenchmarkGroup<'_, WallTime>) {
    g.warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20)
        .throughput(Throughput::Elements(1));
}

fn add_1thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("add_1thread");
    per_op_settings(&mut g);

    struct V<'a, 'b>(&'a mut BenchmarkGroup<'b, WallTime>);
    impl Visit for V<'_, '_> {
        fn visit<S: Subject>(&mut self) {
            self.0.bench_function(S::NAME, |b| {
                b.iter_custom(|iters| {
                    let s = S::new();
                    let s = measure::escape(&s);
                    // First use (thread-local slots, lazy tables) stays out
                    // of the timing.
                    s.add_one();
                    let start = Instant::now();
                    for _ in 0..iters {
                        s.add_one();
                        measure::opaque();
                    }
                    let elapsed = start.elapsed();
                    assert_eq!(s.total(), iters + 1, "{}: lost or extra counts", S::NAME);
                    elapsed
                })
            });
        }
    }
    subjects::for_each(&mut V(&mut g));
    g.finish();
}

fn contended(c: &mut Criterion) {
    for threads in CONTENDED_THREADS {
        let mut g = c.benchmark_group(format!("contended/{threads}"));
        // Flat: every sample runs the same, long enough, loop; short
        // multi-thread loops give nonsense here.
        g.sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(10)
            // One iteration = one increment by each thread.
            .throughput(Throughput::Elements(threads as u64));

        struct V<'a, 'b>(&'a mut BenchmarkGroup<'b, WallTime>, usize);
        impl Visit for V<'_, '_> {
            fn visit<S: Subject>(&mut self) {
                let threads = self.1;
                self.0.bench_function(S::NAME, |b| {
                    b.iter_custom(|iters| {
                        // Padded: only the counter's own layout is measured.
                        let s = CachePadded::new(S::new());
                        let elapsed = measure::run_threads(threads, |_| {
                            for _ in 0..iters {
                                s.add_one();
                                measure::opaque();
                            }
                        });
                        assert_eq!(
                            s.total(),
                            iters * threads as u64,
                            "{} at {threads} threads: lost or extra counts",
                            S::NAME
                        );
                        elapsed
                    })
                });
            }
        }
        subjects::for_each(&mut V(&mut g, threads));
        g.finish();
    }
}

/// Increments each of `writers` threads makes before a read benchmark.
const PRELOAD: u64 = 50_000;

fn read_after_writers(c: &mut Criterion) {
    let mut g = c.benchmark_group("read_after_writers");
    per_op_settings(&mut g);

    struct V<'a, 'b>(&'a mut BenchmarkGroup<'b, WallTime>);
    impl Visit for V<'_, '_> {
        fn visit<S: Subject>(&mut self) {
            for writers in WRITERS {
                let s = S::new();
                // Concurrent writers, so the sharded kinds see contention and
                // grow as they would in use.
                measure::run_threads(writers, |_| {
                    for _ in 0..PRELOAD {
                        s.add_one();
                    }
                });
                let expect = PRELOAD * writers as u64;
                assert_eq!(s.total(), expect, "{}: lost or extra counts", S::NAME);
                self.0
                    .bench_with_input(BenchmarkId::new(S::NAME, writers), &s, |b, s| {
                        b.iter_custom(|iters| {
                            let mut acc = 0u64;
                            let start = Instant::now();
                            for _ in 0..iters {
                                acc = acc.wrapping_add(s.read());
                                measure::opaque();
                            }
                            let elapsed = start.elapsed();
                            // Idle, so every read must have been exact.
                            assert_eq!(acc, expect.wrapping_mul(iters), "{}: bad read", S::NAME);
                            elapsed
                        })
                    });
            }
        }
    }
    subjects::for_each(&mut V(&mut g));
    g.finish();
}

/// A `Counter` capped at `cap` shards, grown towards it by real contention:
/// rounds of oversubscribed writers until it reaches the cap or a time
/// budget runs out. Returns the counter and its total.
fn grown_counter(cap: usize) -> (Counter, u64) {
    let c = Counter::with_max_shards(cap);
    let threads = (2 * measure::cores()).max(4);
    let budget = Instant::now() + Duration::from_secs(1);
    let mut total = 0;
    while c.shards() < cap && Instant::now() < budget {
        measure::run_threads(threads, |_| {
            for _ in 0..PRELOAD {
                c.inc();
            }
        });
        total += PRELOAD * threads as u64;
    }
    (c, total)
}

fn sum_vs_shards(c: &mut Criterion) {
    let mut g = c.benchmark_group("sum_vs_shards");
    per_op_settings(&mut g);

    let mut measured = Vec::new();
    for shards in SHARDS {
        // Labelled by the shard count reached (0: still a single atomic),
        // each size once.
        let (counter, total) = grown_counter(shards);
        let reached = counter.shards();
        eprintln!("sum_vs_shards: Counter capped at {shards} shards grew to {reached}");
        if !measured.contains(&reached) {
            measured.push(reached);
            bench_sum(&mut g, "Counter", reached, total, || counter.sum());
        }

        let fc = fast_counter::ConcurrentCounter::new(shards);
        fc.add(7);
        bench_sum(&mut g, "fast-counter", shards, 7, || fc.sum() as u64);
    }
    g.finish();
}

fn bench_sum(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    shards: usize,
    expect: u64,
    sum: impl Fn() -> u64,
) {
    g.bench_function(BenchmarkId::new(name, shards), |b| {
        b.iter_custom(|iters| {
            let mut acc = 0u64;
            let start = Instant::now();
            for _ in 0..iters {
                acc = acc.wrapping_add(sum());
                measure::opaque();
            }
            let elapsed = start.elapsed();
            assert_eq!(acc, expect.wrapping_mul(iters), "{name}: bad sum");
            elapsed
        })
    });
}

criterion_group!(
    suite,
    add_1thread,
    contended,
    read_after_writers,
    sum_vs_shards
);
criterion_main!(suite);
