//! A key set's round trip: `MGET` for fixed keys, a `SCAN` script for
//! every key under the prefix.

use super::keys::{FleetKeys, Refresh};
use crate::primitive::sync::atomic::Ordering;

/// Every integer key under a prefix, in one script run (one round trip):
/// `ARGV[1]` the SCAN pattern, `ARGV[2]` the reserved prefix to skip.
const ALL_SCRIPT: &str = include_str!("../scripts/all.lua");

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
        if r.conn.is_none() {
            let conn = s.client.get_connection_with_timeout(s.timeout)?;
            conn.set_read_timeout(Some(s.timeout))?;
            conn.set_write_timeout(Some(s.timeout))?;
            r.conn = Some(conn);
        }
        let conn = r.conn.as_mut().expect("connected above");
        match &self.fixed {
            Some(keys) => {
                let full: Vec<String> = keys.iter().map(|k| format!("{}{k}", s.prefix)).collect();
                // As strings: one value that is not an integer names its
                // key (decoding all as integers fails the set, nameless).
                let got: Vec<Option<String>> = redis::cmd("MGET").arg(&full).query(conn)?;
                keys.iter()
                    .zip(got)
                    .map(|(k, v)| match v.map(|v| v.parse::<i64>()) {
                        None => Ok((k.clone(), 0)),
                        Some(Ok(v)) => Ok((k.clone(), v)),
                        Some(Err(_)) => Err(Failure {
                            message: format!("{}{k} is not an integer", s.prefix),
                            answered: true,
                        }),
                    })
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
fn glob_escape(prefix: &str) -> String {
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
