//! Keys that a family's label cannot carry as is, shared by the
//! integrations' tests: one whose `Display` writes part of its text and
//! then fails, and two that print alike.
#![allow(dead_code)]

/// The keys (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Awkward {
    Plain(&'static str),
    Broken,
    Alias(u8),
}

impl std::fmt::Display for Awkward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Awkward::Plain(s) => f.write_str(s),
            Awkward::Broken => {
                f.write_str("bro")?;
                Err(std::fmt::Error)
            }
            Awkward::Alias(_) => f.write_str("alias"),
        }
    }
}

/// `a`: 2, the broken key: 5, the two aliases: 3 and 4.
pub fn awkward() -> std::sync::Arc<shardcount::CounterMap<Awkward>> {
    let m = std::sync::Arc::new(shardcount::CounterMap::new());
    m.add(&Awkward::Plain("a"), 2);
    m.add(&Awkward::Broken, 5);
    m.add(&Awkward::Alias(1), 3);
    m.add(&Awkward::Alias(2), 4);
    m
}
