//! The config: parsing, errors with their position, the roots, and the
//! top-level keys of a layer above.

use std::path::{Path, PathBuf};

use asynctask_process::{
    CommandLine, ConfigError, ConfigExtension, EnvName, EnvValue, ProcessRunnerConfig,
    SubagentCommand, SubagentName,
};
use pretty_assertions::assert_eq;

use crate::temp_dir;

fn parse_error(toml: &str) -> String {
    chain(&ProcessRunnerConfig::from_toml_str(toml, Path::new("/base")).expect_err("invalid"))
}

/// An error and its sources on one line, as the command line prints them:
/// links joined by `: `, the lines of a link by `; `.
fn chain(err: &dyn std::error::Error) -> String {
    let mut links = vec![err.to_string()];
    let mut source = err.source();
    while let Some(cause) = source {
        links.push(cause.to_string());
        source = cause.source();
    }
    links
        .iter()
        .map(|link| {
            link.lines()
                .map(str::trim)
                .filter(|line| !line.is_empty())
                .collect::<Vec<_>>()
                .join("; ")
        })
        .collect::<Vec<_>>()
        .join(": ")
}

#[test]
fn a_full_config_parses() {
    let toml = r#"
roots = ["/abs", "."]

[subagents.researcher]
command = ["my-agent", "--mode", "research"]
description = "Reads the code"
cwd = "/abs/dir"
env = { MODEL = "small" }
inherit_env = ["API_KEY"]

[subagents.tester]
command = ["make", "test"]
"#;
    let config = ProcessRunnerConfig::from_toml_str(toml, Path::new("/base")).expect("valid");
    let researcher =
        SubagentCommand::new(CommandLine::new(["my-agent", "--mode", "research"]).expect("valid"))
            .with_description("Reads the code")
            .with_cwd(PathBuf::from("/abs/dir"))
            .with_env(
                EnvName::new("MODEL").expect("valid"),
                EnvValue::new("small").expect("valid"),
            )
            .with_inherit_env(EnvName::new("API_KEY").expect("valid"));
    let tester = SubagentCommand::new(CommandLine::new(["make", "test"]).expect("valid"))
        .with_cwd(PathBuf::from("/base"));
    assert_eq!(
        config,
        ProcessRunnerConfig::new()
            .with_subagent(SubagentName::new("researcher").expect("valid"), researcher)
            .with_subagent(SubagentName::new("tester").expect("valid"), tester)
            .with_roots(vec![PathBuf::from("/abs"), PathBuf::from("/base")])
    );
    assert_eq!(
        ProcessRunnerConfig::from_toml_str("", Path::new("/base")).expect("valid"),
        ProcessRunnerConfig::new().with_roots(vec![PathBuf::from("/base")])
    );
}

#[test]
fn config_errors_name_the_position_then_the_parsers_message() {
    let cases = [
        (
            "[subagents.a\ncommand = [\"x\"]\n",
            "invalid config <string> at line 1, column 13: unclosed table, expected `]`",
        ),
        (
            "[subagents.a]\ncomand = [\"x\"]\n",
            "invalid config <string> at line 2, column 1: unknown field `comand`, expected one of `command`, `description`, `cwd`, `env`, `inherit_env`, `stdin`, `max_output_bytes`; in `subagents.a`",
        ),
        (
            "[subagent.a]\ncommand = [\"x\"]\n",
            "invalid config <string> at line 1, column 2: unknown field `subagent`, expected one of `subagents`, `roots`, `inline_budget`, `max_output_bytes`",
        ),
        (
            "inline_budget = 10\n",
            "invalid config <string>: inline_budget = 10 is out of range: give 1000 to 1000000 characters",
        ),
        (
            "[subagents.a]\ncommand = []\n",
            "invalid config <string> at line 2, column 11: `command` must not be empty: give the program and its arguments; in `subagents.a.command`",
        ),
        (
            "[subagents.a]\ncommand = [\"\", \"x\"]\n",
            "invalid config <string> at line 2, column 11: the program (`command[0]`) must not be blank; in `subagents.a.command`",
        ),
        (
            "[subagents.a]\ncommand = \"make test\"\n",
            "invalid config <string> at line 2, column 11: invalid type: string \"make test\", expected a sequence; in `subagents.a.command`",
        ),
        (
            "[subagents.a]\ndescription = \"no command\"\n",
            "invalid config <string> at line 1, column 1: missing field `command`; in `subagents.a`",
        ),
        (
            "[subagents.\" \"]\ncommand = [\"x\"]\n",
            "invalid config <string> at line 1, column 12: a subagent name must not be blank; in `subagents`",
        ),
        (
            "[subagents.\"a \"]\ncommand = [\"x\"]\n",
            "invalid config <string> at line 1, column 12: subagent name \"a \" must not start or end with whitespace; in `subagents`",
        ),
        (
            "[subagents.a]\ncommand = [\"x\"]\nenv = { \"A=B\" = \"c\" }\n",
            "invalid config <string> at line 3, column 9: environment variable name \"A=B\" must not contain `=` or NUL; in `subagents.a.env`",
        ),
        (
            "[subagents.a]\ncommand = [\"x\"]\ninherit_env = [\"\"]\n",
            "invalid config <string> at line 3, column 15: an environment variable name must not be empty; in `subagents.a.inherit_env`",
        ),
    ];
    let seen: Vec<(&str, String)> = cases
        .iter()
        .map(|&(toml, _)| (toml, parse_error(toml)))
        .collect();
    let expected: Vec<(&str, String)> = cases
        .iter()
        .map(|&(toml, message)| (toml, message.to_owned()))
        .collect();
    assert_eq!(seen, expected);
}

/// The top-level keys of a layer above the runner, as the `asynctask`
/// command keeps `durable` in the same file.
#[derive(Debug, Default, PartialEq)]
struct Serving {
    durable: bool,
}

impl ConfigExtension for Serving {
    const KEYS: &'static [&'static str] = &["durable"];

    fn read<'de, D: serde::Deserializer<'de>>(
        &mut self,
        key: &str,
        value: D,
    ) -> Result<(), D::Error> {
        assert_eq!(key, "durable", "only its own keys are handed over");
        self.durable = serde::Deserialize::deserialize(value)?;
        Ok(())
    }
}

#[test]
fn a_layer_above_reads_its_own_top_level_keys_in_the_same_parse() {
    let parse = |toml: &str| {
        ProcessRunnerConfig::from_toml_str_with::<Serving>(toml, Path::new("/base"))
            .map_err(|err| chain(&err))
    };
    assert_eq!(
        parse("durable = true\ninline_budget = 2000\n[subagents.a]\ncommand = [\"x\"]\n"),
        Ok((
            ProcessRunnerConfig::new()
                .with_subagent(
                    SubagentName::new("a").expect("valid"),
                    SubagentCommand::new(CommandLine::new(["x"]).expect("valid"))
                        .with_cwd(PathBuf::from("/base")),
                )
                .with_roots(vec![PathBuf::from("/base")])
                .with_inline_budget(2000),
            Serving { durable: true }
        ))
    );
    assert_eq!(
        parse(""),
        Ok((
            ProcessRunnerConfig::new().with_roots(vec![PathBuf::from("/base")]),
            Serving::default()
        ))
    );
    assert_eq!(
        parse("durable = \"yes\"\n"),
        Err(
            "invalid config <string> at line 1, column 11: invalid type: string \"yes\", \
             expected a boolean; in `durable`"
                .to_owned()
        )
    );
    assert_eq!(
        parse("roots = []\nbogus = 1\n"),
        Err(
            "invalid config <string> at line 2, column 1: unknown field `bogus`, expected one \
             of `subagents`, `roots`, `inline_budget`, `max_output_bytes`, `durable`"
                .to_owned()
        )
    );
    // The runner alone does not know the key.
    assert_eq!(
        parse_error("durable = true\n"),
        "invalid config <string> at line 1, column 1: unknown field `durable`, expected one of \
         `subagents`, `roots`, `inline_budget`, `max_output_bytes`"
    );
}

#[test]
fn load_names_the_file_in_its_errors() {
    let dir = temp_dir("process");
    let missing = dir.path().join("missing.toml");
    let err = ProcessRunnerConfig::load(&missing).expect_err("no file");
    assert_eq!(
        err.to_string(),
        format!("cannot read {}", missing.display())
    );
    assert_eq!(
        chain(&err),
        format!(
            "cannot read {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
    assert!(matches!(err, ConfigError::Read { .. }));

    let file = dir.path().join("subagents.toml");
    std::fs::write(&file, "[subagents.a]\ncommand = [\"x\"]\nbogus = 1\n").expect("write");
    let err = ProcessRunnerConfig::load(&file).expect_err("invalid");
    assert_eq!(
        chain(&err),
        format!(
            "invalid config {} at line 3, column 1: unknown field `bogus`, expected one of \
             `command`, `description`, `cwd`, `env`, `inherit_env`, `stdin`, `max_output_bytes`; in `subagents.a`",
            file.display()
        )
    );
}

#[test]
fn working_directories_must_lie_under_the_roots() {
    let dir = temp_dir("process");
    let inside = dir.path().join("inside");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(inside.join("deeper")).expect("mkdir");
    std::fs::create_dir(&outside).expect("mkdir");
    std::os::unix::fs::symlink(&outside, inside.join("escape")).expect("symlink");
    let root = inside.canonicalize().expect("canonical");
    let parse = |cwd: &str| {
        let toml = format!("roots = [\"inside\"]\n[subagents.a]\ncommand = [\"true\"]\n{cwd}");
        ProcessRunnerConfig::from_toml_str(&toml, dir.path())
            .map(|config| config.roots)
            .map_err(|err| {
                assert!(matches!(err, ConfigError::Invalid { .. }), "{err:?}");
                err.to_string()
            })
    };
    let refused = |resolved: &Path| {
        Err(format!(
            "invalid config <string>: subagent 'a': working directory {} is not under any of the roots ({}); \
             add a `roots` entry that holds it",
            resolved.display(),
            root.display()
        ))
    };
    assert_eq!(parse("cwd = \"inside\""), Ok(vec![root.clone()]));
    assert_eq!(parse("cwd = \"inside/deeper\""), Ok(vec![root.clone()]));
    assert_eq!(parse("cwd = \"inside/not-yet\""), Ok(vec![root.clone()]));
    let canonical_outside = outside.canonicalize().expect("canonical");
    assert_eq!(parse("cwd = \"outside\""), refused(&canonical_outside));
    assert_eq!(
        parse("cwd = \"inside/escape\""),
        refused(&canonical_outside)
    );
    assert_eq!(
        parse("cwd = \"inside/../outside\""),
        refused(&canonical_outside)
    );
    assert_eq!(
        parse("cwd = \"inside/not-yet/../../outside\""),
        refused(&canonical_outside)
    );
    // No `cwd`: the config's directory, which is not under `inside`.
    let canonical_dir = dir.path().canonicalize().expect("canonical");
    assert_eq!(parse(""), refused(&canonical_dir));

    // Without `roots`, the config's directory is the root.
    let default = ProcessRunnerConfig::from_toml_str(
        "[subagents.a]\ncommand = [\"true\"]\ncwd = \"outside\"\n",
        dir.path(),
    )
    .expect("under the config directory");
    assert_eq!(default.roots, vec![canonical_dir.clone()]);
    let err = ProcessRunnerConfig::from_toml_str(
        "[subagents.a]\ncommand = [\"true\"]\ncwd = \"/\"\n",
        dir.path(),
    )
    .expect_err("outside");
    assert!(
        err.to_string()
            .contains("subagent 'a': working directory / is not under any of the roots"),
        "{err}"
    );
}

#[test]
fn a_path_a_shell_would_expand_is_refused_with_the_rule() {
    assert_eq!(
        parse_error("[subagents.a]\ncommand = [\"pwd\"]\ncwd = \"$PWD\"\n"),
        "invalid config <string>: subagent 'a': `cwd` is $PWD: no shell expands a variable in \
         it; a relative path is relative to the project (\".\" is the project itself), an \
         absolute one is taken as it is"
    );
    assert_eq!(
        parse_error("roots = [\"~/src\"]\n"),
        "invalid config <string>: a root is ~/src: no shell expands `~` in it; a relative path \
         is relative to the project (\".\" is the project itself), an absolute one is taken as \
         it is"
    );
}

#[test]
fn max_output_bytes_is_a_default_and_a_subagents_own() {
    let config = ProcessRunnerConfig::from_toml_str(
        "[subagents.a]\ncommand = [\"x\"]\n[subagents.b]\ncommand = [\"x\"]\nmax_output_bytes = 65536\n",
        Path::new("/base"),
    )
    .expect("valid");
    assert_eq!(config.max_output_bytes, None);
    assert_eq!(
        config.output_cap(&config.subagents["a"]),
        ProcessRunnerConfig::DEFAULT_MAX_OUTPUT_BYTES
    );
    assert_eq!(
        ProcessRunnerConfig::DEFAULT_MAX_OUTPUT_BYTES,
        64 * 1024 * 1024
    );
    assert_eq!(config.output_cap(&config.subagents["b"]), 65_536);

    let config = ProcessRunnerConfig::from_toml_str(
        "max_output_bytes = 1099511627776\n[subagents.a]\ncommand = [\"x\"]\n\
         [subagents.b]\ncommand = [\"x\"]\nmax_output_bytes = 1048576\n",
        Path::new("/base"),
    )
    .expect("valid");
    assert_eq!(config.max_output_bytes, Some(1 << 40));
    assert_eq!(config.output_cap(&config.subagents["a"]), 1 << 40);
    assert_eq!(config.output_cap(&config.subagents["b"]), 1 << 20);
}

#[test]
fn max_output_bytes_out_of_range_is_refused_with_the_rule() {
    let range = "give 65536 to 1099511627776 bytes (64 KiB to 1 TiB)";
    for (toml, error) in [
        (
            "max_output_bytes = 0\n".to_owned(),
            format!("invalid config <string>: max_output_bytes = 0 is out of range: {range}"),
        ),
        (
            "max_output_bytes = 65535\n".to_owned(),
            format!("invalid config <string>: max_output_bytes = 65535 is out of range: {range}"),
        ),
        (
            "max_output_bytes = 1099511627777\n".to_owned(),
            format!(
                "invalid config <string>: max_output_bytes = 1099511627777 is out of range: {range}"
            ),
        ),
        (
            "[subagents.a]\ncommand = [\"x\"]\nmax_output_bytes = 1\n".to_owned(),
            format!(
                "invalid config <string>: subagent 'a': max_output_bytes = 1 is out of range: {range}"
            ),
        ),
        (
            "[subagents.a]\ncommand = [\"x\"]\nmax_output_bytes = -1\n".to_owned(),
            "invalid config <string> at line 3, column 20: invalid value: integer `-1`, expected \
             u64; in `subagents.a.max_output_bytes`"
                .to_owned(),
        ),
        (
            "max_output_bytes = \"64 MiB\"\n".to_owned(),
            "invalid config <string> at line 1, column 20: invalid type: string \"64 MiB\", \
             expected u64; in `max_output_bytes`"
                .to_owned(),
        ),
    ] {
        assert_eq!(parse_error(&toml), error, "{toml}");
    }
}
