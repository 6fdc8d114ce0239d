//! Single-thread hot-path cost for callgrind, which counts instructions
//! repeatably on this shared host where timings are noisy.
//! `scripts/callgrind` runs every subject at N and 2N ops; the difference of
//! the totals over N is the per-op instruction count, start-up cancelled:
//!
//! ```text
//! cargo build --release --example hotpath
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/hotpath counter 1000000
//! ```

use shardcount::{Counter, RoughCounter, Stock};
use std::sync::atomic::{AtomicU64, Ordering};

/// A compiler barrier emitting no instruction. Each subject's address is
/// passed through `black_box` once first, so the barrier must assume it may
/// have changed and cannot let loads be hoisted out of the loop.
#[inline(always)]
fn opaque() {
    // SAFETY: an empty asm block touches no memory, stack or flags.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let subject = args.next().unwrap_or_else(|| "counter".into());
    let n: u64 = args
        .next()
        .map(|s| s.parse().expect("ops must be a number"))
        .unwrap_or(1_000_000);
    let total = match subject.as_str() {
        "atomic" => {
            let a = AtomicU64::new(0);
            let a = std::hint::black_box(&a);
            for _ in 0..n {
                a.fetch_add(1, Ordering::Relaxed);
                opaque();
            }
            a.load(Ordering::Relaxed)
        }
        "counter" => {
            let c = Counter::new();
            let c = std::hint::black_box(&c);
            for _ in 0..n {
                c.inc();
                opaque();
            }
            c.sum()
        }
        "atomic-load" => {
            let a = AtomicU64::new(1);
            let a = std::hint::black_box(&a);
            let mut acc = 0u64;
            for _ in 0..n {
                acc += a.load(Ordering::Relaxed);
                opaque();
            }
            acc
        }
        "counter-sum" => {
            let c = Counter::from(1);
            let c = std::hint::black_box(&c);
            let mut acc = 0u64;
            for _ in 0..n {
                acc += c.sum();
                opaque();
            }
            acc
        }
        "rough" => {
            let c = RoughCounter::new();
            let c = std::hint::black_box(&c);
            for _ in 0..n {
                c.inc();
                opaque();
            }
            c.sum()
        }
        "rough-approx" => {
            let c = RoughCounter::from(1);
            let c = std::hint::black_box(&c);
            let mut acc = 0u64;
            for _ in 0..n {
                acc += c.approx();
                opaque();
            }
            acc
        }
        "cas-take" => {
            // Stock's baseline: one word, a CAS loop that refuses to go below 0.
            let a = AtomicU64::new(n);
            let a = std::hint::black_box(&a);
            for _ in 0..n {
                let mut cur = a.load(Ordering::Relaxed);
                while cur >= 1 {
                    match a.compare_exchange_weak(
                        cur,
                        cur - 1,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => break,
                        Err(now) => cur = now,
                    }
                }
                opaque();
            }
            n - a.load(Ordering::Relaxed)
        }
        "stock-take" => {
            let s = Stock::new(n);
            let s = std::hint::black_box(&s);
            for _ in 0..n {
                s.try_sub(1).expect("stock covers every take");
                opaque();
            }
            n - s.sum()
        }
        other => panic!(
            "unknown subject {other:?}: atomic, counter, atomic-load, counter-sum, \
             rough, rough-approx, cas-take, stock-take"
        ),
    };
    assert_eq!(total, n, "lost ops");
}
