//! A TCP fault proxy: sits between the operator and one member and misbehaves on request.
//!
//! The availability layer's tests route the operator's connections through it, while the
//! members keep talking to each other directly, so "the operator cannot reach it" can be told
//! apart from "it is down".

use std::{net::SocketAddr, time::Duration};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

/// How the proxy treats traffic. Changes apply to open connections too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    None,
    /// Accept connections and swallow every byte both ways; nothing is answered or refused.
    Blackhole,
    /// Forward after holding each chunk for the given time.
    Delay(Duration),
    /// Reset new and open connections.
    Reset,
    /// Drop bytes from the client to the upstream; replies still flow.
    CutToUpstream,
    /// Drop bytes from the upstream to the client; requests still arrive.
    CutToClient,
}

/// A running proxy. Dropping it stops it.
pub struct FaultProxy {
    address: SocketAddr,
    fault: watch::Sender<Fault>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on `listen` (port 0 picks one) and forwards to `upstream`.
    pub async fn start(listen: SocketAddr, upstream: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let address = listener.local_addr()?;
        let (fault, faults) = watch::channel(Fault::None);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, upstream, faults.clone()));
            }
        });
        Ok(Self {
            address,
            fault,
            accept,
        })
    }

    /// The address clients connect to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Closing the channel ends every connection's pumps.
        self.fault.send_replace(Fault::Reset);
    }
}

async fn serve(client: TcpStream, upstream: SocketAddr, mut faults: watch::Receiver<Fault>) {
    let fault = *faults.borrow_and_update();
    match fault {
        Fault::Reset => return reset(client),
        Fault::Blackhole => {
            // Hold the connection open and read nothing until the fault changes.
            let _held = client;
            let _ = faults.wait_for(|f| *f != Fault::Blackhole).await;
            return;
        }
        _ => {}
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return reset(client);
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let to_upstream = pump(client_read, server_write, faults.clone(), Direction::ToUpstream);
    let to_client = pump(server_read, client_write, faults, Direction::ToClient);
    tokio::select! {
        _ = to_upstream => {}
        _ = to_client => {}
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToUpstream,
    ToClient,
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut faults: watch::Receiver<Fault>,
    direction: Direction,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            changed = faults.changed() => {
                if changed.is_err() || *faults.borrow() == Fault::Reset {
                    return;
                }
                continue;
            }
        };
        let n = match read {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let fault = *faults.borrow();
        match (fault, direction) {
            (Fault::Reset, _) => return,
            (Fault::Blackhole, _)
            | (Fault::CutToUpstream, Direction::ToUpstream)
            | (Fault::CutToClient, Direction::ToClient) => {
                continue;
            }
            (Fault::Delay(delay), _) => tokio::time::sleep(delay).await,
            _ => {}
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

fn reset(stream: TcpStream) {
    // Linger zero turns the close into a RST, as a crashed or firewalled peer would send.
    let _ = stream.set_zero_linger();
    drop(stream);
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 1024];
                    while let Ok(n) = stream.read(&mut buffer).await {
                        if n == 0 || stream.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        address
    }

    async fn round_trip(stream: &mut TcpStream, timeout: Duration) -> Option<Vec<u8>> {
        stream.write_all(b"ping").await.ok()?;
        let mut buffer = [0u8; 4];
        match tokio::time::timeout(timeout, stream.read_exact(&mut buffer)).await {
            Ok(Ok(_)) => Some(buffer.to_vec()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn forwards_blackholes_delays_cuts_and_resets() {
        let upstream = echo_server().await;
        let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), upstream)
            .await
            .unwrap();
        let short = Duration::from_millis(300);

        let mut stream = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(
            round_trip(&mut stream, short).await.as_deref(),
            Some(&b"ping"[..])
        );

        proxy.set(Fault::Blackhole);
        assert_eq!(
            round_trip(&mut stream, short).await,
            None,
            "an open connection goes silent"
        );
        let mut fresh = TcpStream::connect(proxy.address())
            .await
            .expect("a blackhole still accepts");
        assert_eq!(round_trip(&mut fresh, short).await, None, "and never answers");

        proxy.set(Fault::Delay(Duration::from_millis(400)));
        let mut delayed = TcpStream::connect(proxy.address()).await.unwrap();
        let started = std::time::Instant::now();
        assert!(round_trip(&mut delayed, Duration::from_secs(5)).await.is_some());
        assert!(started.elapsed() >= Duration::from_millis(400));

        proxy.set(Fault::CutToClient);
        let mut cut = TcpStream::connect(proxy.address()).await.unwrap();
        assert_eq!(round_trip(&mut cut, short).await, None, "replies are dropped");

        proxy.set(Fault::Reset);
        let mut reset = TcpStream::connect(proxy.address()).await.unwrap();
        let mut buffer = [0u8; 1];
        let read = tokio::time::timeout(short, reset.read(&mut buffer))
            .await
            .expect("reset is immediate");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

        proxy.set(Fault::None);
        let mut healed = TcpStream::connect(proxy.address()).await.unwrap();
        assert!(round_trip(&mut healed, short).await.is_some());
    }
}
