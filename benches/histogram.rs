//! `Histogram::record` on 2 pinned threads against an ideal per-thread
//! histogram and the histograms of the `metrics` Prometheus exporter and
//! `prometheus-client`, as one paired figure (see
//! `shardcount_harness::measure::Session`; no criterion groups): every
//! subject runs in the same repetitions as the reference, and medians of
//! the ratios are printed.
//!
//! * reference: one 128-byte-aligned array of 976 bucket words and a sum
//!   per thread, `fetch_add` on the bucket and the sum, the same
//!   log-linear index (what a histogram that knew its threads would do);
//! * `Histogram::record` (default buckets);
//! * `Histogram::record` with 20 user bounds (a binary search);
//! * the `metrics` Prometheus exporter's histogram handle, `record(f64)`;
//! * `prometheus-client`'s `Histogram::observe` (20 exponential buckets).
//!
//! Then `LabelledHistogram::record` over 8 labels against 8 plain
//! histograms walked the same way (issue 32: at least 0.95 of it).
//!
//! Then, per bound count (5, 12, 13, 14, 15, 30), `record` on 2 threads
//! against 1 (issue 32: 12 and 13 bounds once filled a row's 128 bytes
//! exactly and scaled 1.5x where the others scaled 1.95x):
//! `SHARDCOUNT_ONLY="powers of two"` for the pattern;
//! `SHARDCOUNT_SPLIT=1` splits each histogram first (no growth in the
//! timed run).
//!
//! Every thread records the same sequence (xorshift, values below 2^20).
//! Each run checks its count through the subject's own read (the
//! exporter's rendering, the encoder's text). `SHARDCOUNT_REPS` sets the
//! repetitions (default 7; 1 for a quick check),
//! `SHARDCOUNT_ONLY=<substring>` picks figures by title.

use crossbeam_utils::CachePadded;
use metrics::Recorder;
use metrics_exporter_prometheus::PrometheusBuilder;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram as PcHistogram};
use prometheus_client::registry::Registry;
use shardcount::{Histogram, LabelledHistogram};
use shardcount_harness::labels::Route;
use shardcount_harness::measure::{escape, opaque, run_threads, Figure, Ratio, Session};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const THREADS: usize = 2;
/// The default layout's buckets, and the reference's sum word after them.
const BUCKETS: usize = 976;

/// The next value of a thread's sequence: below 2^20 (about a millisecond
/// in nanoseconds), spread over many buckets.
#[inline(always)]
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x & ((1 << 20) - 1)
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

/// The log-linear index (as the crate's, written out for the reference).
#[inline(always)]
fn index(v: u64) -> usize {
    let shift = 63 - (v | 16).leading_zeros() - 4;
    ((shift as usize) << 4) + (v >> shift) as usize
}

/// The ideal: each thread's own padded buckets and sum.
struct PerThread(Vec<CachePadded<[AtomicU64; BUCKETS + 1]>>);

fn per_thread(n: u64) -> Duration {
    let h = PerThread(
        (0..THREADS)
            .map(|_| CachePadded::new(std::array::from_fn(|_| AtomicU64::new(0))))
            .collect(),
    );
    let h = escape(&h);
    let t = run_threads(THREADS, |thread| {
        let row = &h.0[thread];
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..n {
            let v = next(&mut x);
            // Relaxed: counts, as everywhere here.
            row[index(v)].fetch_add(1, Ordering::Relaxed);
            row[BUCKETS].fetch_add(v, Ordering::Relaxed);
            opaque();
        }
    });
    let count: u64 =
        h.0.iter()
            .flat_map(|r| r[..BUCKETS].iter())
            .map(|w| w.load(Ordering::Relaxed))
            .sum();
    assert_eq!(count, THREADS as u64 * n, "lost records");
    t
}

fn sharded(n: u64, h: Histogram) -> Duration {
    let h = escape(&h);
    let t = two_threads(n, |v| h.record(v));
    assert_eq!(h.count(), THREADS as u64 * n, "lost records");
    t
}

/// `n` records on each of `threads` threads into a fresh histogram with
/// `bounds`, every thread from the same seed.
fn scaling_run(n: u64, threads: usize, bounds: &[u64]) -> Duration {
    let h = Histogram::with_bounds(bounds);
    // SHARDCOUNT_SPLIT: rows for both threads from the start, so the
    // figure leaves out the time contention takes to show.
    if std::env::var_os("SHARDCOUNT_SPLIT").is_some() {
        h.split(threads);
    }
    let h = escape(&h);
    let t = run_threads(threads, |_| {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..n {
            h.record(next(&mut x));
            opaque();
        }
    });
    assert_eq!(h.count(), threads as u64 * n, "lost records");
    if std::env::var_os("SHARDCOUNT_SHOW_SHARDS").is_some() {
        eprintln!(
            "{} bounds, {threads} thread(s): {} shards",
            bounds.len(),
            h.shards()
        );
    }
    t
}

/// `k` bounds spread evenly over the values' range (below 2^20), so
/// every bucket but the overflow takes records.
fn spread_bounds(k: u64) -> Vec<u64> {
    (1..=k).map(|i| (i << 20) / (k + 1)).collect()
}

/// Records walking the 8 routes by the value's low bits, into a
/// `LabelledHistogram`.
fn labelled(n: u64) -> Duration {
    let h = LabelledHistogram::<Route>::new();
    let h = escape(&h);
    let t = two_threads(n, |v| h.record(Route::ALL[(v & 7) as usize], v));
    let count: u64 = h.snapshot_all().iter().map(|(_, s)| s.count()).sum();
    assert_eq!(count, THREADS as u64 * n, "lost records");
    t
}

/// The same walk over 8 plain histograms picked by the route's index:
/// what a caller without labels writes.
fn eight_plain(n: u64) -> Duration {
    let h: [Histogram; 8] = std::array::from_fn(|_| Histogram::new());
    let h = escape(&h);
    let t = two_threads(n, |v| h[Route::ALL[(v & 7) as usize] as usize].record(v));
    let count: u64 = h.iter().map(Histogram::count).sum();
    assert_eq!(count, THREADS as u64 * n, "lost records");
    t
}

fn metrics_exporter(n: u64) -> Duration {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let meta = metrics::Metadata::new("bench", metrics::Level::INFO, None);
    let h = recorder.register_histogram(&metrics::Key::from_name("h"), &meta);
    let h = escape(&h);
    let t = two_threads(n, |v| h.record(v as f64));
    let text = handle.render();
    let want = format!("h_count {}", THREADS as u64 * n);
    assert!(text.contains(&want), "lost records:\n{text}");
    t
}

fn prometheus_client(n: u64) -> Duration {
    let h = PcHistogram::new(exponential_buckets(1.0, 2.0, 20));
    let mut registry = Registry::default();
    registry.register("h", "bench", h.clone());
    let h = escape(&h);
    let t = two_threads(n, |v| h.observe(v as f64));
    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    let want = format!("h_count {}\n", THREADS as u64 * n);
    assert!(text.contains(&want), "lost records:\n{text}");
    t
}

fn main() {
    let mut s = Session::new("histogram", 7);
    if s.wants("record") {
        let bounds: Vec<u64> = (0..20).map(|i| 1u64 << i).collect();
        s.run(
            Figure::new(
                "2 threads, record: throughput vs an ideal per-thread histogram",
                THREADS,
                Ratio::Throughput,
            )
            .reference("per-thread padded buckets, fetch_add", per_thread)
            .vs("Histogram::record", |n| sharded(n, Histogram::new()))
            .vs("Histogram::record, 20 le bounds", |n| {
                sharded(n, Histogram::with_bounds(&bounds))
            })
            .vs("metrics Prometheus exporter histogram", metrics_exporter)
            .vs("prometheus-client Histogram::observe", prometheus_client)
            .compare("Histogram::record", "metrics Prometheus exporter histogram")
            .compare("Histogram::record", "prometheus-client Histogram::observe"),
        );
    }
    if s.wants("labelled") {
        s.run(
            Figure::new(
                "2 threads, labelled record: LabelledHistogram vs 8 plain histograms",
                THREADS,
                Ratio::Throughput,
            )
            .reference("8 Histograms picked by index", eight_plain)
            .vs("LabelledHistogram::record, 8 labels", labelled),
        );
    }
    // Issue 32: layouts around one 128-byte row (12 and 13 bounds fill
    // one exactly), 2 threads vs 1; a per-thread throughput ratio of 1 is
    // perfect scaling. Bounds 1, 2, 4, ... (as above): almost every value
    // lands in the overflow bucket, one word per thread hammered next to
    // the sum; spread bounds: every bucket takes records.
    for k in [5, 12, 13, 14, 15, 30] {
        for (kind, bounds) in [
            ("powers of two", (0..k).map(|i| 1u64 << i).collect()),
            ("spread", spread_bounds(k)),
        ] {
            let title = format!("scaling, {k} le bounds ({kind}): 2 threads vs 1");
            if !s.wants(&title) {
                continue;
            }
            let bounds: Vec<u64> = bounds;
            s.run(
                Figure::new(title, THREADS, Ratio::Throughput)
                    .reference("1 thread", |n| scaling_run(n, 1, &bounds))
                    .vs("2 threads", |n| scaling_run(n, THREADS, &bounds)),
            );
        }
    }
    s.finish();
}
