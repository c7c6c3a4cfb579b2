//! `DatabaseConfig`: how the fleet connects to its database, with what the
//! driver does not do itself: a password from `PGPASSWORD` or the password
//! file (`.pgpass`), and TLS through rustls with libpq's `sslmode`s.
//!
//! | `sslmode` | what is checked |
//! |---|---|
//! | `disable` | no TLS |
//! | `prefer` (the default) | TLS when the server offers it, else plain; the certificate is not checked (unless a root certificate is found, as for `require`) |
//! | `require` | TLS or no connection; the certificate is not checked — unless a root certificate is found (`sslrootcert`, else `~/.postgresql/root.crt`), which it must then chain to (libpq's rule) |
//! | `verify-ca` | TLS; the certificate must chain to the root certificates (`sslrootcert`, else `~/.postgresql/root.crt`; neither is an error) |
//! | `verify-full` | as `verify-ca`, and the certificate must name the host connected to |
//!
//! `sslrootcert=system` names Mozilla's roots (compiled in, from
//! `webpki-roots`) and makes `verify-full` the mode; a weaker one is an
//! error, as with libpq. TLS applies to TCP connections; a Unix socket is
//! never encrypted. Without a password in the URL, `PGPASSWORD` gives it,
//! else the password file (`passfile` in the URL, else `PGPASSFILE`, else
//! `~/.pgpass`), matched on each host in turn (its `hostaddr` when it has
//! one; a Unix socket matches `localhost`), the port, the database and the
//! user; a password file that its group or others may read is ignored, with
//! a warning. A server that asks for the password in clear text is refused
//! unless the connection is TLS whose certificate was checked against root
//! certificates, or a Unix socket in a directory others cannot write, or
//! `require_auth` names `password` (see `crate::auth`). No password is ever
//! logged, nor shown by `Debug`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, Config, Connection};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::FleetError;
use crate::auth::{RequireAuth, StartupRules};
use crate::dial::{RawStream, Target, TlsStream};

/// The TLS requirement of a connection: libpq's `sslmode` values (see the
/// module's table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsMode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it.
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, with a certificate that chains to the root certificates.
    VerifyCa,
    /// As `VerifyCa`, and the certificate names the host.
    VerifyFull,
}

impl TlsMode {
    fn parse(value: &str) -> Result<TlsMode, FleetError> {
        Ok(match value {
            "disable" => TlsMode::Disable,
            "prefer" => TlsMode::Prefer,
            "require" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" => TlsMode::VerifyFull,
            other => {
                return Err(FleetError::InvalidUrl(format!(
                    "sslmode {other:?} is not one of disable, prefer, require, verify-ca, \
                     verify-full (allow is not supported)"
                )));
            }
        })
    }

    /// The mode's name in a URL.
    fn name(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }
}

/// How to connect to the fleet's database: the driver's [`Config`], the
/// [`TlsMode`], and where root certificates and the password file are. Made
/// from a URL ([`parse`](Self::parse)) or from a [`Config`] (its `sslmode`,
/// with the defaults for the rest).
///
/// ```
/// use asynctask_fleet::{DatabaseConfig, TlsMode};
///
/// let config = DatabaseConfig::parse(
///     "postgresql://fleet@db.internal/asynctask?sslmode=verify-full&sslrootcert=/etc/ca.pem",
/// )
/// .unwrap();
/// assert_eq!(config.tls_mode(), TlsMode::VerifyFull);
/// assert_eq!(config.config().get_user(), Some("fleet"));
/// ```
#[derive(Clone)]
pub struct DatabaseConfig {
    config: Config,
    tls: TlsMode,
    root_cert: Option<PathBuf>,
    passfile: Option<PathBuf>,
    require_auth: RequireAuth,
}

impl fmt::Debug for DatabaseConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The configuration may hold a password: only what is safe to show.
        f.debug_struct("DatabaseConfig")
            .field("tls", &self.tls)
            .field("root_cert", &self.root_cert)
            .finish_non_exhaustive()
    }
}

impl From<Config> for DatabaseConfig {
    fn from(config: Config) -> Self {
        let tls = match config.get_ssl_mode() {
            SslMode::Disable => TlsMode::Disable,
            SslMode::Require => TlsMode::Require,
            _ => TlsMode::Prefer,
        };
        DatabaseConfig {
            config,
            tls,
            root_cert: None,
            passfile: None,
            require_auth: RequireAuth::default(),
        }
    }
}

impl From<&Config> for DatabaseConfig {
    fn from(config: &Config) -> Self {
        DatabaseConfig::from(config.clone())
    }
}

impl From<&DatabaseConfig> for DatabaseConfig {
    fn from(config: &DatabaseConfig) -> Self {
        config.clone()
    }
}

/// How long a session of the fleet may sit idle inside a transaction
/// before the server ends it (rolling the transaction back, releasing its
/// row locks): longer than any legitimate pause inside one (a
/// [`ResultClaim`](crate::ResultClaim) waits for its host's
/// acknowledgement), short enough that a client that vanished mid-transaction
/// (a cut link) cannot hold a task's row for hours. The default of
/// [`FleetOptions::idle_in_transaction_timeout`](crate::FleetOptions::idle_in_transaction_timeout).
pub const IDLE_IN_TRANSACTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Sets what every session of the fleet needs on the server's side: the
/// idle-in-transaction limit, and TCP keepalives (a probe after 30 s idle,
/// then every 10 s, 3 unanswered end it; on PostgreSQL 12 and later,
/// unacknowledged data for 60 s ends it; on 14 and later the client's socket
/// is also checked every 10 s while a query runs), so the session of a client that vanished ends
/// and its locks go with it. One round trip. Unix sockets ignore the TCP
/// settings.
pub(crate) async fn session_settings(
    client: &Client,
    idle_in_transaction: std::time::Duration,
) -> Result<(), FleetError> {
    let idle_ms = idle_in_transaction.as_millis().clamp(1, i32::MAX as u128);
    client
        .batch_execute(&format!(
            "SELECT set_config('idle_in_transaction_session_timeout', '{idle_ms}', false),
                    set_config('tcp_keepalives_idle', '30', false),
                    set_config('tcp_keepalives_interval', '10', false),
                    set_config('tcp_keepalives_count', '3', false),
                    CASE WHEN current_setting('server_version_num')::int >= 120000
                         THEN set_config('tcp_user_timeout', '60000', false)
                    END,
                    CASE WHEN current_setting('server_version_num')::int >= 140000
                         THEN set_config('client_connection_check_interval', '10000', false)
                    END"
        ))
        .await
        .map_err(FleetError::db("setting the session's timeouts"))
}

/// The parameters read here rather than by the driver.
const OWN_PARAMS: [&str; 4] = ["sslmode", "sslrootcert", "passfile", "require_auth"];

impl DatabaseConfig {
    /// Parses a `postgresql://` URL or a `key=value` connection string.
    /// `sslmode` (all five of libpq's values but `allow`), `sslrootcert`,
    /// `passfile` and `require_auth` are read here; the rest by the driver.
    ///
    /// # Errors
    ///
    /// [`FleetError::InvalidUrl`] for a bad `sslmode`, `require_auth` or
    /// quoting, or `sslrootcert=system` with a mode weaker than
    /// `verify-full`; [`FleetError::BadUrl`] for what the driver refuses.
    pub fn parse(url: &str) -> Result<DatabaseConfig, FleetError> {
        let (rest, own) = split_params(url)?;
        let mut config: Config = rest
            .parse()
            .map_err(|source| FleetError::BadUrl { source })?;
        let mut tls = None;
        let mut root_cert = None;
        let mut passfile = None;
        let mut require_auth = RequireAuth::default();
        for (key, value) in own {
            match key.as_str() {
                "sslmode" => tls = Some(TlsMode::parse(&value)?),
                "sslrootcert" => root_cert = Some(PathBuf::from(value)),
                "require_auth" => require_auth = RequireAuth::parse(&value)?,
                _ => passfile = Some(PathBuf::from(value)),
            }
        }
        let tls = tls_mode(tls, root_cert.as_deref())?;
        config.ssl_mode(match tls {
            TlsMode::Disable => SslMode::Disable,
            TlsMode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        });
        Ok(DatabaseConfig {
            config,
            tls,
            root_cert,
            passfile,
            require_auth,
        })
    }

    /// The driver's configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The TLS requirement.
    #[must_use]
    pub fn tls_mode(&self) -> TlsMode {
        self.tls
    }

    /// Connects to each host in turn: its password filled in if the URL
    /// has none, TLS as the mode says, the startup watched (a password is
    /// never sent in clear over a network unless `require_auth` says so).
    pub(crate) async fn connect(
        &self,
    ) -> Result<(Client, Connection<RawStream, TlsStream>), FleetError> {
        let (tls, tls_verified) = self.tls_connector()?;
        let targets = crate::dial::targets(&self.config)?;
        let rules = StartupRules {
            require_auth: self.require_auth.clone(),
            session: self.config.get_target_session_attrs(),
        };
        crate::dial::connect(
            &self.config,
            targets,
            (tls, tls_verified),
            rules,
            |target| self.password(target),
        )
        .await
    }

    /// The password for `target`, from `PGPASSWORD`, else from the password
    /// file.
    fn password(&self, target: &Target) -> Option<String> {
        if let Some(password) = std::env::var("PGPASSWORD").ok().filter(|p| !p.is_empty()) {
            return Some(password);
        }
        let file = self
            .passfile
            .clone()
            .or_else(|| std::env::var_os("PGPASSFILE").map(PathBuf::from))
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".pgpass")))?;
        let text = read_private(&file)?;
        let port = target.port.to_string();
        let user = self.config.get_user().unwrap_or_default();
        let dbname = self.config.get_dbname().unwrap_or(user);
        let found = find_password(&text, [&target.password_host, &port, dbname, user]);
        if found.is_none()
            && let Some(name) = &target.named_host
            && find_password(&text, [name, &port, dbname, user]).is_some()
        {
            // libpq would use the line for the name and send its password
            // to whatever address `hostaddr` gives: not here.
            tracing::warn!(
                host = %name,
                hostaddr = %target.password_host,
                "the password file's line for the host name is not used: the connection goes to \
                 hostaddr, so only a line for that address is (add one)"
            );
        }
        found
    }

    /// The TLS connector for the mode: which certificates it accepts; and
    /// whether it checks them against root certificates (else any
    /// certificate is taken, and TLS keeps out only those who listen).
    fn tls_connector(&self) -> Result<(MakeRustlsConnect, bool), FleetError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|err| FleetError::Tls(format!("no TLS protocol version: {err}")))?;
        let found_root = self.root_cert.clone().or_else(|| {
            let home = std::env::var_os("HOME")?;
            let file = Path::new(&home).join(".postgresql").join("root.crt");
            file.is_file().then_some(file)
        });
        let roots = found_root.as_deref().map(roots).transpose()?;
        let verified = roots.is_some();
        let verifier = verifier(self.tls, roots, provider)?;
        let config = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok((MakeRustlsConnect::new(config), verified))
    }
}

/// What checks the server's certificate in `mode`, given the root
/// certificates found (`sslrootcert`, else `~/.postgresql/root.crt`).
fn verifier(
    mode: TlsMode,
    roots: Option<RootCertStore>,
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn ServerCertVerifier>, FleetError> {
    let roots = match (mode, roots) {
        (TlsMode::Disable | TlsMode::Prefer | TlsMode::Require, None) => {
            return Ok(Arc::new(AnyCertificate(provider)));
        }
        (TlsMode::VerifyCa | TlsMode::VerifyFull, None) => {
            // Nothing to check the certificate against: fail closed, as
            // libpq does, rather than trust a default set of roots.
            return Err(FleetError::Tls(format!(
                "sslmode={} needs root certificates to check the server's certificate \
                 against, and there are none: give sslrootcert=FILE (or put them in \
                 ~/.postgresql/root.crt), or sslrootcert=system with sslmode=verify-full for \
                 Mozilla's roots",
                mode.name()
            )));
        }
        (_, Some(roots)) => roots,
    };
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|err| FleetError::Tls(format!("cannot check certificates: {err}")))?;
    Ok(if mode == TlsMode::VerifyFull {
        inner
    } else {
        Arc::new(AnyName(inner))
    })
}

/// The mode the URL's `sslmode` and `sslrootcert` make: `verify-full`
/// with the system's roots (`sslrootcert=system`), which refuses a weaker
/// mode as libpq does (anyone can get a certificate those roots vouch for,
/// for a name of their own); else the mode given, `prefer` by default.
fn tls_mode(given: Option<TlsMode>, root_cert: Option<&Path>) -> Result<TlsMode, FleetError> {
    if root_cert != Some(Path::new("system")) {
        return Ok(given.unwrap_or(TlsMode::Prefer));
    }
    match given {
        None | Some(TlsMode::VerifyFull) => Ok(TlsMode::VerifyFull),
        Some(weaker) => Err(FleetError::InvalidUrl(format!(
            "sslrootcert=system needs sslmode=verify-full (or no sslmode), not {}: the \
             system's roots vouch for anyone's certificate for a name of their own, so the \
             name must be checked",
            weaker.name()
        ))),
    }
}

/// The root certificates: those of `file`, or Mozilla's (`system`).
fn roots(file: &Path) -> Result<RootCertStore, FleetError> {
    let mut roots = RootCertStore::empty();
    match file {
        file if file != Path::new("system") => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
                .and_then(Iterator::collect)
                .map_err(|err| {
                    FleetError::Tls(format!(
                        "cannot read the root certificates {}: {err}",
                        file.display()
                    ))
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(FleetError::Tls(format!(
                    "{} holds no root certificate",
                    file.display()
                )));
            }
        }
        _ => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    Ok(roots)
}

/// `verify-ca`: the certificate must chain to the roots, whatever host it
/// names.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require` without root certificates: encryption only, as
/// libpq does; the handshake's signatures are still checked against the
/// certificate presented.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A password file's text, if only its owner may read it (libpq ignores it
/// otherwise).
fn read_private(file: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(file).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        tracing::warn!(
            file = %file.display(),
            "the password file is ignored: its group or others may read it (chmod 600 it)"
        );
        return None;
    }
    std::fs::read_to_string(file).ok()
}

/// The password of the first line of a password file that matches `want`
/// (host, port, database, user); `*` matches anything, `\` escapes `:` and
/// `\`.
fn find_password(text: &str, want: [&str; 4]) -> Option<String> {
    text.lines()
        .filter(|line| !line.trim_start().starts_with('#') && !line.trim().is_empty())
        .find_map(|line| {
            let fields = split_escaped(line);
            if fields.len() < 5 {
                return None;
            }
            let matches = fields
                .iter()
                .zip(want)
                .all(|(field, want)| field == "*" || field == want);
            matches.then(|| fields[4..].join(":"))
        })
}

/// A password file's line split at its unescaped colons, unescaped.
fn split_escaped(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => field.extend(chars.next()),
            ':' => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    fields
}

/// Splits `url` into the connection string without this module's own
/// parameters, and those parameters (key, decoded value).
fn split_params(url: &str) -> Result<(String, Vec<(String, String)>), FleetError> {
    let trimmed = url.trim();
    if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
        let Some((base, query)) = trimmed.split_once('?') else {
            return Ok((trimmed.to_owned(), Vec::new()));
        };
        let mut kept = Vec::new();
        let mut own = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = percent_decode(key)?;
            if OWN_PARAMS.contains(&key.as_str()) {
                own.push((key, percent_decode(value)?));
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, own));
    }
    let mut kept = String::new();
    let mut own = Vec::new();
    for (key, value) in key_values(trimmed)? {
        if OWN_PARAMS.contains(&key.as_str()) {
            own.push((key, value));
        } else {
            let quoted = value.replace('\\', "\\\\").replace('\'', "\\'");
            kept.push_str(&format!("{key}='{quoted}' "));
        }
    }
    Ok((kept.trim_end().to_owned(), own))
}

/// The pairs of a `key=value` connection string, values unquoted.
fn key_values(text: &str) -> Result<Vec<(String, String)>, FleetError> {
    let bad = |why: &str| FleetError::InvalidUrl(format!("the connection string {why}"));
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(pairs);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(bad(&format!("has no '=' after {key}")));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    Some('\\') => value.push(chars.next().ok_or_else(|| bad("ends in '\\'"))?),
                    Some('\'') => break,
                    Some(c) => value.push(c),
                    None => return Err(bad(&format!("has an unclosed quote in {key}"))),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.push(chars.next().ok_or_else(|| bad("ends in '\\'"))?);
                } else {
                    value.push(c);
                }
            }
        }
        pairs.push((key, value));
    }
}

/// `%XX` sequences decoded.
fn percent_decode(text: &str) -> Result<String, FleetError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = text
                .get(at + 1..at + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| {
                    FleetError::InvalidUrl("the URL has a bad %-escape in a parameter".to_owned())
                })?;
            out.push(hex);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| FleetError::InvalidUrl("a URL parameter is not UTF-8".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_parameters_are_taken_out_of_both_forms() {
        let url = DatabaseConfig::parse(
            "postgresql://u@h:6000/d?application_name=x&sslmode=verify-ca&sslrootcert=%2Fca.pem&passfile=/p",
        )
        .expect("parses");
        assert_eq!(url.tls_mode(), TlsMode::VerifyCa);
        assert_eq!(url.root_cert.as_deref(), Some(Path::new("/ca.pem")));
        assert_eq!(url.passfile.as_deref(), Some(Path::new("/p")));
        assert_eq!(url.config().get_application_name(), Some("x"));
        assert_eq!(url.config().get_ssl_mode(), SslMode::Require);

        let kv = DatabaseConfig::parse(
            "host=h port=6000 user='a b' password='it\\'s' sslmode = verify-full dbname=d",
        )
        .expect("parses");
        assert_eq!(kv.tls_mode(), TlsMode::VerifyFull);
        assert_eq!(kv.config().get_user(), Some("a b"));
        assert_eq!(kv.config().get_password(), Some(&b"it's"[..]));
        assert_eq!(kv.config().get_ports(), [6000]);
        assert!(
            !format!("{kv:?}").contains("it's"),
            "Debug hides the password"
        );

        let plain = DatabaseConfig::parse("postgresql://u@h/d").expect("parses");
        assert_eq!(plain.tls_mode(), TlsMode::Prefer);
    }

    #[test]
    fn bad_parameters_are_clear_errors() {
        let err = DatabaseConfig::parse("postgresql://u@h/d?sslmode=allow").expect_err("refused");
        assert_eq!(
            err.to_string(),
            "the fleet's database URL is not valid: sslmode \"allow\" is not one of disable, \
             prefer, require, verify-ca, verify-full (allow is not supported)"
        );
        let err = DatabaseConfig::parse("host='h user=u").expect_err("refused");
        assert_eq!(
            err.to_string(),
            "the fleet's database URL is not valid: the connection string has an unclosed quote \
             in host"
        );
    }

    /// The crypto provider the connections use.
    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    #[test]
    fn verify_ca_and_verify_full_without_root_certificates_fail_closed() {
        for mode in [TlsMode::VerifyCa, TlsMode::VerifyFull] {
            let err = verifier(mode, None, provider()).expect_err("nothing to check against");
            assert_eq!(
                err.to_string(),
                format!(
                    "TLS to the fleet's database cannot be set up: sslmode={} needs root \
                     certificates to check the server's certificate against, and there are \
                     none: give sslrootcert=FILE (or put them in ~/.postgresql/root.crt), or \
                     sslrootcert=system with sslmode=verify-full for Mozilla's roots",
                    mode.name()
                )
            );
        }
        // Encryption alone needs no roots.
        for mode in [TlsMode::Disable, TlsMode::Prefer, TlsMode::Require] {
            verifier(mode, None, provider()).expect("encryption only");
        }
    }

    #[test]
    fn sslrootcert_system_means_verify_full_and_the_name_is_checked() {
        let config = DatabaseConfig::parse("postgresql://u@db.internal/d?sslrootcert=system")
            .expect("parses");
        assert_eq!(config.tls_mode(), TlsMode::VerifyFull);
        let full =
            DatabaseConfig::parse("host=h sslmode=verify-full sslrootcert=system").expect("parses");
        assert_eq!(full.tls_mode(), TlsMode::VerifyFull);
        for weaker in ["disable", "prefer", "require", "verify-ca"] {
            let err = DatabaseConfig::parse(&format!("host=h sslmode={weaker} sslrootcert=system"))
                .expect_err("weaker than verify-full");
            assert_eq!(
                err.to_string(),
                format!(
                    "the fleet's database URL is not valid: sslrootcert=system needs \
                     sslmode=verify-full (or no sslmode), not {weaker}: the system's roots vouch \
                     for anyone's certificate for a name of their own, so the name must be \
                     checked"
                )
            );
        }
        // The mode it makes checks the name: with the test's CA standing
        // in for the system's roots, a certificate for another name is
        // refused, its own name accepted.
        let (ca, cert, _) = asynctask_test_support::certificates(&["db.internal".to_owned()]);
        let mut roots = RootCertStore::empty();
        let ca = CertificateDer::from_pem_slice(ca.as_bytes()).expect("a CA");
        roots.add(ca).expect("a root");
        let verifier = verifier(config.tls_mode(), Some(roots), provider()).expect("a verifier");
        let cert = CertificateDer::from_pem_slice(cert.as_bytes()).expect("a certificate");
        let check = |name: &'static str| {
            let name = ServerName::try_from(name).expect("a name");
            verifier.verify_server_cert(&cert, &[], &name, &[], UnixTime::now())
        };
        check("db.internal").expect("its own name");
        let err = check("elsewhere.internal").expect_err("another name");
        assert!(
            matches!(
                err,
                rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                        | CertificateError::NotValidForNameContext { .. }
                )
            ),
            "{err:?}"
        );
    }

    #[test]
    fn each_host_has_its_own_password_and_hostaddr_is_matched_by_address() {
        use std::os::unix::fs::PermissionsExt;
        let dir = asynctask_test_support::temp_dir("pgpass");
        let passfile = dir.path().join("pgpass");
        let write = |text: &str| {
            std::fs::write(&passfile, text).expect("written");
            std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o600))
                .expect("chmod");
        };
        let url = format!(
            "host=db.internal hostaddr=10.0.0.9 user=u dbname=d passfile={}",
            passfile.display()
        );
        let config = DatabaseConfig::parse(&url).expect("parses");
        let targets = crate::dial::targets(config.config()).expect("one host");
        // A line for the name is not sent to an address given for it.
        write("db.internal:*:*:*:for-the-name\n");
        assert_eq!(config.password(&targets[0]), None);
        write("db.internal:*:*:*:for-the-name\n10.0.0.9:*:*:*:for-the-address\n");
        assert_eq!(
            config.password(&targets[0]).as_deref(),
            Some("for-the-address")
        );

        // Two hosts, two ports: each its own line.
        let url = format!(
            "host=one.internal,two.internal port=5432,6000 user=u dbname=d passfile={}",
            passfile.display()
        );
        let config = DatabaseConfig::parse(&url).expect("parses");
        let targets = crate::dial::targets(config.config()).expect("two hosts");
        write("one.internal:5432:*:*:first\ntwo.internal:6000:*:*:second\n");
        let found: Vec<Option<String>> = targets.iter().map(|t| config.password(t)).collect();
        assert_eq!(found, [Some("first".to_owned()), Some("second".to_owned())]);
    }

    #[test]
    fn the_password_file_matches_like_libpq() {
        let text = "# comment\n\
                    other:5432:*:u:wrong\n\
                    h:5432:d:u:first\\:part\n\
                    *:*:*:*:fallback\n";
        assert_eq!(
            find_password(text, ["h", "5432", "d", "u"]).as_deref(),
            Some("first:part")
        );
        assert_eq!(
            find_password(text, ["h", "6000", "d", "u"]).as_deref(),
            Some("fallback")
        );
        assert_eq!(find_password("h:5432:d:u\n", ["h", "5432", "d", "u"]), None);
    }
}
