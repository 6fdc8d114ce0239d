#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! An idle or single-threaded `Counter` allocates nothing; a `CounterMap`
//! allocates with the keys it interns, not with its bound.
//!
//! The allocator counts only allocations made by a thread that has switched
//! counting on: the test harness's own threads allocate whenever they like
//! (libtest records running tests in a map from its main thread), and
//! counting those made this test fail about one run in two.

use shardcount::{Counter, CounterMap};
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
    static BYTES: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: defers to the system allocator; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCS.with(|a| a.set(a.get() + 1));
            BYTES.with(|b| b.set(b.get() + layout.size()));
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

/// How many bytes the calling thread allocates while running `f` (every
/// allocation's size, frees not subtracted).
fn bytes_of<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let before = BYTES.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    let out = f();
    COUNTING.with(|c| c.set(false));
    (BYTES.with(Cell::get) - before, out)
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
    // Warm the thread's first-use state: the thread-local index (nothing,
    // though std may allocate on first TLS use), and the word its pinned
    // reads mark, registered once per thread at its first (a take).
    let warm = Counter::new();
    warm.inc();
    let _ = warm.take();
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

/// A map's construction costs the same few bytes whatever its bound (it
/// once allocated a pointer per 127 possible keys: 66 KB for a bound of
/// 2^20, an abort for 2^40); its memory then grows with the keys interned.
#[test]
fn a_map_allocates_with_its_keys_not_its_bound() {
    drop(CounterMap::<u64>::new()); // first-use set-up (thread counts)
    for bound in [1 << 20, 1 << 40, usize::MAX] {
        let (bytes, m) = bytes_of(|| CounterMap::<u64>::with_max_keys(bound));
        assert!(
            bytes < 64 << 10,
            "bound {bound}: {bytes} bytes to construct"
        );
        drop(m);
    }
    let m = CounterMap::<u64>::with_max_keys(1 << 40);
    let (few, ()) = bytes_of(|| (0..10u64).for_each(|k| m.inc(&k)));
    let (many, ()) = bytes_of(|| (10..100_000u64).for_each(|k| m.inc(&k)));
    // At least each new counter's 8 bytes; at most a few hundred per key
    // (counter, intern entry, chunk pointer, growth of both).
    assert!(few < 16 << 10, "{few} bytes for 10 keys");
    assert!(
        (8 * 99_990..300 * 99_990).contains(&many),
        "{many} bytes for 99,990 keys"
    );
    assert_eq!(m.get(&99_999), Some(1));
}
