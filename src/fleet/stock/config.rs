//! How a `FleetStock` leases.

use std::time::Duration;

/// How a [`FleetStock`](super::fleet_stock::FleetStock) leases.
///
/// ```
/// let c = shardcount::fleet::FleetStockConfig::default();
/// assert_eq!(c.chunk, 100);
/// ```
#[derive(Clone, Debug)]
pub struct FleetStockConfig {
    /// Units a refill asks for (at least the `n` of the `try_sub` that
    /// needs it). With `n_max` the largest `n` asked, a process's lease
    /// never exceeds `max(chunk, n_max) + n_max − 1` (`chunk` for
    /// `try_sub(1)`), nor does what a crash of it strands (see
    /// [`FleetStock`](super::fleet_stock::FleetStock)).
    pub chunk: u64,
    /// A lease that has not changed (no sale, no refill) for this long goes
    /// back to Redis. Checked every quarter of it, by a background worker;
    /// any value below 4 ms checks every 1 ms (see the crate's worker rule).
    pub idle: Duration,
    /// Connect, read and write timeout of each Redis call; must not be
    /// zero ([`FleetStock::new`](super::fleet_stock::FleetStock::new)
    /// refuses it). On a Redis Cluster a call may take several times it,
    /// and a node that accepts connections but never answers blocks it
    /// (see the cluster module's
    /// [Timeouts](crate::export::redis_cluster#timeouts)).
    pub timeout: Duration,
}

impl Default for FleetStockConfig {
    fn default() -> Self {
        FleetStockConfig {
            chunk: 100,
            idle: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
        }
    }
}
