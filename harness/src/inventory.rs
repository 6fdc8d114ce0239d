//! Take-style subjects: a stock that refuses to go below zero.
//!
//! A stock is not a counter (a take can fail, and must fail only when the
//! stock is short), so it has its own trait, [`Inventory`], which the stock
//! bench and the contention demo's `--inventory` mode both drive.

use shardcount::Stock;
use std::sync::atomic::{AtomicU64, Ordering};

/// A stock that units are taken from and put back into.
pub trait Inventory: Sync + Sized {
    /// The name shown in tables.
    const NAME: &'static str;
    /// A stock of `initial` units.
    fn with_stock(initial: u64) -> Self;
    /// Takes `n` units if there are at least `n`; otherwise takes nothing
    /// and returns `false`.
    fn take(&self, n: u64) -> bool;
    /// Puts `n` units (back) into the stock.
    fn put(&self, n: u64);
    /// The units left, once every thread using the stock has been joined.
    fn remaining(&self) -> u64;
}

/// The baseline: one shared word, a compare-exchange loop that refuses to
/// go below zero.
pub struct CasStock(AtomicU64);

impl Inventory for CasStock {
    const NAME: &'static str = "AtomicU64 CAS";
    fn with_stock(initial: u64) -> Self {
        CasStock(AtomicU64::new(initial))
    }
    #[inline]
    fn take(&self, n: u64) -> bool {
        // Relaxed: the units carry no other data; the exchange alone decides
        // (and on x86 every ordering compiles to the same `lock cmpxchg`).
        let mut cur = self.0.load(Ordering::Relaxed);
        while cur >= n {
            match self
                .0
                .compare_exchange_weak(cur, cur - n, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => cur = now,
            }
        }
        false
    }
    #[inline]
    fn put(&self, n: u64) {
        // Relaxed: as in `take`.
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    fn remaining(&self) -> u64 {
        // Relaxed: read after every thread was joined.
        self.0.load(Ordering::Relaxed)
    }
}

impl Inventory for Stock {
    const NAME: &'static str = "Stock";
    fn with_stock(initial: u64) -> Self {
        Stock::new(initial)
    }
    #[inline]
    fn take(&self, n: u64) -> bool {
        self.try_sub(n).is_ok()
    }
    #[inline]
    fn put(&self, n: u64) {
        self.add(n);
    }
    fn remaining(&self) -> u64 {
        self.sum()
    }
}
