//! Small tests that reach every `unsafe` block, sized for miri:
//! `cargo +nightly miri test --lib miri_tests` (where miri is installed).
//! They run as ordinary unit tests too. In-crate so they can force a growth
//! without a public test hook.

use crate::shard::GrowOnce;
use crate::{Counter, CounterMap, CounterSet, Folder, MaxCounter, RoughCounter};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

#[test]
fn counter_tables_are_read_summed_taken_and_freed() {
    let c = Counter::with_max_shards(4);
    c.add(1);
    c.grow_once();
    c.add(2);
    c.grow_once();
    assert_eq!(c.shards(), 4);
    thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| (0..50).for_each(|_| c.inc()));
        }
    });
    assert_eq!(c.sum(), 103);
    assert_eq!(c.take(), 103);
    c.sub(1);
    assert_eq!(c.sum_i64(), -1);
    assert!(format!("{c:?}").starts_with("Counter { sum: 18446744073709551615"));
}

/// Owned shards (plain stores), shared shards (made on the first add of a
/// thread without one) and take baselines (made on the first take): each
/// area allocated, read, taken and freed with its table.
#[test]
fn owned_shared_and_baseline_areas_are_used_and_freed() {
    let c = Counter::with_max_shards(2);
    assert_eq!(c.split(2), 2);
    c.add(3); // this thread's owned shard
    c.add_probed_for_test(4); // a shared shard
    assert_eq!(c.sum(), 7);
    assert_eq!(c.shard_values().iter().sum::<u64>(), 7);
    assert_eq!(c.take(), 7);
    c.add(1);
    assert_eq!((c.sum(), c.take(), c.sum()), (1, 1, 0));
    let s = CounterSet::with_max_shards(20, 2);
    assert_eq!(s.split(2), 2);
    s.add(17, 5);
    assert_eq!(s.take(17), Some(5));
    s.add(19, 1);
    assert_eq!(s.take_all()[19], 1);
    assert_eq!(s.snapshot().iter().sum::<u64>(), 0);
}

/// A merge: revocation through the registry's pointers to the threads'
/// owner cells, the fold of owned, shared and baseline areas, the tables
/// freed while the owners live on; then a pending merge completed.
#[test]
fn merges_revoke_fold_and_free_the_chain() {
    let c = Counter::with_max_shards(2);
    c.split(2);
    let s = CounterSet::with_max_shards(3, 2);
    s.split(2);
    let (go, wait) = mpsc::channel::<()>();
    let (added, ready) = mpsc::channel::<()>();
    thread::scope(|sc| {
        let (c, s) = (&c, &s);
        let owner = sc.spawn(move || {
            c.add(3); // owns a row of each
            s.add(2, 3);
            added.send(()).unwrap();
            let _ = wait.recv(); // holds its id while the merge retires
            (0..200).for_each(|_| c.inc()); // acknowledges at a sampled add
            s.inc(0);
        });
        ready.recv().unwrap();
        c.add_probed_for_test(4); // a shared row
        assert_eq!(c.take(), 7); // baselines
        c.add(5);
        // The owner waits, asleep: where sleepers are read the merge need
        // not wait for it (under miri they are not: it waits).
        let merged = c.merge()
            || (crate::thread::owner::sleepers_seen()
                && (0..10_000).any(|_| {
                    // Threads of other tests may be inside their adds.
                    thread::sleep(Duration::from_millis(1));
                    c.merge()
                }));
        go.send(()).unwrap();
        owner.join().unwrap();
        assert_eq!(merged, crate::thread::owner::sleepers_seen());
    });
    // A merge also waits for threads of the tests running alongside that
    // hold owner ids: they add again or exit within moments.
    let merges: [&dyn Fn() -> bool; 2] = [&|| c.merge(), &|| s.merge()];
    for merge in merges {
        let mut tries = 0;
        while !merge() {
            tries += 1;
            assert!(
                tries < 10_000,
                "a merge stayed pending with its owner joined"
            );
            thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!((c.shards(), c.sum()), (0, 205));
    assert_eq!((s.shards(), s.snapshot()), (0, vec![1, 0, 3]));
}

#[test]
fn counters_reusing_an_address_start_clean() {
    for i in 0..20 {
        let c = Counter::new();
        c.add(i);
        c.inc();
        assert_eq!(c.into_inner(), i + 1);
    }
}

#[test]
fn rough_counter_across_threads_and_exit_folds() {
    let c = Arc::new(RoughCounter::new().with_batch(4));
    let hs: Vec<_> = (0..2)
        .map(|_| {
            let c = c.clone();
            thread::spawn(move || (0..10).for_each(|_| c.inc()))
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    c.add(5);
    c.flush();
    assert_eq!(c.sum(), 25);
    assert_eq!(c.approx(), 25);
}

#[test]
fn rough_counter_dropped_while_a_thread_still_holds_its_slot() {
    let c = Arc::new(RoughCounter::new());
    let (added_tx, added_rx) = mpsc::channel();
    let (dropped_tx, dropped_rx) = mpsc::channel::<()>();
    let t = {
        let c = c.clone();
        thread::spawn(move || {
            c.add(3);
            drop(c); // the thread's cache still refers to the counter's block
            added_tx.send(()).unwrap();
            dropped_rx.recv().unwrap();
            // A new counter on this thread prunes the dropped one's entry;
            // thread exit then folds into a block nobody reads.
            let other = RoughCounter::new();
            other.inc();
            assert_eq!(other.sum(), 1);
        })
    };
    added_rx.recv().unwrap();
    assert_eq!(c.sum(), 3);
    drop(Arc::try_unwrap(c).expect("the only reference left"));
    dropped_tx.send(()).unwrap();
    t.join().unwrap();
}

static LATE: RoughCounter = RoughCounter::new();

struct AddsOnDrop;

impl Drop for AddsOnDrop {
    fn drop(&mut self) {
        // May run after the crate's own thread-locals are gone: the add must
        // still count (the orphan path) and touch no freed memory.
        LATE.add(7);
    }
}

thread_local! {
    static GUARD: AddsOnDrop = const { AddsOnDrop };
}

#[test]
fn adds_from_a_thread_local_destructor_are_counted() {
    let before = LATE.sum();
    thread::spawn(|| {
        GUARD.with(|_| ());
        LATE.inc();
    })
    .join()
    .unwrap();
    assert_eq!(LATE.sum() - before, 8);
    assert_eq!(LATE.approx(), LATE.sum());
}

/// Counters on one thread's arena words, then new counters on the
/// positions the dropped ones gave back (a thread hands its slots in
/// dropped counters back once its exit list reaches 8).
#[test]
fn rough_counters_on_arena_words_keep_counts_apart() {
    for round in 0..3u64 {
        let cs: Vec<RoughCounter> = (0..6).map(|_| RoughCounter::from(1)).collect();
        for _ in 0..2 {
            for (k, c) in cs.iter().enumerate() {
                c.add(k as u64 + round);
            }
        }
        for (k, c) in cs.iter().enumerate() {
            assert_eq!(c.sum(), 1 + 2 * (k as u64 + round));
        }
    }
}

#[test]
fn folder_folds_and_stops() {
    let c = RoughCounter::new();
    let folder = Folder::new(Duration::from_millis(1));
    folder.register(&c);
    c.add(2);
    while c.approx() != 2 {
        thread::sleep(Duration::from_millis(1));
    }
    drop(folder);
    drop(c);
}

#[test]
fn local_counter_cells_are_read_and_flushed_while_threads_live_and_after_exit() {
    crate::local_counter!(static C, batch = 4);
    let (tx, rx) = mpsc::channel::<()>();
    let (ready_tx, ready_rx) = mpsc::channel();
    let t = thread::spawn(move || {
        C.add(2); // first use: registers and folds
        C.add(1); // pending in the cell
        ready_tx.send(()).unwrap();
        let _ = rx.recv(); // stays alive, registered
    });
    ready_rx.recv().unwrap();
    assert_eq!(C.sum(), 3); // reads the live thread's cell
    C.flush_all(); // and moves its pending count, from this thread
    assert_eq!(C.approx(), 3);
    drop(tx);
    t.join().unwrap();
    assert_eq!((C.sum(), C.approx()), (3, 3));
}

#[test]
fn rough_slots_in_several_buckets_are_walked_and_freed() {
    let c = RoughCounter::new().with_batch(2);
    // Enough live threads at once to fill more than one bucket.
    let barrier = std::sync::Barrier::new(5);
    thread::scope(|s| {
        for i in 0..5 {
            let (c, barrier) = (&c, &barrier);
            s.spawn(move || {
                c.add(i + 1);
                barrier.wait();
            });
        }
    });
    assert_eq!(c.sum(), 15);
}

#[test]
fn counter_set_rows_are_read_summed_taken_and_freed() {
    let s = CounterSet::with_max_shards(20, 4);
    s.add(19, 1);
    s.grow_once();
    s.add(19, 2);
    s.grow_once();
    assert_eq!(s.shards(), 4);
    thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| (0..50).for_each(|i| s.inc(i % 20)));
        }
    });
    assert_eq!(s.get(19), Some(7));
    let all = s.take_all();
    assert_eq!(all.iter().sum::<u64>(), 103);
    assert_eq!(s.snapshot(), vec![0; 20]);
}

/// Threads beyond a table of 2 (indexes 1 and 2 held by parked threads,
/// or by anyone else) take the probed paths: `Counter::add_unowned` and
/// `CounterSet::add_unowned`, with their samples, watches and line
/// watches (2,048 adds: two line watches).
#[test]
fn adds_beyond_the_table_take_the_probed_paths() {
    let c = Counter::with_max_shards(4);
    c.grow_once();
    let s = CounterSet::with_max_shards(20, 4);
    s.grow_once();
    let (held_tx, held_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let done_rx = std::sync::Mutex::new(done_rx);
    thread::scope(|sc| {
        for _ in 0..2 {
            let (held_tx, done_rx) = (held_tx.clone(), &done_rx);
            sc.spawn(move || {
                let i = crate::thread::slots::index_or_take();
                held_tx.send(i).unwrap();
                // Holds the index until the adder is done.
                let _ = done_rx.lock().unwrap().recv();
            });
        }
        held_rx.recv().unwrap();
        held_rx.recv().unwrap();
        sc.spawn(|| {
            for _ in 0..2048 {
                c.inc();
                s.inc(3);
            }
        })
        .join()
        .unwrap();
        drop(done_tx);
    });
    assert_eq!(c.sum(), 2048);
    assert_eq!(s.get(3), Some(2048));
    assert_eq!(c.take() + c.sum(), 2048);
}

#[test]
fn counter_map_chunks_are_published_read_and_freed() {
    let m = CounterMap::with_max_keys(250);
    thread::scope(|sc| {
        for t in 0..2u32 {
            let m = &m;
            sc.spawn(move || (0..200).for_each(|k| m.add(&(k + t * 100), 1)));
        }
    });
    assert_eq!(m.len(), 250);
    assert_eq!(m.allocated_chunks(), 2);
    let kept = m.snapshot().iter().map(|e| e.1).sum::<u64>();
    assert_eq!(kept + m.overflow(), 400);
    assert!(m.overflow() >= 50);
}

/// The lock-free key index: two threads intern the same `String` keys at
/// once (growing the table 16 -> 32 -> 64 -> 128 slots under lookups that
/// may still probe the older tables), look them up by `&str` without the
/// lock, read them all under it, and drop the map (every entry and table
/// freed once).
#[test]
fn counter_map_index_entries_and_tables_are_published_read_and_freed() {
    let m: CounterMap<String> = CounterMap::new();
    let keys: Vec<String> = (0..40).map(|i| format!("/k/{i}")).collect();
    thread::scope(|sc| {
        for t in 0..2 {
            let (m, keys) = (&m, &keys);
            sc.spawn(move || {
                for k in keys.iter().skip(t) {
                    m.inc(k.as_str());
                    assert!(m.get(k.as_str()).is_some());
                }
            });
        }
    });
    assert_eq!(m.len(), 40);
    assert_eq!(m.get("/k/0"), Some(1));
    assert_eq!(m.get("/k/39"), Some(2));
    assert_eq!(m.get("/k/40"), None);
    assert_eq!(m.snapshot().iter().map(|e| e.1).sum::<u64>(), 79);
    let mut n = 0;
    crate::CountFamily::read_each(&m, |_, v| n += v);
    assert_eq!(n, 79);
}

#[test]
fn max_counter_shards_are_read_taken_and_freed() {
    let m = MaxCounter::new();
    m.record(3);
    m.grow_once();
    thread::scope(|sc| {
        for t in 0..2 {
            let m = &m;
            sc.spawn(move || (0..50).for_each(|i| m.record(i * 2 + t)));
        }
    });
    assert_eq!(m.get(), 99);
    assert_eq!(m.take(), 99);
    assert_eq!(m.get(), 0);
}

/// Keys removed, evicted and moved while another thread adds to them: each
/// removed entry, shrunk table and emptied chunk is freed once, after the
/// adds that could reach it; a moved key's counts follow it.
#[test]
fn counter_map_removals_free_entries_tables_and_chunks_after_lookups() {
    let m: CounterMap<u32> = CounterMap::new();
    for k in 0..600 {
        m.add(&k, 1);
    }
    let removed = thread::scope(|sc| {
        sc.spawn(|| (0..600).step_by(10).for_each(|k| m.add(&k, 1)));
        let mut removed = 0;
        for k in (0..600).filter(|k| k % 10 != 0) {
            removed += m.remove(&k).unwrap_or(0);
        }
        removed
    });
    assert_eq!(removed, 540);
    assert_eq!(m.len(), 60);
    assert!(m.allocated_chunks() < 5, "no chunk freed");
    assert!(m.evict_idle(Duration::ZERO).is_empty());
    let gone = m.evict_idle(Duration::ZERO);
    assert_eq!(gone.len(), 60);
    assert!(gone.iter().all(|&(_, v)| v == 2));
    assert_eq!((m.len(), m.allocated_chunks()), (0, 0));
}

/// A `lazy` set's base row (`LabelledCounter::new`, `Histogram::new`):
/// unmade ones are read, taken and dropped without allocating; first adds
/// racing on several threads make exactly one row, free the losers', and
/// lose no count (a histogram's record too); the row is freed with the
/// set.
#[test]
fn lazy_base_rows_are_made_once_by_racing_first_adds_and_freed() {
    let idle = CounterSet::lazy(3);
    assert_eq!((idle.take_all(), idle.snapshot()), (vec![0; 3], vec![0; 3]));
    assert!(idle.merge() && !idle.base_is_made());
    let rounds = if cfg!(miri) { 2 } else { 300 };
    for _ in 0..rounds {
        let s = CounterSet::lazy(3);
        let go = std::sync::Barrier::new(4);
        thread::scope(|sc| {
            for t in 0..4u64 {
                let (s, go) = (&s, &go);
                sc.spawn(move || {
                    go.wait();
                    s.add(1, 1 << t);
                });
            }
        });
        assert!(s.base_is_made());
        assert_eq!(s.snapshot(), [0, 15, 0]);
    }
    // A histogram's record: two words of the base row in one add.
    let h = crate::Histogram::new();
    thread::scope(|sc| {
        for t in 0..2 {
            let h = &h;
            sc.spawn(move || (0..20).for_each(|i| h.record(i * 2 + t)));
        }
    });
    assert_eq!((h.count(), h.sum()), (40, (0..40).sum()));
}

/// Rows and sets made from inside the crate's own allocation come from the
/// system allocator (`thread::reentry`): a lazy set's base row and a
/// labelled histogram's sets, each used and then freed by the allocator
/// that made it; made outside, the global allocator's, racing threads
/// publishing one and freeing the others.
#[test]
fn rows_and_sets_made_inside_an_allocation_come_from_the_system_allocator() {
    #[derive(Clone, Copy)]
    enum Op {
        Read,
        Write,
    }
    impl crate::Label for Op {
        const COUNT: usize = 2;
        const NAMES: &'static [&'static str] = &["op"];
        fn index(&self) -> usize {
            *self as usize
        }
        fn from_index(index: usize) -> Option<Self> {
            [Op::Read, Op::Write].get(index).copied()
        }
        fn text(index: usize, dim: usize) -> Option<&'static str> {
            (dim == 0)
                .then(|| ["read", "write"].get(index).copied())
                .flatten()
        }
    }
    {
        let _inside = crate::thread::reentry::enter().expect("not inside yet");
        let s = CounterSet::lazy(3);
        s.add(2, 5);
        let h = crate::LabelledHistogram::<Op>::new();
        h.record(Op::Write, 7);
        assert_eq!(
            (s.snapshot(), h.snapshot(Op::Write).sum()),
            (vec![0, 0, 5], 7)
        );
    }
    let h = crate::LabelledHistogram::<Op>::new();
    thread::scope(|sc| {
        for v in 0..2u64 {
            let h = &h;
            sc.spawn(move || h.record(Op::Read, v + 1));
        }
    });
    assert_eq!(h.snapshot(Op::Read).sum(), 3);
}
