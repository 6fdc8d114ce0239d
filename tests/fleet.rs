//! The fleet, both ways, against a real `redis-server` (each test starts
//! its own, see tests/common): `FleetStock` drained by several processes
//! (this test binary, re-run as children), through a Redis restart and a
//! worker killed mid-run; retried script calls; and `FleetReader`'s cache.
#![cfg(all(feature = "redis", not(shardcount_loom)))]

mod common;

use common::Server;
use shardcount::export::redis::RedisSink;
use shardcount::export::Exporter;
use shardcount::fleet::{FleetError, FleetReader, FleetStock, FleetStockConfig, LEASE_SCRIPT};
use shardcount::{Counter, RoughCounter};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PREFIX: &str = "inv:";
const NAME: &str = "sku";
const INITIAL: u64 = 100_000;
const PROCESSES: usize = 3;
const THREADS: usize = 4;
/// Only a hang detector.
const PATIENCE: Duration = Duration::from_secs(120);

fn config(chunk: u64) -> FleetStockConfig {
    FleetStockConfig {
        chunk,
        // No idle return during a run: the kill test's bound is one lease.
        idle: Duration::from_secs(600),
        timeout: Duration::from_millis(500),
    }
}

/// The child side: runs only when the parent set `FLEET_CHILD_URL`. Sells
/// one unit at a time on `FLEET_THREADS` threads until `Insufficient`,
/// retrying while Redis is unreachable; records each thread's sales in
/// `FLEET_RECORD` (one u64 per thread, written after each sale, so a
/// `kill -9` loses at most one per thread); flushes; prints its token and
/// total.
/// Calls that failed with a Redis error in this child (a timeout among
/// them may leave its record behind, see `FleetStock`).
static ERRORS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

#[test]
fn child() {
    let Ok(url) = std::env::var("FLEET_CHILD_URL") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap().parse::<u64>().unwrap();
    let (threads, chunk, pace) = (var("FLEET_THREADS"), var("FLEET_CHUNK"), var("FLEET_PACE"));
    let record = std::fs::File::create(std::env::var("FLEET_RECORD").unwrap()).unwrap();
    record.set_len(8 * threads).unwrap();
    let stock = FleetStock::new(&url, PREFIX, NAME, config(chunk)).unwrap();
    println!("\nFLEET token {}", stock.token());
    // Every process runs the same start-up: the stock is set once.
    if let Ok(n) = std::env::var("FLEET_INIT") {
        let set = stock.init(n.parse().unwrap()).unwrap();
        println!("FLEET init {set}");
    }
    std::io::stdout().flush().unwrap();
    let sold: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stock, record) = (&stock, &record);
                s.spawn(move || {
                    let start = Instant::now();
                    let mut sold = 0u64;
                    loop {
                        match stock.try_sub(1) {
                            Ok(()) => {
                                sold += 1;
                                record.write_at(&sold.to_le_bytes(), 8 * t).unwrap();
                                if pace > 0 && sold.is_multiple_of(pace) {
                                    std::thread::sleep(Duration::from_millis(1));
                                }
                            }
                            Err(FleetError::Insufficient(_)) => return sold,
                            Err(e) => {
                                assert!(start.elapsed() < PATIENCE, "{e}");
                                ERRORS.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(Duration::from_millis(5));
                            }
                        }
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    let start = Instant::now();
    while let Err(e) = stock.flush() {
        assert!(start.elapsed() < PATIENCE, "{e}");
        ERRORS.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(5));
    }
    println!("FLEET errors {}", ERRORS.load(Ordering::Relaxed));
    println!("FLEET sold {sold}");
    println!("FLEET trips {}", stock.stats().round_trips);
    // Its net take, read before the drop deletes its record.
    let client = redis::Client::open(url).unwrap();
    let rec: String = redis::cmd("HGET")
        .arg(format!("{PREFIX}__leases:{NAME}"))
        .arg(stock.token())
        .query(&mut client.get_connection().unwrap())
        .unwrap();
    println!("FLEET net {}", rec.split(' ').nth(2).unwrap());
}

struct Proc {
    child: Child,
    record: PathBuf,
}

fn spawn(server: &Server, chunk: u64, pace: u64, n: usize) -> Proc {
    spawn_with(server, chunk, pace, n, None)
}

/// A child that first calls `init(init)` when it is `Some`.
fn spawn_with(server: &Server, chunk: u64, pace: u64, n: usize, init: Option<u64>) -> Proc {
    let record = server.dir.join(format!("record-{n}"));
    let mut command = Command::new(std::env::current_exe().unwrap());
    if let Some(init) = init {
        command.env("FLEET_INIT", init.to_string());
    }
    let child = command
        .args(["child", "--exact", "--nocapture", "--test-threads=1"])
        .env("FLEET_CHILD_URL", server.url())
        .env("FLEET_THREADS", THREADS.to_string())
        .env("FLEET_CHUNK", chunk.to_string())
        .env("FLEET_PACE", pace.to_string())
        .env("FLEET_RECORD", &record)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    Proc { child, record }
}

/// What a child printed: token, whether its `init` set the stock, and,
/// if it finished, what it sold and its net take as Redis recorded it.
struct Outcome {
    token: String,
    init: Option<bool>,
    sold: Option<u64>,
    net: Option<i64>,
    errors: Option<u64>,
    ok: bool,
}

fn outcome(mut p: Proc) -> Outcome {
    let mut out = String::new();
    p.child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let ok = p.child.wait().unwrap().success();
    let field = |k: &str| {
        out.lines()
            .find_map(|l| Some(l.split_once(&format!("FLEET {k} "))?.1.trim().to_owned()))
    };
    Outcome {
        token: field("token").expect("the child printed its token"),
        init: field("init").map(|s| s.parse().unwrap()),
        sold: field("sold").map(|s| s.parse().unwrap()),
        net: field("net").map(|s| s.parse().unwrap()),
        errors: field("errors").map(|s| s.parse().unwrap()),
        ok,
    }
}

/// Sales the child recorded (each thread's last record).
fn recorded(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .sum()
}

fn remaining(server: &Server) -> i64 {
    let v: Option<i64> = redis::cmd("GET")
        .arg(format!("{PREFIX}{NAME}"))
        .query(&mut server.conn())
        .unwrap();
    v.unwrap_or(0)
}

/// Each token's net take (granted − returned) from the leases hash.
fn nets(server: &Server) -> HashMap<String, i64> {
    let h: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(format!("{PREFIX}__leases:{NAME}"))
        .query(&mut server.conn())
        .unwrap();
    h.into_iter()
        .map(|(k, v)| (k, v.split(' ').nth(2).unwrap().parse().unwrap()))
        .collect()
}

fn stock_init(server: &Server) {
    let _: () = redis::cmd("SET")
        .arg(format!("{PREFIX}{NAME}"))
        .arg(INITIAL)
        .query(&mut server.conn())
        .unwrap();
}

/// Waits until Redis holds less than `below` (the run is under way).
fn wait_below(server: &Server, below: i64) {
    let start = Instant::now();
    while remaining(server) >= below {
        assert!(start.elapsed() < PATIENCE, "the children sold nothing");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Every process finished: sold == `initial` exactly, Redis at zero, and
/// each process's net take in Redis equals its sales.
fn check_exact(server: &Server, procs: Vec<Proc>, initial: u64) -> Vec<Outcome> {
    let mut total = 0;
    let done: Vec<_> = procs.into_iter().map(outcome).collect();
    for o in &done {
        assert!(o.ok, "a child failed");
        let sold = o.sold.unwrap();
        assert_eq!(o.net, Some(sold as i64), "net take of {}", o.token);
        total += sold;
    }
    assert_eq!(remaining(server), 0);
    assert_eq!(total, initial, "sold");
    done
}

fn leases_fields(server: &Server) -> i64 {
    redis::cmd("HLEN")
        .arg(format!("{PREFIX}__leases:{NAME}"))
        .query(&mut server.conn())
        .unwrap()
}

#[test]
fn three_processes_drain_to_exactly_zero() {
    let server = Server::started("everysec");
    stock_init(&server);
    let procs: Vec<Proc> = (0..PROCESSES).map(|n| spawn(&server, 100, 0, n)).collect();
    let done = check_exact(&server, procs, INITIAL);
    // Each clean exit deleted its record: runs leave nothing behind. (A
    // child that saw a Redis error, a timeout, may keep its record.)
    let unclean = done.iter().filter(|o| o.errors != Some(0)).count();
    assert!(leases_fields(&server) <= unclean as i64);
}

/// The same start-up code in every process: `init` sets the stock once,
/// and the fleet sells exactly it (not once per process).
#[test]
fn three_processes_that_each_init_sell_exactly_the_stock_once() {
    let server = Server::started("everysec");
    let procs: Vec<Proc> = (0..PROCESSES)
        .map(|n| spawn_with(&server, 100, 0, n, Some(10_000)))
        .collect();
    let done = check_exact(&server, procs, 10_000);
    let sets = done.iter().filter(|o| o.init == Some(true)).count();
    assert_eq!(sets, 1, "exactly one init set the stock");
    // Sold out, a late init leaves the stock at 0.
    let late = FleetStock::new(&server.url(), PREFIX, NAME, config(100)).unwrap();
    assert!(!late.init(10_000).unwrap());
    assert_eq!(remaining(&server), 0);
}

/// `appendfsync always`: what FleetStock's docs say Redis before 7.2
/// needs for a restart to lose no confirmed take.
#[test]
fn redis_killed_and_restarted_mid_run_never_oversold() {
    let mut server = Server::started("always");
    stock_init(&server);
    let procs: Vec<Proc> = (0..PROCESSES).map(|n| spawn(&server, 50, 10, n)).collect();
    wait_below(&server, (INITIAL * 9 / 10) as i64);
    server.kill();
    std::thread::sleep(Duration::from_millis(300));
    server.start();
    assert!(remaining(&server) > 0, "killed after the run: not mid-run");
    check_exact(&server, procs, INITIAL);
}

#[test]
fn a_worker_killed_mid_run_strands_at_most_its_lease() {
    let chunk = 200;
    let server = Server::started("everysec");
    stock_init(&server);
    let mut procs: Vec<Proc> = (0..PROCESSES)
        .map(|n| spawn(&server, chunk, 10, n))
        .collect();
    wait_below(&server, (INITIAL * 8 / 10) as i64);
    let mut victim = procs.remove(0);
    victim.child.kill().unwrap();
    assert!(remaining(&server) > 0, "killed after the run: not mid-run");
    let record = victim.record.clone();
    let victim = outcome(victim);
    assert_eq!(victim.sold, None, "killed before it finished");
    let mut survivors_sold = 0;
    let done: Vec<_> = procs.into_iter().map(outcome).collect();
    for o in &done {
        assert!(o.ok);
        assert_eq!(o.net, Some(o.sold.unwrap() as i64));
        survivors_sold += o.sold.unwrap();
    }
    // The victim's record stays, the one record of what it stranded; the
    // survivors deleted theirs at exit (those without a Redis error must).
    let nets = nets(&server);
    let unclean = done.iter().filter(|o| o.errors != Some(0)).count();
    assert!(nets.len() <= 1 + unclean, "{nets:?}");
    let token = victim.token;
    // Redis's accounting is exact: every unit is in Redis (now none) or
    // in some process's net take, so nothing was granted twice.
    assert_eq!(remaining(&server), 0);
    let victim_net = nets[&token];
    assert_eq!(survivors_sold as i64 + victim_net, INITIAL as i64);
    // The victim sold at most what it took (a local `Stock`), and at
    // least what it recorded; the rest is stranded: at most its lease
    // (one chunk for try_sub(1)), plus up to one sale per thread made and
    // not yet recorded when it died.
    let victim_recorded = recorded(&record) as i64;
    let stranded = victim_net - victim_recorded;
    assert!(stranded >= 0, "the victim sold more than it took");
    assert!(
        stranded <= (chunk + THREADS as u64) as i64,
        "stranded {stranded} > chunk {chunk} + {THREADS}"
    );
}

fn eval(server: &Server, token: &str, seq: u64, kind: &str, n: u64) -> Vec<i64> {
    redis::cmd("EVAL")
        .arg(LEASE_SCRIPT)
        .arg(2)
        .arg(format!("{PREFIX}{NAME}"))
        .arg(format!("{PREFIX}__leases:{NAME}"))
        .arg(token)
        .arg(seq)
        .arg(kind)
        .arg(n)
        .query(&mut server.conn())
        .unwrap()
}

#[test]
fn a_repeated_script_call_grants_and_returns_once() {
    let server = Server::started("everysec");
    let _: () = redis::cmd("SET")
        .arg(format!("{PREFIX}{NAME}"))
        .arg(25)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(eval(&server, "t1", 1, "t", 10), [1, 10, 15, 0]);
    // The same take again (its reply was lost): same grant, nothing taken.
    assert_eq!(eval(&server, "t1", 1, "t", 10), [0, 10, 15, 0]);
    assert_eq!(remaining(&server), 15);
    // A take never goes below zero: it grants what is left.
    assert_eq!(eval(&server, "t2", 1, "t", 40), [1, 15, 0, 0]);
    assert_eq!(eval(&server, "t2", 1, "t", 40), [0, 15, 0, 0]);
    // A repeated return adds once.
    assert_eq!(eval(&server, "t1", 2, "r", 4), [1, 4, 4, 0]);
    assert_eq!(eval(&server, "t1", 2, "r", 4), [0, 4, 4, 0]);
    assert_eq!(remaining(&server), 4);
    // An older number changes nothing.
    assert_eq!(eval(&server, "t1", 1, "t", 10), [-2, 2]);
    // A skipped number (an op Redis confirmed and lost) is reported.
    assert_eq!(eval(&server, "t1", 5, "t", 1), [1, 1, 3, 2]);
    let n = nets(&server);
    assert_eq!((n["t1"], n["t2"]), (10 - 4 + 1, 15));
    // A key of another type: nothing is changed.
    let _: () = redis::cmd("SET")
        .arg(format!("{PREFIX}{NAME}"))
        .arg("x")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(eval(&server, "t1", 6, "t", 1), [-1]);
}

#[test]
fn a_split_part_counts_its_script_calls_and_refuses_a_corrupt_counter() {
    let server = Server::started("everysec");
    let calls = format!("{PREFIX}{NAME}__calls");
    let call = |seq: u64| -> Vec<i64> {
        redis::cmd("EVAL")
            .arg(LEASE_SCRIPT)
            .arg(3)
            .arg(format!("{PREFIX}{NAME}"))
            .arg(format!("{PREFIX}__leases:{NAME}"))
            .arg(&calls)
            .arg("t1")
            .arg(seq)
            .arg("a")
            .arg(5)
            .query(&mut server.conn())
            .unwrap()
    };
    assert_eq!(call(1), [1, 5, 5, 0]);
    assert_eq!(call(1), [0, 5, 5, 0], "a repeat counts as a call too");
    let n: i64 = redis::cmd("GET")
        .arg(&calls)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(n, 2);
    set_raw(&server, &calls, &["SET", "x"]);
    assert_eq!(call(2), [-1]);
    set_raw(&server, &calls, &["HSET", "f", "1"]);
    assert_eq!(call(2), [-1]);
    assert_eq!(remaining(&server), 5, "a refused call changed the stock");
}

/// A proxy to `to` that, once, forwards an EVALSHA and drops its reply
/// (closing the connection): the script ran, the client never heard.
fn reply_dropping_proxy(to: u16) -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&dropped);
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let server = TcpStream::connect(("127.0.0.1", to)).unwrap();
            let armed = Arc::new(AtomicBool::new(false));
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let arm = Arc::clone(&armed);
            let once = Arc::clone(&flag);
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = c_in.read(&mut buf) {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    if text.contains("EVALSHA") && !once.load(Ordering::SeqCst) {
                        arm.store(true, Ordering::SeqCst);
                    }
                    if s_out.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
            let (mut s_in, mut c_out) = (server, client);
            let once = Arc::clone(&flag);
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = s_in.read(&mut buf) {
                    if armed.load(Ordering::SeqCst) && !once.swap(true, Ordering::SeqCst) {
                        let _ = c_out.shutdown(std::net::Shutdown::Both);
                        let _ = s_in.shutdown(std::net::Shutdown::Both);
                        return;
                    }
                    if c_out.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, dropped)
}

#[test]
fn a_lost_take_reply_never_doubles_the_lease() {
    let server = Server::started("everysec");
    let _: () = redis::cmd("SET")
        .arg(format!("{PREFIX}{NAME}"))
        .arg(1000)
        .query(&mut server.conn())
        .unwrap();
    let (port, dropped) = reply_dropping_proxy(server.port);
    let stock = FleetStock::new(
        &format!("redis://127.0.0.1:{port}"),
        PREFIX,
        NAME,
        config(100),
    )
    .unwrap();
    // The take runs in Redis, its reply is lost: an error, nothing leased.
    let e = stock.try_sub(1).unwrap_err();
    assert!(matches!(e, FleetError::Redis(_)), "{e}");
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(stock.lease(), 0);
    assert_eq!(remaining(&server), 900);
    // The retry resends the same take and gets the same grant, once.
    stock.try_sub(1).unwrap();
    assert_eq!(stock.lease(), 99);
    assert_eq!(remaining(&server), 900);
    let s = stock.stats();
    assert_eq!((s.granted, s.round_trips), (100, 2)); // lost, resent, none more
    assert_eq!(stock.flush().unwrap(), 99);
    assert_eq!(remaining(&server), 999);
    assert_eq!(nets(&server)[&stock.token()], 1);
}

/// A proxy to `to` that, once armed (`hold`), keeps the next request
/// holding an EVALSHA, and what follows it on that connection, until
/// `release`, then sends them on its upstream connection, still open: a
/// request delayed in the network past the client's timeout. With
/// `close`, it also closes the client's side as it keeps the request (the
/// client finds its connection closed, and resends at once).
fn delaying_proxy(to: u16, close: bool) -> (u16, Arc<AtomicBool>, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (hold, release) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (h, r) = (Arc::clone(&hold), Arc::clone(&release));
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let server = TcpStream::connect(("127.0.0.1", to)).unwrap();
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (h, r) = (Arc::clone(&h), Arc::clone(&r));
            std::thread::spawn(move || {
                let (mut buf, mut kept) = ([0u8; 65536], None::<Vec<u8>>);
                while let Ok(n @ 1..) = c_in.read(&mut buf) {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    if kept.is_none() && text.contains("EVALSHA") && h.swap(false, Ordering::SeqCst)
                    {
                        kept = Some(Vec::new());
                        if close {
                            let _ = c_in.shutdown(std::net::Shutdown::Both);
                        }
                    }
                    match &mut kept {
                        Some(k) => k.extend_from_slice(&buf[..n]),
                        None if s_out.write_all(&buf[..n]).is_err() => return,
                        None => {}
                    }
                }
                if let Some(k) = kept {
                    while !r.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    let _ = s_out.write_all(&k);
                    std::thread::sleep(Duration::from_secs(1)); // Redis runs it
                }
            });
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = s_in.read(&mut buf) {
                    if c_out.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
                let _ = c_out.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (port, hold, release)
}

/// A stock 10 below 2^53 (where an add of 20 is refused as too large),
/// and a stock on it through a `delaying_proxy(close)`: the server, that
/// stock, the starting value, and the proxy's `hold` and `release`.
fn near_the_bound(close: bool) -> (Server, FleetStock, i64, Arc<AtomicBool>, Arc<AtomicBool>) {
    let server = Server::started("always");
    let start = (1i64 << 53) - 10;
    set_raw(
        &server,
        &format!("{PREFIX}{NAME}"),
        &["SET", &start.to_string()],
    );
    let (port, hold, release) = delaying_proxy(server.port, close);
    let url = format!("redis://127.0.0.1:{port}");
    let p = FleetStock::new(&url, PREFIX, NAME, config(5)).unwrap();
    (server, p, start, hold, release)
}

/// An add refused as too large gives its number up, never used again:
/// an earlier copy may still land. Twice: the first request times out and
/// the next call's resend is refused; the connection is found closed and
/// the same call's resend is refused. (The number was given back, and the
/// next take reused it: when the delayed add landed first, Redis answered
/// the take as a repeat of the add, and the lease gained 20 units Redis
/// never gave out.)
#[test]
fn an_add_refused_as_too_large_never_lends_its_number_to_a_take() {
    for close in [false, true] {
        let (server, p, start, hold, release) = near_the_bound(close);
        assert_eq!(p.remaining().unwrap(), start); // connected, script loaded
        hold.store(true, Ordering::SeqCst);
        if !close {
            assert!(matches!(p.add(20), Err(FleetError::Redis(_))), "delayed");
        }
        assert!(
            matches!(p.add(20), Err(FleetError::Invalid(_))),
            "resent: too large"
        );
        let q = FleetStock::new(&server.url(), PREFIX, NAME, config(100)).unwrap();
        q.try_sub(1).unwrap();
        release.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + PATIENCE;
        while remaining(&server) != start - 100 + 20 {
            assert!(Instant::now() < deadline, "the delayed add never landed");
            std::thread::sleep(Duration::from_millis(5));
        }
        // p's next take: what it holds came out of Redis.
        let before = remaining(&server);
        p.try_sub(1).unwrap();
        assert_eq!(
            p.lease() as i64 + 1,
            before - remaining(&server),
            "close: {close}"
        );
        assert_eq!(
            p.stats().lost_ops,
            0,
            "a number given up is not a lost operation"
        );
    }
}

/// A flush whose resend of a failed add is refused as too large still
/// returns the lease, then reports the refusal. (It stopped at the add:
/// the lease stayed, and a drop, which tries once, stranded it.)
#[test]
fn a_flush_returns_the_lease_past_a_resent_add_refused_as_too_large() {
    let (server, p, start, hold, _release) = near_the_bound(false);
    p.try_sub(1).unwrap(); // a lease of 4
    hold.store(true, Ordering::SeqCst);
    assert!(matches!(p.add(20), Err(FleetError::Redis(_))), "delayed");
    assert!(matches!(p.flush(), Err(FleetError::Invalid(_))));
    let s = p.stats();
    assert_eq!((p.lease(), s.in_flight, s.returned), (0, 0, 4));
    assert_eq!(remaining(&server), start - 1);
    assert_eq!(p.flush(), Ok(0));
}

/// A drop whose return meets a resent add refused as too large (one that
/// failed with an error Redis answered, so no copy of it can be queued)
/// returns the lease and deletes the token's record, as a clean drop does
/// (it left the record).
#[test]
fn a_drop_past_a_resent_add_refused_as_too_large_deletes_its_record() {
    let server = Server::started("always");
    let key = format!("{PREFIX}{NAME}");
    set_raw(&server, &key, &["SET", "100"]);
    let p = FleetStock::new(&server.url(), PREFIX, NAME, config(10)).unwrap();
    p.try_sub(1).unwrap(); // a lease of 9, and a record
    assert_eq!(leases_fields(&server), 1);
    let maxmemory = |n: u64| {
        let _: () = redis::cmd("CONFIG")
            .arg(&["SET", "maxmemory", &n.to_string()])
            .query(&mut server.conn())
            .unwrap();
    };
    maxmemory(1);
    assert!(
        matches!(p.add(20), Err(FleetError::Redis(_))),
        "refused: out of memory"
    );
    maxmemory(0);
    let start = (1i64 << 53) - 10;
    set_raw(&server, &key, &["SET", &start.to_string()]);
    drop(p);
    assert_eq!(remaining(&server), start + 9, "the lease went back");
    assert_eq!(leases_fields(&server), 0, "the record is deleted");
}

/// A flush that resends a return left in flight by a failed one counts
/// those units in what it returned.
#[test]
fn a_flush_counts_the_units_of_a_return_it_resends() {
    let mut server = Server::started("always");
    let s = FleetStock::new(&server.url(), PREFIX, NAME, config(10)).unwrap();
    s.add(100).unwrap();
    s.try_sub(1).unwrap(); // a lease of 9
    server.kill();
    assert!(matches!(s.flush(), Err(FleetError::Redis(_))));
    assert_eq!(s.stats().in_flight, 9);
    server.start();
    assert_eq!(s.flush().unwrap(), 9);
    assert_eq!(remaining(&server), 99);
}

#[test]
fn insufficient_only_when_lease_and_redis_are_both_short() {
    let server = Server::started("everysec");
    let _: () = redis::cmd("SET")
        .arg(format!("{PREFIX}{NAME}"))
        .arg(7)
        .query(&mut server.conn())
        .unwrap();
    let a = FleetStock::new(&server.url(), PREFIX, NAME, config(5)).unwrap();
    let b = FleetStock::new(&server.url(), PREFIX, NAME, config(5)).unwrap();
    a.try_sub(1).unwrap(); // a leases 5, keeps 4
    b.try_sub(2).unwrap(); // b leases the last 2
    let e = b.try_sub(1).unwrap_err();
    let FleetError::Insufficient(i) = e else {
        panic!("{e}")
    };
    assert_eq!((i.requested(), i.available()), (1, 0));
    // a's lease (at most one chunk) still sells.
    for _ in 0..4 {
        a.try_sub(1).unwrap();
    }
    assert!(matches!(a.try_sub(1), Err(FleetError::Insufficient(_))));
    // A take above the chunk asks for all of it at once.
    b.add(20).unwrap();
    b.try_sub(12).unwrap();
    assert_eq!((b.lease(), remaining(&server)), (0, 8));
    assert_eq!(b.flush().unwrap(), 0);
    b.try_sub(8).unwrap();
    // A restock is seen at once.
    assert_eq!(b.add(3).unwrap(), 3);
    b.try_sub(3).unwrap();
    assert_eq!(remaining(&server), 0);
    // Redis forgets its scripts: the next add and take (a take waits for
    // the fsync in the same pipeline) load the script again and go through.
    let flush_scripts = || {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut server.conn())
            .unwrap();
    };
    flush_scripts();
    assert_eq!(b.add(2).unwrap(), 2);
    flush_scripts();
    b.try_sub(2).unwrap();
    assert_eq!((b.lease(), remaining(&server)), (0, 0));
}

#[test]
fn idle_leases_and_dropped_stocks_go_back() {
    let server = Server::started("everysec");
    let idle = FleetStock::new(
        &server.url(),
        PREFIX,
        NAME,
        FleetStockConfig {
            idle: Duration::from_millis(20),
            ..config(10)
        },
    )
    .unwrap();
    idle.add(100).unwrap();
    idle.try_sub(1).unwrap();
    let start = Instant::now();
    while idle.lease() != 0 {
        assert!(start.elapsed() < PATIENCE, "the idle lease never went back");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(remaining(&server), 99);
    let dropped = FleetStock::new(&server.url(), PREFIX, NAME, config(10)).unwrap();
    dropped.try_sub(3).unwrap();
    assert_eq!(remaining(&server), 89);
    drop(dropped);
    assert_eq!(remaining(&server), 96);
}

#[test]
fn redis_down_fails_cleanly_and_the_lease_keeps_selling() {
    let mut server = Server::started("always");
    let s = FleetStock::new(&server.url(), PREFIX, NAME, config(10)).unwrap();
    s.add(100).unwrap();
    s.try_sub(1).unwrap();
    server.kill();
    for _ in 0..9 {
        s.try_sub(1).unwrap();
    }
    assert!(matches!(s.try_sub(1), Err(FleetError::Redis(_))));
    server.start();
    s.try_sub(1).unwrap();
    assert_eq!(remaining(&server), 80);
}

#[test]
fn cached_reads_make_one_round_trip_and_match_the_exporter() {
    let server = Server::started("everysec");
    let (a, b) = (Arc::new(Counter::new()), Arc::new(RoughCounter::new()));
    let sink = RedisSink::new(&server.url(), "r:").unwrap();
    let exporter = Exporter::new(sink, Duration::from_secs(60));
    exporter.register("a", Arc::clone(&a));
    exporter.register("b", Arc::clone(&b));
    a.add(5);
    b.add(7);
    exporter
        .flush(Instant::now() + Duration::from_secs(10))
        .unwrap();
    let reader = FleetReader::new(&server.url(), "r:", Duration::from_secs(600)).unwrap();
    let one = reader.key("a");
    let two = reader.keys(["a", "b", "absent"]);
    let all = reader.all();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut server.conn())
        .unwrap();
    // Four threads race for the first read: one fetches, the others wait
    // for it (the set was never read), and nobody fetches again.
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..1000 {
                    assert_eq!(two.total().unwrap().value, 12);
                }
            });
        }
    });
    for _ in 0..1000 {
        assert_eq!(one.total().unwrap().value, 5);
        assert_eq!(two.get(1).unwrap().unwrap().value, 7);
        assert_eq!(two.total().unwrap().value, 12);
        assert_eq!(all.total().unwrap().value, 12);
    }
    assert_eq!(server.calls("mget"), 2, "one MGET per key set");
    assert_eq!(server.calls("eval"), 1, "one script run for every key");
    assert_eq!(reader.round_trips(), 3);
    let (values, _) = all.values().unwrap();
    assert_eq!(values, [("a".to_owned(), 5), ("b".to_owned(), 7)]);
    assert_eq!(two.get(2).unwrap().unwrap().value, 0);
    assert_eq!(two.get(3).unwrap(), None);
    // Within the TTL, a new export is not seen; the cache is the point.
    a.add(1);
    exporter
        .flush(Instant::now() + Duration::from_secs(10))
        .unwrap();
    assert_eq!(one.total().unwrap().value, 5);
}

/// A key under the prefix whose name is not UTF-8 (another program's) is
/// left out of `all()`; the others are read. (It failed every refresh.)
#[test]
fn all_leaves_out_a_key_whose_name_is_not_utf8() {
    let server = Server::started("everysec");
    let mut c = server.conn();
    let _: () = redis::cmd("SET").arg("r:a").arg(5).query(&mut c).unwrap();
    let _: () = redis::cmd("SET")
        .arg(&b"r:\xff"[..])
        .arg(1)
        .query(&mut c)
        .unwrap();
    let reader = FleetReader::new(&server.url(), "r:", Duration::from_millis(1)).unwrap();
    let all = reader.all();
    assert_eq!(all.total().map(|r| r.value), Ok(5));
}

/// A key of a fixed set whose value is not UTF-8 fails the set naming
/// that key, as any value that is not an integer does (it failed with a
/// decoding error naming none).
#[test]
fn a_value_that_is_not_utf8_names_its_key() {
    let server = Server::started("everysec");
    let mut c = server.conn();
    let _: () = redis::cmd("SET")
        .arg("r:k")
        .arg(&b"\xff"[..])
        .query(&mut c)
        .unwrap();
    let reader = FleetReader::new(&server.url(), "r:", Duration::from_millis(1)).unwrap();
    let e = reader.key("k").total().unwrap_err();
    assert!(e.to_string().contains("r:k is not an integer"), "{e}");
}

/// A kept connection the server closed meanwhile (its idle `timeout`, a
/// restart; here `CLIENT KILL`) costs no refresh: the read is sent again
/// on a fresh one. (It failed, and the values stayed a TTL older.)
#[test]
fn a_refresh_on_a_connection_the_server_closed_reads_on_a_fresh_one() {
    let server = Server::started("everysec");
    let mut c = server.conn();
    let _: () = redis::cmd("SET").arg("r:k").arg(1).query(&mut c).unwrap();
    let ttl = Duration::from_millis(10);
    let reader = FleetReader::new(&server.url(), "r:", ttl).unwrap();
    let k = reader.key("k");
    assert_eq!(k.total().map(|r| r.value), Ok(1));
    let _: () = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET").arg("r:k").arg(2).query(&mut c).unwrap();
    std::thread::sleep(2 * ttl);
    assert_eq!(k.total().map(|r| r.value), Ok(2));
}

#[test]
fn redis_down_reads_return_the_last_values_with_their_age() {
    let mut server = Server::started("everysec");
    let _: () = redis::cmd("SET")
        .arg("r:k")
        .arg(42)
        .query(&mut server.conn())
        .unwrap();
    let reader = FleetReader::new(&server.url(), "r:", Duration::from_millis(10))
        .unwrap()
        .with_timeout(Duration::from_millis(200));
    let k = reader.key("k");
    assert_eq!(k.total().unwrap().value, 42);
    // Past the TTL, the next read fetches again.
    let _: () = redis::cmd("SET")
        .arg("r:k")
        .arg(43)
        .query(&mut server.conn())
        .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(k.total().unwrap().value, 43);
    assert_eq!(reader.round_trips(), 2);
    server.kill();
    std::thread::sleep(Duration::from_millis(50));
    let r = k.total().unwrap();
    assert_eq!(r.value, 43);
    assert!(r.age >= Duration::from_millis(50), "{:?}", r.age);
    // Never read: a clear error.
    let never = reader.key("other").total().unwrap_err();
    assert!(never.to_string().starts_with("fleet read: never read: "));
}

/// A documented panic (`add` above 2^53) must not poison the link for the
/// idle worker: the lease still goes back once idle.
#[test]
fn a_panic_in_add_does_not_strand_the_idle_lease() {
    let server = Server::started("everysec");
    let stock = FleetStock::new(
        &server.url(),
        PREFIX,
        NAME,
        FleetStockConfig {
            idle: Duration::from_millis(40),
            ..config(100)
        },
    )
    .unwrap();
    assert!(stock.init(1000).unwrap());
    stock.try_sub(1).unwrap();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = stock.add((1 << 53) + 1);
    }));
    assert!(panicked.is_err(), "add above 2^53 panics, as documented");
    stock.try_sub(1).unwrap();
    let start = Instant::now();
    while stock.lease() != 0 {
        assert!(start.elapsed() < PATIENCE, "the idle lease never went back");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(remaining(&server), 998);
}

fn set_raw(server: &Server, key: &str, cmd: &[&str]) {
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query(&mut server.conn())
        .unwrap();
    let mut c = redis::cmd(cmd[0]);
    c.arg(key);
    for a in &cmd[1..] {
        c.arg(*a);
    }
    let _: () = c.query(&mut server.conn()).unwrap();
}

/// `field`'s value in the server's `INFO section`, if it has one.
fn info_field(server: &Server, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query(&mut server.conn())
        .unwrap();
    let prefix = format!("{field}:");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|v| v.trim().to_owned())
}

/// Waits until the server's AOF buffer is written to the kernel
/// (`aof_buffer_length:0` in `INFO persistence`).
fn aof_written(server: &Server) {
    let start = Instant::now();
    loop {
        let buffered = info_field(server, "persistence", "aof_buffer_length")
            .expect("no aof_buffer_length: is AOF on?");
        if buffered.parse::<u64>().unwrap() == 0 {
            return;
        }
        assert!(start.elapsed() < PATIENCE, "the AOF buffer never drained");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn connections(server: &Server) -> u64 {
    info_field(server, "stats", "total_connections_received")
        .unwrap()
        .parse()
        .unwrap()
}

/// Wrong contents are `Corrupt` on every call (never `Redis`, which says
/// "retry"), and cost no reconnect; once repaired, the stock sells.
#[test]
fn corrupt_stock_keys_are_corrupt_for_every_call_and_keep_the_connection() {
    let server = Server::started("everysec");
    let key = format!("{PREFIX}{NAME}");
    let stock = FleetStock::new(&server.url(), PREFIX, NAME, config(10)).unwrap();
    let corrupt = |r: Result<(), FleetError>, what: &str| match r {
        Err(FleetError::Corrupt(_)) => {}
        other => panic!("{what}: {other:?}, not Corrupt"),
    };
    for contents in [
        &["HSET", "f", "1"][..],
        &["SET", "99999999999999999999"],
        &["SET", "9007199254740993"],
        &["SET", "x"],
    ] {
        set_raw(&server, &key, contents);
        corrupt(stock.remaining().map(drop), "remaining");
        let before = connections(&server);
        for _ in 0..5 {
            corrupt(stock.try_sub(1), "try_sub");
            corrupt(stock.add(1).map(drop), "add");
        }
        // The test's own INFO connection is the one new connection.
        assert_eq!(connections(&server), before + 1, "{contents:?}");
    }
    set_raw(&server, &key, &["HSET", "f", "1"]);
    corrupt(stock.init(5).map(drop), "init");
    // A leases hash of another type, or a record that is not one.
    let leases = format!("{PREFIX}__leases:{NAME}");
    set_raw(&server, &key, &["SET", "10"]);
    set_raw(&server, &leases, &["SET", "x"]);
    corrupt(stock.try_sub(1), "try_sub, leases of another type");
    set_raw(
        &server,
        &leases,
        &["HSET", &stock.token(), "1 99999999999999999999999 1"],
    );
    corrupt(stock.try_sub(1), "try_sub, a record out of range");
    // Repaired: the pending take goes through, once.
    let _: () = redis::cmd("DEL")
        .arg(&leases)
        .query(&mut server.conn())
        .unwrap();
    stock.try_sub(1).unwrap();
    assert_eq!((stock.lease(), remaining(&server)), (9, 0));
}

#[test]
fn a_zero_timeout_is_refused_at_construction() {
    let zero = FleetStockConfig {
        timeout: Duration::ZERO,
        ..FleetStockConfig::default()
    };
    let e = FleetStock::new("redis://127.0.0.1:1", PREFIX, NAME, zero).unwrap_err();
    assert!(
        matches!(&e, FleetError::Invalid(m) if m.contains("timeout")),
        "{e}"
    );
}

/// A clean drop deletes the process's record: 24 runs leave no field.
#[test]
fn dropped_stocks_leave_no_record_behind() {
    let server = Server::started("everysec");
    for run in 0..24 {
        let s = FleetStock::new(&server.url(), PREFIX, NAME, config(10)).unwrap();
        if run == 0 {
            assert!(s.init(1000).unwrap());
        }
        s.try_sub(1).unwrap();
        assert_eq!(leases_fields(&server), 1);
    }
    assert_eq!(leases_fields(&server), 0);
    assert_eq!(remaining(&server), 1000 - 24);
}

#[test]
fn a_very_long_ttl_still_caches() {
    let server = Server::started("everysec");
    let reader = FleetReader::new(&server.url(), "r:", Duration::from_secs(1 << 55)).unwrap();
    let k = reader.key("k");
    for _ in 0..10 {
        assert_eq!(k.total().unwrap().value, 0);
    }
    assert_eq!(reader.round_trips(), 1);
    let forever = FleetReader::new(&server.url(), "r:", Duration::MAX).unwrap();
    let k = forever.key("k");
    for _ in 0..10 {
        assert_eq!(k.total().unwrap().value, 0);
    }
    assert_eq!(forever.round_trips(), 1);
}

#[test]
fn an_empty_key_set_reads_zero_without_a_round_trip() {
    let server = Server::started("everysec");
    let reader = FleetReader::new(&server.url(), "r:", Duration::from_secs(1)).unwrap();
    let none = reader.keys(Vec::<String>::new());
    assert_eq!(none.total().unwrap().value, 0);
    assert_eq!(none.values().unwrap().0, []);
    assert_eq!(reader.round_trips(), 0);
}

#[test]
#[should_panic(expected = "FleetReader::with_timeout: the timeout must not be zero")]
fn a_zero_reader_timeout_panics_naming_it() {
    let _ = FleetReader::new("redis://127.0.0.1:1", "z:", Duration::from_secs(1))
        .unwrap()
        .with_timeout(Duration::ZERO);
}

/// An add that would take the stock to 2^53 (where the script's doubles
/// stop being exact) is refused, changes nothing, and leaves no operation
/// pending: the stock keeps working.
#[test]
fn an_add_past_2_pow_53_is_refused_and_the_stock_keeps_working() {
    let server = Server::started("everysec");
    let stock = FleetStock::new(&server.url(), PREFIX, NAME, config(10)).unwrap();
    let top = (1i64 << 53) - 1;
    assert_eq!(stock.add(top as u64).unwrap(), top);
    let e = stock.add(1).unwrap_err();
    assert!(
        matches!(&e, FleetError::Invalid(m) if m.contains("2^53")),
        "{e}"
    );
    assert_eq!(stock.remaining().unwrap(), top);
    stock.try_sub(1).unwrap();
    assert_eq!(stock.remaining().unwrap(), top - 10);
    assert_eq!(stock.stats().lost_ops, 0, "the refused add used no number");
    assert_eq!(stock.add(10).unwrap(), top);
}

// Issue 43's review: inits racing sales, Redis restarts (AOF on), and
// whether a dropped stock's cleanup can touch a live one's record.

/// `init` from other clients racing sales (and after sold-out) never
/// resets the stock; a take before any init leaves the key absent.
#[test]
fn inits_racing_sales_never_reset_the_stock() {
    let server = Server::started("everysec");
    let url = server.url();
    // A seller that starts before the stock exists: Insufficient, no key.
    let early = FleetStock::new(&url, PREFIX, NAME, config(7)).unwrap();
    assert!(matches!(early.try_sub(1), Err(FleetError::Insufficient(_))));
    let exists: bool = redis::cmd("EXISTS")
        .arg(format!("{PREFIX}{NAME}"))
        .query(&mut server.conn())
        .unwrap();
    assert!(!exists, "a refused take created the stock key");
    let seller = FleetStock::new(&url, PREFIX, NAME, config(7)).unwrap();
    assert!(seller.init(2_000).unwrap());
    let done = AtomicBool::new(false);
    let (sold, sets, calls) = std::thread::scope(|s| {
        let initers: Vec<_> = (0..3)
            .map(|_| {
                s.spawn(|| {
                    let other = FleetStock::new(&url, PREFIX, NAME, config(7)).unwrap();
                    let (mut sets, mut calls) = (0u64, 0u64);
                    while !done.load(Ordering::SeqCst) {
                        sets += u64::from(other.init(2_000).unwrap());
                        calls += 1;
                    }
                    sets += u64::from(other.init(2_000).unwrap()); // sold out
                    (sets, calls + 1)
                })
            })
            .collect();
        let sellers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0u64;
                    loop {
                        match seller.try_sub(1).or_else(|_| early.try_sub(1)) {
                            Ok(()) => n += 1,
                            Err(FleetError::Insufficient(_)) => return n,
                            Err(e) => panic!("{e}"),
                        }
                    }
                })
            })
            .collect();
        let sold: u64 = sellers.into_iter().map(|h| h.join().unwrap()).sum();
        done.store(true, Ordering::SeqCst);
        let (sets, calls) = initers
            .into_iter()
            .map(|h| h.join().unwrap())
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
        (sold, sets, calls)
    });
    println!(
        "S1 sold {sold}, racing inits {calls}, of which set {sets}, left {}",
        remaining(&server)
    );
    assert_eq!(sets, 0);
    assert_eq!(sold, 2_000);
    assert_eq!(remaining(&server), 0);
}

/// one child inits and sells; two more start
/// mid-sale and init (the same start-up code): the stock is sold once.
#[test]
fn processes_that_init_mid_sale_sell_the_stock_once() {
    let server = Server::started("everysec");
    let first = spawn_with(&server, 50, 10, 0, Some(20_000));
    // Absent reads 0: wait for the key first, then for sales under way.
    let start = Instant::now();
    while !redis::cmd("EXISTS")
        .arg(format!("{PREFIX}{NAME}"))
        .query::<bool>(&mut server.conn())
        .unwrap()
    {
        assert!(start.elapsed() < PATIENCE);
        std::thread::sleep(Duration::from_millis(2));
    }
    wait_below(&server, 15_000);
    let late: Vec<Proc> = (1..3)
        .map(|n| spawn_with(&server, 50, 10, n, Some(20_000)))
        .collect();
    let mut procs = vec![first];
    procs.extend(late);
    let done = check_exact(&server, procs, 20_000);
    let sets: Vec<_> = done.iter().map(|o| o.init).collect();
    println!(
        "S1 children init results {sets:?}, sold {:?}",
        done.iter().map(|o| o.sold).collect::<Vec<_>>()
    );
    assert_eq!(sets, [Some(true), Some(false), Some(false)]);
}

/// Redis restarted (SIGKILL, AOF replayed) between init and sales,
/// while the stock's connection sat idle: the lease keeps selling, and
/// the first refill after the restart should reach the restarted Redis.
fn restart_between_init_and_sales(fsync: &'static str) {
    let mut server = Server::started(fsync);
    let s = FleetStock::new(&server.url(), PREFIX, NAME, config(10)).unwrap();
    assert!(s.init(100).unwrap());
    s.try_sub(1).unwrap(); // leases 10: the connection is open
                           // With `everysec`, Redis may reply before it writes its AOF buffer
                           // out (it postpones the write while a background fsync runs, up to
                           // 2 s): wait until the buffer is written, so that the kill loses
                           // nothing the kernel holds (failed once under disk load).
    aof_written(&server);
    server.kill();
    std::thread::sleep(Duration::from_millis(100));
    server.start();
    assert_eq!(remaining(&server), 90, "the AOF kept init and the take");
    for _ in 0..9 {
        s.try_sub(1).unwrap(); // from the lease
    }
    let start = Instant::now();
    let first = s.try_sub(1); // a refill, Redis is up
    println!(
        "S2 {fsync}: first refill after restart: {first:?} in {:?}",
        start.elapsed()
    );
    let second = s.try_sub(1);
    println!("S2 {fsync}: second: {second:?}");
    assert!(first.is_ok(), "spurious failure: {first:?}");
    assert!(second.is_ok());
    assert_eq!(remaining(&server), 80);
    assert_eq!(s.flush().unwrap(), 8);
    assert_eq!(remaining(&server), 88);
}

#[test]
fn a_restart_between_init_and_sales_fails_no_sale_fsync_always() {
    restart_between_init_and_sales("always");
}

#[test]
fn a_restart_between_init_and_sales_fails_no_sale_fsync_everysec() {
    restart_between_init_and_sales("everysec");
}

/// On Redis 7.2+ (WAITAOF): a take resent on a fresh connection after its
/// WAITAOF did not confirm the fsync used to write nothing there, so that
/// connection's WAITAOF confirmed it at once; the resend now writes its
/// record again. `appendfsync no` makes it deterministic: WAITAOF confirms
/// nothing there, so no take may be accepted. On a server without WAITAOF
/// (CI's Redis 7.0) it says it is skipped.
#[test]
fn a_resent_take_is_accepted_only_once_waitaof_confirms_it() {
    let server = Server::started("no");
    let v = info_field(&server, "server", "redis_version").unwrap();
    let mut p = v.split('.').map(|x| x.parse::<u32>().unwrap());
    if (p.next().unwrap(), p.next().unwrap()) < (7, 2) {
        println!("S2 WAITAOF: skipped on redis {v}");
        return;
    }
    stock_init(&server);
    let s = FleetStock::new(
        &server.url(),
        PREFIX,
        NAME,
        FleetStockConfig {
            timeout: Duration::from_millis(50),
            ..config(10)
        },
    )
    .unwrap();
    let results: Vec<_> = (0..4).map(|_| s.try_sub(1)).collect();
    println!(
        "S2 WAITAOF on {v}, appendfsync no: {results:?}; lease {}",
        s.lease()
    );
    assert!(
        results.iter().all(Result::is_err),
        "a take was accepted though WAITAOF never confirmed it on disk"
    );
}

/// a dropped stock deletes only its own record, never a live one's:
/// same process (older dropped after a newer one with the same name was
/// made), another process (children exiting), and a drop after a lost
/// reply (its record must stay, guarding the delayed copy).
#[test]
fn drops_never_delete_a_live_record() {
    let server = Server::started("everysec");
    let url = server.url();
    let leases = format!("{PREFIX}__leases:{NAME}");
    let has = |t: &str| -> bool {
        redis::cmd("HEXISTS")
            .arg(&leases)
            .arg(t)
            .query(&mut server.conn())
            .unwrap()
    };
    let old = FleetStock::new(&url, PREFIX, NAME, config(10)).unwrap();
    assert!(old.init(100_000).unwrap());
    old.try_sub(1).unwrap();
    let live = FleetStock::new(&url, PREFIX, NAME, config(10)).unwrap();
    live.try_sub(1).unwrap();
    let live_token = live.token();
    drop(old);
    assert!(
        has(&live_token),
        "dropping the older instance deleted the live record"
    );
    // Another process with the same name, selling and exiting cleanly.
    let kids: Vec<Proc> = (0..2).map(|n| spawn(&server, 50, 0, n)).collect();
    let outs: Vec<_> = kids.into_iter().map(outcome).collect();
    assert!(outs.iter().all(|o| o.ok));
    assert!(has(&live_token), "a child's drop deleted the live record");
    // The live one still sells and returns exactly.
    for _ in 0..9 {
        live.try_sub(1).unwrap();
    }
    assert_eq!(live.flush().unwrap(), 0);
    assert_eq!(nets(&server)[&live_token], 10);
    // A drop after a lost reply keeps its record.
    let (port, _) = reply_dropping_proxy(server.port);
    let lost = FleetStock::new(
        &format!("redis://127.0.0.1:{port}"),
        PREFIX,
        NAME,
        config(10),
    )
    .unwrap();
    assert!(
        matches!(lost.add(10), Err(FleetError::Redis(_))),
        "the reply is lost"
    );
    lost.add(0).unwrap(); // resends the add (applied once), then a new op
    let lost_token = lost.token();
    drop(lost);
    println!(
        "S3 live record kept: {}, lost-reply record kept: {}, fields {}",
        has(&live_token),
        has(&lost_token),
        leases_fields(&server)
    );
    assert!(
        has(&lost_token),
        "a drop after a lost reply deleted its guard"
    );
    drop(live);
    assert!(!has(&live_token));
}

/// A stock dropped after a Redis restart (its connection idle since
/// before it) returns its lease: its one try on drop used to meet the
/// dead connection and strand the lease though Redis was up.
#[test]
fn a_drop_after_a_restart_returns_the_lease() {
    let mut server = Server::started("always");
    let s = FleetStock::new(&server.url(), PREFIX, NAME, config(10)).unwrap();
    assert!(s.init(100).unwrap());
    s.try_sub(1).unwrap(); // lease 9
    server.kill();
    server.start();
    drop(s);
    let left = remaining(&server);
    println!(
        "S2 drop after restart: Redis holds {left} (99 expected), records {:?}",
        nets(&server)
    );
    assert_eq!(left, 99, "the dropped lease was stranded");
}

/// `init` and `remaining` on a connection from before a restart.
#[test]
fn init_and_remaining_work_after_a_restart() {
    let mut server = Server::started("always");
    let s = FleetStock::new(&server.url(), PREFIX, NAME, config(10)).unwrap();
    assert!(s.init(100).unwrap());
    server.kill();
    server.start();
    let init = s.init(100);
    server.kill();
    server.start();
    let rem = s.remaining();
    println!("S2 after restarts: init {init:?}, remaining {rem:?}");
    assert_eq!((init, rem), (Ok(false), Ok(100)));
}
