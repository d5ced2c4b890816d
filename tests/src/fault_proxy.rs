//! A small HTTP/1.1 proxy that sits in front of the emulator and injects the faults real
//! Azure produces (503 throttling, 500 timeouts after the write was applied, connection
//! resets before and after forwarding, slow and hung endpoints) at seeded, configurable
//! rates. It owns the proxy's tasks, its fault draws and its counts;
//! [`proxied_connection_string`] puts one in front of each service of a connection string.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// Fault rates, each the probability (0.0..=1.0) that a request gets that fault. At most one
/// fault per request, drawn in this order.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    /// Seed of the proxy's random draws.
    pub seed: u64,
    /// Answer 503 ServerBusy without forwarding (the service refused before doing anything).
    pub busy: f64,
    /// Forward, let the upstream apply it, discard its answer, answer 500 OperationTimedOut.
    pub error_after: f64,
    /// Close the client connection without forwarding (reset before the request was sent on).
    pub reset_before: f64,
    /// Forward, then close the client connection without answering (reset after it was applied).
    pub reset_after: f64,
    /// Wait `delay` before forwarding.
    pub slow: f64,
    /// How long a slow request waits.
    pub delay: Duration,
    /// Read the request and never answer, never forward (a hung endpoint).
    pub stall: f64,
}

impl FaultPlan {
    /// No faults.
    pub fn none() -> Self {
        FaultPlan::default()
    }

    /// Every kind at `rate / 5` each (busy, error_after, reset_before, reset_after, slow with
    /// 50 ms), stall 0.
    pub fn mixed(rate: f64, seed: u64) -> Self {
        let each = rate / 5.0;
        FaultPlan {
            seed,
            busy: each,
            error_after: each,
            reset_before: each,
            reset_after: each,
            slow: each,
            delay: Duration::from_millis(50),
            stall: 0.0,
        }
    }
}

/// Counts of what the proxy did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Requests read from clients.
    pub requests: u64,
    /// Answered 503 ServerBusy.
    pub busy: u64,
    /// Forwarded, then answered 500 OperationTimedOut.
    pub error_after: u64,
    /// Closed before forwarding.
    pub reset_before: u64,
    /// Forwarded, then closed without answering.
    pub reset_after: u64,
    /// Delayed, then forwarded.
    pub slow: u64,
    /// Never answered.
    pub stall: u64,
}

enum Fault {
    None,
    Busy,
    ErrorAfter,
    ResetBefore,
    ResetAfter,
    Slow(Duration),
    Stall,
}

/// What the connections of one proxy share.
struct Shared {
    upstream: SocketAddr,
    state: Mutex<State>,
}

struct State {
    plan: FaultPlan,
    rng: StdRng,
    counts: FaultCounts,
    /// The request line of every request read, in order (`GET /path?query HTTP/1.1`).
    request_lines: Vec<String>,
}

impl Shared {
    /// Counts a request and draws its fault: one uniform number against the rates laid end
    /// to end, so each kind gets exactly its rate while they sum to at most 1.
    fn next_fault(&self, request: &Request) -> Fault {
        let mut state = self.state.lock().expect("proxy state lock poisoned");
        let line = request
            .head
            .split(|&b| b == b'\r')
            .next()
            .unwrap_or_default();
        state
            .request_lines
            .push(String::from_utf8_lossy(line).into_owned());
        let State {
            plan, rng, counts, ..
        } = &mut *state;
        counts.requests += 1;
        let mut u: f64 = rng.random();
        let kinds = [
            (plan.busy, Fault::Busy, &mut counts.busy),
            (plan.error_after, Fault::ErrorAfter, &mut counts.error_after),
            (
                plan.reset_before,
                Fault::ResetBefore,
                &mut counts.reset_before,
            ),
            (plan.reset_after, Fault::ResetAfter, &mut counts.reset_after),
            (plan.slow, Fault::Slow(plan.delay), &mut counts.slow),
            (plan.stall, Fault::Stall, &mut counts.stall),
        ];
        for (rate, fault, count) in kinds {
            let rate = rate.clamp(0.0, 1.0);
            if u < rate {
                *count += 1;
                return fault;
            }
            u -= rate;
        }
        Fault::None
    }
}

/// A running proxy. Dropping it stops it and every connection it holds.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts on a free 127.0.0.1 port, forwarding to `upstream` (e.g. "127.0.0.1:43210").
    pub async fn start(upstream: SocketAddr, plan: FaultPlan) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let state = State {
            rng: StdRng::seed_from_u64(plan.seed),
            plan,
            counts: FaultCounts::default(),
            request_lines: Vec::new(),
        };
        let shared = Arc::new(Shared {
            upstream,
            state: Mutex::new(state),
        });
        let accept_shared = shared.clone();
        // The connection tasks live in a JoinSet owned by the accept task: aborting it drops
        // the set, which aborts them all.
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                while conns.try_join_next().is_some() {}
                conns.spawn(serve(stream, accept_shared.clone()));
            }
        });
        FaultProxy { addr, shared, task }
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the plan (e.g. FaultPlan::none() to read results back without faults). The
    /// draws restart from the new plan's seed.
    pub fn set_plan(&self, plan: FaultPlan) {
        let mut state = self.shared.state.lock().expect("proxy state lock poisoned");
        state.rng = StdRng::seed_from_u64(plan.seed);
        state.plan = plan;
    }

    /// The request line of every request read so far, in order, as sent
    /// (`GET /account/table()?%24filter=… HTTP/1.1`).
    pub fn request_lines(&self) -> Vec<String> {
        let state = self.shared.state.lock().expect("proxy state lock poisoned");
        state.request_lines.clone()
    }

    /// What it did so far.
    pub fn counts(&self) -> FaultCounts {
        let state = self.shared.state.lock().expect("proxy state lock poisoned");
        state.counts.clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Rewrites every endpoint of an Azure Storage connection string through a proxy per service:
/// for each of BlobEndpoint, QueueEndpoint, TableEndpoint whose value is
/// "http://127.0.0.1:PORT/account", starts a FaultProxy in front of 127.0.0.1:PORT with `plan`
/// (each proxy gets seed plan.seed + 0/1/2) and returns the rewritten connection string with the
/// proxies' ports, plus the three proxies (blob, queue, table order). Other endpoints are left
/// as they are, without a proxy.
pub async fn proxied_connection_string(conn: &str, plan: &FaultPlan) -> (String, Vec<FaultProxy>) {
    const PREFIX: &str = "http://127.0.0.1:";
    let mut parts: Vec<String> = conn.split(';').map(str::to_string).collect();
    let mut proxies = Vec::new();
    let services = ["BlobEndpoint", "QueueEndpoint", "TableEndpoint"];
    for (i, service) in services.into_iter().enumerate() {
        for part in parts.iter_mut() {
            // `(key, port, path)` when this part is `service` on a loopback port.
            let target = part.split_once('=').and_then(|(key, value)| {
                let rest = value.trim().strip_prefix(PREFIX)?;
                let (port, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                let port = port.parse::<u16>().ok()?;
                key.trim()
                    .eq_ignore_ascii_case(service)
                    .then_some((key, port, path))
            });
            let Some((key, port, path)) = target else {
                continue;
            };
            let mut service_plan = plan.clone();
            service_plan.seed = plan.seed.wrapping_add(i as u64);
            let upstream = SocketAddr::from(([127, 0, 0, 1], port));
            let proxy = FaultProxy::start(upstream, service_plan).await;
            *part = format!("{key}={PREFIX}{}{path}", proxy.addr().port());
            proxies.push(proxy);
        }
    }
    (parts.join(";"), proxies)
}

/// One request read from a client: its head (with the final blank line) and its body.
struct Request {
    head: Vec<u8>,
    body: Vec<u8>,
}

/// Serves one client connection, one request at a time.
async fn serve(mut client: TcpStream, shared: Arc<Shared>) {
    let mut buf = Vec::new();
    while let Some(request) = read_request(&mut client, &mut buf).await {
        let reply = match shared.next_fault(&request) {
            Fault::Busy => error_reply(503),
            Fault::ResetBefore => return,
            Fault::Stall => {
                // Parked until the client closes or the proxy is dropped.
                let mut sink = [0u8; 4096];
                while matches!(client.read(&mut sink).await, Ok(n) if n > 0) {}
                return;
            }
            Fault::ErrorAfter => {
                let _ = forward(shared.upstream, &request).await;
                error_reply(500)
            }
            Fault::ResetAfter => {
                let _ = forward(shared.upstream, &request).await;
                return;
            }
            Fault::Slow(delay) => {
                tokio::time::sleep(delay).await;
                relay(shared.upstream, &request).await
            }
            Fault::None => relay(shared.upstream, &request).await,
        };
        if client.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// Reads one request; `buf` keeps bytes read past it. `None` at EOF or on an error.
async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Request> {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(head_end) = find(buf, b"\r\n\r\n").map(|i| i + 4) {
            let end = head_end + content_length(&buf[..head_end]).unwrap_or(0);
            if buf.len() >= end {
                let rest = buf.split_off(end);
                let mut head = std::mem::replace(buf, rest);
                let body = head.split_off(head_end);
                return Some(Request { head, body });
            }
        }
        match stream.read(&mut chunk).await {
            Ok(n) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return None,
        }
    }
}

/// Forwards a request on a fresh connection and relays the answer in a form the client can
/// keep its connection after; 502 if the upstream cannot be reached or answers nonsense.
async fn relay(upstream: SocketAddr, request: &Request) -> Vec<u8> {
    const BAD_GATEWAY: &[u8] = b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n";
    let Some(response) = forward(upstream, request).await else {
        return BAD_GATEWAY.to_vec();
    };
    let Some(head_end) = find(&response, b"\r\n\r\n").map(|i| i + 4) else {
        return BAD_GATEWAY.to_vec();
    };
    let (head, body) = response.split_at(head_end);
    let status = head.get(9..12).unwrap_or_default();
    let bodiless = status.starts_with(b"1") || status == b"204" || status == b"304";
    let needs_length = !request.head.starts_with(b"HEAD ")
        && !bodiless
        && header(head, "content-length").is_none()
        && header(head, "transfer-encoding").is_none();
    let extra = match needs_length {
        true => format!("Content-Length: {}\r\n", body.len()),
        false => String::new(),
    };
    rewrite(head, true, &extra, body)
}

/// Sends a request on a new connection with `Connection: close` and reads the whole answer
/// (to EOF, or to the end of a Content-Length body). `None` if the upstream fails.
async fn forward(upstream: SocketAddr, request: &Request) -> Option<Vec<u8>> {
    let out = rewrite(&request.head, false, "Connection: close\r\n", &request.body);
    let mut stream = TcpStream::connect(upstream).await.ok()?;
    stream.write_all(&out).await.ok()?;
    let mut response = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let n = stream.read(&mut chunk).await.ok()?;
        response.extend_from_slice(&chunk[..n]);
        let head_end = find(&response, b"\r\n\r\n").map(|i| i + 4);
        let done = head_end.and_then(|e| Some(e + content_length(&response[..e])?));
        if n == 0 || done.is_some_and(|end| response.len() >= end) {
            break;
        }
    }
    Some(response)
}

/// A message: `head` without its `Connection` headers (only `Connection: close` if
/// `only_close`), plus the `extra` header lines, then `body`, byte for byte.
fn rewrite(head: &[u8], only_close: bool, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(head.len() + extra.len() + body.len());
    let dropped = |v: &str| !only_close || v.eq_ignore_ascii_case("close");
    for line in lines(head).filter(|l| !header_value(l, "connection").is_some_and(dropped)) {
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(extra.as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// An Azure-style error answer: 503 ServerBusy, or 500 OperationTimedOut.
fn error_reply(status: u16) -> Vec<u8> {
    let (reason, code, message) = match status {
        503 => ("Server Busy", "ServerBusy", "The server is busy."),
        _ => ("Operation Timed Out", "OperationTimedOut", "Timed out."),
    };
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{code}</Code><Message>{message} (injected)</Message></Error>"
    );
    format!(
        "HTTP/1.1 {status} {reason}\r\nx-ms-error-code: {code}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The non-empty lines of a head, without their CRLF.
fn lines(head: &[u8]) -> impl Iterator<Item = &[u8]> {
    head.split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty())
}

/// The value of header line `line` if its name is `name` (case-insensitive).
fn header_value<'a>(line: &'a [u8], name: &str) -> Option<&'a str> {
    let colon = line.iter().position(|b| *b == b':')?;
    let (k, v) = line.split_at(colon);
    if !k.trim_ascii().eq_ignore_ascii_case(name.as_bytes()) {
        return None;
    }
    std::str::from_utf8(&v[1..]).ok().map(str::trim)
}

/// The Content-Length of a head, if it has one.
fn content_length(head: &[u8]) -> Option<usize> {
    header(head, "content-length")?.parse().ok()
}

/// The value of header `name` in a head (the status or request line never matches).
fn header<'a>(head: &'a [u8], name: &str) -> Option<&'a str> {
    lines(head).skip(1).find_map(|l| header_value(l, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Seen = Arc<Mutex<Vec<String>>>;

    /// An upstream answering `200 OK` with a body naming the path (keep-alive or close, as
    /// asked), a proxy with `plan` in front of it, a client connection to the proxy, and the
    /// request heads the upstream saw.
    async fn setup(plan: FaultPlan) -> (FaultProxy, TcpStream, Seen, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = listener.local_addr().unwrap();
        let seen = Seen::default();
        let seen2 = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let seen = seen2.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    while let Some(req) = read_request(&mut stream, &mut buf).await {
                        let head = String::from_utf8(req.head).unwrap();
                        let body = format!("path={}", head.split(' ').nth(1).unwrap());
                        let close = header(head.as_bytes(), "connection") == Some("close");
                        let conn = if close { "close" } else { "keep-alive" };
                        seen.lock().unwrap().push(head);
                        let reply = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: {conn}\r\n\r\n{body}",
                            body.len()
                        );
                        stream.write_all(reply.as_bytes()).await.unwrap();
                        if close {
                            return;
                        }
                    }
                });
            }
        });
        let proxy = FaultProxy::start(up, plan).await;
        let client = TcpStream::connect(proxy.addr()).await.unwrap();
        (proxy, client, seen, task)
    }

    /// Sends a keep-alive PUT with a binary body; `None` if the connection ends first.
    async fn call(stream: &mut TcpStream, path: &str) -> Option<(String, String)> {
        let body = b"\x00\xff\r\n\r\nbinary";
        let req = format!(
            "PUT {path} HTTP/1.1\r\nHost: x\r\nconnection: keep-alive\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(req.as_bytes()).await.unwrap();
        stream.write_all(body).await.unwrap();
        let resp = read_request(stream, &mut Vec::new()).await?;
        let head = String::from_utf8(resp.head).unwrap();
        Some((head, String::from_utf8(resp.body).unwrap()))
    }

    fn plan(set: impl FnOnce(&mut FaultPlan)) -> FaultPlan {
        let mut plan = FaultPlan::none();
        set(&mut plan);
        plan
    }

    fn one(set: impl FnOnce(&mut FaultCounts)) -> FaultCounts {
        let mut counts = FaultCounts {
            requests: 1,
            ..FaultCounts::default()
        };
        set(&mut counts);
        counts
    }

    #[tokio::test]
    async fn no_faults_keep_one_client_connection() {
        let (proxy, mut client, seen, _up) = setup(FaultPlan::none()).await;
        for path in ["/acct/one", "/acct/two"] {
            let (head, body) = call(&mut client, path).await.expect("an answer");
            assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
            assert_eq!(header(head.as_bytes(), "connection"), None, "{head}");
            assert_eq!(body, format!("path={path}"));
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2);
        for head in &seen {
            assert_eq!(header(head.as_bytes(), "connection"), Some("close"));
            assert_eq!(head.to_ascii_lowercase().matches("connection").count(), 1);
        }
        assert_eq!(proxy.counts(), one(|c| c.requests = 2));
    }

    /// Sends one request through a proxy with `plan`, checks it got the Azure error
    /// `status`/`code` and that `forwarded` requests reached the upstream; returns the counts.
    async fn error_answer(
        plan: FaultPlan,
        status: &str,
        code: &str,
        forwarded: usize,
    ) -> FaultCounts {
        let (proxy, mut client, seen, _up) = setup(plan).await;
        let (head, body) = call(&mut client, "/acct/t").await.expect("an answer");
        assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
        assert_eq!(header(head.as_bytes(), "x-ms-error-code"), Some(code));
        assert!(body.contains(&format!("<Code>{code}</Code>")), "{body}");
        assert_eq!(seen.lock().unwrap().len(), forwarded, "{code}");
        proxy.counts()
    }

    #[tokio::test]
    async fn busy_answers_503_without_forwarding() {
        let counts = error_answer(plan(|p| p.busy = 1.0), "503", "ServerBusy", 0).await;
        assert_eq!(counts, one(|c| c.busy = 1));
    }

    #[tokio::test]
    async fn error_after_forwards_then_answers_500() {
        let plan = plan(|p| p.error_after = 1.0);
        let counts = error_answer(plan, "500", "OperationTimedOut", 1).await;
        assert_eq!(counts, one(|c| c.error_after = 1));
    }

    #[tokio::test]
    async fn reset_before_closes_without_forwarding() {
        let (proxy, mut client, seen, _up) = setup(plan(|p| p.reset_before = 1.0)).await;
        assert!(call(&mut client, "/acct/t").await.is_none());
        assert_eq!(client.read(&mut [0u8; 16]).await.unwrap(), 0, "EOF");
        assert!(seen.lock().unwrap().is_empty());
        assert_eq!(proxy.counts(), one(|c| c.reset_before = 1));
        proxy.set_plan(FaultPlan::none());
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        let (head, _) = call(&mut client, "/acct/t").await.expect("an answer");
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    }

    #[tokio::test]
    async fn unreachable_upstream_answers_502() {
        let (_gone, up) = crate::refusing_address();
        let proxy = FaultProxy::start(up, FaultPlan::none()).await;
        let mut client = TcpStream::connect(proxy.addr()).await.unwrap();
        let (head, body) = call(&mut client, "/acct/t").await.expect("an answer");
        assert!(head.starts_with("HTTP/1.1 502 "), "{head}");
        assert!(body.is_empty());
    }

    #[tokio::test]
    async fn connection_string_goes_through_one_proxy_per_service() {
        let conn = "AccountName=a;BlobEndpoint=http://127.0.0.1:10000/a;\
            QueueEndpoint=http://127.0.0.1:10001/a;TableEndpoint=http://127.0.0.1:10002/a;";
        let (rewritten, proxies) = proxied_connection_string(conn, &FaultPlan::mixed(0.5, 7)).await;
        let ports: Vec<u16> = proxies.iter().map(|p| p.addr().port()).collect();
        let want = format!(
            "AccountName=a;BlobEndpoint=http://127.0.0.1:{}/a;\
            QueueEndpoint=http://127.0.0.1:{}/a;TableEndpoint=http://127.0.0.1:{}/a;",
            ports[0], ports[1], ports[2]
        );
        assert_eq!(rewritten, want);
    }
}
