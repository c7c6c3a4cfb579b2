//! The lowering to Anthropic's strict tool use, which Bedrock's strict mode shares.

use serde_json::{Map, Value, json};

use super::{
    describe_lengths, describe_numbers, describe_pattern, drop_null, lower_children, retain_format,
};

/// Keywords strict tool use accepts that asynctask's schemas use or may use;
/// everything else is dropped or, for bounds, moved into the description.
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "description",
    "format",
    "minItems",
];

/// `format` values strict tool use accepts.
const STRICT_FORMATS: &[&str] = &[
    "date-time",
    "time",
    "date",
    "duration",
    "email",
    "hostname",
    "uri",
    "ipv4",
    "ipv6",
    "uuid",
];

/// Lowers a canonical schema to strict tool use: numeric, length and array-size
/// bounds (other than `minItems` 0 or 1) become words in the description, since
/// strict mode refuses them; so does `pattern`, which strict mode takes only in
/// a regex subset and compiles into the grammar of every request (Anthropic's
/// SDK moves it too); formats outside its list go; every object is
/// closed; and an optional property no longer accepts `null`, it is simply left
/// out. That last rule spends none of the per-request budget of union-typed
/// parameters that strict mode shares across a host's tools (a `[T, "null"]`
/// type counts as a union); the parser still reads an absent property as
/// `null`. The bounds are still enforced by the parser.
pub(crate) fn lower_strict(schema: &Value) -> Value {
    let mut schema = schema.clone();
    strict_node(&mut schema, false);
    schema
}

fn strict_node(node: &mut Value, optional: bool) {
    if optional {
        drop_null(node);
    }
    let Some(object) = node.as_object_mut() else {
        return;
    };
    describe_lengths(object);
    describe_pattern(object);
    describe_numbers(object);
    describe_items(object);
    retain_format(object, STRICT_FORMATS);
    object.retain(|key, _| STRICT_KEYWORDS.contains(&key.as_str()));
    lower_children(object, &mut strict_node);
    if object.contains_key("properties") {
        object.insert("additionalProperties".into(), json!(false));
    }
}

/// Moves `maxItems`, and a `minItems` above 1, into the description.
fn describe_items(object: &mut Map<String, Value>) {
    let min = match object.get("minItems").and_then(Value::as_u64) {
        Some(min) if min > 1 => object.remove("minItems").and(Some(min)),
        _ => None,
    };
    let max = object.remove("maxItems").and_then(|v| v.as_u64());
    let words = match (min, max) {
        (Some(min), Some(max)) => format!("{min} to {max} items."),
        (Some(min), None) => format!("At least {min} items."),
        (None, Some(max)) => format!("At most {max} items."),
        (None, None) => return,
    };
    super::append_description(object, &words);
}
