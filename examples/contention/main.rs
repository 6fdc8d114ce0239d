//! Contention demo: every counter kind, hammered by W threads at once.
//!
//! ```text
//! cargo run --release --example contention
//! cargo run --release --example contention -- --threads 1,2,4 --duration 2s \
//!     --readers 1 --chart contention.svg --json contention.json
//! ```
//!
//! For each thread count and each counter kind, W pinned worker threads start
//! through a barrier and increment one shared counter in a loop until a stop
//! flag is set after `--duration`. Each worker counts its own increments in a
//! local `u64`; afterwards the counter's total must equal their sum (the
//! `check` column), and any reader's value must not exceed it. Any FAIL makes
//! the process exit with status 1.
//!
//! Threads beyond the cores (workers plus readers) are marked `*` in the
//! table, and a ratio from a run under 100 ms is marked `?`: such a run is
//! too short to compare anything. With stderr not a terminal (a log file, a
//! CI job), the progress bar gives way to one plain line per case.
//!
//! `--inventory` runs the `Stock` demo instead (see `inventory.rs`):
//!
//! ```text
//! cargo run --release --example contention -- --inventory --stock 1000000 --restock 100000
//! ```
//!
//! `--keyed` counts page views of Zipf-distributed URLs by key instead,
//! with `CounterMap`, `DashMap` and `Mutex<HashMap>` (see `keyed.rs`):
//!
//! ```text
//! cargo run --release --example contention -- --keyed --keys 10000 --zipf-s 1.0
//! ```
//!
//! The counter kinds (shardcount's, the references, the peers) and the
//! pinning/barrier harness live in the `shardcount-harness` crate
//! (`harness/`), shared with the benches.

mod inventory;
mod keyed;
mod zipf;

use clap::Parser;
use crossbeam_utils::CachePadded;
use indicatif::{ProgressBar, ProgressStyle};
use shardcount_harness::measure;
use shardcount_harness::subjects::{self, Subject, Visit};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Pits shardcount's counters against a shared AtomicU64, a Mutex, peer
/// crates and two references (the ideal stripe, one padded atomic per
/// thread; the thread-local limit, a plain thread-local add folded at
/// exit), with every thread incrementing the same counter at once.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Worker thread counts to run, comma-separated (e.g. `1,2,4`).
    /// Default: 1, 2, 4, ... up to and including every core.
    #[arg(long, value_delimiter = ',', value_parser = parse_threads)]
    threads: Vec<usize>,

    /// How long each case (one counter at one thread count) runs: `500ms`,
    /// `2s`, `1.5` (seconds), `250us`. Default: 1s, shortened (to no less
    /// than 100ms) so the whole run stays near 15 s. Inventory mode: each
    /// case sells the stock out again and again until this much time has
    /// been measured (default 500ms). Keyed mode: default 500ms.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,

    /// Extra threads that read the counter (its `sum`/`approx`, whatever the
    /// counter's cheap read is) in a loop while the workers write. Not in
    /// inventory or keyed mode.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=256),
          conflicts_with_all = ["inventory", "keyed"])]
    readers: u16,

    /// Write a chart of throughput against threads (SVG) to this file. Not in
    /// inventory or keyed mode.
    #[arg(long, value_name = "FILE.svg", conflicts_with_all = ["inventory", "keyed"])]
    chart: Option<PathBuf>,

    /// Write the figures as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// Run the whole sweep this many times, cases interleaved, and report
    /// medians; a speedup is the median of ratios to `AtomicU64` measured in
    /// the same round. Use 5 or more for figures you publish.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    repeat: u16,

    /// Inventory mode instead of the counter sweep: workers sell random
    /// amounts of 1-3 units from a `Stock` (and from an `AtomicU64` CAS loop,
    /// for comparison) until it is gone, and every unit is accounted for.
    #[arg(long)]
    inventory: bool,

    /// Inventory mode: the initial stock.
    // Each mode's options also conflict with the other mode: clap waives a
    // `requires` whose target conflicts with an argument given, so
    // `--keyed --stock 5` would otherwise pass and ignore the stock.
    #[arg(
        long,
        default_value_t = 1_000_000,
        requires = "inventory",
        conflicts_with = "keyed"
    )]
    stock: u64,

    /// Inventory mode: units a restocker thread adds, 10 at a time, while the
    /// workers sell.
    #[arg(
        long,
        default_value_t = 100_000,
        requires = "inventory",
        conflicts_with = "keyed"
    )]
    restock: u64,

    /// Keyed mode instead of the counter sweep: workers count page views of
    /// Zipf-distributed URLs by key in a `CounterMap` (by key, and through
    /// handles made up front), a `DashMap<String, AtomicU64>` and a
    /// `Mutex<HashMap<String, u64>>`, and every key's count is checked.
    #[arg(long, conflicts_with = "inventory")]
    keyed: bool,

    /// Keyed mode: how many distinct URLs.
    #[arg(long, default_value_t = 10_000, requires = "keyed", conflicts_with = "inventory",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    keys: u32,

    /// Keyed mode: the Zipf exponent; the URL of rank r gets views in
    /// proportion to 1/r^s (0 is uniform).
    #[arg(long, default_value_t = 1.0, requires = "keyed", conflicts_with = "inventory",
          value_parser = parse_zipf_s)]
    zipf_s: f64,
}

/// Increments between two looks at the stop flag: enough to keep the flag
/// load out of the measurement, few enough to stop within microseconds.
const BATCH: u64 = 64;

/// Cap on a default run, so the README's first command ends in about 15 s.
const DEFAULT_BUDGET: Duration = Duration::from_secs(15);

/// A measured run shorter than this says little: a scheduler hiccup or a
/// cold cache moves a ratio by several times (a 20 ms run once put
/// `Mutex<u64>` at 4.62x `AtomicU64`).
const MIN_RELIABLE: Duration = Duration::from_millis(100);

/// More busy threads than cores: they take turns on the cores, so the
/// figures measure the scheduler as much as the counter.
fn oversubscribed(busy_threads: usize, cores: usize) -> bool {
    busy_threads > cores
}

/// Whether a ratio between two runs can be trusted: both measured for at
/// least [`MIN_RELIABLE`].
fn reliable(shortest: Duration, baseline_shortest: Duration) -> bool {
    shortest.min(baseline_shortest) >= MIN_RELIABLE
}

/// The thread count as the tables show it: `4*` when oversubscribed.
fn threads_cell(threads: usize, over: bool) -> String {
    format!("{threads}{}", if over { "*" } else { "" })
}

/// A ratio as the tables show it: `1.23x`, `1.23x?` when unreliable, `-`
/// when there is none.
fn ratio_cell(ratio: Option<f64>, reliable: bool) -> String {
    match ratio {
        None => "-".to_string(),
        Some(x) => format!("{x:.2}x{}", if reliable { "" } else { "?" }),
    }
}

/// The warning lines for a finished run (also printed, shorter, as table
/// legends): `over` threads counts that oversubscribed, `short` cases under
/// [`MIN_RELIABLE`].
fn warnings(over: &[usize], cores: usize, short: usize, what: &str) -> Vec<String> {
    let mut w = Vec::new();
    if !over.is_empty() {
        w.push(format!(
            "warning: {what} {over:?} exceed the {cores} core(s): threads take turns on the cores, \
             so those rows (marked *) measure the scheduler too"
        ));
    }
    if short > 0 {
        w.push(format!(
            "warning: {short} case(s) measured under {} ms: too short for a meaningful ratio \
             (marked ?); use --duration 300ms or more",
            MIN_RELIABLE.as_millis()
        ));
    }
    w
}

/// Where a figure comes from, so that it can be traced to its host.
#[derive(Debug, Clone)]
struct Host {
    /// `model name` from /proc/cpuinfo, or "unknown".
    cpu: String,
    cores: usize,
    /// `rustc -V` as run now (the toolchain on PATH; under `cargo run`,
    /// the one that built this), or "unknown".
    rustc: String,
    /// This crate's version.
    version: &'static str,
}

impl Host {
    fn detect(cores: usize) -> Host {
        let cpu = measure::cpu_model();
        let cpu = if cpu == "unknown CPU" {
            "unknown".to_string()
        } else {
            cpu
        };
        let rustc = std::process::Command::new("rustc")
            .arg("-V")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".to_string());
        Host {
            cpu,
            cores,
            rustc,
            version: env!("CARGO_PKG_VERSION"),
        }
    }

    /// The JSON fields every output carries.
    fn json(
        &self,
        duration: Duration,
        repeat: usize,
    ) -> serde_json::Map<String, serde_json::Value> {
        let doc = serde_json::json!({
            "cpu_model": self.cpu,
            "cores": self.cores,
            "rustc": self.rustc,
            "shardcount_version": self.version,
            "duration_s": duration.as_secs_f64(),
            "repeat": repeat,
            "min_reliable_s": MIN_RELIABLE.as_secs_f64(),
        });
        match doc {
            serde_json::Value::Object(m) => m,
            _ => unreachable!("a json! object literal"),
        }
    }
}

/// Per-case progress on stderr: above a progress bar on a terminal, else
/// (a log file, a pipe, a CI job, where the bar draws nothing) as plain
/// lines numbered `[case/cases]`.
struct Progress {
    bar: ProgressBar,
    plain: bool,
    done: usize,
    total: usize,
}

impl Progress {
    /// `len` is the bar's length; `total` the number of cases.
    fn new(len: u64, total: usize, terminal: bool) -> Progress {
        let bar = if terminal {
            let bar = ProgressBar::new(len);
            bar.set_style(
                ProgressStyle::with_template("{msg:>28} [{bar:40}] {percent:>3}% eta {eta}")
                    .expect("static template")
                    .progress_chars("=> "),
            );
            bar
        } else {
            ProgressBar::hidden()
        };
        Progress {
            bar,
            plain: !terminal,
            done: 0,
            total,
        }
    }

    /// Reports one finished case.
    fn case_done(&mut self, text: &str) {
        self.done += 1;
        if self.plain {
            eprintln!("[{}/{}] {text}", self.done, self.total);
        } else {
            self.bar.println(text);
        }
    }
}

/// One run of one counter kind at one thread count.
#[derive(Debug, Clone)]
struct Outcome {
    name: &'static str,
    /// Which pass over all the cases this run was part of.
    round: usize,
    threads: usize,
    readers: usize,
    /// Increments the workers performed (sum of their local counts).
    ops: u64,
    /// What the counter said afterwards.
    total: u64,
    /// Barrier release to the last thread joined.
    elapsed: Duration,
    reads: u64,
    /// The largest value any reader saw.
    max_read: u64,
}

impl Outcome {
    fn ok(&self) -> bool {
        verdict(self.ops, self.total, self.max_read)
    }
    fn mops(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64() / 1e6
    }
    /// Wall time per increment as each worker saw it.
    fn ns_per_op_per_thread(&self) -> f64 {
        self.elapsed.as_nanos() as f64 * self.threads as f64 / self.ops.max(1) as f64
    }
    fn reads_per_s(&self) -> f64 {
        self.reads as f64 / self.elapsed.as_secs_f64()
    }
}

/// The correctness check: nothing lost or invented, and no reader saw more
/// than was ever added.
fn verdict(ops: u64, total: u64, max_read: u64) -> bool {
    total == ops && max_read <= total
}

/// Every run of one counter kind at one thread count, summarised.
#[derive(Debug)]
struct Row {
    name: &'static str,
    threads: usize,
    readers: usize,
    /// Medians over the rounds.
    mops: f64,
    ns_per_op_per_thread: f64,
    reads_per_s: f64,
    /// Median over the rounds of the ratio to `AtomicU64` in the same round.
    speedup: Option<f64>,
    /// Every run behind `speedup` (this row's and the baseline's) lasted at
    /// least [`MIN_RELIABLE`].
    reliable: bool,
    /// Every round passed the check.
    ok: bool,
    runs: Vec<Outcome>,
}

/// Groups runs by (counter, threads) in the order first run, with medians
/// and paired speedups.
fn summarize(all: &[Outcome]) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for o in all {
        match rows
            .iter_mut()
            .find(|r| r.name == o.name && r.threads == o.threads)
        {
            Some(r) => r.runs.push(o.clone()),
            None => rows.push(Row {
                name: o.name,
                threads: o.threads,
                readers: o.readers,
                mops: 0.0,
                ns_per_op_per_thread: 0.0,
                reads_per_s: 0.0,
                speedup: None,
                reliable: false,
                ok: false,
                runs: vec![o.clone()],
            }),
        }
    }
    for r in &mut rows {
        let med =
            |f: fn(&Outcome) -> f64| measure::median(&mut r.runs.iter().map(f).collect::<Vec<_>>());
        r.mops = med(Outcome::mops);
        r.ns_per_op_per_thread = med(Outcome::ns_per_op_per_thread);
        r.reads_per_s = med(Outcome::reads_per_s);
        r.ok = r.runs.iter().all(Outcome::ok);
        let mut ratios: Vec<f64> = r
            .runs
            .iter()
            .filter_map(|o| {
                let base = all.iter().find(|b| {
                    b.name == <AtomicU64 as Subject>::NAME
                        && b.threads == o.threads
                        && b.round == o.round
                })?;
                Some(o.mops() / base.mops())
            })
            .collect();
        r.speedup = (!ratios.is_empty()).then(|| measure::median(&mut ratios));
        let shortest = |name: &str| {
            all.iter()
                .filter(|o| o.name == name && o.threads == r.threads)
                .map(|o| o.elapsed)
                .min()
                .unwrap_or(Duration::ZERO)
        };
        r.reliable = reliable(shortest(r.name), shortest(<AtomicU64 as Subject>::NAME));
    }
    rows
}

/// A runnable counter kind: its name and its monomorphised case runner.
struct Entry {
    name: &'static str,
    run: fn(&Case<'_>) -> Outcome,
}

struct Entries(Vec<Entry>);

impl Visit for Entries {
    fn visit<S: Subject>(&mut self) {
        self.0.push(Entry {
            name: S::NAME,
            run: run_case::<S>,
        });
    }
}

/// What one case needs to know.
struct Case<'a> {
    round: usize,
    threads: usize,
    readers: usize,
    duration: Duration,
    bar: &'a ProgressBar,
    /// Progress bar position (ms) when this case starts.
    bar_base: u64,
}

fn run_case<S: Subject>(case: &Case<'_>) -> Outcome {
    // Padded, so that neither shares a cache line with the other or with
    // the harness's own data: only the counter's own layout is measured.
    let counter = CachePadded::new(S::new());
    let stop = CachePadded::new(AtomicBool::new(false));
    let (w, r) = (case.threads, case.readers);
    let ops: Vec<AtomicU64> = (0..w).map(|_| AtomicU64::new(0)).collect();
    let reads: Vec<AtomicU64> = (0..r).map(|_| AtomicU64::new(0)).collect();
    let max_read = AtomicU64::new(0);
    // Workers, then readers, then one timer thread; all pinned, all released
    // by the same barrier. Results are stored Relaxed: the scope's join
    // orders them before the reads below.
    let elapsed = measure::run_threads(w + r + 1, |i| {
        if i < w {
            ops[i].store(write_loop(&*counter, &stop), Ordering::Relaxed);
        } else if i < w + r {
            let (n, max) = read_loop(&*counter, &stop);
            reads[i - w].store(n, Ordering::Relaxed);
            max_read.fetch_max(max, Ordering::Relaxed);
        } else {
            timer(case, &stop);
        }
    });
    Outcome {
        name: S::NAME,
        round: case.round,
        threads: w,
        readers: r,
        ops: ops.iter().map(|n| n.load(Ordering::Relaxed)).sum(),
        total: counter.total(),
        elapsed,
        reads: reads.iter().map(|n| n.load(Ordering::Relaxed)).sum(),
        max_read: max_read.load(Ordering::Relaxed),
    }
}

fn write_loop<S: Subject>(counter: &S, stop: &AtomicBool) -> u64 {
    let mut done = 0u64;
    // At least one batch, even when the worker is first scheduled after the
    // stop (a short case on busy cores): every case's check then covers
    // real increments.
    loop {
        for _ in 0..BATCH {
            counter.add_one();
            measure::opaque();
        }
        done += BATCH;
        // Relaxed: the flag carries no data; results travel through the join.
        if stop.load(Ordering::Relaxed) {
            return done;
        }
    }
}

fn read_loop<S: Subject>(counter: &S, stop: &AtomicBool) -> (u64, u64) {
    let (mut reads, mut max) = (0u64, 0u64);
    // Relaxed: as in `write_loop`.
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..8 {
            max = max.max(counter.read());
        }
        reads += 8;
    }
    (reads, max)
}

/// Sleeps through the case while moving the progress bar, then raises the
/// stop flag.
fn timer(case: &Case<'_>, stop: &AtomicBool) {
    let start = Instant::now();
    loop {
        let spent = start.elapsed();
        case.bar
            .set_position(case.bar_base + spent.as_millis() as u64);
        if spent >= case.duration {
            break;
        }
        std::thread::sleep((case.duration - spent).min(Duration::from_millis(100)));
    }
    // Relaxed: see `write_loop`.
    stop.store(true, Ordering::Relaxed);
}

fn main() {
    let args = Args::parse();
    let cores = measure::cores();
    let host = Host::detect(cores);
    let thread_counts = if args.threads.is_empty() {
        default_threads(cores)
    } else {
        args.threads.clone()
    };
    if args.inventory {
        let ok = inventory::main(&args, &thread_counts, &host);
        std::process::exit(if ok { 0 } else { 1 });
    }
    if args.keyed {
        let ok = keyed::main(&args, &thread_counts, &host);
        std::process::exit(if ok { 0 } else { 1 });
    }
    let mut entries = Entries(Vec::new());
    subjects::for_each(&mut entries);
    let entries = entries.0;
    let rounds = usize::from(args.repeat);
    let cases = thread_counts.len() * entries.len() * rounds;
    let duration = args.duration.unwrap_or_else(|| {
        Duration::from_secs(1)
            .min(DEFAULT_BUDGET / cases as u32)
            .max(Duration::from_millis(100))
    });
    let readers = usize::from(args.readers);

    println!(
        "contention: {} counters x threads {:?}, {} per case, {} reader(s), {} round(s), {} core(s) ({})",
        entries.len(),
        thread_counts,
        fmt_duration(duration),
        readers,
        rounds,
        cores,
        host.cpu
    );

    let case_ms = duration.as_millis().max(1) as u64;
    let mut progress = Progress::new(
        case_ms * cases as u64,
        cases,
        std::io::stderr().is_terminal(),
    );
    let bar = progress.bar.clone();
    let mut outcomes = Vec::with_capacity(cases);
    for round in 0..rounds {
        for &threads in &thread_counts {
            for e in &entries {
                bar.set_message(format!("{} x {threads}", e.name));
                let case = Case {
                    round,
                    threads,
                    readers,
                    duration,
                    bar: &bar,
                    bar_base: case_ms * outcomes.len() as u64,
                };
                let o = (e.run)(&case);
                progress.case_done(&format!(
                    "round {:<3} {:>14} x {:<3} {:>9.1} Mops/s  {}",
                    round + 1,
                    o.name,
                    o.threads,
                    o.mops(),
                    if o.ok() { "OK" } else { "FAIL" }
                ));
                outcomes.push(o);
            }
        }
    }
    bar.finish_and_clear();

    let rows = summarize(&outcomes);
    print!("{}", table(&rows, cores));
    let mut over: Vec<usize> = rows
        .iter()
        .filter(|r| oversubscribed(r.threads + r.readers, cores))
        .map(|r| r.threads)
        .collect();
    over.dedup();
    let short = outcomes.iter().filter(|o| o.elapsed < MIN_RELIABLE).count();
    let what = if readers > 0 {
        format!("worker counts (plus {readers} reader(s))")
    } else {
        "worker counts".to_string()
    };
    for w in warnings(&over, cores, short, &what) {
        eprintln!("{w}");
    }

    if let Some(path) = &args.json {
        write_or_die(path, &json(&rows, &host, duration, rounds));
    }
    if let Some(path) = &args.chart {
        if let Err(e) = chart(path, &rows, &host, duration) {
            eprintln!("error: cannot draw {}: {e}", path.display());
            std::process::exit(2);
        }
        println!("chart written to {}", path.display());
    }

    let failed: Vec<_> = outcomes.iter().filter(|o| !o.ok()).collect();
    if !failed.is_empty() {
        for o in &failed {
            eprintln!(
                "FAIL: {} x {} threads, round {}: workers did {} increments, counter says {}, largest read {}",
                o.name,
                o.threads,
                o.round + 1,
                o.ops,
                o.total,
                o.max_read
            );
        }
        std::process::exit(1);
    }
}

/// 1, 2, 4, ... below `cores`, then `cores` itself.
fn default_threads(cores: usize) -> Vec<usize> {
    let mut v: Vec<usize> = std::iter::successors(Some(1usize), |&t| t.checked_mul(2))
        .take_while(|&t| t < cores)
        .collect();
    v.push(cores);
    v
}

fn table(rows: &[Row], cores: usize) -> String {
    use std::fmt::Write;
    let readers = rows.iter().any(|r| r.readers > 0);
    let mut s = String::new();
    let _ = write!(
        s,
        "\n{:<14} {:>7} {:>10} {:>13} {:>13}",
        "counter", "threads", "Mops/s", "ns/op/thread", "vs AtomicU64"
    );
    if readers {
        let _ = write!(s, " {:>7} {:>10}", "readers", "Mreads/s");
    }
    let _ = writeln!(s, "  check");
    let (mut any_over, mut any_short) = (false, false);
    for r in rows {
        let over = oversubscribed(r.threads + r.readers, cores);
        any_over |= over;
        any_short |= r.speedup.is_some() && !r.reliable;
        let _ = write!(
            s,
            "{:<14} {:>7} {:>10.1} {:>13.2} {:>13}",
            r.name,
            threads_cell(r.threads, over),
            r.mops,
            r.ns_per_op_per_thread,
            ratio_cell(r.speedup, r.reliable)
        );
        if readers {
            let _ = write!(s, " {:>7} {:>10.2}", r.readers, r.reads_per_s / 1e6);
        }
        let _ = writeln!(s, "  {}", if r.ok { "OK" } else { "FAIL" });
    }
    if any_over {
        let _ = writeln!(
            s,
            "* more threads (workers + readers) than the {cores} core(s): they take turns"
        );
    }
    if any_short {
        let _ = writeln!(
            s,
            "? from a run under {} ms: too short for a meaningful ratio",
            MIN_RELIABLE.as_millis()
        );
    }
    s
}

fn json(rows: &[Row], host: &Host, duration: Duration, repeat: usize) -> String {
    let rows: Vec<_> = rows
        .iter()
        .map(|r| {
            let runs: Vec<_> = r
                .runs
                .iter()
                .map(|o| {
                    serde_json::json!({
                        "round": o.round + 1,
                        "ops": o.ops,
                        "total": o.total,
                        "elapsed_s": o.elapsed.as_secs_f64(),
                        "mops": o.mops(),
                        "reads": o.reads,
                        "max_read": o.max_read,
                        "ok": o.ok(),
                    })
                })
                .collect();
            serde_json::json!({
                "counter": r.name,
                "threads": r.threads,
                "readers": r.readers,
                "mops": r.mops,
                "ns_per_op_per_thread": r.ns_per_op_per_thread,
                "speedup_vs_atomic": r.speedup,
                "speedup_reliable": r.reliable,
                "oversubscribed": oversubscribed(r.threads + r.readers, host.cores),
                "reads_per_s": r.reads_per_s,
                "ok": r.ok,
                "runs": runs,
            })
        })
        .collect();
    let mut doc = host.json(duration, repeat);
    doc.insert(
        "figures".into(),
        "medians over runs; speedup_vs_atomic is the median of per-round ratios".into(),
    );
    doc.insert("results".into(), rows.into());
    serde_json::to_string_pretty(&doc).expect("plain values serialise") + "\n"
}

fn write_or_die(path: &Path, text: &str) {
    if let Err(e) = std::fs::write(path, text) {
        eprintln!("error: cannot write {}: {e}", path.display());
        std::process::exit(2);
    }
}

/// Line colours: distinct, and dark enough on white.
const COLORS: [plotters::style::RGBColor; 10] = [
    plotters::style::RGBColor(214, 39, 40),   // red
    plotters::style::RGBColor(127, 127, 127), // grey
    plotters::style::RGBColor(31, 119, 180),  // blue
    plotters::style::RGBColor(148, 103, 189), // purple
    plotters::style::RGBColor(44, 160, 44),   // green
    plotters::style::RGBColor(255, 127, 14),  // orange
    plotters::style::RGBColor(140, 86, 75),   // brown
    plotters::style::RGBColor(23, 190, 207),  // cyan
    plotters::style::RGBColor(188, 189, 34),  // olive
    plotters::style::RGBColor(227, 119, 194), // pink
];

/// Throughput against threads, one line per counter, log-scaled throughput
/// (the kinds differ by orders of magnitude), the y axis fitted to the data.
/// Thread counts beyond the cores are shaded; the legend sits right of the
/// plot and the host, case length and rounds under it.
fn chart(
    path: &Path,
    all: &[Row],
    host: &Host,
    duration: Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;

    let mut names: Vec<&str> = Vec::new();
    for o in all {
        if !names.contains(&o.name) {
            names.push(o.name);
        }
    }
    // x is in hundredths of a thread: an integer axis (so exact ticks at the
    // thread counts run) that still allows a small margin at either end.
    let tmin = all.iter().map(|o| o.threads).min().unwrap_or(1) as i64 * 100;
    let tmax = all.iter().map(|o| o.threads).max().unwrap_or(1) as i64 * 100;
    let pad = ((tmax - tmin) / 20).max(50);
    let (x0, x1) = (tmin - pad, tmax + pad);
    let (y0, y1) = y_range(all.iter().map(|r| r.mops));
    let mut ticks: Vec<usize> = all.iter().map(|o| o.threads).collect();
    ticks.sort_unstable();
    ticks.dedup();
    let readers = all.first().map_or(0, |r| r.readers);
    let rounds = all.first().map_or(1, |r| r.runs.len());

    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let (upper, footer) = root.split_vertically(548);
    let (plot_area, legend_area) = upper.split_horizontally(760);

    let mut title = "Increments per second, all threads on one counter".to_string();
    if readers > 0 {
        title += &format!(", {readers} reader(s)");
    }
    if rounds > 1 {
        title += &format!(", median of {rounds}");
    }
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0..x1).with_key_points(ticks.iter().map(|&t| t as i64 * 100).collect()),
            (y0..y1).log_scale().with_key_points(log_ticks(y0, y1)),
        )?;
    chart
        .configure_mesh()
        .x_desc("worker threads")
        .y_desc("Mops/s (log scale)")
        .x_label_formatter(&|x| format!("{}", x / 100))
        .y_label_formatter(&|y| format!("{y}"))
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 16))
        .draw()?;

    // Oversubscribed: workers + readers > cores. Shaded from halfway between
    // the last thread count that fits and the next, so a point at exactly
    // the core count sits clearly outside.
    let fits = host.cores.saturating_sub(readers) as i64;
    if tmax > fits * 100 {
        let from = (fits * 100 + 50).max(x0);
        let shade = RGBColor(255, 200, 150).mix(0.35);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(from, y0), (x1, y1)],
            shade.filled(),
        )))?;
        let note = if readers > 0 {
            format!("workers + {readers} reader(s) > {} cores", host.cores)
        } else {
            format!("threads > {} cores", host.cores)
        };
        chart.draw_series(std::iter::once(Text::new(
            note,
            (from + 8, y1 / (y1 / y0).powf(0.02)),
            ("sans-serif", 14).into_font().color(&RGBColor(150, 70, 0)),
        )))?;
    }

    for (i, name) in names.iter().enumerate() {
        let color = COLORS[i % COLORS.len()].to_rgba();
        let points: Vec<(i64, f64)> = all
            .iter()
            .filter(|o| o.name == *name)
            .map(|o| (o.threads as i64 * 100, o.mops.max(y0)))
            .collect();
        chart.draw_series(LineSeries::new(points, color.stroke_width(3)).point_size(4))?;
        // Level with the top of the plot, below the title.
        let y = 62 + 24 * i as i32;
        legend_area.draw(&PathElement::new(
            vec![(4, y), (28, y)],
            color.stroke_width(3),
        ))?;
        legend_area.draw(&Text::new(
            name.to_string(),
            (34, y - 8),
            ("sans-serif", 15),
        ))?;
    }

    let grey = ("sans-serif", 13).into_font().color(&RGBColor(80, 80, 80));
    footer.draw(&Text::new(
        format!(
            "host: {}, {} cores; {} per case, {} round(s)",
            host.cpu,
            host.cores,
            fmt_duration(duration),
            rounds
        ),
        (16, 8),
        grey.clone(),
    ))?;
    let mut build = format!("shardcount {}, {}", host.version, host.rustc);
    if all
        .iter()
        .any(|r| r.runs.iter().any(|o| o.elapsed < MIN_RELIABLE))
    {
        build += &format!(
            "; runs under {} ms: too short to compare",
            MIN_RELIABLE.as_millis()
        );
    }
    footer.draw(&Text::new(build, (16, 28), grey))?;
    root.present()?;
    Ok(())
}

/// The y range of a log-scaled chart of these values: the positive ones
/// with a little room either side (a factor of 1.25), or 0.1..10 if none.
fn y_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|m| *m > 0.0 && m.is_finite())
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), m| {
            (lo.min(m), hi.max(m))
        });
    if hi > 0.0 {
        (lo / 1.25, hi * 1.25)
    } else {
        (0.1, 10.0)
    }
}

/// Log-axis ticks within `lo..=hi`: 1, 2, 5 times each power of ten, or
/// 1..9 times each when that gives fewer than three.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let at = |mults: &[f64]| {
        let mut v = Vec::new();
        let mut decade = 10f64.powi(lo.log10().floor() as i32);
        while decade <= hi {
            for m in mults {
                let y = decade * m;
                if (lo..=hi).contains(&y) {
                    v.push(y);
                }
            }
            decade *= 10.0;
        }
        v
    };
    let v = at(&[1.0, 2.0, 5.0]);
    if v.len() >= 3 {
        v
    } else {
        at(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    }
}

fn parse_threads(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a thread count"))?;
    if n == 0 || n > 1024 {
        return Err(format!("thread count {n} out of range 1..=1024"));
    }
    Ok(n)
}

/// A Zipf exponent: 0 (uniform) to 10 (nearly every view on one key).
fn parse_zipf_s(s: &str) -> Result<f64, String> {
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if !(0.0..=10.0).contains(&x) {
        return Err(format!("Zipf exponent {s} out of range 0..=10"));
    }
    Ok(x)
}

/// `500ms`, `2s`, `1.5s`, `250us`, or a bare number of seconds (`0.02`).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, unit) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        (t, 1.0)
    };
    let x: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a duration (try 500ms, 2s or 1.5)"))?;
    let secs = x * unit;
    if !secs.is_finite() || !(1e-6..=3600.0).contains(&secs) {
        return Err(format!("duration `{s}` out of range 1us..=1h"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn fmt_duration(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.3}s", d.as_secs_f64())
    } else {
        format!("{}ms", d.as_secs_f64() * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_and_without_units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("NaN").is_err());
    }

    #[test]
    fn verdict_rejects_lost_invented_and_impossible_reads() {
        assert!(verdict(10, 10, 10));
        assert!(verdict(10, 10, 3));
        assert!(!verdict(10, 9, 0), "a lost increment must fail");
        assert!(!verdict(10, 11, 0), "an invented increment must fail");
        assert!(!verdict(10, 10, 11), "a read above the total must fail");
    }

    #[test]
    fn speedups_are_paired_within_rounds() {
        let run = |name, round, ops| Outcome {
            name,
            round,
            threads: 2,
            readers: 0,
            ops,
            total: ops,
            elapsed: Duration::from_secs(1),
            reads: 0,
            max_read: 0,
        };
        // A slow round 1 slows both kinds: the ratio stays 2.
        let all = [
            run("AtomicU64", 0, 100),
            run("Counter", 0, 200),
            run("AtomicU64", 1, 10),
            run("Counter", 1, 20),
            run("AtomicU64", 2, 100),
            run("Counter", 2, 200),
        ];
        let rows = summarize(&all);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].name, "Counter");
        assert_eq!(rows[1].speedup, Some(2.0));
        assert_eq!(rows[1].mops, 200e-6);
        assert!(rows[1].ok);
    }

    #[test]
    fn oversubscription_is_more_busy_threads_than_cores() {
        assert!(!oversubscribed(2, 2));
        assert!(oversubscribed(3, 2));
        assert!(oversubscribed(4, 2));
        assert!(!oversubscribed(1, 8));
        assert_eq!(threads_cell(4, true), "4*");
        assert_eq!(threads_cell(2, false), "2");
    }

    #[test]
    fn a_ratio_needs_both_runs_long_enough() {
        let ms = Duration::from_millis;
        assert!(reliable(ms(100), ms(100)));
        assert!(reliable(ms(300), ms(1000)));
        assert!(!reliable(ms(20), ms(1000)), "this run too short");
        assert!(!reliable(ms(1000), ms(99)), "the baseline too short");
        assert_eq!(ratio_cell(Some(4.624), false), "4.62x?");
        assert_eq!(ratio_cell(Some(1.5), true), "1.50x");
        assert_eq!(ratio_cell(None, false), "-");
    }

    #[test]
    fn short_runs_mark_their_rows_and_the_baseline_s() {
        let run = |name, threads, ms| Outcome {
            name,
            round: 0,
            threads,
            readers: 0,
            ops: 1000,
            total: 1000,
            elapsed: Duration::from_millis(ms),
            reads: 0,
            max_read: 0,
        };
        let rows = summarize(&[
            run("AtomicU64", 1, 300),
            run("Counter", 1, 300),
            run("AtomicU64", 4, 20),
            run("Counter", 4, 300),
        ]);
        let reliable: Vec<_> = rows
            .iter()
            .map(|r| (r.name, r.threads, r.reliable))
            .collect();
        assert_eq!(
            reliable,
            [
                ("AtomicU64", 1, true),
                ("Counter", 1, true),
                ("AtomicU64", 4, false),
                ("Counter", 4, false),
            ]
        );
        let t = table(&rows, 2);
        assert!(t.contains("4*"), "{t}");
        assert!(!t.contains("1*"), "{t}");
        assert!(t.contains("x?"), "{t}");
        assert!(t.contains("\n* more threads"), "{t}");
        assert!(t.contains("\n? from a run under 100 ms"), "{t}");
        // Smoke-demo counts table rows by their last column: legends must
        // not end like one.
        let rows_seen = t.lines().filter(|l| l.ends_with(" OK")).count();
        assert_eq!(rows_seen, 4, "{t}");
    }

    #[test]
    fn warnings_name_what_is_wrong_and_only_that() {
        assert!(warnings(&[], 2, 0, "worker counts").is_empty());
        let w = warnings(&[4, 8], 2, 0, "worker counts");
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("[4, 8] exceed the 2 core(s)"), "{w:?}");
        let w = warnings(&[], 2, 3, "worker counts");
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("3 case(s) measured under 100 ms"), "{w:?}");
    }

    #[test]
    fn inventory_takes_duration_repeat_and_json_but_not_readers_or_chart() {
        let parse = |extra: &[&str]| {
            Args::try_parse_from(["contention", "--inventory"].iter().chain(extra))
        };
        let a = parse(&["--duration", "200ms", "--repeat", "2", "--json", "x.json"])
            .expect("accepted in inventory mode");
        assert_eq!(a.duration, Some(Duration::from_millis(200)));
        assert_eq!(a.repeat, 2);
        for bad in [
            &["--readers", "1"][..],
            &["--chart", "x.svg"][..],
            &["--keys", "5"][..],
            &["--zipf-s", "1"][..],
        ] {
            let e = parse(bad).expect_err("rejected in inventory mode");
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{bad:?}"
            );
        }
        // Without --inventory both are fine, and the stock options are not.
        assert!(Args::try_parse_from(["contention", "--readers", "1", "--chart", "x.svg"]).is_ok());
        assert!(Args::try_parse_from(["contention", "--stock", "5"]).is_err());
    }

    #[test]
    fn keyed_takes_its_options_and_refuses_the_others() {
        let parse =
            |extra: &[&str]| Args::try_parse_from(["contention", "--keyed"].iter().chain(extra));
        let a = parse(&[
            "--duration",
            "200ms",
            "--repeat",
            "2",
            "--json",
            "x.json",
            "--threads",
            "1,2",
            "--keys",
            "500",
            "--zipf-s",
            "0.8",
        ])
        .expect("accepted in keyed mode");
        assert_eq!((a.keys, a.zipf_s, a.repeat), (500, 0.8, 2));
        let a = parse(&[]).expect("defaults");
        assert_eq!((a.keys, a.zipf_s), (10_000, 1.0));
        for bad in [
            &["--readers", "1"][..],
            &["--chart", "x.svg"][..],
            &["--inventory"][..],
            &["--stock", "5"][..],
            &["--restock", "5"][..],
        ] {
            let e = parse(bad).expect_err("rejected in keyed mode");
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{bad:?}"
            );
        }
        for bad in [
            &["--keys", "0"][..],
            &["--zipf-s", "-1"][..],
            &["--zipf-s", "NaN"][..],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
        // The keyed options need --keyed.
        assert!(Args::try_parse_from(["contention", "--keys", "5"]).is_err());
        assert!(Args::try_parse_from(["contention", "--zipf-s", "1"]).is_err());
    }

    #[test]
    fn the_y_axis_hugs_the_data() {
        let (lo, hi) = y_range([50.0, 2000.0, 0.0, f64::NAN].into_iter());
        assert_eq!((lo, hi), (40.0, 2500.0));
        assert_eq!(y_range(std::iter::empty()), (0.1, 10.0));
        assert_eq!(
            log_ticks(40.0, 2500.0),
            [50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0]
        );
        // A narrow range still gets several ticks.
        assert_eq!(log_ticks(4.5, 9.5), [5.0, 6.0, 7.0, 8.0, 9.0]);
    }

    #[test]
    fn default_threads_end_at_every_core() {
        assert_eq!(default_threads(1), vec![1]);
        assert_eq!(default_threads(2), vec![1, 2]);
        assert_eq!(default_threads(6), vec![1, 2, 4, 6]);
        assert_eq!(default_threads(8), vec![1, 2, 4, 8]);
    }

    #[test]
    fn a_tiny_case_counts_exactly_for_every_counter() {
        let bar = ProgressBar::hidden();
        let mut entries = Entries(Vec::new());
        subjects::for_each(&mut entries);
        for e in &entries.0 {
            let case = Case {
                round: 0,
                threads: 2,
                readers: 1,
                duration: Duration::from_millis(5),
                bar: &bar,
                bar_base: 0,
            };
            let o = (e.run)(&case);
            assert!(o.ops > 0, "{}: workers did nothing", e.name);
            assert!(o.ok(), "{}: {o:?}", e.name);
        }
    }
}
