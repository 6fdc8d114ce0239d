//! The live view's HTTP server: std only, one request per connection, a
//! thread per connection.
//!
//! Idle and slow clients cannot blank the page:
//! * a request head must arrive whole within [`HEAD_DEADLINE`] of the
//!   connection (the deadline is for the whole head, not per read, so a
//!   client sending a byte now and then is cut off too);
//! * about [`MAX_CONNECTIONS`] connections are served at once; when a
//!   new one comes in at the limit, the oldest connection still waiting
//!   for its head is closed to make room (a request that has arrived whole
//!   is never closed for a newcomer). Only when every connection is
//!   already answering is the newcomer closed unanswered;
//! * an answer that the client does not read within [`WRITE_TIMEOUT`]
//!   is abandoned.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Connections served at once (see the module docs for who makes room).
pub const MAX_CONNECTIONS: usize = 256;
/// How long a connection may take to send its whole request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(2);
/// How long a client may take to read its answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read.
pub const MAX_HEAD: usize = 8192;

/// Connections still reading their head, oldest first, by id: the ones a
/// newcomer may close.
#[derive(Default)]
struct Reading {
    next_id: u64,
    open: VecDeque<(u64, TcpStream)>,
}

#[derive(Default)]
struct Server {
    reading: Mutex<Reading>,
    /// Connection threads alive.
    connections: AtomicUsize,
}

impl Server {
    /// Closes the oldest connection still reading its head; false if none
    /// is (every slot is answering).
    fn evict_oldest_reader(&self) -> bool {
        let oldest = self.reading.lock().unwrap().open.pop_front();
        match oldest {
            Some((_, stream)) => {
                // Its thread's read returns at once; it ends and frees its
                // slot.
                let _ = stream.shutdown(Shutdown::Both);
                true
            }
            None => false,
        }
    }

    fn done_reading(&self, id: u64) {
        self.reading.lock().unwrap().open.retain(|(i, _)| *i != id);
    }
}

/// Accepts connections for ever; `answer` turns a request head (possibly
/// cut at [`MAX_HEAD`], or empty if the client closed) into the whole
/// response, written before the connection closes.
pub fn serve<F>(listener: TcpListener, answer: F)
where
    F: Fn(&[u8]) -> Vec<u8> + Send + Sync + 'static,
{
    let server = Arc::new(Server::default());
    let answer = Arc::new(answer);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        // Relaxed: a count of threads, guarding nothing else.
        if server.connections.load(Ordering::Relaxed) >= MAX_CONNECTIONS
            && !server.evict_oldest_reader()
        {
            continue; // every slot is answering: close this one
        }
        let id = {
            let mut r = server.reading.lock().unwrap();
            r.next_id += 1;
            if let Ok(clone) = stream.try_clone() {
                let id = r.next_id;
                r.open.push_back((id, clone));
            }
            r.next_id
        };
        server.connections.fetch_add(1, Ordering::Relaxed);
        let (server, answer) = (Arc::clone(&server), Arc::clone(&answer));
        let spawned = std::thread::Builder::new().spawn({
            let server = Arc::clone(&server);
            move || {
                // A client that goes away is its own business.
                let _ = handle(stream, id, &server, &*answer);
                server.done_reading(id);
                server.connections.fetch_sub(1, Ordering::Relaxed);
            }
        });
        if spawned.is_err() {
            server.done_reading(id);
            server.connections.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Reads one request head within [`HEAD_DEADLINE`] and writes the answer.
fn handle(
    mut stream: TcpStream,
    id: u64,
    server: &Server,
    answer: &dyn Fn(&[u8]) -> Vec<u8>,
) -> std::io::Result<()> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(()); // too slow: closed unanswered
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    // Arrived whole: no newcomer may close it now.
    server.done_reading(id);
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    stream.write_all(&answer(&head))?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a hang detector.
    const PATIENCE: Duration = Duration::from_secs(30);

    fn started() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            serve(listener, |head| {
                let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
                let mut out = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_vec();
                out.extend_from_slice(line);
                out
            })
        });
        addr
    }

    fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(PATIENCE)).unwrap();
        write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).unwrap();
        reply
    }

    /// More idle connections than slots, and a client trickling a byte at
    /// a time: every new request is still answered.
    #[test]
    fn idle_and_slow_clients_do_not_starve_new_requests() {
        let addr = started();
        let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS + 44)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.set_read_timeout(Some(PATIENCE)).unwrap();
        let trickle = std::thread::spawn(move || {
            // One byte every 100 ms: cut off at the head deadline, which
            // a per-read timeout would never reach.
            let start = Instant::now();
            for b in b"GET /slow HTTP/1.1\r\nHost: x\r\n".iter().cycle() {
                if slow.write_all(&[*b]).is_err() || start.elapsed() > PATIENCE {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let mut rest = Vec::new();
            let _ = slow.read_to_end(&mut rest);
            (start.elapsed(), rest)
        });
        for i in 0..5 {
            let reply = get(addr, &format!("/state?{i}"));
            assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply:?}");
            assert!(
                reply.ends_with(&format!("GET /state?{i} HTTP/1.1")),
                "{reply:?}"
            );
        }
        let (took, rest) = trickle.join().unwrap();
        assert!(rest.is_empty(), "the slow client was answered: {rest:?}");
        assert!(took < PATIENCE, "the slow client was never cut off");
        drop(idle);
    }

    /// A client that sends nothing is closed at the head deadline, and the
    /// server goes on answering.
    #[test]
    fn a_silent_client_is_closed_at_the_head_deadline() {
        let addr = started();
        let mut silent = TcpStream::connect(addr).unwrap();
        silent.set_read_timeout(Some(PATIENCE)).unwrap();
        let start = Instant::now();
        let mut rest = Vec::new();
        let _ = silent.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{rest:?}");
        assert!(start.elapsed() >= HEAD_DEADLINE - Duration::from_millis(50));
        assert!(get(addr, "/").starts_with("HTTP/1.1 200 OK"));
    }
}
