//! Which database errors mean the connection is lost (try again on a new
//! one) and which refuse one statement for good (the same statement fails
//! the same way however often it is sent).

use std::error::Error as _;

/// Whether `err` may succeed on a new connection, or later: no SQLSTATE
/// and no conversion error (the connection closed, an I/O or protocol
/// error), or any SQLSTATE but the few that refuse the statement itself.
///
/// Only these are the statement's own, refused however often it is sent:
/// class 22 (a value the server cannot take: a NUL in a text, a
/// notification too long), 23 (a broken constraint), 54 (a program limit:
/// an index entry too large), a PL/pgSQL `RAISE` (P0001, and the fleet's
/// own AT001), and a parameter the client could not encode or a column it
/// could not decode. The list is short on purpose: taking a passing error
/// for a permanent one loses a result (a read-only server during
/// maintenance, 25006, would fail every task that ends meanwhile), while
/// taking a permanent one for a passing one only retries, with backoff.
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
/// connection, or later (see [`is_transient`]).
fn transient_state(state: &tokio_postgres::error::SqlState) -> bool {
    let code = state.code();
    !(matches!(code.get(..2), Some("22" | "23" | "54")) || code == "P0001" || code == "AT001")
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
            SqlState::RAISE_EXCEPTION,
            SqlState::from_code("AT001"),
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
            // A server made read-only for a while (maintenance, a full
            // disk, a standby after a failover) takes writes again later.
            SqlState::READ_ONLY_SQL_TRANSACTION,
            SqlState::INTERNAL_ERROR,
            // A grant can be given while the worker waits.
            SqlState::INSUFFICIENT_PRIVILEGE,
            SqlState::UNDEFINED_TABLE,
        ] {
            assert!(transient(&lost), "{}", lost.code());
        }
    }
}
