//! One operation of the lease script: the script itself, what an
//! operation carries, what it answers, and the bound on its amounts.

/// The lease script (`src/fleet/scripts/lease.lua`). `KEYS[1]` is the
/// stock key, `KEYS[2]` the leases hash; `ARGV` = token, sequence number,
/// kind (`t` take, `r` return, `a` add), amount. Replies
/// `{1, amount, stock_after, lost_ops}` when applied (for a take, `amount`
/// is the grant: `min(asked, stock)`, never below zero);
/// `{0, amount, stock_now, 0}` when the number is the token's last one (a
/// retry: nothing changes, the recorded amount is repeated); `{-2, last}`
/// for an older number; `{-3, stock}` for an add that would take the stock
/// to 2<sup>53</sup> or more (nothing changes, the number is not used);
/// `{-1}` if a key holds something else than this layout (a stock that is
/// not an integer below ±2<sup>53</sup>, a leases key that is not a hash
/// of records). `lost_ops` counts numbers skipped since the token's
/// record: operations Redis confirmed and then lost (an AOF that had not
/// reached the disk). A split stock on a cluster passes `KEYS[3]`, a
/// counter of the part's script calls (its rate decides splits and
/// merges), incremented by every call; one that is not an integer makes
/// the call answer `{-1}` (having changed nothing else).
///
/// ```
/// assert!(shardcount::fleet::LEASE_SCRIPT.contains("DECRBY"));
/// ```
pub const LEASE_SCRIPT: &str = include_str!("../scripts/lease.lua");

/// What an operation does to the stock in Redis.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    Take,
    Return,
    Add,
}

impl Kind {
    /// The script's `ARGV[3]` for it.
    pub(super) fn arg(self) -> &'static str {
        match self {
            Kind::Take => "t",
            Kind::Return => "r",
            Kind::Add => "a",
        }
    }
}

/// One numbered operation of this process's token.
#[derive(Clone, Copy, Debug)]
pub(super) struct Op {
    pub(super) seq: u64,
    pub(super) kind: Kind,
    pub(super) amount: u64,
}

/// What the script applied (or repeated): the amount, and the stock after.
pub(super) struct Reply {
    pub(super) amount: u64,
    pub(super) stock: i64,
}

/// Every amount and the stock stay below this: Redis runs the script's
/// arithmetic in doubles, exact below 2<sup>53</sup>.
pub(super) const MAX_AMOUNT: u64 = 1 << 53;

/// Panics (as documented) on an amount the script cannot count exactly.
pub(super) fn assert_amount(n: u64, call: &str) {
    assert!(
        n < MAX_AMOUNT,
        "shardcount: FleetStock::{call}({n}): the amount must be below 2^53"
    );
}
