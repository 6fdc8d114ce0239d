//! `--keyed`: page views over a Zipf-distributed set of URLs (`zipf.rs`),
//! counted per key by `Mutex<HashMap<String, u64>>` (what one writes
//! first, and the baseline of the ratios), `DashMap<String, AtomicU64>`
//! (`get`, else `entry`, then `fetch_add`), `CounterMap::inc(&key)`, and
//! `CounterMap` handles made once per key, as a user with a known key set
//! would hold them.
//!
//! Each worker replays its own draws until the stop flag and records only
//! how many it replayed; its exact per-key tally follows from that. A case
//! is OK iff every key's count equals the sum of the workers' tallies and
//! nothing was counted anywhere else (a key outside the set, the map's
//! overflow). The 10 most viewed keys of `CounterMap`'s snapshot are
//! printed at the end, checked against the reference's 10.

use crossbeam_utils::CachePadded;
use shardcount::{CounterHandle, CounterMap};
use shardcount_harness::measure::{self, run_threads};
use shardcount_harness::peers::dashmap::DashMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::zipf::{Workload, DRAWS};
use super::{
    fmt_duration, oversubscribed, ratio_cell, reliable, threads_cell, warnings, write_or_die, Args,
    Host, BATCH, MIN_RELIABLE,
};

/// Measured time per case when `--duration` is not given.
const DEFAULT_DURATION: Duration = Duration::from_millis(500);

/// The same pages and draws on every run, so that runs compare.
const SEED: u64 = 12;

/// How many of the most viewed keys are printed.
const TOP: usize = 10;

// A worker stops only between batches, so its count of draws replayed is
// whole batches and `Workload::reference` sees whole laps plus a prefix.
const _: () = assert!(DRAWS.is_multiple_of(BATCH as usize));

/// One way of counting views by key.
struct Subject {
    name: &'static str,
    run: fn(&Workload, usize, Duration) -> Run,
}

/// The baseline first: each round measures it before the others.
const SUBJECTS: [Subject; 4] = [
    Subject {
        name: "Mutex<HashMap>",
        run: mutex_hash_map,
    },
    Subject {
        name: "DashMap",
        run: dash_map,
    },
    Subject {
        name: "CounterMap inc",
        run: counter_map_inc,
    },
    Subject {
        name: "CounterMap handle",
        run: counter_map_handles,
    },
];

/// The subject the top keys are taken from.
const TOP_FROM: &str = "CounterMap inc";

/// What one run did and what its map held afterwards.
struct Run {
    /// Draws replayed, per worker.
    done: Vec<u64>,
    elapsed: Duration,
    /// Per key id.
    counts: Vec<u64>,
    /// Views under a key outside the set, or in the map's overflow.
    stray: u64,
    /// `CounterMap`'s snapshot, for the top keys; empty for the others.
    snapshot: Vec<(String, u64)>,
}

impl Run {
    fn new(
        w: &Workload,
        (done, elapsed): (Vec<u64>, Duration),
        pairs: impl IntoIterator<Item = (String, u64)>,
        overflow: u64,
    ) -> Run {
        let mut counts = vec![0u64; w.keys.len()];
        let mut stray = overflow;
        for (key, n) in pairs {
            match w.id(&key) {
                Some(id) => counts[id] += n,
                None => stray += n,
            }
        }
        Run {
            done,
            elapsed,
            counts,
            stray,
            snapshot: Vec::new(),
        }
    }
}

fn mutex_hash_map(w: &Workload, workers: usize, duration: Duration) -> Run {
    let m: Mutex<HashMap<String, u64>> = Mutex::new(HashMap::new());
    let timed = drive(w, workers, duration, |id| {
        let key = &w.keys[id];
        let mut map = m.lock().unwrap();
        // Not `entry`: it takes an owned key, a clone per view.
        match map.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                map.insert(key.clone(), 1);
            }
        }
    });
    Run::new(w, timed, m.into_inner().unwrap(), 0)
}

fn dash_map(w: &Workload, workers: usize, duration: Duration) -> Run {
    let m: DashMap<String, AtomicU64> = DashMap::new();
    let timed = drive(w, workers, duration, |id| {
        let key = &w.keys[id];
        // Relaxed, here and below: a count; totals are read after the join.
        // `get` first: it takes the shard's read lock and clones nothing.
        if let Some(n) = m.get(key) {
            n.fetch_add(1, Ordering::Relaxed);
            return;
        }
        m.entry(key.clone())
            .or_insert_with(|| AtomicU64::new(0))
            .fetch_add(1, Ordering::Relaxed);
    });
    let pairs = m.into_iter().map(|(k, n)| (k, n.into_inner()));
    Run::new(w, timed, pairs, 0)
}

fn counter_map_inc(w: &Workload, workers: usize, duration: Duration) -> Run {
    // Room for every key, so the overflow must stay empty.
    let m = CounterMap::with_max_keys(w.keys.len());
    let timed = drive(w, workers, duration, |id| m.inc(&w.keys[id]));
    let snapshot = m.snapshot();
    let mut run = Run::new(w, timed, snapshot.clone(), m.overflow());
    run.snapshot = snapshot;
    run
}

fn counter_map_handles(w: &Workload, workers: usize, duration: Duration) -> Run {
    let m = CounterMap::with_max_keys(w.keys.len());
    // Made before the clock starts, in id order, as for a known key set.
    let handles: Vec<CounterHandle<'_>> = w.keys.iter().map(|k| m.handle(k)).collect();
    let timed = drive(w, workers, duration, |id| handles[id].inc());
    let snapshot = m.snapshot();
    let mut run = Run::new(w, timed, snapshot.clone(), m.overflow());
    run.snapshot = snapshot;
    run
}

/// Runs `count(id)` over each worker's draws, replayed until `duration`
/// is up; returns how many each replayed, and the time taken.
fn drive(
    w: &Workload,
    workers: usize,
    duration: Duration,
    count: impl Fn(usize) + Sync,
) -> (Vec<u64>, Duration) {
    assert!(workers <= w.draws.len(), "draws for {workers} workers");
    let stop = CachePadded::new(AtomicBool::new(false));
    let done: Vec<AtomicU64> = (0..workers).map(|_| AtomicU64::new(0)).collect();
    // Workers, then a timer. Relaxed: the scope's join orders these stores
    // before the loads below.
    let elapsed = run_threads(workers + 1, |i| {
        if i < workers {
            done[i].store(replay(&w.draws[i], &stop, &count), Ordering::Relaxed);
        } else {
            std::thread::sleep(duration);
            // Relaxed: the flag carries no data; counts travel through the join.
            stop.store(true, Ordering::Relaxed);
        }
    });
    // Relaxed: after the join, as above.
    let done = done.iter().map(|n| n.load(Ordering::Relaxed)).collect();
    (done, elapsed)
}

/// Counts `draws` in order, round and round, until `stop`; at least one
/// batch, so that a worker scheduled late still checks real counts.
fn replay(draws: &[u32], stop: &AtomicBool, count: &impl Fn(usize)) -> u64 {
    let mut done = 0u64;
    loop {
        for batch in draws.chunks_exact(BATCH as usize) {
            for &id in batch {
                count(id as usize);
                measure::opaque();
            }
            done += BATCH;
            // Relaxed: as in `drive`.
            if stop.load(Ordering::Relaxed) {
                return done;
            }
        }
    }
}

/// The `n` most viewed keys, most first, ties by key: the same order for
/// any two sources that agree on every count.
fn top(pairs: impl IntoIterator<Item = (String, u64)>, n: usize) -> Vec<(String, u64)> {
    let mut all: Vec<(String, u64)> = pairs.into_iter().collect();
    all.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    all.truncate(n);
    all
}

/// One kind at one worker count in one round, checked.
#[derive(Debug, Clone)]
struct Case {
    name: &'static str,
    workers: usize,
    round: usize,
    views: u64,
    elapsed: Duration,
    /// Keys whose count is not the reference's, and the first of them as
    /// (key, counted, reference).
    wrong_keys: usize,
    first_wrong: Option<(String, u64, u64)>,
    stray: u64,
    /// From `CounterMap`'s snapshot: (key, counted, reference).
    top: Vec<(String, u64, u64)>,
    /// `top` lists the reference's most viewed keys, in its order.
    top_ok: bool,
}

impl Case {
    fn ok(&self) -> bool {
        self.wrong_keys == 0 && self.stray == 0 && self.top_ok
    }
    fn mviews(&self) -> f64 {
        self.views as f64 / self.elapsed.as_secs_f64() / 1e6
    }
}

fn case(s: &Subject, w: &Workload, workers: usize, round: usize, duration: Duration) -> Case {
    let run = (s.run)(w, workers, duration);
    let reference = w.reference(&run.done);
    let wrong: Vec<usize> = (0..reference.len())
        .filter(|&id| run.counts[id] != reference[id])
        .collect();
    let named = |id: usize| (w.keys[id].clone(), reference[id]);
    let expected = top((0..reference.len()).map(named), TOP);
    let top: Vec<(String, u64, u64)> = top(run.snapshot, TOP)
        .into_iter()
        .map(|(k, n)| {
            let r = w.id(&k).map_or(0, |id| reference[id]);
            (k, n, r)
        })
        .collect();
    let top_ok = top.is_empty()
        || top.len() == expected.len()
            && top
                .iter()
                .zip(&expected)
                .all(|(t, e)| t.0 == e.0 && t.1 == e.1);
    Case {
        name: s.name,
        workers,
        round,
        views: run.done.iter().sum(),
        elapsed: run.elapsed,
        wrong_keys: wrong.len(),
        first_wrong: wrong
            .first()
            .map(|&id| (w.keys[id].clone(), run.counts[id], reference[id])),
        stray: run.stray,
        top,
        top_ok,
    }
}

/// Every round of one kind at one worker count, summarised.
#[derive(Debug)]
struct Row {
    name: &'static str,
    workers: usize,
    /// Medians over the rounds.
    mviews: f64,
    /// Median over the rounds of the ratio to the baseline in the same round.
    ratio: Option<f64>,
    /// Every case behind `ratio` measured at least [`MIN_RELIABLE`].
    reliable: bool,
    views: u64,
    ok: bool,
}

/// Groups cases by (kind, workers), in the order first run.
fn summarize(all: &[Case]) -> Vec<Row> {
    let baseline = SUBJECTS[0].name;
    let mut rows: Vec<Row> = Vec::new();
    for c in all {
        if rows
            .iter()
            .any(|r| r.name == c.name && r.workers == c.workers)
        {
            continue;
        }
        let mine: Vec<&Case> = all
            .iter()
            .filter(|o| o.name == c.name && o.workers == c.workers)
            .collect();
        let base = |round: usize| {
            all.iter()
                .find(|b| b.name == baseline && b.workers == c.workers && b.round == round)
        };
        let mut ratios: Vec<f64> = mine
            .iter()
            .filter_map(|o| Some(o.mviews() / base(o.round)?.mviews()))
            .collect();
        let shortest = |cases: &mut dyn Iterator<Item = &Case>| {
            cases.map(|o| o.elapsed).min().unwrap_or(Duration::ZERO)
        };
        let base_shortest = shortest(&mut mine.iter().filter_map(|o| base(o.round)));
        rows.push(Row {
            name: c.name,
            workers: c.workers,
            mviews: measure::median(&mut mine.iter().map(|o| o.mviews()).collect::<Vec<_>>()),
            ratio: (!ratios.is_empty()).then(|| measure::median(&mut ratios)),
            reliable: reliable(shortest(&mut mine.iter().copied()), base_shortest),
            views: mine.iter().map(|o| o.views).sum(),
            ok: mine.iter().all(|o| o.ok()),
        });
    }
    rows
}

/// Runs the keyed demo; returns whether every check passed.
pub fn main(args: &Args, thread_counts: &[usize], host: &Host) -> bool {
    let duration = args.duration.unwrap_or(DEFAULT_DURATION);
    let rounds = args.rounds(1);
    let keys = args.keys as usize;
    let most = thread_counts.iter().copied().max().unwrap_or(1);
    let w = Workload::new(keys, args.zipf_s, most, SEED);
    println!(
        "keyed: page views of {keys} URLs, Zipf s = {:?}, workers {thread_counts:?}, {} per case, \
         {rounds} round(s), {} core(s) ({})",
        args.zipf_s,
        fmt_duration(duration),
        host.cores,
        host.cpu
    );
    let total = thread_counts.len() * SUBJECTS.len() * rounds;
    let mut cases: Vec<Case> = Vec::with_capacity(total);
    for round in 0..rounds {
        for &workers in thread_counts {
            for s in &SUBJECTS {
                let c = case(s, &w, workers, round, duration);
                // Always plain lines: there is no bar in this mode.
                eprintln!(
                    "[{}/{total}] round {:<3} {:>17} x {:<3} {:>8.1} M views/s  {}",
                    cases.len() + 1,
                    round + 1,
                    c.name,
                    c.workers,
                    c.mviews(),
                    if c.ok() { "OK" } else { "FAIL" }
                );
                cases.push(c);
            }
        }
    }

    let rows = summarize(&cases);
    print!("{}", table(&rows, host.cores));
    // The last case of the subject: the most workers, the last round.
    let shown = cases.iter().rev().find(|c| c.name == TOP_FROM);
    if let Some(c) = shown {
        print!("{}", top_table(c));
    }
    let mut over: Vec<usize> = rows
        .iter()
        .map(|r| r.workers)
        .filter(|&n| oversubscribed(n, host.cores))
        .collect();
    over.dedup();
    let short = cases.iter().filter(|c| c.elapsed < MIN_RELIABLE).count();
    for line in warnings(&over, host.cores, short, "worker counts") {
        eprintln!("{line}");
    }
    if let Some(path) = &args.json {
        write_or_die(path, &json(&rows, &cases, shown, host, duration, args));
    }
    for c in cases.iter().filter(|c| !c.ok()) {
        eprintln!(
            "FAIL: {} x {} workers, round {}: {} key(s) miscounted (first: {:?} as (key, \
             counted, reference)), {} view(s) outside the key set, top {TOP} {}",
            c.name,
            c.workers,
            c.round + 1,
            c.wrong_keys,
            c.first_wrong,
            c.stray,
            if c.top_ok { "right" } else { "wrong" }
        );
    }
    rows.iter().all(|r| r.ok)
}

fn table(rows: &[Row], cores: usize) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{:<17} {:>7} {:>11} {:>10} {:>12}  check",
        "keyed", "workers", "M views/s", "vs Mutex", "views"
    );
    let (mut any_over, mut any_short) = (false, false);
    for r in rows {
        let over = oversubscribed(r.workers, cores);
        any_over |= over;
        any_short |= r.ratio.is_some() && !r.reliable;
        let _ = writeln!(
            s,
            "{:<17} {:>7} {:>11.1} {:>10} {:>12}  {}",
            r.name,
            threads_cell(r.workers, over),
            r.mviews,
            ratio_cell(r.ratio, r.reliable),
            r.views,
            if r.ok { "OK" } else { "FAIL" }
        );
    }
    let _ = writeln!(
        s,
        "check: every key's count equals the views its workers replayed"
    );
    if any_over {
        let _ = writeln!(
            s,
            "* more workers than the {cores} core(s): they take turns"
        );
    }
    if any_short {
        let _ = writeln!(
            s,
            "? from a case measured under {} ms: too short for a meaningful ratio",
            MIN_RELIABLE.as_millis()
        );
    }
    s
}

/// The top keys of `c`, one line each, then whether they are the
/// reference's. No line ends in OK or FAIL, which mark table rows.
fn top_table(c: &Case) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\ntop {TOP} keys ({}, {} worker(s), round {}):",
        c.name,
        c.workers,
        c.round + 1
    );
    for (i, (key, n, reference)) in c.top.iter().enumerate() {
        let share = 100.0 * *n as f64 / c.views.max(1) as f64;
        let check = if n == reference {
            "exact".to_string()
        } else {
            format!("MISMATCH: reference {reference}")
        };
        let _ = writeln!(
            s,
            "{:>4}. {:<16} {:>12} {:>6.2}%  {check}",
            i + 1,
            key,
            n,
            share
        );
    }
    let _ = writeln!(
        s,
        "{}",
        if c.top_ok {
            "the reference's top keys, in the same order"
        } else {
            "MISMATCH: not the reference's top keys"
        }
    );
    s
}

fn json(
    rows: &[Row],
    cases: &[Case],
    shown: Option<&Case>,
    host: &Host,
    duration: Duration,
    args: &Args,
) -> String {
    let results: Vec<_> = rows
        .iter()
        .map(|r| {
            let runs: Vec<_> = cases
                .iter()
                .filter(|c| c.name == r.name && c.workers == r.workers)
                .map(|c| {
                    serde_json::json!({
                        "round": c.round + 1,
                        "views": c.views,
                        "elapsed_s": c.elapsed.as_secs_f64(),
                        "mviews_per_s": c.mviews(),
                        "wrong_keys": c.wrong_keys,
                        "stray_views": c.stray,
                        "ok": c.ok(),
                    })
                })
                .collect();
            serde_json::json!({
                "subject": r.name,
                "workers": r.workers,
                "mviews_per_s": r.mviews,
                "ratio_vs_mutex": r.ratio,
                "ratio_reliable": r.reliable,
                "oversubscribed": oversubscribed(r.workers, host.cores),
                "views": r.views,
                "ok": r.ok,
                "runs": runs,
            })
        })
        .collect();
    let mut doc = host.json(duration, args.rounds(1));
    doc.insert("mode".into(), "keyed".into());
    doc.insert("keys".into(), args.keys.into());
    doc.insert("zipf_s".into(), args.zipf_s.into());
    doc.insert("draws_per_worker".into(), DRAWS.into());
    doc.insert(
        "figures".into(),
        "medians over rounds; ratio_vs_mutex is the median of per-round ratios to \
         Mutex<HashMap>; ok: every key's count equals the views replayed"
            .into(),
    );
    doc.insert("results".into(), results.into());
    if let Some(c) = shown {
        let keys: Vec<_> = c
            .top
            .iter()
            .map(|(k, n, r)| serde_json::json!({ "key": k, "count": n, "reference": r }))
            .collect();
        doc.insert(
            "top_keys".into(),
            serde_json::json!({
                "subject": c.name,
                "workers": c.workers,
                "round": c.round + 1,
                "ok": c.top_ok,
                "keys": keys,
            }),
        );
    }
    serde_json::to_string_pretty(&doc).expect("plain values serialise") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tiny_case_counts_every_key_exactly_for_every_subject() {
        let w = Workload::new(500, 1.0, 2, SEED);
        for s in &SUBJECTS {
            let c = case(s, &w, 2, 0, Duration::from_millis(5));
            assert!(c.views >= 2 * BATCH, "{}: {c:?}", s.name);
            assert!(c.ok(), "{}: {c:?}", s.name);
            if s.name.starts_with("CounterMap") {
                assert_eq!(c.top.len(), TOP, "{}", s.name);
                assert!(c.top.windows(2).all(|p| p[0].1 >= p[1].1), "{c:?}");
            } else {
                assert!(c.top.is_empty(), "{}", s.name);
            }
        }
    }

    /// Counts like `CounterMap inc`, but loses the first view of each run.
    fn lossy(w: &Workload, workers: usize, duration: Duration) -> Run {
        let mut run = counter_map_inc(w, workers, duration);
        let id = w.draws[0][0] as usize;
        run.counts[id] -= 1;
        run
    }

    /// Counts like `Mutex<HashMap>`, plus one view of a page outside the set.
    fn inventive(w: &Workload, workers: usize, duration: Duration) -> Run {
        let run = mutex_hash_map(w, workers, duration);
        let pairs: Vec<(String, u64)> = (0..w.keys.len())
            .map(|id| (w.keys[id].clone(), run.counts[id]))
            .chain([("/elsewhere".to_string(), 1)])
            .collect();
        Run::new(w, (run.done, run.elapsed), pairs, 0)
    }

    #[test]
    fn a_lost_or_invented_view_fails_the_case() {
        let w = Workload::new(50, 1.0, 1, SEED);
        let d = Duration::from_millis(2);
        let c = case(
            &Subject {
                name: "lossy",
                run: lossy,
            },
            &w,
            1,
            0,
            d,
        );
        assert!(!c.ok());
        assert_eq!(c.wrong_keys, 1, "{c:?}");
        let (key, counted, reference) = c.first_wrong.clone().unwrap();
        assert_eq!(key, w.keys[w.draws[0][0] as usize]);
        assert_eq!(counted + 1, reference);

        let c = case(
            &Subject {
                name: "inventive",
                run: inventive,
            },
            &w,
            1,
            0,
            d,
        );
        assert!(!c.ok());
        assert_eq!((c.wrong_keys, c.stray), (0, 1), "{c:?}");
    }

    #[test]
    fn top_keys_are_most_viewed_first_ties_by_key() {
        let pairs = [("/b", 5), ("/a", 5), ("/c", 9), ("/d", 1)].map(|(k, n)| (k.to_string(), n));
        let t = top(pairs, 3);
        let keys: Vec<&str> = t.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["/c", "/a", "/b"]);
    }

    #[test]
    fn the_top_table_has_one_line_per_key_and_no_row_verdicts() {
        let w = Workload::new(100, 1.0, 1, SEED);
        let c = case(&SUBJECTS[2], &w, 1, 0, Duration::from_millis(2));
        let t = top_table(&c);
        assert_eq!(
            t.lines().filter(|l| l.contains("/page/")).count(),
            TOP,
            "{t}"
        );
        assert!(t
            .lines()
            .all(|l| !l.ends_with(" OK") && !l.ends_with(" FAIL")));
        assert!(!t.contains("MISMATCH"), "{t}");
        let mut bad = c.clone();
        bad.top[3].1 += 1;
        bad.top_ok = false;
        let t = top_table(&bad);
        assert_eq!(t.matches("MISMATCH").count(), 2, "{t}");
    }

    #[test]
    fn ratios_pair_within_rounds() {
        let done = |name: &'static str, round: usize, views: u64| Case {
            name,
            workers: 2,
            round,
            views,
            elapsed: Duration::from_millis(200),
            wrong_keys: 0,
            first_wrong: None,
            stray: 0,
            top: Vec::new(),
            top_ok: true,
        };
        let rows = summarize(&[
            done("Mutex<HashMap>", 0, 100),
            done("CounterMap handle", 0, 400),
            // A slow round slows both: the ratio stays 4.
            done("Mutex<HashMap>", 1, 10),
            done("CounterMap handle", 1, 40),
            done("Mutex<HashMap>", 2, 100),
            done("CounterMap handle", 2, 400),
        ]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].ratio, Some(4.0));
        assert!(rows[1].reliable);
        assert_eq!(rows[1].views, 840);
        assert!(table(&rows, 2).contains("4.00x"));
        assert_eq!(
            table(&rows, 2)
                .lines()
                .filter(|l| l.ends_with(" OK"))
                .count(),
            2
        );
    }
}
