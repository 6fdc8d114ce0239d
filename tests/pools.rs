#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! Merges complete while a real pool's workers are parked, not joined.
//! On x86_64 Linux (sleeping threads read from `/proc`), with no call at
//! all: a tokio runtime with a trickle of tasks, and a rayon pool. Without
//! that (each test of that path runs itself again in a child process with
//! `SHARDCOUNT_QUIESCE_ONLY` set): a tokio runtime whose workers call `quiesce` as they park, and a
//! rayon pool after a `broadcast` of it; the same bursts without the call
//! leave the merges pending (each test checks that first), so the call is
//! what completes them. Totals exact throughout.

use shardcount::{Counter, CounterSet, Histogram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "common/fallback.rs"]
mod fallback;

const WORKERS: usize = 4;
const TASKS: u64 = 400;
const ADDS: u64 = 500;

/// A `Counter`, a `CounterSet` of 1,000 and a `Histogram`, split as a
/// burst on a large machine would grow them.
struct Subjects {
    c: Counter,
    s: CounterSet,
    h: Histogram,
}

impl Subjects {
    fn new() -> Arc<Subjects> {
        let x = Subjects {
            c: Counter::new(),
            s: CounterSet::new(1000),
            h: Histogram::new(),
        };
        x.c.split(16);
        x.s.split(16);
        x.h.split(16);
        Arc::new(x)
    }

    /// One task's adds: `ADDS` to each subject.
    fn task(&self, t: u64) {
        for i in 0..ADDS {
            self.c.inc();
            self.s.add(((t * ADDS + i) % 1000) as usize, 1);
            self.h.record(i);
        }
    }

    /// Merges all three (no short cut: each is tried); `true` if all are
    /// back to their idle form.
    fn merge(&self) -> bool {
        let (c, s, h) = (self.c.merge(), self.s.merge(), self.h.merge());
        c && s && h
    }

    /// Tries `merge` every millisecond for `within`.
    fn merged_within(&self, within: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.merge() {
                return true;
            }
            if start.elapsed() > within {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Every count exact after `tasks` tasks, and no shard left.
    fn assert_exact_and_merged(&self, tasks: u64) {
        let adds = tasks * ADDS;
        assert_eq!(self.c.sum(), adds);
        assert_eq!(self.s.snapshot().iter().sum::<u64>(), adds);
        assert_eq!(self.h.count(), adds);
        assert_eq!(
            self.h.sum(),
            tasks * (ADDS * (ADDS - 1) / 2),
            "histogram sum"
        );
        assert_eq!(
            (self.c.shards(), self.s.shards(), self.h.shards()),
            (0, 0, 0)
        );
    }
}

/// Runs `TASKS` tasks on the runtime and waits for them.
fn tokio_burst(rt: &tokio::runtime::Runtime, x: &Arc<Subjects>) {
    rt.block_on(async {
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let x = Arc::clone(x);
                tokio::spawn(async move { x.task(t) })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
}

fn runtime(quiesce_on_park: bool) -> tokio::runtime::Runtime {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(WORKERS);
    if quiesce_on_park {
        b.on_thread_park(shardcount::quiesce);
    }
    b.build().unwrap()
}

/// Adds to `other` from one task every 20 ms on `rt` (waking a worker
/// that parks again after it) while `f` runs; returns what `f` returns.
fn with_trickle<R>(rt: &tokio::runtime::Runtime, f: impl FnOnce() -> R) -> R {
    let other = Arc::new(Counter::new());
    other.split(4);
    let stop = AtomicBool::new(false);
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let other = Arc::clone(&other);
                rt.spawn(async move { other.inc() });
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        // The trickle runs before `f` starts, and all along.
        let start = Instant::now();
        while other.sum() < 2 && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let r = f();
        stop.store(true, Ordering::Relaxed);
        r
    });
    assert!(other.sum() >= 2, "the trickle never ran");
    r
}

/// Sleepers read, no hook: a tokio runtime's parked workers (with a
/// trickle waking one every 20 ms) and a rayon pool's sleeping workers
/// hold no merge, and adding again after the merges stays exact.
#[test]
fn merges_complete_while_tokio_and_rayon_workers_park_without_any_call() {
    use rayon::prelude::*;
    // On x86_64 Linux sleepers are read (this machine's CI relies on
    // it); elsewhere the fallback's tests below are the ones that apply.
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    assert!(
        !shardcount::merges_need_quiesce(),
        "sleepers not read on x86_64 Linux: this test shows nothing here"
    );
    if shardcount::merges_need_quiesce() {
        return;
    }
    let rt = runtime(false);
    let x = Subjects::new();
    tokio_burst(&rt, &x);
    let merged = with_trickle(&rt, || x.merged_within(Duration::from_secs(60)));
    assert!(merged, "still pending a minute after the burst");
    x.assert_exact_and_merged(TASKS);
    tokio_burst(&rt, &x);
    assert!(x.merged_within(Duration::from_secs(60)));
    x.assert_exact_and_merged(2 * TASKS);
    drop(rt);

    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(WORKERS)
        .build()
        .unwrap();
    let x = Subjects::new();
    let burst = |x: &Subjects| pool.install(|| (0..TASKS).into_par_iter().for_each(|t| x.task(t)));
    burst(&x);
    assert!(x.merged_within(Duration::from_secs(60)));
    x.assert_exact_and_merged(TASKS);
    burst(&x);
    assert!(x.merged_within(Duration::from_secs(60)));
    x.assert_exact_and_merged(2 * TASKS);
}

#[test]
fn merges_complete_while_tokio_workers_that_quiesce_on_park_sleep() {
    if !fallback::in_fallback() {
        fallback::run_in_fallback("merges_complete_while_tokio_workers_that_quiesce_on_park_sleep");
        return;
    }
    // The control: workers that park without the call hold every merge.
    let rt = runtime(false);
    let x = Subjects::new();
    tokio_burst(&rt, &x);
    assert!(
        !x.merged_within(Duration::from_millis(200)),
        "merged with parked workers that never acknowledged: the test shows nothing"
    );
    drop(rt); // its workers exit, giving their ids back
    assert!(x.merged_within(Duration::from_secs(60)));
    x.assert_exact_and_merged(TASKS);

    let rt = runtime(true);
    let x = Subjects::new();
    tokio_burst(&rt, &x);
    let merged = with_trickle(&rt, || x.merged_within(Duration::from_secs(60)));
    assert!(merged, "still pending a minute after the burst");
    x.assert_exact_and_merged(TASKS);
    // The workers add again, to the same counters, exactly.
    tokio_burst(&rt, &x);
    assert!(x.merged_within(Duration::from_secs(60)));
    x.assert_exact_and_merged(2 * TASKS);
}

#[test]
fn merges_complete_while_rayon_workers_sleep_after_a_broadcast_of_quiesce() {
    use rayon::prelude::*;
    if !fallback::in_fallback() {
        fallback::run_in_fallback(
            "merges_complete_while_rayon_workers_sleep_after_a_broadcast_of_quiesce",
        );
        return;
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(WORKERS)
        .build()
        .unwrap();
    let x = Subjects::new();
    let burst = |x: &Subjects| pool.install(|| (0..TASKS).into_par_iter().for_each(|t| x.task(t)));
    burst(&x);
    assert!(
        !x.merged_within(Duration::from_millis(200)),
        "merged with sleeping workers that never acknowledged: the test shows nothing"
    );
    pool.broadcast(|_| shardcount::quiesce());
    assert!(
        x.merged_within(Duration::from_secs(60)),
        "still pending a minute after every worker quiesced"
    );
    x.assert_exact_and_merged(TASKS);
    burst(&x);
    pool.broadcast(|_| shardcount::quiesce());
    assert!(x.merged_within(Duration::from_secs(60)));
    x.assert_exact_and_merged(2 * TASKS);
}
