#![cfg(not(shardcount_loom))] // real threads and std atomics
//! `Histogram` on real threads and against plain references: 8 threads
//! recording match a sequential bucket count; takes racing records plus
//! the final snapshot equal every record; quantiles of 1M-sample uniform
//! and log-normal distributions are within the documented 1/32.

use rand::{Rng, SeedableRng};
use shardcount::{Histogram, HistogramSnapshot};
use std::sync::atomic::{AtomicBool, Ordering};

const THREADS: u64 = 8;

/// Thread `t`'s values: every magnitude (a random top bit, random bits
/// below), from its own seed, so a reference can replay them.
fn plan(t: u64, ops: usize) -> Vec<u64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x415 + t);
    (0..ops)
        .map(|_| {
            let bits = rng.gen_range(0..=64u32);
            match bits {
                0 => 0,
                _ => {
                    let top = 1u64 << (bits - 1);
                    top | (rng.gen::<u64>() & (top - 1))
                }
            }
        })
        .collect()
}

/// The bucket counts and the sum a snapshot of `values` must show, found
/// by searching the buckets' own bounds (a plain reference for the index).
fn reference(shape: &HistogramSnapshot, values: impl Iterator<Item = u64>) -> (Vec<u64>, u64) {
    let bounds: Vec<(u64, u64)> = shape.buckets().map(|b| (b.low, b.high)).collect();
    let mut counts = vec![0u64; bounds.len()];
    let mut sum = 0u64;
    for v in values {
        let i = bounds.iter().position(|&(l, h)| l <= v && v <= h).unwrap();
        counts[i] += 1;
        sum = sum.wrapping_add(v);
    }
    (counts, sum)
}

fn counts(s: &HistogramSnapshot) -> Vec<u64> {
    s.buckets().map(|b| b.count).collect()
}

fn eight_threads_match(h: &Histogram) {
    let ops = 20_000;
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            sc.spawn(move || plan(t, ops).into_iter().for_each(|v| h.record(v)));
        }
    });
    let got = h.snapshot();
    let (want, sum) = reference(&got, (0..THREADS).flat_map(|t| plan(t, ops)));
    assert_eq!(counts(&got), want);
    assert_eq!(got.sum(), sum);
    assert_eq!(h.count(), THREADS * ops as u64);
    assert_eq!(h.sum(), sum);
}

#[test]
fn eight_threads_every_bucket_exact() {
    eight_threads_match(&Histogram::new());
    eight_threads_match(&Histogram::with_bounds(&[
        0,
        1,
        1000,
        1 << 20,
        1 << 40,
        u64::MAX - 1,
    ]));
}

/// All threads on one bucket: the histogram grows rows (threads then own
/// rows or share probed ones) and every record is still counted once.
#[test]
fn a_hot_bucket_grows_rows_and_stays_exact() {
    let h = Histogram::new();
    let start = std::time::Instant::now();
    let mut rounds = 0u64;
    // Growth needs threads running side by side; a loaded host may run
    // them in turns for a while: a liveness bound, not a speed assertion.
    while h.shards() == 0 && start.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::scope(|sc| {
            for _ in 0..THREADS {
                sc.spawn(|| (0..20_000).for_each(|_| h.record(1000)));
            }
        });
        rounds += 1;
    }
    assert!(
        h.shards() > 0,
        "8 threads on one bucket never grew the rows"
    );
    // Once grown, a mix on the rows.
    eight_threads_match_after(&h, rounds * THREADS * 20_000);
}

/// As `eight_threads_match`, on a histogram that already holds `hot`
/// records of 1000.
fn eight_threads_match_after(h: &Histogram, hot: u64) {
    let ops = 20_000;
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            sc.spawn(move || plan(t, ops).into_iter().for_each(|v| h.record(v)));
        }
    });
    let got = h.snapshot();
    let hot_values = std::iter::repeat_n(1000, hot as usize);
    let (want, sum) = reference(
        &got,
        (0..THREADS).flat_map(|t| plan(t, ops)).chain(hot_values),
    );
    assert_eq!(counts(&got), want);
    assert_eq!(got.sum(), sum);
}

#[test]
fn takes_racing_records_plus_the_final_snapshot_equal_every_record() {
    for h in [Histogram::new(), Histogram::with_bounds(&[10, 1 << 30])] {
        let ops = 50_000;
        let done = AtomicBool::new(false);
        let mut all = h.snapshot();
        let mut takes = 0;
        std::thread::scope(|sc| {
            let recorders: Vec<_> = (0..4)
                .map(|t| {
                    let h = &h;
                    sc.spawn(move || plan(t, ops).into_iter().for_each(|v| h.record(v)))
                })
                .collect();
            let taker = sc.spawn(|| {
                let mut got = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    got.push(h.take());
                }
                got
            });
            recorders.into_iter().for_each(|r| r.join().unwrap());
            done.store(true, Ordering::Relaxed);
            for t in taker.join().unwrap() {
                all.merge(&t);
                takes += 1;
            }
        });
        all.merge(&h.snapshot());
        let (want, sum) = reference(&all, (0..4).flat_map(|t| plan(t, ops)));
        assert_eq!(counts(&all), want, "after {takes} takes");
        assert_eq!(all.sum(), sum);
    }
}

/// The exact `q`-quantile as the docs define it: the sample of rank
/// `ceil(q * n)`, at least 1, in increasing order.
fn exact(sorted: &[u64], q: f64) -> u64 {
    let n = sorted.len() as u64;
    let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
    sorted[rank as usize - 1]
}

fn quantiles_within_a_32nd(mut samples: Vec<u64>, what: &str) {
    let h = Histogram::new();
    samples.iter().for_each(|&v| h.record(v));
    samples.sort_unstable();
    let s = h.snapshot();
    assert_eq!(s.count(), samples.len() as u64);
    for q in [
        0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999, 1.0,
    ] {
        let want = exact(&samples, q);
        let got = s.quantile(q).unwrap();
        assert!(
            u128::from(got.abs_diff(want)) * 32 <= u128::from(want),
            "{what}: q = {q}: {got} is not within 1/32 of {want}"
        );
    }
}

#[test]
fn quantiles_of_a_uniform_million_are_within_a_32nd() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(25);
    let samples = (0..1_000_000)
        .map(|_| rng.gen_range(0..1_000_000_000u64))
        .collect();
    quantiles_within_a_32nd(samples, "uniform");
}

#[test]
fn quantiles_of_a_log_normal_million_are_within_a_32nd() {
    // exp(N(ln 1e6, 1.5)): latencies around a millisecond in nanoseconds,
    // normals by Box-Muller from a seeded generator.
    let mut rng = rand::rngs::StdRng::seed_from_u64(2025);
    let samples = (0..1_000_000)
        .map(|_| {
            let (u1, u2): (f64, f64) = (1.0 - rng.gen::<f64>(), rng.gen());
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            (1e6f64.ln() + 1.5 * z).exp().round() as u64
        })
        .collect();
    quantiles_within_a_32nd(samples, "log-normal");
}

#[test]
fn quantile_bounds_name_a_bad_q() {
    let s = Histogram::new().snapshot();
    for q in [-0.1, 1.5, f64::NAN] {
        let e = std::panic::catch_unwind(|| s.quantile(q)).unwrap_err();
        let msg = e.downcast_ref::<String>().unwrap();
        assert!(msg.contains(&format!("got {q}")), "{msg}");
    }
}

#[test]
fn record_secs_names_a_negative_or_nan_duration_and_saturates_above() {
    let h = Histogram::new();
    for s in [-1.0, f64::NAN] {
        let e = std::panic::catch_unwind(|| h.record_secs(s)).unwrap_err();
        let msg = e.downcast_ref::<String>().unwrap();
        assert!(msg.contains(&format!("got {s}")), "{msg}");
    }
    assert_eq!(h.count(), 0, "a refused value was counted");
    h.record_secs(f64::INFINITY);
    h.record_duration(std::time::Duration::MAX);
    let s = h.snapshot();
    assert_eq!(s.buckets().last().unwrap().count, 2);
}

/// `snapshot_into` reads what `snapshot` reads, on the base row and on
/// owned rows after contention and a take, reusing its buffer.
#[test]
fn snapshot_into_matches_snapshot_and_reuses_its_buffer() {
    let h = shardcount::Histogram::new();
    let mut out = h.snapshot();
    h.snapshot_into(&mut out);
    assert_eq!((out.count(), out.sum()), (0, 0));
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let h = &h;
            s.spawn(move || (0..20_000u64).for_each(|i| h.record(i * 3 + t)));
        }
    });
    let _ = h.take();
    (0..1000u64).for_each(|i| h.record(i * 1000));
    h.snapshot_into(&mut out);
    let fresh = h.snapshot();
    assert_eq!((out.count(), out.sum()), (fresh.count(), fresh.sum()));
    assert_eq!(out.count(), 1000);
    let (a, b): (Vec<_>, Vec<_>) = (out.buckets().collect(), fresh.buckets().collect());
    assert_eq!(a, b);
}

/// Timers are recorded exactly once wherever they end: a `time` whose
/// closure panics (recorded while unwinding), timers sent to other threads
/// and dropped there, and timers dropped from a thread-local destructor
/// after the crate's own per-thread state is gone, while the histogram is
/// split and merged.
#[test]
fn timers_record_once_through_panics_other_threads_and_thread_exit() {
    use shardcount::HistogramTimer;
    use std::cell::RefCell;
    static H: Histogram = Histogram::new();
    struct Late(RefCell<Vec<HistogramTimer<'static>>>);
    impl Drop for Late {
        fn drop(&mut self) {
            self.0.borrow_mut().clear();
        }
    }
    std::thread_local! {
        static LATE: Late = const { Late(RefCell::new(Vec::new())) };
    }
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                H.split(2);
                H.merge();
            }
        });
        let (tx, rx) = std::sync::mpsc::channel::<HistogramTimer<'static>>();
        let dropper = s.spawn(move || rx.into_iter().count());
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let tx = tx.clone();
                s.spawn(move || {
                    // Registered before the crate's thread-locals, so
                    // dropped after them.
                    LATE.with(|_| {});
                    for i in 0..500 {
                        let r = std::panic::catch_unwind(|| H.time(|| assert!(i % 50 != 0)));
                        assert_eq!(r.is_err(), i % 50 == 0);
                        tx.send(H.start_timer()).unwrap();
                        LATE.with(|l| l.0.borrow_mut().push(H.start_timer()));
                        H.start_timer().discard();
                    }
                })
            })
            .collect();
        drop(tx);
        workers.into_iter().for_each(|w| w.join().unwrap());
        assert_eq!(dropper.join().unwrap(), 4 * 500);
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(H.count(), 4 * 500 * 3);
    assert_eq!(H.snapshot().count(), 4 * 500 * 3);
}
