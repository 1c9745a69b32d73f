//! A TCP proxy that can cut the network without closing it: while cut, bytes are neither
//! forwarded nor refused and new connections are accepted but go nowhere, so both ends see
//! a connection that hangs, as when packets are dropped. Healing forwards what was held, the
//! way a network that comes back delivers what TCP kept retransmitting.
#![allow(dead_code, unreachable_pub)]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub struct Proxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    /// Bytes whose passing from a client to the server cuts the network.
    trigger: Arc<Mutex<Option<Vec<u8>>>>,
}

/// What the forwarding threads of one proxy share.
#[derive(Clone)]
struct Shared {
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    trigger: Arc<Mutex<Option<Vec<u8>>>>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards each connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Shared {
            cut: Arc::new(AtomicBool::new(false)),
            stop: Arc::new(AtomicBool::new(false)),
            trigger: Arc::new(Mutex::new(None)),
        };
        let proxy = Proxy {
            port,
            cut: shared.cut.clone(),
            stop: shared.stop.clone(),
            trigger: shared.trigger.clone(),
        };
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if shared.stop.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                let shared = shared.clone();
                std::thread::spawn(move || connect(client, upstream, shared));
            }
        });
        proxy
    }

    /// From now on nothing gets through, in either direction, and nothing is closed.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Cuts as soon as a client has sent `bytes` on to the server: the server gets that
    /// message, and nothing after it, nor does its answer come back.
    pub fn cut_after(&self, bytes: &[u8]) {
        *self.trigger.lock().unwrap() = Some(bytes.to_vec());
    }

    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cut.store(false, Ordering::SeqCst);
        // Wakes the accepting thread so that it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Waits while the network is cut; `false` when the proxy stops meanwhile.
fn wait_while_cut(cut: &AtomicBool, stop: &AtomicBool) -> bool {
    while cut.load(Ordering::SeqCst) {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    !stop.load(Ordering::Relaxed)
}

fn connect(client: TcpStream, upstream: SocketAddr, shared: Shared) {
    if !wait_while_cut(&shared.cut, &shared.stop) {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream) else {
        return;
    };
    let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let to_server = shared.clone();
    std::thread::spawn(move || pump(c2, s2, &to_server, true));
    pump(server, client, &shared, false);
}

/// Copies `from` to `to`, holding what it read while the network is cut; `to_server` pumps
/// watch for the trigger.
fn pump(mut from: TcpStream, mut to: TcpStream, shared: &Shared, to_server: bool) {
    let (cut, stop) = (&*shared.cut, &*shared.stop);
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !wait_while_cut(cut, stop) || to.write_all(&buf[..n]).is_err() {
            break;
        }
        if to_server {
            let mut trigger = shared.trigger.lock().unwrap();
            let hit = trigger
                .as_deref()
                .is_some_and(|t| buf[..n].windows(t.len()).any(|w| w == t));
            if hit {
                cut.store(true, Ordering::SeqCst);
                *trigger = None;
            }
        }
    }
    if wait_while_cut(cut, stop) {
        let _ = to.shutdown(Shutdown::Write);
    }
}
