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
//! Neither ships anything out of the process: that is
//! [`export`](crate::export)'s job.

mod read;
mod stock;

pub use read::{FleetKeys, FleetReadError, FleetReader, Reading};
pub use stock::{FleetError, FleetStock, FleetStockConfig, FleetStockStats, LEASE_SCRIPT};
