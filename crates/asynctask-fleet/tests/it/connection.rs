//! Credentials and TLS against a real server: the password from a password
//! file when the URL has none, TLS through rustls for every `sslmode`, and
//! no password in any error.

use asynctask_fleet::{DatabaseConfig, Fleet, FleetError, FleetFront, FleetOptions};
use asynctask_test_support::{Host, Network, ServerSetup, TestDatabase, certificates, temp_dir};
use pretty_assertions::assert_eq;

/// Connects from `host` to `url`, and says whether the connection is
/// encrypted (as the server sees it), or why it failed.
fn connect_from(
    network: &Network,
    host: &Host,
    db: &TestDatabase,
    url: String,
) -> Result<bool, FleetError> {
    let admin = db.config().clone();
    let name = db.name().to_owned();
    network.run_in(host, move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let fleet = Fleet::connect_url(&url, FleetOptions::new()).await?;
            // The server's view of the connection (the one over a link).
            let (client, connection) = admin
                .connect(tokio_postgres::NoTls)
                .await
                .expect("the Unix socket");
            let driver = tokio::spawn(connection);
            let row = client
                .query_one(
                    "SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
                     WHERE a.datname = $1 AND a.client_addr IS NOT NULL",
                    &[&name],
                )
                .await
                .expect("answers");
            drop((client, fleet));
            let _ = driver.await;
            Ok(row.get::<_, bool>(0))
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_come_from_the_password_file_and_tls_is_checked_as_libpq_does() {
    let mut network = Network::new().unwrap_or_else(|err| panic!("{err}"));
    let host = network.add_host().unwrap_or_else(|err| panic!("{err}"));
    let server = host.server_address();
    let (ca, cert, key) = certificates(std::slice::from_ref(&server));
    let (other_ca, _, _) = certificates(std::slice::from_ref(&server));
    let db = TestDatabase::create_in_with(
        "credentials",
        &network,
        ServerSetup::default()
            .with_tls(cert, key)
            .with_password("pa55-in-file"),
    )
    .await;
    Fleet::migrate(db.config()).await.expect("migrated");
    let dir = temp_dir("credentials");
    let write = |name: &str, text: &str, mode: u32| {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("written");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path.display().to_string()
    };
    let ca_file = write("ca.pem", &ca, 0o644);
    let other_ca_file = write("other-ca.pem", &other_ca, 0o644);
    let passfile = write(
        "pgpass",
        &format!(
            "# the test's\nelsewhere:5432:*:*:wrong\n{server}:5432:*:postgres:pa55-in-file\ndb.elsewhere:*:*:*:pa55-in-file\n"
        ),
        0o600,
    );
    let open_passfile = write("pgpass-open", "*:*:*:*:pa55-in-file\n", 0o644);
    let base = format!("postgresql://postgres@{server}:5432/{}", db.name());

    // The password from the file; TLS preferred, and the server offers it.
    let url = format!("{base}?passfile={passfile}");
    assert_eq!(connect_from(&network, &host, &db, url).ok(), Some(true));
    // Without TLS, and with a password file others may read: ignored, so
    // no password is given and the server refuses.
    let url = format!("{base}?sslmode=disable&passfile={open_passfile}");
    let err = connect_from(&network, &host, &db, url).expect_err("no password");
    assert!(matches!(err, FleetError::Connect { .. }), "{err:?}");
    let url = format!("{base}?sslmode=disable&passfile={passfile}");
    assert_eq!(connect_from(&network, &host, &db, url).ok(), Some(false));

    // require: encrypted, the certificate not checked without roots.
    let url = format!("{base}?sslmode=require&passfile={passfile}");
    assert_eq!(connect_from(&network, &host, &db, url).ok(), Some(true));
    // verify-full with the right CA; the wrong CA is refused, as is a host
    // name the certificate does not carry (reached at the right address).
    let url = format!("{base}?sslmode=verify-full&sslrootcert={ca_file}&passfile={passfile}");
    assert_eq!(
        connect_from(&network, &host, &db, url.clone()).ok(),
        Some(true)
    );
    // A front reads the URL as a worker does.
    network
        .run_in(&host, move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let config = DatabaseConfig::parse(&url)?;
                FleetFront::connect(config, FleetOptions::new(), "ws", "front")
                    .await
                    .map(drop)
            })
        })
        .expect("a front over verify-full, its password from the password file");
    let url = format!("{base}?sslmode=verify-full&sslrootcert={other_ca_file}&passfile={passfile}");
    let err = connect_from(&network, &host, &db, url).expect_err("an unknown CA");
    assert!(err.chain().contains("certificate"), "{}", err.chain());
    // require with a root certificate given checks the chain (libpq's rule).
    let url = format!("{base}?sslmode=require&sslrootcert={other_ca_file}&passfile={passfile}");
    connect_from(&network, &host, &db, url).expect_err("checked against the roots given");
    let misnamed = format!(
        "postgresql://postgres@db.elsewhere:5432/{}?hostaddr={server}&passfile={passfile}\
         &sslrootcert={ca_file}",
        db.name()
    );
    let err = connect_from(
        &network,
        &host,
        &db,
        format!("{misnamed}&sslmode=verify-full"),
    )
    .expect_err("not the certificate's name");
    assert!(err.chain().contains("certificate"), "{}", err.chain());
    // verify-ca checks the chain, not the name.
    let url = format!("{misnamed}&sslmode=verify-ca");
    assert_eq!(connect_from(&network, &host, &db, url).ok(), Some(true));

    // A wrong password in the URL: refused, and never shown.
    let url = format!(
        "postgresql://postgres:not-the-pa55@{server}:5432/{}?sslmode=require",
        db.name()
    );
    let err = connect_from(&network, &host, &db, url).expect_err("refused");
    assert!(
        err.chain().contains("password authentication failed"),
        "{}",
        err.chain()
    );
    assert!(!err.chain().contains("not-the-pa55"), "{}", err.chain());
    assert!(!format!("{err:?}").contains("not-the-pa55"));
}
