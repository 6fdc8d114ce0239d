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

use rand::{Rng, SeedableRng};
use shardcount::Stock;
use shardcount_harness::inventory::{CasStock, Inventory};
use shardcount_harness::measure::run_threads;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// What one worker did.
#[derive(Debug, Default, Clone, Copy)]
struct Sales {
    successes: u64,
    failures: u64,
    units: u64,
}

/// One inventory run.
struct Run {
    name: &'static str,
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
    fn mtakes(&self) -> f64 {
        let takes: u64 = self.workers.iter().map(|w| w.successes + w.failures).sum();
        takes as f64 / self.elapsed.as_secs_f64() / 1e6
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
        name: I::NAME,
        workers: workers_sales.into_iter().map(|(_, s)| s).collect(),
        restocked: restocked.load(Ordering::Relaxed),
        remaining: stock.remaining(),
        elapsed,
    }
}

/// Runs the inventory demo; returns whether every check passed.
pub fn main(thread_counts: &[usize], initial: u64, restock: u64) -> bool {
    println!(
        "inventory: {initial} units, {restock} restocked while selling, workers {thread_counts:?}, random takes of 1-3"
    );
    let mut all_ok = true;
    for &workers in thread_counts {
        let runs = [
            run::<CasStock>(workers, initial, restock),
            run::<Stock>(workers, initial, restock),
        ];
        for r in &runs {
            println!(
                "\n{} with {workers} worker(s): {:.1} M takes/s",
                r.name,
                r.mtakes()
            );
            println!(
                "{:>8} {:>12} {:>10} {:>12}",
                "worker", "successes", "failures", "units"
            );
            for (i, w) in r.workers.iter().enumerate() {
                println!(
                    "{:>8} {:>12} {:>10} {:>12}",
                    i, w.successes, w.failures, w.units
                );
            }
            let ok = r.ok(initial);
            all_ok &= ok;
            println!(
                "sold {} = initial {initial} + restocked {}; {} left  {}",
                r.sold(),
                r.restocked,
                r.remaining,
                if ok { "OK" } else { "FAIL" }
            );
        }
        println!(
            "Stock vs AtomicU64 CAS, {workers} worker(s): {:.2}x the takes/s",
            runs[1].mtakes() / runs[0].mtakes()
        );
    }
    all_ok
}
