#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! `merge` under load: split and merge cycles racing adds, sums and takes
//! on real threads, with exact totals (issue 31).

use shardcount::{Counter, CounterSet, Histogram, Merger};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "common/fallback.rs"]
mod fallback;

/// Calls `merge` until it completes. A merge waits for every thread in
/// the process that holds an owner id (tests running alongside included)
/// to add again or exit; those here all do within moments.
fn merged_soon(merge: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !merge() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

const ADDERS: usize = 2;
const ADDS: u64 = 500_000;

/// `ADDERS` threads add `ADDS` each through `add` while this thread splits
/// and merges in a loop, reading `sum` (for add-only use it never goes
/// back, nor beyond what was added) and taking now and then. Returns how
/// many merges completed while the adders ran, and checks that what the
/// takes got plus what stays is every add.
fn cycles(
    add: impl Fn(u64) + Sync,
    split: impl Fn(),
    merge: impl Fn() -> bool,
    sum: impl Fn() -> u64,
    take: impl Fn() -> u64,
    shards: impl Fn() -> usize,
) -> usize {
    let done = AtomicBool::new(false);
    let (mut taken, mut merged) = (0u64, 0usize);
    std::thread::scope(|s| {
        let adders: Vec<_> = (0..ADDERS)
            .map(|_| s.spawn(|| (0..ADDS).for_each(&add)))
            .collect();
        let mut last = 0;
        let mut round = 0u64;
        while !done.load(Ordering::Relaxed) {
            split();
            if merge() {
                merged += 1;
            }
            round += 1;
            if round.is_multiple_of(8) {
                taken += take();
                last = 0;
            }
            let now = sum();
            assert!(now >= last, "a sum went back: {last} -> {now}");
            assert!(
                now + taken <= ADDERS as u64 * ADDS,
                "beyond every add: {now} + {taken} taken"
            );
            last = now;
            if adders.iter().all(|a| a.is_finished()) {
                done.store(true, Ordering::Relaxed);
            }
        }
        // Joined, so their owner ids are given back: the merge completes.
        adders.into_iter().for_each(|a| a.join().unwrap());
    });
    assert!(
        merged_soon(&merge),
        "a merge pending a minute after every adder was joined"
    );
    assert_eq!(shards(), 0);
    assert_eq!(taken + sum(), ADDERS as u64 * ADDS, "lost or doubled adds");
    merged
}

#[test]
fn counter_split_and_merge_cycles_under_load_are_exact() {
    let c = Counter::with_max_shards(4);
    let merged = cycles(
        |_| c.inc(),
        || {
            c.split(4);
        },
        || c.merge(),
        || c.sum(),
        || c.take(),
        || c.shards(),
    );
    eprintln!("{merged} merges completed under load");
}

#[test]
fn set_split_and_merge_cycles_under_load_are_exact() {
    let s = CounterSet::with_max_shards(3, 4);
    cycles(
        |i| s.inc(i as usize % 3),
        || {
            s.split(4);
        },
        || s.merge(),
        || s.snapshot().iter().sum(),
        || s.take_all().iter().sum(),
        || s.shards(),
    );
}

#[test]
fn histogram_split_and_merge_cycles_under_load_are_exact() {
    // Every record is of 1, so over every take and what stays, the sums
    // must equal the counts: a record's two adds (bucket, sum) both land,
    // whatever the merges do (one take may get the bucket, the next the sum).
    let h = Histogram::new();
    let taken_sums = std::cell::Cell::new(0);
    cycles(
        |_| h.record(1),
        || {
            h.split(4);
        },
        || h.merge(),
        || h.count(),
        || {
            let t = h.take();
            taken_sums.set(taken_sums.get() + t.sum());
            t.count()
        },
        || h.shards(),
    );
    assert_eq!(
        taken_sums.get() + h.sum(),
        ADDERS as u64 * ADDS,
        "a record's sum add lost or doubled"
    );
    // The sum of the values survives the merges too.
    let h = Histogram::new();
    h.split(2);
    std::thread::scope(|s| {
        let t: Vec<_> = (0..2)
            .map(|_| s.spawn(|| (0..1000u64).for_each(|v| h.record(v))))
            .collect();
        t.into_iter().for_each(|t| t.join().unwrap());
    });
    assert!(merged_soon(|| h.merge()));
    assert_eq!((h.count(), h.sum()), (2000, 2 * 999 * 1000 / 2));
}

/// A merge retired while an owner sleeps: where sleepers are read
/// (`merges_need_quiesce() == false`) the sleeper is outside every add,
/// so the merge completes at once; elsewhere it stays pending (the sleeper
/// might be between loading the table and storing to it), counts on the
/// base meanwhile, and completes once the sleeper adds again (its sampled
/// adds acknowledge: within 128 of its adds to this counter). Exact
/// either way. The test runs itself again with `SHARDCOUNT_QUIESCE_ONLY`.
#[test]
fn a_sleeping_owner_holds_a_merge_only_where_sleepers_are_not_read() {
    if !fallback::in_fallback() {
        fallback::run_in_fallback(
            "a_sleeping_owner_holds_a_merge_only_where_sleepers_are_not_read",
        );
    }
    let c = Counter::with_max_shards(2);
    c.split(2);
    let (back_tx, back_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let c = &c;
        s.spawn(move || {
            c.add(10); // owns a row now
            back_tx.send(()).unwrap();
            // Sleeps, holding its owner id (a failed assertion on the
            // other side drops the sender: no hang).
            let _ = rx.recv();
            // Adds to the base, and acknowledges the revocation at a
            // sampled add (one in 128 on the base of a retiring table).
            (0..1000).for_each(|_| c.add(5));
            back_tx.send(()).unwrap();
            let _ = rx.recv();
        });
        back_rx.recv().unwrap();
        if shardcount::merges_need_quiesce() {
            assert!(
                fallback::in_fallback() || !cfg!(target_arch = "x86_64"),
                "sleepers not read on x86_64 Linux"
            );
            assert!(!c.merge(), "merged while an owner may still store");
            // Pending: the shards are still allocated, and `shards` says so.
            assert_eq!((c.shards(), c.sum()), (2, 10));
        } else {
            assert!(
                merged_soon(|| c.merge()),
                "pending a minute while its only owner sleeps"
            );
            assert_eq!((c.shards(), c.sum()), (0, 10));
        }
        c.add(1); // the base takes adds while the merge is pending
        tx.send(()).unwrap();
        back_rx.recv().unwrap();
        assert!(
            merged_soon(|| c.merge()),
            "still pending a minute after the owner added again"
        );
        assert_eq!((c.shards(), c.sum()), (0, 10 + 1 + 5000));
        tx.send(()).unwrap();
    });
}

/// An owner that keeps running without adding (busy with other work)
/// neither acknowledges nor sleeps. Where merges need no quiesce (x86_64
/// Linux) a merge nudges it (a signal whose handler answers for it) and
/// completes while it computes; elsewhere, and with
/// `SHARDCOUNT_QUIESCE_ONLY` set, the merge stays pending until it adds
/// again. Exact either way; the test runs itself again in the fallback.
#[test]
fn a_computing_owner_holds_a_merge_only_where_nudges_are_not_sent() {
    if !fallback::in_fallback() {
        fallback::run_in_fallback("a_computing_owner_holds_a_merge_only_where_nudges_are_not_sent");
    }
    let c = Counter::with_max_shards(2);
    c.split(2);
    let (owns, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        let (c, owns, stop) = (&c, &owns, &stop);
        let t = s.spawn(move || {
            c.add(10); // owns a row now
            owns.store(true, Ordering::Release);
            let mut x = 1u64;
            while !stop.load(Ordering::Acquire) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            c.add(1);
            x
        });
        while !owns.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        if shardcount::merges_need_quiesce() {
            assert!(!c.merge(), "merged while a running owner may still store");
            assert_eq!((c.shards(), c.sum()), (2, 10));
        } else {
            assert!(
                merged_soon(|| c.merge()),
                "pending a minute while its only owner computes"
            );
            assert_eq!((c.shards(), c.sum()), (0, 10));
        }
        stop.store(true, Ordering::Release);
        t.join().unwrap();
    });
    assert!(merged_soon(|| c.merge()), "pending after the owner exited");
    assert_eq!((c.shards(), c.sum()), (0, 11));
}

/// A holder that blocked `SIGURG` before its first add is never sent one
/// (it would stay pending, and a `signalfd` reader would read it as its
/// own): while it runs without adding it holds the merge pending, as
/// where nudges are not sent.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
#[test]
fn a_holder_that_blocks_sigurg_is_never_sent_one() {
    let c = Counter::with_max_shards(2);
    c.split(2);
    let (owns, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let pending = std::thread::scope(|s| {
        let (c, owns, stop) = (&c, &owns, &stop);
        let t = s.spawn(move || {
            // SAFETY: plain calls on this thread's own signal mask.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGURG);
                assert_eq!(
                    libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()),
                    0
                );
            }
            c.add(10); // owns a row now
            owns.store(true, Ordering::Release);
            let mut x = 1u64;
            while !stop.load(Ordering::Acquire) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            // SAFETY: reads this thread's pending signals into a zeroed set.
            unsafe {
                let mut pending: libc::sigset_t = std::mem::zeroed();
                libc::sigpending(&mut pending);
                libc::sigismember(&pending, libc::SIGURG) == 1
            }
        });
        while !owns.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        for _ in 0..5 {
            assert!(!c.merge(), "merged while a running owner may still store");
        }
        stop.store(true, Ordering::Release);
        t.join().unwrap()
    });
    assert!(!pending, "a SIGURG is pending on the thread that blocks it");
    assert!(merged_soon(|| c.merge()), "pending after the owner exited");
    assert_eq!(c.sum(), 10);
}

/// Threads come and go (each adds, then exits: its id handed back,
/// perhaps while a merge waits for it) while two threads split and merge
/// the same counter at once: every add is counted, sums never go back,
/// and once all have gone a merge completes.
#[test]
fn threads_coming_and_going_amid_merges_from_two_threads_lose_nothing() {
    const WAVES: u64 = 100;
    const SPAWN: u64 = 4;
    const ADDS: u64 = 2_000;
    let c = Counter::new();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let (c, stop) = (&c, &stop);
        for _ in 0..2 {
            s.spawn(move || {
                let mut last = 0;
                while !stop.load(Ordering::Acquire) {
                    c.split(2);
                    let _ = c.merge();
                    let now = c.sum();
                    assert!(now >= last, "a sum went back: {last} then {now}");
                    last = now;
                }
            });
        }
        for _ in 0..WAVES {
            std::thread::scope(|w| {
                for _ in 0..SPAWN {
                    w.spawn(move || (0..ADDS).for_each(|_| c.add(1)));
                }
            });
        }
        stop.store(true, Ordering::Release);
    });
    assert_eq!(c.sum(), WAVES * SPAWN * ADDS);
    assert!(
        merged_soon(|| c.merge()),
        "pending a minute after every adder exited"
    );
    assert_eq!((c.shards(), c.sum()), (0, WAVES * SPAWN * ADDS));
}

/// Threads that only read (exporters') sum in a loop while another adds
/// and this one splits and merges: every sum is within what was added and
/// never goes back, though after their first sum they read unpinned (as
/// readers, in read windows) and merges free the tables they read. Then
/// they stop reading and compute, alive and running: they hold no merge
/// back (a reader's window is closed, so a merge counts it as done).
#[test]
fn readers_racing_merges_read_exactly_and_computing_readers_hold_none() {
    const N: u64 = 300_000;
    let c = Counter::with_max_shards(2);
    let (reading, computing, stop) = (
        AtomicBool::new(true),
        std::sync::atomic::AtomicUsize::new(0),
        AtomicBool::new(false),
    );
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut last = 0;
                while reading.load(Ordering::Relaxed) {
                    let now = c.sum();
                    assert!(now >= last, "a sum went back: {last} -> {now}");
                    assert!(now <= N, "a sum beyond every add: {now}");
                    last = now;
                }
                computing.fetch_add(1, Ordering::Release);
                // Runs without reading until the test ends.
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let adder = s.spawn(|| {
            (0..N).for_each(|_| c.add(1));
        });
        while !adder.is_finished() {
            c.split(2);
            let _ = c.merge();
        }
        // A failed assertion below must still end the readers' loops.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let _stop = Stop(&stop);
        adder.join().unwrap();
        reading.store(false, Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(10);
        while computing.load(Ordering::Acquire) < 2 {
            assert!(Instant::now() < deadline, "a reader failed");
            std::thread::yield_now();
        }
        c.split(2);
        // As `merged_soon`: other tests' holders may hold it a while
        // where sleepers are not read.
        assert!(
            merged_soon(|| c.merge()),
            "a merge pending a minute while the readers compute"
        );
        assert_eq!((c.shards(), c.sum()), (0, N));
    });
}

/// A `Merger` leaves a counter that two threads keep adding to alone (two
/// rows change at every pass) and merges it once they stop.
#[test]
fn a_merger_merges_a_counter_once_its_load_stops() {
    let merger = Merger::new(Duration::from_millis(100));
    let c = Arc::new(Counter::with_max_shards(4));
    merger.watch(Arc::clone(&c));
    c.split(4);
    let stop = AtomicBool::new(false);
    let (mut sharded, mut looks) = (0, 0);
    std::thread::scope(|s| {
        let adders: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        (0..1000).for_each(|_| c.inc());
                    }
                })
            })
            .collect();
        let end = Instant::now() + Duration::from_millis(600);
        while Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
            looks += 1;
            sharded += usize::from(c.shards() > 0);
        }
        stop.store(true, Ordering::Relaxed);
        adders.into_iter().for_each(|a| a.join().unwrap());
    });
    // A thread descheduled for a whole idle time lets one merge through;
    // the next contention puts the table back. Most looks see it sharded.
    assert!(
        sharded * 2 > looks,
        "sharded at {sharded} of {looks} looks under load"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.shards() != 0 || merger.merges() == 0 {
        assert!(
            Instant::now() < deadline,
            "not merged a minute after the load stopped"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let total = c.sum();
    assert!(
        total >= 2000 && total.is_multiple_of(1000),
        "a count lost: {total}"
    );
}

/// `watched()` counts every watched counter while a pass has them out to
/// look at and merge (it once read the list the pass had emptied: 0).
#[test]
fn a_merger_counts_its_counters_while_a_pass_merges_them() {
    const N: usize = 500;
    let merger = Merger::new(Duration::from_millis(4));
    for _ in 0..N {
        let c = Arc::new(Counter::new());
        c.split(2);
        c.inc();
        merger.watch(c);
    }
    // Every pass takes the list out; after `idle` one merges all N, one at
    // a time, a grace period each. Look all along, until every merge is in.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut looks = 0u64;
    while merger.merges() < N as u64 {
        assert_eq!(merger.watched(), N, "look {looks}: {merger:?}");
        assert!(
            Instant::now() < deadline,
            "not merged in a minute: {merger:?}"
        );
        looks += 1;
    }
    assert_eq!(merger.watched(), N);
}

/// A counter watched twice is one table in a pass's batch: both watches
/// count it merged, none pending.
#[test]
fn a_counter_watched_twice_merges_once_and_counts_for_both() {
    let merger = Merger::new(Duration::from_millis(4));
    let c = Arc::new(Counter::new());
    c.split(2);
    c.inc();
    merger.watch(Arc::clone(&c));
    merger.watch(Arc::clone(&c));
    let deadline = Instant::now() + Duration::from_secs(10);
    while merger.merges() < 2 {
        assert!(Instant::now() < deadline, "{merger:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!((merger.pending(), c.shards(), c.sum()), (0, 0, 1));
}
