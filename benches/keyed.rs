//! Counting by key: `CounterMap<String>::inc(&str)` against what a user
//! would write instead, `DashMap<String, AtomicU64>` (`get` + `fetch_add`,
//! `entry` on a miss: the reference) and `Mutex<HashMap<String, u64>>`. A
//! paired section only (see `shardcount_harness::measure::Session`): every
//! subject runs in the same repetitions as the reference, and medians of
//! the ratios are printed. `SHARDCOUNT_REPS` sets the repetitions (default
//! 9), `SHARDCOUNT_ONLY=<substring>` picks figures by title.
//!
//! The keys: 10,000 URL-like paths (`/catalog/s<n>/item/<id>`, 20 to 25
//! bytes), drawn under a Zipf(1.0) law (the contention demo's
//! `examples/contention/zipf.rs`, ranks shuffled over the ids). One stream
//! of 65,536 draws; each thread starts at its own offset in it (half the
//! stream apart), or, in the lockstep figure, both at the start, walking
//! the same keys in the same order.
//!
//! Each map is made once per figure and holds every key before the first
//! timed run (the steady state of a long-running process: a run's misses
//! would otherwise be its first few thousand adds); every run checks that
//! its adds all landed.

#[allow(dead_code, unused_imports)] // the demo's module (and its tests); the bench needs only the draws
#[path = "../examples/contention/zipf.rs"]
mod zipf;

use shardcount::CounterMap;
use shardcount_harness::measure::{
    bench_main, escape, opaque, run_threads, Figure, Ratio, Session,
};
use shardcount_harness::peers::dashmap::DashMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use zipf::{Workload, DRAWS};

const KEYS: usize = 10_000;

/// The same ranks and draws on every run, so that runs compare.
const SEED: u64 = 12;

/// The stream: URL-like keys and the draws of worker 0.
struct Stream {
    keys: Vec<String>,
    draws: Vec<u32>,
}

impl Stream {
    fn new() -> Stream {
        let w = Workload::new(KEYS, 1.0, 1, SEED);
        Stream {
            keys: (0..KEYS)
                .map(|id| format!("/catalog/s{}/item/{id}", id % 16))
                .collect(),
            draws: w.draws.into_iter().next().expect("one worker's draws"),
        }
    }

    /// `per_thread` adds on each of `threads` threads, thread `t` from
    /// offset `t * offset` in the stream; checks that `total()` grew by
    /// every add.
    fn run(
        &self,
        threads: usize,
        offset: usize,
        per_thread: u64,
        add: impl Fn(&str) + Sync,
        total: impl Fn() -> u64,
    ) -> Duration {
        let before = total();
        let t = run_threads(threads, |t| {
            let mut at = t * offset;
            for _ in 0..per_thread {
                add(&self.keys[self.draws[at] as usize]);
                at = (at + 1) % DRAWS;
                opaque();
            }
        });
        let added = total() - before;
        assert_eq!(added, threads as u64 * per_thread, "lost or extra counts");
        t
    }
}

/// One figure: the three maps on `threads` threads, starting `offset`
/// draws apart.
fn figure<'a>(s: &'a Stream, title: String, threads: usize, offset: usize) -> Figure<'a> {
    let dash: &'a DashMap<String, AtomicU64> = Box::leak(Box::new(DashMap::new()));
    let map: &'a CounterMap<String> = Box::leak(Box::new(CounterMap::new()));
    let locked: &'a Mutex<HashMap<String, u64>> = Box::leak(Box::new(Mutex::new(HashMap::new())));
    for k in &s.keys {
        dash.insert(k.clone(), AtomicU64::new(0));
        map.handle(k.as_str());
        locked.lock().unwrap().insert(k.clone(), 0);
    }
    let (dash, map, locked) = (escape(dash), escape(map), escape(locked));
    Figure::new(title, threads, Ratio::Throughput)
        .reference("DashMap<String, AtomicU64> get + fetch_add", move |n| {
            s.run(
                threads,
                offset,
                n,
                |k| {
                    // Relaxed, here and below: a count; totals are read
                    // after the join.
                    if let Some(c) = dash.get(k) {
                        c.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    dash.entry(k.to_string())
                        .or_insert_with(|| AtomicU64::new(0))
                        .fetch_add(1, Ordering::Relaxed);
                },
                || dash.iter().map(|e| e.value().load(Ordering::Relaxed)).sum(),
            )
        })
        .vs("CounterMap<String>::inc(&str)", move |n| {
            s.run(
                threads,
                offset,
                n,
                |k| map.inc(k),
                || map.snapshot().iter().map(|e| e.1).sum::<u64>() + map.overflow(),
            )
        })
        .vs("Mutex<HashMap<String, u64>>", move |n| {
            s.run(
                threads,
                offset,
                n,
                |k| {
                    let mut m = locked.lock().unwrap();
                    // Not `entry`: it takes an owned key, a clone per add.
                    match m.get_mut(k) {
                        Some(c) => *c += 1,
                        None => {
                            m.insert(k.to_string(), 1);
                        }
                    }
                },
                || locked.lock().unwrap().values().sum(),
            )
        })
}

fn paired_report() {
    let mut session = Session::new("keyed", 9);
    let stream = Stream::new();
    for (threads, offset, how) in [
        (1, 0, "own offsets"),
        (2, DRAWS / 2, "own offsets"),
        (2, 0, "lockstep: the same keys in the same order"),
    ] {
        let title = format!(
            "{threads} thread{}, Zipf(1.0) over 10,000 URL keys, {how}: throughput vs DashMap",
            if threads == 1 { "" } else { "s" }
        );
        if session.wants(&title) {
            session.run(figure(&stream, title, threads, offset));
        }
    }
    session.finish();
}

fn main() {
    // No criterion groups: the paired section is the whole bench.
    bench_main(|| {}, paired_report);
}
