//! Merges (`shard/merge.rs`) racing adds, through a `Counter`.

use crate::thread::owner;
use crate::Counter;

/// Adds by a thread without an owner id (as from thread-local
/// destructors at exit: pinned, on the shared rows or the base) while
/// this thread splits and merges in a loop: exact.
#[test]
fn adds_without_an_owner_id_survive_split_and_merge_cycles() {
    let c = Counter::with_max_shards(4);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let exiting = s.spawn(|| {
            owner::exit_now();
            (0..100_000).for_each(|_| c.inc());
            done.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut cycles = 0;
        while !done.load(std::sync::atomic::Ordering::Relaxed) || cycles < 10 {
            c.split(4);
            let _ = c.merge();
            cycles += 1;
        }
        exiting.join().unwrap();
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !c.merge() {
        assert!(
            std::time::Instant::now() < deadline,
            "a merge pending for a minute"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!((c.shards(), c.sum()), (0, 100_000));
}
