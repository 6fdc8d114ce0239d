#![cfg(not(shardcount_loom))] // real threads and std atomics; the loom models are in src/loom_models
//! Property models: random sequences of operations on one thread, run on each
//! type and on a plain reference built from the public docs, compared after
//! every operation.
//!
//! * `Counter` against a `u64` with wrapping arithmetic, fresh and grown.
//! * `RoughCounter` against an exact sum plus the folded value the docs
//!   predict with the clock switched off: a thread folds when its unfolded
//!   delta reaches `batch` in either direction, and on `flush`/`flush_all`.
//! * `Stock` against a `u64` that a take may never drive below zero.

use proptest::prelude::*;
use shardcount::{Counter, RoughCounter, Stock};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;
use std::thread;
use std::time::{Duration, Instant};

/// Enough cases to reach the edges of each model while the file runs in
/// about a second in debug; no regression files written into the repo.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Longest operation sequence per case.
const MAX_OPS: usize = 64;

/// Mostly small amounts, sometimes any `u64`, and the edges where wrapping
/// and the sign of `sum_i64` flip.
fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 0..=1_000u64,
        2 => any::<u64>(),
        1 => Just(u64::MAX),
        1 => Just(1u64 << 63),
    ]
}

// ---------------------------------------------------------------- Counter

#[derive(Clone, Debug)]
enum CounterOp {
    Add(u64),
    Sub(u64),
    Inc,
    Dec,
    Take,
    Reset,
    Sum,
}

fn counter_op() -> impl Strategy<Value = CounterOp> {
    prop_oneof![
        4 => amount().prop_map(CounterOp::Add),
        4 => amount().prop_map(CounterOp::Sub),
        3 => Just(CounterOp::Inc),
        3 => Just(CounterOp::Dec),
        1 => Just(CounterOp::Take),
        1 => Just(CounterOp::Reset),
        2 => Just(CounterOp::Sum),
    ]
}

/// Runs `ops` on `c`, whose total is `model` on entry; returns the model's
/// final value.
fn run_counter(c: &Counter, mut model: u64, ops: &[CounterOp]) -> Result<u64, TestCaseError> {
    for (i, op) in ops.iter().enumerate() {
        match *op {
            CounterOp::Add(n) => {
                c.add(n);
                model = model.wrapping_add(n);
            }
            CounterOp::Sub(n) => {
                c.sub(n);
                model = model.wrapping_sub(n);
            }
            CounterOp::Inc => {
                c.inc();
                model = model.wrapping_add(1);
            }
            CounterOp::Dec => {
                c.dec();
                model = model.wrapping_sub(1);
            }
            CounterOp::Take => {
                let got = c.take();
                prop_assert_eq!(got, model, "take() at op {} ({:?})", i, op);
                model = 0;
            }
            CounterOp::Reset => {
                c.reset();
                model = 0;
            }
            // A read changes nothing: the checks below must still agree.
            CounterOp::Sum => {}
        }
        prop_assert_eq!(c.sum(), model, "sum() after op {} ({:?})", i, op);
        prop_assert_eq!(
            c.sum_i64(),
            model as i64,
            "sum_i64() after op {} ({:?})",
            i,
            op
        );
    }
    Ok(model)
}

/// A counter that has grown a table, shared by every case of the grown
/// model. `static` so it never moves: the contention detector keys its notes
/// by the counter's address.
static GROWN: Counter = Counter::with_max_shards(4);

/// Hammers `GROWN` from two threads until it grows a table (at most 2 s;
/// on a loaded machine it may stay a single atomic, and the model must hold
/// either way), once per process.
fn grown() -> &'static Counter {
    static HAMMERED: Once = Once::new();
    HAMMERED.call_once(|| {
        let stop = AtomicBool::new(false);
        let deadline = Instant::now() + Duration::from_secs(2);
        let added: u64 = thread::scope(|s| {
            let workers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let mut n = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            for _ in 0..256 {
                                GROWN.inc();
                            }
                            n += 256;
                        }
                        n
                    })
                })
                .collect();
            while GROWN.shards() == 0 && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::Relaxed);
            workers.into_iter().map(|w| w.join().unwrap()).sum()
        });
        // Exact at quiescence, across the growth.
        assert_eq!(GROWN.sum(), added);
        if GROWN.shards() == 0 {
            eprintln!("props: GROWN did not grow within 2 s; modelling it unsharded");
        }
    });
    &GROWN
}

proptest! {
    #![proptest_config(config())]

    // A `take` or `reset` between two sampled adds looks like another
    // writer to the contention check, so even here a counter may grow.
    #[test]
    fn counter_matches_wrapping_u64(
        start in prop::option::of(amount()),
        ops in prop::collection::vec(counter_op(), 0..=MAX_OPS),
    ) {
        let (c, model) = match start {
            None => (Counter::new(), 0),
            Some(n) => (Counter::from(n), n),
        };
        prop_assert_eq!(c.sum(), model);
        let model = run_counter(&c, model, &ops)?;
        prop_assert_eq!(c.into_inner(), model);
    }

    #[test]
    fn grown_counter_matches_wrapping_u64(
        ops in prop::collection::vec(counter_op(), 0..=MAX_OPS),
    ) {
        let c = grown();
        let shards = c.shards();
        run_counter(c, c.sum(), &ops)?;
        // One thread alone never shrinks it (tables are only added).
        prop_assert!(c.shards() >= shards);
    }

    #[test]
    fn counter_max_shards_rounds_up(k in 1usize..=64, n in amount()) {
        let c = Counter::with_max_shards(k);
        prop_assert_eq!(c.max_shards(), k.next_power_of_two());
        prop_assert_eq!((c.shards(), c.sum()), (0, 0));
        c.add(n);
        prop_assert_eq!(c.sum(), n);
        prop_assert_eq!(c.max_shards(), k.next_power_of_two());
    }
}

// ----------------------------------------------------------- RoughCounter

#[derive(Clone, Debug)]
enum RoughOp {
    Add(u64),
    Sub(u64),
    Flush,
    FlushAll,
    Sum,
    Approx,
}

/// Amounts around the largest batch (64), so the batch rule fires in both
/// directions, and now and then huge ones.
fn rough_amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0..=100u64,
        1 => any::<u64>(),
    ]
}

fn rough_op() -> impl Strategy<Value = RoughOp> {
    prop_oneof![
        6 => rough_amount().prop_map(RoughOp::Add),
        6 => rough_amount().prop_map(RoughOp::Sub),
        1 => Just(RoughOp::Flush),
        1 => Just(RoughOp::FlushAll),
        1 => Just(RoughOp::Sum),
        1 => Just(RoughOp::Approx),
    ]
}

/// The magnitude of `a - b` modulo 2^64, read as a signed delta: how far
/// apart the two are "in either direction".
fn distance(a: u64, b: u64) -> u64 {
    (a.wrapping_sub(b) as i64).unsigned_abs()
}

/// What the docs say one thread sees with the interval rule off: `sum` is
/// exact; the sink takes the thread's whole delta once it reaches `batch` in
/// either direction, and on `flush`/`flush_all`; otherwise it stays put.
struct RoughModel {
    batch: u64,
    sum: u64,
    approx: u64,
}

impl RoughModel {
    fn add(&mut self, n: u64) {
        self.sum = self.sum.wrapping_add(n);
        if distance(self.sum, self.approx) >= self.batch {
            self.approx = self.sum;
        }
    }

    fn fold(&mut self) {
        self.approx = self.sum;
    }
}

/// Runs `ops` on `c`, fresh or just made `From` a value, whose sum and folded
/// value `m` holds on entry.
fn run_rough(c: &RoughCounter, mut m: RoughModel, ops: &[RoughOp]) -> Result<(), TestCaseError> {
    let batch = m.batch;
    // An add of 0 changes nothing and may take no slot (it carries
    // nowhere when the thread's word for the counter is at hand); any
    // other add takes one.
    let (mut added, mut added_zero) = (false, false);
    for (i, op) in ops.iter().enumerate() {
        match *op {
            RoughOp::Add(n) => {
                c.add(n);
                m.add(n);
                added |= n != 0;
                added_zero |= n == 0;
            }
            RoughOp::Sub(n) => {
                c.sub(n);
                m.add(n.wrapping_neg());
                added |= n != 0;
                added_zero |= n == 0;
            }
            RoughOp::Flush => {
                c.flush();
                m.fold();
            }
            RoughOp::FlushAll => {
                c.flush_all();
                m.fold();
            }
            // Reads change nothing: the checks below must still agree.
            RoughOp::Sum | RoughOp::Approx => {}
        }
        let at = format!("after op {i} ({op:?})");
        let (sum, approx) = (c.sum(), c.approx());
        prop_assert_eq!(sum, m.sum, "sum() {}", at);
        prop_assert_eq!(c.sum_i64(), m.sum as i64, "sum_i64() {}", at);
        prop_assert_eq!(approx, m.approx, "approx() {}", at);
        // The documented lag bound, independent of the model: this thread's
        // slot is the only live one and no fold is in progress, so sum and
        // approx are less than one batch apart.
        let slots = usize::from(added)..=usize::from(added || added_zero);
        prop_assert!(slots.contains(&c.live_slots()), "live_slots() {}", at);
        prop_assert!(slots.contains(&c.slots()), "slots() {}", at);
        prop_assert!(
            distance(sum, approx) < batch,
            "sum {} and approx {} a batch ({}) or more apart {}",
            sum,
            approx,
            batch,
            at
        );
        if matches!(op, RoughOp::Flush | RoughOp::FlushAll) {
            prop_assert_eq!(approx, sum, "approx() {}", at);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn rough_counter_matches_model(
        batch in 1u64..=64,
        start in prop::option::of(any::<u64>()),
        ops in prop::collection::vec(rough_op(), 0..=MAX_OPS),
    ) {
        // `From` starts already folded; the builders then set our batch and
        // switch the clock off (nothing has been added yet).
        let (c, initial) = match start {
            None => (RoughCounter::new(), 0),
            Some(n) => (RoughCounter::from(n), n),
        };
        let c = c.with_batch(batch).with_interval(Duration::MAX);
        prop_assert_eq!((c.sum(), c.approx()), (initial, initial));
        prop_assert_eq!((c.batch(), c.interval()), (batch, Duration::MAX));
        run_rough(&c, RoughModel { batch, sum: initial, approx: initial }, &ops)?;
    }
}

// ------------------------------------------------------------------ Stock

#[derive(Clone, Debug)]
enum StockOp {
    TrySub(u64),
    /// `try_sub` of exactly the whole stock (the reference's value), which
    /// must succeed however the stock is split over the shards.
    TrySubAll,
    /// `try_sub` of one more than the whole stock, which must fail.
    TrySubAllAndOne,
    Add(u64),
    Merge,
    Sum,
}

fn stock_op() -> impl Strategy<Value = StockOp> {
    prop_oneof![
        8 => (1..=50u64).prop_map(StockOp::TrySub),
        // Taking nothing always succeeds; more than MAX always fails.
        1 => Just(StockOp::TrySub(0)),
        1 => (Stock::MAX + 1..=u64::MAX).prop_map(StockOp::TrySub),
        1 => Just(StockOp::TrySubAll),
        1 => Just(StockOp::TrySubAllAndOne),
        6 => (0..=100u64).prop_map(StockOp::Add),
        1 => Just(StockOp::Merge),
        1 => Just(StockOp::Sum),
    ]
}

/// How a stock is built: `new` with the machine's shard count, or
/// `with_shards` and a first `add`.
#[derive(Clone, Debug)]
enum StockStart {
    New(u64),
    WithShards(usize, u64),
}

fn stock_start() -> impl Strategy<Value = StockStart> {
    prop_oneof![
        (0..=2_000u64).prop_map(StockStart::New),
        (1..=16usize, 0..=2_000u64).prop_map(|(k, n)| StockStart::WithShards(k, n)),
    ]
}

/// Checks what holds for any stock at rest: `sum` is the model and is what
/// the shards hold, and no shard holds more than its share of `MAX`.
fn check_stock(s: &Stock, model: u64, at: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(s.sum(), model, "sum() {}", at);
    let amounts = s.shard_amounts();
    prop_assert_eq!(amounts.len(), s.shards(), "shard_amounts() {}", at);
    prop_assert_eq!(amounts.iter().sum::<u64>(), model, "shard_amounts() {}", at);
    let cap = Stock::MAX / s.shards() as u64;
    prop_assert!(
        amounts.iter().all(|&a| a <= cap),
        "a shard above {} {}: {:?}",
        cap,
        at,
        amounts
    );
    Ok(())
}

/// The outcome the reference predicts for `try_sub(n)` on `model` units, and
/// the reference's update.
fn stock_take(s: &Stock, model: &mut u64, n: u64, at: &str) -> Result<(), TestCaseError> {
    match s.try_sub(n) {
        Ok(()) => {
            prop_assert!(n <= *model, "try_sub({}) took from {} {}", n, *model, at);
            *model -= n;
        }
        Err(e) => {
            prop_assert!(n > *model, "try_sub({}) failed on {} {}", n, *model, at);
            // Alone, the whole stock during the call was the model.
            prop_assert_eq!(
                (e.requested(), e.available()),
                (n, *model),
                "Insufficient {}",
                at
            );
            prop_assert!(e.available() < e.requested());
        }
    }
    Ok(())
}

/// Runs `ops` on `s`, which holds `model` units on entry.
fn run_stock(s: &Stock, mut model: u64, ops: &[StockOp]) -> Result<u64, TestCaseError> {
    check_stock(s, model, "at the start")?;
    for (i, op) in ops.iter().enumerate() {
        let at = format!("at op {i} ({op:?})");
        match *op {
            StockOp::TrySub(n) => stock_take(s, &mut model, n, &at)?,
            StockOp::TrySubAll => {
                let all = model;
                stock_take(s, &mut model, all, &at)?;
            }
            StockOp::TrySubAllAndOne => {
                let more = model + 1;
                stock_take(s, &mut model, more, &at)?;
            }
            StockOp::Add(n) => {
                s.add(n);
                model += n;
            }
            StockOp::Merge => {
                s.merge();
                // Within one shard's capacity, merge leaves it all in one.
                if model <= Stock::MAX / s.shards() as u64 {
                    let amounts = s.shard_amounts();
                    let holders = amounts.iter().filter(|&&a| a > 0).count();
                    prop_assert!(holders <= 1, "merge left {:?} {}", amounts, at);
                }
            }
            StockOp::Sum => {}
        }
        check_stock(s, model, &at)?;
    }
    Ok(model)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn stock_matches_never_negative_u64(
        start in stock_start(),
        ops in prop::collection::vec(stock_op(), 0..=MAX_OPS),
    ) {
        let (s, model) = match start {
            StockStart::New(n) => (Stock::new(n), n),
            StockStart::WithShards(k, n) => {
                let s = Stock::with_shards(k);
                prop_assert_eq!(s.shards(), k.next_power_of_two());
                s.add(n);
                (s, n)
            }
        };
        let model = run_stock(&s, model, &ops)?;
        prop_assert_eq!(s.into_inner(), model);
    }

    /// Near `MAX`: an add that would pass it panics and adds nothing, one
    /// that reaches it exactly is fine.
    #[test]
    fn stock_add_over_max_panics_and_keeps_stock(
        k in 1usize..=8,
        room in 0..=100u64,
        n in 0..=200u64,
    ) {
        let s = Stock::with_shards(k);
        s.add(Stock::MAX - room);
        let added = catch_unwind(AssertUnwindSafe(|| s.add(n)));
        prop_assert_eq!(added.is_ok(), n <= room);
        let model = if n <= room { Stock::MAX - room + n } else { Stock::MAX - room };
        check_stock(&s, model, "after the add near MAX")?;
        // Still usable after the panic: the lock was not poisoned for good.
        prop_assert!(s.try_sub(1).is_ok());
        check_stock(&s, model - 1, "after a take near MAX")?;
    }
}
