//! A TCP proxy in front of a server that can cut one connection at a chosen request: the
//! request is never forwarded (or, with [`Proxy::cut_after`], forwarded and its reply lost) and
//! the connection is closed under it, so the client sees its connection drop with a request in
//! flight that the server never ran (or ran) (a `CLIENT KILL` cannot pick a request, only a
//! connection, and a paused server holds every request alike).
//!
//! It looks for its needle in each read of what a client sent, so a request (a small command,
//! which the client writes at once) is found whole; what the same read carries besides it is
//! dropped with it, and replies on their way back are lost with the connection.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

pub struct Proxy {
    port: u16,
    cut: Arc<Cut>,
    accept: tokio::task::JoinHandle<()>,
}

/// The armed cuts, made in order: the text to look for in what a client sends, how many such
/// requests to let through first, and whether the cut request is forwarded.
#[derive(Default)]
struct Cut {
    armed: Mutex<VecDeque<(Vec<u8>, usize, bool)>>,
    done: Notify,
}

impl Cut {
    /// Whether `chunk` (one read of what a client sent) is the one to cut: `Some(forward)`.
    fn hits(&self, chunk: &[u8]) -> Option<bool> {
        let mut armed = self.armed.lock().unwrap();
        let (needle, skip, forward) = armed.front_mut()?;
        if !chunk.windows(needle.len()).any(|w| w == needle.as_slice()) {
            return None;
        }
        if *skip > 0 {
            *skip -= 1;
            return None;
        }
        let forward = *forward;
        armed.pop_front();
        if armed.is_empty() {
            self.done.notify_one();
        }
        Some(forward)
    }
}

impl Proxy {
    /// A proxy on a free loopback port in front of the server at `target` (its port).
    pub async fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(Cut::default());
        let accepting = cut.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                    continue;
                };
                tokio::spawn(relay(client, server, accepting.clone()));
            }
        });
        Proxy { port, cut, accept }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// From now on (after the cuts armed before), the `skip + 1`-th read of a client's request
    /// bytes that contains `needle` is not forwarded, and its connection is closed.
    pub fn cut_at(&self, needle: &str, skip: usize) {
        let cut = (needle.as_bytes().to_vec(), skip, false);
        self.cut.armed.lock().unwrap().push_back(cut);
    }

    /// As [`cut_at`](Self::cut_at), but the request is forwarded: the server runs it, and the
    /// connection is closed before its reply reaches the client.
    pub fn cut_after(&self, needle: &str, skip: usize) {
        let cut = (needle.as_bytes().to_vec(), skip, true);
        self.cut.armed.lock().unwrap().push_back(cut);
    }

    /// Waits until every armed cut happened.
    pub async fn cut_done(&self) {
        self.cut.done.notified().await;
    }

    /// Cuts the next script call of operation `op` (sent as its argument, `$<len>\r\n<op>\r\n`):
    /// `forwarded`, after the server ran it ([`cut_after`](Self::cut_after)), else before
    /// ([`cut_at`](Self::cut_at)).
    pub fn cut_op(&self, op: &str, forwarded: bool) {
        let needle = format!("${}\r\n{op}\r\n", op.len());
        match forwarded {
            true => self.cut_after(&needle, 0),
            false => self.cut_at(&needle, 0),
        }
    }

    /// Asserts the armed cuts happened within a second (`what` names the cut request). Wait
    /// for each cut before arming the next: one cut wakes one wait.
    pub async fn assert_cut(&self, what: &str) {
        let done = tokio::time::timeout(Duration::from_secs(1), self.cut_done()).await;
        assert!(done.is_ok(), "the {what} was not cut");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies both ways until either side closes or `cut` hits a request; then both close (once
/// the server answered a request the cut forwards, whose reply is not passed on).
async fn relay(mut client: TcpStream, mut server: TcpStream, cut: Arc<Cut>) {
    let (mut from_client, mut to_client) = client.split();
    let (mut from_server, mut to_server) = server.split();
    let (muted, answered) = (AtomicBool::new(false), Notify::new());
    let upstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let forward = match cut.hits(&buf[..n]) {
                None => true,
                Some(false) => return,
                Some(true) => {
                    muted.store(true, Ordering::SeqCst);
                    false
                }
            };
            if to_server.write_all(&buf[..n]).await.is_err() {
                return;
            }
            if !forward {
                let _ = tokio::time::timeout(Duration::from_secs(2), answered.notified()).await;
                return;
            }
        }
    };
    let downstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_server.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if muted.load(Ordering::SeqCst) {
                answered.notify_one();
            } else if to_client.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}
