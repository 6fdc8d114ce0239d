//! `--inventory`: W workers sell random amounts of 1-3 units from one stock
//! until it is gone, while an optional restocker adds more; `Stock` against a
//! single `AtomicU64` whose compare-exchange loop refuses to go below zero.
//!
//! Each worker counts its successes, failures and units locally. Afterwards
//! the units sold must equal the initial stock plus every restock, and the
//! stock must read 0: nothing oversold, nothing lost. A failed take is not
//! an error (there may be 1 unit left when 3 are asked for); a worker stops
//! once a 1-unit take fails after the restocker has finished, which by
//! `Stock`'s no-spurious-failure guarantee means the stock was empty.
//!
//! One sell-out takes a few milliseconds, far too short to compare two
//! kinds (one such ratio ranged 0.07x-1.45x over six runs), so a case sells
//! the stock out again and again until `--duration` has been measured, and
//! `--repeat` runs every case that many times, interleaved, for medians.

use rand::{Rng, SeedableRng};
use shardcount::Stock;
use shardcount_harness::inventory::{CasStock, Inventory};
use shardcount_harness::measure::run_threads;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::{
    fmt_duration, oversubscribed, ratio_cell, reliable, threads_cell, warnings, write_or_die, Args,
    Host, MIN_RELIABLE,
};

/// Measured time per case when `--duration` is not given.
const DEFAULT_DURATION: Duration = Duration::from_millis(500);

/// What one worker did.
#[derive(Debug, Default, Clone, Copy)]
struct Sales {
    successes: u64,
    failures: u64,
    units: u64,
}

/// One inventory run.
struct Run {
    workers: Vec<Sales>,
    restocked: u64,
    remaining: u64,
    elapsed: Duration,
}

impl Run {
    fn sold(&self) -> u64 {
        self.workers.iter().map(|w| w.units).sum()
    }
    fn ok(&self, initial: u64) -> bool {
        self.sold() == initial + self.restocked && self.remaining == 0
    }
}

fn run<I: Inventory>(workers: usize, initial: u64, restock: u64) -> Run {
    let stock = I::with_stock(initial);
    let restocking = AtomicBool::new(restock > 0);
    let sales: std::sync::Mutex<Vec<(usize, Sales)>> = std::sync::Mutex::new(Vec::new());
    let restocked = AtomicU64::new(0);
    let elapsed = run_threads(workers + usize::from(restock > 0), |i| {
        if i == workers {
            // The restocker: chunks of 10 while the workers sell.
            let mut left = restock;
            while left > 0 {
                let n = left.min(10);
                stock.put(n);
                left -= n;
            }
            restocked.store(restock, Ordering::Relaxed);
            // Release: a worker that sees the flag down sees every restock.
            restocking.store(false, Ordering::Release);
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(i as u64);
        let mut mine = Sales::default();
        loop {
            let n = rng.gen_range(1..=3);
            if stock.take(n) {
                mine.successes += 1;
                mine.units += n;
                continue;
            }
            mine.failures += 1;
            // Acquire: pairs with the restocker's Release.
            if restocking.load(Ordering::Acquire) {
                continue;
            }
            // No more restocks: sell what is left one unit at a time; a
            // failed 1-unit take means the stock was empty, and stays so.
            while stock.take(1) {
                mine.successes += 1;
                mine.units += 1;
            }
            mine.failures += 1;
            break;
        }
        sales.lock().unwrap().push((i, mine));
    });
    let mut workers_sales = sales.into_inner().unwrap();
    workers_sales.sort_by_key(|&(i, _)| i);
    Run {
        workers: workers_sales.into_iter().map(|(_, s)| s).collect(),
        restocked: restocked.load(Ordering::Relaxed),
        remaining: stock.remaining(),
        elapsed,
    }
}

/// One case: one kind at one worker count in one round, sold out again and
/// again until its duration was measured.
#[derive(Debug, Clone)]
struct Case {
    name: &'static str,
    workers: usize,
    round: usize,
    /// Per worker, summed over the sell-outs.
    sales: Vec<Sales>,
    sellouts: u64,
    restocked: u64,
    /// Every sell-out sold exactly what it had and left nothing.
    ok: bool,
    /// Summed over the sell-outs.
    elapsed: Duration,
}

impl Case {
    fn mtakes(&self) -> f64 {
        let takes: u64 = self.sales.iter().map(|w| w.successes + w.failures).sum();
        takes as f64 / self.elapsed.as_secs_f64() / 1e6
    }
}

fn case<I: Inventory>(
    workers: usize,
    round: usize,
    initial: u64,
    restock: u64,
    duration: Duration,
) -> Case {
    let mut c = Case {
        name: I::NAME,
        workers,
        round,
        sales: vec![Sales::default(); workers],
        sellouts: 0,
        restocked: 0,
        ok: true,
        elapsed: Duration::ZERO,
    };
    while c.sellouts == 0 || c.elapsed < duration {
        let r = run::<I>(workers, initial, restock);
        c.ok &= r.ok(initial) && r.workers.len() == workers;
        for (sum, w) in c.sales.iter_mut().zip(&r.workers) {
            sum.successes += w.successes;
            sum.failures += w.failures;
            sum.units += w.units;
        }
        c.sellouts += 1;
        c.restocked += r.restocked;
        c.elapsed += r.elapsed;
    }
    c
}

/// Every round of one kind at one worker count, summarised.
#[derive(Debug)]
struct Row {
    name: &'static str,
    workers: usize,
    /// Median over the rounds.
    mtakes: f64,
    /// Median over the rounds of the ratio to the CAS loop in the same round.
    ratio: Option<f64>,
    /// Every case behind `ratio` measured at least [`MIN_RELIABLE`].
    reliable: bool,
    sellouts: u64,
    restocked: u64,
    ok: bool,
    /// Per worker, summed over every round.
    sales: Vec<Sales>,
}

/// Groups cases by (kind, workers), in the order first run.
fn summarize(all: &[Case]) -> Vec<Row> {
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
            all.iter().find(|b| {
                b.name == <CasStock as Inventory>::NAME
                    && b.workers == c.workers
                    && b.round == round
            })
        };
        let mut ratios: Vec<f64> = mine
            .iter()
            .filter_map(|o| Some(o.mtakes() / base(o.round)?.mtakes()))
            .collect();
        let shortest = |cases: &mut dyn Iterator<Item = &Case>| {
            cases.map(|o| o.elapsed).min().unwrap_or(Duration::ZERO)
        };
        let base_shortest = shortest(&mut mine.iter().filter_map(|o| base(o.round)));
        let mut sales = vec![Sales::default(); c.workers];
        for o in &mine {
            for (sum, w) in sales.iter_mut().zip(&o.sales) {
                sum.successes += w.successes;
                sum.failures += w.failures;
                sum.units += w.units;
            }
        }
        rows.push(Row {
            name: c.name,
            workers: c.workers,
            mtakes: median(&mut mine.iter().map(|o| o.mtakes()).collect::<Vec<_>>()),
            ratio: (!ratios.is_empty()).then(|| median(&mut ratios)),
            reliable: reliable(shortest(&mut mine.iter().copied()), base_shortest),
            sellouts: mine.iter().map(|o| o.sellouts).sum(),
            restocked: mine.iter().map(|o| o.restocked).sum(),
            ok: mine.iter().all(|o| o.ok),
            sales,
        });
    }
    rows
}

/// Runs the inventory demo; returns whether every check passed.
pub fn main(args: &Args, thread_counts: &[usize], host: &Host) -> bool {
    let (initial, restock) = (args.stock, args.restock);
    let duration = args.duration.unwrap_or(DEFAULT_DURATION);
    let rounds = args.rounds(1);
    println!(
        "inventory: {initial} units, {restock} restocked while selling, workers {thread_counts:?}, \
         random takes of 1-3; each case sells out until {} measured, {rounds} round(s), {} core(s) ({})",
        fmt_duration(duration),
        host.cores,
        host.cpu
    );
    let total = thread_counts.len() * 2 * rounds;
    let mut cases: Vec<Case> = Vec::with_capacity(total);
    for round in 0..rounds {
        for &workers in thread_counts {
            for c in [
                case::<CasStock>(workers, round, initial, restock, duration),
                case::<Stock>(workers, round, initial, restock, duration),
            ] {
                // Always plain lines: there is no bar in this mode.
                eprintln!(
                    "[{}/{total}] round {:<3} {:>14} x {:<3} {:>8.1} M takes/s  {:>4} sell-out(s)  {}",
                    cases.len() + 1,
                    round + 1,
                    c.name,
                    c.workers,
                    c.mtakes(),
                    c.sellouts,
                    if c.ok { "OK" } else { "FAIL" }
                );
                cases.push(c);
            }
        }
    }

    let rows = summarize(&cases);
    for r in &rows {
        println!(
            "\n{} with {} worker(s), {} sell-out(s):",
            r.name, r.workers, r.sellouts
        );
        println!(
            "{:>8} {:>12} {:>10} {:>12}",
            "worker", "successes", "failures", "units"
        );
        for (i, w) in r.sales.iter().enumerate() {
            println!(
                "{:>8} {:>12} {:>10} {:>12}",
                i, w.successes, w.failures, w.units
            );
        }
        let sold: u64 = r.sales.iter().map(|w| w.units).sum();
        println!(
            "sold {sold} = {} x initial {initial} + restocked {}; 0 left after each  {}",
            r.sellouts,
            r.restocked,
            if r.ok { "OK" } else { "FAIL" }
        );
    }
    print!("{}", table(&rows, host.cores));
    let mut over: Vec<usize> = rows
        .iter()
        .map(|r| r.workers)
        .filter(|&w| oversubscribed(w, host.cores))
        .collect();
    over.dedup();
    let short = cases.iter().filter(|c| c.elapsed < MIN_RELIABLE).count();
    for w in warnings(&over, host.cores, short, "worker counts") {
        eprintln!("{w}");
    }
    if let Some(path) = &args.json {
        write_or_die(path, &json(&rows, &cases, host, duration, rounds, args));
    }
    rows.iter().all(|r| r.ok)
}

fn median(xs: &mut [f64]) -> f64 {
    shardcount_harness::measure::median(xs)
}

fn table(rows: &[Row], cores: usize) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n{:<14} {:>7} {:>12} {:>13} {:>10}  check",
        "stock", "workers", "M takes/s", "vs CAS loop", "sell-outs"
    );
    let (mut any_over, mut any_short) = (false, false);
    for r in rows {
        let over = oversubscribed(r.workers, cores);
        any_over |= over;
        any_short |= r.ratio.is_some() && !r.reliable;
        let _ = writeln!(
            s,
            "{:<14} {:>7} {:>12.1} {:>13} {:>10}  {}",
            r.name,
            threads_cell(r.workers, over),
            r.mtakes,
            ratio_cell(r.ratio, r.reliable),
            r.sellouts,
            if r.ok { "OK" } else { "FAIL" }
        );
    }
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

fn json(
    rows: &[Row],
    cases: &[Case],
    host: &Host,
    duration: Duration,
    rounds: usize,
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
                        "sellouts": c.sellouts,
                        "restocked": c.restocked,
                        "elapsed_s": c.elapsed.as_secs_f64(),
                        "mtakes_per_s": c.mtakes(),
                        "ok": c.ok,
                    })
                })
                .collect();
            serde_json::json!({
                "stock": r.name,
                "workers": r.workers,
                "mtakes_per_s": r.mtakes,
                "ratio_vs_cas": r.ratio,
                "ratio_reliable": r.reliable,
                "oversubscribed": oversubscribed(r.workers, host.cores),
                "sellouts": r.sellouts,
                "ok": r.ok,
                "runs": runs,
            })
        })
        .collect();
    let mut doc = host.json(duration, rounds);
    doc.insert("mode".into(), "inventory".into());
    doc.insert("initial_stock".into(), args.stock.into());
    doc.insert("restock".into(), args.restock.into());
    doc.insert(
        "figures".into(),
        "medians over rounds; ratio_vs_cas is the median of per-round ratios; \
         a case sells out repeatedly until duration_s is measured"
            .into(),
    );
    doc.insert("results".into(), results.into());
    serde_json::to_string_pretty(&doc).expect("plain values serialise") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(name: &'static str, round: usize, takes: u64, ms: u64) -> Case {
        Case {
            name,
            workers: 2,
            round,
            sales: vec![
                Sales {
                    successes: takes,
                    failures: 0,
                    units: takes,
                };
                2
            ],
            sellouts: 1,
            restocked: 0,
            ok: true,
            elapsed: Duration::from_millis(ms),
        }
    }

    #[test]
    fn ratios_pair_within_rounds_and_short_cases_are_unreliable() {
        let rows = summarize(&[
            done("AtomicU64 CAS", 0, 100, 200),
            done("Stock", 0, 300, 200),
            // A slow round slows both kinds: the ratio stays 3.
            done("AtomicU64 CAS", 1, 10, 200),
            done("Stock", 1, 30, 200),
            done("AtomicU64 CAS", 2, 100, 200),
            done("Stock", 2, 300, 200),
        ]);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].name, "Stock");
        assert_eq!(rows[1].ratio, Some(3.0));
        assert!(rows[1].reliable);
        assert_eq!(rows[1].sellouts, 3);
        assert_eq!(rows[1].sales[0].units, 630);

        let rows = summarize(&[done("AtomicU64 CAS", 0, 10, 20), done("Stock", 0, 300, 200)]);
        assert!(
            !rows[1].reliable,
            "a 20 ms baseline makes the ratio unreliable"
        );
        assert!(table(&rows, 2).contains("3.00x?"));
        assert!(table(&rows, 1).contains(" 2*"));
    }

    #[test]
    fn a_case_sells_out_until_its_duration_and_accounts_for_every_unit() {
        for workers in [1, 2] {
            let c = case::<Stock>(workers, 0, 1000, 100, Duration::from_millis(30));
            assert!(c.ok, "{c:?}");
            // Sells out again until the measured time reaches the duration.
            assert!(c.elapsed >= Duration::from_millis(30), "{c:?}");
            assert!(c.sellouts >= 1, "{c:?}");
            let sold: u64 = c.sales.iter().map(|w| w.units).sum();
            assert_eq!(sold, c.sellouts * 1000 + c.restocked);
            assert_eq!(c.restocked, c.sellouts * 100);
        }
    }
}
