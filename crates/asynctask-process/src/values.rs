//! The validated values a subagent config holds — command lines, subagent
//! names, environment variable names and values — and the rule each breaks.

use std::borrow::Borrow;
use std::fmt;

use serde::Deserialize;

/// A config value that breaks a rule; the `Display` is one line for the user.
///
/// # Examples
///
/// ```
/// use asynctask_process::{CommandLine, InvalidValue};
///
/// let err = CommandLine::new(Vec::<String>::new()).unwrap_err();
/// assert_eq!(err, InvalidValue::EmptyCommand);
/// assert_eq!(err.to_string(), "`command` must not be empty: give the program and its arguments");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidValue {
    /// A command line without a program.
    #[error("`command` must not be empty: give the program and its arguments")]
    EmptyCommand,
    /// A program that is empty or only whitespace.
    #[error("the program (`command[0]`) must not be blank")]
    BlankProgram,
    /// A NUL byte in the program or an argument (it cannot reach a process).
    #[error("`command` must not contain NUL bytes")]
    NulInCommand,
    /// A subagent name that is empty or only whitespace.
    #[error("a subagent name must not be blank")]
    BlankName,
    /// A subagent name with leading or trailing whitespace.
    #[error("subagent name {0:?} must not start or end with whitespace")]
    NameWhitespace(String),
    /// An empty environment variable name.
    #[error("an environment variable name must not be empty")]
    EmptyEnvName,
    /// An environment variable name holding `=` or NUL.
    #[error("environment variable name {0:?} must not contain `=` or NUL")]
    BadEnvName(String),
    /// An environment variable value holding NUL.
    #[error("an environment variable value must not contain NUL bytes")]
    NulInEnvValue,
}

/// A command line: a program that is not blank, then its arguments; no NUL
/// byte anywhere (it could not be passed to a process).
///
/// A program without a `/` is looked up in the child's `PATH`; a relative one
/// with a `/` is relative to the child's working directory.
///
/// # Examples
///
/// ```
/// use asynctask_process::{CommandLine, InvalidValue};
///
/// let command = CommandLine::new(["sh", "-c", "make test"])?;
/// assert_eq!((command.program(), command.args()), ("sh", &["-c".to_owned(), "make test".to_owned()][..]));
/// assert_eq!(CommandLine::new([" ", "x"]), Err(InvalidValue::BlankProgram));
/// # Ok::<(), InvalidValue>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "Vec<String>")]
pub struct CommandLine(Vec<String>);

impl CommandLine {
    /// A command line from the program and its arguments.
    ///
    /// # Errors
    ///
    /// [`InvalidValue::EmptyCommand`], [`BlankProgram`](InvalidValue::BlankProgram)
    /// or [`NulInCommand`](InvalidValue::NulInCommand).
    pub fn new<I, S>(argv: I) -> Result<Self, InvalidValue>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::try_from(argv.into_iter().map(Into::into).collect::<Vec<String>>())
    }

    /// The program (`command[0]`).
    ///
    /// ```
    /// # use asynctask_process::CommandLine;
    /// assert_eq!(CommandLine::new(["true"])?.program(), "true");
    /// # Ok::<(), asynctask_process::InvalidValue>(())
    /// ```
    #[must_use]
    pub fn program(&self) -> &str {
        // Never empty: checked by `try_from`, the only constructor.
        self.0.first().map_or("", String::as_str)
    }

    /// The arguments (`command[1..]`).
    ///
    /// ```
    /// # use asynctask_process::CommandLine;
    /// assert!(CommandLine::new(["true"])?.args().is_empty());
    /// # Ok::<(), asynctask_process::InvalidValue>(())
    /// ```
    #[must_use]
    pub fn args(&self) -> &[String] {
        self.0.get(1..).unwrap_or_default()
    }
}

impl TryFrom<Vec<String>> for CommandLine {
    type Error = InvalidValue;

    fn try_from(argv: Vec<String>) -> Result<Self, InvalidValue> {
        match argv.first() {
            None => Err(InvalidValue::EmptyCommand),
            Some(program) if program.trim().is_empty() => Err(InvalidValue::BlankProgram),
            Some(_) if argv.iter().any(|arg| arg.contains('\0')) => Err(InvalidValue::NulInCommand),
            Some(_) => Ok(CommandLine(argv)),
        }
    }
}

/// Defines a validated string newtype: `new`, `as_str`, `Display`, `Borrow<str>`
/// (so maps keyed by it are looked up with a `&str`), and serde `try_from`.
macro_rules! string_newtype {
    ($(#[$meta:meta])* $name:ident, $check:path) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
        #[serde(try_from = "String")]
        pub struct $name(String);

        impl $name {
            /// The value, checked.
            ///
            /// # Errors
            ///
            /// The rule it breaks (see the type's docs).
            pub fn new(value: impl Into<String>) -> Result<Self, InvalidValue> {
                let value = value.into();
                $check(&value)?;
                Ok($name(value))
            }

            /// The value.
            #[must_use]
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidValue;

            fn try_from(value: String) -> Result<Self, InvalidValue> {
                Self::new(value)
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

string_newtype!(
    /// A subagent's name: not blank, no surrounding whitespace (the model has
    /// to spell it exactly).
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_process::{InvalidValue, SubagentName};
    ///
    /// assert_eq!(SubagentName::new("tester")?.as_str(), "tester");
    /// assert_eq!(SubagentName::new(" "), Err(InvalidValue::BlankName));
    /// assert_eq!(SubagentName::new("a ").unwrap_err().to_string(), "subagent name \"a \" must not start or end with whitespace");
    /// # Ok::<(), InvalidValue>(())
    /// ```
    SubagentName,
    check_subagent_name
);

string_newtype!(
    /// An environment variable's name: not empty, no `=` or NUL.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_process::{EnvName, InvalidValue};
    ///
    /// assert_eq!(EnvName::new("RUST_LOG")?.as_str(), "RUST_LOG");
    /// assert_eq!(EnvName::new(""), Err(InvalidValue::EmptyEnvName));
    /// assert_eq!(EnvName::new("A=B"), Err(InvalidValue::BadEnvName("A=B".to_owned())));
    /// # Ok::<(), InvalidValue>(())
    /// ```
    EnvName,
    check_env_name
);

string_newtype!(
    /// An environment variable's value: no NUL.
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_process::{EnvValue, InvalidValue};
    ///
    /// assert_eq!(EnvValue::new("hello world")?.as_str(), "hello world");
    /// assert_eq!(EnvValue::new("a\0b"), Err(InvalidValue::NulInEnvValue));
    /// # Ok::<(), InvalidValue>(())
    /// ```
    EnvValue,
    check_env_value
);

fn check_subagent_name(name: &str) -> Result<(), InvalidValue> {
    if name.trim().is_empty() {
        Err(InvalidValue::BlankName)
    } else if name.trim() != name {
        Err(InvalidValue::NameWhitespace(name.to_owned()))
    } else {
        Ok(())
    }
}

fn check_env_name(name: &str) -> Result<(), InvalidValue> {
    if name.is_empty() {
        Err(InvalidValue::EmptyEnvName)
    } else if name.contains(['=', '\0']) {
        Err(InvalidValue::BadEnvName(name.to_owned()))
    } else {
        Ok(())
    }
}

fn check_env_value(value: &str) -> Result<(), InvalidValue> {
    if value.contains('\0') {
        Err(InvalidValue::NulInEnvValue)
    } else {
        Ok(())
    }
}
