//! The server the HTTP test doubles run on (`tests/support/double_server.rs`): each
//! connection is served on its own thread, and dropping the server closes connections
//! whose handlers are still reading and tells them why. These pin what every double's
//! "dropping it stops the server" rests on.

#[path = "support/double_server.rs"]
mod double_server;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use double_server::DoubleServer;

/// How long a read waits before the test calls the connection stuck (a safety net
/// against a hang, not a timing rule).
const PATIENCE: Duration = Duration::from_secs(10);

/// A handler that echoes bytes until its connection ends, then reports whether the
/// shutdown flag was set when it ended.
fn echo_until_closed(ended: mpsc::Sender<bool>) -> DoubleServer {
    DoubleServer::start("echo-double", move |mut stream, shutdown| {
        let mut buf = [0u8; 64];
        while let Ok(n) = stream.read(&mut buf) {
            if n == 0 || stream.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = ended.send(shutdown.load(Ordering::SeqCst));
    })
}

fn connect(server: &DoubleServer) -> TcpStream {
    let client = TcpStream::connect(server.addr()).expect("connect to the double server");
    client
        .set_read_timeout(Some(PATIENCE))
        .expect("set a read timeout");
    client
}

fn echo(client: &mut TcpStream, bytes: &[u8]) -> Vec<u8> {
    client.write_all(bytes).expect("write to the double server");
    let mut got = vec![0u8; bytes.len()];
    client
        .read_exact(&mut got)
        .expect("the handler echoes what it was sent");
    got
}

#[test]
fn every_connection_is_served_on_its_own_thread() {
    let (ended, _) = mpsc::channel();
    let server = echo_until_closed(ended);
    let mut first = connect(&server);
    let mut second = connect(&server);
    // The first handler is still blocked reading its connection: the second is only
    // answered if it has a thread of its own.
    assert_eq!(echo(&mut first, b"one"), b"one");
    assert_eq!(echo(&mut second, b"two"), b"two");
    assert_eq!(echo(&mut first, b"again"), b"again");
}

#[test]
fn dropping_the_server_closes_a_connection_its_handler_is_still_reading() {
    let (ended, handler_ended) = mpsc::channel();
    let server = echo_until_closed(ended);
    let mut client = connect(&server);
    assert_eq!(echo(&mut client, b"ping"), b"ping");

    drop(server);

    let mut rest = Vec::new();
    let read = client.read_to_end(&mut rest);
    assert!(
        matches!(read, Ok(0)),
        "the client sees its connection closed when the server is dropped, got {read:?}"
    );
    let saw_shutdown = handler_ended
        .recv_timeout(PATIENCE)
        .expect("the handler's read ends when the server is dropped");
    assert!(
        saw_shutdown,
        "the handler sees the shutdown flag set once its connection is closed by the drop"
    );
}
