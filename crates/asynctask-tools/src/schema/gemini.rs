//! The lowerings to Gemini: its JSON Schema subset (`parametersJsonSchema`, the
//! Interactions API's `parameters`) and its OpenAPI-subset `Schema` (`parameters`).

use serde_json::{Value, json};

use super::{describe_lengths, describe_pattern, drop_null, lower_children, retain_format};

/// Lowers a canonical schema to the JSON Schema keywords Gemini documents for
/// `parametersJsonSchema` and the Interactions API: `pattern`, `minLength` and
/// `maxLength` are outside that list (ignored, not enforced), so they become
/// words in the description. The parser still enforces them.
pub(crate) fn lower_gemini_json(schema: &Value) -> Value {
    let mut schema = schema.clone();
    gemini_json_node(&mut schema, false);
    schema
}

fn gemini_json_node(node: &mut Value, _optional: bool) {
    let Some(object) = node.as_object_mut() else {
        return;
    };
    describe_lengths(object);
    describe_pattern(object);
    lower_children(object, &mut gemini_json_node);
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
    gemini_node(&mut schema, false);
    schema
}

fn gemini_node(node: &mut Value, _optional: bool) {
    // Gemini's `Schema` has no "null" type: `[T, "null"]`, an `anyOf` null
    // branch and a `null` in `enum` all become `nullable: true`.
    let nullable = drop_null(node);
    let Some(object) = node.as_object_mut() else {
        return;
    };
    if let Some(constant) = object.remove("const") {
        object.insert("enum".into(), Value::Array(vec![constant]));
    }
    retain_format(object, &["enum", "date-time"]);
    let first_type = match object.get("type") {
        Some(Value::String(kind)) => Some(kind.clone()),
        Some(Value::Array(kinds)) => kinds.iter().find_map(Value::as_str).map(str::to_owned),
        _ => None,
    };
    if let Some(kind) = first_type {
        object.insert("type".into(), Value::String(kind.to_uppercase()));
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        for value in values.iter_mut() {
            if !value.is_string() {
                *value = Value::String(value.to_string());
            }
        }
    }
    object.retain(|key, _| GEMINI_KEYWORDS.contains(&key.as_str()));
    if nullable {
        object.insert("nullable".into(), json!(true));
    }
    lower_children(object, &mut gemini_node);
}
