//! `FleetReader` (feature `redis`): the fleet's totals, read from the keys
//! the Redis sink writes, through a TTL cache (`keys`: the cache, `query`:
//! its round trip).

#[cfg(feature = "redis-cluster")]
mod cluster;
mod keys;
mod query;
mod reader;
mod reading;
mod reply;
mod server;

pub use keys::FleetKeys;
pub use reader::FleetReader;
pub use reading::{FleetReadError, Reading};
