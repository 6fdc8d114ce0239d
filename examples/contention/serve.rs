//! `--serve [ADDR]`: the demo as a live web page. The workers run until the
//! process is stopped (Ctrl-C, SIGTERM, or killed), and a small HTTP/1.1
//! server on `ADDR` (default `127.0.0.1:8080`, loopback only unless
//! `--allow-remote`; port 0 picks a free one) serves:
//!
//! * `/`: one static page (`live.html`, compiled in: no CDN, works
//!   offline) that polls `/state` four times a second and draws it;
//! * `/state`: the newest snapshot as JSON; `/state?seq=N`: snapshot `N`
//!   while it is among the last 300 (30 s), else 404.
//!
//! The first line on stdout is `serving http://HOST:PORT/ ...`, with the
//! port actually bound.
//!
//! # What runs
//!
//! Over and over, in the table's order: each counting subject of the table
//! on a fresh counter, `--threads` workers (default 2) for `--duration`
//! (default 250ms), as one case of the table; then one inventory case: a
//! fresh `Stock` of 200,000,000 units, sold in takes of 1-3 by the same
//! workers while a restocker adds 100,000, again until `--duration` has
//! been measured (at least one sell-out); then a quiet phase of 1 s: no
//! case runs (every case's threads are scoped, so all have exited), a pool
//! of `--threads` workers that live as long as the demo adds a burst of
//! 100,000 each to the shown `Counter` and parks (calling
//! `shardcount::quiesce()` first only where `merges_need_quiesce()`: not on
//! x86_64 Linux), as a tokio or rayon pool's workers do, and the counter is merged
//! (`Counter::merge`) while they are parked, retried every 10 ms while it
//! is pending. Between the table and the sell-outs, one histogram
//! case: the same workers record the histogram section's latency-like
//! values into a fresh `Histogram` for `--duration`, and its count is
//! checked against their records. The `Counter` and `Stock` being
//! worked are shared with a sampler thread that reads them with
//! `Counter::shard_values` and `Stock::shard_amounts` every 10 ms for
//! events (a look) and every 100 ms for a snapshot: the read side
//! never adds, and the page only reads the sampler's snapshots, so viewers
//! add no load on the counters however many there are.
//!
//! # `/state` (one JSON object; every count is an integer)
//!
//! * `seq`: the snapshot's number, one more each sample (every 100 ms);
//!   `uptime_s`: seconds since the workers started, when it was taken.
//! * `workers`, `cores`, `duration_s` (per case), `cycles` (passes over
//!   every case completed), `running` (the subject of the case running;
//!   `nothing (quiet phase)` then), `phase` (`load`, or `quiet`).
//! * `subjects`: one object per subject of the table, in its order:
//!   `name`; `cases`; `total_ops` (increments made in all its cases);
//!   `last_mops` (the last case's Mops/s, null before one); `ok` (every
//!   case's total equalled its workers' increments); `points`: `[t, mops]`
//!   for each case that ended in the last 60 s (`t` in `uptime_s`'s clock).
//! * `counter`: the `Counter` of the newest `Counter` case (kept after it
//!   ends): `values` (`Counter::shard_values`: the base word, then each
//!   shard), `sum` (the sum of `values`), `shards`, `max_shards`, `live`
//!   (its case is running), `merge` (null before the quiet phase merged
//!   it, `pending` while `merge` returns false: its shards are still
//!   listed, they hold counts until folded; `done`), and `events` in the
//!   last 60 s, each `t`, `seq` (the first snapshot to show it), `kind`
//!   (`new`: a fresh counter, one word, 0 shards; `grow`: more shards than
//!   at the previous look; `merge`: its merge is done, back to one word,
//!   reported once, and only if it had shards) and `shards`; a `merge`
//!   also has `from`, the shards it folded, and `parked` (when the pool
//!   added to it first: how many pool workers, alive and parked, had
//!   added to it when it began).
//! * `verdict`: the table's verdict from the last minute (each subject's
//!   median Mops/s over its points, one against another): `lines`, one per
//!   use whose subjects have run (the type to pick, its speed against
//!   `AtomicU64` and against its reference), and `pick`, which to pick when.
//! * `legend`: per subject of the table, in its order, `name`, `about`
//!   (what it is, as under the table) and `reference` (true for `stripe`
//!   and `tl-limit`: yardsticks, not libraries).
//! * `histogram`: null before the first histogram case, else the
//!   `Histogram` of the newest one (kept after it ends), read with
//!   `Histogram::snapshot` at each snapshot (the one before while the
//!   newest has no record yet): `live`, `count`, `sum`, `p50`,
//!   `p90`, `p99`, `max` (quantiles in ns, null while it is empty; `max` is
//!   the quantile at 1), and over every histogram case `cases`, `records`,
//!   `last_mrecords` (M records/s of the last case) and `ok` (every case's
//!   count equalled its workers' records).
//! * `stock`: the `Stock` of the newest sell-out: `amounts`
//!   (`Stock::shard_amounts`), `sum` (their sum: the units left), `shards`,
//!   `live`; `peak`: that stock at its widest (the first look with the most
//!   shards holding units), kept after it sells out, so there is something
//!   to show between sell-outs: `n` (the stock's number), `t`, `seq`,
//!   `amounts`, `sum`, `holding`; and `events` in the last 60 s, each `t`, `seq`, `kind` (`new`:
//!   a fresh stock; `split`: more than one shard holds units where at most
//!   one did at the previous look; `merge`: one shard holds them all where
//!   several did; `empty`: none holds any where some did) and `holding`
//!   (shards holding units then).
//! * `inventory`: `initial` and `restock` (per sell-out), `sellouts`
//!   (completed), `failed_sellouts` (sell-outs that did not account for
//!   every unit: sold = initial + restocked and 0 left), `ok`
//!   (`failed_sellouts` is 0), `units_left` (`stock.sum`), `restocked`
//!   (units, all sell-outs),
//!   `sold` (units, all sell-outs), `failed_takes`, `last_mtakes` (M
//!   takes/s of the last inventory case, null before one), and
//!   `workers`: per worker `successes`, `failures` (failed takes) and
//!   `units`, over all sell-outs. Workers publish these as they go, so
//!   while a sell-out runs `sold + units_left` may trail by the takes in
//!   flight; the check is made on each sell-out once its threads are
//!   joined.
//!
//! The snapshot is built from several reads in turn, not at one instant:
//! the exact checks are those at the end of each case and sell-out.

use crossbeam_utils::CachePadded;
use indicatif::ProgressBar;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use shardcount::{Counter, Histogram, Stock};
use shardcount_harness::measure;
use shardcount_harness::subjects::{self, Subject, Visit};
use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::histogram::{count_ok, record_loop};
use super::http;
use super::{
    about, fmt_duration, is_reference, run_case, use_lines, write_loop, Args, Case, Host, Outcome,
};

/// Where `--serve` with no address listens.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8080";

/// The page, compiled in.
const PAGE: &str = include_str!("live.html");

/// Workers without `--threads`.
const DEFAULT_WORKERS: usize = 2;
/// A case's length without `--duration`.
const DEFAULT_DURATION: Duration = Duration::from_millis(250);
/// How often the sampler takes a snapshot.
const TICK: Duration = Duration::from_millis(100);
/// How often it looks at the live `Counter` and `Stock` for events between
/// snapshots. At full speed a stock's last units are merged and sold within
/// microseconds, so even these looks see a merge only now and then.
const LOOK: Duration = Duration::from_millis(10);
/// How far back the points and events in a snapshot go.
const WINDOW_S: f64 = 60.0;
/// The quiet phase at the end of each cycle: no load, long enough for the
/// page (polling every 250 ms) to show the merged counter.
const QUIET: Duration = Duration::from_secs(1);
/// Snapshots kept for `/state?seq=N`: 30 s of them.
const KEEP: usize = 300;
/// The inventory case's stock: enough that a sell-out by two workers lasts
/// a second or more, to watch the shards drain, even on a fast host.
const STOCK: u64 = 200_000_000;
/// Units a restocker adds, 10 at a time, during each sell-out.
const RESTOCK: u64 = 100_000;

/// The addresses `addr` names, refused unless every one is loopback or
/// `allow_remote`: the page and `/state` have no authentication.
pub fn resolve(addr: &str, allow_remote: bool) -> Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> = addr
        .to_socket_addrs()
        .map_err(|e| format!("--serve {addr}: not an address (HOST:PORT): {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("--serve {addr}: names no address"));
    }
    if !allow_remote {
        if let Some(a) = addrs.iter().find(|a| !a.ip().is_loopback()) {
            return Err(format!(
                "--serve {addr}: {} is not a loopback address; the page and /state have no \
                 authentication, so pass --allow-remote to serve other hosts",
                a.ip()
            ));
        }
    }
    Ok(addrs)
}

/// One subject's finished cases.
#[derive(Debug)]
struct History {
    name: &'static str,
    cases: u64,
    total_ops: u64,
    ok: bool,
    last_mops: Option<f64>,
    /// `(t, Mops/s)` per case, oldest first.
    points: VecDeque<(f64, f64)>,
}

/// One worker's inventory sales over every sell-out, published as it goes.
#[derive(Debug, Default)]
struct Sales {
    successes: AtomicU64,
    failures: AtomicU64,
    units: AtomicU64,
}

/// Adds `n` to a displayed total that only the calling thread writes: a
/// load and a store, no locked instruction, to disturb the sale it follows
/// as little as possible. Relaxed: readers want the number, nothing else.
#[inline]
fn bump(total: &AtomicU64, n: u64) {
    total.store(total.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// The inventory case's running totals.
#[derive(Debug, Default)]
struct Inventory {
    workers: Vec<CachePadded<Sales>>,
    restocked: AtomicU64,
    sellouts: AtomicU64,
    failed_sellouts: AtomicU64,
    /// `f64` bits of the last case's M takes/s; `u64::MAX` before one.
    last_mtakes: AtomicU64,
}

impl Inventory {
    fn new(workers: usize) -> Inventory {
        Inventory {
            workers: (0..workers).map(|_| CachePadded::default()).collect(),
            last_mtakes: AtomicU64::new(u64::MAX),
            ..Inventory::default()
        }
    }
}

/// A change the sampler saw.
#[derive(Debug, Clone)]
struct Event {
    t: f64,
    seq: u64,
    kind: &'static str,
    /// Shards (a counter) or shards holding units (a stock).
    n: usize,
    /// A merge's shards before it.
    from: Option<usize>,
    /// A merge's pool workers alive and parked at it (`Live::parked`).
    parked: Option<usize>,
}

/// How far the quiet phase's merge of a counter got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Merged {
    /// `merge` returned false: threads that added still hold owner ids.
    Pending { from: usize },
    /// `merge` returned true: the `from` shards were folded and freed.
    Done { from: usize },
}

/// What the sampler remembers between samples.
#[derive(Debug, Default)]
struct Seen {
    /// The number and shard count of the counter at the last look.
    counter: Option<(u64, usize)>,
    /// The number and shards holding units of the stock at the last look.
    stock: Option<(u64, usize)>,
    counter_events: VecDeque<Event>,
    /// The counter whose merge is already in `counter_events`.
    counter_merged: Option<u64>,
    stock_events: VecDeque<Event>,
    /// The newest stock at its widest, kept after it sells out.
    stock_peak: Option<Peak>,
}

/// A look at a stock when the most of its shards held units: what the
/// page shows between sell-outs, instead of empty shards.
#[derive(Debug, Clone)]
struct Peak {
    /// The stock's number.
    n: u64,
    t: f64,
    seq: u64,
    amounts: Vec<u64>,
    holding: usize,
}

/// The histogram cases so far, and the newest one's histogram.
#[derive(Debug, Default)]
struct Recorded {
    /// Numbered, as the counter is.
    histogram: Option<(u64, Arc<Histogram>)>,
    /// The one before, shown while the newest has no record yet.
    previous: Option<Arc<Histogram>>,
    cases: u64,
    records: u64,
    ok: bool,
    last_mrecords: Option<f64>,
}

/// Everything the driver, the sampler and the server share.
struct Live {
    start: Instant,
    workers: usize,
    cores: usize,
    duration: Duration,
    history: Mutex<Vec<History>>,
    /// Index into `history` of the case running, or `history.len()` for
    /// the inventory case.
    running: AtomicUsize,
    cycles: AtomicU64,
    /// The newest `Counter` case's counter, numbered (an address may be
    /// reused by the next one).
    counter: Mutex<Option<(u64, Arc<Counter>)>>,
    counter_live: AtomicBool,
    /// The quiet phase's merge of counter number `.0`.
    merged: Mutex<Option<(u64, Merged)>>,
    /// How many pool workers (`Pool`) had added to counter number `.0`
    /// and were parked, alive, when its merge began.
    parked: Mutex<Option<(u64, usize)>>,
    /// In the quiet phase: no case runs.
    quiet: AtomicBool,
    /// The newest sell-out's stock, numbered.
    stock: Mutex<Option<(u64, Arc<Stock>)>>,
    stock_live: AtomicBool,
    recorded: Mutex<Recorded>,
    histogram_live: AtomicBool,
    inventory: Inventory,
    seen: Mutex<Seen>,
    /// `(seq, JSON)`, oldest first.
    snapshots: Mutex<VecDeque<(u64, Arc<str>)>>,
}

impl Live {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }
}

/// A runnable subject: its name and how to run one case of it.
struct Entry {
    name: &'static str,
    run: fn(&Live, &Case<'_>) -> Outcome,
}

struct Entries(Vec<Entry>);

impl Visit for Entries {
    fn visit<S: Subject>(&mut self) {
        let run: fn(&Live, &Case<'_>) -> Outcome = if S::NAME == <Counter as Subject>::NAME {
            counter_case
        } else {
            |_, case| run_case::<S>(case)
        };
        self.0.push(Entry { name: S::NAME, run });
    }
}

/// A `Counter` case as `run_case` runs it, but on a counter the sampler can
/// read while the workers add.
fn counter_case(live: &Live, case: &Case<'_>) -> Outcome {
    let counter = Arc::new(Counter::new());
    {
        let mut slot = live.counter.lock().unwrap();
        let n = slot.as_ref().map_or(0, |s| s.0 + 1);
        *slot = Some((n, Arc::clone(&counter)));
    }
    // Relaxed: a display flag; the sampler orders nothing by it.
    live.counter_live.store(true, Ordering::Relaxed);
    let stop = CachePadded::new(AtomicBool::new(false));
    let w = case.threads;
    let ops: Vec<AtomicU64> = (0..w).map(|_| AtomicU64::new(0)).collect();
    // Results stored Relaxed: the join orders them before the reads below.
    let elapsed = measure::run_threads(w + 1, |i| {
        if i < w {
            ops[i].store(write_loop(&*counter, &stop), Ordering::Relaxed);
        } else {
            super::timer(case, &stop);
        }
    });
    live.counter_live.store(false, Ordering::Relaxed);
    Outcome {
        name: <Counter as Subject>::NAME,
        round: case.round,
        threads: w,
        readers: 0,
        ops: ops.iter().map(|n| n.load(Ordering::Relaxed)).sum(),
        total: counter.sum(),
        elapsed,
        reads: 0,
        max_read: 0,
        canary: Duration::ZERO,
    }
}

/// The histogram case: the workers record the histogram section's values
/// into a fresh `Histogram` the sampler reads; its count must equal their
/// records.
fn histogram_case(live: &Live, case: &Case<'_>) {
    let h = Arc::new(Histogram::new());
    {
        let mut r = live.recorded.lock().unwrap();
        let n = r.histogram.as_ref().map_or(0, |x| x.0 + 1);
        r.previous = r.histogram.replace((n, Arc::clone(&h))).map(|x| x.1);
    }
    // Relaxed: a display flag, as for the counter.
    live.histogram_live.store(true, Ordering::Relaxed);
    let stop = CachePadded::new(AtomicBool::new(false));
    let w = case.threads;
    let done: Vec<AtomicU64> = (0..w).map(|_| AtomicU64::new(0)).collect();
    let elapsed = measure::run_threads(w + 1, |i| {
        if i < w {
            // Relaxed: the join orders it before the sum below.
            done[i].store(record_loop(&*h, &stop), Ordering::Relaxed);
        } else {
            super::timer(case, &stop);
        }
    });
    live.histogram_live.store(false, Ordering::Relaxed);
    let records: u64 = done.iter().map(|n| n.load(Ordering::Relaxed)).sum();
    let count = h.snapshot().count();
    let mut r = live.recorded.lock().unwrap();
    r.cases += 1;
    r.records += records;
    r.ok &= count_ok(records, &Ok(count));
    r.last_mrecords = Some(records as f64 / elapsed.as_secs_f64() / 1e6);
    if count != records {
        eprintln!("FAIL: Histogram: workers recorded {records}, its count says {count}");
    }
}

/// The newest histogram's quantiles and the cases' totals, as `/state`
/// shows them.
fn histogram_json(live: &Live) -> Value {
    let r = live.recorded.lock().unwrap();
    let Some((_, h)) = &r.histogram else {
        return Value::Null;
    };
    let mut snap = h.snapshot();
    // Relaxed: a display flag.
    let mut running = live.histogram_live.load(Ordering::Relaxed);
    // A case just started: its workers may not have recorded yet.
    if let (true, Some(p)) = (snap.is_empty(), &r.previous) {
        snap = p.snapshot();
        running = false;
    }
    let q = |p: f64| snap.quantile(p);
    json!({
        "live": running,
        "count": snap.count(),
        "sum": snap.sum(),
        "p50": q(0.5),
        "p90": q(0.9),
        "p99": q(0.99),
        "max": q(1.0),
        "cases": r.cases,
        "records": r.records,
        "last_mrecords": r.last_mrecords,
        "ok": r.ok,
    })
}

/// One sell-out of a fresh `Stock` the sampler can read: returns whether
/// every unit was accounted for, the takes made and the time.
fn sellout(live: &Live) -> (bool, u64, Duration) {
    let stock = Arc::new(Stock::new(STOCK));
    {
        let mut slot = live.stock.lock().unwrap();
        let n = slot.as_ref().map_or(0, |s| s.0 + 1);
        *slot = Some((n, Arc::clone(&stock)));
    }
    let w = live.workers;
    let restocking = AtomicBool::new(true);
    let sold = AtomicU64::new(0);
    let takes = AtomicU64::new(0);
    let elapsed = measure::run_threads(w + 1, |i| {
        if i == w {
            let mut left = RESTOCK;
            while left > 0 {
                let n = left.min(10);
                stock.add(n);
                left -= n;
                // A displayed total, only the restocker writes it; the check
                // uses RESTOCK.
                bump(&live.inventory.restocked, n);
            }
            // Release: a worker that sees the flag down sees every restock.
            restocking.store(false, Ordering::Release);
            return;
        }
        let mine = &live.inventory.workers[i];
        let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
        let (mut units, mut n_takes) = (0u64, 0u64);
        // Each worker alone writes its own displayed totals (worker `i` is
        // thread `i` in every sell-out); the check uses the local counts.
        let sell = |n: u64, units: &mut u64| {
            bump(&mine.successes, 1);
            bump(&mine.units, n);
            *units += n;
        };
        loop {
            let n = rng.gen_range(1..=3);
            n_takes += 1;
            if stock.try_sub(n).is_ok() {
                sell(n, &mut units);
                continue;
            }
            bump(&mine.failures, 1);
            // Acquire: pairs with the restocker's Release.
            if restocking.load(Ordering::Acquire) {
                continue;
            }
            // As in inventory mode: one unit at a time until a take fails,
            // which with no restock running means the stock is empty.
            loop {
                n_takes += 1;
                if stock.try_sub(1).is_err() {
                    break;
                }
                sell(1, &mut units);
            }
            bump(&mine.failures, 1);
            break;
        }
        // Relaxed: the join orders these before the reads below.
        sold.fetch_add(units, Ordering::Relaxed);
        takes.fetch_add(n_takes, Ordering::Relaxed);
    });
    let ok = sold.load(Ordering::Relaxed) == STOCK + RESTOCK && stock.sum() == 0;
    (ok, takes.load(Ordering::Relaxed), elapsed)
}

/// The inventory case: sell-outs until `case.duration` has been measured.
fn inventory_case(live: &Live, case: &Case<'_>) {
    // Relaxed: display flags and totals, as above.
    live.stock_live.store(true, Ordering::Relaxed);
    let (mut takes, mut elapsed) = (0u64, Duration::ZERO);
    while elapsed.is_zero() || elapsed < case.duration {
        let (ok, n, e) = sellout(live);
        takes += n;
        elapsed += e;
        live.inventory.sellouts.fetch_add(1, Ordering::Relaxed);
        if !ok {
            live.inventory
                .failed_sellouts
                .fetch_add(1, Ordering::Relaxed);
        }
    }
    let mtakes = takes as f64 / elapsed.as_secs_f64() / 1e6;
    live.inventory
        .last_mtakes
        .store(mtakes.to_bits(), Ordering::Relaxed);
    live.stock_live.store(false, Ordering::Relaxed);
}

/// Runs every case over and over; never returns.
fn drive(live: &Live, entries: &[Entry]) -> ! {
    let bar = ProgressBar::hidden();
    let pool = Pool::new(live.workers);
    for round in 0.. {
        for (k, e) in entries.iter().enumerate() {
            // Relaxed: display only.
            live.running.store(k, Ordering::Relaxed);
            let case = Case {
                round,
                threads: live.workers,
                readers: 0,
                duration: live.duration,
                bar: &bar,
                bar_base: 0,
            };
            let o = (e.run)(live, &case);
            let t = live.now();
            let mut history = live.history.lock().unwrap();
            let h = &mut history[k];
            h.cases += 1;
            h.total_ops += o.ops;
            h.ok &= o.ok();
            h.last_mops = Some(o.mops());
            h.points.push_back((t, o.mops()));
            while h.points.front().is_some_and(|p| p.0 < t - WINDOW_S) {
                h.points.pop_front();
            }
            if !o.ok() {
                eprintln!(
                    "FAIL: {}: workers did {} increments, counter says {}",
                    o.name, o.ops, o.total
                );
            }
        }
        let case = Case {
            round,
            threads: live.workers,
            readers: 0,
            duration: live.duration,
            bar: &bar,
            bar_base: 0,
        };
        live.running.store(entries.len(), Ordering::Relaxed);
        histogram_case(live, &case);
        live.running.store(entries.len() + 1, Ordering::Relaxed);
        let case = Case {
            round,
            threads: live.workers,
            readers: 0,
            duration: live.duration,
            bar: &bar,
            bar_base: 0,
        };
        inventory_case(live, &case);
        quiet_phase(live, &pool);
        live.cycles.fetch_add(1, Ordering::Relaxed);
    }
    unreachable!("the rounds never end")
}

/// Adds per pool worker in each quiet phase.
const BURST: u64 = 100_000;

/// Threads that live as long as the demo, as a tokio or rayon pool's
/// workers do: at the start of each quiet phase they add a burst to the
/// shown counter and park (block on their channel), so the merge that
/// follows completes while they are alive and parked, not joined. They
/// call `shardcount::quiesce()` before parking only where
/// `merges_need_quiesce()` (off x86_64 Linux), as a pool's park hook would.
struct Pool {
    work: Vec<std::sync::mpsc::Sender<Arc<Counter>>>,
    done: std::sync::mpsc::Receiver<()>,
}

impl Pool {
    fn new(workers: usize) -> Pool {
        let (done_tx, done) = std::sync::mpsc::channel();
        let work = (0..workers)
            .map(|i| {
                let (tx, rx) = std::sync::mpsc::channel::<Arc<Counter>>();
                let done = done_tx.clone();
                std::thread::Builder::new()
                    .name(format!("pool-{i}"))
                    .spawn(move || {
                        for c in rx {
                            (0..BURST).for_each(|_| c.inc());
                            // About to park: on x86_64 Linux a merge need not
                            // wait for it anyway; elsewhere, the hook.
                            if shardcount::merges_need_quiesce() {
                                shardcount::quiesce();
                            }
                            if done.send(()).is_err() {
                                return;
                            }
                        }
                    })
                    .expect("spawn a pool worker");
                tx
            })
            .collect();
        Pool { work, done }
    }

    /// A burst on `c` by every worker; returns once each is done and has
    /// gone back to wait for the next: how many that is.
    fn burst(&self, c: &Arc<Counter>) -> usize {
        let sent = self
            .work
            .iter()
            .filter(|w| w.send(Arc::clone(c)).is_ok())
            .count();
        (0..sent).filter(|_| self.done.recv().is_ok()).count()
    }
}

/// The end of a cycle: no load for [`QUIET`], and the shown counter merged
/// meanwhile, so that the page sees its shards go back to 0: after the
/// pool's burst on it, with the pool's workers parked.
fn quiet_phase(live: &Live, pool: &Pool) {
    let start = Instant::now();
    // Relaxed: display only.
    live.running.store(QUIET_RUNNING, Ordering::Relaxed);
    live.quiet.store(true, Ordering::Relaxed);
    let shown = live.counter.lock().unwrap().clone();
    if let Some((n, c)) = shown {
        let parked = pool.burst(&c);
        *live.parked.lock().unwrap() = Some((n, parked));
    }
    merge_shown(live, start + QUIET);
    std::thread::sleep(QUIET.saturating_sub(start.elapsed()));
    live.quiet.store(false, Ordering::Relaxed);
}

/// Merges the shown counter, once per counter, retrying each [`LOOK`] while
/// it is pending until `deadline`; records how far it got for the sampler.
///
/// Every case's threads are scoped and joined, and the pool's workers are
/// parked (asleep; off x86_64 Linux they quiesced first), so the
/// merge should complete at once; a thread that keeps it pending shows in
/// the state.
fn merge_shown(live: &Live, deadline: Instant) -> Option<Merged> {
    let (n, counter) = live.counter.lock().unwrap().clone()?;
    let mut state = match *live.merged.lock().unwrap() {
        Some((m, done @ Merged::Done { .. })) if m == n => return Some(done),
        Some((m, pending)) if m == n => pending,
        // The shards before the merge (a pending one still counts them).
        _ => Merged::Pending {
            from: counter.shards(),
        },
    };
    loop {
        let from = match state {
            Merged::Pending { from } | Merged::Done { from } => from,
        };
        if counter.merge() {
            state = Merged::Done { from };
        }
        *live.merged.lock().unwrap() = Some((n, state));
        if matches!(state, Merged::Done { .. }) || Instant::now() >= deadline {
            return Some(state);
        }
        std::thread::sleep(LOOK);
    }
}

/// Records what changed since the last sample.
fn events(
    list: &mut VecDeque<Event>,
    last: &mut Option<(u64, usize)>,
    now: (u64, usize),
    stamp: (f64, u64),
    classify: impl Fn(Option<usize>, usize) -> Option<&'static str>,
    fresh: Option<usize>,
) {
    let before = match *last {
        Some((id, n)) if id == now.0 => Some(n),
        _ => fresh,
    };
    let (t, seq) = stamp;
    if last.is_none_or(|l| l.0 != now.0) {
        list.push_back(Event {
            t,
            seq,
            kind: "new",
            n: fresh.unwrap_or(now.1),
            from: None,
            parked: None,
        });
    }
    if let Some(kind) = classify(before, now.1) {
        list.push_back(Event {
            t,
            seq,
            kind,
            n: now.1,
            from: None,
            parked: None,
        });
    }
    while list.front().is_some_and(|e| e.t < t - WINDOW_S) {
        list.pop_front();
    }
    *last = Some(now);
}

/// A counter's shard count grows under load (a fresh one has 0). It falls
/// only when a merge is done, which `merge_event` marks (`shard_values`
/// still lists a pending merge's shards: they hold counts until folded).
fn counter_event(before: Option<usize>, now: usize) -> Option<&'static str> {
    (now > before.unwrap_or(0)).then_some("grow")
}

/// Records counter `n`'s merge, once, when `merged` says it is done and it
/// folded shards (a counter that never grew has nothing to merge).
fn merge_event(
    seen: &mut Seen,
    n: u64,
    merged: Option<(u64, Merged)>,
    parked: Option<usize>,
    stamp: (f64, u64),
) {
    let Some((m, Merged::Done { from })) = merged else {
        return;
    };
    if m != n || from == 0 || seen.counter_merged == Some(n) {
        return;
    }
    seen.counter_merged = Some(n);
    seen.counter_events.push_back(Event {
        t: stamp.0,
        seq: stamp.1,
        kind: "merge",
        n: 0,
        from: Some(from),
        parked,
    });
}

/// The merge of counter `n` as `/state` reports it.
fn merge_json(n: u64, merged: Option<(u64, Merged)>) -> Value {
    match merged {
        Some((m, Merged::Pending { .. })) if m == n => json!("pending"),
        Some((m, Merged::Done { .. })) if m == n => json!("done"),
        _ => Value::Null,
    }
}

/// A stock's units spread over several shards, gathered into one, or gone.
fn stock_event(before: Option<usize>, now: usize) -> Option<&'static str> {
    match before {
        Some(b) if b <= 1 && now > 1 => Some("split"),
        Some(b) if b > 1 && now == 1 => Some("merge"),
        Some(b) if b > 0 && now == 0 => Some("empty"),
        _ => None,
    }
}

fn events_json(list: &VecDeque<Event>, n_name: &str) -> Value {
    list.iter()
        .map(|e| {
            let mut v = json!({"t": e.t, "seq": e.seq, "kind": e.kind, n_name: e.n});
            if let Some(from) = e.from {
                v["from"] = json!(from);
            }
            if let Some(parked) = e.parked {
                v["parked"] = json!(parked);
            }
            v
        })
        .collect()
}

/// What one look at the live `Counter` and `Stock` read.
struct Look {
    /// The counter, its values and its merge (see `merge_json`).
    counter: Option<(Arc<Counter>, Vec<u64>, Value)>,
    stock: Option<(Arc<Stock>, Vec<u64>)>,
}

/// Reads the live `Counter` and `Stock` (only reads) and records what
/// changed since the last look, as of snapshot `seq`.
fn watch(live: &Live, t: f64, seq: u64) -> Look {
    let counter = live.counter.lock().unwrap().clone();
    let merged = *live.merged.lock().unwrap();
    let stock = live.stock.lock().unwrap().clone();
    let mut seen = live.seen.lock().unwrap();
    let seen = &mut *seen;
    let counter = counter.map(|(n, c)| {
        let values = c.shard_values();
        events(
            &mut seen.counter_events,
            &mut seen.counter,
            (n, values.len() - 1),
            (t, seq),
            counter_event,
            Some(0),
        );
        let parked = match *live.parked.lock().unwrap() {
            Some((m, parked)) if m == n => Some(parked),
            _ => None,
        };
        merge_event(seen, n, merged, parked, (t, seq));
        (c, values, merge_json(n, merged))
    });
    let stock = stock.map(|(n, s)| {
        let amounts = s.shard_amounts();
        let holding = amounts.iter().filter(|&&a| a > 0).count();
        events(
            &mut seen.stock_events,
            &mut seen.stock,
            (n, holding),
            (t, seq),
            stock_event,
            None,
        );
        // The first look at the most shards holding units, per stock.
        if seen
            .stock_peak
            .as_ref()
            .is_none_or(|p| p.n != n || holding > p.holding)
        {
            seen.stock_peak = Some(Peak {
                n,
                t,
                seq,
                amounts: amounts.clone(),
                holding,
            });
        }
        (s, amounts)
    });
    Look { counter, stock }
}

/// Takes one snapshot: looks at the counters, returns the JSON.
fn sample(live: &Live, seq: u64, subject_names: &[&'static str]) -> String {
    let t = live.now();
    let running = live.running.load(Ordering::Relaxed);
    let subjects: Vec<Value> = live
        .history
        .lock()
        .unwrap()
        .iter()
        .map(|h| {
            json!({
                "name": h.name,
                "cases": h.cases,
                "total_ops": h.total_ops,
                "last_mops": h.last_mops,
                "ok": h.ok,
                "points": h.points.iter().map(|&(t, m)| json!([t, m])).collect::<Vec<_>>(),
            })
        })
        .collect();
    let (verdict, legend) = verdict_and_legend(&live.history.lock().unwrap());
    let look = watch(live, t, seq);
    let seen = live.seen.lock().unwrap();
    let counter_json = match &look.counter {
        Some((c, values, merge)) => json!({
            "values": values,
            "sum": values.iter().fold(0u64, |a, v| a.wrapping_add(*v)),
            "shards": values.len() - 1,
            "max_shards": c.max_shards(),
            "live": live.counter_live.load(Ordering::Relaxed),
            "merge": merge,
            "events": events_json(&seen.counter_events, "shards"),
        }),
        None => Value::Null,
    };
    let mut units_left = 0;
    let stock_json = match &look.stock {
        Some((_, amounts)) => {
            units_left = amounts.iter().sum::<u64>();
            json!({
                "sum": units_left,
                "shards": amounts.len(),
                "amounts": amounts,
                "live": live.stock_live.load(Ordering::Relaxed),
                "events": events_json(&seen.stock_events, "holding"),
                "peak": seen.stock_peak.as_ref().map(|p| json!({
                    "n": p.n,
                    "t": p.t,
                    "seq": p.seq,
                    "amounts": p.amounts,
                    "sum": p.amounts.iter().sum::<u64>(),
                    "holding": p.holding,
                })),
            })
        }
        None => Value::Null,
    };
    drop(seen);
    let inv = &live.inventory;
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let workers: Vec<Value> = inv
        .workers
        .iter()
        .map(|w| {
            json!({
                "successes": load(&w.successes),
                "failures": load(&w.failures),
                "units": load(&w.units),
            })
        })
        .collect();
    let last_mtakes = f64::from_bits(load(&inv.last_mtakes));
    let failed_sellouts = load(&inv.failed_sellouts);
    let doc = json!({
        "seq": seq,
        "uptime_s": t,
        "workers": live.workers,
        "cores": live.cores,
        "duration_s": live.duration.as_secs_f64(),
        "cycles": load(&live.cycles),
        "running": running_name(subject_names, running),
        "phase": if live.quiet.load(Ordering::Relaxed) { "quiet" } else { "load" },
        "subjects": subjects,
        "verdict": verdict,
        "legend": legend,
        "counter": counter_json,
        "histogram": histogram_json(live),
        "stock": stock_json,
        "inventory": {
            "initial": STOCK,
            "restock": RESTOCK,
            "sellouts": load(&inv.sellouts),
            "failed_sellouts": failed_sellouts,
            "ok": failed_sellouts == 0,
            "units_left": units_left,
            "restocked": load(&inv.restocked),
            "sold": inv.workers.iter().map(|w| load(&w.units)).sum::<u64>(),
            "failed_takes": inv.workers.iter().map(|w| load(&w.failures)).sum::<u64>(),
            "last_mtakes": last_mtakes.is_finite().then_some(last_mtakes),
            "workers": workers,
        },
    });
    doc.to_string()
}

/// `running` in the quiet phase.
const QUIET_RUNNING: usize = usize::MAX;

/// What case `running` is: a subject of the table, then the histogram
/// case, then the sell-outs; nothing in the quiet phase.
fn running_name(subject_names: &[&'static str], running: usize) -> &'static str {
    match subject_names.get(running) {
        Some(name) => name,
        None if running == QUIET_RUNNING => "nothing (quiet phase)",
        None if running == subject_names.len() => "Histogram (record)",
        None => "Stock (inventory)",
    }
}

/// The table's verdict from the last minute's cases (the median Mops/s of
/// each subject's points, one subject against another), and one legend
/// entry per subject saying what it is and whether it is a reference.
fn verdict_and_legend(history: &[History]) -> (Value, Value) {
    let median = |name: &str| {
        let h = history.iter().find(|h| h.name == name)?;
        let mut m: Vec<f64> = h.points.iter().map(|&(_, m)| m).collect();
        m.sort_by(f64::total_cmp);
        let mid = m.len() / 2;
        match m.len() {
            0 => None,
            n if n % 2 == 1 => Some(m[mid]),
            _ => Some((m[mid - 1] + m[mid]) / 2.0),
        }
    };
    let uses = use_lines(|a, b| {
        let (a, b) = (median(a)?, median(b)?);
        (b > 0.0).then(|| a / b)
    });
    let verdict = json!({ "lines": uses.lines, "pick": uses.pick() });
    let legend = history
        .iter()
        .map(|h| {
            json!({
                "name": h.name,
                "about": about(h.name),
                "reference": is_reference(h.name),
            })
        })
        .collect();
    (verdict, legend)
}

/// Looks at the counters every [`LOOK`] for events, and takes a snapshot
/// every [`TICK`], for ever.
fn sampler(live: &Live, names: &[&'static str]) {
    let per_tick = (TICK.as_nanos() / LOOK.as_nanos()).max(1) as u64;
    for look in 1.. {
        std::thread::sleep(LOOK);
        let seq = look / per_tick;
        if look % per_tick == 0 {
            publish(live, seq, names);
        } else {
            // Events seen now first show in the next snapshot.
            watch(live, live.now(), seq + 1);
        }
    }
}

fn publish(live: &Live, seq: u64, names: &[&'static str]) {
    let text: Arc<str> = sample(live, seq, names).into();
    let mut snaps = live.snapshots.lock().unwrap();
    snaps.push_back((seq, text));
    while snaps.len() > KEEP {
        snaps.pop_front();
    }
}

/// A response: status line, content type, body.
#[derive(Debug, PartialEq)]
struct Response {
    status: &'static str,
    content_type: &'static str,
    body: Arc<str>,
}

impl Response {
    fn text(status: &'static str, body: &str) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

/// The response to a request whose head is `head`, and whether it is a
/// HEAD request (headers only).
fn route(head: &[u8], snapshots: &Mutex<VecDeque<(u64, Arc<str>)>>) -> (Response, bool) {
    let line = head
        .split(|&b| b == b'\n')
        .next()
        .and_then(|l| std::str::from_utf8(l).ok())
        .unwrap_or("")
        .trim_end();
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return (Response::text("400 Bad Request", "bad request\n"), false);
    }
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return (
            Response::text("405 Method Not Allowed", "GET or HEAD only\n"),
            false,
        );
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let response = match path {
        "/" | "/index.html" => Response {
            status: "200 OK",
            content_type: "text/html; charset=utf-8",
            body: PAGE.into(),
        },
        "/state" => {
            let snaps = snapshots.lock().unwrap();
            let want = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("seq="))
                .map(str::parse::<u64>);
            let found = match want {
                None => snaps.back(),
                Some(Ok(seq)) => snaps.iter().find(|s| s.0 == seq),
                Some(Err(_)) => {
                    return (
                        Response::text("400 Bad Request", "seq must be a number\n"),
                        head_only,
                    )
                }
            };
            match found {
                Some((_, text)) => Response {
                    status: "200 OK",
                    content_type: "application/json",
                    body: Arc::clone(text),
                },
                None => Response::text("404 Not Found", "no such snapshot (kept: 30 s)\n"),
            }
        }
        _ => Response::text("404 Not Found", "not found\n"),
    };
    (response, head_only)
}

/// The whole response to a request whose head is `head` (the connection
/// then closes; `http` reads and writes it).
fn respond(head: &[u8], live: &Live) -> Vec<u8> {
    let (r, head_only) = route(head, &live.snapshots);
    let mut out = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
         X-Content-Type-Options: nosniff\r\nConnection: close\r\n",
        r.status,
        r.content_type,
        r.body.len()
    );
    if r.status.starts_with("405") {
        out += "Allow: GET, HEAD\r\n";
    }
    out += "\r\n";
    let mut bytes = out.into_bytes();
    if !head_only {
        bytes.extend_from_slice(r.body.as_bytes());
    }
    bytes
}

/// Serves the page and `/state` for ever (see `http` for the limits).
fn serve(listener: TcpListener, live: Arc<Live>) {
    http::serve(listener, move |head| respond(head, &live));
}

/// Runs the live view; returns the exit status (only on an error).
pub fn main(args: &Args, addr: &str, host: &Host) -> i32 {
    let workers = match args.threads.as_slice() {
        [] => DEFAULT_WORKERS,
        [w] => *w,
        more => {
            eprintln!("error: --serve runs one worker count, not {more:?}: give --threads N");
            return 2;
        }
    };
    let addrs = match resolve(addr, args.allow_remote) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let listener = match TcpListener::bind(&addrs[..]) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {addr}: {e}");
            return 1;
        }
    };
    let local = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: cannot read the bound address: {e}");
            return 1;
        }
    };
    let mut entries = Entries(Vec::new());
    subjects::for_each(&mut entries);
    let entries = entries.0;
    let names: Vec<&'static str> = entries.iter().map(|e| e.name).collect();
    let duration = args.duration.unwrap_or(DEFAULT_DURATION);
    let live = Arc::new(Live {
        start: Instant::now(),
        workers,
        cores: host.cores,
        duration,
        history: Mutex::new(
            names
                .iter()
                .map(|&name| History {
                    name,
                    cases: 0,
                    total_ops: 0,
                    ok: true,
                    last_mops: None,
                    points: VecDeque::new(),
                })
                .collect(),
        ),
        running: AtomicUsize::new(0),
        cycles: AtomicU64::new(0),
        counter: Mutex::new(None),
        counter_live: AtomicBool::new(false),
        merged: Mutex::new(None),
        parked: Mutex::new(None),
        quiet: AtomicBool::new(false),
        stock: Mutex::new(None),
        stock_live: AtomicBool::new(false),
        recorded: Mutex::new(Recorded {
            ok: true,
            ..Recorded::default()
        }),
        histogram_live: AtomicBool::new(false),
        inventory: Inventory::new(workers),
        seen: Mutex::new(Seen::default()),
        snapshots: Mutex::new(VecDeque::new()),
    });
    // A first snapshot before the first request can come.
    publish(&live, 0, &names);
    println!(
        "serving http://{local}/ : {} subjects and a Stock, {workers} worker(s), {} per case, \
         {} core(s) ({}); stop with Ctrl-C",
        names.len(),
        fmt_duration(duration),
        host.cores,
        host.cpu
    );
    {
        let (live, names) = (Arc::clone(&live), names.clone());
        std::thread::spawn(move || sampler(&live, &names));
    }
    {
        let live = Arc::clone(&live);
        std::thread::spawn(move || serve(listener, live));
    }
    drive(&live, &entries)
}

#[cfg(test)]
#[path = "../../tests/common/fallback.rs"]
mod fallback;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    #[test]
    fn only_loopback_unless_allowed() {
        assert!(resolve("127.0.0.1:0", false).is_ok());
        assert!(resolve("[::1]:0", false).is_ok());
        assert!(resolve(DEFAULT_ADDR, false).is_ok());
        let e = resolve("0.0.0.0:8080", false).unwrap_err();
        assert!(e.contains("0.0.0.0 is not a loopback address"), "{e}");
        assert!(e.contains("--allow-remote"), "{e}");
        assert!(resolve("192.0.2.1:8080", false).is_err());
        assert!(resolve("0.0.0.0:8080", true).is_ok());
        assert!(resolve("no port", false).is_err());
    }

    fn snaps() -> Mutex<VecDeque<(u64, Arc<str>)>> {
        Mutex::new(VecDeque::from([
            (4, Arc::from("{\"seq\":4}")),
            (5, Arc::from("{\"seq\":5}")),
        ]))
    }

    #[test]
    fn routes_serve_the_page_the_newest_state_or_a_given_one() {
        let s = snaps();
        let get = |line: &str| route(format!("{line}\r\nHost: x\r\n\r\n").as_bytes(), &s);
        let (r, head) = get("GET / HTTP/1.1");
        assert_eq!(
            (r.status, r.content_type, head),
            ("200 OK", "text/html; charset=utf-8", false)
        );
        assert!(r.body.contains("<canvas"));
        assert_eq!(&*get("GET /state HTTP/1.1").0.body, "{\"seq\":5}");
        assert_eq!(&*get("GET /state?seq=4 HTTP/1.1").0.body, "{\"seq\":4}");
        assert_eq!(get("GET /state?seq=3 HTTP/1.1").0.status, "404 Not Found");
        assert_eq!(get("GET /state?seq=x HTTP/1.1").0.status, "400 Bad Request");
        assert_eq!(get("GET /nope HTTP/1.1").0.status, "404 Not Found");
        assert_eq!(
            get("POST /state HTTP/1.1").0.status,
            "405 Method Not Allowed"
        );
        assert_eq!(get("GET /state").0.status, "400 Bad Request");
        let (r, head) = get("HEAD /state HTTP/1.1");
        assert_eq!((r.status, head), ("200 OK", true));
    }

    #[test]
    fn serve_takes_an_optional_address_and_refuses_other_modes() {
        use clap::Parser;
        let parse = |extra: &[&str]| Args::try_parse_from(["contention"].iter().chain(extra));
        let a = parse(&["--serve"]).expect("an address is optional");
        assert_eq!(a.serve.as_deref(), Some(DEFAULT_ADDR));
        let a = parse(&[
            "--serve",
            "127.0.0.1:0",
            "--threads",
            "2",
            "--duration",
            "100ms",
        ])
        .expect("workers and case length");
        assert_eq!(a.serve.as_deref(), Some("127.0.0.1:0"));
        assert!(!a.allow_remote);
        assert!(parse(&["--serve", "0.0.0.0:1", "--allow-remote"]).is_ok());
        assert!(
            parse(&["--allow-remote"]).is_err(),
            "--allow-remote needs --serve"
        );
        for bad in [
            "--inventory",
            "--keyed",
            "--json=x",
            "--chart=x.svg",
            "--readers=1",
            "--repeat=2",
        ] {
            let e = parse(&["--serve", bad]).expect_err(bad);
            assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{bad}");
        }
    }

    #[test]
    fn the_server_answers_over_tcp_and_closes() {
        let live = Arc::new(test_live());
        publish(&live, 0, &["Counter"]);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = Arc::clone(&live);
        std::thread::spawn(move || serve(listener, server));
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /state HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).unwrap();
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(
            head.contains("Content-Type: application/json\r\n"),
            "{head}"
        );
        assert!(
            head.contains(&format!("Content-Length: {}\r\n", body.len())),
            "{head}"
        );
        assert!(head.contains("Connection: close"), "{head}");
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["seq"], 0);
    }

    #[test]
    fn events_mark_new_counters_growth_splits_and_merges() {
        let (mut list, mut last) = (VecDeque::new(), None);
        let kinds = |l: &VecDeque<Event>| l.iter().map(|e| (e.kind, e.n)).collect::<Vec<_>>();
        for (id, n, seq) in [(1, 2, 1), (1, 2, 2), (1, 4, 3), (2, 0, 4), (3, 2, 5)] {
            let stamp = (seq as f64 / 10.0, seq);
            events(&mut list, &mut last, (id, n), stamp, counter_event, Some(0));
        }
        assert_eq!(
            kinds(&list),
            [
                ("new", 0),
                ("grow", 2),
                ("grow", 4),
                ("new", 0),
                ("new", 0),
                ("grow", 2)
            ]
        );
        let (mut list, mut last) = (VecDeque::new(), None);
        for (n, seq) in [(2, 1), (2, 2), (1, 3), (1, 4), (2, 5), (0, 6)] {
            events(
                &mut list,
                &mut last,
                (9, n),
                (seq as f64, seq),
                stock_event,
                None,
            );
        }
        assert_eq!(
            kinds(&list),
            [("new", 2), ("merge", 1), ("split", 2), ("empty", 0)]
        );
        // Older than the window: dropped.
        events(&mut list, &mut last, (9, 0), (100.0, 7), stock_event, None);
        assert!(list.is_empty(), "{list:?}");
    }

    fn test_live() -> Live {
        Live {
            start: Instant::now(),
            workers: 1,
            cores: 1,
            duration: Duration::from_millis(1),
            history: Mutex::new(Vec::new()),
            running: AtomicUsize::new(0),
            cycles: AtomicU64::new(0),
            counter: Mutex::new(Some((0, Arc::new(Counter::from(7))))),
            counter_live: AtomicBool::new(true),
            merged: Mutex::new(None),
            parked: Mutex::new(None),
            quiet: AtomicBool::new(false),
            stock: Mutex::new(Some((0, Arc::new(Stock::new(5))))),
            stock_live: AtomicBool::new(false),
            recorded: Mutex::new(Recorded {
                ok: true,
                ..Recorded::default()
            }),
            histogram_live: AtomicBool::new(false),
            inventory: Inventory::new(1),
            seen: Mutex::new(Seen::default()),
            snapshots: Mutex::new(VecDeque::new()),
        }
    }

    #[test]
    fn a_sample_reads_a_live_counter_and_stock_and_adds_nothing() {
        let names = ["Counter"];
        let live = test_live();
        for seq in 0..3 {
            publish(&live, seq, &names);
        }
        let v: Value = serde_json::from_str(&live.snapshots.lock().unwrap()[2].1).unwrap();
        assert_eq!(v["seq"], 2);
        assert_eq!(v["running"], "Counter");
        assert_eq!(v["counter"]["values"], json!([7]));
        assert_eq!(v["counter"]["sum"], 7);
        assert_eq!(v["counter"]["events"].as_array().unwrap().len(), 1);
        assert_eq!(v["stock"]["sum"], 5);
        assert_eq!(v["inventory"]["units_left"], 5);
        assert_eq!(v["inventory"]["ok"], true);
        assert_eq!(v["inventory"]["last_mtakes"], Value::Null);
        let c = live.counter.lock().unwrap().clone().unwrap().1;
        assert_eq!(c.sum(), 7, "sampling added nothing");
    }

    /// A histogram case leaves its histogram for the panel: its count is
    /// the records made, its quantiles in order; before one, null.
    #[test]
    fn the_histogram_panel_shows_the_newest_case_in_order() {
        let names = ["Counter"];
        let live = test_live();
        publish(&live, 0, &names);
        let v: Value = serde_json::from_str(&live.snapshots.lock().unwrap()[0].1).unwrap();
        assert_eq!(v["histogram"], Value::Null);
        let bar = ProgressBar::hidden();
        let case = Case {
            round: 0,
            threads: 2,
            readers: 0,
            duration: Duration::from_millis(5),
            bar: &bar,
            bar_base: 0,
        };
        histogram_case(&live, &case);
        publish(&live, 1, &names);
        let v: Value = serde_json::from_str(&live.snapshots.lock().unwrap()[1].1).unwrap();
        let h = &v["histogram"];
        let n = |k: &str| h[k].as_u64().unwrap_or_else(|| panic!("{k}: {h}"));
        assert_eq!(
            (h["ok"].clone(), h["live"].clone()),
            (json!(true), json!(false))
        );
        assert_eq!((n("cases"), n("count")), (1, n("records")));
        assert!(n("count") >= 128, "{h}");
        assert!(
            0 < n("p50") && n("p50") <= n("p90") && n("p90") <= n("p99") && n("p99") <= n("max"),
            "{h}"
        );
        // The sampler only reads: the count is still the records made.
        {
            let r = live.recorded.lock().unwrap();
            assert_eq!(r.histogram.as_ref().unwrap().1.count(), r.records);
        }
        // A new case's histogram before its first record: the last one's.
        {
            let mut r = live.recorded.lock().unwrap();
            let last = r.histogram.replace((1, Arc::new(Histogram::new())));
            r.previous = last.map(|x| x.1);
        }
        assert_eq!(histogram_json(&live)["count"], n("count"));
        assert_eq!(running_name(&names, 1), "Histogram (record)");
        assert_eq!(running_name(&names, 2), "Stock (inventory)");
        assert_eq!(running_name(&names, QUIET_RUNNING), "nothing (quiet phase)");
    }

    /// The quiet phase's merge: reported pending while a thread that added
    /// is alive (no `merge` event, the shards still listed), done once it
    /// exits, with one `merge` event saying how many shards were folded.
    /// Both halves in one test: another test's merge would revoke the
    /// adder's owner id and so release this one's.
    #[test]
    fn a_merge_is_reported_pending_then_done_with_one_event() {
        // Only where sleepers are not read does a sleeping adder hold a
        // merge pending (on x86_64 Linux it never does): the test runs
        // itself again in a child process that runs that protocol.
        if !super::fallback::in_fallback() {
            super::fallback::run_in_fallback(
                "serve::tests::a_merge_is_reported_pending_then_done_with_one_event",
            );
            return;
        }
        let names = ["Counter"];
        let live = test_live();
        let c = Arc::new(Counter::with_max_shards(4));
        assert_eq!(c.split(4), 4);
        *live.counter.lock().unwrap() = Some((1, Arc::clone(&c)));
        let (added, release) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let adder = {
            let c = Arc::clone(&c);
            std::thread::spawn(move || {
                c.inc();
                added.0.send(()).unwrap();
                release.1.recv().unwrap();
            })
        };
        added.1.recv().unwrap();
        let state = |seq: u64| -> Value {
            publish(&live, seq, &names);
            let snaps = live.snapshots.lock().unwrap();
            serde_json::from_str(&snaps.back().unwrap().1).unwrap()
        };
        let kinds = |v: &Value| -> Vec<(String, u64, Option<u64>)> {
            v["counter"]["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    let kind = e["kind"].as_str().unwrap().to_owned();
                    (kind, e["shards"].as_u64().unwrap(), e["from"].as_u64())
                })
                .collect()
        };
        let v = state(0);
        assert_eq!(
            (
                v["counter"]["shards"].clone(),
                v["counter"]["merge"].clone()
            ),
            (json!(4), Value::Null)
        );
        assert_eq!(
            merge_shown(&live, Instant::now()),
            Some(Merged::Pending { from: 4 })
        );
        // Retired, not folded: the shards still hold their counts.
        let v = state(1);
        assert_eq!(v["counter"]["merge"], "pending");
        assert_eq!(
            (v["counter"]["shards"].clone(), v["counter"]["sum"].clone()),
            (json!(4), json!(1))
        );
        assert_eq!(v["phase"], "load");
        assert_eq!(
            kinds(&v),
            [("new".into(), 0, None), ("grow".into(), 4, None)]
        );
        release.0.send(()).unwrap();
        adder.join().unwrap();
        // Other tests' threads may hold owner ids a little longer.
        let done = merge_shown(&live, Instant::now() + Duration::from_secs(20));
        assert_eq!(done, Some(Merged::Done { from: 4 }));
        live.quiet.store(true, Ordering::Relaxed);
        let v = state(2);
        assert_eq!(
            (v["phase"].clone(), v["counter"]["merge"].clone()),
            (json!("quiet"), json!("done"))
        );
        assert_eq!(
            (v["counter"]["values"].clone(), v["counter"]["sum"].clone()),
            (json!([1]), json!(1))
        );
        let want = [
            ("new".into(), 0, None),
            ("grow".into(), 4, None),
            ("merge".into(), 0, Some(4)),
        ];
        assert_eq!(kinds(&v), want);
        assert_eq!(v["counter"]["events"][2]["seq"], 2);
        // Once per counter: later calls and looks add nothing.
        assert_eq!(merge_shown(&live, Instant::now()), done);
        assert_eq!(kinds(&state(3)), want);
    }

    /// After a sell-out the stock's shards are empty, but its widest look
    /// stays in `peak` until the next stock replaces it.
    #[test]
    fn a_sold_out_stock_keeps_its_widest_look() {
        let names = ["Counter"];
        let live = test_live();
        publish(&live, 0, &names);
        let stock = live.stock.lock().unwrap().clone().unwrap().1;
        stock.try_sub(5).unwrap();
        publish(&live, 1, &names);
        let v: Value = serde_json::from_str(&live.snapshots.lock().unwrap()[1].1).unwrap();
        assert_eq!(v["stock"]["sum"], 0);
        assert_eq!(v["stock"]["peak"]["n"], 0);
        assert_eq!(v["stock"]["peak"]["seq"], 0);
        assert_eq!(v["stock"]["peak"]["sum"], 5);
        assert_eq!(v["stock"]["peak"]["holding"], 1);
        // A new stock: its own peak, even if narrower.
        *live.stock.lock().unwrap() = Some((1, Arc::new(Stock::new(0))));
        publish(&live, 2, &names);
        let v: Value = serde_json::from_str(&live.snapshots.lock().unwrap()[2].1).unwrap();
        assert_eq!(
            (
                v["stock"]["peak"]["n"].clone(),
                v["stock"]["peak"]["sum"].clone()
            ),
            (json!(1), json!(0))
        );
    }

    /// The verdict names a type per use from the last minute's medians,
    /// and the legend marks the references.
    #[test]
    fn the_page_gets_the_verdict_and_a_legend_marking_references() {
        let point = |name: &'static str, mops: &[f64]| History {
            name,
            cases: mops.len() as u64,
            total_ops: 0,
            ok: true,
            last_mops: mops.last().copied(),
            points: mops.iter().map(|&m| (0.0, m)).collect(),
        };
        let history = [
            point("AtomicU64", &[10.0, 30.0, 20.0]),
            point("Counter", &[40.0]),
            point("stripe", &[80.0]),
            point("RoughCounter", &[]),
            point("tl-limit", &[100.0, 300.0]),
            point("local_counter!", &[190.0]),
        ];
        let (verdict, legend) = verdict_and_legend(&history);
        let lines: Vec<&str> = verdict["lines"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap())
            .collect();
        // RoughCounter has no case yet: the metrics pick is the Counter.
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].contains("Counter ")
                && lines[0].contains("2.00x (0.20 of the thread-local limit)"),
            "{lines:?}"
        );
        assert!(
            lines[1].contains("metrics counter, read rarely:   Counter "),
            "{lines:?}"
        );
        assert!(
            lines[2].contains("local_counter!")
                && lines[2].contains("9.50x (0.95 of the thread-local limit)"),
            "{lines:?}"
        );
        let pick = verdict["pick"].as_str().unwrap();
        assert!(pick.starts_with("Pick: Counter when"), "{pick}");
        assert!(pick.contains("Counter for a counter scraped"), "{pick}");
        let refs: Vec<&str> = legend
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["reference"] == true)
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(refs, ["stripe", "tl-limit"]);
        assert!(legend[2]["about"]
            .as_str()
            .unwrap()
            .starts_with("a reference, not a library"));
    }
}
