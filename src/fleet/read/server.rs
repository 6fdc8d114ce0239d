//! The server a reader's key sets share, with its settings.

use crate::primitive::sync::atomic::AtomicU64;
use redis::Client;
use std::time::{Duration, Instant};

/// What every key set of a reader shares: the server, its settings and
/// the round-trip count.
pub(super) struct Server {
    pub(super) client: Client,
    pub(super) prefix: String,
    pub(super) ttl: Duration,
    pub(super) timeout: Duration,
    pub(super) base: Instant,
    pub(super) round_trips: AtomicU64,
}
