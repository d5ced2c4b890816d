//! A tiny HTTP/1.1 server that answers each request with the next scripted reply, for the
//! failures the emulator never produces: 503 bursts, truncated bodies, connection resets,
//! the real service's status codes. It records the requests it saw.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One scripted reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A complete response.
    Full {
        /// Status code.
        status: u16,
        /// Extra headers.
        headers: Vec<(String, String)>,
        /// Body.
        body: Vec<u8>,
    },
    /// Declares `declared` bytes of body, sends `body`, then closes the connection.
    Truncated {
        /// Content-Length announced.
        declared: usize,
        /// Bytes actually sent.
        body: Vec<u8>,
    },
    /// Closes the connection without answering.
    Reset,
    /// Reads the request and never answers (a hung endpoint).
    Stall,
}

impl Reply {
    /// A response with a body and headers.
    pub fn new(status: u16, headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Reply {
        Reply::Full {
            status,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.into(),
        }
    }

    /// `503 ServerBusy`, as the service throttles.
    pub fn server_busy() -> Reply {
        Reply::new(
            503,
            &[("x-ms-error-code", "ServerBusy")],
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>ServerBusy</Code><Message>The server is busy.</Message></Error>",
        )
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    /// Request line, e.g. `GET /acct/t() HTTP/1.1`.
    pub request_line: String,
    /// Header lines, lower-cased names.
    pub headers: Vec<(String, String)>,
}

/// The running server.
pub struct MockServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<SeenRequest>>>,
    task: tokio::task::JoinHandle<()>,
}

impl MockServer {
    /// Starts on a free loopback port with the replies to give, in order. Requests beyond
    /// the script get `500`.
    pub async fn start(replies: Vec<Reply>) -> MockServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let script = Arc::new(Mutex::new(VecDeque::from(replies)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let script = script.clone();
                let seen = seen2.clone();
                tokio::spawn(serve(stream, script, seen));
            }
        });
        MockServer { addr, seen, task }
    }

    /// Base URL with an account path, as an endpoint for a client.
    pub fn endpoint(&self) -> String {
        format!("http://{}/devstoreaccount1", self.addr)
    }

    /// Requests seen so far.
    pub fn seen(&self) -> Vec<SeenRequest> {
        self.seen.lock().expect("lock").clone()
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    mut stream: TcpStream,
    script: Arc<Mutex<VecDeque<Reply>>>,
    seen: Arc<Mutex<Vec<SeenRequest>>>,
) {
    loop {
        let Some(request) = read_request(&mut stream).await else {
            return;
        };
        seen.lock().expect("lock").push(request);
        let reply = script
            .lock()
            .expect("lock")
            .pop_front()
            .unwrap_or_else(|| Reply::new(500, &[], "script exhausted"));
        match reply {
            Reply::Full {
                status,
                headers,
                body,
            } => {
                let mut head = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\n", body.len());
                for (k, v) in headers {
                    head.push_str(&format!("{k}: {v}\r\n"));
                }
                head.push_str("\r\n");
                if stream.write_all(head.as_bytes()).await.is_err()
                    || stream.write_all(&body).await.is_err()
                {
                    return;
                }
            }
            Reply::Truncated { declared, body } => {
                let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {declared}\r\n\r\n");
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body).await;
                let _ = stream.shutdown().await;
                return;
            }
            Reply::Reset => return,
            Reply::Stall => {
                std::future::pending::<()>().await;
            }
        }
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<SeenRequest> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let header_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - header_end;
    while have < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        have += n;
    }
    Some(SeenRequest {
        request_line,
        headers,
    })
}
