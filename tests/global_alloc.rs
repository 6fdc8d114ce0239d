//! Counting from inside a `#[global_allocator]`: the use of a hot counter
//! that re-enters the crate, since a thread's first adds (and a table's
//! growth) allocate. Every type must count each allocation exactly once,
//! with no recursion, deadlock or abort (`thread::reentry`). The reference
//! is a plain `AtomicU64` added in the same branch of the same call.

use shardcount::{
    Counter, CounterMap, Histogram, Label, LabelledCounter, LabelledHistogram, MaxCounter,
    RoughCounter, Stock,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};

#[derive(Clone, Copy, Label)]
enum Size {
    Small,
    Large,
}

static COUNTER: Counter = Counter::new();
static ROUGH: RoughCounter = RoughCounter::new();
static LABELLED: LabelledCounter<Size> = LabelledCounter::new();
static HISTOGRAM: Histogram = Histogram::new();
static MAX: MaxCounter = MaxCounter::new();
// Its first record (made inside the allocator) makes its histograms.
static LABELLED_HISTOGRAM: LabelledHistogram<Size> = LabelledHistogram::new();
static STOCK: LazyLock<Stock> = LazyLock::new(|| Stock::new(0));
// Batch 1: every add folds, the first one registering under a lock.
shardcount::local_counter!(static LOCAL, batch = 1);
// Keyed by size class: its keys are new while the allocator counts, and
// interning one allocates under the map's lock.
static MAP: LazyLock<CounterMap<u32>> = LazyLock::new(CounterMap::new);

/// Two maps for mode 9, and the key each of its adds makes new.
static TWO_MAPS: LazyLock<[CounterMap<u64>; 2]> =
    LazyLock::new(|| [CounterMap::new(), CounterMap::new()]);
static NEXT_KEY: AtomicU64 = AtomicU64::new(0);

/// Which counter the allocator adds to (0: none).
static MODE: AtomicUsize = AtomicUsize::new(0);
/// The same count, in one shared atomic.
static REFERENCE: AtomicU64 = AtomicU64::new(0);
/// The largest value `MAX` was given.
static MAX_REFERENCE: AtomicU64 = AtomicU64::new(0);
/// Frees counted by threads that set `COUNT_FREES`, and their reference.
static FREES: RoughCounter = RoughCounter::new();
static FREES_REFERENCE: AtomicU64 = AtomicU64::new(0);

std::thread_local! {
    /// Under mode 9, the map this thread's allocations count into.
    static OTHER: Cell<Option<usize>> = const { Cell::new(None) };
    /// Whether this thread's frees are counted (workers only, so that no
    /// other thread leaves counts unfolded).
    static COUNT_FREES: Cell<bool> = const { Cell::new(false) };
    /// Under mode 10, the counter this thread's allocations count into.
    static FRESH: Cell<*const RoughCounter> = const { Cell::new(std::ptr::null()) };
    /// Whether this thread is one of `allocate_under`'s workers, whose
    /// allocations modes 1 to 8 count. Counting other threads' too (the
    /// harness's, other tests') raced the reads: an allocation counted in
    /// the counter but not yet in the reference when the test read both.
    static WORKER: Cell<bool> = const { Cell::new(false) };
}

struct Counting;

// SAFETY: every call is passed to `System` unchanged; the counting around
// it touches no memory the caller owns.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let mode = MODE.load(Ordering::Relaxed);
        if (1..=8).contains(&mode) && !WORKER.try_with(Cell::get).unwrap_or(false) {
            // SAFETY: the caller's layout, passed on.
            return unsafe { System.alloc(layout) };
        }
        match mode {
            1 => COUNTER.inc(),
            2 => ROUGH.inc(),
            3 => LABELLED.inc(if layout.size() > 64 {
                Size::Large
            } else {
                Size::Small
            }),
            4 => HISTOGRAM.record(layout.size() as u64),
            5 => {
                let v = REFERENCE.load(Ordering::Relaxed);
                MAX.record(v);
                MAX_REFERENCE.fetch_max(v, Ordering::Relaxed);
                STOCK.add(1);
            }
            6 => LOCAL.inc(),
            7 => LABELLED_HISTOGRAM.record(Size::Small, layout.size() as u64),
            8 => MAP.inc(&layout.size().next_power_of_two().trailing_zeros()),
            // Into the other thread's map, by a new key, while this thread
            // evicts from its own (see the test).
            9 => match OTHER.try_with(Cell::get) {
                Ok(Some(other)) => TWO_MAPS[other].inc(&NEXT_KEY.fetch_add(1, Ordering::Relaxed)),
                // SAFETY: the caller's layout, passed on.
                _ => return unsafe { System.alloc(layout) },
            },
            10 => match FRESH.try_with(Cell::get) {
                // SAFETY: the test sets it to a counter it keeps alive
                // until it clears it.
                Ok(fresh) if !fresh.is_null() => unsafe { &*fresh }.inc(),
                // SAFETY: the caller's layout, passed on.
                _ => return unsafe { System.alloc(layout) },
            },
            // SAFETY: the caller's layout, passed on.
            _ => return unsafe { System.alloc(layout) },
        }
        REFERENCE.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if COUNT_FREES.try_with(Cell::get).unwrap_or(false) {
            FREES.inc();
            FREES_REFERENCE.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: `p` came from `System.alloc` with this layout.
        unsafe { System.dealloc(p, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Fails the test process, naming `what`, if `done` is not set within a
/// minute: a wait inside the allocator would otherwise hang the test.
fn watchdog(done: &'static std::sync::atomic::AtomicBool, what: &'static str) {
    use std::time::{Duration, Instant};
    std::thread::spawn(move || {
        let start = Instant::now();
        while !done.load(Ordering::Relaxed) {
            if start.elapsed() > Duration::from_secs(60) {
                MODE.store(0, Ordering::Relaxed); // printing allocates
                eprintln!("{what} waited for 60 s");
                std::process::exit(1);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
}

/// One mode at a time: the tests share `MODE` and the reference.
fn one_mode() -> std::sync::MutexGuard<'static, ()> {
    static ONE_MODE: Mutex<()> = Mutex::new(());
    ONE_MODE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Four threads, each boxing values (their first adds allocate inside the
/// allocator), counted under `mode`; returns the reference's count.
fn allocate_under(mode: usize) -> u64 {
    let _one = one_mode();
    let before = REFERENCE.load(Ordering::Relaxed);
    MODE.store(mode, Ordering::Relaxed);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            std::thread::spawn(move || {
                WORKER.set(true);
                let v: Vec<Box<u64>> = (0..20_000).map(|i| Box::new(i + t)).collect();
                v.len()
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 20_000);
    }
    MODE.store(0, Ordering::Relaxed);
    REFERENCE.load(Ordering::Relaxed) - before
}

#[test]
fn counters_inside_a_global_allocator_count_every_allocation_once() {
    let n = allocate_under(1);
    assert!(n >= 80_000, "{n} allocations counted");
    assert_eq!(COUNTER.sum(), n, "Counter");

    let n = allocate_under(2);
    assert_eq!(ROUGH.sum(), n, "RoughCounter::sum");
    ROUGH.flush_all();
    assert_eq!(ROUGH.approx(), n, "RoughCounter::approx after the joins");

    let n = allocate_under(3);
    assert_eq!(LABELLED.sum(), n, "LabelledCounter");

    let n = allocate_under(4);
    assert_eq!(HISTOGRAM.count(), n, "Histogram");

    LazyLock::force(&STOCK);
    let n = allocate_under(5);
    assert_eq!(STOCK.sum(), n, "Stock");
    assert_eq!(
        MAX.get(),
        MAX_REFERENCE.load(Ordering::Relaxed),
        "MaxCounter"
    );

    let n = allocate_under(6);
    assert_eq!(LOCAL.sum(), n, "local_counter!");

    let n = allocate_under(7);
    let small = LABELLED_HISTOGRAM.snapshot(Size::Small).count();
    assert_eq!(small, n, "LabelledHistogram");
}

/// A `CounterMap` whose keys are new while a global allocator counts with
/// it: interning a key allocates under the map's lock, and the allocator's
/// add made there must not wait for that lock (its own thread holds it).
/// Every allocation is counted once, under its key or in the overflow
/// counter. A watchdog fails the test if it waits.
#[test]
fn a_map_interning_keys_inside_a_global_allocator_counts_every_allocation_once() {
    use std::sync::atomic::AtomicBool;
    static COUNTED: AtomicBool = AtomicBool::new(false);
    LazyLock::force(&MAP);
    watchdog(&COUNTED, "a map's add inside the allocator");
    // Set however `allocate_under` ends, so the watchdog only fails a wait.
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            COUNTED.store(true, Ordering::Relaxed);
        }
    }
    let counted = Counted;
    let n = allocate_under(8);
    drop(counted);
    assert!(n >= 80_000, "{n} allocations counted");
    let keyed: u64 = MAP.snapshot().iter().map(|(_, v)| v).sum();
    assert!(MAP.len() >= 2, "size classes: {:?}", MAP.snapshot());
    assert_eq!(keyed + MAP.overflow(), n, "keyed {keyed} + overflow");
}

/// Two threads, each evicting keys from its own map while its allocations
/// (the eviction's own among them, made under that map's lock) add new
/// keys to the other's: an add by a new key made while its thread holds a
/// map's lock counts in the overflow, so neither waits for the other's
/// lock. Every allocation counted is in one map, keyed or in overflow.
#[test]
fn evicting_maps_whose_allocations_count_in_each_other_never_wait() {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;
    static DONE: AtomicBool = AtomicBool::new(false);
    LazyLock::force(&TWO_MAPS);
    watchdog(&DONE, "two evicting maps");
    let _one = one_mode();
    let before = REFERENCE.load(Ordering::Relaxed);
    MODE.store(9, Ordering::Relaxed);
    let evicted: u64 = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2usize)
            .map(|me| {
                s.spawn(move || {
                    let mut evicted = 0;
                    for _ in 0..500 {
                        for k in 0..8 {
                            TWO_MAPS[me].inc(&k);
                        }
                        let _ = TWO_MAPS[me].evict_idle(Duration::ZERO); // notes
                        OTHER.with(|o| o.set(Some(1 - me)));
                        let gone = TWO_MAPS[me].evict_idle(Duration::ZERO);
                        OTHER.with(|o| o.set(None));
                        evicted += gone.iter().map(|(_, v)| v).sum::<u64>();
                    }
                    evicted
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    });
    MODE.store(0, Ordering::Relaxed);
    DONE.store(true, Ordering::Relaxed);
    let counted = REFERENCE.load(Ordering::Relaxed) - before;
    let kept: u64 = TWO_MAPS
        .iter()
        .map(|m| m.snapshot().iter().map(|(_, v)| v).sum::<u64>() + m.overflow())
        .sum();
    assert!(counted > 0, "no allocation counted");
    // The maps hold the allocations counted and the test's own adds.
    assert_eq!(kept + evicted, counted + 2 * 500 * 8);
}

/// A dropped `RoughCounter` gives its arena position back under the
/// position pool's lock, where the pool's heap may grow (allocate). An
/// allocator that counts with a counter not used yet then installs it,
/// which takes a position: it must not wait for the lock its own thread
/// holds. Each round drops more counters at once than any before, so the
/// heap grows during it, while the allocations count into a new counter.
#[test]
fn rough_counters_installed_while_positions_go_back_never_wait() {
    use std::sync::atomic::AtomicBool;
    static DONE: AtomicBool = AtomicBool::new(false);
    watchdog(&DONE, "positions given back under a counting allocator");
    let _one = one_mode();
    for round in 0..12 {
        let old: Vec<RoughCounter> = (0..1u64 << round).map(RoughCounter::from).collect();
        let fresh = RoughCounter::new();
        FRESH.with(|f| f.set(&fresh));
        let before = REFERENCE.load(Ordering::Relaxed);
        MODE.store(10, Ordering::Relaxed);
        drop(old);
        MODE.store(0, Ordering::Relaxed);
        FRESH.with(|f| f.set(std::ptr::null()));
        let counted = REFERENCE.load(Ordering::Relaxed) - before;
        assert_eq!(fresh.sum(), counted, "round {round}");
    }
    DONE.store(true, Ordering::Relaxed);
}

/// A thread's exit hands its slots over one counter at a time, and drops
/// what its registry held for each: frees, which an allocator may count
/// with a counter whose slot is already handed over, or not yet. No such
/// add may reach a handed-over slot through the thread's last-used cache,
/// or the slot stays armed while free and the next thread at that index
/// adds without taking it over (its exit would fold nothing). Each worker
/// uses a counter of its own first (registered before `FREES`) and drops
/// it, so its block is freed during the exit; two rounds, so that the
/// second reuses the first's indexes. Only exit folds bring `approx` up.
#[test]
fn frees_counted_during_a_threads_exit_are_folded_exactly() {
    for round in 0..2 {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let own = RoughCounter::new();
                    own.inc(); // registered before FREES
                    COUNT_FREES.with(|c| c.set(true));
                    for i in 0..100u64 {
                        // black_box: else the pair may be elided.
                        drop(std::hint::black_box(Box::new(i))); // counted by FREES
                    }
                    drop(own); // its block is freed at the exit
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let n = FREES_REFERENCE.load(Ordering::Relaxed);
        assert!(n >= 400 * (round + 1), "{n} frees counted");
        assert_eq!(FREES.sum(), n, "sum, round {round}");
        assert_eq!(FREES.approx(), n, "approx after the joins, round {round}");
    }
}
