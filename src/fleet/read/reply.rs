//! What a key set's round trip can answer: a key's value, or why it
//! failed; and the script that lists every key under a prefix.

/// Every integer key under a prefix, in one script run (one round trip):
/// `ARGV[1]` the SCAN pattern, `ARGV[2]` the reserved prefix to skip.
pub(super) const ALL_SCRIPT: &str = include_str!("../scripts/all.lua");

/// Key `k`'s value as read from `full` (absent: 0). Bytes, so that a
/// value that is not UTF-8 names its key as any other non-integer does.
pub(super) fn value_of(k: &str, full: &str, v: Option<Vec<u8>>) -> Result<(String, i64), Failure> {
    let parse = |v: Vec<u8>| {
        String::from_utf8(v)
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or(())
    };
    match v.map(parse) {
        None => Ok((k.to_owned(), 0)),
        Some(Ok(v)) => Ok((k.to_owned(), v)),
        Some(Err(_)) => Err(Failure {
            message: format!("{full} is not an integer"),
            answered: true,
            closed: false,
        }),
    }
}

/// The key-value pairs of `ALL_SCRIPT`'s flat listing whose key and
/// value are both UTF-8: a key another program wrote with a name that is
/// not is left out, as a value that is not an integer is.
pub(super) fn utf8_pairs(flat: Vec<Vec<u8>>) -> impl Iterator<Item = (String, String)> {
    let mut flat = flat.into_iter();
    std::iter::from_fn(move || Some((flat.next()?, flat.next()?)))
        .filter_map(|(k, v)| Some((String::from_utf8(k).ok()?, String::from_utf8(v).ok()?)))
}

/// Why a fetch failed, whether Redis answered (the connection is then
/// in step and kept), and whether the connection was found closed (a
/// server's idle timeout or restart: a fresh one may work at once).
pub(super) struct Failure {
    pub(super) message: String,
    pub(super) answered: bool,
    pub(super) closed: bool,
}

impl From<redis::RedisError> for Failure {
    fn from(e: redis::RedisError) -> Failure {
        Failure {
            answered: crate::export::redis::answered(&e),
            closed: e.is_connection_dropped() && !e.is_timeout(),
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
