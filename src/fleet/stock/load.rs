//! What a split stock (`split.rs`) is told and what it remembers: its
//! settings, and its view of the parts' load between two passes.

use crate::export::redis_cluster::Durability;
use std::time::Instant;

/// How a [`FleetStock`](super::FleetStock) on a Redis Cluster splits (see
/// [`FleetStock::cluster`](super::FleetStock::cluster)).
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
    pub(super) split: StockSplit,
    /// The K key.
    pub(super) parts_key: String,
    /// The last sample: when, and each part's call count.
    pub(super) last: Option<(Instant, Vec<u64>)>,
    /// Passes in a row below `merge_below`.
    pub(super) quiet: u32,
}
