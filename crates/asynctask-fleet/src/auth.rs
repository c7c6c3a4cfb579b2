//! What the client lets a server ask for during a connection's startup:
//! libpq's `require_auth`, the rule that no password crosses a network in
//! clear, and `target_session_attrs`; and [`Guarded`], the stream that
//! watches the startup messages and fails the read that brings a refused
//! request, before the driver can answer it.
//!
//! The driver answers a request for the password in clear text
//! (`AuthenticationCleartextPassword`) by sending it, whatever carries the
//! connection. The guard reads the server's messages as they arrive: each
//! authentication request (`'R'`, its length, its code) is judged when its
//! code is complete, and a refused one fails the read with
//! [`AuthRefusal`]. The driver never holds the whole message, so it cannot
//! answer. Once the server says it is ready (`'Z'`) the guard passes bytes
//! through unread. Over TLS a second guard watches above the encryption:
//! the one on the socket stops reading at the server's `'S'` (TLS follows).
//! The guard fails closed: an answer to the request for TLS other than
//! `'S'` or `'N'`, a message type that cannot come before `'Z'`, or a length
//! beyond [`MAX_STARTUP_MESSAGE`] refuses the connection, so that the guard
//! never reads the stream otherwise than the driver does.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::TargetSessionAttrs;
use tokio_postgres::tls::{ChannelBinding, TlsConnect, TlsStream};

use crate::FleetError;

/// A way a server may authenticate the client, as `require_auth` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuthMethod {
    /// The password in clear text.
    Password,
    /// An MD5 hash of the password.
    Md5,
    /// GSSAPI (Kerberos).
    Gss,
    /// SSPI (Windows).
    Sspi,
    /// SCRAM-SHA-256 (the password never crosses the connection).
    ScramSha256,
    /// The peer's credentials over a Unix socket (`SCM_CREDS`).
    Creds,
    /// No authentication at all (the server lets the client in).
    None,
}

impl AuthMethod {
    const ALL: [AuthMethod; 7] = [
        AuthMethod::Password,
        AuthMethod::Md5,
        AuthMethod::Gss,
        AuthMethod::Sspi,
        AuthMethod::ScramSha256,
        AuthMethod::Creds,
        AuthMethod::None,
    ];

    /// The method's name in `require_auth`.
    fn name(self) -> &'static str {
        match self {
            AuthMethod::Password => "password",
            AuthMethod::Md5 => "md5",
            AuthMethod::Gss => "gss",
            AuthMethod::Sspi => "sspi",
            AuthMethod::ScramSha256 => "scram-sha-256",
            AuthMethod::Creds => "creds",
            AuthMethod::None => "none",
        }
    }

    /// The method an authentication request starts, by the request's code;
    /// `None` for a code that goes on with a method already started (GSS
    /// and SASL continuations), ends authentication (0), or is unknown.
    fn of_request(code: i32) -> Option<AuthMethod> {
        Some(match code {
            3 => AuthMethod::Password,
            5 => AuthMethod::Md5,
            6 => AuthMethod::Creds,
            7 => AuthMethod::Gss,
            9 => AuthMethod::Sspi,
            10 => AuthMethod::ScramSha256,
            _ => return None,
        })
    }
}

/// `require_auth`: the methods the server must use (or, each negated with
/// `!`, must not). Empty: any method, or none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RequireAuth {
    methods: Vec<AuthMethod>,
    negated: bool,
}

impl RequireAuth {
    /// Parses libpq's form: methods separated by commas, all plain or all
    /// negated, none twice.
    pub(crate) fn parse(value: &str) -> Result<RequireAuth, FleetError> {
        let bad = |why: String| FleetError::InvalidUrl(format!("require_auth {value:?} {why}"));
        let mut require = RequireAuth::default();
        for (at, item) in value.split(',').map(str::trim).enumerate() {
            if item.is_empty() && value.trim().is_empty() {
                return Ok(require);
            }
            let (negated, name) = match item.strip_prefix('!') {
                Some(name) => (true, name),
                None => (false, item),
            };
            if at > 0 && negated != require.negated {
                return Err(bad("mixes negated and plain methods".to_owned()));
            }
            require.negated = negated;
            let method = AuthMethod::ALL
                .into_iter()
                .find(|method| method.name() == name)
                .ok_or_else(|| {
                    bad(format!(
                        "names {name:?}, which is not one of password, md5, gss, sspi, \
                         scram-sha-256, creds, none"
                    ))
                })?;
            if require.methods.contains(&method) {
                return Err(bad(format!("names {name} twice")));
            }
            require.methods.push(method);
        }
        Ok(require)
    }

    /// Whether the server may use `method`.
    fn allows(&self, method: AuthMethod) -> bool {
        self.methods.is_empty() || self.methods.contains(&method) != self.negated
    }

    /// Whether the user opted into sending the password in clear text over
    /// a network (`require_auth=password`, alone or among others).
    fn opts_into_cleartext(&self) -> bool {
        !self.negated && self.methods.contains(&AuthMethod::Password)
    }
}

impl fmt::Display for RequireAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (at, method) in self.methods.iter().enumerate() {
            let comma = if at > 0 { "," } else { "" };
            let bang = if self.negated { "!" } else { "" };
            write!(f, "{comma}{bang}{}", method.name())?;
        }
        Ok(())
    }
}

/// What the client lets the server ask for during a connection's startup.
#[derive(Debug, Clone)]
pub(crate) struct StartupRules {
    /// The authentication methods allowed.
    pub(crate) require_auth: RequireAuth,
    /// Whether the session must take writes, or must not.
    pub(crate) session: TargetSessionAttrs,
}

/// What carries a connection: the password may travel in clear text only
/// inside TLS whose certificate was checked against root certificates, or
/// over a Unix socket in a directory other users cannot write (which never
/// leaves the machine, and no other user can have put there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// TCP, unencrypted for as long as the guard reads it.
    Tcp,
    /// TLS whose server certificate chains to the root certificates given.
    Tls,
    /// TLS whose server certificate was not checked (`sslmode=prefer` or
    /// `require` without root certificates): whoever sits between the
    /// client and the server can be the other end, so it is no safer for
    /// a password in clear than TCP.
    UnverifiedTls,
    /// A Unix socket in a directory other users cannot write.
    Unix,
    /// A Unix socket in a directory any user can write (such as `/tmp`):
    /// another user may be listening there, so it is treated as TCP.
    SharedUnix,
}

impl Transport {
    /// Whether a password may go in clear text over it without
    /// `require_auth=password`.
    fn carries_cleartext(self) -> bool {
        matches!(self, Transport::Tls | Transport::Unix)
    }
}

/// Why the client broke off a connection's startup: the server asked for
/// a way of authenticating that it does not allow. No password was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthRefusal {
    /// The password in clear text over a network, without TLS whose
    /// certificate was checked.
    Cleartext,
    /// A method `require_auth` rules out.
    NotAllowed {
        /// What the server asked for.
        method: AuthMethod,
        /// The user's `require_auth`.
        require_auth: String,
    },
}

impl fmt::Display for AuthRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthRefusal::Cleartext => f.write_str(
                "the server asked for the password in clear text on a connection that is \
                 neither TLS with a checked certificate nor a private Unix socket, so it was \
                 not sent; set sslmode=verify-full with sslrootcert=FILE so that the server is \
                 known, or use SCRAM with channel_binding=require, or add \
                 require_auth=password to send the password in clear anyway",
            ),
            AuthRefusal::NotAllowed {
                method: AuthMethod::None,
                require_auth,
            } => write!(
                f,
                "the server let the client in without authenticating it, which \
                 require_auth={require_auth} does not allow"
            ),
            AuthRefusal::NotAllowed {
                method,
                require_auth,
            } => write!(
                f,
                "the server asked for {} authentication, which require_auth={require_auth} \
                 does not allow",
                method.name()
            ),
        }
    }
}

impl std::error::Error for AuthRefusal {}

/// The refusal behind a failed connection, if the guard refused it.
pub(crate) fn refusal_in(error: &tokio_postgres::Error) -> Option<&AuthRefusal> {
    let io = std::error::Error::source(error)?.downcast_ref::<io::Error>()?;
    io.get_ref()?.downcast_ref::<AuthRefusal>()
}

/// The code of `SSLRequest`, the client's first message when it asks for
/// TLS.
const SSL_REQUEST_CODE: [u8; 4] = 80_877_103_i32.to_be_bytes();
/// The first byte of a TLS record: a client that starts TLS at once
/// (`sslnegotiation=direct`).
const TLS_HANDSHAKE: u8 = 0x16;
/// The longest `ParameterStatus` message read; longer ones are skipped.
const MAX_PARAMETER_BYTES: usize = 256;

/// The types of the messages a server may send before it is ready
/// (`'Z'`): authentication, parameters, the key to cancel, errors and
/// notices, a protocol version it prefers. Any other type means the guard
/// reads the stream otherwise than the driver does: refused.
const STARTUP_MESSAGES: [u8; 7] = [b'R', b'S', b'K', b'Z', b'E', b'N', b'v'];
/// The longest message read during startup (its length field); an error
/// or notice with all its fields is a few KiB at most.
const MAX_STARTUP_MESSAGE: usize = 64 * 1024;

/// Where the guard is in the connection's startup.
#[derive(Debug)]
enum Stage {
    /// Nothing read yet: the client's first bytes say what comes.
    Start,
    /// The client asked for TLS: the next byte read is the answer.
    SslAnswer,
    /// Reading the server's startup messages.
    Messages(Parser),
    /// Startup is over, or TLS carries it (a guard above watches it).
    Open,
    /// A read was refused: the connection is dead.
    Refused,
}

/// The server's startup messages, read a byte at a time: type, length,
/// then the parts that matter (an authentication request's code, a
/// parameter's name and value).
#[derive(Debug, Default)]
struct Parser {
    header: [u8; 5],
    header_len: usize,
    /// Body bytes left in the current message.
    left: usize,
    /// The body bytes kept (an authentication code, a parameter).
    body: Vec<u8>,
    /// Whether a method has been asked for yet.
    asked: bool,
    in_hot_standby: Option<bool>,
    default_read_only: Option<bool>,
}

/// A stream that watches a connection's startup and fails the read that
/// brings a request [`StartupRules`] refuse. The driver connects over it
/// ([`tokio_postgres::Config::connect_raw`]).
#[derive(Debug)]
pub(crate) struct Guarded<S> {
    inner: S,
    transport: Transport,
    rules: Arc<StartupRules>,
    /// What the client wrote first (up to 8 bytes).
    first: Vec<u8>,
    stage: Stage,
}

impl<S> Guarded<S> {
    /// Guards `inner`, a socket (`Tcp`, `Unix`, `SharedUnix`) or a TLS
    /// stream (`Tls`, `UnverifiedTls`).
    pub(crate) fn new(inner: S, transport: Transport, rules: Arc<StartupRules>) -> Self {
        let stage = if matches!(transport, Transport::Tls | Transport::UnverifiedTls) {
            Stage::Messages(Parser::default())
        } else {
            Stage::Start
        };
        Guarded {
            inner,
            transport,
            rules,
            first: Vec::with_capacity(8),
            stage,
        }
    }

    /// What the client's first bytes say the server will answer.
    fn after_first_bytes(&self) -> Stage {
        if self.first.first() == Some(&TLS_HANDSHAKE) {
            Stage::Open
        } else if self.first.get(4..8) == Some(&SSL_REQUEST_CODE[..]) {
            Stage::SslAnswer
        } else {
            Stage::Messages(Parser::default())
        }
    }

    /// Reads `bytes` from the server; an error refuses them.
    fn observe(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut at = 0;
        while at < bytes.len() {
            match &mut self.stage {
                Stage::Start => self.stage = self.after_first_bytes(),
                Stage::SslAnswer => {
                    // The driver takes exactly one byte as the answer: 'S'
                    // (TLS follows), else the startup goes on in plain. Any
                    // answer but 'S' or 'N' is refused, so that the guard
                    // never reads the stream from another byte than the
                    // driver does.
                    match bytes[at] {
                        b'S' => {
                            self.stage = Stage::Open;
                            return Ok(());
                        }
                        b'N' => {
                            at += 1;
                            self.stage = Stage::Messages(Parser::default());
                        }
                        other => return Err(bad_ssl_answer(other)),
                    }
                }
                Stage::Messages(parser) => {
                    let done = parser.feed(bytes[at], self.transport, &self.rules)?;
                    at += 1;
                    if done {
                        self.stage = Stage::Open;
                        return Ok(());
                    }
                }
                Stage::Open => return Ok(()),
                Stage::Refused => return Err(refused_before()),
            }
        }
        Ok(())
    }
}

/// The error of an answer to a request for TLS that is neither `'S'` nor
/// `'N'`.
fn bad_ssl_answer(byte: u8) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the server answered the request for TLS with byte {byte:#04x}, neither yes ('S') \
             nor no ('N'), so the connection was refused"
        ),
    )
}

/// The error of a message the guard does not expect during startup.
fn bad_message(why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the server sent {why} during the connection's startup, so it was refused"),
    )
}

/// The error of a read after a refusal.
fn refused_before() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "the connection's startup was refused",
    )
}

impl Parser {
    /// Takes one byte of the server's; `true` when startup is over.
    fn feed(&mut self, byte: u8, transport: Transport, rules: &StartupRules) -> io::Result<bool> {
        if self.header_len < 5 {
            self.header[self.header_len] = byte;
            self.header_len += 1;
            if self.header_len == 5 {
                let kind = self.header[0];
                if !STARTUP_MESSAGES.contains(&kind) {
                    return Err(bad_message(format!(
                        "a message of type {kind:#04x}, which does not come before the server \
                         is ready"
                    )));
                }
                let len = i32::from_be_bytes([
                    self.header[1],
                    self.header[2],
                    self.header[3],
                    self.header[4],
                ]);
                self.left = usize::try_from(len)
                    .ok()
                    .filter(|len| *len <= MAX_STARTUP_MESSAGE)
                    .and_then(|len| len.checked_sub(4))
                    .ok_or_else(|| {
                        bad_message(format!("a message of length {len}, which is not plausible"))
                    })?;
                self.body.clear();
                if self.left == 0 {
                    return self.end(rules);
                }
            }
            return Ok(false);
        }
        self.left -= 1;
        let kind = self.header[0];
        if (kind == b'R' && self.body.len() < 4)
            || (kind == b'S' && self.body.len() < MAX_PARAMETER_BYTES)
        {
            self.body.push(byte);
            if kind == b'R' && self.body.len() == 4 {
                // Judged as soon as the code is known: the driver cannot
                // have the whole message yet.
                self.judge(transport, rules)?;
            }
        }
        if self.left == 0 {
            return self.end(rules);
        }
        Ok(false)
    }

    /// Judges an authentication request whose code is in `body`.
    fn judge(&mut self, transport: Transport, rules: &StartupRules) -> io::Result<()> {
        let code = i32::from_be_bytes([self.body[0], self.body[1], self.body[2], self.body[3]]);
        let method = match (code, AuthMethod::of_request(code)) {
            (_, Some(method)) => method,
            (0, None) if !self.asked => AuthMethod::None,
            _ => return Ok(()),
        };
        self.asked = true;
        let refusal = if !rules.require_auth.allows(method) {
            AuthRefusal::NotAllowed {
                method,
                require_auth: rules.require_auth.to_string(),
            }
        } else if method == AuthMethod::Password
            && !transport.carries_cleartext()
            && !rules.require_auth.opts_into_cleartext()
        {
            AuthRefusal::Cleartext
        } else {
            return Ok(());
        };
        Err(io::Error::new(io::ErrorKind::PermissionDenied, refusal))
    }

    /// A whole message read; `true` when it ends the startup.
    fn end(&mut self, rules: &StartupRules) -> io::Result<bool> {
        self.header_len = 0;
        match self.header[0] {
            b'R' if self.body.len() < 4 => {
                // A request shorter than its code: the driver refuses it.
                Ok(false)
            }
            b'S' => {
                let mut parts = self.body.split(|b| *b == 0);
                let (name, value) = (parts.next(), parts.next());
                let on = value.map(|value| value == b"on");
                match name {
                    Some(b"in_hot_standby") => self.in_hot_standby = on,
                    Some(b"default_transaction_read_only") => self.default_read_only = on,
                    _ => {}
                }
                Ok(false)
            }
            b'Z' => self.check_session(rules).map(|()| true),
            _ => Ok(false),
        }
    }

    /// `target_session_attrs`, from what the server reported at startup
    /// (PostgreSQL 14 and later report both settings).
    fn check_session(&self, rules: &StartupRules) -> io::Result<()> {
        let (Some(standby), Some(read_only)) = (self.in_hot_standby, self.default_read_only) else {
            return match rules.session {
                TargetSessionAttrs::Any => Ok(()),
                _ => Err(io::Error::other(
                    "the server does not report whether it takes writes (PostgreSQL 14 and \
                     later do), so target_session_attrs cannot be checked",
                )),
            };
        };
        let takes_writes = !standby && !read_only;
        match rules.session {
            TargetSessionAttrs::ReadWrite if !takes_writes => Err(io::Error::other(
                "the server does not take writes (target_session_attrs=read-write)",
            )),
            TargetSessionAttrs::ReadOnly if takes_writes => Err(io::Error::other(
                "the server takes writes (target_session_attrs=read-only)",
            )),
            _ => Ok(()),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Guarded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match this.stage {
            Stage::Open => return Pin::new(&mut this.inner).poll_read(cx, buf),
            Stage::Refused => return Poll::Ready(Err(refused_before())),
            _ => {}
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let read = buf.filled()[before..].to_vec();
        if let Err(err) = this.observe(&read) {
            // The refused bytes are taken back: the driver never sees them.
            buf.set_filled(before);
            this.stage = Stage::Refused;
            return Poll::Ready(Err(err));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Guarded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if matches!(this.stage, Stage::Refused) {
            return Poll::Ready(Err(refused_before()));
        }
        let written = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        if matches!(this.stage, Stage::Start) && this.first.len() < 8 {
            let room = 8 - this.first.len();
            this.first.extend_from_slice(&buf[..written.min(room)]);
            if this.first.len() == 8 || this.first.first() == Some(&TLS_HANDSHAKE) {
                this.stage = this.after_first_bytes();
            }
        }
        Poll::Ready(Ok(written))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: TlsStream + Unpin> TlsStream for Guarded<S> {
    fn channel_binding(&self) -> ChannelBinding {
        self.inner.channel_binding()
    }
}

/// A TLS connector whose streams are [`Guarded`] above the encryption.
#[derive(Debug)]
pub(crate) struct GuardedTls<T> {
    inner: T,
    rules: Arc<StartupRules>,
    /// Whether `inner` checks the server's certificate against root
    /// certificates.
    verified: bool,
}

impl<T> GuardedTls<T> {
    /// Guards the streams `inner` makes; `verified` when `inner` checks the
    /// server's certificate against root certificates.
    pub(crate) fn new(inner: T, rules: Arc<StartupRules>, verified: bool) -> Self {
        GuardedTls {
            inner,
            rules,
            verified,
        }
    }
}

impl<S, T> TlsConnect<S> for GuardedTls<T>
where
    T: TlsConnect<S>,
    T::Future: Send + 'static,
{
    type Stream = Guarded<T::Stream>;
    type Error = T::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Stream, T::Error>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        let rules = self.rules;
        let transport = if self.verified {
            Transport::Tls
        } else {
            Transport::UnverifiedTls
        };
        let handshake = self.inner.connect(stream);
        Box::pin(async move {
            let stream = handshake.await?;
            Ok(Guarded::new(stream, transport, rules))
        })
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A backend message.
    fn message(kind: u8, body: &[u8]) -> Vec<u8> {
        let len = i32::try_from(body.len() + 4).expect("small");
        let mut bytes = vec![kind];
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend_from_slice(body);
        bytes
    }

    /// An authentication request.
    fn request(code: i32, rest: &[u8]) -> Vec<u8> {
        let mut body = code.to_be_bytes().to_vec();
        body.extend_from_slice(rest);
        message(b'R', &body)
    }

    /// A parameter's status.
    fn parameter(name: &str, value: &str) -> Vec<u8> {
        message(b'S', format!("{name}\0{value}\0").as_bytes())
    }

    fn rules(require_auth: &str, session: TargetSessionAttrs) -> Arc<StartupRules> {
        Arc::new(StartupRules {
            require_auth: RequireAuth::parse(require_auth).expect("valid"),
            session,
        })
    }

    /// What the driver reads through a guard when the client first writes
    /// `first` and the server sends `chunks`, each once the one before has
    /// been read, then closes; or the refusal.
    async fn through(
        transport: Transport,
        rules: Arc<StartupRules>,
        first: &[u8],
        chunks: Vec<Vec<u8>>,
    ) -> (Vec<u8>, Option<io::Error>) {
        let (client, mut server) = tokio::io::duplex(64);
        let mut guarded = Guarded::new(client, transport, rules);
        guarded.write_all(first).await.expect("written");
        let (progress, mut seen) = tokio::sync::watch::channel(0_usize);
        let sending = tokio::spawn(async move {
            let mut first = vec![0; 8];
            let _ = server.read_exact(&mut first).await;
            let mut sent = 0;
            for chunk in chunks {
                if seen.wait_for(|read| *read >= sent).await.is_err()
                    || server.write_all(&chunk).await.is_err()
                {
                    return;
                }
                sent += chunk.len();
            }
        });
        let mut read = Vec::new();
        let mut buf = [0; 64];
        let error = loop {
            match guarded.read(&mut buf).await {
                Ok(0) => break None,
                Ok(n) => {
                    read.extend_from_slice(&buf[..n]);
                    progress.send_replace(read.len());
                }
                Err(err) => break Some(err),
            }
        };
        sending.abort();
        (read, error)
    }

    /// A startup message's first bytes (not a request for TLS).
    const STARTUP: [u8; 8] = [0, 0, 0, 40, 0, 3, 0, 0];
    /// A request for TLS.
    const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 4, 210, 22, 47];

    fn refusal(error: &io::Error) -> Option<&AuthRefusal> {
        error.get_ref()?.downcast_ref::<AuthRefusal>()
    }

    #[tokio::test]
    async fn a_cleartext_request_is_refused_over_tcp_and_allowed_over_tls_or_a_unix_socket() {
        let any = || rules("", TargetSessionAttrs::Any);
        let cleartext = request(3, &[]);
        // TLS whose certificate nobody checked, and a socket in a directory
        // anyone can write, are as open to whoever sits there as TCP.
        for transport in [
            Transport::Tcp,
            Transport::UnverifiedTls,
            Transport::SharedUnix,
        ] {
            let (read, error) = through(transport, any(), &STARTUP, vec![cleartext.clone()]).await;
            assert_eq!(read, Vec::<u8>::new(), "{transport:?}");
            let error = error.expect("refused");
            assert_eq!(
                refusal(&error),
                Some(&AuthRefusal::Cleartext),
                "{transport:?}"
            );
            assert!(
                error
                    .to_string()
                    .contains("sslmode=verify-full with sslrootcert"),
                "{error}"
            );
            assert!(
                error.to_string().contains("require_auth=password"),
                "{error}"
            );
            // The opt-in.
            let opted = rules("password", TargetSessionAttrs::Any);
            let (read, error) = through(transport, opted, &STARTUP, vec![cleartext.clone()]).await;
            assert_eq!(
                (read, error.map(|e| e.to_string())),
                (cleartext.clone(), None)
            );
        }

        for transport in [Transport::Tls, Transport::Unix] {
            let (read, error) = through(transport, any(), &STARTUP, vec![cleartext.clone()]).await;
            assert_eq!(
                (read, error.map(|e| e.to_string())),
                (cleartext.clone(), None)
            );
        }
        // MD5 and SCRAM are not cleartext.
        for asked in [request(5, b"salt"), request(10, b"SCRAM-SHA-256\0\0")] {
            let (read, error) = through(Transport::Tcp, any(), &STARTUP, vec![asked.clone()]).await;
            assert_eq!((read, error.map(|e| e.to_string())), (asked, None));
        }
    }

    #[tokio::test]
    async fn a_request_split_across_reads_is_refused_before_the_driver_has_it_whole() {
        let cleartext = request(3, &[]);
        let (head, tail) = cleartext.split_at(7);
        let (read, error) = through(
            Transport::Tcp,
            rules("", TargetSessionAttrs::Any),
            &STARTUP,
            vec![head.to_vec(), tail.to_vec()],
        )
        .await;
        assert_eq!(read, head);
        assert_eq!(
            error.as_ref().and_then(refusal),
            Some(&AuthRefusal::Cleartext)
        );
    }

    #[tokio::test]
    async fn after_the_server_agrees_to_tls_the_socket_s_guard_reads_nothing() {
        // What follows 'S' is encrypted: the guard above TLS reads it.
        let mut bytes = vec![b'S'];
        bytes.extend(request(3, &[]));
        let (read, error) = through(
            Transport::Tcp,
            rules("", TargetSessionAttrs::Any),
            &SSL_REQUEST,
            vec![bytes.clone()],
        )
        .await;
        assert_eq!((read, error.map(|e| e.to_string())), (bytes, None));
        // 'N': the startup goes on in plain, and is watched.
        let mut bytes = vec![b'N'];
        bytes.extend(request(3, &[]));
        let (read, error) = through(
            Transport::Tcp,
            rules("", TargetSessionAttrs::Any),
            &SSL_REQUEST,
            vec![bytes],
        )
        .await;
        // The read that brings the request is taken back whole ('N' too,
        // when it came in the same read).
        assert!(matches!(read.as_slice(), [] | [b'N']), "{read:?}");
        assert_eq!(
            error.as_ref().and_then(refusal),
            Some(&AuthRefusal::Cleartext)
        );
    }

    #[tokio::test]
    async fn an_answer_to_the_request_for_tls_but_s_or_n_is_refused() {
        // The driver takes the one byte as "no TLS" and reads on from the
        // next; a guard reading from this byte would not see the request.
        for answer in [b'X', b'E'] {
            let mut bytes = vec![answer];
            bytes.extend(request(3, &[]));
            let (read, error) = through(
                Transport::Tcp,
                rules("password", TargetSessionAttrs::Any),
                &SSL_REQUEST,
                vec![bytes],
            )
            .await;
            assert_eq!(read, Vec::<u8>::new());
            let error = error.expect("refused");
            assert_eq!(error.kind(), io::ErrorKind::InvalidData);
            assert_eq!(
                error.to_string(),
                format!(
                    "the server answered the request for TLS with byte {answer:#04x}, neither \
                     yes ('S') nor no ('N'), so the connection was refused"
                )
            );
        }
    }

    #[tokio::test]
    async fn a_message_that_cannot_come_before_the_server_is_ready_is_refused() {
        let oversized = {
            let mut bytes = vec![b'E'];
            bytes.extend(0x0001_0005_i32.to_be_bytes());
            bytes
        };
        let cases = [
            (
                message(b'D', b"row"),
                "the server sent a message of type 0x44, which does not come before the \
                 server is ready during the connection's startup, so it was refused",
            ),
            (
                oversized,
                "the server sent a message of length 65541, which is not plausible during the \
                 connection's startup, so it was refused",
            ),
        ];
        for (bytes, expected) in cases {
            let (read, error) = through(
                Transport::Tcp,
                rules("", TargetSessionAttrs::Any),
                &STARTUP,
                vec![bytes],
            )
            .await;
            assert_eq!(read, Vec::<u8>::new());
            assert_eq!(error.map(|e| e.to_string()).as_deref(), Some(expected));
        }
        // An error of a few KiB, and a notice, are read as usual.
        let mut bytes = message(b'N', &[b'x'; 4000]);
        bytes.extend(message(b'E', &[b'x'; 4000]));
        let (read, error) = through(
            Transport::Tcp,
            rules("", TargetSessionAttrs::Any),
            &STARTUP,
            vec![bytes.clone()],
        )
        .await;
        assert_eq!((read, error.map(|e| e.to_string())), (bytes, None));
    }

    #[tokio::test]
    async fn require_auth_is_enforced_as_libpq_does() {
        let ok = request(0, &[]);
        let cases: [(&str, Vec<u8>, Option<AuthMethod>); 6] = [
            ("scram-sha-256", request(5, b"salt"), Some(AuthMethod::Md5)),
            ("scram-sha-256", ok.clone(), Some(AuthMethod::None)),
            ("md5,scram-sha-256", request(5, b"salt"), None),
            ("!md5", request(5, b"salt"), Some(AuthMethod::Md5)),
            ("!password", request(3, &[]), Some(AuthMethod::Password)),
            ("none", ok.clone(), None),
        ];
        for (require_auth, asked, refused) in cases {
            let (_, error) = through(
                Transport::Tls,
                rules(require_auth, TargetSessionAttrs::Any),
                &STARTUP,
                vec![asked],
            )
            .await;
            let expected = refused.map(|method| AuthRefusal::NotAllowed {
                method,
                require_auth: require_auth.to_owned(),
            });
            assert_eq!(
                error.as_ref().and_then(refusal).cloned(),
                expected,
                "{require_auth}"
            );
        }
        let refusal = AuthRefusal::NotAllowed {
            method: AuthMethod::Md5,
            require_auth: "scram-sha-256".to_owned(),
        };
        assert_eq!(
            refusal.to_string(),
            "the server asked for md5 authentication, which require_auth=scram-sha-256 does \
             not allow"
        );
    }

    #[test]
    fn require_auth_parses_as_libpq_does() {
        for good in [
            "password",
            "md5,scram-sha-256",
            "!password,!md5",
            "none",
            "gss,sspi,creds",
        ] {
            let parsed = RequireAuth::parse(good).expect(good);
            assert_eq!(parsed.to_string(), good);
        }
        assert_eq!(
            RequireAuth::parse("").expect("empty"),
            RequireAuth::default()
        );
        let errors: Vec<String> = ["password,!md5", "plaintext", "md5,md5"]
            .into_iter()
            .map(|bad| RequireAuth::parse(bad).expect_err(bad).to_string())
            .collect();
        assert_eq!(
            errors,
            [
                "the fleet's database URL is not valid: require_auth \"password,!md5\" mixes \
                 negated and plain methods",
                "the fleet's database URL is not valid: require_auth \"plaintext\" names \
                 \"plaintext\", which is not one of password, md5, gss, sspi, scram-sha-256, \
                 creds, none",
                "the fleet's database URL is not valid: require_auth \"md5,md5\" names md5 twice",
            ]
        );
        assert!(
            RequireAuth::parse("password")
                .expect("valid")
                .opts_into_cleartext()
        );
        assert!(
            !RequireAuth::parse("!password")
                .expect("valid")
                .opts_into_cleartext()
        );
    }

    #[tokio::test]
    async fn target_session_attrs_is_checked_on_what_the_server_reports() {
        let startup = |standby: &str| {
            let mut bytes = request(0, &[]);
            bytes.extend(parameter("in_hot_standby", standby));
            bytes.extend(parameter("default_transaction_read_only", "off"));
            bytes.extend(message(b'Z', b"I"));
            bytes
        };
        let run = |session, standby: &'static str| async move {
            through(
                Transport::Tls,
                rules("", session),
                &STARTUP,
                vec![startup(standby)],
            )
            .await
            .1
            .map(|e| e.to_string())
        };
        assert_eq!(run(TargetSessionAttrs::ReadWrite, "off").await, None);
        assert_eq!(
            run(TargetSessionAttrs::ReadWrite, "on").await.as_deref(),
            Some("the server does not take writes (target_session_attrs=read-write)")
        );
        assert_eq!(run(TargetSessionAttrs::ReadOnly, "on").await, None);
        assert_eq!(run(TargetSessionAttrs::Any, "on").await, None);
    }
}
