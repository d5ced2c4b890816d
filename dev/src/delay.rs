//! A network delay line for benchmarks: a TCP proxy in front of the emulator's
//! services that hands every byte on half a round trip after it arrived, in each
//! direction, without limiting throughput (bytes in flight queue up, as on a long
//! wire). On loopback a request costs the emulator's processing and nothing else, which
//! favours one connection reading in sequence; clients of the real service pay a round
//! trip per request, which parallel workers overlap and a sequential reader cannot.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Proxies on loopback, one per target port, each delaying both directions. Dropping it
/// closes the listeners and every connection through them.
pub struct DelayLine {
    ports: Vec<u16>,
    _proxies: JoinSet<()>,
}

impl DelayLine {
    /// Starts one proxy per port in `targets` (on 127.0.0.1), adding `round_trip` to
    /// every exchange: half on the way there, half on the way back.
    pub async fn start(targets: &[u16], round_trip: Duration) -> std::io::Result<Self> {
        let mut proxies = JoinSet::new();
        let mut ports = Vec::with_capacity(targets.len());
        for &target in targets {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            ports.push(listener.local_addr()?.port());
            proxies.spawn(accept(listener, target, round_trip / 2));
        }
        Ok(DelayLine {
            ports,
            _proxies: proxies,
        })
    }

    /// The proxies' ports, in the order of the targets.
    pub fn ports(&self) -> &[u16] {
        &self.ports
    }
}

async fn accept(listener: TcpListener, target: u16, one_way: Duration) {
    // Owned here, so aborting this task drops (and aborts) every connection.
    let mut connections = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        while connections.try_join_next().is_some() {}
        connections.spawn(async move {
            let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            tokio::join!(
                pump(client_read, server_write, one_way),
                pump(server_read, client_write, one_way)
            );
        });
    }
}

/// Copies `from` to `to`, each chunk `delay` after it was read. End of stream (or a
/// read error) is passed on as a shutdown, delayed like the bytes before it.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Option<Vec<u8>>)>();
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let chunk = match from.read(&mut buf).await {
                Ok(0) | Err(_) => None,
                Ok(n) => Some(buf[..n].to_vec()),
            };
            let end = chunk.is_none();
            if tx.send((Instant::now() + delay, chunk)).is_err() || end {
                return;
            }
        }
    };
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            match chunk {
                Some(bytes) => {
                    if to.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                None => {
                    let _ = to.shutdown().await;
                    return;
                }
            }
        }
    };
    tokio::join!(read, write);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on a free port.
    async fn echo() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        port
    }

    /// A delay line of `round_trip` in front of an echo server, and a connection
    /// through it.
    async fn connected(round_trip: Duration) -> (DelayLine, TcpStream) {
        let target = echo().await;
        let line = DelayLine::start(&[target], round_trip).await.unwrap();
        let s = TcpStream::connect(("127.0.0.1", line.ports()[0]))
            .await
            .unwrap();
        (line, s)
    }

    #[tokio::test]
    async fn an_exchange_takes_the_round_trip_and_bytes_arrive_intact() {
        let (_line, mut s) = connected(Duration::from_millis(60)).await;
        s.set_nodelay(true).unwrap();
        for _ in 0..3 {
            let t = std::time::Instant::now();
            s.write_all(b"ping").await.unwrap();
            let mut got = [0u8; 4];
            s.read_exact(&mut got).await.unwrap();
            let took = t.elapsed();
            assert_eq!(&got, b"ping");
            assert!(took >= Duration::from_millis(60), "{took:?}");
            assert!(took < Duration::from_millis(600), "{took:?}");
        }
        // A megabyte streams through in about one round trip, not one per chunk.
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let (mut r, mut w) = s.into_split();
        let t = std::time::Instant::now();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            w.write_all(&sent).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut back = Vec::new();
        r.read_to_end(&mut back).await.unwrap();
        writer.await.unwrap();
        assert!(back == data, "{} bytes back of {}", back.len(), data.len());
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    }

    #[tokio::test]
    async fn dropping_the_line_closes_its_connections() {
        let (line, mut s) = connected(Duration::from_millis(2)).await;
        s.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        s.read_exact(&mut one).await.unwrap();
        drop(line);
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest))
            .await
            .expect("closed, not hanging")
            .unwrap_or(0);
        assert_eq!(n, 0);
    }
}
