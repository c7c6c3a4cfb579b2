//! Canonical parameter schemas (from schemars) and their per-provider lowering.
//!
//! The canonical schema is the one the parsers agree with: draft 2020-12,
//! subschemas inlined, no `$schema` or `title`; optional fields are left out of
//! `required` and also accept `null`. A nullable scalar is written with a type
//! array (`["integer", "null"]`); a nullable array or object is written
//! `anyOf: [{"type": "array", "items": ...}, {"type": "null"}]`, the form the
//! providers' own SDKs write and the one OpenAI's strict mode accepts. Each
//! lowering rewrites a copy for one provider's documented rules (see
//! `docs/providers.md`): `openai` for OpenAI's strict mode, `strict` for
//! Anthropic's and Bedrock's strict tool use, `gemini` for Gemini.

mod gemini;
mod openai;
mod strict;

pub(crate) use gemini::{lower_gemini_json, lower_gemini_openapi};
pub(crate) use openai::lower_openai_strict;
pub(crate) use strict::lower_strict;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

/// The canonical JSON Schema of a parameter type.
pub(crate) fn canonical<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.inline_subschemas = true;
            settings.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    tidy(&mut schema);
    if let Some(root) = schema.as_object_mut() {
        // The tool's own description says what the parameters are for.
        root.remove("title");
        root.remove("description");
    }
    schema
}

/// The `format` values schemars writes on numbers (`uint64`, `double`, ...).
/// They name Rust types, not JSON Schema formats: OpenAI's strict mode and
/// Gemini's `parameters` refuse them, and the range is in `minimum`/`maximum`.
const RUST_NUMBER_FORMATS: &[&str] = &[
    "int", "int8", "int16", "int32", "int64", "int128", "uint", "uint8", "uint16", "uint32",
    "uint64", "uint128", "float", "double",
];

/// Joins doc-comment lines into one-line descriptions, drops `default: null`
/// (an absent optional needs no default) and the Rust number formats, and
/// writes nullable arrays and objects in the `anyOf` form, everywhere in the
/// schema.
fn tidy(node: &mut Value) {
    match node {
        Value::Object(object) => {
            if object.get("default") == Some(&Value::Null) {
                object.remove("default");
            }
            if let Some(Value::String(text)) = object.get_mut("description") {
                *text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            }
            if object
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|format| RUST_NUMBER_FORMATS.contains(&format))
            {
                object.remove("format");
            }
            split_nullable_compound(object);
            object.values_mut().for_each(tidy);
        }
        Value::Array(items) => items.iter_mut().for_each(tidy),
        _ => {}
    }
}

/// Rewrites `type: ["array", "null"]` (or `"object"`) as `anyOf: [{"type":
/// "array", ...}, {"type": "null"}]`: every keyword but `description` moves into
/// the first branch. Type arrays of scalars are left alone.
fn split_nullable_compound(object: &mut Map<String, Value>) {
    let Some(Value::Array(kinds)) = object.get("type") else {
        return;
    };
    let null = Value::from("null");
    let compound = kinds.iter().any(|kind| kind == "array" || kind == "object");
    if !(compound && kinds.contains(&null)) {
        return;
    }
    let concrete: Vec<Value> = kinds
        .iter()
        .filter(|kind| **kind != null)
        .cloned()
        .collect();
    let mut branch = Map::new();
    let mut outer = Map::new();
    for (key, value) in std::mem::take(object) {
        match key.as_str() {
            "description" => {
                outer.insert(key, value);
            }
            "type" => {
                let kind = match concrete.as_slice() {
                    [one] => one.clone(),
                    _ => Value::Array(concrete.clone()),
                };
                branch.insert(key, kind);
            }
            _ => {
                branch.insert(key, value);
            }
        }
    }
    outer.insert(
        "anyOf".into(),
        json!([Value::Object(branch), {"type": "null"}]),
    );
    *object = outer;
}

/// Makes a schema node accept `null` (already-nullable nodes are left alone):
/// a scalar gains `"null"` in its type array, an array or object becomes
/// `anyOf` with a `{"type": "null"}` branch, and an `enum` gains `null`.
fn make_nullable(node: &mut Value) {
    let Some(object) = node.as_object_mut() else {
        return;
    };
    match object.get_mut("type") {
        Some(Value::String(kind)) if kind != "null" => {
            let kind = kind.clone();
            object.insert("type".into(), json!([kind, "null"]));
        }
        Some(Value::Array(kinds)) => {
            if !kinds.contains(&Value::from("null")) {
                kinds.push(Value::from("null"));
            }
        }
        Some(_) => {}
        None => {
            if let Some(Value::Array(branches)) = object.get_mut("anyOf")
                && !branches.iter().any(is_null_branch)
            {
                branches.push(json!({"type": "null"}));
            }
        }
    }
    if let Some(Value::Array(values)) = object.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
    split_nullable_compound(object);
}

/// Whether an `anyOf` branch is the one that admits `null`.
fn is_null_branch(branch: &Value) -> bool {
    branch.get("type") == Some(&Value::from("null"))
}

/// Makes a schema node refuse `null`, for lowerings where an optional property
/// is simply left out: `"null"` leaves a type array (one type left becomes a
/// string), a `{"type": "null"}` branch leaves `anyOf` (one branch left is
/// merged into the node), and `null` leaves an `enum`. Returns whether the node
/// accepted `null` before.
fn drop_null(node: &mut Value) -> bool {
    let Some(object) = node.as_object_mut() else {
        return false;
    };
    let mut dropped = false;
    if let Some(Value::Array(kinds)) = object.get_mut("type") {
        let before = kinds.len();
        kinds.retain(|kind| kind != "null");
        dropped |= kinds.len() < before;
        if let [only] = kinds.as_slice() {
            let only = only.clone();
            object.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(branches)) = object.get_mut("anyOf") {
        let before = branches.len();
        branches.retain(|branch| !is_null_branch(branch));
        dropped |= branches.len() < before;
        if branches.len() == 1
            && let Some(Value::Object(only)) = branches.pop()
        {
            object.remove("anyOf");
            for (key, value) in only {
                object.entry(key).or_insert(value);
            }
        }
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        let before = values.len();
        values.retain(|value| !value.is_null());
        dropped |= values.len() < before;
    }
    dropped
}

/// Appends `words` to the node's description (or makes them the description).
fn append_description(object: &mut Map<String, Value>, words: &str) {
    let description = match object.get("description").and_then(Value::as_str) {
        Some(text) => format!("{text} {words}"),
        None => words.to_owned(),
    };
    object.insert("description".into(), Value::String(description));
}

/// Moves `minLength`/`maxLength` into the description, for providers that do not
/// take them as keywords: `1 to 500 characters.`, `At most N characters.`,
/// `At least N characters.` (a minimum of 1 goes without words, `pattern`
/// or the description already says the text must not be empty).
fn describe_lengths(object: &mut Map<String, Value>) {
    let min = object.remove("minLength").and_then(|v| v.as_u64());
    let max = object.remove("maxLength").and_then(|v| v.as_u64());
    let words = match (min, max) {
        (Some(min), Some(max)) => format!("{min} to {max} characters."),
        (None, Some(max)) => format!("At most {max} characters."),
        (Some(min), None) if min > 1 => format!("At least {min} characters."),
        _ => return,
    };
    append_description(object, &words);
}

/// Moves the number bounds (`minimum`, `maximum`, the exclusive ones and
/// `multipleOf`) into the description: `From 1 to 50.`, `At least -1.`,
/// `At most 50.`, `Greater than 0.`, `Less than 1.`, `A multiple of 5.`.
fn describe_numbers(object: &mut Map<String, Value>) {
    let minimum = object.remove("minimum");
    let maximum = object.remove("maximum");
    let mut words = Vec::new();
    match (minimum, maximum) {
        (Some(min), Some(max)) => words.push(format!("From {min} to {max}.")),
        (Some(min), None) => words.push(format!("At least {min}.")),
        (None, Some(max)) => words.push(format!("At most {max}.")),
        (None, None) => {}
    }
    if let Some(bound) = object.remove("exclusiveMinimum") {
        words.push(format!("Greater than {bound}."));
    }
    if let Some(bound) = object.remove("exclusiveMaximum") {
        words.push(format!("Less than {bound}."));
    }
    if let Some(step) = object.remove("multipleOf") {
        words.push(format!("A multiple of {step}."));
    }
    if !words.is_empty() {
        append_description(object, &words.join(" "));
    }
}

/// Moves `pattern` into the description: the non-blank rule (`\S`) as `Must not
/// be blank.`, any other as `Matches the regular expression ...`.
fn describe_pattern(object: &mut Map<String, Value>) {
    let Some(pattern) = object.remove("pattern") else {
        return;
    };
    let words = match pattern.as_str() {
        Some(r"\S") => "Must not be blank.".to_owned(),
        Some(pattern) => format!("Matches the regular expression `{pattern}`."),
        None => return,
    };
    append_description(object, &words);
}

/// Removes `format` unless its value is one of `allowed`.
fn retain_format(object: &mut Map<String, Value>, allowed: &[&str]) {
    let keep = object
        .get("format")
        .and_then(Value::as_str)
        .is_none_or(|format| allowed.contains(&format));
    if !keep {
        object.remove("format");
    }
}

/// Calls `lower` on every subschema of `object` (its `properties`, `items` and
/// `anyOf` branches), telling it whether each is an optional property.
fn lower_children(object: &mut Map<String, Value>, lower: &mut dyn FnMut(&mut Value, bool)) {
    let required: Vec<String> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    if let Some(items) = object.get_mut("items") {
        lower(items, false);
    }
    if let Some(Value::Array(branches)) = object.get_mut("anyOf") {
        branches.iter_mut().for_each(|branch| lower(branch, false));
    }
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        for (name, property) in properties.iter_mut() {
            lower(property, !required.contains(name));
        }
    }
}
