#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! `MaxCounter` and `MinCounter` on real threads and against a plain model.

use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use shardcount::{MaxCounter, MinCounter};
use std::sync::atomic::{AtomicBool, Ordering};

const THREADS: u64 = 8;

fn values(t: u64, ops: usize) -> Vec<u64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xa11 + t);
    // Rising values with noise: many raises, from every thread.
    (0..ops as u64)
        .map(|i| i * 16 + rng.gen_range(0..64))
        .collect()
}

#[test]
fn eight_threads_match_the_sequential_max_and_min() {
    let max = MaxCounter::new();
    let min = MinCounter::new();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (max, min) = (&max, &min);
            s.spawn(move || {
                for v in values(t, 50_000) {
                    max.record(v);
                    min.record(u64::MAX - v);
                }
            });
        }
    });
    let all: Vec<u64> = (0..THREADS).flat_map(|t| values(t, 50_000)).collect();
    let want = *all.iter().max().unwrap();
    assert_eq!(max.get(), want);
    assert_eq!(min.get(), u64::MAX - want);
}

/// Raises from every thread at once spread the maximum over shards, and it
/// stays exact.
#[test]
fn colliding_raises_grow_shards_and_stay_exact() {
    let max = MaxCounter::new();
    let mut top = 0;
    // Growth needs threads running side by side; a loaded host may run them
    // in turns for a while, so keep going up to a patience (a liveness
    // bound, not a speed assertion).
    let start = std::time::Instant::now();
    let mut round = 0u64;
    while start.elapsed() < std::time::Duration::from_secs(60) {
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let max = &max;
                s.spawn(move || {
                    for i in 0..20_000u64 {
                        max.record((round * 20_000 + i) * THREADS + t);
                    }
                });
            }
        });
        top = (round * 20_000 + 19_999) * THREADS + THREADS - 1;
        assert_eq!(max.get(), top);
        if max.shards() > 0 {
            break;
        }
        round += 1;
    }
    assert!(max.shards() > 0, "colliding raises never grew");
    assert_eq!(max.take(), top);
    assert_eq!(max.get(), 0);
}

/// Takes racing records: every value is at most the take that covered it;
/// the maximum over all takes and the final value is the maximum recorded.
#[test]
fn takes_racing_records_lose_nothing() {
    let max = MaxCounter::new();
    let done = AtomicBool::new(false);
    let taken = std::thread::scope(|s| {
        let recorders: Vec<_> = (0..THREADS - 1)
            .map(|t| {
                let max = &max;
                s.spawn(move || values(t, 50_000).into_iter().for_each(|v| max.record(v)))
            })
            .collect();
        let taker = s.spawn(|| {
            let mut best = 0;
            let mut takes = 0;
            while !done.load(Ordering::Relaxed) || takes < 10 {
                best = best.max(max.take());
                takes += 1;
            }
            best
        });
        for r in recorders {
            r.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        taker.join().unwrap()
    });
    let want = (0..THREADS - 1)
        .flat_map(|t| values(t, 50_000))
        .max()
        .unwrap();
    assert_eq!(taken.max(max.get()), want);
}

#[test]
fn are_send_sync_default_and_debug() {
    fn check<T: Send + Sync + Default + std::fmt::Debug>() {}
    check::<MaxCounter>();
    check::<MinCounter>();
    assert_eq!(
        format!("{:?}", MinCounter::default()),
        format!("MinCounter {{ value: {}, shards: 0 }}", u64::MAX)
    );
}

#[derive(Clone, Debug)]
enum Op {
    Record(u64),
    Take,
    Reset,
    Get,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop_oneof![0..1000u64, any::<u64>(), Just(0), Just(u64::MAX)].prop_map(Op::Record),
        1 => Just(Op::Take),
        1 => Just(Op::Reset),
        2 => Just(Op::Get),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Against an `Option<u64>` of the values recorded since the last take.
    #[test]
    fn match_a_plain_model(ops in prop::collection::vec(op(), 0..64)) {
        let max = MaxCounter::new();
        let min = MinCounter::new();
        let mut seen: Option<(u64, u64)> = None;
        for op in ops {
            match op {
                Op::Record(v) => {
                    max.record(v);
                    min.record(v);
                    seen = Some(seen.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))));
                }
                Op::Take => {
                    prop_assert_eq!(max.take(), seen.map_or(0, |s| s.1));
                    prop_assert_eq!(min.take(), seen.map_or(u64::MAX, |s| s.0));
                    seen = None;
                }
                Op::Reset => { max.reset(); min.reset(); seen = None; }
                Op::Get => {}
            }
            prop_assert_eq!(max.get(), seen.map_or(0, |s| s.1));
            prop_assert_eq!(min.get(), seen.map_or(u64::MAX, |s| s.0));
        }
    }
}
