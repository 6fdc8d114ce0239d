#![cfg(not(loom))] // real threads and std atomics; the loom models are in loom-tests/
//! An idle or single-threaded `Counter` allocates nothing.

use shardcount::Counter;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: defers to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn single_thread_use_allocates_nothing() {
    // Warm the thread-local index first (it allocates nothing either, but
    // std may on first TLS use).
    Counter::new().inc();
    let before = ALLOCS.load(Ordering::Relaxed);
    let c = Counter::new();
    for i in 0..100_000 {
        c.add(i);
        if i % 1000 == 0 {
            let _ = c.sum();
        }
    }
    c.sub(5);
    let _ = c.take();
    let after = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(after - before, 0, "Counter allocated on a single thread");
    assert_eq!(c.shards(), 0);
    assert_eq!(std::mem::size_of::<Counter>(), 16);
}
