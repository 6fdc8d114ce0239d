//! The histogram section of the counter sweep: latency-like values recorded
//! into shardcount's `Histogram` and into the histograms a user of the
//! `metrics` Prometheus exporter, `prometheus-client` or `fast-telemetry`
//! would record into, at 1 and 2 threads.
//!
//! Each case is measured as the table's are: pinned workers released by a
//! barrier record flat out until a stop flag after the case length, an
//! empty-loop canary is timed just before and after, rounds run in
//! alternating order, a round is set aside where either run was busy, and
//! the ratio to shardcount is taken within a round. After each run the
//! subject's count, read through its own API (the exporter's rendering,
//! the encoder's text), must equal the records the workers made; a FAIL
//! makes the demo exit with status 1.

use crossbeam_utils::CachePadded;
use indicatif::ProgressBar;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use serde_json::json;
use shardcount::Histogram;
use shardcount_harness::measure::{self, Spread};
use shardcount_harness::peers::{fast_telemetry, metrics, prometheus_client};
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::{busy, range_cell, times, Case, Progress, BATCH};

/// The thread counts of the section: one, and two sharing the histogram.
pub const THREADS: [usize; 2] = [1, 2];

/// Every thread's sequence starts here, for every subject.
pub const SEED: u64 = 0x9E37_79B9_7F4A_7C15;

/// The next latency-like value, in nanoseconds: 1.0-2.0 µs times 2^k, with
/// k geometric (half the values have k = 0, a quarter k = 1, ..., capped
/// at 13: up to 16.8 ms): a mode near 1.5 µs and a long tail, as request
/// latencies have. A xorshift step and a leading-zero count: cheap next to
/// any record.
#[inline(always)]
pub fn next_latency(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    let octave = ((*x >> 32) as u32).leading_zeros().min(13);
    (1024 + (*x & 1023)) << octave
}

/// The `le` bounds for the subjects that need them: powers of two from
/// 1024 ns to 2^24 ns, one per octave of the values.
fn bounds() -> impl Iterator<Item = u64> {
    (10..=24).map(|i| 1u64 << i)
}

/// One histogram under test.
pub trait Recorder: Sync {
    /// The name in the table.
    const NAME: &'static str;
    /// A fresh, empty histogram.
    fn new() -> Self;
    /// The hot path: record one value.
    fn record(&self, v: u64);
    /// Records counted, as the subject's own read reports it once every
    /// writer has been joined; an error if that read does not say.
    fn count(&self) -> Result<u64, String>;
}

impl Recorder for Histogram {
    const NAME: &'static str = "Histogram";
    fn new() -> Self {
        Histogram::new()
    }
    #[inline]
    fn record(&self, v: u64) {
        Histogram::record(self, v);
    }
    fn count(&self) -> Result<u64, String> {
        Ok(self.snapshot().count())
    }
}

/// The name the exporters' subjects record under.
const METRIC: &str = "latency_ns";

/// The `metrics` Prometheus exporter: a handle from `metrics::histogram!`,
/// recorded with `record(f64)`, counted through the exporter's rendering.
/// With the others' bounds it renders buckets rather than a summary: the
/// same record path, and a render of millions of kept values in about a
/// fifth of the time (0.1 s a run here, where a summary's took 0.5 s).
pub struct Exporter {
    recorder: PrometheusRecorder,
    handle: metrics::Histogram,
}

impl Recorder for Exporter {
    const NAME: &'static str = "metrics exporter";
    fn new() -> Self {
        let bounds: Vec<f64> = bounds().map(|b| b as f64).collect();
        let recorder = PrometheusBuilder::new()
            .set_buckets(&bounds)
            .expect("bounds are not empty")
            .build_recorder();
        // The macro against this recorder only, not a global one: each
        // run gets a fresh histogram.
        let handle = metrics::with_local_recorder(&recorder, || metrics::histogram!(METRIC));
        Exporter { recorder, handle }
    }
    #[inline]
    fn record(&self, v: u64) {
        self.handle.record(v as f64);
    }
    fn count(&self) -> Result<u64, String> {
        count_line(&self.recorder.handle().render(), METRIC)
    }
}

/// `prometheus-client`'s `Histogram::observe`, registered in a `Registry`
/// and counted through the text encoder.
pub struct PromClient {
    registry: prometheus_client::registry::Registry,
    histogram: prometheus_client::metrics::histogram::Histogram,
}

impl Recorder for PromClient {
    const NAME: &'static str = "prometheus-client";
    fn new() -> Self {
        let histogram =
            prometheus_client::metrics::histogram::Histogram::new(bounds().map(|b| b as f64));
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register(METRIC, "demo latencies", histogram.clone());
        PromClient {
            registry,
            histogram,
        }
    }
    #[inline]
    fn record(&self, v: u64) {
        self.histogram.observe(v as f64);
    }
    fn count(&self) -> Result<u64, String> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .map_err(|e| format!("encode: {e}"))?;
        count_line(&text, METRIC)
    }
}

/// `fast-telemetry`'s histogram: the same bounds, a shard per core as for
/// its counter. Its count word and its buckets are separate counters, so
/// both are read and must agree.
impl Recorder for fast_telemetry::Histogram {
    const NAME: &'static str = "fast-telemetry";
    fn new() -> Self {
        fast_telemetry::Histogram::new(&bounds().collect::<Vec<_>>(), measure::cores())
    }
    #[inline]
    fn record(&self, v: u64) {
        fast_telemetry::Histogram::record(self, v);
    }
    fn count(&self) -> Result<u64, String> {
        let count = fast_telemetry::Histogram::count(self);
        let in_buckets = self.buckets_cumulative_iter().last().map_or(0, |b| b.1);
        if count == in_buckets {
            Ok(count)
        } else {
            Err(format!("count {count}, but {in_buckets} in its buckets"))
        }
    }
}

/// The value of `NAME_count` in a Prometheus text exposition: exactly one
/// such sample line, an integer.
pub fn count_line(text: &str, name: &str) -> Result<u64, String> {
    let key = format!("{name}_count");
    let values: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(k, _)| *k == key || k.starts_with(&format!("{key}{{")))
        .map(|(_, v)| v.trim())
        .collect();
    match values.as_slice() {
        [v] => v
            .parse::<f64>()
            .ok()
            .filter(|x| x.fract() == 0.0 && *x >= 0.0)
            .map(|x| x as u64)
            .ok_or_else(|| format!("{key} is not a count: {v:?}")),
        [] => Err(format!("no {key} line in:\n{text}")),
        _ => Err(format!("{} {key} lines in:\n{text}", values.len())),
    }
}

/// The check: the histogram counted every record the workers made, no
/// more, and its read said so.
pub fn count_ok(records: u64, count: &Result<u64, String>) -> bool {
    count.as_ref().is_ok_and(|&c| c == records)
}

/// One run of one subject at one thread count.
#[derive(Debug, Clone)]
pub struct Run {
    pub name: &'static str,
    pub round: usize,
    pub threads: usize,
    /// Records the workers made (the sum of their own counts).
    pub records: u64,
    /// What the histogram said afterwards.
    pub count: Result<u64, String>,
    pub elapsed: Duration,
    /// The slower canary around the run.
    pub canary: Duration,
}

impl Run {
    pub fn ok(&self) -> bool {
        count_ok(self.records, &self.count)
    }
    pub fn mrecords(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64() / 1e6
    }
}

/// Records the sequence from [`SEED`] until `stop`, at least one batch;
/// returns the records made.
pub fn record_loop<R: Recorder>(h: &R, stop: &AtomicBool) -> u64 {
    let mut x = SEED;
    let mut done = 0u64;
    loop {
        for _ in 0..BATCH {
            h.record(next_latency(&mut x));
            measure::opaque();
        }
        done += BATCH;
        // Relaxed: the flag carries no data; results travel through the join.
        if stop.load(Ordering::Relaxed) {
            return done;
        }
    }
}

/// One case: `case.threads` pinned workers record into a fresh subject
/// for `case.duration`, then its count is read and kept for the check.
pub fn run<R: Recorder>(case: &Case<'_>) -> Run {
    // Padded, as the counters are: only the subject's own layout counts.
    let h = CachePadded::new(R::new());
    let stop = CachePadded::new(AtomicBool::new(false));
    let w = case.threads;
    let done: Vec<AtomicU64> = (0..w).map(|_| AtomicU64::new(0)).collect();
    let elapsed = measure::run_threads(w + 1, |i| {
        if i < w {
            // Relaxed: the scope's join orders it before the sum below.
            done[i].store(record_loop(&*h, &stop), Ordering::Relaxed);
        } else {
            super::timer(case, &stop);
        }
    });
    Run {
        name: R::NAME,
        round: case.round,
        threads: w,
        records: done.iter().map(|n| n.load(Ordering::Relaxed)).sum(),
        count: h.count(),
        elapsed,
        canary: Duration::ZERO,
    }
}

/// A subject: its name and its monomorphised runner.
pub struct Subject {
    pub name: &'static str,
    pub run: fn(&Case<'_>) -> Run,
}

/// Every subject, shardcount's first: the ratios are to it.
pub fn subjects() -> [Subject; 4] {
    fn s<R: Recorder>() -> Subject {
        Subject {
            name: R::NAME,
            run: run::<R>,
        }
    }
    [
        s::<Histogram>(),
        s::<Exporter>(),
        s::<PromClient>(),
        s::<fast_telemetry::Histogram>(),
    ]
}

/// The section's cases over `rounds` rounds.
pub fn cases(rounds: usize) -> usize {
    rounds * THREADS.len() * subjects().len()
}

/// Runs the section: every subject at each of [`THREADS`], `rounds`
/// times, every other round in reverse order, a canary around each run.
pub fn sweep(duration: Duration, rounds: usize, cores: usize, terminal: bool) -> Vec<Run> {
    let subjects = subjects();
    let case_ms = duration.as_millis().max(1) as u64;
    let total = cases(rounds);
    let mut progress = Progress::new(case_ms * total as u64, total, terminal);
    progress.label = "hist ";
    let bar: ProgressBar = progress.bar.clone();
    let mut runs = Vec::with_capacity(total);
    for round in 0..rounds {
        for threads in THREADS {
            let order: Vec<&Subject> = if round % 2 == 0 {
                subjects.iter().collect()
            } else {
                subjects.iter().rev().collect()
            };
            let canary_threads = threads.min(cores);
            for s in order {
                bar.set_message(format!(
                    "round {}/{rounds}: {} x {threads}",
                    round + 1,
                    s.name
                ));
                let case = Case {
                    round,
                    threads,
                    readers: 0,
                    duration,
                    bar: &bar,
                    bar_base: case_ms * runs.len() as u64,
                };
                let before = measure::canary(canary_threads);
                let mut r = (s.run)(&case);
                r.canary = before.max(measure::canary(canary_threads));
                progress.case_done(
                    &format!(
                        "round {:<3} {:>17} x {:<3} {:>9.1} M records/s  {}",
                        round + 1,
                        r.name,
                        r.threads,
                        r.mrecords(),
                        if r.ok() { "OK" } else { "FAIL" }
                    ),
                    r.ok(),
                );
                runs.push(r);
            }
        }
    }
    bar.finish_and_clear();
    runs
}

/// One subject at one thread count, over the rounds kept: those in which
/// neither its run nor shardcount's was busy (every round, and `busy`, if
/// none was quiet).
#[derive(Debug)]
pub struct Row {
    pub name: &'static str,
    pub threads: usize,
    pub mrecords: Spread,
    /// Throughput over shardcount's in the same round.
    pub ratio: Spread,
    pub kept: usize,
    pub busy: bool,
    pub ok: bool,
    pub runs: Vec<Run>,
}

/// Rows in the order first run, with medians over the rounds kept.
pub fn summarize(all: &[Run]) -> Vec<Row> {
    let fastest = all.iter().map(|r| r.canary).min().unwrap_or_default();
    let reference = <Histogram as Recorder>::NAME;
    let mut rows: Vec<Row> = Vec::new();
    for r in all {
        if rows
            .iter()
            .any(|x| x.name == r.name && x.threads == r.threads)
        {
            continue;
        }
        let runs: Vec<Run> = all
            .iter()
            .filter(|x| x.name == r.name && x.threads == r.threads)
            .cloned()
            .collect();
        // Each round's (run, shardcount's run in that round).
        let pairs: Vec<(&Run, &Run)> = runs
            .iter()
            .filter_map(|x| {
                let base = all.iter().find(|b| {
                    b.name == reference && b.threads == x.threads && b.round == x.round
                })?;
                Some((x, base))
            })
            .collect();
        let quiet: Vec<&(&Run, &Run)> = pairs
            .iter()
            .filter(|(x, b)| !busy(x.canary, fastest) && !busy(b.canary, fastest))
            .collect();
        let noisy = quiet.is_empty();
        let kept: Vec<&(&Run, &Run)> = if noisy { pairs.iter().collect() } else { quiet };
        if kept.is_empty() {
            // No shardcount run to pair with: nothing to show.
            continue;
        }
        let mrecords: Vec<f64> = kept.iter().map(|(x, _)| x.mrecords()).collect();
        let ratios: Vec<f64> = kept
            .iter()
            .map(|(x, b)| x.mrecords() / b.mrecords())
            .collect();
        rows.push(Row {
            name: r.name,
            threads: r.threads,
            mrecords: Spread::of(&mrecords),
            ratio: Spread::of(&ratios),
            kept: kept.len(),
            busy: noisy,
            ok: runs.iter().all(Run::ok),
            runs,
        });
    }
    rows
}

/// The heading that starts the section in the output.
pub const HEADING: &str = "histograms:";

/// The section's table: a heading saying what was recorded, a row per
/// subject and thread count ending in its check, and what the rows are.
pub fn table(rows: &[Row], duration: Duration) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{HEADING} latency-like values (1 µs to 17 ms, half of them under 2 µs), the same \
         sequence on every thread, {} per case",
        super::fmt_duration(duration)
    );
    let _ = writeln!(
        s,
        "{:<18} {:>7}  {:<22} {:<24} {:>5}  check",
        "histogram", "threads", "M records/s [min..max]", "vs Histogram [min..max]", "quiet"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{:<18} {:>7}  {:>7.1} {:<14} {:>7} {:<16} {:>5}  {}",
            r.name,
            r.threads,
            r.mrecords.median,
            range_cell(r.mrecords, r.kept),
            times(r.ratio.median),
            range_cell(r.ratio, r.kept),
            format!("{}/{}", if r.busy { 0 } else { r.kept }, r.runs.len()),
            if r.ok { "OK" } else { "FAIL" }
        );
    }
    if rows.iter().any(|r| r.busy) {
        let _ = writeln!(
            s,
            "0/n quiet: the host was busy in every round, all are used: not to be trusted"
        );
    }
    let _ = writeln!(
        s,
        "check: the histogram's own count (Histogram::snapshot, the exporter's rendering, the \
         encoder's text, fast-telemetry's count and buckets) against the workers' records"
    );
    let _ = writeln!(
        s,
        "  Histogram          shardcount's: log-linear buckets, no bounds to choose; every ratio \
         is to it"
    );
    let _ = writeln!(
        s,
        "  metrics exporter   metrics::histogram! on metrics-exporter-prometheus, the same 15 \
         buckets: every value kept until rendered"
    );
    let _ = writeln!(
        s,
        "  prometheus-client  Histogram::observe, 15 le bounds (powers of two, 1 µs to 16.8 ms)"
    );
    let _ = writeln!(
        s,
        "  fast-telemetry     its Histogram, the same 15 bounds, a sharded counter per bucket"
    );
    s
}

/// The section in the demo's JSON.
pub fn json(rows: &[Row], all: &[Run]) -> serde_json::Value {
    let fastest = all.iter().map(|r| r.canary).min().unwrap_or_default();
    let results: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            let runs: Vec<serde_json::Value> = r
                .runs
                .iter()
                .map(|x| {
                    json!({
                        "round": x.round + 1,
                        "records": x.records,
                        "count": x.count.as_ref().ok(),
                        "error": x.count.as_ref().err(),
                        "elapsed_s": x.elapsed.as_secs_f64(),
                        "mrecords": x.mrecords(),
                        "canary_s": x.canary.as_secs_f64(),
                        "noisy": busy(x.canary, fastest),
                        "ok": x.ok(),
                    })
                })
                .collect();
            json!({
                "subject": r.name,
                "threads": r.threads,
                "mrecords": r.mrecords.median,
                "mrecords_min": r.mrecords.min,
                "mrecords_max": r.mrecords.max,
                "vs_histogram": r.ratio.median,
                "vs_histogram_min": r.ratio.min,
                "vs_histogram_max": r.ratio.max,
                "rounds_kept": r.kept,
                "noisy": r.busy,
                "ok": r.ok,
                "runs": runs,
            })
        })
        .collect();
    json!({
        "values": "latency-like ns: (1024 + 10 random bits) << k, k geometric up to 13; \
                   every thread the same sequence",
        "results": results,
    })
}

/// A FAIL line per failed run.
pub fn failures(all: &[Run]) -> Vec<String> {
    all.iter()
        .filter(|r| !r.ok())
        .map(|r| {
            let said = match &r.count {
                Ok(c) => format!("its count says {c}"),
                Err(e) => format!("its count cannot be read: {e}"),
            };
            format!(
                "FAIL: histogram {} x {} threads, round {}: workers recorded {}, {said}",
                r.name,
                r.threads,
                r.round + 1,
                r.records
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(threads: usize) -> Case<'static> {
        static BAR: std::sync::OnceLock<ProgressBar> = std::sync::OnceLock::new();
        Case {
            round: 0,
            threads,
            readers: 0,
            duration: Duration::from_millis(5),
            bar: BAR.get_or_init(ProgressBar::hidden),
            bar_base: 0,
        }
    }

    #[test]
    fn the_check_rejects_lost_invented_and_unread_counts() {
        assert!(count_ok(640, &Ok(640)));
        assert!(!count_ok(640, &Ok(639)), "a lost record must fail");
        assert!(!count_ok(640, &Ok(641)), "an invented record must fail");
        assert!(
            !count_ok(640, &Err("no line".into())),
            "an unread count must fail"
        );
    }

    #[test]
    fn every_subject_counts_exactly_at_one_and_two_threads() {
        for s in subjects() {
            for threads in THREADS {
                let r = (s.run)(&tiny(threads));
                assert!(r.records >= BATCH * threads as u64, "{}: {r:?}", s.name);
                assert!(r.ok(), "{}: {r:?}", s.name);
            }
        }
    }

    /// A histogram that drops one record in a thousand: the run must fail.
    struct Lossy(Histogram, AtomicU64);

    impl Recorder for Lossy {
        const NAME: &'static str = "lossy";
        fn new() -> Self {
            Lossy(Histogram::new(), AtomicU64::new(0))
        }
        fn record(&self, v: u64) {
            // Relaxed: a test tally.
            if self.1.fetch_add(1, Ordering::Relaxed) % 1000 != 999 {
                self.0.record(v);
            }
        }
        fn count(&self) -> Result<u64, String> {
            Ok(self.0.snapshot().count())
        }
    }

    #[test]
    fn a_histogram_that_loses_records_fails_its_run() {
        // Longer runs until one records enough to lose one: a 5 ms run on
        // a busy host (tests alongside, a debug build, the first lease of
        // the process) may record fewer than 1000.
        let mut case = tiny(2);
        let r = loop {
            let r = run::<Lossy>(&case);
            if r.records >= 1000 || case.duration >= Duration::from_secs(5) {
                break r;
            }
            case.duration *= 4;
        };
        assert!(r.records >= 1000, "{r:?}");
        assert!(!r.ok(), "{r:?}");
        assert!(failures(&[r])[0].contains("FAIL: histogram lossy x 2 threads"));
    }

    #[test]
    fn counts_are_read_from_the_one_count_line() {
        let text = "# TYPE latency_ns summary\nlatency_ns{quantile=\"0.5\"} 1536\n\
                    latency_ns_sum 123\nlatency_ns_count 640\n";
        assert_eq!(count_line(text, "latency_ns"), Ok(640));
        assert_eq!(
            count_line("latency_ns_count{a=\"b\"} 7.0\n", "latency_ns"),
            Ok(7)
        );
        assert!(count_line("latency_ns_sum 640\n", "latency_ns").is_err());
        assert!(count_line("latency_ns_count 1.5\n", "latency_ns").is_err());
        assert!(count_line("latency_ns_count 1\nlatency_ns_count 1\n", "latency_ns").is_err());
        assert!(count_line("other_latency_ns_count 3\n", "latency_ns").is_err());
    }

    #[test]
    fn values_look_like_latencies() {
        let mut x = SEED;
        let h = Histogram::new();
        for _ in 0..100_000 {
            let v = next_latency(&mut x);
            assert!((1024..2048 << 13).contains(&v), "{v}");
            h.record(v);
        }
        let s = h.snapshot();
        let q = |p| s.quantile(p).unwrap();
        assert!(q(0.5) < 2100, "half under about 2 µs: {}", q(0.5));
        assert!(q(0.99) > 50_000, "a long tail: {}", q(0.99));
        assert!(q(1.0) > 4_000_000, "{}", q(1.0));
    }

    fn run_of(
        name: &'static str,
        threads: usize,
        round: usize,
        records: u64,
        canary_ms: u64,
    ) -> Run {
        Run {
            name,
            round,
            threads,
            records,
            count: Ok(records),
            elapsed: Duration::from_secs(1),
            canary: Duration::from_millis(canary_ms),
        }
    }

    #[test]
    fn ratios_are_to_shardcount_within_a_round_and_busy_rounds_set_aside() {
        let all = [
            run_of("Histogram", 2, 0, 100, 3),
            run_of("fast-telemetry", 2, 0, 50, 3),
            run_of("Histogram", 2, 1, 10, 3),
            run_of("fast-telemetry", 2, 1, 5, 3),
            run_of("Histogram", 2, 2, 100, 3),
            run_of("fast-telemetry", 2, 2, 90, 9),
        ];
        let rows = summarize(&all);
        let f = &rows[1];
        assert_eq!(
            (f.name, f.kept, f.busy, f.ok),
            ("fast-telemetry", 2, false, true)
        );
        assert_eq!((f.ratio.median, f.ratio.min, f.ratio.max), (0.5, 0.5, 0.5));
        let t = table(&rows, Duration::from_millis(20));
        assert!(t.contains(HEADING), "{t}");
        assert!(!t.contains("0/n quiet"), "{t}");
        assert_eq!(t.lines().filter(|l| l.ends_with("  OK")).count(), 2, "{t}");
        // Busy in every round: all are used, and the table says so.
        let mut noisy = all.clone();
        noisy[4].canary = Duration::from_millis(9);
        noisy[0].canary = Duration::from_millis(9);
        noisy[2].canary = Duration::from_millis(9);
        let rows = summarize(&noisy);
        assert_eq!((rows[1].kept, rows[1].busy), (3, true));
        assert!(table(&rows, Duration::from_millis(20)).contains("0/3  OK"));
        assert!(table(&rows, Duration::from_millis(20)).contains("0/n quiet"));
        let mut bad = all.clone();
        bad[3].count = Ok(4);
        let rows = summarize(&bad);
        assert!(!rows[1].ok);
        assert!(table(&rows, Duration::from_millis(20)).contains("  FAIL\n"));
        let j = json(&rows, &bad);
        assert_eq!(j["results"][1]["ok"], false);
        assert_eq!(j["results"][1]["runs"][1]["count"], 4);
    }
}
