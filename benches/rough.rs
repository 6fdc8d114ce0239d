//! `RoughCounter` against its references.
//!
//! Criterion groups:
//! * `rough_1t`: one thread, `inc` vs `fetch_add`.
//! * `rough_2t`: two pinned threads, aggregate throughput.
//! * `rough_read`: `approx()` vs `AtomicU64::load`.
//! * `rough_sum`: `sum()` with 1, 4, 16, 64 parked threads holding slots.
//!
//! Then a paired section (see `shardcount_harness::measure::Session`): one
//! thread against the thread-local limit and `ThreadLocal<AtomicU64>`; two
//! threads as a fraction of the limit; one thread round-robin over 1,024
//! counters against one counter (and the same walk over contiguous padded
//! words, a lower bound on the memory's share, and over two designs'
//! floors: words each behind a pointer of their own, and a dense arena per
//! thread indexed by the counter); `approx()` against a `load`. Every run is sized to about 200 ms and checks the count.
//! `SHARDCOUNT_PAIRED=skip` skips it, `=only` runs only it;
//! `SHARDCOUNT_REPS` sets its repetitions (default 7);
//! `SHARDCOUNT_ONLY=<substring>` picks figures by title.

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use crossbeam_utils::CachePadded;
use shardcount::RoughCounter;
use shardcount_harness::measure::{bench_main, escape, opaque, Figure, Ratio, Session};
use shardcount_harness::subjects::{
    time_adds, time_adds_fresh, time_reads, Local, Stripe, Subject, TlLimit,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

type TlAtomic = shardcount_harness::peers::thread_local::ThreadLocal<AtomicU64>;

fn one_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("rough_1t");
    let a = AtomicU64::new(0);
    g.bench_function("atomic_fetch_add", |b| {
        b.iter_custom(|n| time_adds(&a, 1, n))
    });
    let r = RoughCounter::new();
    g.bench_function("rough_inc", |b| b.iter_custom(|n| time_adds(&r, 1, n)));
    g.finish();
}

fn two_threads(c: &mut Criterion) {
    let mut g = c.benchmark_group("rough_2t");
    // One iteration = one op on each of the two threads.
    g.throughput(Throughput::Elements(2));
    let a = AtomicU64::new(0);
    g.bench_function("atomic_fetch_add", |b| {
        b.iter_custom(|n| time_adds(&a, 2, n))
    });
    let r = RoughCounter::new();
    g.bench_function("rough_inc", |b| b.iter_custom(|n| time_adds(&r, 2, n)));
    g.finish();
}

fn reads(c: &mut Criterion) {
    let mut g = c.benchmark_group("rough_read");
    let a = AtomicU64::new(5);
    g.bench_function("atomic_load", |b| {
        b.iter_custom(|n| time_reads(&a, n, 5, |a| a.load(Ordering::Relaxed)))
    });
    let rough = RoughCounter::from(5);
    g.bench_function("rough_approx", |b| {
        b.iter_custom(|n| time_reads(&rough, n, 5, RoughCounter::approx))
    });
    g.finish();
}

/// `sum()` while `k` parked threads each hold a slot.
fn sum_vs_slots(c: &mut Criterion) {
    let mut g = c.benchmark_group("rough_sum");
    for k in [1usize, 4, 16, 64] {
        let counter = Arc::new(RoughCounter::new());
        let ready = Arc::new(Barrier::new(k + 1));
        let mut stops = Vec::new();
        let hs: Vec<_> = (0..k)
            .map(|_| {
                let (tx, rx) = mpsc::channel::<()>();
                stops.push(tx);
                let (counter, ready) = (Arc::clone(&counter), Arc::clone(&ready));
                std::thread::spawn(move || {
                    counter.inc();
                    ready.wait();
                    let _ = rx.recv(); // parked, holding its slot
                })
            })
            .collect();
        ready.wait();
        assert_eq!(counter.live_slots(), k);
        g.bench_with_input(BenchmarkId::from_parameter(k), &k, |b, &k| {
            b.iter_custom(|n| time_reads(&*counter, n, k as u64, RoughCounter::sum));
        });
        drop(stops);
        for h in hs {
            h.join().unwrap();
        }
    }
    g.finish();
}

criterion_group!(benches, one_thread, two_threads, reads, sum_vs_slots);

/// `n` adds on this thread, round-robin over `items` (a power-of-two
/// count; the same loop for one and for many), each by `add`; checks
/// that the items' `count`s grew by exactly `n`.
fn round_robin<T>(items: &[T], n: u64, add: impl Fn(&T), count: impl Fn(&T) -> u64) -> Duration {
    assert!(items.len().is_power_of_two());
    let mask = items.len() - 1;
    let its = escape(items);
    let total = || its.iter().map(&count).sum::<u64>();
    let before = total();
    let start = Instant::now();
    for i in 0..n {
        add(&its[i as usize & mask]);
        opaque();
    }
    let elapsed = start.elapsed();
    assert_eq!(total() - before, n, "round robin: lost or extra counts");
    elapsed
}

/// [`round_robin`] over rough counters.
fn round_robin_counters(counters: &[RoughCounter], n: u64) -> Duration {
    round_robin(counters, n, RoughCounter::inc, RoughCounter::sum)
}

/// [`round_robin`] over words each on lines of its own, as a rough slot
/// is, added to with a plain load and store, in one contiguous block: a
/// lower bound on what walking the counters' lines costs (a counter's add
/// reads three lines, scattered: the counter, its block's bucket pointer,
/// the slot).
fn round_robin_words(words: &[CachePadded<AtomicU64>], n: u64) -> Duration {
    round_robin(
        words,
        n,
        // Relaxed: this thread's own words, read back on this thread.
        |w| w.store(w.load(Ordering::Relaxed) + 1, Ordering::Relaxed),
        |w| w.load(Ordering::Relaxed),
    )
}

/// A counter of the per-thread arena design: its index into every
/// thread's own dense array of words (one 8-byte word per counter per
/// thread, so 1,024 counters share 128 lines), the size of a
/// `RoughCounter`.
#[repr(align(32))]
struct ArenaCounter {
    at: usize,
}

/// The calling thread's arena: its first word, behind a thread-local
/// pointer loaded on every add (the fastest thread-local form here).
#[derive(Clone, Copy)]
struct Arena(*const AtomicU64);

std::thread_local! {
    static ARENA: std::cell::Cell<Arena> = const { std::cell::Cell::new(Arena(std::ptr::null())) };
}

/// [`round_robin`] over arena counters: each add loads the thread's arena
/// pointer and the counter's index, then adds to that word with a load and
/// a store. What a design with one dense arena per thread could reach.
fn round_robin_arena(counters: &[ArenaCounter], arena: &[AtomicU64], n: u64) -> Duration {
    ARENA.with(|a| a.set(Arena(arena.as_ptr())));
    let word = |c: &ArenaCounter| {
        let base = ARENA.with(std::cell::Cell::get).0;
        assert!(c.at < arena.len());
        // SAFETY: `base` is `arena`'s first word on this thread, and `at`
        // is inside it (asserted).
        unsafe { &*base.add(c.at) }
    };
    round_robin(
        counters,
        n,
        // Relaxed: this thread's own words, read back on this thread.
        |c| {
            let w = word(c);
            w.store(w.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        },
        |c| word(c).load(Ordering::Relaxed),
    )
}

/// [`round_robin`] over words each behind a pointer of its own, on lines
/// of its own, allocated one by one: a design whose counter points at its
/// slot (two dependent lines per add, the counter's and the slot's).
fn round_robin_boxed(words: &[Box<CachePadded<AtomicU64>>], n: u64) -> Duration {
    round_robin(
        words,
        n,
        // Relaxed: this thread's own words, read back on this thread.
        |w| w.store(w.load(Ordering::Relaxed) + 1, Ordering::Relaxed),
        |w| w.load(Ordering::Relaxed),
    )
}

fn paired_report() {
    let mut s = Session::new("rough", 7);

    s.run(
        Figure::new(
            "1 thread: RoughCounter::add cost vs the thread-local limit",
            1,
            Ratio::Cost,
        )
        .reference(TlLimit::NAME, |n| time_adds_fresh::<TlLimit>(1, n))
        .vs(RoughCounter::NAME, |n| {
            time_adds_fresh::<RoughCounter>(1, n)
        })
        .vs("ThreadLocal<AtomicU64>", |n| {
            time_adds_fresh::<TlAtomic>(1, n)
        })
        .vs("AtomicU64::fetch_add", |n| {
            time_adds_fresh::<AtomicU64>(1, n)
        })
        .vs(Local::NAME, |n| time_adds_fresh::<Local>(1, n))
        .compare(RoughCounter::NAME, "ThreadLocal<AtomicU64>")
        .compare(RoughCounter::NAME, "AtomicU64::fetch_add"),
    );

    s.run(
        Figure::new(
            "2 threads: throughput as a fraction of the thread-local limit",
            2,
            Ratio::Throughput,
        )
        .reference(TlLimit::NAME, |n| time_adds_fresh::<TlLimit>(2, n))
        .vs(RoughCounter::NAME, |n| {
            time_adds_fresh::<RoughCounter>(2, n)
        })
        .vs("ThreadLocal<AtomicU64>", |n| {
            time_adds_fresh::<TlAtomic>(2, n)
        })
        .vs(Stripe::NAME, |n| time_adds_fresh::<Stripe>(2, n))
        .vs(Local::NAME, |n| time_adds_fresh::<Local>(2, n))
        .vs("AtomicU64 (shared)", |n| time_adds_fresh::<AtomicU64>(2, n))
        .compare(RoughCounter::NAME, "AtomicU64 (shared)"),
    );

    // Built once: a thread's first add to a counter takes a slot, and the
    // slots of dropped counters are not what this figure is about.
    let one: Vec<RoughCounter> = (0..1).map(|_| RoughCounter::new()).collect();
    let many: Vec<RoughCounter> = (0..1024).map(|_| RoughCounter::new()).collect();
    let one_word: Vec<CachePadded<AtomicU64>> = vec![CachePadded::default()];
    let words: Vec<CachePadded<AtomicU64>> = (0..1024).map(|_| CachePadded::default()).collect();
    let one_boxed: Vec<Box<CachePadded<AtomicU64>>> = vec![Box::default()];
    let boxed: Vec<Box<CachePadded<AtomicU64>>> = (0..1024).map(|_| Box::default()).collect();
    let arena: Vec<AtomicU64> = (0..1024).map(|_| AtomicU64::new(0)).collect();
    let one_arena = [ArenaCounter { at: 0 }];
    let arenas: Vec<ArenaCounter> = (0..1024).map(|at| ArenaCounter { at }).collect();
    s.run(
        Figure::new(
            "1 thread: round-robin over 1,024 RoughCounters vs one",
            1,
            Ratio::Cost,
        )
        .reference("1 counter", |n| round_robin_counters(&one, n))
        .vs("1,024 counters, round-robin", |n| {
            round_robin_counters(&many, n)
        })
        // A lower bound on the memory's share: the same walk over
        // contiguous padded words.
        .vs(ONE_WORD, |n| round_robin_words(&one_word, n))
        .vs(WORDS, |n| round_robin_words(&words, n))
        // Two designs' floors, each against the same walk over one counter.
        .vs(ONE_BOXED, |n| round_robin_boxed(&one_boxed, n))
        .vs(BOXED, |n| round_robin_boxed(&boxed, n))
        .vs(ONE_ARENA, |n| round_robin_arena(&one_arena, &arena, n))
        .vs(ARENA_WALK, |n| round_robin_arena(&arenas, &arena, n))
        .compare(WORDS, ONE_WORD)
        .compare(BOXED, ONE_BOXED)
        .compare(ARENA_WALK, ONE_ARENA),
    );

    let a = AtomicU64::new(5);
    let r = RoughCounter::from(5);
    s.run(
        Figure::new(
            "idle: RoughCounter::approx cost vs AtomicU64::load",
            1,
            Ratio::Cost,
        )
        .reference("AtomicU64::load", |n| {
            time_reads(&a, n, 5, |a| a.load(Ordering::Relaxed))
        })
        .vs("RoughCounter::approx", |n| {
            time_reads(&r, n, 5, RoughCounter::approx)
        }),
    );

    s.finish();
}

const ONE_WORD: &str = "1 padded word, load + store";
const WORDS: &str = "1,024 padded words, round-robin";
const ONE_BOXED: &str = "1 boxed padded word";
const BOXED: &str = "1,024 boxed padded words, round-robin";
const ONE_ARENA: &str = "1 arena counter";
const ARENA_WALK: &str = "1,024 arena counters, round-robin";

fn main() {
    bench_main(benches, paired_report);
}
