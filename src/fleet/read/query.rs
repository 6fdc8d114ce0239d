//! A key set's round trip: `MGET` for fixed keys, a `SCAN` script for
//! every key under the prefix (on a cluster, `cluster.rs`).

use super::keys::{FleetKeys, Refresh};
use super::reply::{glob_escape, utf8_pairs, value_of, Failure, ALL_SCRIPT};
use super::server::{Backend, Conn};
use crate::primitive::sync::atomic::Ordering;

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
                let got: Vec<Option<Vec<u8>>> = redis::cmd("MGET").arg(&full).query(conn)?;
                keys.iter()
                    .zip(got)
                    .map(|(k, v)| value_of(k, &format!("{}{k}", s.prefix), v))
                    .collect()
            }
            None => {
                let pattern = format!("{}*", glob_escape(&s.prefix));
                let reserved = format!("{}{}", s.prefix, crate::export::RESERVED_PREFIX);
                let flat: Vec<Vec<u8>> = redis::cmd("EVAL")
                    .arg(ALL_SCRIPT)
                    .arg(0)
                    .arg(pattern)
                    .arg(reserved)
                    .query(conn)?;
                let mut out: Vec<(String, i64)> = utf8_pairs(flat)
                    .filter_map(|(k, v)| {
                        let key = k.strip_prefix(&s.prefix)?;
                        Some((key.to_owned(), v.parse().ok()?))
                    })
                    .collect();
                out.sort();
                Ok(out)
            }
        }
    }
}
