//! Every provider's lowering obeys that provider's documented rules
//! (`docs/providers.md`), checked node by node on every tool's spec.

use std::collections::BTreeSet;
use std::sync::Arc;

use asynctask_manager::AsyncTaskManager;
use asynctask_model::OutputObject;
use asynctask_tools::{
    Provider, SubagentError, SubagentInfo, SubagentRequest, SubagentRunner, TaskTool, Tool,
    ToolAnnotations, ToolParams, ToolSpec,
};
use pretty_assertions::assert_eq;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::codegen::{mcp_only_specs, specs};
use crate::{string_set, types_of};

/// A runner with a catalog, for the `task` spec that lists subagents.
struct CatalogRunner;

#[async_trait::async_trait]
impl SubagentRunner for CatalogRunner {
    async fn run(
        &self,
        _request: SubagentRequest,
        _cancel: CancellationToken,
    ) -> Result<OutputObject, SubagentError> {
        Err(SubagentError::new("the schema tests run no subagent"))
    }

    fn catalog(&self) -> Option<Vec<SubagentInfo>> {
        Some(vec![
            SubagentInfo::new("researcher", "Reads the code base"),
            SubagentInfo::new("tester", "Runs the tests").with_messages(true),
        ])
    }
}

/// The specs every provider rule is checked against: every tool's (the MCP
/// server's own among them: a host may forward them to any provider), and the
/// `task` spec of a runner with a catalog (its `subagent_name` is an `enum`).
fn rule_specs() -> Vec<ToolSpec> {
    let mut specs = specs();
    specs.extend(mcp_only_specs());
    specs.push(TaskTool::new(AsyncTaskManager::default(), Arc::new(CatalogRunner)).spec());
    specs
}

fn spec(name: &str) -> ToolSpec {
    specs()
        .into_iter()
        .find(|spec| spec.name == name)
        .expect("a known tool")
}

fn provider_definition(spec: &ToolSpec, provider: &str) -> Value {
    spec.for_provider(provider.parse().expect("a provider name"))
}

// ---------------------------------------------------------------------------
// Walking schemas
// ---------------------------------------------------------------------------

/// One schema node met on a walk, beside the canonical node it was lowered from.
struct Node<'a> {
    /// Where it is, as a JSON pointer from the parameters' root.
    path: String,
    schema: &'a Value,
    canonical: Option<&'a Value>,
    /// How many objects enclose it, itself included (the root object is at 1).
    depth: usize,
}

/// Calls `visit` on every schema node of `schema` (properties, items, `anyOf`
/// branches, `$defs`), pairing each with the same place in `canonical`.
fn walk<'a>(schema: &'a Value, canonical: Option<&'a Value>, visit: &mut dyn FnMut(&Node<'a>)) {
    fn go<'a>(
        path: String,
        schema: &'a Value,
        canonical: Option<&'a Value>,
        depth: usize,
        visit: &mut dyn FnMut(&Node<'a>),
    ) {
        let Some(object) = schema.as_object() else {
            return;
        };
        // A lowering may merge a canonical `anyOf: [X, {"type": "null"}]` into
        // one node: its canonical counterpart is then `X`.
        let canonical = match canonical {
            Some(c) if !object.contains_key("anyOf") => Some(non_null_branch(c).unwrap_or(c)),
            other => other,
        };
        let depth = depth + usize::from(object.contains_key("properties"));
        visit(&Node {
            path: if path.is_empty() {
                "/".into()
            } else {
                path.clone()
            },
            schema,
            canonical,
            depth,
        });
        let child = |key: &str| canonical.and_then(|c| c.get(key));
        if let Some(Value::Object(properties)) = object.get("properties") {
            for (name, property) in properties {
                let canonical = child("properties").and_then(|p| p.get(name));
                go(
                    format!("{path}/properties/{name}"),
                    property,
                    canonical,
                    depth,
                    visit,
                );
            }
        }
        if let Some(items) = object.get("items") {
            go(format!("{path}/items"), items, child("items"), depth, visit);
        }
        if let Some(Value::Array(branches)) = object.get("anyOf") {
            for (i, branch) in branches.iter().enumerate() {
                let canonical = child("anyOf").and_then(|b| b.get(i));
                go(format!("{path}/anyOf/{i}"), branch, canonical, depth, visit);
            }
        }
        if let Some(Value::Object(definitions)) = object.get("$defs") {
            for (name, definition) in definitions {
                go(
                    format!("{path}/$defs/{name}"),
                    definition,
                    None,
                    depth,
                    visit,
                );
            }
        }
    }
    go(String::new(), schema, canonical, 0, visit);
}

/// The one branch of `anyOf: [X, {"type": "null"}]` that is not the null one.
fn non_null_branch(node: &Value) -> Option<&Value> {
    let branches = node.get("anyOf")?.as_array()?;
    let others: Vec<&Value> = branches
        .iter()
        .filter(|branch| **branch != json!({"type": "null"}))
        .collect();
    match others[..] {
        [only] if branches.len() == 2 => Some(only),
        _ => None,
    }
}

/// Whether the schema `node` admits `null`, by the JSON Schema referee.
fn accepts_null(node: &Value) -> bool {
    jsonschema::validator_for(node)
        .expect("a property schema compiles")
        .is_valid(&Value::Null)
}

/// `^[a-zA-Z0-9_-]{1,max}$`, plus the `extra` characters.
fn is_plain_name(name: &str, max: usize, extra: &[char]) -> bool {
    (1..=max).contains(&name.chars().count())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || extra.contains(&c))
}

/// A property name every provider takes: `^[a-zA-Z_][a-zA-Z0-9_]{0,63}$` (the
/// Vertex rule, the strictest).
fn is_property_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn keys(value: &Value) -> Vec<&str> {
    value
        .as_object()
        .map(|object| object.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

fn assert_no_violations(provider: &str, violations: Vec<String>) {
    assert_eq!(
        violations,
        Vec::<String>::new(),
        "{provider}: rule violations"
    );
}

// ---------------------------------------------------------------------------
// Provider rules
// ---------------------------------------------------------------------------

#[test]
fn every_provider_has_an_adapter() {
    let task = spec("task");
    for provider in Provider::ALL {
        assert_eq!(provider.name().parse::<Provider>(), Ok(provider));
        assert!(task.for_provider(provider).is_object(), "{provider}");
    }
    assert!("openai".parse::<Provider>().is_err());
    assert_eq!(
        specs().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
        [
            "task",
            "check_async_tasks",
            "message_async_task",
            "answer_async_task",
            "todo_pause"
        ]
    );
}

/// Keywords OpenAI's strict mode documents as supported [OA-SO]. `const` is there
/// only by implication (it counts toward a size limit); `minLength`/`maxLength`
/// are not listed, so they must not appear.
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
    "$defs",
    "$ref",
];
const OPENAI_TYPES: &[&str] = &[
    "string", "number", "boolean", "integer", "object", "array", "null",
];
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

/// OpenAI strict mode (Chat Completions and Responses alike): the name, `strict`,
/// and every node of `parameters`, beside the `canonical` schema it came from.
fn openai_strict_violations(
    tool: &str,
    name: &Value,
    strict: &Value,
    parameters: &Value,
    canonical: &Value,
) -> Vec<String> {
    let mut violations = Vec::new();
    if !name
        .as_str()
        .is_some_and(|name| is_plain_name(name, 64, &[]))
    {
        violations.push(format!(
            "{tool}: name {name} does not match ^[a-zA-Z0-9_-]{{1,64}}$"
        ));
    }
    if strict != &json!(true) {
        violations.push(format!("{tool}: strict is {strict}, not true"));
    }
    if parameters.get("type") != Some(&json!("object")) {
        violations.push(format!("{tool}: the root is not `type: \"object\"`"));
    }
    if parameters.get("anyOf").is_some() {
        violations.push(format!("{tool}: the root uses anyOf"));
    }
    if let Err(err) = jsonschema::validator_for(parameters) {
        violations.push(format!("{tool}: parameters do not compile: {err}"));
    }
    let mut properties_total = 0;
    walk(parameters, Some(canonical), &mut |node| {
        let mut fail = |what: String| violations.push(format!("{tool}: {}: {what}", node.path));
        let Some(schema) = node.schema.as_object() else {
            return;
        };
        for key in schema.keys() {
            if !OPENAI_KEYWORDS.contains(&key.as_str()) {
                fail(format!("keyword `{key}` is not supported in strict mode"));
            }
        }
        let kinds = types_of(node.schema);
        for kind in &kinds {
            if !OPENAI_TYPES.contains(kind) {
                fail(format!("type `{kind}` is not supported"));
            }
        }
        if let Some(format) = schema.get("format")
            && !format.as_str().is_some_and(|f| OPENAI_FORMATS.contains(&f))
        {
            fail(format!("format {format} is not supported"));
        }
        // Strict mode refuses `type: ["array", "null"]` ("array schema missing
        // items"); OpenAI's SDKs write `anyOf` with a null branch instead.
        if kinds.len() > 1 && kinds.iter().any(|k| *k == "array" || *k == "object") {
            fail(format!(
                "type {kinds:?}: a nullable array or object must be `anyOf` with a null branch"
            ));
        }
        if kinds.contains(&"array") && !schema.contains_key("items") {
            fail("an array without `items`".into());
        }
        if node.depth > 10 {
            fail(format!("{} objects deep (at most 10)", node.depth));
        }
        if !(kinds.contains(&"object") || schema.contains_key("properties")) {
            return;
        }
        if schema.get("additionalProperties") != Some(&json!(false)) {
            fail("an object without `additionalProperties: false`".into());
        }
        let empty = Map::new();
        let properties = schema
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        properties_total += properties.len();
        let names: BTreeSet<&str> = properties.keys().map(String::as_str).collect();
        let listed = schema
            .get("required")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let required = string_set(schema.get("required"));
        if required != names || listed != names.len() {
            fail(format!(
                "`required` {required:?} is not exactly the properties {names:?}"
            ));
        }
        let canonical_required = string_set(node.canonical.and_then(|c| c.get("required")));
        for (name, property) in properties {
            let optional = !canonical_required.contains(name.as_str());
            if optional && !accepts_null(property) {
                fail(format!("optional property `{name}` does not accept null"));
            }
            if !optional && accepts_null(property) {
                fail(format!("required property `{name}` accepts null"));
            }
        }
    });
    if properties_total > 5000 {
        violations.push(format!(
            "{tool}: {properties_total} object properties (at most 5000)"
        ));
    }
    violations
}

#[test]
fn openai_chat_follows_the_strict_rules() {
    let mut violations = Vec::new();
    for spec in rule_specs() {
        let definition = provider_definition(&spec, "openai-chat");
        assert_eq!(keys(&definition), ["type", "function"], "{}", spec.name);
        assert_eq!(definition["type"], "function");
        let function = &definition["function"];
        assert_eq!(
            keys(function),
            ["name", "description", "parameters", "strict"],
            "{}",
            spec.name
        );
        violations.extend(openai_strict_violations(
            &spec.name,
            &function["name"],
            &function["strict"],
            &function["parameters"],
            &spec.parameters,
        ));
    }
    assert_no_violations("openai-chat", violations);
}

#[test]
fn openai_responses_follows_the_strict_rules() {
    let mut violations = Vec::new();
    for spec in rule_specs() {
        let definition = provider_definition(&spec, "openai-responses");
        assert_eq!(
            keys(&definition),
            ["type", "name", "description", "parameters", "strict"],
            "{}",
            spec.name
        );
        assert_eq!(definition["type"], "function");
        violations.extend(openai_strict_violations(
            &spec.name,
            &definition["name"],
            &definition["strict"],
            &definition["parameters"],
            &spec.parameters,
        ));
    }
    assert_no_violations("openai-responses", violations);
}

#[test]
fn anthropic_follows_its_rules() {
    let mut violations = Vec::new();
    for spec in rule_specs() {
        let definition = provider_definition(&spec, "anthropic");
        let tool = &spec.name;
        assert_eq!(
            keys(&definition),
            ["name", "description", "input_schema"],
            "{tool}"
        );
        // Current docs allow 128 characters, older ones 64: 64 satisfies both.
        if !definition["name"]
            .as_str()
            .is_some_and(|n| is_plain_name(n, 64, &[]))
        {
            violations.push(format!(
                "{tool}: name does not match ^[a-zA-Z0-9_-]{{1,64}}$"
            ));
        }
        let schema = &definition["input_schema"];
        if schema.get("type") != Some(&json!("object")) {
            violations.push(format!("{tool}: input_schema is not `type: \"object\"`"));
        }
        for keyword in ["anyOf", "oneOf", "allOf"] {
            if schema.get(keyword).is_some() {
                violations.push(format!(
                    "{tool}: input_schema has {keyword} at the top level"
                ));
            }
        }
        if let Err(err) = jsonschema::draft202012::new(schema) {
            violations.push(format!("{tool}: input_schema is not draft 2020-12: {err}"));
        }
        // What asynctask sends: the canonical schema, optional properties optional.
        assert_eq!(schema, &spec.parameters, "{tool}");
    }
    assert_no_violations("anthropic", violations);
}

/// Keywords strict tool use supports [AN-SO] (Anthropic; Bedrock's strict mode
/// has the same limits [BR-STRICT]). Not supported, so absent here: `minimum`,
/// `maximum`, `multipleOf` and the exclusive bounds, `minLength`, `maxLength`,
/// `maxItems`, and `minItems` other than 0 or 1.
const STRICT_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "anyOf",
    "allOf",
    "$ref",
    "$defs",
    "definitions",
    "default",
    "description",
    "pattern",
    "format",
    "minItems",
];
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

/// What one tool spends of the per-request budgets strict tool use shares
/// across all strict tools: optional parameters, and union-typed parameters
/// (`anyOf`, or a type array such as `["string", "null"]`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct StrictBudget {
    optional: usize,
    unions: usize,
}

/// Strict tool use, node by node, beside the canonical schema: the supported
/// keywords and formats only, every object closed, optional properties left
/// out of `required` (and not nullable), required ones required, regex
/// patterns without the unsupported constructs. Adds what the schema spends of
/// the shared budgets to `budget`.
fn strict_violations(
    tool: &str,
    schema: &Value,
    canonical: &Value,
    budget: &mut StrictBudget,
) -> Vec<String> {
    let mut violations = Vec::new();
    if schema.get("type") != Some(&json!("object")) {
        violations.push(format!("{tool}: the schema is not `type: \"object\"`"));
    }
    for keyword in ["anyOf", "oneOf", "allOf"] {
        if schema.get(keyword).is_some() {
            violations.push(format!("{tool}: {keyword} at the top level"));
        }
    }
    if let Err(err) = jsonschema::draft202012::new(schema) {
        violations.push(format!("{tool}: the schema is not draft 2020-12: {err}"));
    }
    walk(schema, Some(canonical), &mut |node| {
        let mut fail = |what: String| violations.push(format!("{tool}: {}: {what}", node.path));
        let Some(object) = node.schema.as_object() else {
            return;
        };
        for key in object.keys() {
            if !STRICT_KEYWORDS.contains(&key.as_str()) {
                fail(format!("keyword `{key}` is not supported in strict mode"));
            }
        }
        if let Some(min) = object.get("minItems")
            && !(min == &json!(0) || min == &json!(1))
        {
            fail(format!("minItems {min} (only 0 or 1)"));
        }
        if let Some(format) = object.get("format")
            && !format.as_str().is_some_and(|f| STRICT_FORMATS.contains(&f))
        {
            fail(format!("format {format} is not supported"));
        }
        if let Some(pattern) = object.get("pattern").and_then(Value::as_str) {
            for construct in ["(?=", "(?!", "(?<=", "(?<!", r"\b", r"\1"] {
                if pattern.contains(construct) {
                    fail(format!("pattern {pattern:?} uses `{construct}`"));
                }
            }
        }
        if let Some(values) = object.get("enum").and_then(Value::as_array)
            && values.iter().any(|v| v.is_array() || v.is_object())
        {
            fail("an enum with a complex value".into());
        }
        if object.contains_key("anyOf") || types_of(node.schema).len() > 1 {
            budget.unions += 1;
        }
        let Some(properties) = object.get("properties").and_then(Value::as_object) else {
            return;
        };
        if object.get("additionalProperties") != Some(&json!(false)) {
            fail("an object without `additionalProperties: false`".into());
        }
        let required = string_set(object.get("required"));
        let canonical_required = string_set(node.canonical.and_then(|c| c.get("required")));
        if required != canonical_required {
            fail(format!(
                "`required` {required:?} is not the canonical {canonical_required:?}"
            ));
        }
        for (name, property) in properties {
            if !required.contains(name.as_str()) {
                budget.optional += 1;
                if accepts_null(property) {
                    fail(format!("optional property `{name}` accepts null"));
                }
            }
        }
    });
    violations
}

/// What each tool of a host spends of strict tool use's shared budgets
/// (documented in docs/providers.md).
const STRICT_BUDGETS: &[(&str, StrictBudget)] = &[
    (
        "task",
        StrictBudget {
            optional: 6,
            unions: 0,
        },
    ),
    (
        "check_async_tasks",
        StrictBudget {
            optional: 1,
            unions: 0,
        },
    ),
    (
        "message_async_task",
        StrictBudget {
            optional: 0,
            unions: 0,
        },
    ),
    (
        "answer_async_task",
        StrictBudget {
            optional: 2,
            unions: 0,
        },
    ),
    (
        "todo_pause",
        StrictBudget {
            optional: 0,
            unions: 0,
        },
    ),
    (
        "wait_async_tasks",
        StrictBudget {
            optional: 2,
            unions: 0,
        },
    ),
    (
        "end_async_task",
        StrictBudget {
            optional: 0,
            unions: 0,
        },
    ),
];

/// Strict tool use's per-request limits [AN-SO]: strict tools, optional
/// parameters and union-typed parameters across all of them.
const STRICT_MAX_TOOLS: usize = 20;
const STRICT_MAX_OPTIONAL: usize = 24;
const STRICT_MAX_UNIONS: usize = 16;

/// The strict schema of every spec in `rule_specs()`, checked, with what each
/// tool spends of the shared budgets.
fn strict_checked(
    provider: &str,
    schema_of: &dyn Fn(&Value) -> &Value,
) -> Vec<(String, StrictBudget)> {
    let mut violations = Vec::new();
    let mut spent = Vec::new();
    for spec in rule_specs() {
        let definition = provider_definition(&spec, provider);
        let mut budget = StrictBudget::default();
        violations.extend(strict_violations(
            &spec.name,
            schema_of(&definition),
            &spec.parameters,
            &mut budget,
        ));
        spent.push((spec.name.clone(), budget));
    }
    assert_no_violations(provider, violations);
    spent
}

#[test]
fn anthropic_strict_follows_the_strict_rules() {
    for spec in rule_specs() {
        let definition = provider_definition(&spec, "anthropic-strict");
        let tool = &spec.name;
        assert_eq!(
            keys(&definition),
            ["name", "description", "input_schema", "strict"],
            "{tool}"
        );
        assert_eq!(definition["strict"], true, "{tool}");
        assert!(
            definition["name"]
                .as_str()
                .is_some_and(|n| is_plain_name(n, 64, &[])),
            "{tool}"
        );
    }
    let spent = strict_checked("anthropic-strict", &|d| &d["input_schema"]);

    // What docs/providers.md says each tool spends; a host's tools together stay
    // within the limits with room for the host's own.
    let host: Vec<String> = specs()
        .into_iter()
        .chain(mcp_only_specs())
        .map(|spec| spec.name)
        .collect();
    let ours: Vec<(&str, StrictBudget)> = spent
        .iter()
        .take(host.len())
        .map(|(name, budget)| (name.as_str(), *budget))
        .collect();
    assert_eq!(ours, STRICT_BUDGETS);
    let optional: usize = STRICT_BUDGETS.iter().map(|(_, b)| b.optional).sum();
    let unions: usize = STRICT_BUDGETS.iter().map(|(_, b)| b.unions).sum();
    assert!(STRICT_BUDGETS.len() <= STRICT_MAX_TOOLS);
    assert!(optional <= STRICT_MAX_OPTIONAL && unions <= STRICT_MAX_UNIONS);
}

/// A Bedrock tool name (`toolSpec.name`): `[a-zA-Z0-9_-]+`, 1 to 64 characters;
/// a description of at least one character [BR-API].
fn bedrock_violations(tool: &str, tool_spec: &Value) -> Vec<String> {
    let mut violations = Vec::new();
    if !tool_spec["name"]
        .as_str()
        .is_some_and(|n| is_plain_name(n, 64, &[]))
    {
        violations.push(format!("{tool}: name does not match [a-zA-Z0-9_-]{{1,64}}"));
    }
    if tool_spec["description"].as_str().is_none_or(str::is_empty) {
        violations.push(format!("{tool}: an empty description"));
    }
    assert_eq!(
        keys(&tool_spec["inputSchema"]),
        ["json"],
        "{tool}: a union of one member"
    );
    violations
}

#[test]
fn bedrock_follows_its_rules() {
    let mut violations = Vec::new();
    for spec in rule_specs() {
        let tool = &spec.name;
        let definition = provider_definition(&spec, "bedrock");
        assert_eq!(keys(&definition), ["toolSpec"], "{tool}");
        let tool_spec = &definition["toolSpec"];
        assert_eq!(
            keys(tool_spec),
            ["name", "description", "inputSchema"],
            "{tool}"
        );
        violations.extend(bedrock_violations(tool, tool_spec));
        let schema = &tool_spec["inputSchema"]["json"];
        if schema.get("type") != Some(&json!("object")) {
            violations.push(format!(
                "{tool}: inputSchema.json is not `type: \"object\"`"
            ));
        }
        if let Err(err) = jsonschema::draft202012::new(schema) {
            violations.push(format!(
                "{tool}: inputSchema.json is not draft 2020-12: {err}"
            ));
        }
        assert_eq!(schema, &spec.parameters, "{tool}");
    }
    assert_no_violations("bedrock", violations);
}

#[test]
fn bedrock_strict_follows_the_strict_rules() {
    let mut violations = Vec::new();
    for spec in rule_specs() {
        let tool = &spec.name;
        let definition = provider_definition(&spec, "bedrock-strict");
        assert_eq!(keys(&definition), ["toolSpec"], "{tool}");
        let tool_spec = &definition["toolSpec"];
        assert_eq!(
            keys(tool_spec),
            ["name", "description", "inputSchema", "strict"],
            "{tool}"
        );
        assert_eq!(tool_spec["strict"], true, "{tool}");
        violations.extend(bedrock_violations(tool, tool_spec));
        // The schema of Anthropic's strict tool use.
        assert_eq!(
            tool_spec["inputSchema"]["json"],
            provider_definition(&spec, "anthropic-strict")["input_schema"],
            "{tool}"
        );
    }
    assert_no_violations("bedrock-strict", violations);
    strict_checked("bedrock-strict", &|d| &d["toolSpec"]["inputSchema"]["json"]);
}

/// The JSON Schema keywords Gemini documents for `parametersJsonSchema` and the
/// Interactions API's `parameters` [G-JS]; others (`pattern`, `minLength`,
/// `maxLength` among them) are ignored, not enforced.
const GEMINI_JSON_KEYWORDS: &[&str] = &[
    "$id",
    "$defs",
    "$ref",
    "$anchor",
    "type",
    "format",
    "title",
    "description",
    "enum",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "anyOf",
    "oneOf",
    "properties",
    "additionalProperties",
    "required",
    "propertyOrdering",
];

/// Removes `keys` from every object in `value`, at any depth.
fn without_keys(value: &Value, keys: &[&str]) -> Value {
    match value {
        Value::Object(object) => Value::Object(
            object
                .iter()
                .filter(|(key, _)| !keys.contains(&key.as_str()))
                .map(|(key, value)| (key.clone(), without_keys(value, keys)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| without_keys(v, keys)).collect()),
        other => other.clone(),
    }
}

/// Gemini's JSON Schema subset, node by node: the documented keywords only,
/// property names Vertex takes, and nothing changed from the canonical schema
/// but the ignored keywords, moved into descriptions.
fn gemini_json_violations(tool: &str, schema: &Value, canonical: &Value) -> Vec<String> {
    let mut violations = Vec::new();
    if schema.get("type") != Some(&json!("object")) {
        violations.push(format!("{tool}: the schema is not `type: \"object\"`"));
    }
    if let Err(err) = jsonschema::draft202012::new(schema) {
        violations.push(format!("{tool}: the schema is not draft 2020-12: {err}"));
    }
    walk(schema, None, &mut |node| {
        let mut fail = |what: String| violations.push(format!("{tool}: {}: {what}", node.path));
        for key in keys(node.schema) {
            if !GEMINI_JSON_KEYWORDS.contains(&key) {
                fail(format!("keyword `{key}` is not one Gemini documents"));
            }
        }
        for name in node.schema.get("properties").map(keys).unwrap_or_default() {
            if !is_property_name(name) {
                fail(format!("property name {name:?}"));
            }
        }
    });
    let moved = ["pattern", "minLength", "maxLength", "description"];
    if without_keys(schema, &moved) != without_keys(canonical, &moved) {
        violations.push(format!(
            "{tool}: the schema differs from the canonical one beyond the ignored keywords"
        ));
    }
    violations
}

/// A Gemini function name: starts with a letter or `_`; letters, digits, `_`,
/// `.`, `-`; at most 64 characters.
fn gemini_name_violations(tool: &str, name: &Value) -> Vec<String> {
    let name = name.as_str().unwrap_or("");
    if name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && is_plain_name(name, 64, &['.'])
    {
        Vec::new()
    } else {
        vec![format!(
            "{tool}: name {name:?} is not a Gemini function name"
        )]
    }
}

#[test]
fn gemini_json_schema_follows_its_rules() {
    let mut violations = Vec::new();
    for spec in rule_specs() {
        let definition = provider_definition(&spec, "gemini");
        let tool = &spec.name;
        // `parametersJsonSchema` and `parameters` are mutually exclusive.
        assert_eq!(
            keys(&definition),
            ["name", "description", "parametersJsonSchema"],
            "{tool}"
        );
        violations.extend(gemini_name_violations(tool, &definition["name"]));
        violations.extend(gemini_json_violations(
            tool,
            &definition["parametersJsonSchema"],
            &spec.parameters,
        ));
    }
    assert_no_violations("gemini", violations);
}

#[test]
fn gemini_interactions_follows_its_rules() {
    let mut violations = Vec::new();
    for spec in rule_specs() {
        let definition = provider_definition(&spec, "gemini-interactions");
        let tool = &spec.name;
        assert_eq!(
            keys(&definition),
            ["type", "name", "description", "parameters"],
            "{tool}"
        );
        assert_eq!(definition["type"], "function", "{tool}");
        violations.extend(gemini_name_violations(tool, &definition["name"]));
        violations.extend(gemini_json_violations(
            tool,
            &definition["parameters"],
            &spec.parameters,
        ));
        // The same schema as a `parametersJsonSchema` declaration.
        assert_eq!(
            definition["parameters"],
            provider_definition(&spec, "gemini")["parametersJsonSchema"],
            "{tool}"
        );
    }
    assert_no_violations("gemini-interactions", violations);
}

/// The fields of Gemini's `Schema` message (v1beta) [G-SCHEMA]; any other key is a 400.
const GEMINI_FIELDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "default",
    "example",
    "items",
    "minItems",
    "maxItems",
    "properties",
    "required",
    "propertyOrdering",
    "minProperties",
    "maxProperties",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "anyOf",
];
const GEMINI_TYPES: &[&str] = &[
    "STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL",
];

/// Gemini's OpenAPI-subset `Schema`, node by node, beside the canonical schema.
fn gemini_openapi_violations(tool: &str, parameters: &Value, canonical: &Value) -> Vec<String> {
    let mut violations = Vec::new();
    if parameters.get("type") != Some(&json!("OBJECT")) {
        violations.push(format!("{tool}: parameters is not `type: \"OBJECT\"`"));
    }
    walk(parameters, Some(canonical), &mut |node| {
        let mut fail = |what: String| violations.push(format!("{tool}: {}: {what}", node.path));
        let Some(schema) = node.schema.as_object() else {
            return;
        };
        for key in ["additionalProperties", "$ref", "$defs", "const", "$schema"] {
            if schema.contains_key(key) {
                fail(format!("`{key}` is rejected by Gemini"));
            }
        }
        for key in schema.keys() {
            if !GEMINI_FIELDS.contains(&key.as_str()) {
                fail(format!("`{key}` is not a field of Gemini's Schema"));
            }
        }
        match schema.get("type") {
            Some(Value::String(kind)) if GEMINI_TYPES.contains(&kind.as_str()) => {}
            Some(Value::Array(_)) => fail("a type array".into()),
            Some(kind) => fail(format!("type {kind} is not a Gemini type")),
            None if schema.contains_key("anyOf") => {}
            None => fail("no type".into()),
        }
        if let Some(values) = schema.get("enum")
            && !values
                .as_array()
                .is_some_and(|values| values.iter().all(Value::is_string))
        {
            fail(format!("enum {values} is not all strings"));
        }
        if let Some(format) = schema.get("format")
            && !["enum", "date-time"].contains(&format.as_str().unwrap_or(""))
        {
            fail(format!("format {format} (only enum and date-time)"));
        }
        if schema.get("nullable").is_some_and(|v| !v.is_boolean()) {
            fail("nullable is not a boolean".into());
        }
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        let required = string_set(schema.get("required"));
        let canonical_required = string_set(node.canonical.and_then(|c| c.get("required")));
        if required != canonical_required {
            fail(format!(
                "`required` {required:?} is not the canonical {canonical_required:?}"
            ));
        }
        for (name, property) in properties {
            if !is_property_name(name) {
                fail(format!("property name {name:?}"));
            }
            let nullable = property.get("nullable") == Some(&json!(true));
            let optional = !canonical_required.contains(name.as_str());
            if optional && !nullable {
                fail(format!("optional property `{name}` lacks `nullable: true`"));
            }
            if !optional && nullable {
                fail(format!("required property `{name}` is nullable"));
            }
        }
    });
    violations
}

#[test]
fn gemini_openapi_follows_its_rules() {
    let mut violations = Vec::new();
    for spec in rule_specs() {
        let definition = provider_definition(&spec, "gemini-openapi");
        assert_eq!(
            keys(&definition),
            ["name", "description", "parameters"],
            "{}",
            spec.name
        );
        violations.extend(gemini_openapi_violations(
            &spec.name,
            &definition["parameters"],
            &spec.parameters,
        ));
    }
    assert_no_violations("gemini-openapi", violations);
}

/// What an MCP client that forwards a tool's `inputSchema` unchanged to
/// OpenAI's strict mode or to Gemini's `parameters` would have refused: a
/// `default`, a `format` outside OpenAI's list (Gemini's `parameters` takes
/// none of those either), a nullable array or object written as a type array.
fn forwarding_violations(tool: &str, schema: &Value) -> Vec<String> {
    let mut violations = Vec::new();
    walk(schema, None, &mut |node| {
        let mut fail = |what: String| violations.push(format!("{tool}: {}: {what}", node.path));
        if node.schema.get("default").is_some() {
            fail("a `default`".into());
        }
        if let Some(format) = node.schema.get("format") {
            fail(format!("format {format}"));
        }
        let kinds = types_of(node.schema);
        if kinds.len() > 1 && kinds.iter().any(|k| *k == "array" || *k == "object") {
            fail(format!("type {kinds:?}"));
        }
    });
    violations
}

#[test]
fn mcp_follows_its_rules() {
    let mut violations = Vec::new();
    for spec in rule_specs() {
        let definition = provider_definition(&spec, "mcp");
        let tool = spec.name.as_str();
        assert_eq!(
            keys(&definition),
            ["name", "title", "description", "inputSchema", "annotations"],
            "{tool}"
        );
        if !definition["name"]
            .as_str()
            .is_some_and(|n| is_plain_name(n, 128, &['.']))
        {
            violations.push(format!(
                "{tool}: name does not match ^[A-Za-z0-9_.-]{{1,128}}$"
            ));
        }
        let schema = &definition["inputSchema"];
        if schema.get("type") != Some(&json!("object")) {
            violations.push(format!("{tool}: inputSchema is not `type: \"object\"`"));
        }
        if let Err(err) = jsonschema::draft202012::new(schema) {
            violations.push(format!("{tool}: inputSchema is not draft 2020-12: {err}"));
        }
        assert_eq!(schema, &spec.parameters, "{tool}");
        violations.extend(forwarding_violations(tool, schema));
        let annotations = &definition["annotations"];
        assert_eq!(
            keys(annotations),
            [
                "title",
                "readOnlyHint",
                "destructiveHint",
                "idempotentHint",
                "openWorldHint"
            ],
            "{tool}"
        );
        if annotations["title"]
            .as_str()
            .is_none_or(|title| title.trim().is_empty())
        {
            violations.push(format!(
                "{tool}: annotations.title is not a non-empty string"
            ));
        }
        let hints = &spec.annotations;
        assert_eq!(
            [
                &annotations["readOnlyHint"],
                &annotations["destructiveHint"],
                &annotations["idempotentHint"],
                &annotations["openWorldHint"],
            ],
            [
                &json!(hints.read_only),
                &json!(hints.destructive),
                &json!(hints.idempotent),
                &json!(hints.open_world),
            ],
            "{tool}: every hint written out, as a boolean"
        );
    }
    assert_no_violations("mcp", violations);

    let hints = |tool: &str| provider_definition(&spec(tool), "mcp")["annotations"].clone();
    assert_eq!(hints("check_async_tasks")["readOnlyHint"], true);
    let task = hints("task");
    assert_eq!(
        (&task["readOnlyHint"], &task["destructiveHint"]),
        (&json!(false), &json!(true))
    );
}

/// OpenAI strict mode refuses `type: ["array", "null"]` with `items`; the
/// nullable arrays of `task` are `anyOf` with a null branch in both dialects,
/// as OpenAI's SDKs write an optional list, and scalars keep their type array.
#[test]
fn openai_writes_nullable_arrays_as_any_of() {
    let task = spec("task");
    let chat = provider_definition(&task, "openai-chat");
    let responses = provider_definition(&task, "openai-responses");
    assert_eq!(chat["function"]["parameters"], responses["parameters"]);
    let properties = &chat["function"]["parameters"]["properties"];
    insta::assert_json_snapshot!("openai_task_nullable_properties", {
        let nullable: serde_json::Map<String, Value> = [
            "behaviour_prompts",
            "tool_whitelist",
            "output_spec",
            "context",
            "timeout_seconds",
        ]
        .into_iter()
        .map(|name| (name.to_owned(), properties[name].clone()))
        .collect();
        nullable
    });
}

/// Schema shapes the three tools do not use yet, so that the lowerings are held to
/// the rules before a new parameter needs them: string enums, optional nested
/// objects, numbers (schemars gives them `format: "uint32"`, `"double"`), length
/// bounds, and an optional value without one `type` (`anyOf` with a null branch).
#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "only the schema of this type is used")]
struct Shapes {
    /// A required enum.
    mode: Speed,
    /// An optional enum.
    #[serde(default)]
    level: Option<Speed>,
    /// A required nested object.
    inner: Inner,
    /// An optional nested object.
    #[serde(default)]
    nested: Option<Inner>,
    /// An optional count.
    #[serde(default)]
    count: Option<u32>,
    /// A ratio.
    ratio: f64,
    /// A short name.
    #[schemars(length(min = 2, max = 8))]
    short: String,
    /// A number or a text.
    #[serde(default)]
    either: Option<NumberOrText>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Speed {
    Fast,
    Slow,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[expect(dead_code, reason = "only the schema of this type is used")]
struct Inner {
    /// An optional flag.
    #[serde(default)]
    flag: Option<bool>,
    /// Tags.
    tags: Vec<String>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
#[expect(dead_code, reason = "only the schema of this type is used")]
enum NumberOrText {
    Number(u32),
    Text(String),
}

impl ToolParams for Shapes {}

#[test]
fn lowerings_hold_on_other_schema_shapes() {
    let spec = ToolSpec::new("shapes", "Shapes", "Schema shapes.", Shapes::schema())
        .with_annotations(spec("task").annotations);
    let mut violations = Vec::new();
    for provider in ["openai-chat", "openai-responses"] {
        let definition = provider_definition(&spec, provider);
        let function = definition.get("function").unwrap_or(&definition);
        violations.extend(openai_strict_violations(
            provider,
            &function["name"],
            &function["strict"],
            &function["parameters"],
            &spec.parameters,
        ));
    }
    let gemini = provider_definition(&spec, "gemini-openapi");
    violations.extend(gemini_openapi_violations(
        "gemini-openapi",
        &gemini["parameters"],
        &spec.parameters,
    ));
    violations.extend(gemini_json_violations(
        "gemini",
        &provider_definition(&spec, "gemini")["parametersJsonSchema"],
        &spec.parameters,
    ));
    let strict = provider_definition(&spec, "anthropic-strict");
    let mut budget = StrictBudget::default();
    violations.extend(strict_violations(
        "anthropic-strict",
        &strict["input_schema"],
        &spec.parameters,
        &mut budget,
    ));
    assert_no_violations("shapes", violations);
    // Four optional properties at the root (`level`, `nested`, `count`,
    // `either`) and `flag` in each of `inner` and `nested`; `either` alone
    // stays a union once the null branches are gone.
    assert_eq!(
        budget,
        StrictBudget {
            optional: 6,
            unions: 1
        }
    );
    insta::assert_json_snapshot!("shapes_lowered", {
        let lowered: serde_json::Map<String, Value> = Provider::ALL
            .iter()
            .filter(|provider| **provider != Provider::Mcp)
            .map(|provider| (provider.to_string(), spec.for_provider(*provider)))
            .collect();
        lowered
    });

    // The null branch of `anyOf` becomes `nullable`, and the one branch left is
    // merged into the property.
    assert_eq!(
        gemini["parameters"]["properties"]["either"],
        json!({
            "description": "A number or a text.",
            "anyOf": [{"type": "INTEGER", "minimum": 0}, {"type": "STRING"}],
            "nullable": true,
        })
    );
    // Length bounds move into the description for OpenAI, and number formats go.
    let openai = &provider_definition(&spec, "openai-chat")["function"]["parameters"];
    assert_eq!(
        (
            &openai["properties"]["short"],
            &openai["properties"]["count"]
        ),
        (
            &json!({"type": "string", "description": "A short name. 2 to 8 characters."}),
            &json!({"type": ["integer", "null"], "minimum": 0, "description": "An optional count."}),
        )
    );
}

/// The rule checks themselves: each broken rule in a hand-made schema is reported.
#[test]
fn rule_checks_report_broken_schemas() {
    let canonical = json!({
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "integer"},
            "o": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
            "l": {"type": ["array", "null"], "items": {"type": "string"}},
            "m": {"type": ["array", "null"]},
        },
        "required": ["a"],
    });
    let openai = json!({
        "type": "object",
        "properties": {
            "a": {"type": ["string", "null"], "minLength": 1},
            "b": {"type": "integer", "format": "uint32"},
            "o": {"type": ["object", "null"], "properties": {"x": {"type": "string"}}},
            "l": {"type": ["array", "null"], "items": {"type": "string"}},
            "m": {"anyOf": [{"type": "array"}, {"type": "null"}]},
        },
        "required": ["a", "b", "b", "l", "m"],
        "additionalProperties": false,
    });
    assert_eq!(
        openai_strict_violations("t", &json!("bad name"), &json!(false), &openai, &canonical),
        [
            "t: name \"bad name\" does not match ^[a-zA-Z0-9_-]{1,64}$",
            "t: strict is false, not true",
            "t: parameters do not compile: [\"a\",\"b\",\"b\",\"l\",\"m\"] has non-unique elements",
            "t: /: `required` {\"a\", \"b\", \"l\", \"m\"} is not exactly the properties {\"a\", \"b\", \"l\", \"m\", \"o\"}",
            "t: /: required property `a` accepts null",
            "t: /: optional property `b` does not accept null",
            "t: /properties/a: keyword `minLength` is not supported in strict mode",
            "t: /properties/b: format \"uint32\" is not supported",
            "t: /properties/o: type [\"object\", \"null\"]: a nullable array or object must be `anyOf` with a null branch",
            "t: /properties/o: an object without `additionalProperties: false`",
            "t: /properties/o: `required` {} is not exactly the properties {\"x\"}",
            "t: /properties/l: type [\"array\", \"null\"]: a nullable array or object must be `anyOf` with a null branch",
            "t: /properties/m/anyOf/0: an array without `items`",
        ]
    );
    let gemini = json!({
        "type": "OBJECT",
        "additionalProperties": false,
        "properties": {
            "a": {"type": ["STRING", "null"]},
            "b": {"type": "INTEGER", "enum": [1, 2], "format": "uint32"},
            "o": {"type": "object", "const": "x", "properties": {"x": {"type": "STRING"}}, "required": ["x"], "nullable": true},
        },
        "required": ["a", "b"],
    });
    assert_eq!(
        gemini_openapi_violations("t", &gemini, &canonical),
        [
            "t: /: `additionalProperties` is rejected by Gemini",
            "t: /: `additionalProperties` is not a field of Gemini's Schema",
            "t: /: `required` {\"a\", \"b\"} is not the canonical {\"a\"}",
            "t: /: optional property `b` lacks `nullable: true`",
            "t: /properties/a: a type array",
            "t: /properties/b: enum [1,2] is not all strings",
            "t: /properties/b: format \"uint32\" (only enum and date-time)",
            "t: /properties/o: `const` is rejected by Gemini",
            "t: /properties/o: `const` is not a field of Gemini's Schema",
            "t: /properties/o: type \"object\" is not a Gemini type",
        ]
    );

    let strict = json!({
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 5, "pattern": "(?=x)"},
            "b": {"type": ["integer", "null"], "minimum": 0, "format": "uint32"},
            "o": {"type": "object", "properties": {"x": {"type": "array", "minItems": 2}}, "required": []},
        },
        "required": ["a", "b"],
        "additionalProperties": false,
    });
    let mut budget = StrictBudget::default();
    assert_eq!(
        strict_violations("t", &strict, &canonical, &mut budget),
        [
            "t: /: `required` {\"a\", \"b\"} is not the canonical {\"a\"}",
            "t: /properties/a: keyword `maxLength` is not supported in strict mode",
            "t: /properties/a: pattern \"(?=x)\" uses `(?=`",
            "t: /properties/b: keyword `minimum` is not supported in strict mode",
            "t: /properties/b: format \"uint32\" is not supported",
            "t: /properties/o: an object without `additionalProperties: false`",
            "t: /properties/o: `required` {} is not the canonical {\"x\"}",
            "t: /properties/o/properties/x: minItems 2 (only 0 or 1)",
        ]
    );
    assert_eq!(
        budget,
        StrictBudget {
            optional: 2,
            unions: 1
        }
    );

    let gemini_json = json!({
        "type": "object",
        "properties": {"a": {"type": "string", "minLength": 1, "not": {}}},
        "required": ["a"],
    });
    assert_eq!(
        gemini_json_violations("t", &gemini_json, &json!({"type": "object"})),
        [
            "t: /properties/a: keyword `minLength` is not one Gemini documents",
            "t: /properties/a: keyword `not` is not one Gemini documents",
            "t: the schema differs from the canonical one beyond the ignored keywords",
        ]
    );

    let forwarded = json!({
        "type": "object",
        "properties": {
            "n": {"type": ["integer", "null"], "format": "uint64", "default": 30},
            "l": {"type": ["array", "null"], "items": {"type": "string"}},
        },
    });
    assert_eq!(
        forwarding_violations("t", &forwarded),
        [
            "t: /properties/n: a `default`",
            "t: /properties/n: format \"uint64\"",
            "t: /properties/l: type [\"array\", \"null\"]",
        ]
    );
}

#[test]
fn a_catalog_becomes_an_enum_in_every_lowering() {
    let spec = TaskTool::new(AsyncTaskManager::default(), Arc::new(CatalogRunner)).spec();
    let names = json!(["researcher", "tester"]);
    assert_eq!(
        spec.parameters["properties"]["subagent_name"]["enum"],
        names
    );
    let pointers = [
        (
            Provider::OpenAiChat,
            "/function/parameters/properties/subagent_name/enum",
        ),
        (
            Provider::OpenAiResponses,
            "/parameters/properties/subagent_name/enum",
        ),
        (
            Provider::Anthropic,
            "/input_schema/properties/subagent_name/enum",
        ),
        (
            Provider::Gemini,
            "/parametersJsonSchema/properties/subagent_name/enum",
        ),
        (
            Provider::GeminiOpenApi,
            "/parameters/properties/subagent_name/enum",
        ),
        (Provider::Mcp, "/inputSchema/properties/subagent_name/enum"),
    ];
    for (provider, pointer) in pointers {
        let definition = spec.for_provider(provider);
        assert_eq!(definition.pointer(pointer), Some(&names), "{provider}");
    }
    assert!(spec.description.ends_with(
        "Available subagents (subagent_name):\n- researcher: Reads the code base\n- tester: Runs the \
         tests (reads messages sent with message_async_task while it runs)"
    ));
}

#[test]
fn a_spec_deserializes_without_annotations_or_with_some_hints() {
    let bare = json!({
        "name": "greet",
        "display_name": "Greet",
        "description": "Say hello.",
        "parameters": {"type": "object"},
    });
    let spec: ToolSpec = serde_json::from_value(bare.clone()).expect("annotations are optional");
    assert_eq!(
        spec,
        ToolSpec::new("greet", "Greet", "Say hello.", json!({"type": "object"}))
    );
    assert_eq!(spec.annotations, ToolAnnotations::DEFAULT);

    let mut some = bare;
    some["annotations"] = json!({"read_only": true});
    let spec: ToolSpec = serde_json::from_value(some).expect("hints are optional");
    assert_eq!(
        spec.annotations,
        ToolAnnotations::DEFAULT.with_read_only(true)
    );

    // Every tool's spec round-trips.
    for spec in specs() {
        let back: ToolSpec =
            serde_json::from_value(serde_json::to_value(&spec).expect("serializes"))
                .expect("deserializes");
        assert_eq!(back, spec);
    }
}
