//! Issue 30's goals: owned rows written with a plain load and store,
//! measured against references that write the same way. A paired section
//! only (see `shardcount_harness::measure::Session`): every subject runs in
//! the same repetitions as its reference, in alternating order, and the
//! medians of the within-repetition ratios are printed.
//!
//! * (after the 2-thread figures) 1 thread, cost vs a bare `fetch_add`:
//!   `Counter` idle (never contended, one `fetch_add` on its base),
//!   `Counter` after `split(2)` (an owned row), `RoughCounter`,
//!   `local_counter!` and the thread-local limit in four forms.
//! * (last, x86-64) the hit's shapes in `asm!`, on 1 and 2 threads:
//!   `Counter`'s hit, the same with one more test (`RoughCounter`'s
//!   carry, or a register's), and the limit's add with no test.
//! * 2 threads, `Counter` throughput vs the thread-local limit
//!   (`tl-limit`): a fresh `Counter` that grows on contention (both
//!   threads add to it from their first add), and one grown ahead of time
//!   with `split(2)`.
//! * 2 threads, 12 counters walked `0, 1, .., 11, 0, ..`: `CounterSet::inc`
//!   and `LabelledCounter::inc` (an enum of 12) vs one
//!   `CachePadded<[AtomicU64; 16]>` row per thread written with a load and
//!   a store, found through a `const` thread-local index (as the harness's
//!   stripe finds its slot).
//! * 2 threads, `Histogram::record` (default layout) vs one padded array of
//!   976 bucket words and a sum per thread, written with loads and stores,
//!   the same log-linear index, the row found as above.
//!
//! The limit comes in three forms (and a fourth, below) because the notes
//! warn that the `Cell` add (`tl-limit`, the reference) can compile to a read-modify-write of
//! `fs:`-relative memory that runs slower than one through an ordinary
//! pointer. On x86-64 with fat LTO (rustc 1.95) the `Cell` add is
//! `incq %fs:X` plus the first-use test; the volatile form, meant as a
//! separate load and store, is folded into the same `incq %fs:X` without
//! the test; the pointer form (the cell found once) is `incq (%reg)`, the
//! form an owned-row add takes. Ratios to each are printed, so the fastest
//! can be the one quoted. Every run checks its count. A fourth form,
//! `tl-limit (cached and checked, as a hit)`, is a counter's cached hit
//! and nothing else: an owner and an address loaded from a thread-local
//! for each add, the owner compared with a static's, the add through the
//! address. No goal's reference, but a measure of what the hit's loads
//! and test cost on the host (`docs/benchmarks.md`). Two more tell the
//! loads from the test: `tl-limit (address loaded per add, no check)`,
//! and `tl-limit (thread-local words, position loaded per add)`, a word of
//! a thread-local array at a position loaded for each add (the hit a
//! counter could have if its words lived in the thread-local block).
//!
//! The subjects that need `split` (which commits before 3cbf28d lack)
//! sit between `split:` begin and end marker comments: delete those lines
//! (`sed '/split:b[e]gin/,/split:e[n]d/d'`) to run this there.
//!
//! `SHARDCOUNT_REPS` sets the repetitions (default 9),
//! `SHARDCOUNT_ONLY=<substring>` picks figures by title. Without
//! cross-crate LTO, as users build:
//! `CARGO_PROFILE_BENCH_LTO=false CARGO_PROFILE_BENCH_CODEGEN_UNITS=16 cargo bench --bench plain`.
//! A loop that spans two 64-byte lines can run several times slower than
//! the same bytes within one (`docs/benchmarks.md`, "the no-LTO slowdown
//! is where the loop sits"): to tell placement from code, build again with
//! `RUSTFLAGS="-C llvm-args=-align-loops=64"` and compare.

use crossbeam_utils::CachePadded;
use shardcount::{Counter, CounterSet, Histogram, Label, LabelledCounter, RoughCounter};
use shardcount_harness::measure::{
    bench_main, escape, opaque, run_threads, Figure, Ratio, Session,
};
use shardcount_harness::subjects::{time_adds, time_adds_fresh, Local, Subject, TlLimit};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

const THREADS: usize = 2;

/// Rows of a per-thread reference: a power of two above the threads of one
/// run, so that two threads started together (consecutive tickets) never
/// share a row.
const ROWS: usize = 8;

/// Marks a thread that has no row index yet.
const NO_INDEX: usize = usize::MAX;

/// Next row index to hand out.
static NEXT_ROW: AtomicUsize = AtomicUsize::new(0);

std::thread_local! {
    /// This thread's row index (`const`: no lazy-init or destructor state).
    static ROW_INDEX: Cell<usize> = const { Cell::new(NO_INDEX) };
}

/// The calling thread's row index, handed out on its first use.
#[cold]
#[inline(never)]
fn assign_row() -> usize {
    // Relaxed: a ticket; nothing is published with it.
    let i = NEXT_ROW.fetch_add(1, Ordering::Relaxed) % ROWS;
    ROW_INDEX.with(|c| c.set(i));
    i
}

/// The calling thread's row, as the stripe finds its slot.
#[inline(always)]
fn row_index() -> usize {
    let mut i = ROW_INDEX.with(Cell::get);
    if i == NO_INDEX {
        i = assign_row();
    }
    i & (ROWS - 1)
}

/// Adds `n` to a word only the calling thread writes: a load and a store.
#[inline(always)]
fn store_add(w: &AtomicU64, n: u64) {
    // Relaxed: one writer per word; readers read after the join.
    w.store(w.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

std::thread_local! {
    /// The second and third forms of the limit: a `const` cell without a
    /// destructor, read and written through volatile accesses (which the
    /// compiler may still fold into one add to memory) or through a pointer
    /// found once.
    static PLAIN_CELL: Cell<u64> = const { Cell::new(0) };
}

/// Where exited threads' `PLAIN_CELL` counts go (folded by the run itself,
/// on each thread before it returns: no guard needed inside a bench).
static PLAIN_SINK: AtomicU64 = AtomicU64::new(0);

/// Runs `work` (one thread's adds to its `PLAIN_CELL`, folded into
/// `PLAIN_SINK`) on `threads` threads (the calling one when 1), and checks
/// that the sink grew by `n` per thread.
fn run_limit(threads: usize, n: u64, form: &str, work: impl Fn(usize) + Sync) -> Duration {
    // Relaxed: read after the join (or on this thread).
    let before = PLAIN_SINK.load(Ordering::Relaxed);
    let t = if threads == 1 {
        let s = std::time::Instant::now();
        work(0);
        s.elapsed()
    } else {
        run_threads(threads, work)
    };
    assert_eq!(
        PLAIN_SINK.load(Ordering::Relaxed) - before,
        threads as u64 * n,
        "limit ({form}): lost counts"
    );
    t
}

/// `n` adds per thread on `threads` threads (the calling one when 1) to
/// the volatile load-and-store form of the thread-local limit; checks the
/// count.
fn plain_limit(threads: usize, n: u64) -> Duration {
    let work = |_: usize| {
        let p = PLAIN_CELL.with(Cell::as_ptr);
        let start = PLAIN_CELL.with(Cell::get);
        for _ in 0..n {
            PLAIN_CELL.with(|c| {
                let p = c.as_ptr();
                // SAFETY: the thread's own cell, valid for its lifetime;
                // nothing else holds a reference to it.
                unsafe { p.write_volatile(p.read_volatile() + 1) };
            });
            opaque();
        }
        // SAFETY: as above.
        let end = unsafe { p.read_volatile() };
        // Relaxed: read after the join.
        PLAIN_SINK.fetch_add(end - start, Ordering::Relaxed);
    };
    run_limit(threads, n, "load + store", work)
}

/// `n` adds per thread on `threads` threads (the calling one when 1) to
/// the limit in a third form: the thread's `PLAIN_CELL` found once, then
/// added to through an ordinary pointer (which escapes, so every add is a
/// memory access past the `opaque` barrier), as a counter inlined into a
/// loop can find its thread-local once. Folded into `PLAIN_SINK`; checks
/// the count.
fn pointer_limit(threads: usize, n: u64) -> Duration {
    let work = |_: usize| {
        let p = PLAIN_CELL.with(Cell::as_ptr);
        // SAFETY: the thread's own cell, valid for its lifetime; nothing
        // else holds a reference to it while this runs.
        let cell = escape(unsafe { &*p.cast::<AtomicU64>() });
        let start = cell.load(Ordering::Relaxed);
        for _ in 0..n {
            store_add(cell, 1);
            opaque();
        }
        // Relaxed: read after the join (or on this thread).
        PLAIN_SINK.fetch_add(cell.load(Ordering::Relaxed) - start, Ordering::Relaxed);
    };
    run_limit(threads, n, "pointer", work)
}

/// `n` adds per thread on `threads` threads (the calling one when 1) to
/// the limit in a fifth form: the fourth's address loaded from the
/// thread-local for each add, with no owner and no test, to tell what the
/// hit's test costs from what its loads cost. Checks the count.
fn loaded_limit(threads: usize, n: u64) -> Duration {
    let work = |_: usize| {
        let p = PLAIN_CELL
            .with(Cell::as_ptr)
            .cast::<AtomicU64>()
            .cast_const();
        PLAIN_AT.with(|at| at.set((0, p)));
        // SAFETY: the thread's own cell, valid for its lifetime; nothing
        // else holds a reference to it while this runs.
        let start = unsafe { &*p }.load(Ordering::Relaxed);
        for _ in 0..n {
            let at = PLAIN_AT.with(|at| at.get().1);
            // SAFETY: as above: `PLAIN_AT` holds this thread's cell.
            store_add(unsafe { &*at }, 1);
            opaque();
        }
        // SAFETY: as above. Relaxed: read after the join (or on this thread).
        let end = unsafe { &*p }.load(Ordering::Relaxed);
        PLAIN_SINK.fetch_add(end - start, Ordering::Relaxed);
    };
    run_limit(threads, n, "address loaded", work)
}

std::thread_local! {
    /// The sixth form: words in the thread-local block itself, one per
    /// position, as a counter whose position picks its word could use.
    static PLAIN_WORDS: [Cell<u64>; 64] = const { [const { Cell::new(0) }; 64] };
}

/// The position the sixth form adds at, loaded for each add.
static POSITION: AtomicUsize = AtomicUsize::new(5);

/// `n` adds per thread on `threads` threads (the calling one when 1) to
/// the limit in a sixth form: a `PLAIN_WORDS` word at a position loaded
/// (from an escaped static) for each add, `%fs`-relative and indexed, with
/// no test. Checks the count.
fn indexed_limit(threads: usize, n: u64) -> Duration {
    let work = |_: usize| {
        let position = escape(&POSITION);
        // Relaxed: a constant.
        let at = position.load(Ordering::Relaxed);
        let start = PLAIN_WORDS.with(|w| w[at].get());
        for _ in 0..n {
            // Relaxed: as above; masked, so the bounds check folds away.
            let i = position.load(Ordering::Relaxed) & 63;
            PLAIN_WORDS.with(|w| w[i].set(w[i].get() + 1));
            opaque();
        }
        let end = PLAIN_WORDS.with(|w| w[at].get());
        // Relaxed: read after the join (or on this thread).
        PLAIN_SINK.fetch_add(end - start, Ordering::Relaxed);
    };
    run_limit(threads, n, "indexed", work)
}

std::thread_local! {
    /// The fourth form: an owner and the address of the thread's
    /// `PLAIN_CELL`, as a counter's hit finds its row or slot in the
    /// thread's cache.
    static PLAIN_AT: Cell<(usize, *const AtomicU64)> = const { Cell::new((0, std::ptr::null())) };
}

/// The owner `PLAIN_AT` is compared with, as a counter's hit compares its
/// cache with the counter.
static PLAIN_OWNER: AtomicUsize = AtomicUsize::new(1);

/// `n` adds per thread on `threads` threads (the calling one when 1) to
/// the limit in its fourth form: a counter's cached hit and nothing else.
/// Each add loads an owner and an address from a thread-local and the
/// owner it must match from a static (the `opaque` barrier makes the
/// compiler load them again), tests, and adds through the address. Not a
/// goal's reference (the pointer found once is faster): it measures what
/// the hit's load and test cost on the host. Folded into `PLAIN_SINK`;
/// checks the count.
fn checked_limit(threads: usize, n: u64) -> Duration {
    let work = |_: usize| {
        let p = PLAIN_CELL
            .with(Cell::as_ptr)
            .cast::<AtomicU64>()
            .cast_const();
        // Escaped, so the compiler cannot fold its loads into the constant.
        let counter_owner = escape(&PLAIN_OWNER);
        // Relaxed: a constant, read as a counter's hit reads its head.
        PLAIN_AT.with(|at| at.set((counter_owner.load(Ordering::Relaxed), p)));
        // SAFETY: the thread's own cell, valid for its lifetime; nothing
        // else holds a reference to it while this runs.
        let start = unsafe { &*p }.load(Ordering::Relaxed);
        for _ in 0..n {
            let (owner, at) = PLAIN_AT.with(Cell::get);
            // Relaxed: as above.
            if owner == counter_owner.load(Ordering::Relaxed) {
                // SAFETY: as above: `PLAIN_AT` holds this thread's cell.
                store_add(unsafe { &*at }, 1);
            } else {
                unreachable!("the owner never changes");
            }
            opaque();
        }
        // SAFETY: as above. Relaxed: read after the join (or on this thread).
        let end = unsafe { &*p }.load(Ordering::Relaxed);
        PLAIN_SINK.fetch_add(end - start, Ordering::Relaxed);
    };
    run_limit(threads, n, "cached and checked", work)
}

// split:begin
/// A `Counter` grown to 2 rows ahead of time, `n` adds per thread.
fn split_counter(threads: usize, n: u64) -> Duration {
    let c = CachePadded::new(Counter::new());
    assert_eq!(c.split(2), 2, "split(2)");
    time_adds(&*c, threads, n)
}
// split:end

/// Twelve labels, for the labelled counter.
#[derive(Clone, Copy, Label)]
enum Route {
    Home,
    Search,
    Product,
    Cart,
    Checkout,
    Login,
    Logout,
    Account,
    Orders,
    Help,
    Admin,
    Health,
}

const COUNTERS: usize = 12;

/// `n` adds per thread on 2 threads, each walking counters 0..12 in turn
/// (the add given the counter's index); checks the total afterwards.
fn walk12(n: u64, add: impl Fn(usize) + Sync, total: impl Fn() -> u64) -> Duration {
    let before = total();
    let t = run_threads(THREADS, |_| {
        let mut j = 0usize;
        for _ in 0..n {
            add(j);
            opaque();
            j += 1;
            if j == COUNTERS {
                j = 0;
            }
        }
    });
    assert_eq!(
        total() - before,
        THREADS as u64 * n,
        "12 counters: lost or extra counts"
    );
    t
}

/// The per-thread plain-store row reference for 12 counters.
struct PlainRows([CachePadded<[AtomicU64; 16]>; ROWS]);

impl PlainRows {
    fn new() -> Box<PlainRows> {
        Box::new(PlainRows(std::array::from_fn(|_| {
            CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0)))
        })))
    }

    /// Every word's count, added up.
    fn total(&self) -> u64 {
        // Relaxed: read after the join (or before the run).
        self.0
            .iter()
            .flat_map(|r| r.iter())
            .map(|w| w.load(Ordering::Relaxed))
            .sum()
    }
}

fn plain_rows(n: u64) -> Duration {
    let rows = PlainRows::new();
    let rows = escape(&*rows);
    walk12(
        n,
        |j| store_add(&rows.0[row_index()][j & 15], 1),
        || rows.total(),
    )
}

/// The same rows, each thread's found once, before its loop: the fastest
/// form of the reference (the one above finds the row on every add).
fn pointer_rows(n: u64) -> Duration {
    let rows = PlainRows::new();
    let rows = escape(&*rows);
    let t = run_threads(THREADS, |_| {
        let row = escape(&rows.0[row_index()]);
        let mut j = 0usize;
        for _ in 0..n {
            store_add(&row[j & 15], 1);
            opaque();
            j += 1;
            if j == COUNTERS {
                j = 0;
            }
        }
    });
    assert_eq!(
        rows.total(),
        THREADS as u64 * n,
        "12 counters: lost or extra counts"
    );
    t
}

fn counter_set(n: u64, split: bool) -> Duration {
    let set = CounterSet::new(COUNTERS);
    // split:begin
    if split {
        assert_eq!(set.split(2), 2, "split(2)");
    }
    // split:end
    let _ = split;
    let set = escape(&set);
    walk12(n, |j| set.inc(j), || set.snapshot().iter().sum())
}

fn labelled(n: u64) -> Duration {
    // 16 entries so that a masked index needs no bounds check; the walk
    // uses the first 12, one per label.
    let labels: [Route; 16] =
        std::array::from_fn(|i| Route::from_index(i % COUNTERS).expect("in range"));
    let c: LabelledCounter<Route> = LabelledCounter::new();
    let (c, labels) = (escape(&c), escape(&labels));
    walk12(n, |j| c.inc(labels[j & 15]), || c.sum())
}

/// The default layout's buckets, and the reference's sum word after them.
const BUCKETS: usize = 976;

/// The next value of a thread's sequence (as `benches/histogram.rs`):
/// below 2^20, spread over many buckets.
#[inline(always)]
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x & ((1 << 20) - 1)
}

/// The log-linear index of the default layout (the crate's is private;
/// this is `benches/histogram.rs`'s copy of it).
#[inline(always)]
fn index(v: u64) -> usize {
    let shift = 63 - (v | 16).leading_zeros() - 4;
    ((shift as usize) << 4) + (v >> shift) as usize
}

/// `n` values per thread through `record`, each thread from the same seed.
fn two_threads(n: u64, record: impl Fn(u64) + Sync) -> Duration {
    run_threads(THREADS, |_| {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..n {
            record(next(&mut x));
            opaque();
        }
    })
}

/// One padded row of bucket words and a sum per thread.
struct PlainHist(Vec<CachePadded<[AtomicU64; BUCKETS + 1]>>);

impl PlainHist {
    fn new() -> PlainHist {
        PlainHist(
            (0..ROWS)
                .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        )
    }

    /// Asserts that the buckets hold every one of the two threads' `n`
    /// records.
    fn check(&self, n: u64) {
        // Relaxed: read after the join.
        let count: u64 = self
            .0
            .iter()
            .flat_map(|r| r[..BUCKETS].iter())
            .map(|w| w.load(Ordering::Relaxed))
            .sum();
        assert_eq!(count, THREADS as u64 * n, "plain histogram: lost records");
    }
}

fn plain_hist(n: u64) -> Duration {
    let h = PlainHist::new();
    let h = escape(&h);
    let t = two_threads(n, |v| {
        let row = &h.0[row_index()];
        store_add(&row[BUCKETS], v);
        store_add(&row[index(v)], 1);
    });
    h.check(n);
    t
}

/// The same buckets, each thread's row found once, before its loop.
fn pointer_hist(n: u64) -> Duration {
    let h = PlainHist::new();
    let h = escape(&h);
    let t = run_threads(THREADS, |_| {
        let row = escape(&h.0[row_index()]);
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..n {
            let v = next(&mut x);
            store_add(&row[BUCKETS], v);
            store_add(&row[index(v)], 1);
            opaque();
        }
    });
    h.check(n);
    t
}

fn histogram(n: u64) -> Duration {
    let h = Histogram::new();
    let h = escape(&h);
    let t = two_threads(n, |v| h.record(v));
    assert_eq!(h.count(), THREADS as u64 * n, "Histogram: lost records");
    t
}

const LIMIT: &str = "tl-limit (Cell add)";
const PLAIN_LIMIT: &str = "tl-limit (volatile, no check)";
const POINTER_LIMIT: &str = "tl-limit (through a pointer)";
const CHECKED_LIMIT: &str = "tl-limit (cached and checked, as a hit)";
const LOADED_LIMIT: &str = "tl-limit (address loaded per add, no check)";
const INDEXED_LIMIT: &str = "tl-limit (thread-local words, position loaded per add)";
const ROUGH: &str = "RoughCounter";
const LOCAL: &str = "local_counter!";
const ROW_POINTER: &str = "per-thread row, found once";
const HIST_POINTER: &str = "per-thread buckets, found once";

/// The hit's shapes, each an x86-64 loop written in `asm!` with the same
/// registers and started on a 64-byte line, so that no compiler choice
/// (layout, registers, a spilled loop count) and no placement differs
/// between them: what a test in the add costs, and what a test on the
/// add's own carry costs, with everything else the same.
#[cfg(target_arch = "x86_64")]
mod shapes {
    use crossbeam_utils::CachePadded;
    use shardcount_harness::measure::run_threads;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    /// A thread's cache entry (owner, word's address) and, on lines of its
    /// own, the word it adds to (atomic: the asm writes it while the lane
    /// is shared).
    #[repr(C)]
    struct Lane {
        owner: u64,
        at: *mut u64,
        word: CachePadded<AtomicU64>,
    }

    /// One shape: a function running `n` adds on `lane` in a loop of the
    /// given instructions (`rdi` the lane, `rsi` the counter's owner, `rcx`
    /// the count, `rax` free), started on a 64-byte line.
    macro_rules! shape {
        ($(#[$doc:meta])* $name:ident: $($line:literal),+) => {
            $(#[$doc])*
            fn $name(lane: &Lane, owner: &u64, n: u64) {
                // SAFETY: the lines read only `lane.owner`, `lane.at` and
                // `*owner`, and add to `lane.word` (what `at` points at: an
                // atomic, written by this thread alone, an unlocked add
                // being a load and a store of it); no stack. `n` is at
                // least 1 (`run`), so the loop runs `n` times; the branches
                // out of it are never taken (the owners match, the add
                // never carries, a user-space address has its top bit
                // clear).
                unsafe {
                    std::arch::asm!(
                        $($line,)+
                        in("rdi") std::ptr::from_ref(lane),
                        in("rsi") std::ptr::from_ref(owner),
                        inout("rcx") n => _,
                        out("rax") _,
                        options(nostack),
                    );
                }
            }
        };
    }

    shape! {
        /// `cmp` of the cached owner with the counter's, `jne` away, load
        /// the address, `add` to it: `Counter`'s owned hit.
        cmp_add: ".p2align 6", "2:", "mov rax, [rsi]", "cmp [rdi], rax", "jne 3f",
            "mov rax, [rdi + 8]", "add qword ptr [rax], 1", "dec rcx", "jnz 2b", "3:"
    }

    shape! {
        /// [`cmp_add`] and a `jc` on the add's carry: `RoughCounter`'s hit.
        cmp_add_carry: ".p2align 6", "2:", "mov rax, [rsi]", "cmp [rdi], rax", "jne 3f",
            "mov rax, [rdi + 8]", "add qword ptr [rax], 1", "jc 3f", "dec rcx", "jnz 2b", "3:"
    }

    shape! {
        /// [`cmp_add`] and a test of a register the add does not write (the
        /// word's address, loaded before it), so the extra branch does not
        /// wait for the add's load and store.
        cmp_add_test: ".p2align 6", "2:", "mov rax, [rsi]", "cmp [rdi], rax", "jne 3f",
            "mov rax, [rdi + 8]", "add qword ptr [rax], 1", "test rax, rax", "js 3f",
            "dec rcx", "jnz 2b", "3:"
    }

    shape! {
        /// The limit's shape: the address loaded once, then an `add`
        /// through it and nothing else in the loop.
        add_only: "mov rax, [rdi + 8]", ".p2align 6", "2:", "add qword ptr [rax], 1",
            "dec rcx", "jnz 2b"
    }

    /// `n` adds per thread on `threads` threads in the shape `which`
    /// (0 to 3: the functions above in order), each thread on its own
    /// lane; checks every lane's count.
    pub(super) fn run(which: usize, threads: usize, n: u64) -> Duration {
        // The loops test their count after the add.
        assert!(n > 0, "a shape runs at least one add");
        let owner = CachePadded::new(42u64);
        // Each lane's word on lines of its own (`CachePadded`); the Vec
        // never grows once the addresses are taken.
        let mut lanes: Vec<Lane> = (0..threads)
            .map(|_| Lane {
                owner: *owner,
                at: std::ptr::null_mut(),
                word: CachePadded::new(AtomicU64::new(0)),
            })
            .collect();
        for lane in &mut lanes {
            lane.at = lane.word.as_ptr();
        }
        struct Lanes(Vec<Lane>);
        // SAFETY: each thread uses its own lane only (by its index), and
        // the pointer in it points at that lane's own word.
        unsafe impl Sync for Lanes {}
        impl Lanes {
            fn get(&self, i: usize) -> &Lane {
                &self.0[i]
            }
        }
        let lanes = Lanes(lanes);
        let t = run_threads(threads, |i| {
            let lane = lanes.get(i);
            match which {
                0 => cmp_add(lane, &owner, n),
                1 => cmp_add_carry(lane, &owner, n),
                2 => cmp_add_test(lane, &owner, n),
                _ => add_only(lane, &owner, n),
            }
        });
        for lane in &lanes.0 {
            // Relaxed: read after the join.
            let added = lane.word.load(Ordering::Relaxed);
            assert_eq!(added, n, "a shape lost or added counts");
        }
        t
    }
}

fn paired_report() {
    let mut s = Session::new("plain", 9);

    let f = Figure::new(
        "2 threads, Counter: throughput vs the thread-local limit",
        THREADS,
        Ratio::Throughput,
    )
    .reference(LIMIT, |n| {
        let l = TlLimit::new();
        time_adds(&l, THREADS, n)
    })
    .vs(PLAIN_LIMIT, |n| plain_limit(THREADS, n))
    .vs(POINTER_LIMIT, |n| pointer_limit(THREADS, n))
    .vs(CHECKED_LIMIT, |n| checked_limit(THREADS, n))
    .vs(LOADED_LIMIT, |n| loaded_limit(THREADS, n))
    .vs(INDEXED_LIMIT, |n| indexed_limit(THREADS, n))
    .compare(LOADED_LIMIT, POINTER_LIMIT)
    .compare(INDEXED_LIMIT, POINTER_LIMIT)
    .vs("Counter, grows on contention", |n| {
        time_adds_fresh::<Counter>(THREADS, n)
    })
    .compare("Counter, grows on contention", PLAIN_LIMIT)
    .compare("Counter, grows on contention", POINTER_LIMIT)
    // Issue 45: the rough mode at least as fast as the owned add.
    .vs(ROUGH, |n| time_adds_fresh::<RoughCounter>(THREADS, n))
    .compare(ROUGH, POINTER_LIMIT)
    // Issue 45: `local_counter!` at 0.95 of the fastest thread-local form.
    .vs(LOCAL, |n| time_adds_fresh::<Local>(THREADS, n))
    .compare(LOCAL, POINTER_LIMIT);
    // split:begin
    let f = f
        .vs("Counter after split(2)", |n| split_counter(THREADS, n))
        .compare("Counter after split(2)", PLAIN_LIMIT)
        .compare("Counter after split(2)", POINTER_LIMIT)
        .compare(ROUGH, "Counter after split(2)")
        .compare(ROUGH, CHECKED_LIMIT)
        .compare("Counter after split(2)", CHECKED_LIMIT);
    // split:end
    s.run(f);

    let f = Figure::new(
        "2 threads, 12 counters walked in turn: throughput vs a per-thread plain-store row",
        THREADS,
        Ratio::Throughput,
    )
    .reference("per-thread row, load + store", plain_rows)
    .vs(ROW_POINTER, pointer_rows)
    .vs("CounterSet::inc, grows on contention", |n| {
        counter_set(n, false)
    })
    .vs("LabelledCounter<enum of 12>::inc", labelled)
    .compare("CounterSet::inc, grows on contention", ROW_POINTER)
    .compare("LabelledCounter<enum of 12>::inc", ROW_POINTER);
    // split:begin
    let f = f.vs("CounterSet::inc after split(2)", |n| counter_set(n, true));
    // split:end
    s.run(f);

    s.run(
        Figure::new(
            "2 threads, Histogram::record: throughput vs a per-thread load + store histogram",
            THREADS,
            Ratio::Throughput,
        )
        .reference("per-thread buckets, load + store", plain_hist)
        .vs(HIST_POINTER, pointer_hist)
        .vs("Histogram::record", histogram)
        .compare("Histogram::record", HIST_POINTER),
    );

    // Last: a split counter's first add leases this thread an owner id,
    // which it keeps for good; measured first, it would push one of the
    // 2-thread figures' threads beyond a 2-row table (ids 2 and 3).
    let f = Figure::new("1 thread: cost vs a bare fetch_add", 1, Ratio::Cost)
        .reference("AtomicU64::fetch_add", |n| {
            time_adds_fresh::<AtomicU64>(1, n)
        })
        .vs("Counter, idle (never contended)", |n| {
            time_adds_fresh::<Counter>(1, n)
        })
        .vs(LIMIT, |n| {
            let l = TlLimit::new();
            time_adds(&l, 1, n)
        })
        .vs(PLAIN_LIMIT, |n| plain_limit(1, n))
        .vs(POINTER_LIMIT, |n| pointer_limit(1, n))
        .vs(CHECKED_LIMIT, |n| checked_limit(1, n))
        .vs(LOADED_LIMIT, |n| loaded_limit(1, n))
        .vs(INDEXED_LIMIT, |n| indexed_limit(1, n))
        .compare(POINTER_LIMIT, LOADED_LIMIT)
        .compare(POINTER_LIMIT, INDEXED_LIMIT)
        .compare(POINTER_LIMIT, CHECKED_LIMIT)
        .vs(ROUGH, |n| time_adds_fresh::<RoughCounter>(1, n))
        .compare(POINTER_LIMIT, ROUGH)
        .vs(LOCAL, |n| time_adds_fresh::<Local>(1, n))
        .compare(POINTER_LIMIT, LOCAL);
    // split:begin
    let f = f
        .vs("Counter after split(2)", |n| split_counter(1, n))
        .compare("Counter after split(2)", ROUGH)
        .compare(LIMIT, "Counter after split(2)")
        .compare(PLAIN_LIMIT, "Counter after split(2)")
        .compare(POINTER_LIMIT, "Counter after split(2)")
        .compare(CHECKED_LIMIT, ROUGH)
        .compare(CHECKED_LIMIT, "Counter after split(2)");
    // split:end
    s.run(f);

    // The hit's shapes in asm (above), on one thread and on two.
    #[cfg(target_arch = "x86_64")]
    for threads in [1, THREADS] {
        s.run(
            Figure::new(
                format!("{threads} thread(s), the hit's shapes in asm: throughput vs Counter's"),
                threads,
                Ratio::Throughput,
            )
            .reference(SHAPE_CMP_ADD, |n| shapes::run(0, threads, n))
            .vs("cmp, add, jc on the add's carry (RoughCounter's)", |n| {
                shapes::run(1, threads, n)
            })
            .vs("cmp, add, a test of a register", |n| {
                shapes::run(2, threads, n)
            })
            .vs("add only, address in a register (the limit's)", |n| {
                shapes::run(3, threads, n)
            }),
        );
    }

    s.finish();
}

/// The reference shape of the asm figures: `Counter`'s owned hit.
#[cfg(target_arch = "x86_64")]
const SHAPE_CMP_ADD: &str = "cmp, add (Counter's hit)";

fn main() {
    // No criterion groups: the paired section is the whole bench.
    bench_main(|| {}, paired_report);
}
