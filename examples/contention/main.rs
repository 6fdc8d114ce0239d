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
//! The sweep runs 3 rounds by default (`--repeat`), every other round in
//! reverse order. Each figure is the median over the quiet rounds with its
//! range `[min..max]`; a ratio to `AtomicU64` is taken within each round.
//! First a verdict, from the same medians, naming the CPU and the thread
//! count: the type to pick for each use, the fastest of the kinds that
//! serve it, as the table under it ranks them (an exact hot counter:
//! `Counter`; a metrics counter: `Counter` or `RoughCounter`; a `static`:
//! `local_counter!`, `Counter` or `RoughCounter`), each against a shared
//! `AtomicU64` and the thread-local limit (a plain add to a per-thread
//! word: what an owned row of a `Counter` is), then the picks at the other
//! thread counts that fit on the cores. Then the table, and under it one
//! line per kind saying what it is and why it is there.
//!
//! A busy host slows everything and shifts ratios, so an empty-loop canary
//! (the benches' one, `harness/src/measure.rs`) is timed on the case's cores
//! just before and just after each run. A run whose canary is over 1.5x the
//! fastest of the sweep is noisy; a round is set aside for a row when the
//! row's run or `AtomicU64`'s at that thread count was noisy. The `quiet`
//! column says how many rounds remain; `0/n` means none did, every round is
//! used and the figures are not to be trusted. A warning on stderr says how
//! many runs were noisy and which rows they affect.
//!
//! Threads beyond the cores (workers plus readers) are marked `*` in the
//! table, and a ratio from a run under 100 ms is marked `?`: such a run is
//! too short to compare anything. Progress is one line on stderr that
//! updates in place; with stderr not a terminal (a log file, a CI job), one
//! plain line per case (per round).
//!
//! Then the histogram section (`histogram.rs`): latency-like values recorded
//! at 1 and 2 threads into shardcount's `Histogram`, the `metrics`
//! Prometheus exporter's histogram, `prometheus-client`'s and
//! `fast-telemetry`'s, measured like the table's cases (its cases share the
//! 15 s budget), each run's count read through the subject's own API and
//! checked against the records made; a FAIL exits with status 1.
//!
//! # JSON (`--json`)
//!
//! Top level: the host (`cpu_model`, `cores`, `rustc`, `shardcount_version`),
//! `duration_s`, `repeat` (rounds), `min_reliable_s`, `canary_fastest_s` (the
//! fastest canary of the sweep), `canary_limit` (1.5), `noisy_runs` (runs
//! whose canary exceeded the limit times the fastest), `verdict` (the lines
//! printed above the table, or null when a counter failed its check), and `results`,
//! one object per table row:
//!
//! * `counter`, `threads`, `readers`, `oversubscribed`, `ok`;
//! * `mops` (median), `mops_min`, `mops_max`, `ns_per_op_per_thread`,
//!   `reads_per_s` (medians), over the rounds kept;
//! * `speedup_vs_atomic` (median of per-round ratios), `speedup_min`,
//!   `speedup_max`, `speedup_reliable` (every run at least 100 ms);
//! * `rounds_kept`: the rounds the figures rest on; `noisy`: no round was
//!   quiet, so all were kept and the figures are not to be trusted;
//! * `runs`: each round's `round`, `ops`, `total`, `elapsed_s`, `mops`,
//!   `reads`, `max_read`, `ok`, `canary_s` (the slower canary around it) and
//!   `noisy`.
//!
//! `histograms`: `values` (what was recorded) and `results`, one object per
//! row of the histogram table: `subject`, `threads`, `mrecords` (median M
//! records/s), `mrecords_min`, `mrecords_max`, `vs_histogram` (median of the
//! per-round ratios to shardcount's `Histogram`), `vs_histogram_min`,
//! `vs_histogram_max`, `rounds_kept`, `noisy`, `ok`, and `runs`, each with
//! `round`, `records`, `count` (null when unreadable, then `error` says
//! why), `elapsed_s`, `mrecords`, `canary_s`, `noisy` and `ok`.
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
//! `--serve [ADDR]` runs every kind and a `Stock` in turn until stopped,
//! and serves a live page of their throughput and shards on loopback (see
//! `serve.rs` and docs/live-view.md):
//!
//! ```text
//! cargo run --release --example contention -- --serve 127.0.0.1:8080
//! ```
//!
//! The counter kinds (shardcount's, the references, the peers) and the
//! pinning/barrier harness live in the `shardcount-harness` crate
//! (`harness/`), shared with the benches.

mod histogram;
mod http;
mod inventory;
mod keyed;
mod serve;
mod zipf;

use clap::Parser;
use crossbeam_utils::CachePadded;
use indicatif::{ProgressBar, ProgressStyle};
use shardcount_harness::measure::{self, Spread};
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

    /// Write the figures as JSON to this file. The counter sweep's JSON has
    /// each figure's range, the canaries and a noisy flag per row and per
    /// run: its fields are described in examples/contention/main.rs.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,

    /// Run the whole sweep this many times (rounds), every other round in
    /// reverse order, and report each figure as its median with its range
    /// [min..max] over the quiet rounds (a round whose empty-loop canary ran
    /// slow is set aside); a speedup is the median of ratios to `AtomicU64`
    /// measured in the same round. Default: 3 (1 in inventory and keyed
    /// modes). Use 5 or more for figures you publish.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=100))]
    repeat: Option<u16>,

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

    /// Live view instead of the counter sweep: run every subject of the
    /// table and a Stock in turn, for ever (until Ctrl-C), and serve a page
    /// drawing their throughput and shards, and their state as JSON at
    /// /state, on ADDR (default 127.0.0.1:8080; port 0 picks a free one).
    /// See examples/contention/serve.rs and docs/live-view.md.
    #[arg(long, value_name = "ADDR", num_args = 0..=1,
          default_missing_value = serve::DEFAULT_ADDR,
          conflicts_with_all = ["inventory", "keyed", "readers", "chart", "json", "repeat"])]
    serve: Option<String>,

    /// With --serve: allow an address that is not loopback (the page and
    /// /state have no authentication).
    #[arg(long, requires = "serve")]
    allow_remote: bool,
}

impl Args {
    /// `--repeat`, or this mode's default.
    fn rounds(&self, default: u16) -> usize {
        usize::from(self.repeat.unwrap_or(default))
    }
}

/// Rounds of the counter sweep without `--repeat`: three give a median and
/// a spread, and a busy round can be set aside.
const DEFAULT_ROUNDS: u16 = 3;

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

/// Per-case progress on stderr: on a terminal, one bar line that updates
/// in place (a failed case is printed above it), so the table and verdict
/// are all that remain on screen; else (a log file, a pipe, a CI job, where
/// the bar draws nothing) plain lines numbered `[case/cases]`.
struct Progress {
    bar: ProgressBar,
    plain: bool,
    done: usize,
    total: usize,
    /// Quarters of `total` done, as last reported.
    quarter: usize,
    /// Before the case number in plain lines: `hist ` for the histogram
    /// section, so its lines are told from the table's.
    label: &'static str,
}

impl Progress {
    /// `len` is the bar's length; `total` the number of cases.
    fn new(len: u64, total: usize, terminal: bool) -> Progress {
        let bar = if terminal {
            let bar = ProgressBar::new(len);
            bar.set_style(
                ProgressStyle::with_template("{msg:>32} [{bar:30}] {percent:>3}% eta {eta}")
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
            quarter: 0,
            total,
            label: "",
        }
    }

    /// Reports one finished case: without a terminal, a line at each
    /// quarter of the cases and for each failed one, so that piped output
    /// reaches the verdict after a few lines, not one per case.
    fn case_done(&mut self, text: &str, ok: bool) {
        self.done += 1;
        if self.plain {
            let quarter = self.done * 4 / self.total.max(1);
            if !ok || quarter > self.quarter {
                eprintln!("[{}{}/{}] {text}", self.label, self.done, self.total);
            }
            self.quarter = quarter;
        } else if !ok {
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
    /// The slower of the empty-loop canaries timed just before and just
    /// after this run (see [`busy`]).
    canary: Duration,
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

/// The name of the kind every ratio is taken against.
const BASELINE: &str = <AtomicU64 as Subject>::NAME;

/// Whether the host was busy around a run: its canary slower than
/// [`measure::CANARY_LIMIT`] times the fastest canary of the whole sweep
/// (the benches' rule). Busy phases slow even an empty loop and shift
/// ratios, so such a run is set aside where a quiet round exists.
fn busy(canary: Duration, fastest: Duration) -> bool {
    canary.as_secs_f64() > measure::CANARY_LIMIT * fastest.as_secs_f64()
}

/// The fastest canary of the sweep: what "quiet" means on this host now.
fn fastest_canary(all: &[Outcome]) -> Duration {
    all.iter().map(|o| o.canary).min().unwrap_or(Duration::ZERO)
}

/// The rounds a figure about `names` at `threads` rests on: those of the
/// first name's runs in which none of the named kinds ran busy; if there
/// are none, every round, and `true` (the figure is not to be trusted).
fn kept_rounds(
    all: &[Outcome],
    names: &[&str],
    threads: usize,
    fastest: Duration,
) -> (Vec<usize>, bool) {
    let rounds: Vec<usize> = all
        .iter()
        .filter(|o| o.name == names[0] && o.threads == threads)
        .map(|o| o.round)
        .collect();
    let quiet: Vec<usize> = rounds
        .iter()
        .copied()
        .filter(|&round| {
            all.iter()
                .filter(|o| o.threads == threads && o.round == round && names.contains(&o.name))
                .all(|o| !busy(o.canary, fastest))
        })
        .collect();
    if quiet.is_empty() {
        (rounds, true)
    } else {
        (quiet, false)
    }
}

/// One kind's throughput over another's at one thread count, taken within
/// each round kept.
#[derive(Debug, Clone, Copy)]
struct Paired {
    ratio: Spread,
    /// Rounds the ratio rests on, of `rounds`.
    kept: usize,
    rounds: usize,
    /// No round had both runs quiet: every round was used.
    busy: bool,
    /// Every run of both kinds at this thread count lasted at least
    /// [`MIN_RELIABLE`].
    reliable: bool,
}

fn paired(all: &[Outcome], a: &str, b: &str, threads: usize) -> Option<Paired> {
    let run = |name: &str, round: usize| {
        all.iter()
            .find(|o| o.name == name && o.threads == threads && o.round == round)
    };
    let (kept, busy) = kept_rounds(all, &[a, b], threads, fastest_canary(all));
    let ratios: Vec<f64> = kept
        .iter()
        .filter_map(|&round| Some(run(a, round)?.mops() / run(b, round)?.mops()))
        .collect();
    if ratios.is_empty() {
        return None;
    }
    let shortest = |name: &str| {
        all.iter()
            .filter(|o| o.name == name && o.threads == threads)
            .map(|o| o.elapsed)
            .min()
            .unwrap_or(Duration::ZERO)
    };
    Some(Paired {
        ratio: Spread::of(&ratios),
        kept: ratios.len(),
        rounds: all
            .iter()
            .filter(|o| o.name == a && o.threads == threads)
            .count(),
        busy,
        reliable: reliable(shortest(a), shortest(b)),
    })
}

/// Every run of one counter kind at one thread count, summarised over the
/// rounds kept: those in which neither it nor `AtomicU64` ran busy.
#[derive(Debug)]
struct Row {
    name: &'static str,
    threads: usize,
    readers: usize,
    /// Median and range over the rounds kept.
    mops: Spread,
    /// Medians over the rounds kept.
    ns_per_op_per_thread: f64,
    reads_per_s: f64,
    /// Median and range over the rounds kept of the ratio to `AtomicU64` in
    /// the same round.
    speedup: Option<Spread>,
    /// How many rounds the figures rest on, of `runs.len()`.
    kept: usize,
    /// No quiet round was left: the figures use every round and are not to
    /// be trusted.
    busy: bool,
    /// Every run behind `speedup` (this row's and the baseline's) lasted at
    /// least [`MIN_RELIABLE`].
    reliable: bool,
    /// Every round passed the check.
    ok: bool,
    runs: Vec<Outcome>,
}

/// Groups runs by (counter, threads) in the order first run, with medians,
/// ranges and paired speedups over the rounds kept.
fn summarize(all: &[Outcome]) -> Vec<Row> {
    let mut groups: Vec<Vec<Outcome>> = Vec::new();
    for o in all {
        match groups
            .iter_mut()
            .find(|g| g[0].name == o.name && g[0].threads == o.threads)
        {
            Some(g) => g.push(o.clone()),
            None => groups.push(vec![o.clone()]),
        }
    }
    let fastest = fastest_canary(all);
    groups
        .into_iter()
        .map(|runs| {
            let (name, threads) = (runs[0].name, runs[0].threads);
            let (rounds, busy) = kept_rounds(all, &[name, BASELINE], threads, fastest);
            let kept: Vec<&Outcome> = runs.iter().filter(|o| rounds.contains(&o.round)).collect();
            let med = |f: fn(&Outcome) -> f64| {
                measure::median(&mut kept.iter().map(|o| f(o)).collect::<Vec<_>>())
            };
            let speedup = paired(all, name, BASELINE, threads);
            Row {
                name,
                threads,
                readers: runs[0].readers,
                mops: Spread::of(&kept.iter().map(|o| o.mops()).collect::<Vec<_>>()),
                ns_per_op_per_thread: med(Outcome::ns_per_op_per_thread),
                reads_per_s: med(Outcome::reads_per_s),
                speedup: speedup.map(|p| p.ratio),
                kept: kept.len(),
                busy,
                reliable: speedup.is_some_and(|p| p.reliable),
                ok: runs.iter().all(Outcome::ok),
                runs,
            }
        })
        .collect()
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
        // Timed around the run by the caller.
        canary: Duration::ZERO,
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
    if let Some(addr) = &args.serve {
        std::process::exit(serve::main(&args, addr, &host));
    }
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
    let rounds = args.rounds(DEFAULT_ROUNDS);
    let cases = thread_counts.len() * entries.len() * rounds;
    // The histogram section's cases share the budget.
    let duration = args.duration.unwrap_or_else(|| {
        Duration::from_secs(1)
            .min(DEFAULT_BUDGET / (cases + histogram::cases(rounds)) as u32)
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
            // Every other round in reverse, so that no kind always runs
            // right after the same neighbour.
            let order: Vec<&Entry> = if round % 2 == 0 {
                entries.iter().collect()
            } else {
                entries.iter().rev().collect()
            };
            // The canary runs on as many cores as the case keeps busy.
            let canary_threads = (threads + readers).min(cores);
            for e in order {
                bar.set_message(format!(
                    "round {}/{rounds}: {} x {threads}",
                    round + 1,
                    e.name
                ));
                let case = Case {
                    round,
                    threads,
                    readers,
                    duration,
                    bar: &bar,
                    bar_base: case_ms * outcomes.len() as u64,
                };
                let before = measure::canary(canary_threads);
                let mut o = (e.run)(&case);
                o.canary = before.max(measure::canary(canary_threads));
                progress.case_done(
                    &format!(
                        "round {:<3} {:>14} x {:<3} {:>9.1} Mops/s  {}",
                        round + 1,
                        o.name,
                        o.threads,
                        o.mops(),
                        if o.ok() { "OK" } else { "FAIL" }
                    ),
                    o.ok(),
                );
                outcomes.push(o);
            }
        }
    }
    bar.finish_and_clear();
    let recorded = histogram::sweep(duration, rounds, cores, std::io::stderr().is_terminal());
    let histogram_rows = histogram::summarize(&recorded);

    // The verdict first, so it is on the first screen; the table backs it.
    let verdict = conclusion(&outcomes, &host, readers);
    match &verdict {
        Some(v) => println!("\n{v}"),
        None => println!("\nno verdict: a counter failed its check (see FAIL below)"),
    }
    let rows = summarize(&outcomes);
    print!("{}", table(&rows, cores));
    print!("{}", legend(&rows));
    print!("{}", histogram::table(&histogram_rows, duration));
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
    for w in warnings(&over, cores, short, &what)
        .into_iter()
        .chain(noise_warnings(&rows, &outcomes))
    {
        eprintln!("{w}");
    }
    if let Some(path) = &args.json {
        write_or_die(
            path,
            &json(
                &rows,
                &outcomes,
                &host,
                duration,
                rounds,
                verdict.as_deref(),
                histogram::json(&histogram_rows, &recorded),
            ),
        );
    }
    if let Some(path) = &args.chart {
        if let Err(e) = chart(path, &rows, &host, duration) {
            eprintln!("error: cannot draw {}: {e}", path.display());
            std::process::exit(2);
        }
        println!("chart written to {}", path.display());
    }
    let failed: Vec<_> = outcomes.iter().filter(|o| !o.ok()).collect();
    let histogram_failures = histogram::failures(&recorded);
    for f in &histogram_failures {
        eprintln!("{f}");
    }
    if !failed.is_empty() || !histogram_failures.is_empty() {
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

/// A figure compactly, for a range: 3 significant digits or so.
fn compact(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// `[min..max]`, or nothing when one round (or identical rounds) leave no
/// range to show.
fn range_cell(s: Spread, kept: usize) -> String {
    if kept <= 1 || s.min == s.max {
        String::new()
    } else {
        format!("[{}..{}]", compact(s.min), compact(s.max))
    }
}

/// Quiet rounds behind a row, of all its rounds: `2/3`; `0/3` when none
/// was quiet (every round is used then).
fn quiet_cell(r: &Row) -> String {
    format!("{}/{}", if r.busy { 0 } else { r.kept }, r.runs.len())
}

/// A ratio as a sentence says it: `1.33x`, `12.5x`.
fn times(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.1}x")
    } else {
        format!("{x:.2}x")
    }
}

fn table(rows: &[Row], cores: usize) -> String {
    use std::fmt::Write;
    let readers = rows.iter().any(|r| r.readers > 0);
    let mut s = String::new();
    let _ = write!(
        s,
        "\n{:<14} {:>7}  {:<21} {:>12}  {:<23} {:>5}",
        "counter",
        "threads",
        "Mops/s [min..max]",
        "ns/op/thread",
        "vs AtomicU64 [min..max]",
        "quiet"
    );
    if readers {
        let _ = write!(s, " {:>7} {:>10}", "readers", "Mreads/s");
    }
    let _ = writeln!(s, "  check");
    let (mut any_over, mut any_short, mut any_busy) = (false, false, false);
    for r in rows {
        let over = oversubscribed(r.threads + r.readers, cores);
        any_over |= over;
        any_short |= r.speedup.is_some() && !r.reliable;
        any_busy |= r.busy;
        let range = r.speedup.map_or(String::new(), |x| range_cell(x, r.kept));
        let _ = write!(
            s,
            "{:<14} {:>7}  {:>7.1} {:<13} {:>12.2}  {:>7} {:<15} {:>5}",
            r.name,
            threads_cell(r.threads, over),
            r.mops.median,
            range_cell(r.mops, r.kept),
            r.ns_per_op_per_thread,
            ratio_cell(r.speedup.map(|x| x.median), r.reliable),
            range,
            quiet_cell(r),
        );
        if readers {
            let _ = write!(s, " {:>7} {:>10.2}", r.readers, r.reads_per_s / 1e6);
        }
        let _ = writeln!(s, "  {}", if r.ok { "OK" } else { "FAIL" });
    }
    let _ = writeln!(
        s,
        "figures: the median over the quiet rounds [the lowest..the highest]; quiet: rounds \
         in which an empty loop timed around the runs ran at full speed"
    );
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
    if any_busy {
        let _ = writeln!(
            s,
            "0/n quiet: the host was busy in every round, all are used: not to be trusted"
        );
    }
    s
}

/// What a kind in the table is, and why it is there, in a line.
pub(crate) fn about(name: &str) -> Option<&'static str> {
    Some(match name {
        "AtomicU64" => {
            "one std AtomicU64 shared by every thread (fetch_add): what most code starts \
             with; every ratio is to it"
        }
        "Mutex<u64>" => "a u64 behind a std Mutex: the simplest correct shared counter, for scale",
        "Counter" => {
            "shardcount's exact counter: one atomic while uncontended, spread over padded \
             shards once threads contend"
        }
        "RoughCounter" => {
            "shardcount's counter for metrics: a plain per-thread add, folded into a shared \
             total now and then"
        }
        "fast-counter" => {
            "the fast-counter crate, a peer: a fixed table of padded atomics, one per core, \
             picked by thread"
        }
        "ThreadLocal" => {
            "the hand-rolled per-thread counter: thread_local's ThreadLocal<AtomicU64>, one \
             unpadded slot per thread"
        }
        "contatori" => {
            "the contatori crate, a peer: 128 padded atomic slots per counter (16 KiB), one \
             fetch_add per add"
        }
        "fast-telemetry" => {
            "the fast-telemetry crate's Counter, a peer (a fork of fast-counter): padded \
             shards, one per core, picked by a thread id"
        }
        "stripe" => {
            "a reference, not a library: one padded atomic per thread, found without a \
             lookup, added to with a locked add: the most a sharded counter of locked adds \
             can reach"
        }
        "tl-limit" => {
            "a reference, not a library: a bare thread-local add, folded at thread exit; \
             the most any counter that loses nothing can reach"
        }
        "local_counter!" => {
            "shardcount's macro for a static counter, at about the thread-local limit"
        }
        _ => return None,
    })
}

/// A kind that is a yardstick, not a library: what the table's ratios
/// should approach.
pub(crate) fn is_reference(name: &str) -> bool {
    name == <subjects::Stripe as Subject>::NAME || name == <subjects::TlLimit as Subject>::NAME
}

/// One line per kind in the table, in table order.
fn legend(rows: &[Row]) -> String {
    use std::fmt::Write;
    let mut s = String::from("\nwhat the rows are:\n");
    let mut seen: Vec<&str> = Vec::new();
    for r in rows {
        if seen.contains(&r.name) {
            continue;
        }
        seen.push(r.name);
        if let Some(a) = about(r.name) {
            let _ = writeln!(s, "  {:<14} {a}", r.name);
        }
    }
    s
}

/// The rows `pick` selects, by thread count: `every row at 2 thread(s)`
/// when it selects all of them, else their names.
fn affected(rows: &[Row], pick: impl Fn(&Row) -> bool) -> String {
    let mut threads: Vec<usize> = Vec::new();
    for r in rows {
        if !threads.contains(&r.threads) {
            threads.push(r.threads);
        }
    }
    let mut parts = Vec::new();
    for t in threads {
        let at: Vec<&Row> = rows.iter().filter(|r| r.threads == t).collect();
        let picked: Vec<&Row> = at.iter().copied().filter(|r| pick(r)).collect();
        if picked.is_empty() {
            continue;
        }
        if picked.len() == at.len() {
            parts.push(format!("every row at {t} thread(s)"));
        } else {
            let names: Vec<&str> = picked.iter().map(|r| r.name).collect();
            parts.push(format!("{} at {t} thread(s)", names.join(", ")));
        }
    }
    parts.join("; ")
}

/// The warnings about a busy host: how many runs had a slow canary, which
/// figures rest on fewer rounds for it, and which had no quiet round left.
fn noise_warnings(rows: &[Row], all: &[Outcome]) -> Vec<String> {
    let fastest = fastest_canary(all);
    let noisy: Vec<&Outcome> = all.iter().filter(|o| busy(o.canary, fastest)).collect();
    if noisy.is_empty() {
        return Vec::new();
    }
    let mut rounds: Vec<usize> = noisy.iter().map(|o| o.round).collect();
    rounds.sort_unstable();
    rounds.dedup();
    let total_rounds = all.iter().map(|o| o.round + 1).max().unwrap_or(1);
    let mut w = vec![format!(
        "warning: the host was busy: {} of {} runs (in {} of {total_rounds} round(s)) had an \
         empty-loop canary over {}x the fastest ({:.2} ms) around them",
        noisy.len(),
        all.len(),
        rounds.len(),
        measure::CANARY_LIMIT,
        fastest.as_secs_f64() * 1e3
    )];
    let fewer = affected(rows, |r| !r.busy && r.kept < r.runs.len());
    if !fewer.is_empty() {
        w.push(format!(
            "warning: busy rounds are set aside, so fewer rounds (the quiet column) are \
             behind {fewer}"
        ));
    }
    let none = affected(rows, |r| r.busy);
    if !none.is_empty() {
        w.push(format!(
            "warning: no quiet round at all (0/n) for {none}: those figures are not to be \
             trusted; run again when the host is quieter, or with --repeat 5"
        ));
    }
    w
}

/// The thread count the verdict speaks of: the most that fit on the cores
/// (with the readers), else the fewest run.
fn verdict_threads(threads: &[usize], readers: usize, cores: usize) -> Option<usize> {
    threads
        .iter()
        .copied()
        .filter(|&t| !oversubscribed(t + readers, cores))
        .max()
        .or_else(|| threads.iter().copied().min())
}

/// The verdict's uses: what each is for, the kinds that serve it (the
/// pick is the fastest of them that ran), and the reference they should
/// approach: the thread-local limit, a plain add to a per-thread word,
/// which is what an owned row of a `Counter` is and what every per-thread
/// slot approaches.
const USES: [(&str, &[&str]); 3] = [
    (
        "exact hot counter, read often",
        &[<shardcount::Counter as Subject>::NAME],
    ),
    (
        "metrics counter, read rarely",
        &[
            <shardcount::Counter as Subject>::NAME,
            <shardcount::RoughCounter as Subject>::NAME,
        ],
    ),
    (
        "a static, the fastest",
        &[
            <subjects::Local as Subject>::NAME,
            <shardcount::Counter as Subject>::NAME,
            <shardcount::RoughCounter as Subject>::NAME,
        ],
    ),
];

/// The reference of every use.
const REFERENCE: &str = <subjects::TlLimit as Subject>::NAME;

/// The hand-rolled per-thread counter the metrics line compares with.
const HAND_ROLLED: &str =
    <shardcount_harness::peers::thread_local::ThreadLocal<AtomicU64> as Subject>::NAME;

/// The verdict at one thread count: a line per use whose kinds ran (the
/// pick, its speed against `AtomicU64` and against the thread-local
/// limit), as `ratio(kind, other)` gives them (the demo's paired medians,
/// or the live page's medians of the last minute), and the picks.
pub(crate) struct Uses {
    pub(crate) lines: Vec<String>,
    /// Per use, the kind picked (`None`: none of its kinds ran).
    picks: [Option<&'static str>; 3],
}

pub(crate) fn use_lines(ratio: impl Fn(&str, &str) -> Option<f64>) -> Uses {
    let mut lines = Vec::new();
    let mut picks = [None; 3];
    for (u, (what, kinds)) in USES.iter().enumerate() {
        // The fastest against AtomicU64: the one the table ranks first.
        let Some((kind, h)) = kinds
            .iter()
            .filter_map(|&k| Some((k, ratio(k, BASELINE)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
        else {
            continue;
        };
        picks[u] = Some(kind);
        let mut line = format!("  {:<31} {kind:<15} {:>6}", format!("{what}:"), times(h));
        if let Some(r) = ratio(kind, REFERENCE) {
            line += &format!(" ({r:.2} of the thread-local limit)");
        }
        if u == 1 {
            if let Some(x) = ratio(HAND_ROLLED, BASELINE) {
                line += &format!("; a hand-rolled {HAND_ROLLED}: {}", times(x));
            }
        }
        lines.push(line);
    }
    Uses { lines, picks }
}

impl Uses {
    /// Which type to pick, after the use lines: the picks, one a line.
    pub(crate) fn pick(&self) -> String {
        let why = [
            "when reads must be exact and frequent (or taken)",
            "for a counter scraped every few seconds, in a struct, an Arc or a map",
            "for a static",
        ];
        let mut out = String::new();
        for (kind, why) in self.picks.iter().zip(why) {
            if let Some(kind) = kind {
                out += if out.is_empty() {
                    "Pick: "
                } else {
                    ";
      "
                };
                out += &format!("{kind} {why}");
                if *kind == <subjects::Local as Subject>::NAME {
                    out += " (a locked sub)";
                }
            }
        }
        if !out.is_empty() {
            out += ".";
        }
        out
    }
}

/// The bottom line a newcomer reads, from the paired medians: which type
/// to pick for each use, each against a shared `AtomicU64` and the
/// reference it should approach, naming the CPU and thread count. A use
/// whose kind did not run is left out. `None` when a counter failed its
/// check (its figures mean nothing).
fn conclusion(all: &[Outcome], host: &Host, readers: usize) -> Option<String> {
    if all.iter().any(|o| !o.ok()) {
        return None;
    }
    let mut threads: Vec<usize> = all.iter().map(|o| o.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    let t = verdict_threads(&threads, readers, host.cores)?;
    let at = |t: usize| use_lines(|a, b| Some(paired(all, a, b, t)?.ratio.median));
    let uses = at(t);
    if uses.lines.is_empty() {
        let mut kinds: Vec<&str> = USES.iter().flat_map(|u| u.1.iter().copied()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        return Some(format!(
            "no verdict: none of {} ran at {t} thread(s) beside {BASELINE}",
            kinds.join(", ")
        ));
    }
    let used: Vec<Paired> = USES
        .iter()
        .flat_map(|&(_, kinds)| kinds.iter().copied())
        .flat_map(|kind| [(kind, BASELINE), (kind, REFERENCE)])
        .filter_map(|(a, b)| paired(all, a, b, t))
        .collect();
    // The other thread counts that fit on the cores: their picks, in brief.
    let others: Vec<String> = threads
        .iter()
        .filter(|&&u| u != t && !oversubscribed(u + readers, host.cores))
        .filter_map(|&u| {
            let o = at(u);
            let picks: Vec<String> = USES
                .iter()
                .zip(o.picks)
                .filter_map(|((what, _), p)| {
                    let p = p?;
                    let h = paired(all, p, BASELINE, u)?.ratio.median;
                    Some(format!("{} {p} {}", what.split(',').next()?, times(h)))
                })
                .collect();
            (!picks.is_empty()).then(|| format!("At {u} thread(s): {}.", picks.join("; ")))
        })
        .collect();
    let with = if readers > 0 {
        format!(" with {readers} reader(s)")
    } else {
        String::new()
    };
    let mut v = format!(
        "On this host ({}, {} core(s)), at {t} thread(s){with}, adds as fast as a shared \
         {BASELINE}:\n{}\n{}",
        host.cpu,
        host.cores,
        uses.lines.join("\n"),
        uses.pick()
    );
    for o in others {
        v += "\n";
        v += &o;
    }
    if used.iter().any(|p| p.busy) {
        v += "\nNot to be trusted: the host was busy in every round of some of these (see the \
              warnings).";
    } else if used.iter().any(|p| p.kept < p.rounds) {
        v += "\nBusy rounds were set aside (see the warnings).";
    }
    if used.iter().any(|p| !p.reliable) {
        v += &format!(
            "\nNot to be trusted: runs under {} ms.",
            MIN_RELIABLE.as_millis()
        );
    }
    Some(v)
}

fn json(
    rows: &[Row],
    all: &[Outcome],
    host: &Host,
    duration: Duration,
    repeat: usize,
    verdict: Option<&str>,
    histograms: serde_json::Value,
) -> String {
    let fastest = fastest_canary(all);
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
                        "canary_s": o.canary.as_secs_f64(),
                        "noisy": busy(o.canary, fastest),
                    })
                })
                .collect();
            serde_json::json!({
                "counter": r.name,
                "threads": r.threads,
                "readers": r.readers,
                "mops": r.mops.median,
                "mops_min": r.mops.min,
                "mops_max": r.mops.max,
                "ns_per_op_per_thread": r.ns_per_op_per_thread,
                "speedup_vs_atomic": r.speedup.map(|x| x.median),
                "speedup_min": r.speedup.map(|x| x.min),
                "speedup_max": r.speedup.map(|x| x.max),
                "speedup_reliable": r.reliable,
                "rounds_kept": r.kept,
                "noisy": r.busy,
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
        "medians, with _min/_max, over the rounds kept (rounds_kept): those in which neither \
         the row's run nor AtomicU64's had a noisy canary, or every round if none (noisy); \
         speedup_vs_atomic is the median of per-round ratios"
            .into(),
    );
    doc.insert("canary_fastest_s".into(), fastest.as_secs_f64().into());
    doc.insert("canary_limit".into(), measure::CANARY_LIMIT.into());
    doc.insert(
        "noisy_runs".into(),
        all.iter()
            .filter(|o| busy(o.canary, fastest))
            .count()
            .into(),
    );
    doc.insert("verdict".into(), verdict.into());
    doc.insert("results".into(), rows.into());
    doc.insert("histograms".into(), histograms);
    serde_json::to_string_pretty(&doc).expect("plain values serialise") + "\n"
}

fn write_or_die(path: &Path, text: &str) {
    if let Err(e) = std::fs::write(path, text) {
        eprintln!("error: cannot write {}: {e}", path.display());
        std::process::exit(2);
    }
}

/// Line colours: distinct, and dark enough on white.
const COLORS: [plotters::style::RGBColor; 11] = [
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
    plotters::style::RGBColor(0, 0, 0),       // black
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
    let (y0, y1) = y_range(all.iter().map(|r| r.mops.median));
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
            .map(|o| (o.threads as i64 * 100, o.mops.median.max(y0)))
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
            canary: Duration::from_millis(3),
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
        assert_eq!(rows[1].speedup.map(|x| x.median), Some(2.0));
        assert_eq!(rows[1].mops.median, 200e-6);
        assert_eq!((rows[1].mops.min, rows[1].mops.max), (20e-6, 200e-6));
        let x = rows[1].speedup.expect("paired");
        assert_eq!((x.min, x.max), (2.0, 2.0));
        assert!(rows[1].ok);
    }

    /// A run of `name` at `threads` in `round`: `ops` increments in one
    /// second, with a canary of `canary_ms` around it.
    fn outcome(
        name: &'static str,
        threads: usize,
        round: usize,
        ops: u64,
        canary_ms: u64,
    ) -> Outcome {
        Outcome {
            name,
            round,
            threads,
            readers: 0,
            ops,
            total: ops,
            elapsed: Duration::from_secs(1),
            reads: 0,
            max_read: 0,
            canary: Duration::from_millis(canary_ms),
        }
    }

    #[test]
    fn busy_rounds_are_set_aside_and_the_range_spans_the_rest() {
        // Counter's ratio is 2, 9 and 4; the 9 comes from a round with a
        // slow canary (10 ms against a fastest of 3: over 1.5x).
        let all = [
            outcome("AtomicU64", 2, 0, 100, 3),
            outcome("Counter", 2, 0, 200, 3),
            outcome("AtomicU64", 2, 1, 100, 3),
            outcome("Counter", 2, 1, 900, 10),
            outcome("AtomicU64", 2, 2, 100, 4),
            outcome("Counter", 2, 2, 400, 4),
        ];
        let rows = summarize(&all);
        let c = &rows[1];
        assert_eq!((c.name, c.kept, c.busy), ("Counter", 2, false));
        let x = c.speedup.expect("paired");
        assert_eq!((x.median, x.min, x.max), (3.0, 2.0, 4.0));
        assert_eq!((c.mops.min, c.mops.max), (200e-6, 400e-6));
        assert_eq!(quiet_cell(c), "2/3");
        // The baseline's own runs were all quiet.
        assert_eq!((rows[0].kept, rows[0].busy), (3, false));
        assert_eq!(quiet_cell(&rows[0]), "3/3");
        let t = table(&rows, 2);
        assert!(t.contains("3.00x [2.00..4.00]"), "{t}");
        assert!(!t.contains("0/n quiet"), "{t}");

        let w = noise_warnings(&rows, &all);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("1 of 6 runs (in 1 of 3 round(s))"), "{w:?}");
        assert!(w[0].contains("fastest (3.00 ms)"), "{w:?}");
        assert!(w[1].contains("behind Counter at 2 thread(s)"), "{w:?}");
    }

    #[test]
    fn a_busy_baseline_sets_the_round_aside_for_every_row() {
        let all = [
            outcome("AtomicU64", 2, 0, 100, 3),
            outcome("Counter", 2, 0, 200, 3),
            outcome("AtomicU64", 2, 1, 100, 9),
            outcome("Counter", 2, 1, 900, 3),
        ];
        let rows = summarize(&all);
        assert!(rows.iter().all(|r| r.kept == 1 && !r.busy), "{rows:?}");
        assert_eq!(rows[1].speedup.map(|x| x.median), Some(2.0));
        let w = noise_warnings(&rows, &all);
        assert!(w[1].contains("behind every row at 2 thread(s)"), "{w:?}");
    }

    #[test]
    fn no_quiet_round_uses_every_round_and_says_so() {
        let all = [
            outcome("AtomicU64", 1, 0, 100, 3),
            outcome("Counter", 1, 0, 100, 3),
            outcome("AtomicU64", 2, 0, 100, 3),
            outcome("Counter", 2, 0, 200, 9),
            outcome("AtomicU64", 2, 1, 100, 3),
            outcome("Counter", 2, 1, 400, 9),
        ];
        let rows = summarize(&all);
        let c = &rows[3];
        assert_eq!((c.name, c.threads, c.kept, c.busy), ("Counter", 2, 2, true));
        assert_eq!(c.speedup.map(|x| x.median), Some(3.0));
        assert_eq!(quiet_cell(c), "0/2");
        let t = table(&rows, 2);
        assert!(t.contains("0/n quiet: the host was busy"), "{t}");
        let w = noise_warnings(&rows, &all);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("2 of 6 runs (in 2 of 2 round(s))"), "{w:?}");
        assert!(
            w[1].contains("no quiet round at all (0/n) for Counter at 2 thread(s):"),
            "{w:?}"
        );
        // A quiet sweep warns of nothing.
        let quiet = [
            outcome("AtomicU64", 1, 0, 100, 3),
            outcome("Counter", 1, 0, 100, 4),
        ];
        assert!(noise_warnings(&summarize(&quiet), &quiet).is_empty());
    }

    fn test_host() -> Host {
        Host {
            cpu: "Test CPU 9000".to_string(),
            cores: 2,
            rustc: "rustc 1.0".to_string(),
            version: "0.0.0",
        }
    }

    /// Each kind at 1, 2 and 4 threads over two rounds; at 2 threads the
    /// ratios are Counter 2x AtomicU64, half the stripe, RoughCounter 10x,
    /// half the thread-local limit, ThreadLocal 9x, local_counter! 19x. `canary(name, threads)` sets canaries.
    fn sweep(canary: impl Fn(&str, usize) -> u64) -> Vec<Outcome> {
        let mut all = Vec::new();
        for round in 0..2 {
            for threads in [1, 2, 4] {
                // Other thread counts get other ratios, to show which is used.
                let k = if threads == 2 { 1 } else { 3 };
                for (name, ops) in [
                    ("AtomicU64", 100),
                    ("Counter", 200 * k),
                    ("stripe", 400),
                    ("RoughCounter", 1000 * k),
                    ("tl-limit", 2000),
                    ("ThreadLocal", 900 * k),
                    ("local_counter!", 1900 * k),
                ] {
                    all.push(outcome(name, threads, round, ops, canary(name, threads)));
                }
            }
        }
        all
    }

    #[test]
    fn the_verdict_names_a_type_per_use_with_paired_medians() {
        let all = sweep(|_, _| 3);
        let v = conclusion(&all, &test_host(), 0).expect("every run passed");
        assert_eq!(
            v,
            "On this host (Test CPU 9000, 2 core(s)), at 2 thread(s), adds as fast as a shared \
             AtomicU64:\n  \
             exact hot counter, read often:  Counter          2.00x (0.10 of the thread-local \
             limit)\n  \
             metrics counter, read rarely:   RoughCounter     10.0x (0.50 of the thread-local \
             limit); a hand-rolled ThreadLocal: 9.00x\n  \
             a static, the fastest:          local_counter!   19.0x (0.95 of the thread-local \
             limit)\n\
             Pick: Counter when reads must be exact and frequent (or taken);\n      \
             RoughCounter for a counter scraped every few seconds, in a struct, an Arc or a map;\n      \
             local_counter! for a static (a locked sub).\n\
             At 1 thread(s): exact hot counter Counter 6.00x; metrics counter RoughCounter 30.0x; \
             a static local_counter! 57.0x."
        );
        // Which to pick: one line per use, each under 100 columns.
        let pick = v.lines().skip_while(|l| !l.starts_with("Pick: ")).take(3);
        assert!(pick.clone().all(|l| l.len() < 100), "{v}");
        assert_eq!(pick.count(), 3, "{v}");
        // The pick follows the table: a Counter faster than the
        // RoughCounter is the metrics pick too.
        let faster: Vec<Outcome> = all
            .iter()
            .cloned()
            .map(|mut o| {
                if o.name == "Counter" {
                    o.ops *= 20;
                    o.total *= 20;
                }
                o
            })
            .collect();
        let v = conclusion(&faster, &test_host(), 0).expect("every run passed");
        assert!(
            v.contains("metrics counter, read rarely:   Counter          40.0x"),
            "{v}"
        );
        assert!(
            v.contains("Counter for a counter scraped every few seconds"),
            "{v}"
        );
        // Readers take a core: 1 worker is what fits then.
        let v = conclusion(&all, &test_host(), 1).expect("every run passed");
        assert!(v.contains("at 1 thread(s) with 1 reader(s),"), "{v}");
        assert!(v.contains("Counter          6.00x"), "{v}");
        // No line of the verdict is a table row to the smoke test.
        assert!(
            v.lines()
                .all(|l| !l.ends_with(" OK") && !l.ends_with(" FAIL")),
            "{v}"
        );
        // Without local_counter!, the static pick is the next fastest that
        // ran; with none of a use's kinds, no line is guessed.
        let without = |names: &[&str]| {
            let rest: Vec<Outcome> = all
                .iter()
                .filter(|o| !names.contains(&o.name))
                .cloned()
                .collect();
            conclusion(&rest, &test_host(), 0).expect("every run passed")
        };
        let v = without(&["local_counter!"]);
        assert!(
            v.contains("a static, the fastest:          RoughCounter     10.0x"),
            "{v}"
        );
        let v = without(&["local_counter!", "Counter", "RoughCounter"]);
        assert!(
            v.starts_with("no verdict: none of Counter, RoughCounter, local_counter! ran"),
            "{v}"
        );
    }

    #[test]
    fn the_verdict_says_when_it_cannot_be_trusted_or_given() {
        // The reference was busy in every round at 2 threads.
        let all = sweep(|name, threads| {
            if name == "tl-limit" && threads == 2 {
                9
            } else {
                3
            }
        });
        let v = conclusion(&all, &test_host(), 0).expect("every run passed");
        assert!(v.contains("Not to be trusted: the host was busy"), "{v}");
        // Busy in one round only: set aside, and said.
        let mut all = sweep(|_, _| 3);
        for o in all
            .iter_mut()
            .filter(|o| o.round == 1 && o.name == "Counter")
        {
            o.canary = Duration::from_millis(9);
        }
        let v = conclusion(&all, &test_host(), 0).expect("every run passed");
        assert!(
            v.ends_with("\nBusy rounds were set aside (see the warnings)."),
            "{v}"
        );
        // A failed check leaves nothing to conclude.
        let mut all = sweep(|_, _| 3);
        all[7].total += 1;
        assert_eq!(conclusion(&all, &test_host(), 0), None);
    }

    #[test]
    fn the_verdict_speaks_of_the_most_threads_that_fit() {
        assert_eq!(verdict_threads(&[1, 2, 4], 0, 2), Some(2));
        assert_eq!(verdict_threads(&[1, 2, 4], 1, 2), Some(1));
        assert_eq!(verdict_threads(&[4, 8], 0, 2), Some(4));
        assert_eq!(verdict_threads(&[1, 2, 4, 8], 0, 8), Some(8));
        assert_eq!(verdict_threads(&[], 0, 2), None);
    }

    #[test]
    fn every_kind_has_a_legend_line_that_is_not_a_table_row() {
        let mut entries = Entries(Vec::new());
        subjects::for_each(&mut entries);
        let all: Vec<Outcome> = entries
            .0
            .iter()
            .flat_map(|e| [outcome(e.name, 1, 0, 100, 3), outcome(e.name, 2, 0, 100, 3)])
            .collect();
        let rows = summarize(&all);
        let l = legend(&rows);
        for e in &entries.0 {
            assert!(about(e.name).is_some(), "{}: no legend line", e.name);
            let lines = l
                .lines()
                .filter(|x| x.starts_with(&format!("  {} ", e.name)));
            assert_eq!(lines.count(), 1, "{}: {l}", e.name);
        }
        assert!(
            l.lines()
                .all(|x| !x.ends_with(" OK") && !x.ends_with(" FAIL")),
            "{l}"
        );
    }

    #[test]
    fn ranges_are_compact_and_absent_without_one() {
        let s = Spread {
            median: 3.0,
            min: 2.5,
            max: 1234.5,
        };
        assert_eq!(range_cell(s, 3), "[2.50..1234]");
        assert_eq!(range_cell(s, 1), "");
        let flat = Spread {
            median: 1.0,
            min: 1.0,
            max: 1.0,
        };
        assert_eq!(range_cell(flat, 3), "");
        assert_eq!(
            (compact(12.34), compact(0.5)),
            ("12.3".to_string(), "0.50".to_string())
        );
        assert_eq!(
            (times(12.49), times(1.5)),
            ("12.5x".to_string(), "1.50x".to_string())
        );
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
            canary: Duration::from_millis(3),
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
        assert_eq!(a.rounds(1), 2);
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
        assert_eq!((a.keys, a.zipf_s, a.rounds(1)), (500, 0.8, 2));
        let a = parse(&[]).expect("defaults");
        assert_eq!((a.keys, a.zipf_s, a.rounds(1)), (10_000, 1.0, 1));
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
