//! A `FleetStock`'s connection: opened and its script loaded on demand,
//! and what a failed call on it means.

use super::error::FleetError;
use super::op::{Op, LEASE_SCRIPT};
use crate::export::redis::answered;
use redis::{Client, Connection};
use std::time::{Duration, Instant};

/// The Redis side: one connection, used under the `link` mutex.
pub(super) struct Link {
    pub(super) client: Client,
    pub(super) conn: Option<Connection>,
    pub(super) sha: Option<String>,
    /// Whether the server has WAITAOF (Redis 7.2+) with AOF on; asked once
    /// per connection.
    pub(super) waitaof: bool,
    pub(super) token: String,
    pub(super) seq: u64,
    pub(super) unresolved: Option<Op>,
    /// The lease as the idle worker last saw it, and since when.
    pub(super) idle_seen: (u64, Instant),
    /// A request was sent on a connection that was then dropped unanswered:
    /// a copy may still be queued in Redis (see `stock/mod.rs`).
    pub(super) stale_possible: bool,
    /// The last script call found its connection, opened by an earlier
    /// call, closed by the server (a restart, an idle `timeout`): worth
    /// one resend on a fresh connection.
    pub(super) closed: bool,
}

impl Link {
    /// The error for a failed call on `key`: `Corrupt` when Redis answered
    /// that the key holds another type, `Redis` otherwise. The connection
    /// is kept when Redis answered (it is in step), dropped when not.
    pub(super) fn failed(&mut self, e: &redis::RedisError, key: &str) -> FleetError {
        if !answered(e) {
            self.conn = None;
        }
        if e.code() == Some("WRONGTYPE") {
            FleetError::Corrupt(format!("{key} holds another type than the stock's: {e}"))
        } else {
            FleetError::Redis(e.to_string())
        }
    }

    /// The error for a request that went out and got no usable reply: the
    /// connection is dropped, and a copy may still be queued in Redis.
    pub(super) fn lost(&mut self, e: String) -> FleetError {
        self.conn = None;
        self.stale_possible = true;
        FleetError::Redis(e)
    }

    /// One idempotent command; resent once on a fresh connection if the
    /// reused one was found closed (a Redis restart).
    pub(super) fn query<T: redis::FromRedisValue>(
        &mut self,
        timeout: Duration,
        cmd: &redis::Cmd,
    ) -> Result<T, redis::RedisError> {
        let reused = self.conn.is_some();
        match self.connect(timeout).and_then(|conn| cmd.query(conn)) {
            Err(e) if reused && e.is_connection_dropped() && !e.is_timeout() => {
                self.conn = None;
                self.connect(timeout).and_then(|conn| cmd.query(conn))
            }
            r => r,
        }
    }

    pub(super) fn connect(
        &mut self,
        timeout: Duration,
    ) -> Result<&mut Connection, redis::RedisError> {
        if self.conn.is_none() {
            let mut conn = self.client.get_connection_with_timeout(timeout)?;
            conn.set_read_timeout(Some(timeout))?;
            conn.set_write_timeout(Some(timeout))?;
            let info: String = redis::cmd("INFO")
                .arg("server")
                .arg("persistence")
                .query(&mut conn)?;
            self.waitaof = has_waitaof(&info);
            self.conn = Some(conn);
            self.sha = None;
        }
        let conn = self.conn.as_mut().expect("connected above");
        if self.sha.is_none() {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(LEASE_SCRIPT)
                .query(conn)?;
            self.sha = Some(sha);
        }
        Ok(conn)
    }
}

/// Whether an `INFO server persistence` reply shows Redis 7.2 or later
/// with the AOF on (WAITAOF can then confirm a take is on disk).
fn has_waitaof(info: &str) -> bool {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let version = field("redis_version").unwrap_or("0");
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (7, 2) && field("aof_enabled") == Some("1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waitaof_needs_7_2_and_aof() {
        let info = |v: &str, aof: u8| {
            format!("# Server\r\nredis_version:{v}\r\n# Persistence\r\naof_enabled:{aof}\r\n")
        };
        assert!(!has_waitaof(&info("7.0.15", 1)));
        assert!(has_waitaof(&info("7.2.4", 1)));
        assert!(has_waitaof(&info("8.0.0", 1)));
        assert!(!has_waitaof(&info("7.2.4", 0)));
        assert!(!has_waitaof(""));
    }
}
