//! `RoughCounter` against a shared `AtomicU64`.
//!
//! * `rough_1t`: one thread, `add` vs `fetch_add` (target ≤ 0.10× its cost).
//! * `rough_2t`: two pinned threads, aggregate throughput (target ≥ 45×).
//! * `rough_read`: `approx()` vs `AtomicU64::load` (target ≤ 1.5×).
//! * `rough_sum`: `sum()` with 1, 4, 16, 64 parked threads holding slots.
//!
//! After the criterion groups, a paired section prints medians of ratios
//! measured in the same repetition (see `common`), with runs long enough
//! (≥ 100 ms for the non-atomic loops) to be meaningful on two threads.
//! `SHARDCOUNT_PAIRED=skip` skips it, `=only` runs only it;
//! `SHARDCOUNT_REPS` sets its repetitions (default 7).
//! Every run checks the count, so removed or broken work cannot post a time.
mod common;

use common::{median, opaque, run_threads};
use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use shardcount::RoughCounter;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

static ATOMIC: AtomicU64 = AtomicU64::new(0);
static ROUGH: RoughCounter = RoughCounter::new();

#[inline(never)]
fn atomic_loop(n: u64) -> Duration {
    let before = ATOMIC.load(Ordering::Relaxed);
    let start = Instant::now();
    for _ in 0..n {
        ATOMIC.fetch_add(1, Ordering::Relaxed);
        opaque();
    }
    let t = start.elapsed();
    assert!(ATOMIC.load(Ordering::Relaxed).wrapping_sub(before) >= n);
    t
}

#[inline(never)]
fn rough_loop(n: u64) -> Duration {
    let before = ROUGH.sum();
    let start = Instant::now();
    for _ in 0..n {
        ROUGH.inc();
        opaque();
    }
    let t = start.elapsed();
    assert!(ROUGH.sum().wrapping_sub(before) >= n);
    t
}

std::thread_local! {
    static LOCAL: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The floor: a plain add to a thread-local `Cell`, no atomics at all.
#[inline(never)]
fn local_loop(n: u64) -> Duration {
    let before = LOCAL.with(|c| c.get());
    let start = Instant::now();
    for _ in 0..n {
        LOCAL.with(|c| c.set(c.get() + 1));
        opaque();
    }
    let t = start.elapsed();
    assert_eq!(LOCAL.with(|c| c.get()) - before, n);
    t
}

fn per_op(t: Duration, n: u64) -> f64 {
    t.as_secs_f64() / n as f64
}

/// Medians of paired ratios; printed, since criterion has no paired mode.
fn paired_ratios() {
    let reps = common::reps(7);
    const N_ATOMIC: u64 = 20_000_000;
    const N_ROUGH: u64 = 300_000_000;
    // Warm-up: first use of ROUGH on this thread takes the slow path.
    rough_loop(1_000_000);
    atomic_loop(1_000_000);

    let mut r1 = Vec::new();
    let mut floor1 = Vec::new();
    for _ in 0..reps {
        let a = per_op(atomic_loop(N_ATOMIC), N_ATOMIC);
        let r = per_op(rough_loop(N_ROUGH), N_ROUGH);
        let f = per_op(local_loop(N_ROUGH), N_ROUGH);
        r1.push(r / a);
        floor1.push(f / a);
    }
    println!(
        "paired ratios: 1T RoughCounter::inc cost / AtomicU64::fetch_add cost = {:.3}x (median of {reps})",
        median(&mut r1)
    );
    println!(
        "paired ratios: (floor) 1T thread_local! Cell<u64> add cost / AtomicU64::fetch_add cost = {:.3}x (median of {reps})",
        median(&mut floor1)
    );

    let mut r2 = Vec::new();
    for _ in 0..reps {
        let before = ATOMIC.load(Ordering::Relaxed);
        let ta = run_threads(2, |_| {
            for _ in 0..N_ATOMIC / 4 {
                ATOMIC.fetch_add(1, Ordering::Relaxed);
                opaque();
            }
        });
        assert_eq!(ATOMIC.load(Ordering::Relaxed) - before, N_ATOMIC / 2);
        let before = ROUGH.sum();
        let tr = run_threads(2, |_| {
            for _ in 0..N_ROUGH {
                ROUGH.inc();
                opaque();
            }
        });
        // run_threads uses a scope; the exit folds may still be running,
        // but sum() does not depend on them.
        assert_eq!(ROUGH.sum() - before, 2 * N_ROUGH);
        // Throughput ratio: ops per second, rough over atomic.
        r2.push(per_op(ta, N_ATOMIC / 2) / per_op(tr, 2 * N_ROUGH));
    }
    println!(
        "paired ratios: 2T aggregate throughput RoughCounter / AtomicU64 = {:.1}x (median of {reps})",
        median(&mut r2)
    );

    let c = RoughCounter::from(5);
    let c = common::escape(&c);
    let mut r3 = Vec::new();
    const N_READ: u64 = 200_000_000;
    for _ in 0..reps {
        let start = Instant::now();
        let mut acc = 0u64;
        for _ in 0..N_READ {
            acc = acc.wrapping_add(ATOMIC.load(Ordering::Relaxed));
            opaque();
        }
        let tl = start.elapsed();
        assert_ne!(acc, 1);
        let start = Instant::now();
        let mut acc = 0u64;
        for _ in 0..N_READ {
            acc = acc.wrapping_add(c.approx());
            opaque();
        }
        let ta = start.elapsed();
        assert_eq!(acc, 5 * N_READ);
        r3.push(ta.as_secs_f64() / tl.as_secs_f64());
    }
    println!(
        "paired ratios: approx() cost / AtomicU64::load cost = {:.2}x (median of {reps})",
        median(&mut r3)
    );
}

fn one_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("rough_1t");
    g.bench_function("atomic_fetch_add", |b| b.iter_custom(atomic_loop));
    g.bench_function("rough_inc", |b| b.iter_custom(rough_loop));
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("rough_2t");
    // One iteration = one op on each of the two threads.
    g.throughput(Throughput::Elements(2));
    g.bench_function("atomic_fetch_add", |b| {
        b.iter_custom(|n| {
            let before = ATOMIC.load(Ordering::Relaxed);
            let t = run_threads(2, |_| {
                for _ in 0..n {
                    ATOMIC.fetch_add(1, Ordering::Relaxed);
                    opaque();
                }
            });
            assert_eq!(ATOMIC.load(Ordering::Relaxed) - before, 2 * n);
            t
        });
    });
    g.bench_function("rough_inc", |b| {
        b.iter_custom(|n| {
            let before = ROUGH.sum();
            let t = run_threads(2, |_| {
                for _ in 0..n {
                    ROUGH.inc();
                    opaque();
                }
            });
            assert_eq!(ROUGH.sum() - before, 2 * n);
            t
        });
    });
    g.finish();
}

fn reads(c: &mut Criterion) {
    let mut g = c.benchmark_group("rough_read");
    let rough = RoughCounter::from(5);
    g.bench_function("atomic_load", |b| {
        b.iter_custom(|n| {
            let start = Instant::now();
            let mut acc = 0u64;
            for _ in 0..n {
                acc = acc.wrapping_add(ATOMIC.load(Ordering::Relaxed));
                opaque();
            }
            let t = start.elapsed();
            assert_ne!(acc, 1);
            t
        });
    });
    g.bench_function("rough_approx", |b| {
        b.iter_custom(|n| {
            let start = Instant::now();
            let mut acc = 0u64;
            for _ in 0..n {
                acc = acc.wrapping_add(rough.approx());
                opaque();
            }
            let t = start.elapsed();
            assert_eq!(acc, 5 * n);
            t
        });
    });
    g.finish();
}

/// `sum()` while `k` parked threads each hold a slot.
fn sum_vs_slots(c: &mut Criterion) {
    let mut g = c.benchmark_group("rough_sum");
    for k in [1usize, 4, 16, 64] {
        let counter = Arc::new(RoughCounter::new());
        let ready = Arc::new(Barrier::new(k + 1));
        let mut stops = Vec::new();
        let hs: Vec<_> = (0..k)
            .map(|_| {
                let (tx, rx) = mpsc::channel::<()>();
                stops.push(tx);
                let (counter, ready) = (Arc::clone(&counter), Arc::clone(&ready));
                std::thread::spawn(move || {
                    counter.inc();
                    ready.wait();
                    let _ = rx.recv(); // parked, holding its slot
                })
            })
            .collect();
        ready.wait();
        assert_eq!(counter.live_slots(), k);
        g.bench_with_input(BenchmarkId::from_parameter(k), &k, |b, &k| {
            b.iter_custom(|n| {
                let start = Instant::now();
                for _ in 0..n {
                    assert_eq!(counter.sum(), k as u64);
                    opaque();
                }
                start.elapsed()
            });
        });
        drop(stops);
        for h in hs {
            h.join().unwrap();
        }
    }
    g.finish();
}

criterion_group!(benches, one_thread, two_threads, reads, sum_vs_slots);

fn main() {
    common::bench_main(benches, paired_ratios);
}
