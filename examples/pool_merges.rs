//! Issue 44's goals, measured: after a burst on a `Counter`, a
//! `CounterSet::new(1000)` and a `Histogram`, each split to 16 rows as a
//! burst on a 16-core machine grows them, by a pool's workers (a tokio
//! runtime of 4 and a rayon pool of 4, each with no hook at all, and with
//! the fallback's hooks: tokio workers that call `shardcount::quiesce` as
//! they park, a rayon `broadcast` of it), with the workers parked:
//! how long until `merge()` returns `true` for all three, how long until
//! a `Merger` with `idle = 100 ms` has merged them, and the heap left
//! above the idle size, against the burst's growth. Each also with a
//! trickle: one task every 20 ms adding to an unrelated sharded counter.
//! Without hooks the merges complete only where `merges_need_quiesce()`
//! is `false` (x86_64 Linux); elsewhere those rows are skipped.
//!
//! ```text
//! cargo run --release --example pool_merges
//! ```

use shardcount::{Counter, CounterSet, Histogram, Merger};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Live;
static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: defers to the system allocator; only counts bytes.
unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Live = Live;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

const WORKERS: usize = 4;
const TASKS: u64 = 400;
const ADDS: u64 = 1000;

struct Subjects {
    c: Arc<Counter>,
    s: Arc<CounterSet>,
    h: Arc<Histogram>,
}

impl Subjects {
    fn new() -> Subjects {
        let x = Subjects {
            c: Arc::new(Counter::new()),
            s: Arc::new(CounterSet::new(1000)),
            h: Arc::new(Histogram::new()),
        };
        // Their idle form: the set's and the histogram's base rows made.
        x.s.inc(0);
        let _ = x.s.take_all();
        x.h.record(0);
        let _ = x.h.take();
        x
    }

    /// Grown as a burst on a 16-core machine grows them: 16 rows each.
    fn split(&self) {
        self.c.split(16);
        self.s.split(16);
        self.h.split(16);
    }

    fn task(&self, t: u64) {
        for i in 0..ADDS {
            self.c.inc();
            self.s.inc(((t * 7 + i) % 1000) as usize);
            self.h.record(i);
        }
    }

    fn merged(&self) -> bool {
        let (c, s, h) = (self.c.merge(), self.s.merge(), self.h.merge());
        c && s && h
    }

    fn shards(&self) -> usize {
        self.c.shards() + self.s.shards() + self.h.shards()
    }

    fn exact(&self, tasks: u64) -> bool {
        let n = tasks * ADDS;
        self.c.sum() == n && self.s.snapshot().iter().sum::<u64>() == n && self.h.count() == n
    }
}

/// One row of the table.
struct Row {
    pool: &'static str,
    hooks: bool,
    trickle: bool,
    /// From the workers parked to `merge() == true` for all three.
    merge: Duration,
    /// From the workers parked (second burst) to a `Merger` of 100 ms
    /// having merged all three.
    merger: Duration,
    /// Heap grown by the first burst, and left above the idle size after
    /// its merge.
    grown: isize,
    left: isize,
    exact: bool,
}

/// A burst by the pool's workers, returning once they are parked again.
type Burst<'a> = &'a dyn Fn(&Subjects);

fn measure(
    pool: &'static str,
    hooks: bool,
    trickle: Option<&(dyn Fn() + Sync)>,
    burst: Burst<'_>,
) -> Row {
    // A burst on throwaway subjects first, merged: the pool's own buffers
    // (task slabs, queues) reach the size the measured burst needs.
    let warm = Subjects::new();
    burst(&warm);
    while !warm.merged() {
        std::thread::yield_now();
    }
    drop(warm);
    let x = Subjects::new();
    let stop = AtomicBool::new(false);
    std::thread::scope(|sc| {
        if let Some(t) = trickle {
            let stop = &stop;
            sc.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    t();
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
        }
        let idle = live();
        burst(&x);
        let grown = live() - idle;
        let start = Instant::now();
        while !x.merged() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{pool}: no merge in 30 s"
            );
            std::thread::yield_now();
        }
        let merge = start.elapsed();
        let left = live() - idle;
        let merger = Merger::new(Duration::from_millis(100));
        merger.watch(Arc::clone(&x.c));
        merger.watch(Arc::clone(&x.s));
        merger.watch(Arc::clone(&x.h));
        burst(&x);
        // From the workers parked: the burst returned with them parked.
        let start = Instant::now();
        while x.shards() > 0 {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{pool}: no Merger merge in 30 s"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let merger_time = start.elapsed();
        stop.store(true, Ordering::Relaxed);
        Row {
            pool,
            hooks,
            trickle: trickle.is_some(),
            merge,
            merger: merger_time,
            grown,
            left,
            exact: x.exact(2 * TASKS),
        }
    })
}

fn tokio_rows(rows: &mut Vec<Row>, hooks: bool) {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(WORKERS);
    if hooks {
        b.on_thread_park(shardcount::quiesce);
    }
    let rt = b.build().expect("a tokio runtime");
    let burst = |x: &Subjects| {
        x.split();
        rt.block_on(async {
            let tasks: Vec<_> = (0..TASKS)
                .map(|t| {
                    let (c, s, h) = (Arc::clone(&x.c), Arc::clone(&x.s), Arc::clone(&x.h));
                    tokio::spawn(async move {
                        Subjects { c, s, h }.task(t);
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("a task");
            }
        });
        // The workers park once their queues are empty.
        std::thread::sleep(Duration::from_millis(5));
    };
    let other = Arc::new(Counter::new());
    other.split(4);
    let trickle = || {
        let other = Arc::clone(&other);
        rt.spawn(async move { other.inc() });
    };
    rows.push(measure("tokio, 4 workers", hooks, None, &burst));
    rows.push(measure("tokio, 4 workers", hooks, Some(&trickle), &burst));
}

fn rayon_rows(rows: &mut Vec<Row>, hooks: bool) {
    use rayon::prelude::*;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(WORKERS)
        .build()
        .expect("a rayon pool");
    let burst = |x: &Subjects| {
        x.split();
        pool.install(|| (0..TASKS).into_par_iter().for_each(|t| x.task(t)));
        if hooks {
            pool.broadcast(|_| shardcount::quiesce());
        }
    };
    let other = Arc::new(Counter::new());
    other.split(4);
    let trickle = || {
        pool.spawn({
            let other = Arc::clone(&other);
            move || {
                other.inc();
                if hooks {
                    shardcount::quiesce();
                }
            }
        });
    };
    rows.push(measure("rayon, 4 workers", hooks, None, &burst));
    rows.push(measure("rayon, 4 workers", hooks, Some(&trickle), &burst));
}

fn main() {
    let mut rows = Vec::new();
    // A first round grows the process-wide state (owner registry, pools'
    // own bookkeeping) to what the measured ones need.
    tokio_rows(&mut Vec::new(), true);
    rayon_rows(&mut Vec::new(), true);
    let no_hooks = !shardcount::merges_need_quiesce();
    for hooks in [false, true] {
        if hooks || no_hooks {
            tokio_rows(&mut rows, hooks);
            rayon_rows(&mut rows, hooks);
        }
    }
    println!(
        "merges_need_quiesce() = {}",
        shardcount::merges_need_quiesce()
    );
    println!("| pool | park hooks | trickle | merge() true after | Merger (idle 100 ms) merged after | heap grown | left after merge | left / grown | counts exact |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.2} ms | {:.0} ms | {} B | {} B | {:.1}% | {} |",
            r.pool,
            if r.hooks { "quiesce" } else { "none" },
            if r.trickle { "every 20 ms" } else { "none" },
            r.merge.as_secs_f64() * 1e3,
            r.merger.as_secs_f64() * 1e3,
            r.grown,
            r.left,
            100.0 * r.left as f64 / r.grown as f64,
            r.exact,
        );
    }
}
