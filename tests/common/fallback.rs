//! Runs one test of this binary again in a child process with
//! `SHARDCOUNT_QUIESCE_ONLY` set, so that the protocol used where sleeping
//! threads cannot be seen (merges wait for every owner id's holder to add,
//! exit or quiesce) is tested on Linux too. The variable is read once per
//! process, so it takes a process of its own.

use std::process::Command;

/// Whether this process runs the fallback (the variable is set).
pub fn in_fallback() -> bool {
    std::env::var_os("SHARDCOUNT_QUIESCE_ONLY").is_some()
}

/// Runs test `name` (its full path in this binary) in a child with the
/// variable set, and panics with its output if it fails or runs no test.
pub fn run_in_fallback(name: &str) {
    let out = Command::new(std::env::current_exe().expect("the test binary's path"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("SHARDCOUNT_QUIESCE_ONLY", "1")
        .output()
        .expect("the test binary runs again");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{name} with SHARDCOUNT_QUIESCE_ONLY:\n{text}"
    );
}
