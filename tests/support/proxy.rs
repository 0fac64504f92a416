//! A TCP proxy in front of a server that can cut one connection at a chosen request: the
//! request is never forwarded and the connection is closed under it, so the client sees its
//! connection drop with a request in flight that the server never ran (a `CLIENT KILL` cannot
//! pick a request, only a connection, and a paused server holds every request alike).
//!
//! It looks for its needle in each read of what a client sent, so a request (a small command,
//! which the client writes at once) is found whole; what the same read carries besides it is
//! dropped with it, and replies on their way back are lost with the connection.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

pub struct Proxy {
    port: u16,
    cut: Arc<Cut>,
    accept: tokio::task::JoinHandle<()>,
}

/// The armed cut: the text to look for in what a client sends, and how many such requests to
/// let through first.
#[derive(Default)]
struct Cut {
    armed: Mutex<Option<(Vec<u8>, usize)>>,
    done: Notify,
}

impl Cut {
    /// Whether `chunk` (one read of what a client sent) is the one to cut.
    fn hits(&self, chunk: &[u8]) -> bool {
        let mut armed = self.armed.lock().unwrap();
        let Some((needle, skip)) = armed.as_mut() else {
            return false;
        };
        if !chunk.windows(needle.len()).any(|w| w == needle.as_slice()) {
            return false;
        }
        if *skip > 0 {
            *skip -= 1;
            return false;
        }
        *armed = None;
        self.done.notify_one();
        true
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

    /// From now on, the `skip + 1`-th read of a client's request bytes that contains `needle`
    /// is not forwarded, and its connection is closed.
    pub fn cut_at(&self, needle: &str, skip: usize) {
        *self.cut.armed.lock().unwrap() = Some((needle.as_bytes().to_vec(), skip));
    }

    /// Waits until the armed cut happened.
    pub async fn cut_done(&self) {
        self.cut.done.notified().await;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies both ways until either side closes or `cut` hits a request; then both close.
async fn relay(mut client: TcpStream, mut server: TcpStream, cut: Arc<Cut>) {
    let (mut from_client, mut to_client) = client.split();
    let (mut from_server, mut to_server) = server.split();
    let upstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if cut.hits(&buf[..n]) || to_server.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let downstream = tokio::io::copy(&mut from_server, &mut to_client);
    tokio::select! {
        () = upstream => {}
        _ = downstream => {}
    }
}
