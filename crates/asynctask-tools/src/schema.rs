//! Canonical parameter schemas (from schemars) and their per-provider lowering.
//!
//! The canonical schema is the one the parsers agree with: draft 2020-12,
//! subschemas inlined, no `$schema` or `title`; optional fields are left out of
//! `required` and also accept `null`. Each lowering rewrites a copy for one
//! provider's documented rules (see `docs/providers.md`).

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

/// Joins doc-comment lines into one-line descriptions and drops `default: null`
/// (an absent optional needs no default), everywhere in the schema.
fn tidy(node: &mut Value) {
    match node {
        Value::Object(object) => {
            if object.get("default") == Some(&Value::Null) {
                object.remove("default");
            }
            if let Some(Value::String(text)) = object.get_mut("description") {
                *text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            }
            object.values_mut().for_each(tidy);
        }
        Value::Array(items) => items.iter_mut().for_each(tidy),
        _ => {}
    }
}

/// Keywords OpenAI's strict mode accepts; everything else is dropped (length
/// bounds are kept as words in the description).
const OPENAI_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "description",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minItems",
    "maxItems",
];

/// `format` values OpenAI's strict mode accepts; others (schemars writes `uint32`,
/// `int64`, `double` on numbers) are dropped, since strict mode refuses them.
const OPENAI_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Lowers a canonical schema to OpenAI's strict function-calling rules: every
/// object closed with `additionalProperties: false` and every property required,
/// optional properties made nullable, unsupported keywords and formats removed.
pub(crate) fn lower_openai_strict(schema: &Value) -> Value {
    let mut schema = schema.clone();
    openai_node(&mut schema);
    schema
}

fn openai_node(node: &mut Value) {
    let Some(object) = node.as_object_mut() else {
        return;
    };
    describe_lengths(object);
    retain_format(object, OPENAI_FORMATS);
    object.retain(|key, _| OPENAI_KEYWORDS.contains(&key.as_str()));
    if let Some(items) = object.get_mut("items") {
        openai_node(items);
    }
    if let Some(Value::Array(branches)) = object.get_mut("anyOf") {
        branches.iter_mut().for_each(openai_node);
    }
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
    let mut all = None;
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        let mut names = Vec::new();
        for (name, property) in properties.iter_mut() {
            openai_node(property);
            if !required.contains(name) {
                make_nullable(property);
            }
            names.push(Value::String(name.clone()));
        }
        all = Some(names);
    }
    if let Some(names) = all {
        object.insert("required".into(), Value::Array(names));
        object.insert("additionalProperties".into(), Value::Bool(false));
    }
}

/// Moves `minLength`/`maxLength` into the description, for providers that do not
/// take them as keywords.
fn describe_lengths(object: &mut Map<String, Value>) {
    let min = object.get("minLength").and_then(Value::as_u64);
    let max = object.get("maxLength").and_then(Value::as_u64);
    let words = match (min, max) {
        (Some(min), Some(max)) => format!("{min} to {max} characters."),
        (None, Some(max)) => format!("At most {max} characters."),
        (Some(min), None) if min > 1 => format!("At least {min} characters."),
        _ => return,
    };
    let description = match object.get("description").and_then(Value::as_str) {
        Some(text) => format!("{text} {words}"),
        None => words,
    };
    object.insert("description".into(), Value::String(description));
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

/// Makes a schema node accept `null` (already-nullable nodes are left alone).
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
                && !branches
                    .iter()
                    .any(|b| b.get("type") == Some(&Value::from("null")))
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
}

/// Keywords Gemini's OpenAPI-subset `Schema` accepts.
const GEMINI_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "description",
    "nullable",
    "enum",
    "items",
    "minItems",
    "maxItems",
    "properties",
    "required",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
];

/// Lowers a canonical schema to Gemini's OpenAPI 3.0 subset: upper-case types,
/// `nullable: true` instead of a `"null"` type or an `anyOf` branch `{"type":
/// "null"}`, `const` as a one-value `enum`, `format` only `enum` or `date-time`,
/// and no keyword outside the subset (`additionalProperties`, `$ref`, ...).
pub(crate) fn lower_gemini_openapi(schema: &Value) -> Value {
    let mut schema = schema.clone();
    gemini_node(&mut schema);
    schema
}

fn gemini_node(node: &mut Value) {
    let Some(object) = node.as_object_mut() else {
        return;
    };
    if let Some(constant) = object.remove("const") {
        object.insert("enum".into(), Value::Array(vec![constant]));
    }
    // Gemini has no "null" type: `anyOf: [X, {"type": "null"}]` becomes `X` with
    // `nullable: true` (schemars writes optional values without one `type` so).
    let mut nullable = false;
    if let Some(Value::Array(branches)) = object.get_mut("anyOf") {
        let before = branches.len();
        branches.retain(|branch| branch != &json!({"type": "null"}));
        nullable = branches.len() < before;
        if branches.len() == 1
            && let Some(Value::Object(only)) = branches.pop()
        {
            object.remove("anyOf");
            for (key, value) in only {
                object.entry(key).or_insert(value);
            }
        }
    }
    retain_format(object, &["enum", "date-time"]);
    if let Some(kind) = object.get("type").cloned() {
        let kinds: Vec<String> = match kind {
            Value::String(kind) => vec![kind],
            Value::Array(kinds) => kinds
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        };
        nullable |= kinds.iter().any(|k| k == "null");
        let concrete: Vec<&String> = kinds.iter().filter(|k| *k != "null").collect();
        if let Some(first) = concrete.first() {
            object.insert("type".into(), Value::String(first.to_uppercase()));
        }
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        nullable |= values.contains(&Value::Null);
        values.retain(|v| !v.is_null());
        for value in values.iter_mut() {
            if !value.is_string() {
                *value = Value::String(value.to_string());
            }
        }
    }
    object.retain(|key, _| GEMINI_KEYWORDS.contains(&key.as_str()));
    if nullable {
        object.insert("nullable".into(), Value::Bool(true));
    }
    if let Some(items) = object.get_mut("items") {
        gemini_node(items);
    }
    if let Some(Value::Array(branches)) = object.get_mut("anyOf") {
        branches.iter_mut().for_each(gemini_node);
    }
    if let Some(Value::Object(properties)) = object.get_mut("properties") {
        properties.values_mut().for_each(gemini_node);
    }
}
