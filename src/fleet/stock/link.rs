//! A `FleetStock`'s connection: opened and its script loaded on demand,
//! and what a failed call on it means; and the stock's parts (one on a
//! single server; up to `StockSplit::parts` on a cluster, each in its own
//! slot).

use super::error::FleetError;
use super::op::{Op, LEASE_SCRIPT};
use crate::export::redis::answered;
use redis::{Client, Connection};
use std::time::{Duration, Instant};

/// Where the stock lives.
pub(super) enum Place {
    /// One server.
    Single(Client),
    /// A Redis Cluster reached through any of `nodes`; a take is confirmed
    /// only once `WAIT replicas` answers, if `durable` asks for it.
    #[cfg(feature = "redis-cluster")]
    Cluster {
        nodes: Vec<String>,
        durable: Option<(u32, Duration)>,
    },
}

/// The open connection.
pub(super) enum Conn {
    Single(Connection),
    #[cfg(feature = "redis-cluster")]
    Cluster(Box<crate::export::redis_cluster::Cluster>),
}

/// One part of the stock: its keys, and this token's numbering there (each
/// part's leases hash keeps its own record of the token).
pub(super) struct Part {
    pub(super) stock_key: String,
    pub(super) leases_key: String,
    /// The part's script-call counter (a split stock's only).
    pub(super) calls_key: Option<String>,
    pub(super) seq: u64,
    pub(super) unresolved: Option<Op>,
    /// Numbers given up since the last applied operation (adds refused as
    /// too large, whose earlier copies may still land): not counted as
    /// lost when the next operation finds them skipped.
    pub(super) given_up: u64,
}

impl Part {
    /// A part with these keys and no operation yet.
    pub(super) fn new(stock_key: String, leases_key: String, calls_key: Option<String>) -> Part {
        Part {
            stock_key,
            leases_key,
            calls_key,
            seq: 0,
            unresolved: None,
            given_up: 0,
        }
    }
}

/// The Redis side: one connection, used under the `link` mutex.
pub(super) struct Link {
    pub(super) place: Place,
    pub(super) conn: Option<Conn>,
    pub(super) sha: Option<String>,
    /// Whether the server has WAITAOF (Redis 7.2+) with AOF on; asked once
    /// per connection (single server only).
    pub(super) waitaof: bool,
    pub(super) token: String,
    /// The stock's parts; a single server's stock has one.
    pub(super) parts: Vec<Part>,
    /// How many parts are in use (the split's K, 1 unsplit).
    pub(super) active: usize,
    /// A split stock's load and resizing state.
    #[cfg(feature = "redis-cluster")]
    pub(super) split: Option<super::load::Splitter>,
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
    /// A link to `place` for a stock of `parts`, with a fresh token.
    pub(super) fn new(place: Place, parts: Vec<Part>) -> Link {
        Link {
            place,
            conn: None,
            sha: None,
            waitaof: false,
            token: crate::export::WriterId::random().to_string(),
            parts,
            active: 1,
            #[cfg(feature = "redis-cluster")]
            split: None,
            idle_seen: (0, Instant::now()),
            stale_possible: false,
            closed: false,
        }
    }

    /// This token's part among the active ones: where its takes start and
    /// its returns go (tokens spread the fleet over the parts).
    pub(super) fn home(&self) -> usize {
        let h = self.token.bytes().fold(0usize, |h, b| {
            h.wrapping_mul(31).wrapping_add(usize::from(b))
        });
        h % self.active.max(1)
    }

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
        match self.query_once(timeout, cmd) {
            Err(e) if reused && e.is_connection_dropped() && !e.is_timeout() => {
                self.conn = None;
                self.query_once(timeout, cmd)
            }
            r => r,
        }
    }

    fn query_once<T: redis::FromRedisValue>(
        &mut self,
        timeout: Duration,
        cmd: &redis::Cmd,
    ) -> Result<T, redis::RedisError> {
        match self.connect(timeout)? {
            Conn::Single(c) => cmd.query(c),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => cmd.query(&mut **c),
        }
    }

    /// The connection, opened (and the script loaded) if needed.
    pub(super) fn connect(&mut self, timeout: Duration) -> Result<&mut Conn, redis::RedisError> {
        if self.conn.is_none() {
            self.conn = Some(match &self.place {
                Place::Single(client) => {
                    let mut conn = client.get_connection_with_timeout(timeout)?;
                    conn.set_read_timeout(Some(timeout))?;
                    conn.set_write_timeout(Some(timeout))?;
                    let info: String = redis::cmd("INFO")
                        .arg("server")
                        .arg("persistence")
                        .query(&mut conn)?;
                    self.waitaof = has_waitaof(&info);
                    Conn::Single(conn)
                }
                #[cfg(feature = "redis-cluster")]
                Place::Cluster { nodes, .. } => Conn::Cluster(Box::new(
                    crate::export::redis_cluster::connect(nodes, timeout)?,
                )),
            });
            self.sha = None;
        }
        let conn = self.conn.as_mut().expect("connected above");
        if self.sha.is_none() {
            let mut load = redis::cmd("SCRIPT");
            load.arg("LOAD").arg(LEASE_SCRIPT);
            let sha: String = match conn {
                Conn::Single(c) => load.query(c)?,
                // Every master (a promoted replica has no script cache),
                // but one that is down must not stop the parts on the
                // others: a master that missed it answers NOSCRIPT later,
                // and `call` loads it again.
                #[cfg(feature = "redis-cluster")]
                Conn::Cluster(c) => {
                    use redis::cluster_routing::{
                        MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo,
                    };
                    let all = RoutingInfo::MultiNode((
                        MultipleNodeRoutingInfo::AllMasters,
                        Some(ResponsePolicy::OneSucceeded),
                    ));
                    redis::from_redis_value(c.route_command(&load, all)?)?
                }
            };
            self.sha = Some(sha);
        }
        Ok(conn)
    }
}

/// Whether `INFO server persistence` shows a server with WAITAOF (Redis
/// 7.2 or later) and the AOF on.
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
