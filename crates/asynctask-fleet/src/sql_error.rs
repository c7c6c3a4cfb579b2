//! Which database errors mean the connection is lost (try again on a new
//! one) and which refuse one statement for good (the same statement fails
//! the same way however often it is sent).

use std::error::Error as _;

/// Whether `err` says the connection (or the server, for a while) failed
/// rather than the statement: no SQLSTATE and no conversion error (the
/// connection closed, an I/O or protocol error), or a SQLSTATE of class
/// 08 (connection exception), 40 (serialization failure, deadlock), 53
/// (insufficient resources), 57 (operator intervention: an administrator's
/// shutdown, a cancelled statement), 58 (system error), or 55P03 (a lock
/// not granted in time) and 25P03 (the session idled in a transaction too
/// long and was ended).
///
/// Everything else is the statement's own: class 22 (a value the server
/// cannot take: a NUL in a text, a notification too long), 23 (a broken
/// constraint), 42 (syntax, a missing privilege), 54 (a program limit: an
/// index entry too large), a PL/pgSQL exception, a parameter the client
/// could not encode or a column it could not decode.
pub(crate) fn is_transient(err: &tokio_postgres::Error) -> bool {
    let Some(state) = err.code() else {
        // A conversion error carries its cause; an I/O one an `io::Error`;
        // a closed connection none.
        return match err.source() {
            None => true,
            Some(source) => source.is::<std::io::Error>(),
        };
    };
    transient_state(state)
}

/// Whether a statement that failed with `state` may succeed on a new
/// connection (see [`is_transient`]).
fn transient_state(state: &tokio_postgres::error::SqlState) -> bool {
    let code = state.code();
    matches!(code.get(..2), Some("08" | "40" | "53" | "57" | "58"))
        || code == "55P03"
        || code == "25P03"
}

#[cfg(test)]
mod tests {
    use tokio_postgres::error::SqlState;

    use super::transient_state as transient;

    #[test]
    fn data_errors_are_permanent_and_lost_connections_are_not() {
        for permanent in [
            SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            SqlState::INVALID_PARAMETER_VALUE,
            SqlState::PROGRAM_LIMIT_EXCEEDED,
            SqlState::UNIQUE_VIOLATION,
            SqlState::INSUFFICIENT_PRIVILEGE,
            SqlState::RAISE_EXCEPTION,
        ] {
            assert!(!transient(&permanent), "{}", permanent.code());
        }
        for lost in [
            SqlState::CONNECTION_FAILURE,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::LOCK_NOT_AVAILABLE,
            SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
            SqlState::TOO_MANY_CONNECTIONS,
        ] {
            assert!(transient(&lost), "{}", lost.code());
        }
    }
}
