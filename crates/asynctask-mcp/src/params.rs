//! The parameters of the server's own tools, `wait_async_tasks` and `end_async_task`.

use asynctask_tools::{InvalidParams, ToolParams, non_blank};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The longest `wait_async_tasks` may block, in seconds: under the usual 60 s
/// request timeout of MCP clients.
pub const MAX_WAIT_SECONDS: u64 = 50;

/// How long `wait_async_tasks` blocks when `timeout_seconds` is not given.
pub const DEFAULT_WAIT_SECONDS: u64 = 30;

/// Parameters of `wait_async_tasks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitAsyncTasksParams {
    /// IDs or unique ID prefixes of the tasks to wait for; any task when absent
    /// or empty.
    #[serde(default)]
    #[schemars(extend("items" = {"type": "string", "pattern": "\\S"}))]
    pub task_id_prefixes: Option<Vec<String>>,
    /// How long to wait at most, in seconds (1 to 50, default 30).
    #[serde(default, deserialize_with = "whole_seconds")]
    // No `default` keyword: the description says it, and clients that forward
    // MCP tools unchanged to OpenAI's strict mode or Gemini would refuse it.
    #[schemars(range(min = 1, max = 50))]
    pub timeout_seconds: Option<u64>,
}

impl ToolParams for WaitAsyncTasksParams {
    fn validate(&self) -> Result<(), InvalidParams> {
        for (i, prefix) in self.task_id_prefixes.iter().flatten().enumerate() {
            non_blank(&format!("task_id_prefixes[{i}]"), prefix)?;
        }
        match self.timeout_seconds {
            Some(seconds) if !(1..=MAX_WAIT_SECONDS).contains(&seconds) => {
                Err(InvalidParams(format!(
                    "timeout_seconds: must be between 1 and {MAX_WAIT_SECONDS} (got {seconds})"
                )))
            }
            _ => Ok(()),
        }
    }
}

/// A whole number of seconds: an integer, or a float without a fraction (`5.0`;
/// JSON Schema's `integer` accepts it, and some clients send numbers so).
fn whole_seconds<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    struct WholeSeconds;

    impl serde::de::Visitor<'_> for WholeSeconds {
        type Value = Option<u64>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a whole number of seconds")
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Self::Value, E> {
            Ok(Some(value))
        }

        fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Self::Value, E> {
            u64::try_from(value).map(Some).map_err(|_| {
                E::custom(format!(
                    "must be between 1 and {MAX_WAIT_SECONDS} (got {value})"
                ))
            })
        }

        fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Self::Value, E> {
            if value.fract() != 0.0 || !value.is_finite() {
                return Err(E::custom(format!(
                    "must be a whole number of seconds (got {value})"
                )));
            }
            if !(0.0..=MAX_WAIT_SECONDS as f64).contains(&value) {
                return Err(E::custom(format!(
                    "must be between 1 and {MAX_WAIT_SECONDS} (got {value})"
                )));
            }
            // Whole and within 0..=50: the conversion is exact.
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "checked above"
            )]
            Ok(Some(value as u64))
        }
    }

    deserializer.deserialize_any(WholeSeconds)
}

/// Parameters of `end_async_task`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EndAsyncTaskParams {
    /// The ID of the task to end, or a unique prefix of it.
    #[schemars(extend("pattern" = "\\S"))]
    pub task_id: String,
}

impl ToolParams for EndAsyncTaskParams {
    fn validate(&self) -> Result<(), InvalidParams> {
        non_blank("task_id", &self.task_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn wait(value: serde_json::Value) -> Result<WaitAsyncTasksParams, String> {
        WaitAsyncTasksParams::parse(value).map_err(|err| err.0)
    }

    #[test]
    fn wait_params_name_the_field_at_fault() {
        assert_eq!(wait(json!(null)), Ok(WaitAsyncTasksParams::default()));
        assert_eq!(
            wait(json!({"task_id_prefixes": ["ab"], "timeout_seconds": 5})),
            Ok(WaitAsyncTasksParams {
                task_id_prefixes: Some(vec!["ab".to_owned()]),
                timeout_seconds: Some(5),
            })
        );
        assert_eq!(
            wait(json!({"timeout_seconds": 0})),
            Err("timeout_seconds: must be between 1 and 50 (got 0)".to_owned())
        );
        assert_eq!(
            wait(json!({"timeout_seconds": 51})),
            Err("timeout_seconds: must be between 1 and 50 (got 51)".to_owned())
        );
        assert_eq!(
            wait(json!({"timeout_seconds": "5"})),
            Err(
                "timeout_seconds: invalid type: string \"5\", expected a whole number of seconds"
                    .to_owned()
            )
        );
        let seconds = |value| wait(json!({ "timeout_seconds": value })).map(|p| p.timeout_seconds);
        assert_eq!(seconds(json!(5.0)), Ok(Some(5)));
        assert_eq!(seconds(json!(50.0)), Ok(Some(50)));
        assert_eq!(seconds(json!(null)), Ok(None));
        assert_eq!(
            seconds(json!(5.5)),
            Err("timeout_seconds: must be a whole number of seconds (got 5.5)".to_owned())
        );
        assert_eq!(
            seconds(json!(0.0)),
            Err("timeout_seconds: must be between 1 and 50 (got 0)".to_owned())
        );
        assert_eq!(
            seconds(json!(51.0)),
            Err("timeout_seconds: must be between 1 and 50 (got 51)".to_owned())
        );
        assert_eq!(
            seconds(json!(-1)),
            Err("timeout_seconds: must be between 1 and 50 (got -1)".to_owned())
        );
        assert_eq!(
            wait(json!({"task_id_prefixes": ["a", " "]})),
            Err("task_id_prefixes[1]: must not be blank".to_owned())
        );
        assert_eq!(
            wait(json!({"prefixes": []})),
            Err("prefixes: unknown field `prefixes`, expected `task_id_prefixes` or `timeout_seconds`".to_owned())
        );
    }

    #[test]
    fn end_params_need_a_task_id() {
        let end = |value| EndAsyncTaskParams::parse(value).map_err(|err| err.0);
        assert_eq!(end(json!({})), Err("missing field `task_id`".to_owned()));
        assert_eq!(
            end(json!({"task_id": "\t"})),
            Err("task_id: must not be blank".to_owned())
        );
    }

    #[test]
    fn schemas_are_closed_and_state_the_limits() {
        assert_eq!(
            WaitAsyncTasksParams::schema(),
            json!({
                "type": "object",
                "properties": {
                    "task_id_prefixes": {
                        "description": "IDs or unique ID prefixes of the tasks to wait for; any task when absent or empty.",
                        "anyOf": [
                            {"type": "array", "items": {"type": "string", "pattern": "\\S"}},
                            {"type": "null"},
                        ],
                    },
                    "timeout_seconds": {
                        "description": "How long to wait at most, in seconds (1 to 50, default 30).",
                        "type": ["integer", "null"],
                        "minimum": 1,
                        "maximum": 50,
                    },
                },
                "additionalProperties": false,
            })
        );
        assert_eq!(
            EndAsyncTaskParams::schema(),
            json!({
                "type": "object",
                "properties": {
                    "task_id": {
                        "description": "The ID of the task to end, or a unique prefix of it.",
                        "type": "string",
                        "pattern": "\\S",
                    },
                },
                "required": ["task_id"],
                "additionalProperties": false,
            })
        );
    }
}
