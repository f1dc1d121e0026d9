//! The server every HTTP test double runs: a loopback listener, one acceptor thread,
//! and one thread per connection running the double's `serve`. Dropping it stops the
//! server for real: it closes every connection it accepted (a handler blocked reading
//! a keep-alive connection would otherwise outlive the double) and joins the acceptor.
//! It never parses HTTP; that is the double's job.
#![allow(dead_code)]
// Each double uses only part of it.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// A running server. Dropping it stops it.
pub struct DoubleServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

struct Shared {
    shutdown: AtomicBool,
    /// A clone of every accepted connection, so that dropping the server can close
    /// connections whose handlers are blocked reading.
    connections: Mutex<Vec<TcpStream>>,
}

/// A bound port not yet served: for a double whose state needs its own address
/// (to write URLs into replies) before the server can run.
pub struct Bound {
    thread_name: String,
    listener: TcpListener,
    addr: SocketAddr,
}

impl DoubleServer {
    /// Binds a free loopback port and serves it with `serve` ([`Bound::serve`]).
    pub fn start(
        thread_name: &str,
        serve: impl Fn(TcpStream, &AtomicBool) + Send + Sync + 'static,
    ) -> DoubleServer {
        DoubleServer::bind(thread_name).serve(serve)
    }

    /// Binds a free loopback port; [`Bound::serve`] starts serving it. `thread_name`
    /// names the threads and, in a panic, the server.
    pub fn bind(thread_name: &str) -> Bound {
        let listener = TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| panic!("bind the {thread_name} server to a loopback port: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local address of the {thread_name} server: {e}"));
        Bound {
            thread_name: thread_name.to_string(),
            listener,
            addr,
        }
    }

    /// The loopback address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Bound {
    /// The loopback address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves each connection with `serve` on a thread of its own
    /// (`<thread_name>-conn`; the acceptor is `<thread_name>`), with Nagle off so
    /// that small replies are not held back. `serve` is also given the flag that
    /// dropping the server sets, for a handler that waits and should give up.
    pub fn serve(
        self,
        serve: impl Fn(TcpStream, &AtomicBool) + Send + Sync + 'static,
    ) -> DoubleServer {
        let Bound {
            thread_name,
            listener,
            addr,
        } = self;
        let shared = Arc::new(Shared {
            shutdown: AtomicBool::new(false),
            connections: Mutex::new(Vec::new()),
        });
        let acceptor = {
            let shared = shared.clone();
            let conn_name = format!("{thread_name}-conn");
            let serve = Arc::new(serve);
            std::thread::Builder::new()
                .name(thread_name.clone())
                .spawn(move || accept_loop(listener, &shared, &conn_name, serve))
                .unwrap_or_else(|e| panic!("spawn the {thread_name} acceptor: {e}"))
        };
        DoubleServer {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }
}

impl Drop for DoubleServer {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for c in self
            .shared
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        // Wake the acceptor so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop<S>(listener: TcpListener, shared: &Arc<Shared>, conn_name: &str, serve: Arc<S>)
where
    S: Fn(TcpStream, &AtomicBool) + Send + Sync + 'static,
{
    for stream in listener.incoming() {
        if shared.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        if let Ok(clone) = stream.try_clone() {
            shared
                .connections
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(clone);
        }
        let shared = shared.clone();
        let serve = serve.clone();
        let _ = std::thread::Builder::new()
            .name(conn_name.into())
            .spawn(move || serve(stream, &shared.shutdown));
    }
}
