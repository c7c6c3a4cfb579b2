//! Generators of `tools/call` requests for every served tool, their
//! `arguments` drawn from the tool's input schema (the one the model sees)
//! and then bent: wrong types, `null`, missing and unknown fields, blank and
//! huge strings, non-ASCII ids, negative and huge numbers, values at the
//! schema's bounds and one past them.
//!
//! The schema is read at run time, so a tool or a field added later is
//! fuzzed without a change here.

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::Value;

use super::lines::{Text, json, number, object, quoted, string};

/// One `tools/call`, its id given later (so that ids can be kept unique).
#[derive(Debug, Clone)]
pub(super) struct Call {
    /// The tool's name, as raw JSON.
    pub(super) tool: Text,
    /// The arguments, as raw JSON; `None`: the member is left out.
    pub(super) arguments: Option<Text>,
    /// A progress token, as raw JSON (`_meta.progressToken`).
    pub(super) progress: Option<Text>,
}

impl Call {
    /// The request line, with `id`.
    pub(super) fn line(&self, id: &[u8]) -> Text {
        let mut params = vec![(quoted("name"), self.tool.clone())];
        if let Some(arguments) = &self.arguments {
            params.push((quoted("arguments"), arguments.clone()));
        }
        if let Some(token) = &self.progress {
            let meta = object(&[(quoted("progressToken"), token.clone())]);
            params.push((quoted("_meta"), meta));
        }
        object(&[
            (quoted("jsonrpc"), quoted("2.0")),
            (quoted("id"), id.to_vec()),
            (quoted("method"), quoted("tools/call")),
            (quoted("params"), object(&params)),
        ])
    }
}

/// A tool's name and its arguments, as raw JSON.
type NamedArguments = (Text, Option<Text>);

/// Whether a call's arguments keep to the schema or are bent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Every value fits the schema: the call reaches the tool's work (a task
    /// launched, a message delivered, a task ended).
    Fit,
    /// Values now and then of the wrong kind, required members missing,
    /// unknown ones added.
    Bend,
}

/// A call of one of `tools` (name and input schema), now and then of a tool
/// that is not served. A third of the calls keep to the schema.
pub(super) fn call(tools: &[(String, Value)]) -> BoxedStrategy<Call> {
    let served: Vec<(u32, BoxedStrategy<NamedArguments>)> = tools
        .iter()
        .map(|(name, schema)| {
            let name = quoted(name);
            let arguments = prop_oneof![
                6 => arguments(schema, Mode::Fit).prop_map(Some),
                10 => arguments(schema, Mode::Bend).prop_map(Some),
                1 => Just(None),
                1 => Just(Some(b"null".to_vec())),
                1 => json().prop_map(Some),
            ];
            (
                4,
                arguments
                    .prop_map(move |arguments| (name.clone(), arguments))
                    .boxed(),
            )
        })
        .collect();
    let unknown = (
        prop_oneof![
            select(
                &[
                    "todo_pause",
                    "",
                    "TASK",
                    "task ",
                    "wait_async_task",
                    "tools/call"
                ][..]
            )
            .prop_map(quoted),
            string(),
        ],
        prop::option::of(json()),
    )
        .boxed();
    let mut choices = served;
    choices.push((1, unknown));
    let progress = prop::option::weighted(
        0.2,
        prop_oneof![
            4 => (0i64..1_000).prop_map(|n| n.to_string().into_bytes()),
            2 => "[a-z]{1,8}".prop_map(|token| quoted(&token)),
            1 => json(),
        ],
    );
    (proptest::strategy::Union::new_weighted(choices), progress)
        .prop_map(|((tool, arguments), progress)| Call {
            tool,
            arguments,
            progress,
        })
        .boxed()
}

/// A call that launches a background task: what the calls naming the
/// session's tasks (`@task:N`) need, and what a session would otherwise
/// rarely hold.
pub(super) fn launch() -> BoxedStrategy<Call> {
    (
        select(&["worker", "worker", "quiet"][..]),
        ordinary(Mode::Fit),
    )
        .prop_map(|(subagent, goal)| {
            let arguments = object(&[
                (quoted("subagent_name"), quoted(subagent)),
                (quoted("goal_prompt"), goal),
                (quoted("async"), b"true".to_vec()),
            ]);
            Call {
                tool: quoted("task"),
                arguments: Some(arguments),
                progress: None,
            }
        })
        .boxed()
}

/// A fitting call of one of `tools` that takes a task id, most often naming
/// one of the session's tasks: messages, ends, waits and checks that reach
/// a task while it runs, or just as it ends.
pub(super) fn follow_up(tools: &[(String, Value)]) -> BoxedStrategy<Call> {
    let choices: Vec<BoxedStrategy<Call>> = tools
        .iter()
        .filter(|(_, schema)| {
            schema["properties"]
                .as_object()
                .is_some_and(|properties| properties.keys().any(|key| key.contains("task_id")))
        })
        .map(|(name, schema)| {
            let tool = quoted(name);
            arguments(schema, Mode::Fit)
                .prop_map(move |arguments| Call {
                    tool: tool.clone(),
                    arguments: Some(arguments),
                    progress: None,
                })
                .boxed()
        })
        .collect();
    proptest::strategy::Union::new(choices).boxed()
}

/// An object for `schema` (an object schema). Fitting: every required
/// property and some optional ones, each value fitting. Bent: each property
/// present or not (a required one mostly), each value right or wrong, and
/// sometimes a member the schema does not know.
fn arguments(schema: &Value, mode: Mode) -> BoxedStrategy<Text> {
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let members: Vec<BoxedStrategy<Option<(Text, Text)>>> = schema["properties"]
        .as_object()
        .map(|properties| {
            properties
                .iter()
                .map(|(name, property)| {
                    let value = value(property, name, mode);
                    let value = match (mode, required.contains(&name.as_str())) {
                        (Mode::Fit, true) => value.prop_map(Some).boxed(),
                        (Mode::Bend, true) => prop::option::weighted(0.92, value).boxed(),
                        (_, false) => prop::option::weighted(0.5, value).boxed(),
                    };
                    let key = quoted(name);
                    value
                        .prop_map(move |value| value.map(|value| (key.clone(), value)))
                        .boxed()
                })
                .collect()
        })
        .unwrap_or_default();
    let unknown = prop::option::weighted(
        if mode == Mode::Bend { 0.1 } else { 0.001 },
        (
            select(
                &[
                    "extra",
                    "taskId",
                    "ASYNC",
                    "",
                    "task_id ",
                    "subagent",
                    "__proto__",
                ][..],
            )
            .prop_map(quoted),
            json(),
        ),
    );
    (members, unknown)
        .prop_map(|(members, unknown)| {
            let mut members: Vec<(Text, Text)> = members.into_iter().flatten().collect();
            members.extend(unknown);
            object(&members)
        })
        .boxed()
}

/// A value for a property (`field`, with `schema`): one the schema allows;
/// bent, sometimes one at or past its bounds or of another kind.
fn value(schema: &Value, field: &str, mode: Mode) -> BoxedStrategy<Text> {
    match mode {
        Mode::Fit => fitting(schema, field, mode),
        Mode::Bend => prop_oneof![7 => fitting(schema, field, mode), 3 => wrong()].boxed(),
    }
}

/// A value of a type the schema names; bent, also at and past its bounds.
fn fitting(schema: &Value, field: &str, mode: Mode) -> BoxedStrategy<Text> {
    let types: Vec<&str> = match &schema["type"] {
        Value::String(kind) => vec![kind.as_str()],
        Value::Array(kinds) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    let choices: Vec<BoxedStrategy<Text>> = types
        .iter()
        .map(|kind| match *kind {
            "string" => text(schema, field, mode),
            "integer" | "number" => integer(schema, mode),
            "boolean" => select(&["true", "false"][..])
                .prop_map(|b| b.as_bytes().to_vec())
                .boxed(),
            "array" => prop::collection::vec(value(&schema["items"], field, mode), 0..4)
                .prop_map(|items| [&b"["[..], &items.join(&b","[..]), b"]"].concat())
                .boxed(),
            "object" => arguments(schema, mode),
            _ => Just(b"null".to_vec()).boxed(),
        })
        .collect();
    if choices.is_empty() {
        return json();
    }
    proptest::strategy::Union::new(choices).boxed()
}

/// A string for `field`: one of its `enum`, a task id or prefix for an id
/// field, an ordinary string; bent, also one at and past the schema's length
/// bounds, or one a strict parser refuses.
fn text(schema: &Value, field: &str, mode: Mode) -> BoxedStrategy<Text> {
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<Text> = values
            .iter()
            .map(|v| serde_json::to_vec(v).unwrap_or_default())
            .collect();
        if !values.is_empty() && mode == Mode::Fit {
            return select(values).boxed();
        }
        if !values.is_empty() {
            return prop_oneof![6 => select(values), 1 => ordinary(mode)].boxed();
        }
    }
    if field.contains("task_id") {
        return task_id(mode);
    }
    let mut lengths = vec![1usize];
    for bound in ["minLength", "maxLength"] {
        if let Some(n) = schema[bound].as_u64().and_then(|n| usize::try_from(n).ok()) {
            lengths.push(n);
            if mode == Mode::Bend {
                lengths.extend([n.saturating_sub(1), n + 1]);
            }
        }
    }
    prop_oneof![
        6 => ordinary(mode),
        1 => (select(lengths), select(&["x", "\u{e9}", "y "][..])).prop_map(|(n, c)| {
            let text: String = c.chars().cycle().take(n).collect();
            quoted(&text)
        }),
    ]
    .boxed()
}

fn ordinary(mode: Mode) -> BoxedStrategy<Text> {
    let plain = prop_oneof![
        4 => select(&["worker", "quiet", "do the thing", "\u{65e5}\u{672c}\u{8a9e}", "\u{1f980} crab", "fail now", "x"][..]).prop_map(quoted),
        2 => "[!-~][ -~]{0,39}".prop_map(|text| quoted(&text)),
    ];
    match mode {
        Mode::Fit => plain.boxed(),
        Mode::Bend => prop_oneof![6 => plain, 1 => string()].boxed(),
    }
}

/// The prefix of a task the session launched: `@task:N` names the N-th
/// latest (its first 8 characters), resolved as the line is sent.
pub(super) const TASK_PLACEHOLDER: &[u8] = b"@task:";

/// Task ids and prefixes: the session's own tasks, hex of every length
/// (which may name a running task); bent, also ids no task has.
fn task_id(mode: Mode) -> BoxedStrategy<Text> {
    let ours = prop_oneof![4 => Just(0u8), 1 => 1u8..4].prop_map(|n| {
        let mut id = b"\"".to_vec();
        id.extend_from_slice(TASK_PLACEHOLDER);
        id.extend_from_slice(format!("{n}\"").as_bytes());
        id
    });
    match mode {
        Mode::Fit => prop_oneof![
            4 => ours,
            1 => "[0-9a-f]{1,8}".prop_map(|id| quoted(&id)),
        ]
        .boxed(),
        Mode::Bend => prop_oneof![
            3 => ours,
            3 => "[0-9a-f]{1,8}".prop_map(|id| quoted(&id)),
            1 => "[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}".prop_map(|id| quoted(&id)),
            2 => select(&["\u{e9}", "\u{65e5}\u{672c}", "\u{1f980}", "0f3a9c21-", "-", "*", "%", "..", "A", "", " "][..]).prop_map(quoted),
            1 => string(),
        ]
        .boxed(),
    }
}

/// An integer for a schema with `minimum`/`maximum`: inside; bent, also at
/// and past each bound, far beyond, and written as floats.
fn integer(schema: &Value, mode: Mode) -> BoxedStrategy<Text> {
    let minimum = schema["minimum"].as_i64();
    let maximum = schema["maximum"].as_i64();
    // Inside: the bounds, or a few seconds when there is no maximum.
    let low = minimum.unwrap_or(1).max(1);
    let high = maximum.unwrap_or(low + 5).max(low);
    let inside = (low..=high).prop_map(|n| n.to_string().into_bytes());
    if mode == Mode::Fit {
        return inside.boxed();
    }
    let mut edges: Vec<i64> = vec![0, 1, 2, 3, 5];
    for bound in [minimum, maximum].into_iter().flatten() {
        edges.extend([bound - 1, bound, bound + 1]);
    }
    prop_oneof![
        4 => inside,
        3 => select(edges).prop_map(|n| n.to_string().into_bytes()),
        1 => select(&["5.0", "1e1", "1800", "99999999999", "1.5"][..]).prop_map(|n| n.as_bytes().to_vec()),
    ]
    .boxed()
}

/// How many characters a long string has: mostly thousands, now and then a
/// million.
fn long() -> BoxedStrategy<usize> {
    prop_oneof![12 => Just(10_000), 4 => Just(100_000), 1 => Just(1 << 20)].boxed()
}

/// A value of the wrong kind, or a hard one of the right kind.
fn wrong() -> BoxedStrategy<Text> {
    prop_oneof![
        3 => json(),
        2 => select(&["null", "\"\"", "\" \"", "\"\\u3000\\n\"", "[]", "{}", "[null]", "true", "0", "-1", "-2"][..])
            .prop_map(|text| text.as_bytes().to_vec()),
        2 => number(),
        1 => (long(), select(&["x", "\u{e9}", "\u{1f980}", "\\ud83d"][..]))
            .prop_map(|(n, c)| [&b"\""[..], c.repeat(n).as_bytes(), b"\""].concat()),
        1 => (100usize..300).prop_map(|depth| ["[".repeat(depth), "]".repeat(depth)].concat().into_bytes()),
    ]
    .boxed()
}
