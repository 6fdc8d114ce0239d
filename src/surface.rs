//! The `u64` counter surface that every counter type shares, written once:
//! `sub`, `inc`, `dec` and `sum_i64` in terms of the type's own `add` and
//! `sum`, and `Default` in terms of `new`.

/// Implements the shared surface for `$ty`, which must have
/// `fn add(&self, u64)`, `fn sum(&self) -> u64`, `const fn new() -> Self`
/// and `From<u64>`.
macro_rules! u64_counter_surface {
    ($ty:ident) => {
        impl $ty {
            #[doc = concat!(
                        "Subtracts `n`, wrapping below zero like `AtomicU64::fetch_sub`.\n\n",
                        "```\n",
                        "let c = shardcount::", stringify!($ty), "::from(10);\n",
                        "c.sub(3);\n",
                        "assert_eq!(c.sum(), 7);\n",
                        "c.sub(8);\n",
                        "assert_eq!(c.sum(), u64::MAX); // wrapped, as an AtomicU64 would\n",
                        "assert_eq!(c.sum_i64(), -1);\n",
                        "```"
                    )]
            #[inline(always)]
            pub fn sub(&self, n: u64) {
                self.add(n.wrapping_neg());
            }

            #[doc = concat!(
                        "Adds one.\n\n",
                        "```\n",
                        "let c = shardcount::", stringify!($ty), "::new();\n",
                        "c.inc();\n",
                        "assert_eq!(c.sum(), 1);\n",
                        "```"
                    )]
            #[inline(always)]
            pub fn inc(&self) {
                self.add(1);
            }

            #[doc = concat!(
                        "Subtracts one.\n\n",
                        "```\n",
                        "let c = shardcount::", stringify!($ty), "::from(1);\n",
                        "c.dec();\n",
                        "assert_eq!(c.sum(), 0);\n",
                        "```"
                    )]
            #[inline(always)]
            pub fn dec(&self) {
                self.add(u64::MAX);
            }

            #[doc = concat!(
                        "[`sum`](Self::sum) as a signed value: the same bits, for ",
                        "counters that go up and down around zero.\n\n",
                        "```\n",
                        "let c = shardcount::", stringify!($ty), "::new();\n",
                        "c.sub(3);\n",
                        "assert_eq!(c.sum_i64(), -3);\n",
                        "```"
                    )]
            #[must_use]
            pub fn sum_i64(&self) -> i64 {
                self.sum() as i64
            }
        }

        impl Default for $ty {
            #[doc = concat!(
                        "Same as [`", stringify!($ty), "::new`].\n\n",
                        "```\n",
                        "let c = shardcount::", stringify!($ty), "::default();\n",
                        "assert_eq!(c.sum(), 0);\n",
                        "```"
                    )]
            fn default() -> Self {
                $ty::new()
            }
        }
    };
}
pub(crate) use u64_counter_surface;
