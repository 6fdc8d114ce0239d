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
//! `--inventory` runs the `Stock` demo instead (see `inventory.rs`):
//!
//! ```text
//! cargo run --release --example contention -- --inventory --stock 1000000 --restock 100000
//! ```
//!
//! The counter kinds (shardcount's, the references, the peers) and the
//! pinning/barrier harness live in the `shardcount-harness` crate
//! (`harness/`), shared with the benches.

mod inventory;

use clap::Parser;
use crossbeam_utils::CachePadded;
use indicatif::{ProgressBar, ProgressStyle};
use shardcount_harness::measure;
use shardcount_harness::subjects::{self, Subject, Visit};
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
    /// `2s`, `1.5` (seconds), `250us`. Default: 1s, shortened so the whole
    /// run stays under about 45 s.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,

    /// Extra threads that read the counter (its `sum`/`approx`, whatever the
    /// counter's cheap read is) in a loop while the workers write.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=256))]
    readers: u16,

    /// Write a chart of throughput against threads (SVG) to this file.
    #[arg(long, value_name = "FILE.svg")]
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
    #[arg(long, default_value_t = 1_000_000, requires = "inventory")]
    stock: u64,

    /// Inventory mode: units a restocker thread adds, 10 at a time, while the
    /// workers sell.
    #[arg(long, default_value_t = 100_000, requires = "inventory")]
    restock: u64,
}

/// Increments between two looks at the stop flag: enough to keep the flag
/// load out of the measurement, few enough to stop within microseconds.
const BATCH: u64 = 64;

/// Cap on a default run, so the README's first command ends within a minute.
const DEFAULT_BUDGET: Duration = Duration::from_secs(45);

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
    // Relaxed: the flag carries no data; results travel through the join.
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..BATCH {
            counter.add_one();
            measure::opaque();
        }
        done += BATCH;
    }
    done
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
    let thread_counts = if args.threads.is_empty() {
        default_threads(cores)
    } else {
        args.threads.clone()
    };
    if args.inventory {
        let ok = inventory::main(&thread_counts, args.stock, args.restock);
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
        "contention: {} counters x threads {:?}, {} per case, {} reader(s), {} round(s), {} core(s)",
        entries.len(),
        thread_counts,
        fmt_duration(duration),
        readers,
        rounds,
        cores
    );

    let case_ms = duration.as_millis().max(1) as u64;
    let bar = ProgressBar::new(case_ms * cases as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg:>28} [{bar:40}] {percent:>3}% eta {eta}")
            .expect("static template")
            .progress_chars("=> "),
    );
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
                bar.println(format!(
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
    print!("{}", table(&rows));

    if let Some(path) = &args.json {
        write_or_die(path, &json(&rows, duration, cores));
    }
    if let Some(path) = &args.chart {
        if let Err(e) = chart(path, &rows) {
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

fn table(rows: &[Row]) -> String {
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
    for r in rows {
        let speedup = r.speedup.map_or("-".to_string(), |x| format!("{x:.2}x"));
        let _ = write!(
            s,
            "{:<14} {:>7} {:>10.1} {:>13.2} {:>13}",
            r.name, r.threads, r.mops, r.ns_per_op_per_thread, speedup
        );
        if readers {
            let _ = write!(s, " {:>7} {:>10.2}", r.readers, r.reads_per_s / 1e6);
        }
        let _ = writeln!(s, "  {}", if r.ok { "OK" } else { "FAIL" });
    }
    s
}

fn json(rows: &[Row], duration: Duration, cores: usize) -> String {
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
                "reads_per_s": r.reads_per_s,
                "ok": r.ok,
                "runs": runs,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "duration_s": duration.as_secs_f64(),
        "cores": cores,
        "figures": "medians over runs; speedup_vs_atomic is the median of per-round ratios",
        "results": rows,
    });
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
/// (the kinds differ by orders of magnitude).
fn chart(path: &Path, all: &[Row]) -> Result<(), Box<dyn std::error::Error>> {
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
    let positive = || all.iter().map(|r| r.mops).filter(|m| *m > 0.0);
    let ymin = positive().fold(f64::INFINITY, f64::min);
    let ymax = positive().fold(0.0, f64::max);
    // Headroom above the data keeps the legend (upper left) off the lines.
    let (y0, y1) = if ymax > 0.0 {
        (ymin / 2.0, ymax * 8.0)
    } else {
        (0.1, 10.0)
    };
    let mut ticks: Vec<usize> = all.iter().map(|o| o.threads).collect();
    ticks.sort_unstable();
    ticks.dedup();

    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut title = "Increments per second, all threads on one counter".to_string();
    let readers = all.first().map_or(0, |r| r.readers);
    if readers > 0 {
        title += &format!(", {readers} reader(s)");
    }
    let rounds = all.first().map_or(1, |r| r.runs.len());
    if rounds > 1 {
        title += &format!(", median of {rounds}");
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0..x1).with_key_points(ticks.iter().map(|&t| t as i64 * 100).collect()),
            (y0..y1).log_scale().with_key_points(one_two_five(y0, y1)),
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

    for (i, name) in names.iter().enumerate() {
        let color = COLORS[i % COLORS.len()].to_rgba();
        let points: Vec<(i64, f64)> = all
            .iter()
            .filter(|o| o.name == *name)
            .map(|o| (o.threads as i64 * 100, o.mops.max(y0)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(3)).point_size(4))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()?;
    root.present()?;
    Ok(())
}

/// Axis ticks at 1, 2, 5 times each power of ten within `lo..hi`.
fn one_two_five(lo: f64, hi: f64) -> Vec<f64> {
    let mut v = Vec::new();
    let mut decade = 10f64.powi(lo.log10().floor() as i32);
    while decade <= hi {
        for m in [1.0, 2.0, 5.0] {
            let y = decade * m;
            if (lo..=hi).contains(&y) {
                v.push(y);
            }
        }
        decade *= 10.0;
    }
    v
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
