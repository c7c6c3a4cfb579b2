//! What the command line says of a database URL given as an argument: a
//! password in it is readable by every local user.

use asynctask_fleet::DatabaseConfig;
use clap::{ArgMatches, Parser};

use crate::DATABASE_URL_ENV;

/// Parses the command line as `P` (exiting on a bad one, as clap does),
/// and gives `warn` the [`password_warning`] of the command's `--database`,
/// whichever command takes one.
pub fn parse_args<P: Parser>(warn: impl FnOnce(&str)) -> P {
    let matches = P::command().get_matches();
    if let Some(warning) = database_flag(&matches).and_then(password_warning) {
        warn(&warning);
    }
    P::from_arg_matches(&matches).unwrap_or_else(|err| err.exit())
}

/// The `--database` value of the (innermost) command given.
fn database_flag(matches: &ArgMatches) -> Option<&str> {
    let mut matches = matches;
    while let Some((_, command)) = matches.subcommand() {
        matches = command;
    }
    let value = matches.try_get_one::<String>("database").ok().flatten()?;
    Some(value.as_str())
}

/// The warning for a `--database` value that holds a password, which every
/// local user can read among the process's arguments (`ps`); `None` when
/// it holds none (or does not parse: the command then fails on it).
///
/// ```
/// use asynctask_cli::database::password_warning;
///
/// assert!(password_warning("postgresql://fleet:s3cret@db.internal/fleet").is_some());
/// assert!(password_warning("postgresql://fleet@db.internal/fleet").is_none());
/// ```
#[must_use]
pub fn password_warning(url: &str) -> Option<String> {
    let config = DatabaseConfig::parse(url).ok()?;
    config.config().get_password()?;
    Some(format!(
        "warning: the --database URL holds a password, and every local user can read a \
         process's arguments in the process list (ps); give the password in PGPASSWORD or in \
         a password file (~/.pgpass, mode 600), or the whole URL in {DATABASE_URL_ENV}"
    ))
}

#[cfg(test)]
mod tests {
    use super::password_warning;

    #[test]
    fn a_password_in_either_form_is_warned_of_without_being_repeated() {
        for url in [
            "postgresql://fleet:s3cret@db.internal/fleet",
            "host=db.internal user=fleet password=s3cret",
        ] {
            let warning = password_warning(url).expect("a password");
            assert!(!warning.contains("s3cret"), "{warning}");
        }
        assert_eq!(password_warning("host=db.internal user=fleet"), None);
    }
}
