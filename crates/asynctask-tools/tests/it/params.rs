//! Schema/parser agreement: for any JSON value, a parameter type's parser accepts it
//! exactly when its canonical schema (the one the model saw) does.
//!
//! Tool parameters are checked against the same schema the model saw. The parsers are serde plus a few hand-written checks, so these
//! property tests hold the two to each other: `jsonschema` (draft 2020-12, ECMA-262
//! patterns) is the referee for the schema side, `T::parse` is the parser side.
//!
//! The generated values are mostly objects built from each type's real property
//! names, so that a good share of them is accepted and the boundaries (blank
//! strings, 500 characters, -1 and -2, integral floats, `null` optionals, unknown
//! keys in nested items) are crossed often. The number of cases per type is 2,000,
//! or `ASYNCTASK_PROPTEST_CASES` when set.

use asynctask_tools::{
    CheckAsyncTasksParams, MessageAsyncTaskParams, TaskParams, TodoPauseParams, ToolParams,
};
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};

/// Cases per type: `ASYNCTASK_PROPTEST_CASES`, else 2,000.
fn cases() -> u32 {
    std::env::var("ASYNCTASK_PROPTEST_CASES")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(2_000)
}

/// Whitespace on either side of the line between "blank" and "not blank": ECMA-262
/// `\s` (what the schema's `pattern: "\S"` means) and Unicode `White_Space` (what
/// Rust's `char::is_whitespace` means) disagree on U+0085 and U+FEFF, and neither
/// counts U+180E or U+200B as whitespace.
const SPACES: &[char] = &[
    ' ', '\t', '\n', '\r', '\u{b}', '\u{c}', '\u{85}', '\u{a0}', '\u{1680}', '\u{180e}',
    '\u{2003}', '\u{200b}', '\u{2028}', '\u{3000}', '\u{feff}',
];

fn space() -> impl Strategy<Value = char> {
    proptest::sample::select(SPACES)
}

/// Strings: empty, whitespace-only, multi-byte, padded, around the 500-character
/// bound of `todo_pause.reason` (in multi-byte characters), and arbitrary.
fn string() -> BoxedStrategy<String> {
    prop_oneof![
        2 => Just(String::new()),
        3 => proptest::collection::vec(space(), 1..4).prop_map(String::from_iter),
        3 => proptest::sample::select(&["a", "researcher", "é", "日本語", "🦀", "x y", "name"][..])
            .prop_map(str::to_owned),
        2 => (space(), "[a-zé日🦀]{1,3}", space()).prop_map(|(l, s, r)| format!("{l}{s}{r}")),
        2 => (proptest::sample::select(&[1usize, 499, 500, 501][..]), any::<bool>()).prop_map(
            |(n, padded)| {
                let body = "é".repeat(if padded { n.saturating_sub(2) } else { n });
                if padded { format!(" {body} ") } else { body }
            }
        ),
        2 => any::<String>(),
    ]
    .boxed()
}

/// Numbers: the `timeout_seconds` boundaries, extremes, integral and fractional
/// floats, and arbitrary ones.
fn number() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => proptest::sample::select(&[-2i64, -1, 0, 1, 60, 900, 1800, 1801, i64::MIN, i64::MAX][..])
            .prop_map(Value::from),
        1 => Just(Value::from(u64::MAX)),
        3 => proptest::sample::select(&[60.0, 1e300, -1.0, 0.0, -0.0, 1.5, -1.5, -2.0, 0.5, -1e300][..])
            .prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        // `Value::from` turns a non-finite float into `null`, which is fine here.
        1 => any::<f64>().prop_map(Value::from),
    ]
    .boxed()
}

/// A scalar of any JSON type.
fn scalar() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        string().prop_map(Value::String),
    ]
    .boxed()
}

/// Any JSON value: scalars, arrays of mixed values, objects with random keys.
fn any_json() -> BoxedStrategy<Value> {
    scalar()
        .prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((key(&["name", "value", "description"]), inner), 0..4)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
        .boxed()
}

/// A key: mostly one of `known`, sometimes a near miss or a random one.
fn key(known: &'static [&'static str]) -> BoxedStrategy<String> {
    prop_oneof![
        6 => proptest::sample::select(known).prop_map(str::to_owned),
        1 => proptest::sample::select(&["extra", "run_async", "Async", "taskId", "", " name"][..])
            .prop_map(str::to_owned),
        1 => "[a-z_]{1,8}",
    ]
    .boxed()
}

/// One property of a generated object: present with probability `presence`%, with
/// a value from `plausible` (mostly) or of any JSON type.
fn field(
    name: &'static str,
    presence: u32,
    plausible: BoxedStrategy<Value>,
) -> BoxedStrategy<Option<(String, Value)>> {
    let value = prop_oneof![8 => plausible, 1 => any_json()];
    proptest::option::weighted(
        f64::from(presence) / 100.0,
        value.prop_map(move |v| (name.to_owned(), v)),
    )
    .boxed()
}

/// An object of the given fields plus, sometimes, keys the type does not know.
fn object(fields: Vec<BoxedStrategy<Option<(String, Value)>>>) -> BoxedStrategy<Value> {
    let extras = proptest::collection::vec(
        (
            key(&[
                "extra",
                "name",
                "value",
                "description",
                "async_",
                "subagent",
            ]),
            any_json(),
        ),
        0..2,
    );
    let extras = proptest::option::weighted(0.15, extras);
    (fields, extras)
        .prop_map(|(fields, extras)| {
            let mut map: Map<String, Value> = fields.into_iter().flatten().collect();
            map.extend(extras.into_iter().flatten());
            Value::Object(map)
        })
        .boxed()
}

fn string_value() -> BoxedStrategy<Value> {
    string().prop_map(Value::String).boxed()
}

/// A string for a field that must not be blank: mostly a plain word, so that whole
/// objects are accepted often enough.
fn name_value() -> BoxedStrategy<Value> {
    prop_oneof![
        2 => proptest::sample::select(&["researcher", "x", "日本語", "🦀 crab", "Find the bug"][..])
            .prop_map(Value::from),
        3 => string_value(),
    ]
    .boxed()
}

fn nullable(strategy: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![4 => strategy, 1 => Just(Value::Null)].boxed()
}

/// An `{name, <second>}` item of `output_spec` (`description`) or `context` (`value`),
/// sometimes with a key missing, extra or from the other item shape, or written as
/// an array of its two values (which serde's derive would read as the struct).
fn item(second: &'static str) -> BoxedStrategy<Value> {
    let fields = vec![
        field("name", 92, name_value()),
        field(second, 92, string_value()),
    ];
    let both_shapes = (string_value(), string_value())
        .prop_map(|(name, text)| json!({"name": name, "description": text, "value": text}));
    let as_array = (name_value(), string_value()).prop_map(|(name, text)| json!([name, text]));
    prop_oneof![
        12 => object(fields),
        1 => any_json(),
        1 => both_shapes,
        1 => as_array,
    ]
    .boxed()
}

fn array_of(item: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    let mixed = prop_oneof![8 => item, 1 => scalar()];
    proptest::collection::vec(mixed, 0..4)
        .prop_map(Value::Array)
        .boxed()
}

/// Top-level values: mostly objects, sometimes another JSON type (including `null`).
fn top_level(object: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    prop_oneof![12 => object, 1 => any_json()].boxed()
}

fn task_params() -> BoxedStrategy<Value> {
    top_level(object(vec![
        field("subagent_name", 92, name_value()),
        field("goal_prompt", 92, name_value()),
        field("behaviour_prompts", 40, nullable(array_of(string_value()))),
        field("tool_whitelist", 40, nullable(array_of(string_value()))),
        field("output_spec", 40, nullable(array_of(item("description")))),
        field("context", 40, nullable(array_of(item("value")))),
        field("timeout_seconds", 50, nullable(number())),
        field(
            "async",
            50,
            nullable(any::<bool>().prop_map(Value::Bool).boxed()),
        ),
    ]))
}

fn check_async_tasks_params() -> BoxedStrategy<Value> {
    top_level(object(vec![field("task_id", 60, nullable(string_value()))]))
}

fn message_params() -> BoxedStrategy<Value> {
    top_level(object(vec![
        field("task_id", 92, name_value()),
        field("message", 92, name_value()),
    ]))
}

fn todo_pause_params() -> BoxedStrategy<Value> {
    top_level(object(vec![field("reason", 90, name_value())]))
}

/// What the schema says about `value`, and what the parser says (its error text).
fn verdicts<T: ToolParams>(
    validator: &jsonschema::Validator,
    value: &Value,
) -> (bool, Result<(), String>) {
    // The one documented exception: `ToolParams::parse` reads a top-level `null` as
    // `{}` because some clients send `null` for "no arguments", while the schema
    // (root `type: "object"`, which OpenAI and Gemini require) does not admit `null`.
    // So `null` is judged as the `{}` the parser turns it into.
    let judged = if value.is_null() {
        json!({})
    } else {
        value.clone()
    };
    let schema_accepts = validator.is_valid(&judged);
    let parsed = T::parse(value.clone())
        .map(drop)
        .map_err(|err| err.to_string());
    (schema_accepts, parsed)
}

/// Runs the property over `cases()` values drawn from `strategy`.
fn assert_agreement<T: ToolParams>(strategy: BoxedStrategy<Value>) {
    let validator = jsonschema::validator_for(&T::schema()).expect("the canonical schema compiles");
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    };
    let outcome = TestRunner::new(config).run(&strategy, |value| {
        let (schema_accepts, parsed) = verdicts::<T>(&validator, &value);
        if schema_accepts != parsed.is_ok() {
            return Err(TestCaseError::fail(format!(
                "schema and parser disagree on {:?}: schema {}, parser {parsed:?}",
                value.to_string(),
                if schema_accepts { "accepts" } else { "rejects" },
            )));
        }
        Ok(())
    });
    if let Err(failure) = outcome {
        panic!("{failure}");
    }
}

#[test]
fn task_params_schema_and_parser_agree() {
    assert_agreement::<TaskParams>(task_params());
}

#[test]
fn check_async_tasks_params_schema_and_parser_agree() {
    assert_agreement::<CheckAsyncTasksParams>(check_async_tasks_params());
}

#[test]
fn message_params_schema_and_parser_agree() {
    assert_agreement::<MessageAsyncTaskParams>(message_params());
}

#[test]
fn a_message_is_one_to_eight_thousand_characters() {
    let message =
        |text: String| agreed::<MessageAsyncTaskParams>(json!({"task_id": "a", "message": text}));
    assert!(message("é".repeat(8_000)), "characters, not bytes");
    assert!(!message("x".repeat(8_001)));
    assert!(!message(String::new()));
    assert!(!message(" \u{3000}\n".to_owned()));
    assert_eq!(
        MessageAsyncTaskParams::parse(json!({"task_id": "a", "message": "x".repeat(8_001)}))
            .unwrap_err()
            .to_string(),
        "message: must be at most 8000 characters (got 8001)"
    );
}

#[test]
fn todo_pause_params_schema_and_parser_agree() {
    assert_agreement::<TodoPauseParams>(todo_pause_params());
}

/// A property test that only ever sees rejections proves nothing: each generator
/// must produce a fair share of accepted and of rejected values.
#[test]
fn generators_cover_both_verdicts() {
    fn share<T: ToolParams>(strategy: BoxedStrategy<Value>) -> (usize, usize) {
        let validator =
            jsonschema::validator_for(&T::schema()).expect("the canonical schema compiles");
        let mut runner = TestRunner::deterministic();
        let mut accepted = 0;
        let total = 1_000;
        for _ in 0..total {
            let value = strategy.new_tree(&mut runner).expect("a value").current();
            accepted += usize::from(verdicts::<T>(&validator, &value).1.is_ok());
        }
        (accepted, total - accepted)
    }
    for (name, (accepted, rejected)) in [
        ("task", share::<TaskParams>(task_params())),
        (
            "check_async_tasks",
            share::<CheckAsyncTasksParams>(check_async_tasks_params()),
        ),
        ("todo_pause", share::<TodoPauseParams>(todo_pause_params())),
        (
            "message_async_task",
            share::<MessageAsyncTaskParams>(message_params()),
        ),
    ] {
        assert!(
            accepted >= 100 && rejected >= 100,
            "{name}: {accepted} accepted, {rejected} rejected of 1000 generated values"
        );
    }
}

/// Both verdicts on one value, asserting they agree; `true` when accepted.
fn agreed<T: ToolParams>(value: Value) -> bool {
    let validator = jsonschema::validator_for(&T::schema()).expect("the canonical schema compiles");
    let (schema_accepts, parsed) = verdicts::<T>(&validator, &value);
    assert_eq!(
        schema_accepts,
        parsed.is_ok(),
        "schema and parser disagree on {:?}: parser {parsed:?}",
        value.to_string()
    );
    schema_accepts
}

#[test]
fn timeout_seconds_boundaries() {
    let timeout = |v: Value| {
        agreed::<TaskParams>(
            json!({"subagent_name": "a", "goal_prompt": "g", "timeout_seconds": v}),
        )
    };
    let accepted: Vec<Value> = [
        json!(-1),
        json!(0),
        json!(1),
        json!(60),
        json!(60.0),
        json!(-1.0),
        json!(-0.0),
        json!(1e300),
        json!(u64::MAX),
        json!(i64::MAX),
        json!(null),
    ]
    .into_iter()
    .filter(|v| !timeout(v.clone()))
    .collect();
    assert_eq!(accepted, Vec::<Value>::new(), "these must be accepted");
    let refused: Vec<Value> = [
        json!(-2),
        json!(-2.0),
        json!(i64::MIN),
        json!(-1e300),
        json!(1.5),
        json!(-0.5),
        json!("60"),
        json!(true),
        json!([60]),
        json!({"seconds": 60}),
    ]
    .into_iter()
    .filter(|v| timeout(v.clone()))
    .collect();
    assert_eq!(refused, Vec::<Value>::new(), "these must be refused");
}

#[test]
fn blank_means_ecma_whitespace_only() {
    // The schema's `pattern: "\S"` is an ECMA-262 regex: U+FEFF is whitespace there
    // and U+0085 is not; U+200B and U+180E are not whitespace anywhere.
    let reason = |text: &str| agreed::<TodoPauseParams>(json!({ "reason": text }));
    let verdicts: Vec<(&str, bool)> = [
        "",
        " ",
        "\t\n",
        "\u{a0}\u{3000}",
        "\u{feff}",
        "\u{85}",
        "\u{200b}",
        "\u{180e}",
        " é ",
        "🦀",
    ]
    .into_iter()
    .map(|text| (text, reason(text)))
    .collect();
    assert_eq!(
        verdicts,
        vec![
            ("", false),
            (" ", false),
            ("\t\n", false),
            ("\u{a0}\u{3000}", false),
            ("\u{feff}", false),
            ("\u{85}", true),
            ("\u{200b}", true),
            ("\u{180e}", true),
            (" é ", true),
            ("🦀", true),
        ]
    );
    let name = |text: &str| {
        agreed::<TaskParams>(json!({
            "subagent_name": "a", "goal_prompt": "g",
            "output_spec": [{"name": text, "description": ""}],
            "context": [{"name": "k", "value": ""}],
        }))
    };
    assert_eq!(
        (name("\u{feff}"), name("x"), name("\u{3000}")),
        (false, true, false)
    );
}

#[test]
fn reason_length_counts_characters() {
    let reason = |text: String| agreed::<TodoPauseParams>(json!({ "reason": text }));
    assert_eq!(
        [
            reason("é".repeat(500)),
            reason("🦀".repeat(500)),
            reason("é".repeat(501)),
            reason(format!(" {} ", "x".repeat(498)))
        ],
        [true, true, false, true]
    );
}

#[test]
fn unknown_and_misplaced_keys_are_refused() {
    let base = || json!({"subagent_name": "a", "goal_prompt": "g"});
    let with = |key: &str, value: Value| {
        let mut params = base();
        params[key] = value;
        agreed::<TaskParams>(params)
    };
    assert_eq!(
        [
            with("run_async", json!(true)),
            with("Async", json!(true)),
            with("async", json!(true)),
            with(
                "output_spec",
                json!([{"name": "n", "description": "d", "value": "v"}])
            ),
            with("context", json!([{"name": "n", "description": "d"}])),
            with("context", json!([{"name": "n", "value": 1}])),
            with("behaviour_prompts", json!(["ok", null])),
            with("tool_whitelist", json!([])),
            // serde's derive would read a struct from an array of its field values.
            with("context", json!([["n", "v"]])),
            with("output_spec", json!([["n", "d"]])),
        ],
        [
            false, false, true, false, false, false, false, true, false, false
        ]
    );
    let mut params = base();
    params["context"] = json!([{"name": "k", "value": "v"}, ["n", "v"]]);
    assert_eq!(
        TaskParams::parse(params).unwrap_err().to_string(),
        "context[1]: invalid type: sequence, expected an object"
    );
    assert!(!agreed::<CheckAsyncTasksParams>(json!({"taskId": "abc"})));
    assert!(agreed::<CheckAsyncTasksParams>(json!({"task_id": null})));
    assert!(agreed::<CheckAsyncTasksParams>(json!({"task_id": ""})));
}

#[test]
fn non_objects_are_refused_and_null_is_read_as_empty() {
    for value in [json!([]), json!("{}"), json!(0), json!(true)] {
        assert!(!agreed::<CheckAsyncTasksParams>(value));
    }
    // The documented exception (see `verdicts`): the schema refuses a top-level
    // `null`, the parser reads it as `{}`.
    let validator = jsonschema::validator_for(&CheckAsyncTasksParams::schema()).unwrap();
    assert!(!validator.is_valid(&Value::Null));
    assert_eq!(
        CheckAsyncTasksParams::parse(Value::Null),
        Ok(CheckAsyncTasksParams::default())
    );
    assert_eq!(
        TodoPauseParams::parse(Value::Null).unwrap_err().to_string(),
        "missing field `reason`"
    );
}

/// Every whitespace character of any definition lies in the Basic Multilingual
/// Plane, so checking each of its characters alone settles what "blank" means.
#[test]
fn every_single_character_is_judged_alike() {
    let validator = jsonschema::validator_for(&TodoPauseParams::schema())
        .expect("the canonical schema compiles");
    let disagreements: Vec<String> = (0..=0xFFFF)
        .filter_map(char::from_u32)
        .filter(|c| {
            let value = json!({ "reason": c.to_string() });
            validator.is_valid(&value) != TodoPauseParams::parse(value).is_ok()
        })
        .map(|c| format!("U+{:04X}", u32::from(c)))
        .collect();
    assert_eq!(disagreements, Vec::<String>::new());
}
