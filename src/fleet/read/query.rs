//! A key set's round trip: `MGET` for fixed keys, a `SCAN` script for
//! every key under the prefix (on a cluster, `cluster.rs`).

use super::keys::{FleetKeys, Refresh};
use super::server::Backend;
use crate::primitive::sync::atomic::Ordering;
use redis::Connection;

/// A key set's connection.
pub(super) enum Conn {
    Single(Connection),
    #[cfg(feature = "redis-cluster")]
    Cluster(Box<redis::cluster::ClusterConnection>),
}

/// Every integer key under a prefix, in one script run (one round trip):
/// `ARGV[1]` the SCAN pattern, `ARGV[2]` the reserved prefix to skip.
pub(super) const ALL_SCRIPT: &str = include_str!("../scripts/all.lua");

impl FleetKeys {
    /// The set's values from Redis (for no key at all, none and no
    /// round trip).
    pub(super) fn query(&self, r: &mut Refresh) -> Result<Vec<(String, i64)>, Failure> {
        let s = &self.server;
        if self.fixed.as_ref().is_some_and(Vec::is_empty) {
            // `MGET` needs a key: no key reads nothing, with no round trip.
            return Ok(Vec::new());
        }
        // Relaxed: a tally (of attempts: a failed connect counts too).
        s.round_trips.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "redis-cluster")]
        if let Backend::Cluster { nodes, keys } = &s.backend {
            if r.conn.is_none() {
                let conn = super::cluster::connect(nodes, s.timeout)?;
                r.conn = Some(Conn::Cluster(Box::new(conn)));
            }
            let Some(Conn::Cluster(conn)) = r.conn.as_mut() else {
                unreachable!("a cluster reader's connection")
            };
            return match &self.fixed {
                Some(names) => super::cluster::read_keys(conn, keys, names),
                None => super::cluster::read_all(conn, keys),
            };
        }
        #[allow(irrefutable_let_patterns)] // one variant without the cluster feature
        let Backend::Single(client) = &s.backend
        else {
            unreachable!("handled above")
        };
        if r.conn.is_none() {
            let conn = client.get_connection_with_timeout(s.timeout)?;
            conn.set_read_timeout(Some(s.timeout))?;
            conn.set_write_timeout(Some(s.timeout))?;
            r.conn = Some(Conn::Single(conn));
        }
        #[allow(irrefutable_let_patterns)] // one variant without the cluster feature
        let Some(Conn::Single(conn)) = r.conn.as_mut() else {
            unreachable!("a single server's connection")
        };
        match &self.fixed {
            Some(keys) => {
                let full: Vec<String> = keys.iter().map(|k| format!("{}{k}", s.prefix)).collect();
                // As strings: one value that is not an integer names its
                // key (decoding all as integers fails the set, nameless).
                let got: Vec<Option<String>> = redis::cmd("MGET").arg(&full).query(conn)?;
                keys.iter()
                    .zip(got)
                    .map(|(k, v)| value_of(k, &format!("{}{k}", s.prefix), v))
                    .collect()
            }
            None => {
                let pattern = format!("{}*", glob_escape(&s.prefix));
                let reserved = format!("{}{}", s.prefix, crate::export::RESERVED_PREFIX);
                let flat: Vec<String> = redis::cmd("EVAL")
                    .arg(ALL_SCRIPT)
                    .arg(0)
                    .arg(pattern)
                    .arg(reserved)
                    .query(conn)?;
                let mut out: Vec<(String, i64)> = flat
                    .chunks_exact(2)
                    .filter_map(|kv| {
                        let key = kv[0].strip_prefix(&s.prefix)?;
                        Some((key.to_owned(), kv[1].parse().ok()?))
                    })
                    .collect();
                out.sort();
                Ok(out)
            }
        }
    }
}

/// Key `k`'s value as read from `full` (absent: 0).
pub(super) fn value_of(k: &str, full: &str, v: Option<String>) -> Result<(String, i64), Failure> {
    match v.map(|v| v.parse::<i64>()) {
        None => Ok((k.to_owned(), 0)),
        Some(Ok(v)) => Ok((k.to_owned(), v)),
        Some(Err(_)) => Err(Failure {
            message: format!("{full} is not an integer"),
            answered: true,
        }),
    }
}

/// Why a fetch failed, and whether Redis answered (the connection is then
/// in step and kept).
pub(super) struct Failure {
    pub(super) message: String,
    pub(super) answered: bool,
}

impl From<redis::RedisError> for Failure {
    fn from(e: redis::RedisError) -> Failure {
        Failure {
            answered: crate::export::redis::answered(&e),
            message: e.to_string(),
        }
    }
}

/// `prefix` with SCAN's glob characters escaped.
pub(super) fn glob_escape(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\' | '^' | '-') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_escape_escapes_pattern_characters() {
        assert_eq!(glob_escape("fleet:"), "fleet:");
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }
}
