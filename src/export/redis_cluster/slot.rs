//! Redis Cluster's key-to-slot map: CRC16 (XMODEM) of the key's hash tag,
//! or of the whole key without one, modulo 16384. Computed here because
//! the `redis` crate keeps its slot numbers private; the cluster tests
//! check it against the server's `CLUSTER KEYSLOT`.

/// Slots in a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The part of `key` Redis hashes: the text between the first `{` and the
/// first `}` after it, if that is not empty; else the whole key.
fn hashed(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    match key[open + 1..].iter().position(|&b| b == b'}') {
        Some(len) if len > 0 => &key[open + 1..open + 1 + len],
        _ => key,
    }
}

/// CRC16 with polynomial 0x1021 and initial value 0 (XMODEM), bit by bit:
/// keys are short and this runs once per bucket, not per add.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The slot Redis Cluster stores `key` in.
pub(crate) fn slot_of(key: &str) -> u16 {
    crc16(hashed(key.as_bytes())) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::{crc16, hashed, slot_of};

    #[test]
    fn crc16_matches_the_xmodem_check_value() {
        // The standard check input for CRC-16/XMODEM.
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn hash_tags_follow_the_cluster_spec() {
        assert_eq!(hashed(b"{user1000}.following"), b"user1000");
        assert_eq!(hashed(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hashed(b"foo{{bar}}zap"), b"{bar");
        assert_eq!(hashed(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hashed(b"no tag"), b"no tag");
        assert_eq!(hashed(b"open{only"), b"open{only");
        assert_eq!(slot_of("{a}x"), slot_of("{a}y"));
        // Known slots (Redis Cluster spec and `CLUSTER KEYSLOT`).
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("bar"), 5061);
    }
}
