//! The tools' parameter types and the one parser that turns untrusted JSON into them.
//!
//! Each type derives its canonical JSON Schema (schemars) and its parser (serde
//! with `deny_unknown_fields`), and [`ToolParams::validate`] adds the checks
//! serde cannot express (non-blank strings, character counts). The schema states the same
//! rules (`pattern: "\S"` for non-blank, `minLength`/`maxLength`), and a property
//! test checks that schema and parser accept exactly the same values.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::value::MapAccessDeserializer;
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::result::{ToolErrorType, ToolResult};

/// Parameters of `check_async_tasks`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckAsyncTasksParams {
    /// Optional task ID or unique prefix to get details for a specific task.
    #[serde(default)]
    pub task_id: Option<String>,
}

/// Parameters of `todo_pause`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoPauseParams {
    /// Why execution must pause: the error or blocker that prevents progress.
    #[schemars(length(min = 1, max = 500), extend("pattern" = r"\S"))]
    pub reason: String,
}

/// Parameters of `task`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskParams {
    /// Name of the subagent to run.
    #[schemars(extend("pattern" = r"\S"))]
    pub subagent_name: String,
    /// The goal the subagent must reach, stated so it can work without asking.
    #[schemars(extend("pattern" = r"\S"))]
    pub goal_prompt: String,
    /// Extra instructions for how the subagent should behave. The subagent is
    /// told them; whether it follows them is up to it.
    #[serde(default)]
    pub behaviour_prompts: Option<Vec<String>>,
    /// Names of the tools the subagent may use; all of its tools when absent.
    /// The subagent is told this list; only a subagent configured to pass it
    /// to its agent enforces it.
    #[serde(default)]
    pub tool_whitelist: Option<Vec<String>>,
    /// Variables the subagent must emit, each with what it should contain.
    /// The subagent is told them; none is guaranteed: read the result's
    /// `emitted_vars`.
    #[serde(default, deserialize_with = "objects")]
    pub output_spec: Option<Vec<OutputVarSpec>>,
    /// Named values given to the subagent as context.
    #[serde(default, deserialize_with = "objects")]
    pub context: Option<Vec<ContextVar>>,
    /// Seconds before the subagent is stopped and the task fails: default 900,
    /// larger values are capped at 1800; -1 or 0 mean the maximum.
    #[serde(default)]
    pub timeout_seconds: Option<TimeoutSeconds>,
    /// Run in the background: the call returns at once with the task ID, and the
    /// result is delivered when the subagent finishes. Use check_async_tasks to
    /// monitor progress.
    #[serde(default, rename = "async")]
    pub run_async: Option<bool>,
}

/// The most characters a message to a running task may hold.
pub const MAX_MESSAGE_CHARS: usize = 8_000;

/// Parameters of `message_async_task`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageAsyncTaskParams {
    /// The ID of the running task, or a unique prefix of it.
    #[schemars(extend("pattern" = r"\S"))]
    pub task_id: String,
    /// What to tell its subagent.
    #[schemars(length(min = 1, max = MAX_MESSAGE_CHARS), extend("pattern" = r"\S"))]
    pub message: String,
}

impl ToolParams for MessageAsyncTaskParams {
    fn validate(&self) -> Result<(), InvalidParams> {
        non_blank("task_id", &self.task_id)?;
        at_most_chars("message", &self.message, MAX_MESSAGE_CHARS)?;
        non_blank("message", &self.message)
    }
}

/// Parameters of `answer_async_task`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerAsyncTaskParams {
    /// The ID of the task whose subagent asks, or a unique prefix of it.
    #[schemars(extend("pattern" = r"\S"))]
    pub task_id: String,
    /// The answer to its question (one of its choices, when it gave some).
    /// Leave it out with decline: true.
    #[serde(default)]
    #[schemars(length(min = 1, max = MAX_MESSAGE_CHARS))]
    pub answer: Option<String>,
    /// true: tell the subagent you will not answer (it goes on without one).
    #[serde(default)]
    pub decline: Option<bool>,
}

impl ToolParams for AnswerAsyncTaskParams {
    fn validate(&self) -> Result<(), InvalidParams> {
        non_blank("task_id", &self.task_id)?;
        match (&self.answer, self.decline.unwrap_or(false)) {
            (Some(_), true) => Err(InvalidParams(
                "give either answer or decline: true, not both".to_owned(),
            )),
            (Some(answer), false) => {
                at_most_chars("answer", answer, MAX_MESSAGE_CHARS)?;
                non_blank("answer", answer)
            }
            (None, true) => Ok(()),
            (None, false) => Err(InvalidParams(
                "answer: required (or decline: true to decline)".to_owned(),
            )),
        }
    }
}

/// One variable the subagent must emit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputVarSpec {
    /// The variable's name.
    #[schemars(extend("pattern" = r"\S"))]
    pub name: String,
    /// What the variable should contain.
    pub description: String,
}

/// One named value of context for the subagent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextVar {
    /// The value's name.
    #[schemars(extend("pattern" = r"\S"))]
    pub name: String,
    /// The value.
    pub value: String,
}

/// Reads an optional list of structs, each from a JSON object only.
///
/// serde's derived `Deserialize` for a struct also accepts a JSON array of its
/// field values (`["n", "d"]` as `{"name": "n", "description": "d"}`), which the
/// schema (`type: "object"`) refuses. The items are read through the same
/// `MapAccess`, so error paths still name the field (`context[0].name`).
fn objects<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let items: Option<Vec<Object<T>>> = Option::deserialize(deserializer)?;
    Ok(items.map(|items| items.into_iter().map(|Object(item)| item).collect()))
}

/// A `T` deserialized from a JSON object and nothing else (see [`objects`]).
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectVisitor<T> {
            type Value = T;

            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }

        deserializer
            .deserialize_map(ObjectVisitor(PhantomData))
            .map(Object)
    }
}

/// A `timeout_seconds` value: the maximum (`-1` or `0`), or a number of seconds.
///
/// Any JSON integer of at least -1 is accepted, including integral floats such as
/// `60.0` and values far beyond the cap (which are capped).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use asynctask_tools::{TaskTimeouts, TimeoutSeconds};
///
/// let timeouts = TaskTimeouts::default();
/// assert_eq!(TimeoutSeconds::Seconds(60).resolve(timeouts), Duration::from_secs(60));
/// assert_eq!(TimeoutSeconds::Seconds(99_999).resolve(timeouts), Duration::from_secs(1800));
/// assert_eq!(TimeoutSeconds::Maximum.resolve(timeouts), Duration::from_secs(1800));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutSeconds {
    /// As long as allowed (`-1` or `0`).
    Maximum,
    /// This many seconds (capped at the maximum).
    Seconds(u64),
}

impl TimeoutSeconds {
    /// The timeout to apply under `timeouts`.
    #[must_use]
    pub fn resolve(self, timeouts: TaskTimeouts) -> Duration {
        match self {
            TimeoutSeconds::Maximum => timeouts.max,
            TimeoutSeconds::Seconds(seconds) => Duration::from_secs(seconds).min(timeouts.max),
        }
    }
}

impl Serialize for TimeoutSeconds {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            TimeoutSeconds::Maximum => serializer.serialize_i64(-1),
            TimeoutSeconds::Seconds(seconds) => serializer.serialize_u64(*seconds),
        }
    }
}

impl<'de> Deserialize<'de> for TimeoutSeconds {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let number = serde_json::Number::deserialize(deserializer)?;
        let refuse = || {
            serde::de::Error::custom(format!(
                "expected -1 or a non-negative integer number of seconds, got {number}"
            ))
        };
        if let Some(seconds) = number.as_u64() {
            return Ok(match seconds {
                0 => TimeoutSeconds::Maximum,
                seconds => TimeoutSeconds::Seconds(seconds),
            });
        }
        if number.as_i64() == Some(-1) {
            return Ok(TimeoutSeconds::Maximum);
        }
        match number.as_f64() {
            Some(value) if value == -1.0 || value == 0.0 => Ok(TimeoutSeconds::Maximum),
            // Saturating cast: anything beyond u64 is capped anyway.
            Some(value) if value.fract() == 0.0 && value > 0.0 => {
                Ok(TimeoutSeconds::Seconds(value as u64))
            }
            _ => Err(refuse()),
        }
    }
}

impl JsonSchema for TimeoutSeconds {
    fn schema_name() -> Cow<'static, str> {
        "TimeoutSeconds".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "integer", "minimum": -1 })
    }
}

/// The default and maximum subagent timeouts of the `task` tool.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use asynctask_tools::TaskTimeouts;
///
/// let timeouts = TaskTimeouts::default();
/// assert_eq!((timeouts.default, timeouts.max), (Duration::from_secs(900), Duration::from_secs(1800)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskTimeouts {
    /// Applied when the model gives no `timeout_seconds` (900 s).
    pub default: Duration,
    /// The cap on any timeout (1800 s).
    pub max: Duration,
}

impl Default for TaskTimeouts {
    fn default() -> Self {
        TaskTimeouts {
            default: Duration::from_secs(900),
            max: Duration::from_secs(1800),
        }
    }
}

/// Whether a string has no non-whitespace character (the schema's `pattern: "\S"`).
/// [`ToolParams::validate`] uses it for fields whose schema says `pattern: "\S"`.
///
/// Whitespace is what ECMA-262 `\s` matches, because JSON Schema patterns are
/// ECMA-262 regular expressions and the parser must agree with the schema.
/// Rust's `char::is_whitespace` (Unicode `White_Space`) differs on two
/// characters: it counts U+0085 (NEL), which `\s` does not, and not U+FEFF
/// (BOM), which `\s` does.
///
/// # Examples
///
/// ```
/// assert!(asynctask_tools::is_blank(" \n\u{3000}"));
/// assert!(!asynctask_tools::is_blank(" a "));
/// ```
#[must_use]
pub fn is_blank(text: &str) -> bool {
    text.chars().all(is_ecma_whitespace)
}

/// ECMA-262 `WhiteSpace` (TAB, VT, FF, U+FEFF and every `Zs` space separator) and
/// `LineTerminator` (LF, CR, U+2028, U+2029).
fn is_ecma_whitespace(c: char) -> bool {
    // '\t'..='\r' is TAB, LF, VT, FF, CR.
    matches!(c, '\t'..='\r' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'..='\u{200a}')
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}' | '\u{feff}'
        )
}

/// `Err` naming `field` when `text` is blank (the schema's `pattern: "\S"`).
///
/// # Errors
///
/// `<field>: must not be blank`.
pub fn non_blank(field: &str, text: &str) -> Result<(), InvalidParams> {
    if is_blank(text) {
        Err(InvalidParams(format!("{field}: must not be blank")))
    } else {
        Ok(())
    }
}

/// `Err` naming `field` when `text` has more than `max` characters (the
/// schema's `maxLength`, which counts characters, not bytes).
///
/// # Errors
///
/// `<field>: must be at most <max> characters (got <n>)`.
pub fn at_most_chars(field: &str, text: &str, max: usize) -> Result<(), InvalidParams> {
    let length = text.chars().count();
    if length > max {
        Err(InvalidParams(format!(
            "{field}: must be at most {max} characters (got {length})"
        )))
    } else {
        Ok(())
    }
}

impl ToolParams for CheckAsyncTasksParams {}

impl ToolParams for TodoPauseParams {
    fn validate(&self) -> Result<(), InvalidParams> {
        at_most_chars("reason", &self.reason, 500)?;
        non_blank("reason", &self.reason)
    }
}

impl ToolParams for TaskParams {
    fn validate(&self) -> Result<(), InvalidParams> {
        non_blank("subagent_name", &self.subagent_name)?;
        non_blank("goal_prompt", &self.goal_prompt)?;
        for (i, var) in self.output_spec.iter().flatten().enumerate() {
            non_blank(&format!("output_spec[{i}].name"), &var.name)?;
        }
        for (i, var) in self.context.iter().flatten().enumerate() {
            non_blank(&format!("context[{i}].name"), &var.name)?;
        }
        Ok(())
    }
}

/// A parameter problem; the message starts with the path of the field at fault
/// (`subagent_name: must not be blank`, `output_spec[0]: missing field
/// `description``).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidParams(pub String);

impl InvalidParams {
    /// The error result a tool answers bad parameters with:
    /// `Invalid parameters for <tool>: <error>` (kind `InvalidToolParams`).
    ///
    /// # Examples
    ///
    /// ```
    /// use asynctask_tools::{CheckAsyncTasksParams, ToolParams};
    ///
    /// let err = CheckAsyncTasksParams::parse(serde_json::json!({"id": "x"})).unwrap_err();
    /// let result = err.to_tool_result("check_async_tasks");
    /// assert_eq!(result.llm_content, "Invalid parameters for check_async_tasks: id: unknown field `id`, expected `task_id`");
    /// ```
    #[must_use]
    pub fn to_tool_result(&self, tool: &str) -> ToolResult {
        let message = format!("Invalid parameters for {tool}: {self}");
        ToolResult::failure(
            ToolErrorType::InvalidToolParams,
            message.clone(),
            message.clone(),
            message,
        )
    }
}

/// A tool's parameter type: its canonical schema and its parser, which accept
/// exactly the same JSON values.
///
/// Implement it with an empty `impl` for a type whose serde and schemars
/// derives say everything; override [`validate`](Self::validate) for what they
/// cannot (non-blank strings, character counts) and state the same rule in the
/// schema (`pattern: "\S"`, `maxLength`).
///
/// # Examples
///
/// ```
/// use asynctask_tools::{TaskParams, ToolParams};
///
/// let err = TaskParams::parse(serde_json::json!({"subagent_name": "", "goal_prompt": "g"})).unwrap_err();
/// assert_eq!(err.to_string(), "subagent_name: must not be blank");
/// assert_eq!(TaskParams::schema()["additionalProperties"], false);
/// ```
pub trait ToolParams: DeserializeOwned + JsonSchema + Sized {
    /// Parses untrusted arguments, then [validates](Self::validate) them.
    /// `null` counts as `{}` (some clients send it for "no arguments").
    ///
    /// # Errors
    ///
    /// [`InvalidParams`] naming the field at fault.
    fn parse(params: Value) -> Result<Self, InvalidParams> {
        let parsed: Self = deserialize(params)?;
        parsed.validate()?;
        Ok(parsed)
    }

    /// What serde cannot check. The default accepts everything.
    ///
    /// # Errors
    ///
    /// [`InvalidParams`] whose message starts with the field's path.
    fn validate(&self) -> Result<(), InvalidParams> {
        Ok(())
    }

    /// The canonical JSON Schema (draft 2020-12, inlined, closed objects).
    #[must_use]
    fn schema() -> Value {
        crate::schema::canonical::<Self>()
    }
}

/// Deserializes a tool's arguments; errors carry the field's path.
fn deserialize<T: DeserializeOwned>(params: Value) -> Result<T, InvalidParams> {
    let params = match params {
        Value::Null => Value::Object(serde_json::Map::new()),
        Value::Object(map) => Value::Object(map),
        other => {
            return Err(InvalidParams(format!(
                "parameters must be a JSON object, got {}",
                json_kind(&other)
            )));
        }
    };
    serde_path_to_error::deserialize(params).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner().to_string();
        if path == "." {
            InvalidParams(inner)
        } else {
            InvalidParams(format!("{path}: {inner}"))
        }
    })
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn task(value: Value) -> Result<TaskParams, String> {
        TaskParams::parse(value).map_err(|e| e.0)
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            task(json!({"subagent_name": 5, "goal_prompt": "g"})).unwrap_err(),
            "subagent_name: invalid type: integer `5`, expected a string"
        );
        assert_eq!(
            task(json!({"goal_prompt": "g"})).unwrap_err(),
            "missing field `subagent_name`"
        );
        let unknown =
            task(json!({"subagent_name": "a", "goal_prompt": "g", "extra": 1})).unwrap_err();
        assert_eq!(
            unknown,
            "extra: unknown field `extra`, expected one of `subagent_name`, `goal_prompt`, \
             `behaviour_prompts`, `tool_whitelist`, `output_spec`, `context`, `timeout_seconds`, `async`"
        );
        assert_eq!(
            task(json!({"subagent_name": "  ", "goal_prompt": "g"})).unwrap_err(),
            "subagent_name: must not be blank"
        );
        assert_eq!(
            task(json!({"subagent_name": "a", "goal_prompt": "g", "context": [{"name": "", "value": "v"}]})).unwrap_err(),
            "context[0].name: must not be blank"
        );
        assert_eq!(
            task(json!({"subagent_name": "a", "goal_prompt": "g", "output_spec": [{"name": "x"}]}))
                .unwrap_err(),
            "output_spec[0]: missing field `description`"
        );
    }

    #[test]
    fn null_and_missing_optionals_are_absent() {
        let parsed = task(json!({
            "subagent_name": "a", "goal_prompt": "g", "async": null, "context": null
        }))
        .unwrap();
        assert_eq!((parsed.run_async, parsed.context), (None, None));
    }

    #[test]
    fn non_objects_are_refused_and_null_is_empty() {
        assert_eq!(
            CheckAsyncTasksParams::parse(json!([1])).unwrap_err().0,
            "parameters must be a JSON object, got an array"
        );
        assert_eq!(
            CheckAsyncTasksParams::parse(Value::Null).unwrap(),
            CheckAsyncTasksParams::default()
        );
    }

    #[test]
    fn timeout_accepts_any_integer_from_minus_one() {
        let timeout = |v: Value| {
            task(json!({"subagent_name": "a", "goal_prompt": "g", "timeout_seconds": v}))
                .map(|p| p.timeout_seconds)
        };
        assert_eq!(timeout(json!(-1)), Ok(Some(TimeoutSeconds::Maximum)));
        assert_eq!(timeout(json!(0)), Ok(Some(TimeoutSeconds::Maximum)));
        assert_eq!(timeout(json!(60)), Ok(Some(TimeoutSeconds::Seconds(60))));
        assert_eq!(timeout(json!(60.0)), Ok(Some(TimeoutSeconds::Seconds(60))));
        assert_eq!(
            timeout(json!(u64::MAX)),
            Ok(Some(TimeoutSeconds::Seconds(u64::MAX)))
        );
        assert_eq!(
            timeout(json!(1e300)),
            Ok(Some(TimeoutSeconds::Seconds(u64::MAX)))
        );
        for bad in [
            json!(-2),
            json!(1.5),
            json!(-1.5),
            json!("60"),
            json!(i64::MIN),
        ] {
            assert!(timeout(bad.clone()).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn todo_pause_reason_is_one_to_five_hundred_characters() {
        let reason =
            |text: String| TodoPauseParams::parse(json!({ "reason": text })).map_err(|e| e.0);
        assert!(reason("é".repeat(500)).is_ok(), "characters, not bytes");
        assert_eq!(
            reason("x".repeat(501)).unwrap_err(),
            "reason: must be at most 500 characters (got 501)"
        );
        assert_eq!(
            reason(String::new()).unwrap_err(),
            "reason: must not be blank"
        );
        assert_eq!(
            reason(" \n".into()).unwrap_err(),
            "reason: must not be blank"
        );
    }
}
