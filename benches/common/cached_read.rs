//! A `FleetReader` read served from its cache against one
//! `Instant::now()`, the Redis benches' shared measure: the median read
//! and clock times (ns) and the median of the per-repetition ratios, the
//! two sides alternating which goes first.

use shardcount::fleet::FleetKeys;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `(read ns, clock ns, ratio)` over `reps` repetitions of 5,000,000 each.
pub fn cached_read_vs_clock(key: &FleetKeys, reps: usize) -> (f64, f64, f64) {
    let n = 5_000_000u32;
    let (mut read, mut clock, mut ratio) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..reps {
        let time_read = || {
            let t = Instant::now();
            let mut acc = 0i64;
            for _ in 0..n {
                acc = acc.wrapping_add(std::hint::black_box(key).total().unwrap().value);
            }
            std::hint::black_box(acc);
            t.elapsed().as_nanos() as f64 / f64::from(n)
        };
        let time_clock = || {
            let t = Instant::now();
            for _ in 0..n {
                std::hint::black_box(Instant::now());
            }
            t.elapsed().as_nanos() as f64 / f64::from(n)
        };
        let (a, b) = if r % 2 == 0 {
            let a = time_read();
            (a, time_clock())
        } else {
            let b = time_clock();
            (time_read(), b)
        };
        read.push(a);
        clock.push(b);
        ratio.push(a / b);
    }
    (median(read), median(clock), median(ratio))
}
