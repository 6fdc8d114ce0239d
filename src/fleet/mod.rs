//! The fleet in Redis (feature `redis`): many processes reading one set of
//! totals and selling one inventory.
//!
//! * [`FleetReader`]: the totals a
//!   [`RedisSink`](crate::export::redis::RedisSink) writes, read through a
//!   TTL cache: any number of reads within the TTL cost one round trip per
//!   key set.
//! * [`FleetStock`]: one inventory that many processes sell from, never
//!   oversold, each through a lease held in a local [`Stock`](crate::Stock).
//!
//! Both also work on a Redis Cluster (feature `redis-cluster`):
//! `FleetReader::cluster` reads what a
//! [`RedisClusterSink`](crate::export::redis_cluster::RedisClusterSink)
//! writes, one round trip per master; `FleetStock::cluster` splits one
//! inventory over parts in different slots while one part is the bound,
//! and merges them back when the load falls.
//!
//! Neither ships anything out of the process: that is
//! [`export`](crate::export)'s job.

mod read;
mod stock;

pub use read::{FleetKeys, FleetReadError, FleetReader, Reading};
#[cfg(feature = "redis-cluster")]
pub use stock::StockSplit;
pub use stock::{FleetError, FleetStock, FleetStockConfig, FleetStockStats, LEASE_SCRIPT};
