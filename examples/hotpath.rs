//! Single-thread hot-path cost for callgrind, which counts instructions
//! repeatably on this shared host where timings are noisy:
//!
//! ```text
//! cargo build --release --example hotpath
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/hotpath counter 1000000
//! ```
//!
//! Run each subject at N and 2N ops; the difference of the totals over N is
//! the per-op instruction count with start-up cost cancelled out.

use shardcount::Counter;
use std::sync::atomic::{AtomicU64, Ordering};

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
            for _ in 0..n {
                a.fetch_add(1, Ordering::Relaxed);
                opaque();
            }
            a.load(Ordering::Relaxed)
        }
        "counter" => {
            let c = Counter::new();
            for _ in 0..n {
                c.inc();
                opaque();
            }
            c.sum()
        }
        "atomic-load" => {
            let a = AtomicU64::new(1);
            let mut acc = 0u64;
            for _ in 0..n {
                acc += a.load(Ordering::Relaxed);
                opaque();
            }
            acc
        }
        "counter-sum" => {
            let c = Counter::from(1);
            let mut acc = 0u64;
            for _ in 0..n {
                acc += c.sum();
                opaque();
            }
            acc
        }
        other => panic!("unknown subject {other:?}: atomic, counter, atomic-load, counter-sum"),
    };
    assert_eq!(total, n, "lost ops");
}
