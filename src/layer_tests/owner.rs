//! Owner ids (`thread/owner.rs`) as counters and sets use them.

use crate::thread::owner;
use crate::Counter;

/// A counter's table is dropped and the next counter's table is often
/// allocated at the same address, with rows elsewhere: a worker whose
/// row cache still named the old table would add into freed memory
/// and the new counter would miss those adds. Fails without `forget`
/// in the table's drop.
#[test]
fn a_table_at_a_dropped_tables_address_counts_every_add() {
    use std::sync::mpsc::channel;
    use std::sync::Arc;
    const ROUNDS: usize = 2000;
    const ADDS: u64 = 100;
    let (work_tx, work_rx) = channel::<Arc<Counter>>();
    let (done_tx, done_rx) = channel::<()>();
    let worker = std::thread::spawn(move || {
        for c in work_rx {
            for _ in 0..ADDS {
                c.inc();
            }
            drop(c);
            done_tx.send(()).unwrap();
        }
    });
    let mut addrs = std::collections::HashSet::new();
    let mut repeats = 0;
    for round in 0..ROUNDS {
        let c = Arc::new(Counter::new());
        // Rows of different sizes, so a reused table address comes
        // with rows at another one.
        c.split(if round % 2 == 0 { 2 } else { 8 });
        if !addrs.insert(c.head_addr()) {
            repeats += 1;
        }
        work_tx.send(Arc::clone(&c)).unwrap();
        done_rx.recv().unwrap();
        let c = Arc::into_inner(c).expect("the worker dropped its reference");
        assert_eq!(c.sum(), ADDS, "round {round}: adds lost");
    }
    drop(work_tx);
    worker.join().unwrap();
    assert!(
        repeats > 0,
        "no table address was reused: the test tested nothing"
    );
}

/// Shards follow the threads that add, in a process of its own (so no
/// test running alongside holds an owner id).
#[cfg(not(miri))]
mod busy_threads_own_the_shards {
    use crate::shard::GrowOnce;
    use crate::thread::owner;
    use crate::{Counter, CounterSet, RoughCounter};
    use std::process::Command;
    use std::sync::Barrier;

    /// Set in the child process, which runs the scenario.
    const CHILD: &str = "SHARDCOUNT_OWNED_CHILD";

    /// The case: the main thread holds a thread index (it touched
    /// a `RoughCounter`), and two threads add to a counter and a set with
    /// 2 rows. With rows given by thread index, the main thread held row 1
    /// and one adder was beyond the table; now each adder owns a row, and
    /// every one of its adds lands there.
    #[test]
    fn while_the_main_thread_holds_a_thread_index() {
        if std::env::var_os(CHILD).is_none() {
            let out = Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "layer_tests::owner::busy_threads_own_the_shards::while_the_main_thread_holds_a_thread_index",
                    "--test-threads=1",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let log = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "the child failed:\n{log}");
            assert!(log.contains("1 passed"), "the child ran no test:\n{log}");
            return;
        }
        let rough = RoughCounter::new();
        rough.inc();
        assert_ne!(crate::thread::index(), 0, "the main thread holds no index");
        assert_eq!(owner::owner(), 0);

        let c = Counter::with_max_shards(2);
        c.grow_once();
        let set = CounterSet::with_max_shards(3, 2);
        set.grow_once();
        // Different counts per thread, so the shard values say who added.
        let adds = [1000u64, 3000];
        let barrier = Barrier::new(2);
        let ids: Vec<usize> = std::thread::scope(|s| {
            let spawned: Vec<_> = adds
                .iter()
                .map(|&n| {
                    let (c, set, barrier) = (&c, &set, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        for _ in 0..n {
                            c.inc();
                            set.inc(1);
                        }
                        // Both alive until both are done: an exited
                        // thread's id may go to the other.
                        barrier.wait();
                        owner::owner()
                    })
                })
                .collect();
            spawned.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert_eq!(owner::owner(), 0, "the main thread leased an id");
        let mut sorted = ids.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, [1, 2], "owner ids of the adders");
        let mut want = vec![0; 2];
        for (id, n) in ids.iter().zip(adds) {
            want[id - 1] = n;
        }
        assert_eq!(c.base_and_newest_shards(), (0, want.clone()));
        assert_eq!(set.base_and_newest_rows_of(1), (0, want));
        assert_eq!(rough.sum(), 1);
    }
}

/// Where readers exist (Linux's `membarrier`), a thread that only reads
/// takes a reader's id at its first pinned read (beyond every row: no
/// adder's), keeps it across reads, and trades it for an adder's at its
/// first add; the count stays exact throughout. (Whether its id is
/// revoked right now depends on other tests' merges: not asserted.)
#[test]
fn a_reader_takes_an_id_beyond_every_row_and_trades_it_when_it_adds() {
    if !owner::readers_exist() {
        return;
    }
    let c = std::sync::Arc::new(Counter::with_max_shards(2));
    c.split(2);
    let adder = std::sync::Arc::clone(&c);
    std::thread::spawn(move || adder.add(3)).join().unwrap();
    std::thread::spawn(move || {
        assert_eq!((owner::held(), c.sum()), (0, 3));
        assert!(
            owner::held() > owner::READER_BASE,
            "no reader's id: {}",
            owner::held()
        );
        assert_eq!(c.sum(), 3);
        c.inc();
        assert!(
            (1..owner::READER_BASE).contains(&owner::held()),
            "kept a reader's id"
        );
        assert_eq!(c.sum(), 4);
    })
    .join()
    .unwrap();
}
