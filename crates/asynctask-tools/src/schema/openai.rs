//! The lowering to OpenAI's strict mode (Chat Completions and Responses alike).

use serde_json::{Value, json};

use super::{describe_lengths, lower_children, make_nullable, retain_format};

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

/// `format` values OpenAI's strict mode accepts; others are dropped, since
/// strict mode refuses them.
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
/// optional properties made nullable (scalars with a type array, arrays and
/// objects with `anyOf` and a null branch), unsupported keywords and formats
/// removed.
pub(crate) fn lower_openai_strict(schema: &Value) -> Value {
    let mut schema = schema.clone();
    openai_node(&mut schema, false);
    schema
}

fn openai_node(node: &mut Value, optional: bool) {
    let Some(object) = node.as_object_mut() else {
        return;
    };
    describe_lengths(object);
    retain_format(object, OPENAI_FORMATS);
    object.retain(|key, _| OPENAI_KEYWORDS.contains(&key.as_str()));
    lower_children(object, &mut openai_node);
    if let Some(Value::Object(properties)) = object.get("properties") {
        let names: Vec<Value> = properties.keys().cloned().map(Value::String).collect();
        object.insert("required".into(), Value::Array(names));
        object.insert("additionalProperties".into(), json!(false));
    }
    if optional {
        make_nullable(node);
    }
}
