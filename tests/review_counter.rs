//! Review findings for `Counter` (adversarial review, branch `review`).

use shardcount::Counter;
use std::thread;

/// A single thread never contends with itself, so a counter it alone uses
/// must stay a single atomic. Contention sampling keys its note on the
/// address of the word it added to; when one counter is dropped and the next
/// one lives at the same address (a stack slot, a reused allocation), the
/// first add to the new counter "resolves" the old counter's note, finds a
/// different value and grows the table: allocation and 2+ padded shards for
/// a counter no other thread ever touched.
///
/// This is why `tests/counter_alloc.rs` fails under `cargo test --release`
/// (6 allocations: `available_parallelism` plus the table), where the
/// warm-up counter and the measured one share a stack slot.
#[test]
fn review_single_thread_counter_at_reused_address_never_grows() {
    thread::spawn(|| {
        // One storage location, two counters in turn.
        let mut slot = Counter::with_max_shards(4);
        slot.inc(); // this thread's first add: it notes (address, 1)
        let first = std::ptr::from_ref(&slot).addr();
        slot = Counter::with_max_shards(4); // the old counter is dropped here
        assert_eq!(std::ptr::from_ref(&slot).addr(), first);
        slot.inc(); // resolves the stale note: 0 found, 1 expected
        assert_eq!(
            slot.shards(),
            0,
            "a counter used by one thread only grew a shard table"
        );
        assert_eq!(slot.sum(), 1);
    })
    .join()
    .unwrap();
}

/// The same stale-note effect in an ordinary loop of short-lived counters on
/// one thread: some of them grow although no other thread exists.
#[test]
fn review_short_lived_counters_in_a_loop_never_grow() {
    thread::spawn(|| {
        let mut grew = 0;
        for _ in 0..1000 {
            let c = Counter::with_max_shards(4);
            c.inc();
            c.inc();
            grew += usize::from(c.shards() != 0);
        }
        assert_eq!(grew, 0, "{grew} of 1000 single-thread counters grew");
    })
    .join()
    .unwrap();
}
