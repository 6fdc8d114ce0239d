#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! An idle or single-threaded `Counter` allocates nothing.
//!
//! The allocator counts only allocations made by a thread that has switched
//! counting on: the test harness's own threads allocate whenever they like
//! (libtest records running tests in a map from its main thread), and
//! counting those made this test fail about one run in two.

use shardcount::Counter;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

struct Counting;

std::thread_local! {
    // `const` and no destructor: reading it from inside the allocator can
    // neither allocate nor touch a destroyed thread-local.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: defers to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.with(|a| a.set(a.get() + 1));
        }
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

/// How many allocations the calling thread makes while running `f`.
fn allocations_of(f: impl FnOnce()) -> usize {
    let before = ALLOCS.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.with(Cell::get) - before
}

/// Another thread allocating all the while, as the harness may.
struct Noise {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Noise {
    fn start() -> Noise {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                while !stop.load(Ordering::Relaxed) {
                    drop(std::hint::black_box(vec![1u8; 8]));
                }
            }
        });
        Noise {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Noise {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

#[test]
fn allocation_counting_sees_this_thread_only() {
    let _noise = Noise::start();
    // The positive control: an allocation here is counted, so the next test
    // could fail.
    assert_eq!(
        allocations_of(|| drop(std::hint::black_box(Box::new(1u64)))),
        1
    );
    assert_eq!(
        allocations_of(|| std::thread::sleep(std::time::Duration::from_millis(5))),
        0,
        "another thread's allocations were counted"
    );
}

#[test]
fn single_thread_use_allocates_nothing() {
    let _noise = Noise::start();
    // Warm the thread-local index first (it allocates nothing either, but
    // std may on first TLS use).
    Counter::new().inc();
    let c = Counter::new();
    let n = allocations_of(|| {
        for i in 0..100_000 {
            c.add(i);
            if i % 1000 == 0 {
                let _ = std::hint::black_box(c.sum());
            }
        }
        c.sub(5);
        let _ = c.take();
    });
    assert_eq!(n, 0, "Counter allocated on a single thread");
    assert_eq!(c.shards(), 0);
    assert_eq!(std::mem::size_of::<Counter>(), 16);
}
