//! What a read through the cache returns.

use std::fmt;
use std::time::Duration;

/// A value read through the cache.
///
/// ```
/// let r = shardcount::fleet::Reading { value: 3, age: std::time::Duration::ZERO };
/// assert_eq!(r.value, 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// The value (a key's, or the set's sum).
    pub value: i64,
    /// How long ago Redis was read for it (about the TTL at most while
    /// Redis answers; more after failed refreshes).
    pub age: Duration,
}

/// A key set that was never read: Redis could not be reached or refused
/// the read. Holds the cause.
///
/// ```
/// let e = shardcount::fleet::FleetReadError("connection refused".into());
/// assert_eq!(e.to_string(), "fleet read: never read: connection refused");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetReadError(pub String);

impl fmt::Display for FleetReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "fleet read: never read: {}", self.0)
    }
}

impl std::error::Error for FleetReadError {}
