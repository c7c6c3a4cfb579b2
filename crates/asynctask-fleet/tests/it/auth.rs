//! What the fleet sends a server that asks for a password, against a fake
//! server written here (on 127.0.0.1, or on a Unix socket): never the
//! password in clear over TCP without TLS, unless `require_auth=password`
//! says so; MD5 as before; and never a password-file line kept for another
//! host.

use std::time::Duration;

use asynctask_fleet::{Fleet, FleetError, FleetOptions};
use asynctask_test_support::temp_dir;
use pretty_assertions::assert_eq;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};

/// The password the URLs carry.
const PASSWORD: &str = "pa55-never-in-clear";

/// An authentication request: the password in clear text.
const CLEARTEXT: [u8; 9] = [b'R', 0, 0, 0, 8, 0, 0, 0, 3];
/// An authentication request: an MD5 hash of the password, with a salt.
const MD5: [u8; 13] = [b'R', 0, 0, 0, 12, 0, 0, 0, 5, 1, 2, 3, 4];

/// One message the client sent: its length-prefixed bytes (a type byte
/// first when `typed`), or `None` at the end of the stream.
async fn next_message(
    stream: &mut (impl AsyncRead + Unpin),
    typed: bool,
    into: &mut Vec<u8>,
) -> Option<()> {
    let mut header = vec![0; if typed { 5 } else { 4 }];
    stream.read_exact(&mut header).await.ok()?;
    let len = u32::from_be_bytes(header[header.len() - 4..].try_into().ok()?);
    let mut body = vec![0; usize::try_from(len).ok()?.checked_sub(4)?];
    stream.read_exact(&mut body).await.ok()?;
    into.extend(header);
    into.extend(body);
    Some(())
}

/// A fake server's one connection: it answers a request for TLS with 'N',
/// reads the startup message, asks for `auth`, then reads what the client
/// answers (if anything) and hangs up. Everything the client sent.
async fn serve(stream: impl AsyncRead + AsyncWrite + Unpin, auth: &[u8]) -> Vec<u8> {
    serve_answering(stream, b'N', auth).await
}

/// As [`serve`], answering a request for TLS with `answer`.
async fn serve_answering(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    answer: u8,
    auth: &[u8],
) -> Vec<u8> {
    let mut received = Vec::new();
    if next_message(&mut stream, false, &mut received)
        .await
        .is_none()
    {
        return received;
    }
    if received.get(4..8) == Some(&[4, 210, 22, 47][..]) {
        // SSLRequest: no TLS here.
        if stream.write_all(&[answer]).await.is_err()
            || next_message(&mut stream, false, &mut received)
                .await
                .is_none()
        {
            return received;
        }
    }
    if stream.write_all(auth).await.is_ok() {
        let _ = next_message(&mut stream, true, &mut received).await;
    }
    received
}

/// A fake server on 127.0.0.1 for one connection: its port, and what the
/// client sent it.
async fn fake_tcp_server(auth: &'static [u8]) -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
    fake_tcp_server_answering(b'N', auth).await
}

/// As [`fake_tcp_server`], answering a request for TLS with `answer`.
async fn fake_tcp_server_answering(
    answer: u8,
    auth: &'static [u8],
) -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("bound").port();
    let served = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("a client");
        serve_answering(stream, answer, auth).await
    });
    (port, served)
}

/// What the server received, within a deadline.
async fn received_by(served: tokio::task::JoinHandle<Vec<u8>>) -> Vec<u8> {
    tokio::time::timeout(Duration::from_secs(30), served)
        .await
        .expect("the fake server is done")
        .expect("the fake server did not panic")
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

/// The password message the client sent (`'p'`), if any.
fn password_message(received: &[u8]) -> Option<&[u8]> {
    let at = received.iter().position(|b| *b == b'p')?;
    Some(&received[at..])
}

#[tokio::test]
async fn a_cleartext_password_request_over_tcp_is_refused_before_the_password_is_sent() {
    // The default sslmode (prefer): the server declines TLS, then asks for
    // the password in clear.
    let (port, served) = fake_tcp_server(&CLEARTEXT).await;
    let url = format!("postgresql://fleet:{PASSWORD}@127.0.0.1:{port}/fleet");
    let err = Fleet::connect_url(&url, FleetOptions::new())
        .await
        .expect_err("refused");
    assert_eq!(
        err.chain(),
        "refused to authenticate to the fleet's database: the server asked for the password \
         in clear text on a connection that is neither TLS with a checked certificate nor a \
         private Unix socket, so it was not sent; set sslmode=verify-full with \
         sslrootcert=FILE so that the server is known, or use SCRAM with \
         channel_binding=require, or add require_auth=password to send the password in clear \
         anyway"
    );
    assert!(matches!(err, FleetError::AuthRefused(_)), "{err:?}");
    let received = received_by(served).await;
    assert!(!contains(&received, PASSWORD), "{received:?}");
    assert_eq!(password_message(&received), None);

    // Without TLS asked for at all, the same.
    let (port, served) = fake_tcp_server(&CLEARTEXT).await;
    let url = format!("postgresql://fleet:{PASSWORD}@127.0.0.1:{port}/fleet?sslmode=disable");
    let err = Fleet::connect_url(&url, FleetOptions::new())
        .await
        .expect_err("refused");
    assert!(matches!(err, FleetError::AuthRefused(_)), "{err:?}");
    assert!(!contains(&received_by(served).await, PASSWORD));
}

#[tokio::test]
async fn an_answer_to_the_request_for_tls_but_s_or_n_refuses_the_connection() {
    // The driver takes the one byte as "no TLS" and reads the request that
    // follows; the guard must not read it one byte off and miss it.
    for answer in [b'X', b'E'] {
        let (port, served) = fake_tcp_server_answering(answer, &CLEARTEXT).await;
        let url = format!("postgresql://fleet:{PASSWORD}@127.0.0.1:{port}/fleet");
        let err = Fleet::connect_url(&url, FleetOptions::new())
            .await
            .expect_err("refused");
        let received = received_by(served).await;
        assert!(!contains(&received, PASSWORD), "{received:?}");
        assert_eq!(password_message(&received), None);
        assert!(
            err.chain().contains(&format!(
                "the server answered the request for TLS with byte {answer:#04x}, neither yes \
                 ('S') nor no ('N'), so the connection was refused"
            )),
            "{}",
            err.chain()
        );
    }
}

#[tokio::test]
async fn require_auth_password_sends_it_in_clear_as_asked() {
    let (port, served) = fake_tcp_server(&CLEARTEXT).await;
    let url = format!(
        "postgresql://fleet:{PASSWORD}@127.0.0.1:{port}/fleet?sslmode=disable&require_auth=password"
    );
    let err = Fleet::connect_url(&url, FleetOptions::new())
        .await
        .expect_err("the fake server hangs up");
    assert!(matches!(err, FleetError::Connect { .. }), "{err:?}");
    assert!(!err.chain().contains(PASSWORD), "{}", err.chain());
    let received = received_by(served).await;
    let sent = password_message(&received).expect("a password message");
    assert!(contains(sent, PASSWORD), "{sent:?}");
}

#[tokio::test]
async fn over_a_unix_socket_the_password_may_go_in_clear() {
    let dir = temp_dir("auth-unix");
    let listener = UnixListener::bind(dir.path().join(".s.PGSQL.5432")).expect("a socket");
    let served = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("a client");
        serve(stream, &CLEARTEXT).await
    });
    let url = format!(
        "host={} port=5432 user=fleet dbname=fleet password={PASSWORD}",
        dir.path().display()
    );
    let err = Fleet::connect_url(&url, FleetOptions::new())
        .await
        .expect_err("the fake server hangs up");
    assert!(matches!(err, FleetError::Connect { .. }), "{err:?}");
    let received = received_by(served).await;
    let sent = password_message(&received).expect("a password message");
    assert!(contains(sent, PASSWORD), "{sent:?}");
}

#[tokio::test]
async fn over_a_unix_socket_in_a_directory_anyone_can_write_the_password_is_not_sent_in_clear() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("auth-shared");
    // As /tmp: another user could have put the socket there.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let listener = UnixListener::bind(dir.path().join(".s.PGSQL.5432")).expect("a socket");
    let served = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.expect("a client");
        serve(stream, &CLEARTEXT).await
    });
    let url = format!(
        "host={} port=5432 user=fleet dbname=fleet password={PASSWORD}",
        dir.path().display()
    );
    let err = Fleet::connect_url(&url, FleetOptions::new())
        .await
        .expect_err("refused");
    assert!(matches!(err, FleetError::AuthRefused(_)), "{err:?}");
    let received = received_by(served).await;
    assert!(!contains(&received, PASSWORD), "{received:?}");
}

#[tokio::test]
async fn md5_goes_on_as_before() {
    let (port, served) = fake_tcp_server(&MD5).await;
    let url = format!("postgresql://fleet:{PASSWORD}@127.0.0.1:{port}/fleet?sslmode=disable");
    let err = Fleet::connect_url(&url, FleetOptions::new())
        .await
        .expect_err("the fake server hangs up");
    assert!(matches!(err, FleetError::Connect { .. }), "{err:?}");
    let received = received_by(served).await;
    let sent = password_message(&received).expect("the hash");
    assert!(contains(sent, "md5"), "{sent:?}");
    assert!(!contains(sent, PASSWORD), "{sent:?}");
}

#[tokio::test]
async fn a_password_file_line_for_the_host_name_is_not_sent_to_hostaddr() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("auth-pgpass");
    let passfile = dir.path().join("pgpass");
    std::fs::write(&passfile, format!("db.internal:*:*:*:{PASSWORD}\n")).expect("written");
    std::fs::set_permissions(&passfile, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    // The name is db.internal's, the address is someone else's: the
    // password kept for db.internal must not go there, even in clear on
    // request.
    let (port, served) = fake_tcp_server(&CLEARTEXT).await;
    let url = format!(
        "host=db.internal hostaddr=127.0.0.1 port={port} user=fleet dbname=fleet \
         sslmode=disable require_auth=password passfile={}",
        passfile.display()
    );
    let err = Fleet::connect_url(&url, FleetOptions::new())
        .await
        .expect_err("no password for that address");
    assert!(matches!(err, FleetError::Connect { .. }), "{err:?}");
    let received = received_by(served).await;
    assert!(!contains(&received, PASSWORD), "{received:?}");
}

/// A fake server on 127.0.0.1 for one connection that agrees to TLS with
/// `cert` and `key` (PEM), then asks for the password in clear text: its
/// port, and what the client sent it inside TLS.
fn fake_tls_server(cert: &str, key: &str) -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
    use std::io::{Read, Write};

    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<_, _>>()
        .expect("certificates");
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("a key");
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("a server configuration");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().expect("bound").port();
    let served = tokio::task::spawn_blocking(move || {
        let (mut socket, _) = listener.accept().expect("a client");
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("a timeout");
        let mut request = [0; 8];
        socket
            .read_exact(&mut request)
            .expect("the request for TLS");
        assert_eq!(request[4..], [4, 210, 22, 47], "an SSLRequest");
        socket.write_all(b"S").expect("written");
        let connection =
            rustls::ServerConnection::new(std::sync::Arc::new(config)).expect("a connection");
        let mut tls = rustls::StreamOwned::new(connection, socket);
        let mut received = Vec::new();
        // The startup message, then the answer to the request (if any).
        let message = |tls: &mut dyn Read, typed: bool, received: &mut Vec<u8>| -> Option<()> {
            let mut header = vec![0; if typed { 5 } else { 4 }];
            tls.read_exact(&mut header).ok()?;
            let len = u32::from_be_bytes(header[header.len() - 4..].try_into().ok()?);
            let mut body = vec![0; usize::try_from(len).ok()?.checked_sub(4)?];
            tls.read_exact(&mut body).ok()?;
            received.extend(header);
            received.extend(body);
            Some(())
        };
        if message(&mut tls, false, &mut received).is_some()
            && tls.write_all(&CLEARTEXT).and_then(|()| tls.flush()).is_ok()
        {
            let _ = message(&mut tls, true, &mut received);
        }
        received
    });
    (port, served)
}

#[tokio::test]
async fn a_cleartext_request_over_tls_goes_only_when_the_certificate_was_checked() {
    let dir = temp_dir("auth-tls");
    let (ca, cert, key) = asynctask_test_support::certificates(&["127.0.0.1".to_owned()]);
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca).expect("written");

    // sslmode=require (or the default prefer) takes any certificate: whoever
    // answers could be anyone, so the password does not go in clear.
    for mode in ["require", "prefer"] {
        let (port, served) = fake_tls_server(&cert, &key);
        let url = format!("postgresql://fleet:{PASSWORD}@127.0.0.1:{port}/fleet?sslmode={mode}");
        let err = Fleet::connect_url(&url, FleetOptions::new())
            .await
            .expect_err("refused");
        assert!(matches!(err, FleetError::AuthRefused(_)), "{mode}: {err:?}");
        let received = received_by(served).await;
        assert!(!contains(&received, PASSWORD), "{mode}: {received:?}");
    }

    // verify-full with the root that signed the certificate: it goes.
    let (port, served) = fake_tls_server(&cert, &key);
    let url = format!(
        "postgresql://fleet:{PASSWORD}@127.0.0.1:{port}/fleet?sslmode=verify-full&sslrootcert={}",
        ca_file.display()
    );
    let err = Fleet::connect_url(&url, FleetOptions::new())
        .await
        .expect_err("the fake server hangs up");
    assert!(matches!(err, FleetError::Connect { .. }), "{err:?}");
    let received = received_by(served).await;
    let sent = password_message(&received).expect("a password message");
    assert!(contains(sent, PASSWORD), "{sent:?}");
}
