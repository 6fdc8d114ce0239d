#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! `local_counter!`: the sequential spec, exactness with real threads, and
//! no count lost at thread exit.

use shardcount::{local_counter, LocalCounter};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;

fn assert_sync<T: Sync>(_: &T) {}

#[test]
fn sequential_spec() {
    local_counter!(static C, batch = 10);
    assert_eq!((C.sum(), C.approx(), C.batch()), (0, 0, 10));
    C.inc(); // a thread's first add folds at once
    assert_eq!((C.sum(), C.approx()), (1, 1));
    for _ in 0..9 {
        C.inc();
    }
    assert_eq!((C.sum(), C.approx()), (10, 1), "9 pending, below the batch");
    C.inc(); // the 10th since the last fold
    assert_eq!((C.sum(), C.approx()), (11, 11));
    C.add(25); // past a whole batch at once
    assert_eq!((C.sum(), C.approx()), (36, 36));
    C.add(3);
    C.flush();
    assert_eq!((C.sum(), C.approx()), (39, 39));
    C.sub(4);
    assert_eq!((C.sum(), C.approx()), (35, 35));
    C.add(u64::MAX); // -1, through the tally
    assert_eq!(C.sum(), 34);
    assert_eq!(format!("{C:?}"), "LocalCounter { sum: 34, approx: 34 }");
    C.sub(40);
    C.dec();
    assert_eq!(
        (C.sum(), C.sum_i64(), C.approx()),
        (-7i64 as u64, -7, -7i64 as u64)
    );
    C.add(7);
    C.flush();
    assert_eq!((C.sum(), C.sum_i64()), (0, 0));
    assert_sync(&C);
    assert_eq!(LocalCounter::<()>::DEFAULT_BATCH, 65_536);
}

#[test]
fn threads_exact_after_join() {
    local_counter!(static C, batch = 64);
    const THREADS: u64 = 8;
    const PER: u64 = 100_003;
    let start = Barrier::new(THREADS as usize);
    thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    for _ in 0..PER {
                        C.inc();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
    assert_eq!(C.sum(), THREADS * PER);
    // Scoped threads' destructors may still be running: wait for them
    // through sum == approx, which only exit folds make true.
    let mut spins = 0u64;
    while C.approx() != THREADS * PER && spins < 10_000_000 {
        spins += 1;
        std::hint::spin_loop();
    }
    assert_eq!(C.approx(), THREADS * PER);
}

#[test]
fn joined_threads_leave_approx_exact() {
    local_counter!(static C);
    let hs: Vec<_> = (0..4)
        .map(|i| thread::spawn(move || C.add(i + 1)))
        .collect();
    for h in hs {
        h.join().unwrap(); // runs the exit fold
    }
    assert_eq!((C.sum(), C.approx()), (10, 10));
}

#[test]
fn churn_of_short_threads_loses_nothing() {
    local_counter!(static C, batch = 1000);
    for _ in 0..200 {
        let hs: Vec<_> = (0..8)
            .map(|_| thread::spawn(|| (0..37).for_each(|_| C.inc())))
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }
    assert_eq!((C.sum(), C.approx()), (200 * 8 * 37, 200 * 8 * 37));
}

#[test]
fn adds_from_another_thread_locals_destructor_are_kept() {
    local_counter!(static C);
    struct AddOnDrop;
    impl Drop for AddOnDrop {
        fn drop(&mut self) {
            C.add(5);
            C.add(6);
        }
    }
    thread_local! {
        static LATE: AddOnDrop = const { AddOnDrop };
    }
    thread::spawn(|| {
        C.inc();
        // Registered after the counter's guard, so it may run after it.
        LATE.with(|_| {});
    })
    .join()
    .unwrap();
    thread::spawn(|| {
        // Registered first: it runs after the counter's guard is set up...
        LATE.with(|_| {});
        C.inc();
    })
    .join()
    .unwrap();
    assert_eq!((C.sum(), C.approx()), (24, 24));
}

/// Two adders and a reader: each `sum` counts every add that finished
/// before it (a fold racing it cannot hide a folded batch) and none not
/// yet started (nor a fold twice), so one reader's sums never decrease.
#[test]
fn concurrent_sums_lie_between_adds_done_and_adds_started() {
    local_counter!(static C, batch = 16);
    static STOP: AtomicBool = AtomicBool::new(false);
    static DONE: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];
    let reads = thread::scope(|s| {
        for done in &DONE {
            s.spawn(move || {
                let mut i = 0;
                while !STOP.load(Ordering::Relaxed) {
                    C.inc();
                    i += 1;
                    // Release: the reader's lower bound.
                    done.store(i, Ordering::Release);
                }
            });
        }
        let reader = s.spawn(|| {
            let (mut last, mut reads) = (0, 0u64);
            while !STOP.load(Ordering::Relaxed) {
                // Acquire: pairs with the stores above.
                let done: u64 = DONE.iter().map(|d| d.load(Ordering::Acquire)).sum();
                let v = C.sum();
                // An add is started at most once after its `done` store.
                let started = DONE.iter().map(|d| d.load(Ordering::Acquire) + 1).sum();
                assert!(v >= done, "sum {v} missed adds done: {done}");
                assert!(v >= last, "sum went back: {last} then {v}");
                assert!(v <= started, "sum {v} beyond the adds started: {started}");
                (last, reads) = (v, reads + 1);
            }
            reads
        });
        thread::sleep(std::time::Duration::from_millis(300));
        STOP.store(true, Ordering::Relaxed);
        reader.join().unwrap()
    });
    assert!(reads > 0);
    let adds: u64 = DONE.iter().map(|d| d.load(Ordering::Relaxed)).sum();
    assert_eq!(C.sum(), adds);
}

shardcount::local_counter!(static SCOPED);
shardcount::local_counter!(static SCOPED_FLUSHED);

/// Issue 19, item 5, for `local_counter!`: `thread::scope` returns before
/// its threads' exit folds run, yet `sum()` right after it is exact (an exit
/// fold moves a cell's counts to the tally in one step under the lock `sum`
/// reads with), and `approx()` is exact when each thread flushed after its
/// last add. 200 trials each.
#[test]
fn after_a_thread_scope_sum_is_exact_and_flushed_threads_make_approx_exact() {
    for trial in 1..=200u64 {
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| (0..1000).for_each(|_| SCOPED.inc()));
            }
        });
        assert_eq!(SCOPED.sum(), trial * 4000, "trial {trial}");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    (0..1000).for_each(|_| SCOPED_FLUSHED.inc());
                    SCOPED_FLUSHED.flush();
                });
            }
        });
        assert_eq!(SCOPED_FLUSHED.approx(), trial * 4000, "trial {trial}");
    }
}

/// Workers that added and stay alive, as a pool's do: `flush_all` from
/// another thread makes `approx` exact, and their later adds and folds
/// (and exit folds) still count each add once.
#[test]
fn flush_all_moves_live_workers_counts_once() {
    local_counter!(static C, batch = 100);
    const WORKERS: u64 = 3;
    let added = Barrier::new(WORKERS as usize + 1);
    let moved = Barrier::new(WORKERS as usize + 1);
    thread::scope(|s| {
        for w in 0..WORKERS {
            let (added, moved) = (&added, &moved);
            s.spawn(move || {
                C.add(1); // first use: folds
                C.add(10 + w); // pending
                added.wait();
                moved.wait(); // alive while flush_all runs
                (0..250).for_each(|_| C.inc()); // folds twice, 50 pending
                C.flush();
            });
        }
        added.wait();
        assert_eq!(C.approx(), WORKERS, "only the first-use folds");
        C.flush_all();
        assert_eq!((C.approx(), C.sum()), (3 + 30 + 3, 3 + 30 + 3));
        C.flush_all(); // nothing left to move
        assert_eq!(C.approx(), 36);
        moved.wait();
    });
    assert_eq!(
        (C.approx(), C.sum()),
        (36 + WORKERS * 250, 36 + WORKERS * 250)
    );
}

/// `flush_all` in a loop while threads add: `approx` never exceeds what
/// will have been added (nothing counted twice) and never falls, and at
/// the end `sum` and `approx` are exact (nothing lost).
#[test]
fn flush_all_racing_adders_loses_and_doubles_nothing() {
    local_counter!(static C, batch = 64);
    const THREADS: u64 = 3;
    const PER_THREAD: u64 = 20_000;
    let done = AtomicBool::new(false);
    thread::scope(|s| {
        let adders: Vec<_> = (0..THREADS)
            .map(|_| s.spawn(|| (0..PER_THREAD).for_each(|i| C.add(1 + i % 3))))
            .collect();
        let flusher = s.spawn(|| {
            let mut last = 0;
            while !done.load(Ordering::Relaxed) {
                C.flush_all();
                let now = C.approx();
                assert!(now >= last, "approx fell from {last} to {now}");
                assert!(
                    now <= THREADS * PER_THREAD * 2,
                    "approx {now} counted a move twice"
                );
                last = now;
            }
        });
        for a in adders {
            a.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
        flusher.join().unwrap();
    });
    // 1 + i % 3 over 20,000 adds: 6,667 ones, 6,667 twos, 6,666 threes.
    let total = THREADS * (6_667 + 2 * 6_667 + 3 * 6_666);
    assert_eq!(C.sum(), total);
    C.flush_all(); // the scope's threads may not have run their exit folds yet
    assert_eq!(C.approx(), total);
}
