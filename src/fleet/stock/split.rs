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
//!   `split_above` calls a second and every part in use holds units (the
//!   last split's have arrived), K doubles (up to `parts`); if all parts
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

use super::config::FleetStockConfig;
use super::error::FleetError;
use super::fleet_stock::FleetStock;
use super::lease::{drain, Inner};
use super::link::{Conn, Link, Part, Place};
use super::op::Kind;
use crate::export::redis_cluster::Durability;
use std::time::Instant;

/// How a [`FleetStock`] on a Redis Cluster splits (see
/// [`FleetStock::cluster`]).
///
/// ```
/// let s = shardcount::fleet::StockSplit::default();
/// assert_eq!(s.parts, 4);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct StockSplit {
    /// The most parts the stock splits into, each in its own slot
    /// (1..=64).
    pub parts: usize,
    /// Split (double the parts in use) when one part runs more script
    /// calls a second than this, from every process together.
    pub split_above: u64,
    /// Merge (halve the parts in use) when all parts together run fewer
    /// script calls a second than this, twice in a row.
    pub merge_below: u64,
    /// When a take counts as done. [`Durability::Replicas`] confirms it
    /// only once `WAIT` on its part's master says the replicas hold it, so
    /// a failover never undoes a take whose units were sold: pick it when
    /// an oversold unit costs more than a round trip per refill (it adds
    /// one `WAIT` per take, and a part whose master has no live replica
    /// refuses takes until it has one; takes move on to other parts
    /// meanwhile). With [`Durability::Master`], a failover can undo takes
    /// the dead master confirmed but had not yet replicated (Redis
    /// replicates asynchronously; on a healthy link the lag is a few
    /// milliseconds): those units can be granted again, so the stock can
    /// be oversold by at most those takes' grants, each at most one
    /// refill, and the token's next operation there counts them in
    /// [`FleetStockStats::lost_ops`](super::FleetStockStats::lost_ops).
    pub durability: Durability,
}

impl Default for StockSplit {
    fn default() -> Self {
        StockSplit {
            parts: 4,
            split_above: 20_000,
            merge_below: 1_000,
            durability: Durability::Master,
        }
    }
}

/// A split stock's view of its load, under the `link` mutex.
pub(super) struct Splitter {
    split: StockSplit,
    /// The K key.
    parts_key: String,
    /// The last sample: when, and each part's call count.
    last: Option<(Instant, Vec<u64>)>,
    /// Passes in a row below `merge_below`.
    quiet: u32,
}

/// The K key's compare-and-set: `ARGV[1]` the K the caller saw, `ARGV[2]`
/// the new one; 1 if set.
const RESIZE: &str = "local k = tonumber(redis.call('GET', KEYS[1]) or '1') \
    if k ~= tonumber(ARGV[1]) then return 0 end \
    redis.call('SET', KEYS[1], ARGV[2]) return 1";

impl FleetStock {
    /// A stock named `name` under `prefix`, split over up to
    /// `split.parts` parts of a Redis Cluster reachable at any of `nodes`
    /// (feature `redis-cluster`; see [`StockSplit`] and the module's
    /// protocol). It starts as one part, `<prefix>{<name>#0}`; the parts in
    /// use double while one of them is the bound and halve when the load
    /// falls. Everything else is as for [`new`](Self::new):
    /// [`try_sub`](Self::try_sub) fails with
    /// [`Insufficient`](FleetError::Insufficient) only when every part was
    /// short, [`remaining`](Self::remaining) sums the parts,
    /// [`add`](Self::add) and [`init`](Self::init) go to part 0.
    ///
    /// # Errors
    ///
    /// [`FleetError::Redis`] if an address cannot be parsed or none is
    /// given; [`FleetError::Invalid`] if `config.timeout` is zero,
    /// `split.parts` is not in 1..=64, or `prefix` or `name` holds `{` or
    /// `}` (they would change the keys' hash tags).
    ///
    /// # Panics
    ///
    /// As [`new`](Self::new).
    ///
    /// ```
    /// use shardcount::fleet::{FleetStock, FleetStockConfig, StockSplit};
    /// let nodes = ["redis://127.0.0.1:1"];
    /// let s = FleetStock::cluster(&nodes, "shop:", "sku", StockSplit::default(), FleetStockConfig::default()).unwrap();
    /// assert_eq!(s.parts_in_use(), 1);
    /// let bad = StockSplit { parts: 0, ..StockSplit::default() };
    /// assert!(FleetStock::cluster(&nodes, "shop:", "sku", bad, FleetStockConfig::default()).is_err());
    /// ```
    pub fn cluster<S: AsRef<str>>(
        nodes: &[S],
        prefix: &str,
        name: &str,
        split: StockSplit,
        config: FleetStockConfig,
    ) -> Result<FleetStock, FleetError> {
        FleetStock::check(&config)?;
        if !(1..=64).contains(&split.parts) {
            return Err(FleetError::Invalid(format!(
                "StockSplit::parts must be in 1..=64, not {}",
                split.parts
            )));
        }
        if prefix.contains(['{', '}']) || name.contains(['{', '}']) {
            return Err(FleetError::Invalid(
                "a split stock's prefix and name must not hold `{` or `}`".into(),
            ));
        }
        let nodes: Vec<String> = nodes.iter().map(|n| n.as_ref().to_owned()).collect();
        redis::cluster::ClusterClientBuilder::new(nodes.clone())
            .build()
            .map_err(|e| FleetError::Redis(e.to_string()))?;
        let tag = |j: usize| format!("{prefix}{{{name}#{j}}}");
        let parts = (0..split.parts)
            .map(|j| {
                Part::new(
                    tag(j),
                    format!("{}__leases", tag(j)),
                    Some(format!("{}__calls", tag(j))),
                )
            })
            .collect();
        let durable = match split.durability {
            Durability::Replicas { replicas, timeout } => Some((replicas, timeout)),
            _ => None,
        };
        let mut link = Link::new(Place::Cluster { nodes, durable }, parts);
        link.split = Some(Splitter {
            split,
            parts_key: format!("{}__parts", tag(0)),
            last: None,
            quiet: 0,
        });
        Ok(FleetStock::start(link, config))
    }
}

impl Inner {
    /// The split stock's part of the idle worker's pass (module docs):
    /// sample, resize if the load says so, move stray units. Errors end
    /// the pass; the next one tries again.
    pub(super) fn split_pass(&self, link: &mut Link) {
        if link.split.is_none() {
            return;
        }
        let _ = self.try_split_pass(link);
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
        // Not while a part in use is empty: the last split's units may
        // still be on their way there.
        let stocked = units[..k].iter().all(|&u| u > 0);
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
