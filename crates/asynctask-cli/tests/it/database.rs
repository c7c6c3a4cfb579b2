//! A database URL given as an argument: a password in it is warned of, and
//! never repeated.

use crate::{asynctask, stderr};

/// A port on 127.0.0.1 where nothing listens (bound, then let go).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    listener.local_addr().expect("bound").port()
}

#[test]
fn a_password_in_the_database_flag_is_warned_of_and_never_printed() {
    let url = format!(
        "postgresql://fleet:s3cret-in-argv@127.0.0.1:{}/fleet?sslmode=disable",
        closed_port()
    );
    let output = asynctask(&["fleet", "status", "--database", &url]);
    assert!(!output.status.success(), "nothing listens there");
    let text = stderr(&output);
    let warning = text
        .lines()
        .find(|line| line.starts_with("asynctask: warning: the --database URL holds a password"))
        .unwrap_or_else(|| panic!("a warning: {text}"));
    assert!(warning.contains("PGPASSWORD"), "{warning}");
    assert!(warning.contains(".pgpass"), "{warning}");
    assert!(!text.contains("s3cret-in-argv"), "{text}");
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("s3cret-in-argv"),
        "stdout"
    );

    // Without a password: no warning.
    let url = format!(
        "postgresql://fleet@127.0.0.1:{}/fleet?sslmode=disable",
        closed_port()
    );
    let output = asynctask(&["fleet", "status", "--database", &url]);
    assert!(!stderr(&output).contains("warning"), "{}", stderr(&output));
}
