//! The lease: the local `Stock`, refilled and given back through
//! numbered operations, one outstanding at a time per part (see
//! `stock/mod.rs`).

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
    /// The first part's stock key, for `Debug` (without the lock).
    pub(super) key: String,
    pub(super) link: Mutex<Link>,
    pub(super) round_trips: AtomicU64,
    pub(super) granted: AtomicU64,
    pub(super) returned: AtomicU64,
    pub(super) lost_ops: AtomicU64,
}

impl Inner {
    /// Refills the lease until it covers `n`, then takes `n` (the slow path
    /// of `try_sub`): from this token's home part first, then the other
    /// parts in use, then any part beyond them (a split that shrank may
    /// have left units there). `Insufficient` only when every part was
    /// short; if a part could not be asked, its error instead.
    #[cold]
    #[inline(never)]
    pub(super) fn refill(&self, n: u64) -> Result<(), FleetError> {
        // Before the lock: a panic under it would poison it.
        assert_amount(n, "try_sub");
        let mut link = lock(&self.link);
        let mut error = None;
        'parts: for p in order(&link) {
            loop {
                // Another thread may have refilled while we waited.
                if self.local.try_sub(n).is_ok() {
                    return Ok(());
                }
                // A take whose reply was lost: its grant, resent, may suffice.
                if link.parts[p].unresolved.is_some() {
                    if let Err(e) = self.settle(&mut link, p) {
                        error = Some(e);
                        continue 'parts;
                    }
                    continue;
                }
                let want = self.config.chunk.max(n);
                match self.run(&mut link, p, Kind::Take, want) {
                    Err(e) => {
                        error = Some(e);
                        continue 'parts;
                    }
                    // This part is empty: the take gathered what was left.
                    Ok(r) if r.amount < want && r.stock <= 0 => continue 'parts,
                    Ok(_) => {}
                }
            }
        }
        match self.local.try_sub(n) {
            Ok(()) => Ok(()),
            Err(e) => Err(error.unwrap_or(FleetError::Insufficient(e))),
        }
    }

    /// Drains the lease and sends it back to the home part (after every
    /// part's unresolved op); the units this call saw confirmed returned,
    /// an earlier return it resent included. An unresolved add refused as
    /// too large (given up) does not stop the return: its error comes
    /// after it (the units show in the stats only, as after any error).
    pub(super) fn give_back(&self, link: &mut Link) -> Result<u64, FleetError> {
        let (mut returned, mut refused) = (0, None);
        for p in 0..link.parts.len() {
            match self.settle(link, p) {
                Ok(Some(op)) if matches!(op.kind, Kind::Return) => returned += op.amount,
                Ok(_) => {}
                Err(e @ FleetError::Invalid(_)) => refused = Some(e),
                Err(e) => return Err(e),
            }
        }
        let units = drain(&self.local);
        if units > 0 {
            let home = link.home();
            self.run(link, home, Kind::Return, units)?;
            returned += units;
        }
        match refused {
            Some(e) => Err(e),
            None => Ok(returned),
        }
    }

    /// Sends part `p`'s unresolved operation, if any, until it is
    /// confirmed; that operation, if there was one.
    pub(super) fn settle(&self, link: &mut Link, p: usize) -> Result<Option<Op>, FleetError> {
        let settled = link.parts[p].unresolved;
        if let Some(op) = settled {
            let r = self.call(link, p, op)?;
            link.parts[p].unresolved = None;
            self.effect(op, &r);
        }
        Ok(settled)
    }

    /// Runs a new operation on part `p` (after its unresolved one): the
    /// next number, kept unresolved until confirmed.
    pub(super) fn run(
        &self,
        link: &mut Link,
        p: usize,
        kind: Kind,
        amount: u64,
    ) -> Result<Reply, FleetError> {
        debug_assert!(amount < MAX_AMOUNT);
        self.settle(link, p)?;
        let part = &mut link.parts[p];
        part.seq += 1;
        let op = Op {
            seq: part.seq,
            kind,
            amount,
        };
        part.unresolved = Some(op);
        let r = self.call(link, p, op)?;
        link.parts[p].unresolved = None;
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
        let settled = link.parts.iter().all(|p| p.unresolved.is_none());
        if lease != link.idle_seen.0 || lease == 0 && settled {
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

/// The parts in the order a refill tries them: the home part, the other
/// parts in use after it, then the parts beyond them.
fn order(link: &Link) -> impl Iterator<Item = usize> {
    let (home, active, all) = (link.home(), link.active, link.parts.len());
    (0..active)
        .map(move |i| (home + i) % active)
        .chain(active..all)
}

/// Takes everything out of `local`; returns how much.
pub(super) fn drain(local: &Stock) -> u64 {
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
