//! A `FleetStock` split over parts on a Redis Cluster (feature
//! `redis-cluster`): the seed's distributed counter, for an inventory.
//!
//! # Protocol
//!
//! * **Parts.** Part `j` (`0 ≤ j < parts`) is a stock of its own, with the
//!   keys `<prefix>{<name>#j}` (units), `<prefix>{<name>#j}__leases` (the
//!   tokens' records) and `<prefix>{<name>#j}__calls` (its script calls so
//!   far, counted by the lease script): one hash tag, so one slot and one
//!   script call per operation, with the whole lease, sequence and retry
//!   protocol of a single stock (`stock/mod.rs`) per part. A token numbers
//!   its operations per part.
//! * **K.** `<prefix>{<name>#0}__parts` holds how many parts are in use
//!   (absent: 1). Each process reads it on every pass of its idle worker
//!   (with every part's units and call count, in one cluster pipeline).
//!   A process's *home* is `hash(token) % K`: its takes start there and
//!   its returns go there; a take that finds its part short moves on to the
//!   next part in use, then to the parts beyond K, and only when every part
//!   was short is the sale refused.
//! * **Split and merge.** From two passes' call counts a process knows
//!   each part's script rate. If one part in use runs more than
//!   `split_above` calls a second and the parts in use hold even amounts
//!   (none more than 4 times another: the last split's units have
//!   arrived), K doubles (up to `parts`); if all parts
//!   together run fewer than `merge_below` for two passes in a row, K
//!   halves. A change is a compare-and-set of the K key, so one process
//!   makes it; that process then moves units: on a split, half of part
//!   `j`'s units to part `j + K`; on a merge, all of each dropped part's
//!   units to the part `j % K'`. A pass also moves any units it finds
//!   beyond K (a return by a process that had not seen the merge yet) the
//!   same way. A K key that another program set to something else than an
//!   integer stops resizing (every pass's sample fails; the parts in use
//!   stay as last seen, and takes still reach every part).
//! * **Moving units** is a take from the source part into this process's
//!   lease followed by a return of the lease to the target part, in steps
//!   of at most 16 chunks: the single stock's operations, so a move is
//!   never doubled or lost by a retry, and a process killed in the middle
//!   strands at most its lease, one step (see `FleetStock`'s "What a crash
//!   costs").

use super::error::FleetError;
use super::lease::{drain, Inner};
use super::link::{Conn, Link};
use super::op::Kind;
use crate::primitive::sync::lock;
use std::time::Instant;

/// The K key's compare-and-set: `ARGV[1]` the K the caller saw, `ARGV[2]`
/// the new one; 1 if set.
const RESIZE: &str = "local k = tonumber(redis.call('GET', KEYS[1]) or '1') \
    if k ~= tonumber(ARGV[1]) then return 0 end \
    redis.call('SET', KEYS[1], ARGV[2]) return 1";

impl Inner {
    /// The split stock's part of the idle worker's pass (module docs):
    /// sample, resize if the load says so, move stray units. Errors end
    /// the pass; the next one tries again. It waits for the lock behind a
    /// refill: the load is highest exactly then.
    pub(super) fn split_pass(&self) {
        let mut link = lock(&self.link);
        if link.split.is_none() {
            return;
        }
        let _ = self.try_split_pass(&mut link);
    }

    fn try_split_pass(&self, link: &mut Link) -> Result<(), FleetError> {
        let (k, units, calls) = self.sample(link)?;
        let now = Instant::now();
        let sp = link.split.as_mut().expect("a split stock");
        let max = sp.split.parts;
        let rates: Option<Vec<f64>> = sp.last.as_ref().map(|(t, before)| {
            let dt = now.saturating_duration_since(*t).as_secs_f64().max(1e-3);
            calls
                .iter()
                .zip(before)
                .map(|(c, b)| c.saturating_sub(*b) as f64 / dt)
                .collect()
        });
        sp.last = Some((now, calls));
        link.active = k;
        let Some(rates) = rates else {
            return Ok(());
        };
        let hottest = rates[..k].iter().copied().fold(0.0, f64::max);
        let total: f64 = rates.iter().sum();
        // Not while the parts in use are uneven (the last split's units
        // may still be on their way): the fullest holds at most 4 times
        // what the emptiest holds, which holds some.
        let (least, most) = units[..k]
            .iter()
            .fold((i64::MAX, 0i64), |(l, m), &u| (l.min(u), m.max(u)));
        let stocked = least > 0 && most <= least.saturating_mul(4);
        let target = if k < max && stocked && hottest > sp.split.split_above as f64 {
            sp.quiet = 0;
            (2 * k).min(max)
        } else if k > 1 && total < sp.split.merge_below as f64 {
            sp.quiet += 1;
            if sp.quiet >= 2 {
                sp.quiet = 0;
                k / 2
            } else {
                k
            }
        } else {
            sp.quiet = 0;
            k
        };
        if target != k && self.resize(link, k, target)? {
            link.active = target;
            if target > k {
                // Split: half of each old part to its new sibling.
                for j in k..target {
                    let half = (units[j - k].max(0) as u64) / 2;
                    self.move_units(link, j - k, j, half)?;
                }
                return Ok(());
            }
        }
        // Merged parts, and any units a return left beyond K.
        let active = link.active;
        for (j, &u) in units.iter().enumerate().skip(active) {
            if u > 0 {
                self.move_units(link, j, j % active, u as u64)?;
            }
        }
        Ok(())
    }

    /// K, every part's units and every part's call count, in one cluster
    /// pipeline.
    fn sample(&self, link: &mut Link) -> Result<(usize, Vec<i64>, Vec<u64>), FleetError> {
        let timeout = self.config.timeout;
        let parts_key = link
            .split
            .as_ref()
            .expect("a split stock")
            .parts_key
            .clone();
        let mut pipe = redis::cluster::cluster_pipe();
        pipe.cmd("GET").arg(&parts_key);
        for p in &link.parts {
            pipe.cmd("GET").arg(&p.stock_key);
            pipe.cmd("GET")
                .arg(p.calls_key.as_deref().unwrap_or_default());
        }
        let conn = match link.connect(timeout) {
            Ok(Conn::Cluster(c)) => c,
            Ok(_) => unreachable!("a split stock is on a cluster"),
            Err(e) => return Err(link.failed(&e, &parts_key)),
        };
        let got: Vec<Option<i64>> = match pipe.query(conn) {
            Ok(v) => v,
            Err(e) => return Err(link.failed(&e, &parts_key)),
        };
        let max = link.parts.len();
        let k = got[0].map_or(1, |k| (k.max(1) as usize).min(max));
        let units = got[1..].iter().step_by(2).map(|v| v.unwrap_or(0)).collect();
        let calls = got[2..]
            .iter()
            .step_by(2)
            .map(|v| v.unwrap_or(0).max(0) as u64)
            .collect();
        Ok((k, units, calls))
    }

    /// Sets K from `from` to `to` unless another process changed it first.
    fn resize(&self, link: &mut Link, from: usize, to: usize) -> Result<bool, FleetError> {
        let key = link
            .split
            .as_ref()
            .expect("a split stock")
            .parts_key
            .clone();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(RESIZE).arg(1).arg(&key).arg(from).arg(to);
        let set: i64 = link
            .query(self.config.timeout, &cmd)
            .map_err(|e| link.failed(&e, &key))?;
        Ok(set == 1)
    }

    /// Moves up to `amount` units from part `from` to part `to` through
    /// this process's lease (module docs), in steps of 16 chunks.
    fn move_units(
        &self,
        link: &mut Link,
        from: usize,
        to: usize,
        amount: u64,
    ) -> Result<(), FleetError> {
        let step_max = self.config.chunk.saturating_mul(16);
        let mut left = amount;
        while left > 0 {
            let step = left.min(step_max);
            let got = self.run(link, from, Kind::Take, step)?.amount;
            let units = drain(&self.local);
            if units > 0 {
                self.run(link, to, Kind::Return, units)?;
            }
            if got < step {
                return Ok(()); // the source ran dry (sales)
            }
            left -= step;
        }
        Ok(())
    }
}
