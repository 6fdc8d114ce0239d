//! The server a reader's key sets share, with its settings.

use crate::primitive::sync::atomic::AtomicU64;
use redis::{Client, Connection};
use std::time::{Duration, Instant};

/// Where the keys are.
#[derive(Clone)]
pub(super) enum Backend {
    /// One server; counter `k` at `<prefix>k`.
    Single(Client),
    /// A Redis Cluster reached through any of `nodes`; counter `k` where
    /// `keys` puts it.
    #[cfg(feature = "redis-cluster")]
    Cluster {
        nodes: Vec<String>,
        keys: crate::export::redis_cluster::ClusterKeys,
    },
}

/// What every key set of a reader shares: the server, its settings and
/// the round-trip count.
pub(super) struct Server {
    pub(super) backend: Backend,
    pub(super) prefix: String,
    pub(super) ttl: Duration,
    pub(super) timeout: Duration,
    pub(super) base: Instant,
    pub(super) round_trips: AtomicU64,
}

/// A key set's connection.
pub(super) enum Conn {
    Single(Connection),
    #[cfg(feature = "redis-cluster")]
    Cluster(Box<crate::export::redis_cluster::Cluster>),
}
