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
//!
//! Every counting subject of `shardcount_harness::subjects` is an add
//! subject here, by its key (`atomic`, `counter`, `rough`, `stripe`,
//! `tl-limit`, `tl-atomic`, `fast-counter`, `contatori`, `mutex`); the
//! reads, takes and family adds below are listed by hand.

use shardcount::{
    Counter, CounterMap, CounterSet, Histogram, Label, LabelledCounter, LabelledHistogram,
    MaxCounter, RoughCounter, Stock,
};
use shardcount_harness::labels::{Request, Route};
use shardcount_harness::measure::{escape, opaque};
use shardcount_harness::subjects::{self, Subject, Visit};
use std::sync::atomic::{AtomicU64, Ordering};

/// Runs `n` adds on the subject whose key is `key`, if there is one, and
/// keeps its total.
struct Adds<'a> {
    key: &'a str,
    n: u64,
    total: Option<u64>,
    keys: Vec<&'static str>,
}

impl Visit for Adds<'_> {
    fn visit<S: Subject>(&mut self) {
        self.keys.push(S::KEY);
        if S::KEY != self.key {
            return;
        }
        // Each subject's address escapes once first, so the `opaque`
        // barrier must assume it may have changed and cannot let loads be
        // hoisted out of the loop.
        let c = S::new();
        let c = escape(&c);
        for _ in 0..self.n {
            c.add_one();
            opaque();
        }
        self.total = Some(c.total());
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let subject = args.next().unwrap_or_else(|| "counter".into());
    let n: u64 = args
        .next()
        .map(|s| s.parse().expect("ops must be a number"))
        .unwrap_or(1_000_000);
    let mut adds = Adds {
        key: &subject,
        n,
        total: None,
        keys: Vec::new(),
    };
    subjects::for_each(&mut adds);
    let total = match adds.total {
        Some(total) => total,
        None => reads_and_takes(&subject, n, &adds.keys),
    };
    assert_eq!(total, n, "lost ops");
}

/// The subjects that are not adds: `n` reads of a counter at 1 (their sum)
/// or `n` single-unit takes from a stock of `n` (the units taken).
fn reads_and_takes(subject: &str, n: u64, add_keys: &[&str]) -> u64 {
    match subject {
        "atomic-load" => {
            let a = AtomicU64::new(1);
            let a = escape(&a);
            let mut acc = 0u64;
            for _ in 0..n {
                acc += a.load(Ordering::Relaxed);
                opaque();
            }
            acc
        }
        "counter-sum" => {
            let c = Counter::from(1);
            let c = escape(&c);
            let mut acc = 0u64;
            for _ in 0..n {
                acc += c.sum();
                opaque();
            }
            acc
        }
        "ft-sum" => {
            // The peer's exact read, for `counter-sum-split`: fast-telemetry's
            // counter with 2 shards (one per core here), 1 added.
            let c = shardcount_harness::peers::fast_telemetry::Counter::new(2);
            c.inc();
            let c = escape(&c);
            let mut acc = 0u64;
            for _ in 0..n {
                acc += c.sum() as u64;
                opaque();
            }
            acc
        }
        "counter-sum-split" => {
            // The sharded read: a counter split to 2 rows (owned and
            // shared rows of its tables visited), holding 1 on this
            // thread's owned row.
            let c = Counter::new();
            assert_eq!(c.split(2), 2);
            c.inc();
            let c = escape(&c);
            let mut acc = 0u64;
            for _ in 0..n {
                acc += c.sum();
                opaque();
            }
            acc
        }
        "counter-sum-pinned" => {
            // `counter-sum-split` read by a thread that never added (an
            // exporter's): on Linux its first read pins and registers it
            // as a reader, the rest read in a reader's window (two plain
            // stores more than a holder's read); elsewhere every read pins.
            let c = Counter::new();
            assert_eq!(c.split(2), 2);
            c.inc();
            let c = escape(&c);
            std::thread::scope(|s| {
                s.spawn(|| {
                    let mut acc = 0u64;
                    for _ in 0..n {
                        acc += c.sum();
                        opaque();
                    }
                    acc
                })
                .join()
                .unwrap()
            })
        }
        "rough-approx" => {
            let c = RoughCounter::from(1);
            let c = escape(&c);
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
            let a = escape(&a);
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
            let s = escape(&s);
            for _ in 0..n {
                s.try_sub(1).expect("stock covers every take");
                opaque();
            }
            n - s.sum()
        }
        "counter-owned" => {
            // Split first: the thread owns a shard and adds with a load
            // and a store (the owned-row path of a contended counter).
            let c = Counter::new();
            assert_eq!(c.split(2), 2);
            let c = escape(&c);
            for _ in 0..n {
                c.inc();
                opaque();
            }
            c.sum()
        }
        "counter-owned-2" => {
            // Two split counters in turn: no two adds in a row go to one
            // table, so the row is found by owner id every time.
            let cs = [Counter::new(), Counter::new()];
            for c in &cs {
                assert_eq!(c.split(2), 2);
            }
            let cs = escape(&cs);
            for i in 0..n {
                cs[(i & 1) as usize].inc();
                opaque();
            }
            cs.iter().map(Counter::sum).sum()
        }
        "counter-owned-3" => {
            // Three split counters in turn: no two adds in a row go to one
            // table, so the row is found by owner id every time.
            let cs = [Counter::new(), Counter::new(), Counter::new()];
            for c in &cs {
                assert_eq!(c.split(2), 2);
            }
            let cs = escape(&cs);
            let mut k = 0;
            for _ in 0..n {
                cs[k].inc();
                k = if k == 2 { 0 } else { k + 1 };
                opaque();
            }
            cs.iter().map(Counter::sum).sum()
        }
        "labels-owned" => {
            // `labels-inc`'s walk on an owned row (split first).
            static ROUTES: LabelledCounter<Route> = LabelledCounter::new();
            assert_eq!(ROUTES.split(2), 2);
            let c = escape(&ROUTES);
            for i in 0..n {
                c.inc(Route::ALL[(i & 7) as usize]);
                opaque();
            }
            c.sum()
        }
        "labels2-owned" => {
            // `labels-inc2`'s walk on an owned row (split first).
            let all: [Request; 32] =
                std::array::from_fn(|i| Request::from_index(i).expect("32 values"));
            let all = escape(&all);
            let c: LabelledCounter<Request> = LabelledCounter::new();
            assert_eq!(c.split(2), 2);
            let c = escape(&c);
            for i in 0..n {
                c.inc(all[(i & 31) as usize]);
                opaque();
            }
            c.sum()
        }
        "hist-owned" => {
            // `hist-record`'s values on an owned row (split first).
            let h = Histogram::new();
            assert_eq!(h.split(2), 2);
            let h = escape(&h);
            for i in 0..n {
                h.record(i);
                opaque();
            }
            h.count()
        }
        "set-owned" => {
            // `set-inc`'s walk on an owned row (split first).
            let s = CounterSet::new(1024);
            assert_eq!(s.split(2), 2);
            let s = escape(&s);
            for i in 0..n {
                s.inc((i & 1023) as usize);
                opaque();
            }
            s.snapshot().iter().sum()
        }
        "rough-1024" => {
            // Round-robin over 1,024 counters on one thread: every add
            // misses the thread's last-used cache (`benches/rough.rs` times
            // the same walk against one counter).
            let cs: Vec<RoughCounter> = (0..1024).map(|_| RoughCounter::new()).collect();
            let cs = escape(&cs[..]);
            for i in 0..n {
                cs[(i & 1023) as usize].inc();
                opaque();
            }
            cs.iter().map(RoughCounter::sum).sum()
        }
        "set-inc" => {
            // Walks 1,024 counters of one set, as a per-route family would.
            let s = CounterSet::new(1024);
            let s = escape(&s);
            for i in 0..n {
                s.inc((i & 1023) as usize);
                opaque();
            }
            s.snapshot().iter().sum()
        }
        "labels-inc" => {
            // One label: walks an enum's 8 values, as `set-inc` walks
            // indices (the label read from a table, as a caller holds it).
            static ROUTES: LabelledCounter<Route> = LabelledCounter::new();
            let c = escape(&ROUTES);
            for i in 0..n {
                c.inc(Route::ALL[(i & 7) as usize]);
                opaque();
            }
            c.sum()
        }
        "ft-labels-inc" => {
            // The peer's one-label counter over the same walk as
            // `labels-inc` (fast-telemetry's LabeledCounter, 2 shards: one
            // per core here): the reference for a two-label add.
            let c: shardcount_harness::peers::fast_telemetry::LabeledCounter<Route> =
                shardcount_harness::peers::fast_telemetry::LabeledCounter::new(2);
            let c = escape(&c);
            for i in 0..n {
                c.inc(Route::ALL[(i & 7) as usize]);
                opaque();
            }
            c.sum_all() as u64
        }
        "labels-inc2" => {
            // Two labels, a derived struct: walks its 4 x 8 values, read
            // from a table as `labels-inc` reads its enum's.
            let all: [Request; 32] =
                std::array::from_fn(|i| Request::from_index(i).expect("32 values"));
            let all = escape(&all);
            let c: LabelledCounter<Request> = LabelledCounter::new();
            let c = escape(&c);
            for i in 0..n {
                c.inc(all[(i & 31) as usize]);
                opaque();
            }
            c.sum()
        }
        "set-inc2" => {
            // `labels-inc2`'s walk with the index computed by hand, as a
            // caller of a plain set would: the same table, the same radix.
            let all: [Request; 32] =
                std::array::from_fn(|i| Request::from_index(i).expect("32 values"));
            let all = escape(&all);
            let s = CounterSet::new(32);
            let s = escape(&s);
            for i in 0..n {
                let r = all[(i & 31) as usize];
                s.inc(r.method as usize * 8 + r.route as usize);
                opaque();
            }
            s.snapshot().iter().sum()
        }
        "handle-inc" => {
            let m: CounterMap<u64> = CounterMap::new();
            let h = m.handle(&7);
            let h = escape(&h);
            for _ in 0..n {
                h.inc();
                opaque();
            }
            m.snapshot().iter().map(|(_, v)| v).sum()
        }
        "map-inc" => {
            // By key, 64 keys already interned: the lookup path.
            let m: CounterMap<u64> = CounterMap::new();
            let m = escape(&m);
            for i in 0..n {
                m.inc(&(i & 63));
                opaque();
            }
            m.snapshot().iter().map(|(_, v)| v).sum()
        }
        "map-inc-url" | "dashmap-url" => {
            // By `&str`, 10,000 URL keys already present, picked by a
            // xorshift: the by-key path of `benches/keyed.rs` against its
            // reference, `DashMap` `get` + `fetch_add`.
            let keys: Vec<String> = (0..10_000)
                .map(|id| format!("/catalog/s{}/item/{id}", id % 16))
                .collect();
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 10_000) as usize
            };
            if subject == "map-inc-url" {
                let m: CounterMap<String> = CounterMap::new();
                keys.iter().for_each(|k| m.inc(k.as_str()));
                let m = escape(&m);
                for _ in 0..n {
                    m.inc(keys[next()].as_str());
                    opaque();
                }
                m.snapshot().iter().map(|(_, v)| v).sum::<u64>() - 10_000
            } else {
                let m = shardcount_harness::peers::dashmap::DashMap::<String, AtomicU64>::new();
                keys.iter().for_each(|k| {
                    m.insert(k.clone(), AtomicU64::new(0));
                });
                let m = escape(&m);
                for _ in 0..n {
                    // Relaxed: a count.
                    m.get(keys[next()].as_str())
                        .expect("every key is present")
                        .fetch_add(1, Ordering::Relaxed);
                    opaque();
                }
                m.iter().map(|e| e.value().load(Ordering::Relaxed)).sum()
            }
        }
        "max-record" => {
            // Each record raises the maximum: the path that writes.
            let c = MaxCounter::new();
            let c = escape(&c);
            for i in 1..=n {
                c.record(i);
                opaque();
            }
            c.get()
        }
        "hist-record" => {
            // Values over many buckets of the default layout (the loop
            // counter itself, no work to make them); the count is returned,
            // so each record counts one.
            let h = Histogram::new();
            let h = escape(&h);
            for i in 0..n {
                h.record(i);
                opaque();
            }
            h.count()
        }
        "hist-record8" => {
            // `hist-labels-record`'s walk over 8 plain histograms picked by
            // the label's index: what a caller without labels would write.
            static H: [Histogram; 8] = [const { Histogram::new() }; 8];
            let h = escape(&H);
            for i in 0..n {
                h[Route::ALL[(i & 7) as usize] as usize].record(i);
                opaque();
            }
            h.iter().map(Histogram::count).sum()
        }
        "hist8-owned" => {
            // `hist-record8`'s walk over 8 histograms, each split first:
            // a thread moving between sharded tables on every record.
            static H: [Histogram; 8] = [const { Histogram::new() }; 8];
            for h in &H {
                assert_eq!(h.split(2), 2);
            }
            let h = escape(&H);
            for i in 0..n {
                h[Route::ALL[(i & 7) as usize] as usize].record(i);
                opaque();
            }
            h.iter().map(Histogram::count).sum()
        }
        "hist-labels-record" => {
            // `hist-record`'s values under `labels-inc`'s walk of 8 labels:
            // the label's cost over a plain record (issue 32: within 1.1x).
            static H: LabelledHistogram<Route> = LabelledHistogram::new();
            let h = escape(&H);
            for i in 0..n {
                h.record(Route::ALL[(i & 7) as usize], i);
                opaque();
            }
            h.snapshot_all().iter().map(|(_, s)| s.count()).sum()
        }
        other => panic!(
            "unknown subject {other:?}: {}, atomic-load, counter-sum, rough-approx, \
             cas-take, stock-take, ft-sum, counter-sum-pinned, counter-owned, counter-owned-2, counter-owned-3, hist8-owned, labels-owned, labels2-owned, hist-owned, set-owned, counter-sum-split, rough-1024, \
             set-inc, labels-inc, ft-labels-inc, labels-inc2, set-inc2, handle-inc, map-inc, map-inc-url, \
             dashmap-url, max-record, hist-record, hist-record8, hist-labels-record",
            add_keys.join(", ")
        ),
    }
}
