#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! A hostile key stream past a `CounterMap`'s bound keeps memory bounded
//! and loses no count: once the map is full, adds of new keys (distinct,
//! or all sharing one hash) allocate nothing and land in the overflow.
//!
//! The allocator counts only allocations made by a thread that has switched
//! counting on (the harness's own threads allocate whenever they like).

use shardcount::CounterMap;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hash::{Hash, Hasher};

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

/// (allocations, bytes) the calling thread makes while running `f` (frees
/// not subtracted).
fn allocated_by(f: impl FnOnce()) -> (usize, usize) {
    let (a, b) = (ALLOCS.with(Cell::get), BYTES.with(Cell::get));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    (ALLOCS.with(Cell::get) - a, BYTES.with(Cell::get) - b)
}

/// 1,000 URL keys fill the map (with about 200 bytes each at most, key
/// included); then 100,000 further distinct keys allocate nothing and are
/// all counted in the overflow.
#[test]
fn distinct_keys_past_the_bound_allocate_nothing_and_lose_nothing() {
    let first: Vec<String> = (0..1000).map(|i| format!("/page/{i}")).collect();
    let hostile: Vec<String> = (0..100_000).map(|i| format!("/x/{i}")).collect();
    let m: CounterMap<String> = CounterMap::with_max_keys(1000);
    m.inc("warm-up"); // the thread's first add may register the thread
    let (_, bytes) = allocated_by(|| first.iter().for_each(|k| m.inc(k)));
    assert!(
        bytes <= 1000 * 200 + 16 * 1024,
        "{bytes} bytes for 1,000 keys"
    );
    let (allocs, bytes) = allocated_by(|| hostile.iter().for_each(|k| m.add(k, 2)));
    assert_eq!((allocs, bytes), (0, 0), "adds past the bound allocated");
    assert_eq!(m.len(), 1000);
    assert_eq!(m.overflow(), 1 + 200_000); // "warm-up" took the last slot
    let kept: u64 = m.snapshot().iter().map(|e| e.1).sum();
    assert_eq!(kept + m.overflow(), 1 + 1000 + 200_000);
}

/// A key whose hash ignores its data: every key collides (what a stream
/// planned with the seeds could do).
#[derive(Clone, PartialEq, Eq, Debug)]
struct Colliding(u32);

impl Hash for Colliding {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u8(1);
    }
}

/// 300 colliding keys fill the map (each probe walks past the ones
/// before it) and count exactly; 20,000 more allocate nothing and go to
/// the overflow.
#[test]
fn colliding_keys_count_exactly_and_past_the_bound_allocate_nothing() {
    let m: CounterMap<Colliding> = CounterMap::with_max_keys(300);
    for round in 1..=3u64 {
        for k in 0..300 {
            m.add(&Colliding(k), round);
        }
    }
    assert_eq!(m.len(), 300);
    for k in 0..300 {
        assert_eq!(m.get(&Colliding(k)), Some(6));
    }
    assert_eq!(m.get(&Colliding(300)), None);
    let (allocs, _) = allocated_by(|| (300..20_300).for_each(|k| m.inc(&Colliding(k))));
    assert_eq!(allocs, 0);
    assert_eq!(m.overflow(), 20_000);
    assert_eq!(m.len(), 300);
}
