//! Opening a connection to the fleet's database: each host of the URL in
//! turn (its `hostaddr`, its port, a password looked up for it), over a
//! socket opened here rather than by the driver, so that [`Guarded`]
//! watches the startup of every connection, TLS or not.

use std::future::Future;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_postgres::config::{Host, LoadBalanceHosts, SslMode};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, Connection};
use tokio_postgres_rustls::MakeRustlsConnect;
use tokio_util::either::Either;

use crate::FleetError;
use crate::auth::{Guarded, GuardedTls, StartupRules, Transport, refusal_in};

/// The stream of a connection without TLS: the socket, guarded.
pub(crate) type RawStream = Guarded<Dialed>;
/// The stream of a connection with TLS, guarded above the encryption.
pub(crate) type TlsStream = Guarded<<MakeRustlsConnect as MakeTlsConnect<RawStream>>::Stream>;

/// One place to connect to.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// Where the socket goes.
    addr: Addr,
    /// The port (for a Unix socket, the number in its file's name).
    pub(crate) port: u16,
    /// The name the server's certificate must carry (`verify-full`).
    tls_name: String,
    /// The host the password file is searched for: the address the
    /// connection goes to when `hostaddr` gives one, so that a password
    /// kept for a name never goes to an address named for it elsewhere.
    pub(crate) password_host: String,
    /// The host's name when `hostaddr` gives its address (its lines in the
    /// password file are not used).
    pub(crate) named_host: Option<String>,
}

/// Where a socket goes.
#[derive(Debug, Clone)]
enum Addr {
    /// A host name, resolved when connecting.
    Name(String),
    /// An address.
    Ip(IpAddr),
    /// The directory of a Unix socket.
    Unix(PathBuf),
}

/// The places `config` names, in the order they are tried (shuffled for
/// `load_balance_hosts=random`).
pub(crate) fn targets(config: &Config) -> Result<Vec<Target>, FleetError> {
    let (hosts, addrs, ports) = (
        config.get_hosts(),
        config.get_hostaddrs(),
        config.get_ports(),
    );
    let count = hosts.len().max(addrs.len());
    let bad = |why: &str| FleetError::InvalidUrl(why.to_owned());
    if count == 0 {
        return Err(bad("it names no host (host or hostaddr)"));
    }
    if !hosts.is_empty() && !addrs.is_empty() && hosts.len() != addrs.len() {
        return Err(bad("it names a different number of hosts and of hostaddrs"));
    }
    if ports.len() > 1 && ports.len() != count {
        return Err(bad("it names a different number of hosts and of ports"));
    }
    let mut targets: Vec<Target> = (0..count)
        .map(|at| {
            let port = ports.get(at).or(ports.first()).copied().unwrap_or(5432);
            let host = hosts.get(at);
            match (host, addrs.get(at)) {
                (_, Some(ip)) => {
                    let name = match host {
                        Some(Host::Tcp(name)) => Some(name.clone()),
                        _ => None,
                    };
                    Target {
                        addr: Addr::Ip(*ip),
                        port,
                        tls_name: name.clone().unwrap_or_else(|| ip.to_string()),
                        password_host: ip.to_string(),
                        named_host: name,
                    }
                }
                (Some(Host::Tcp(name)), None) => Target {
                    addr: Addr::Name(name.clone()),
                    port,
                    tls_name: name.clone(),
                    password_host: name.clone(),
                    named_host: None,
                },
                (Some(Host::Unix(dir)), None) => Target {
                    addr: Addr::Unix(dir.clone()),
                    port,
                    tls_name: "localhost".to_owned(),
                    password_host: "localhost".to_owned(),
                    named_host: None,
                },
                (None, None) => unreachable!("at < count"),
            }
        })
        .collect();
    if config.get_load_balance_hosts() == LoadBalanceHosts::Random {
        shuffle(&mut targets);
    }
    Ok(targets)
}

/// Whether no other user can put a socket in `dir`: it is not writable by
/// all (as `/tmp` is). Unknown (it cannot be read): not private.
fn private_dir(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(dir).is_ok_and(|meta| meta.permissions().mode() & 0o002 == 0)
}

/// `items` in a random order (for load balancing, not for secrets).
fn shuffle<T>(items: &mut [T]) {
    let random = RandomState::new();
    for at in (1..items.len()).rev() {
        let bound = u64::try_from(at + 1).unwrap_or(u64::MAX);
        let other = usize::try_from(random.hash_one(at) % bound).unwrap_or(at);
        items.swap(at, other);
    }
}

/// Connects to the first of `targets` that answers, each with the
/// password `password` finds for it (when `config` has none), under
/// `rules`.
///
/// # Errors
///
/// [`FleetError::AuthRefused`] as soon as a server asks for what `rules`
/// refuse; else the last host's [`FleetError::Connect`].
pub(crate) async fn connect(
    config: &Config,
    targets: Vec<Target>,
    (mut tls, tls_verified): (MakeRustlsConnect, bool),
    rules: StartupRules,
    password: impl Fn(&Target) -> Option<String>,
) -> Result<(Client, Connection<RawStream, TlsStream>), FleetError> {
    let rules = Arc::new(rules);
    let mut last = None;
    for target in targets {
        let mut attempt = config.clone();
        if attempt.get_password().is_none()
            && let Some(found) = password(&target)
        {
            attempt.password(found);
        }
        let transport = if let Addr::Unix(dir) = &target.addr {
            // A Unix socket never leaves the machine: no TLS (libpq's rule).
            attempt.ssl_mode(SslMode::Disable);
            if private_dir(dir) {
                Transport::Unix
            } else {
                Transport::SharedUnix
            }
        } else {
            Transport::Tcp
        };
        let socket = Dialed::new(&target, config);
        let stream = Guarded::new(socket, transport, Arc::clone(&rules));
        let tls = match MakeTlsConnect::<RawStream>::make_tls_connect(&mut tls, &target.tls_name) {
            Ok(tls) => GuardedTls::new(tls, Arc::clone(&rules), tls_verified),
            Err(never) => match never {},
        };
        match attempt.connect_raw(stream, tls).await {
            Ok(connected) => return Ok(connected),
            Err(source) => {
                if let Some(refusal) = refusal_in(&source) {
                    return Err(FleetError::AuthRefused(refusal.to_string()));
                }
                last = Some(source);
            }
        }
    }
    match last {
        Some(source) => Err(FleetError::Connect { source }),
        None => Err(FleetError::InvalidUrl(
            "it names no host (host or hostaddr)".to_owned(),
        )),
    }
}

/// The connected socket.
type Socket = Either<TcpStream, UnixStream>;

/// A socket that connects on first use, so that a failure to connect is
/// the driver's error like any other of the connection's.
pub(crate) struct Dialed {
    state: DialState,
}

impl std::fmt::Debug for Dialed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            DialState::Connecting(_) => "connecting",
            DialState::Open(_) => "open",
        };
        f.debug_struct("Dialed").field("state", &state).finish()
    }
}

enum DialState {
    Connecting(Pin<Box<dyn Future<Output = io::Result<Socket>> + Send>>),
    Open(Socket),
}

/// The socket settings the URL gives.
#[derive(Debug, Clone)]
struct SocketOptions {
    connect_timeout: Option<Duration>,
    user_timeout: Option<Duration>,
    keepalive: Option<TcpKeepalive>,
    shuffle: bool,
}

impl Dialed {
    fn new(target: &Target, config: &Config) -> Dialed {
        let keepalive = config.get_keepalives().then(|| {
            let mut keepalive = TcpKeepalive::new().with_time(config.get_keepalives_idle());
            if let Some(interval) = config.get_keepalives_interval() {
                keepalive = keepalive.with_interval(interval);
            }
            if let Some(retries) = config.get_keepalives_retries() {
                keepalive = keepalive.with_retries(retries);
            }
            keepalive
        });
        let options = SocketOptions {
            connect_timeout: config.get_connect_timeout().copied(),
            user_timeout: config.get_tcp_user_timeout().copied(),
            keepalive,
            shuffle: config.get_load_balance_hosts() == LoadBalanceHosts::Random,
        };
        let (addr, port) = (target.addr.clone(), target.port);
        Dialed {
            state: DialState::Connecting(Box::pin(open(addr, port, options))),
        }
    }

    fn poll_open(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<&mut Socket>> {
        if let DialState::Connecting(connecting) = &mut self.state {
            let socket = ready!(connecting.as_mut().poll(cx))?;
            self.state = DialState::Open(socket);
        }
        match &mut self.state {
            DialState::Open(socket) => Poll::Ready(Ok(socket)),
            DialState::Connecting(_) => Poll::Pending,
        }
    }
}

/// Opens the socket: a Unix socket's file, else each address of the host
/// in turn.
async fn open(addr: Addr, port: u16, options: SocketOptions) -> io::Result<Socket> {
    let addrs = match addr {
        Addr::Unix(dir) => {
            let path = dir.join(format!(".s.PGSQL.{port}"));
            return within(options.connect_timeout, UnixStream::connect(path))
                .await
                .map(Either::Right);
        }
        Addr::Ip(ip) => vec![SocketAddr::new(ip, port)],
        Addr::Name(name) => {
            let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), port))
                .await?
                .collect();
            if options.shuffle {
                shuffle(&mut addrs);
            }
            addrs
        }
    };
    let mut last = None;
    for addr in addrs {
        match within(options.connect_timeout, TcpStream::connect(addr)).await {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                let socket = SockRef::from(&stream);
                if let Some(timeout) = options.user_timeout {
                    socket.set_tcp_user_timeout(Some(timeout))?;
                }
                if let Some(keepalive) = &options.keepalive {
                    socket.set_tcp_keepalive(keepalive)?;
                }
                return Ok(Either::Left(stream));
            }
            Err(err) => last = Some(err),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "the host name resolves to no address",
        )
    }))
}

/// `connecting`, given up after `timeout`.
async fn within<T>(
    timeout: Option<Duration>,
    connecting: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match timeout {
        None => connecting.await,
        Some(timeout) => tokio::time::timeout(timeout, connecting)
            .await
            .unwrap_or_else(|_| {
                Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connecting timed out (connect_timeout)",
                ))
            }),
    }
}

impl AsyncRead for Dialed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let socket = ready!(self.poll_open(cx))?;
        Pin::new(socket).poll_read(cx, buf)
    }
}

impl AsyncWrite for Dialed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let socket = ready!(self.poll_open(cx))?;
        Pin::new(socket).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let socket = ready!(self.poll_open(cx))?;
        Pin::new(socket).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.state {
            DialState::Open(socket) => Pin::new(socket).poll_shutdown(cx),
            DialState::Connecting(_) => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shuffle_keeps_every_item_once() {
        for len in 0..12 {
            let mut items: Vec<usize> = (0..len).collect();
            shuffle(&mut items);
            items.sort_unstable();
            assert_eq!(items, (0..len).collect::<Vec<_>>());
        }
    }
}
