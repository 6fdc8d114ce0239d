//! The lease: the local `Stock`, refilled and given back through
//! numbered operations, one outstanding at a time (see `stock/mod.rs`).

use super::config::FleetStockConfig;
use super::error::FleetError;
use super::link::Link;
use super::op::{assert_amount, Kind, Op, Reply, MAX_AMOUNT};
use crate::primitive::sync::atomic::{AtomicU64, Ordering};
use crate::primitive::sync::{lock, try_lock, Mutex};
use crate::stock::Stock;
use std::time::Instant;

/// What the `FleetStock` and its idle worker share.
pub(super) struct Inner {
    pub(super) local: Stock,
    pub(super) config: FleetStockConfig,
    pub(super) stock_key: String,
    pub(super) leases_key: String,
    pub(super) link: Mutex<Link>,
    pub(super) round_trips: AtomicU64,
    pub(super) granted: AtomicU64,
    pub(super) returned: AtomicU64,
    pub(super) lost_ops: AtomicU64,
}

impl Inner {
    #[cold]
    #[inline(never)]
    pub(super) fn refill(&self, n: u64) -> Result<(), FleetError> {
        // Before the lock: a panic under it would poison it.
        assert_amount(n, "try_sub");
        let mut link = lock(&self.link);
        loop {
            // Another thread may have refilled while we waited.
            if self.local.try_sub(n).is_ok() {
                return Ok(());
            }
            // A take whose reply was lost: its grant, resent, may suffice.
            if link.unresolved.is_some() {
                self.settle(&mut link)?;
                continue;
            }
            let want = self.config.chunk.max(n);
            let r = self.run(&mut link, Kind::Take, want)?;
            if r.amount < want && r.stock <= 0 {
                // Redis is empty: this take gathered what was left.
                return match self.local.try_sub(n) {
                    Ok(()) => Ok(()),
                    Err(e) => Err(FleetError::Insufficient(e)),
                };
            }
        }
    }

    /// Drains the lease and sends it back (after any unresolved op).
    pub(super) fn give_back(&self, link: &mut Link) -> Result<u64, FleetError> {
        self.settle(link)?;
        let units = drain(&self.local);
        if units == 0 {
            return Ok(0);
        }
        self.run(link, Kind::Return, units)?;
        Ok(units)
    }

    /// Sends the unresolved operation, if any, until it is confirmed.
    pub(super) fn settle(&self, link: &mut Link) -> Result<(), FleetError> {
        if let Some(op) = link.unresolved {
            let r = self.call(link, op)?;
            link.unresolved = None;
            self.effect(op, &r);
        }
        Ok(())
    }

    /// Runs a new operation (after settling the previous one) and applies
    /// its effect on the lease.
    pub(super) fn run(
        &self,
        link: &mut Link,
        kind: Kind,
        amount: u64,
    ) -> Result<Reply, FleetError> {
        // Callers checked `n` before locking; a chunk is below 2^53 and a
        // lease never holds more than was granted.
        debug_assert!(amount < MAX_AMOUNT);
        self.settle(link)?;
        link.seq += 1;
        let op = Op {
            seq: link.seq,
            kind,
            amount,
        };
        link.unresolved = Some(op);
        let r = self.call(link, op)?;
        link.unresolved = None;
        self.effect(op, &r);
        Ok(r)
    }

    fn effect(&self, op: Op, r: &Reply) {
        // Relaxed: reporting tallies.
        match op.kind {
            Kind::Take => {
                self.local.add(r.amount);
                self.granted.fetch_add(r.amount, Ordering::Relaxed);
            }
            Kind::Return => _ = self.returned.fetch_add(r.amount, Ordering::Relaxed),
            Kind::Add => {}
        }
    }

    /// The idle worker's pass: returns a lease unchanged for `idle`.
    pub(super) fn idle_pass(&self) {
        let Some(mut link) = try_lock(&self.link) else {
            return; // a refill is running: not idle
        };
        let now = Instant::now();
        let lease = self.local.sum();
        if lease != link.idle_seen.0 || lease == 0 && link.unresolved.is_none() {
            link.idle_seen = (lease, now);
            return;
        }
        if now.duration_since(link.idle_seen.1) >= self.config.idle {
            // An error keeps the return unresolved; the next pass or call
            // resends it.
            let _ = self.give_back(&mut link);
            link.idle_seen = (self.local.sum(), Instant::now());
        }
    }
}

/// Takes everything out of `local`; returns how much.
fn drain(local: &Stock) -> u64 {
    loop {
        let units = local.sum();
        if units == 0 || local.try_sub(units).is_ok() {
            return units;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drain_empties_the_lease() {
        let s = Stock::new(37);
        assert_eq!(drain(&s), 37);
        assert_eq!(s.sum(), 0);
        assert_eq!(drain(&s), 0);
    }
}
