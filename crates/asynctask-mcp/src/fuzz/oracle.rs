//! What each line of a session must get, judged from its bytes alone: the
//! JSON-RPC 2.0 rules, written here apart from the server's `decode`.
//!
//! How a line is *read* is the wire's, unit-tested in `wire.rs`: bytes that
//! are not UTF-8 and lone surrogate escapes are mended (`repair`), the id of a
//! line that is not JSON is the one its top-level members show (`scan_id`),
//! and a line past [`MAX_LINE_BYTES`] is judged by its head
//! (`refuse_too_long`). What a line then *gets* is decided here:
//!
//! | the line | its answers |
//! |---|---|
//! | blank | none |
//! | not JSON (after mending) | one, with the id it shows, else none |
//! | JSON, not an object (a batch, a scalar) | one, with no id |
//! | an object with a string `method` and no `id` (a notification) | none |
//! | an object with a string `method` and an `id` (a request) | one, with that id when it is readable (a string, or an integer as rmcp reads one), else none |
//! | a well-formed response (`jsonrpc: "2.0"`, an `id`, one of `result` and `error`, no `method`) | none |
//! | anything else carrying `result` or `error` | none or one |
//! | any other object | one, with its readable id or none |
//!
//! An answer with no id writes `"id": null` (JSON-RPC 2.0) or leaves the
//! member out (MCP since 2025-11-25, as rmcp does): both are accepted.
//!
//! A `notifications/cancelled` naming a request lets that request go
//! unanswered (rmcp drops the answer of a cancelled request). A well-formed
//! `tools/call` of a served tool, once the session started, must be answered
//! with a tool result (`isError` says whether the tool failed), never a
//! JSON-RPC error; a well-formed `ping` with `{}`.

use std::collections::HashMap;

use rmcp::model::RequestId;
use serde_json::{Map, Value};

use crate::wire::{MAX_LINE_BYTES, refuse_too_long, repair, scan_id};

/// The id an answer carries: `None` for none (`null`, or no member).
pub(super) type Key = Option<RequestId>;

/// How much of a line past the bound the server keeps to read its id from.
const KEPT_HEAD_BYTES: usize = 64 * 1024;

/// What one line must get.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Expect {
    /// No answer at all (a notification, a response, a blank line).
    Nothing,
    /// Exactly one answer, with this id.
    Answer {
        /// The id the answer carries.
        id: Key,
        /// What else is known of the answer.
        kind: Kind,
    },
    /// At most one answer, with this id (a message both request and response).
    Maybe(Key),
    /// No answer; the request with this id may go unanswered.
    Cancels(Key),
}

/// What a request is, when its answer's shape is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Kind {
    /// Nothing more is known.
    Any,
    /// A well-formed `initialize`: the session starts with it.
    Initialize,
    /// A well-formed `ping`: answered `{}`.
    Ping,
    /// A well-formed `tools/call` of this served tool: a tool result, once
    /// the session started.
    ToolCall(String),
}

/// What one line must get. `tools` are the names the server serves.
pub(super) fn expect(line: &[u8], tools: &[String]) -> Expect {
    // The wire takes a `\r` before the line break as part of the break.
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > MAX_LINE_BYTES {
        let head = &line[..KEPT_HEAD_BYTES];
        return match refuse_too_long(head, line.len()) {
            Some(answer) => Expect::Answer {
                id: answer_key(&serde_json::to_value(&answer).unwrap_or_default()),
                kind: Kind::Any,
            },
            None => Expect::Nothing,
        };
    }
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Expect::Nothing;
    }
    let mended = repair(line);
    let text = mended.as_deref().unwrap_or(line);
    match serde_json::from_slice::<Value>(text) {
        Err(_) => Expect::Answer {
            id: scan_id(text),
            kind: Kind::Any,
        },
        Ok(Value::Object(object)) => {
            let mut judged = judge(&object, tools);
            // Typed readers refuse a key twice; `Value` keeps the last one.
            if let Expect::Answer { kind, .. } = &mut judged
                && repeats_a_key(text)
            {
                *kind = Kind::Any;
            }
            judged
        }
        Ok(_) => Expect::Answer {
            id: None,
            kind: Kind::Any,
        },
    }
}

/// The id of an answer the server wrote.
pub(super) fn answer_key(answer: &Value) -> Key {
    answer.get("id").and_then(readable)
}

/// A JSON-RPC id as rmcp reads one: a string, or an integer (`1.0` and `1e2`
/// included).
fn readable(id: &Value) -> Key {
    serde_json::from_value::<RequestId>(id.clone()).ok()
}

fn judge(object: &Map<String, Value>, tools: &[String]) -> Expect {
    let method = object.get("method").and_then(Value::as_str);
    let id = object.get("id");
    let answers = object.contains_key("result") || object.contains_key("error");
    match (method, id) {
        (Some("notifications/cancelled"), None) => {
            match object
                .get("params")
                .and_then(|params| params.get("requestId"))
            {
                Some(id) => Expect::Cancels(readable(id)),
                None => Expect::Nothing,
            }
        }
        (Some(_), None) => Expect::Nothing,
        (Some(method), Some(id)) if !answers => Expect::Answer {
            id: readable(id),
            kind: kind(object, method, tools),
        },
        (Some(_), Some(id)) => Expect::Maybe(readable(id)),
        (None, id) if answers => {
            let well_formed = object.get("jsonrpc") == Some(&Value::from("2.0"))
                && id.is_some_and(|id| id.is_null() || readable(id).is_some())
                && (object.contains_key("result") != object.contains_key("error"));
            if well_formed {
                Expect::Nothing
            } else {
                Expect::Maybe(id.and_then(readable))
            }
        }
        (None, id) => Expect::Answer {
            id: id.and_then(readable),
            kind: Kind::Any,
        },
    }
}

/// What a request with a readable id is, when it is well-formed enough that
/// its answer's shape is known.
fn kind(object: &Map<String, Value>, method: &str, tools: &[String]) -> Kind {
    let envelope = object.get("jsonrpc") == Some(&Value::from("2.0"))
        && object.get("id").and_then(readable).is_some()
        && only(object, &["jsonrpc", "id", "method", "params"]);
    if !envelope {
        return Kind::Any;
    }
    let params = object.get("params");
    match method {
        "ping" if params.is_none_or(|params| params == &Value::Object(Map::new())) => Kind::Ping,
        "initialize" if params.is_some_and(initialize_params) => Kind::Initialize,
        "tools/call" => match params.and_then(|params| call_params(params, tools)) {
            Some(tool) => Kind::ToolCall(tool),
            None => Kind::Any,
        },
        _ => Kind::Any,
    }
}

fn initialize_params(params: &Value) -> bool {
    let Some(params) = params.as_object() else {
        return false;
    };
    let client = params.get("clientInfo");
    only(params, &["protocolVersion", "capabilities", "clientInfo"])
        && params.get("protocolVersion").is_some_and(Value::is_string)
        && params.get("capabilities") == Some(&Value::Object(Map::new()))
        && client
            .and_then(|c| c.get("name"))
            .is_some_and(Value::is_string)
        && client
            .and_then(|c| c.get("version"))
            .is_some_and(Value::is_string)
        && client
            .and_then(Value::as_object)
            .is_some_and(|c| only(c, &["name", "version"]))
}

/// The served tool a well-formed `tools/call` calls.
fn call_params(params: &Value, tools: &[String]) -> Option<String> {
    let params = params.as_object()?;
    let name = params.get("name").and_then(Value::as_str)?;
    let served = tools.iter().any(|tool| tool == name);
    let arguments = params
        .get("arguments")
        .is_none_or(|arguments| arguments.is_null() || arguments.is_object());
    let meta = params.get("_meta").is_none_or(|meta| {
        meta.as_object().is_some_and(|meta| {
            only(meta, &["progressToken"])
                && meta
                    .get("progressToken")
                    .is_none_or(|token| readable(token).is_some())
        })
    });
    (served && arguments && meta && only(params, &["name", "arguments", "_meta"]))
        .then(|| name.to_owned())
}

/// Whether some object in `text` (JSON) has a key twice.
fn repeats_a_key(text: &[u8]) -> bool {
    use serde::de::{Deserialize, Deserializer, Error, MapAccess, SeqAccess, Visitor};

    /// Any JSON value, as long as no object in it repeats a key.
    struct Unique;

    impl<'de> Deserialize<'de> for Unique {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer.deserialize_any(Unique)
        }
    }

    impl<'de> Visitor<'de> for Unique {
        type Value = Unique;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON without repeated keys")
        }

        fn visit_bool<E>(self, _: bool) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_str<E>(self, _: &str) -> Result<Unique, E> {
            Ok(Unique)
        }
        fn visit_unit<E>(self) -> Result<Unique, E> {
            Ok(Unique)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Unique, A::Error> {
            while items.next_element::<Unique>()?.is_some() {}
            Ok(Unique)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Unique, A::Error> {
            let mut keys = std::collections::HashSet::new();
            while let Some(key) = members.next_key::<String>()? {
                if !keys.insert(key) {
                    return Err(A::Error::custom("a key twice"));
                }
                members.next_value::<Unique>()?;
            }
            Ok(Unique)
        }
    }

    serde_json::from_slice::<Unique>(text).is_err()
}

/// Whether `object` has no member but `keys`.
fn only(object: &Map<String, Value>, keys: &[&str]) -> bool {
    object.keys().all(|key| keys.contains(&key.as_str()))
}

/// What a whole session must get: for each id, how many answers it may have,
/// and which answers must have a known shape.
#[derive(Debug, Default)]
pub(super) struct Expected {
    /// For each id: at least and at most how many answers carry it.
    pub(super) bounds: HashMap<Key, (usize, usize)>,
    /// For each line, the id of the answer it asks for (`None`: no answer).
    pub(super) asks: Vec<Option<Key>>,
    /// For each line, whether its answer must come (not a maybe).
    pub(super) firm: Vec<bool>,
    /// Ids whose one answer must be a tool result, with the tool called.
    pub(super) tool_results: HashMap<Key, String>,
    /// Ids whose one answer must be `{}`.
    pub(super) pings: Vec<Key>,
}

impl Expected {
    /// How many answers with each id must have come once the lines before
    /// line `n` are all answered.
    pub(super) fn owed_before(&self, n: usize) -> HashMap<Key, usize> {
        let mut owed: HashMap<Key, usize> = HashMap::new();
        let lines = self.asks.iter().zip(&self.firm).take(n);
        for (id, _) in
            lines.filter_map(|(asks, firm)| Some((asks.as_ref()?, *firm)).filter(|(_, firm)| *firm))
        {
            *owed.entry(id.clone()).or_default() += 1;
        }
        for (id, count) in &mut owed {
            // A cancelled request may go unanswered.
            *count = (*count).min(self.bounds.get(id).map_or(0, |bounds| bounds.0));
        }
        owed
    }

    /// What the lines of a session must get, in order.
    pub(super) fn of(lines: &[Vec<u8>], tools: &[String]) -> Self {
        let mut expected = Expected::default();
        let mut cancelled = Vec::new();
        let mut started = false;
        let mut shaped = Vec::new();
        for line in lines {
            let judged = expect(line, tools);
            expected.firm.push(matches!(judged, Expect::Answer { .. }));
            let asks = match judged {
                Expect::Nothing => None,
                Expect::Cancels(id) => {
                    cancelled.push(id);
                    None
                }
                Expect::Answer { id, kind } => {
                    let bounds = expected.bounds.entry(id.clone()).or_default();
                    bounds.0 += 1;
                    bounds.1 += 1;
                    match kind {
                        Kind::Initialize => started = true,
                        Kind::ToolCall(_) if !started => {}
                        Kind::ToolCall(_) | Kind::Ping => shaped.push((id.clone(), kind)),
                        Kind::Any => {}
                    }
                    Some(id)
                }
                Expect::Maybe(id) => {
                    expected.bounds.entry(id.clone()).or_default().1 += 1;
                    Some(id)
                }
            };
            expected.asks.push(asks);
        }
        for id in &cancelled {
            if let Some(bounds) = expected.bounds.get_mut(id) {
                bounds.0 = 0;
            }
        }
        // A shape is known only for an id no other line shares, that no
        // cancel names.
        for (id, kind) in shaped {
            let alone = expected.bounds.get(&id) == Some(&(1, 1));
            if alone && id.is_some() {
                match kind {
                    Kind::ToolCall(tool) => {
                        expected.tool_results.insert(id, tool);
                    }
                    Kind::Ping => expected.pings.push(id),
                    Kind::Any | Kind::Initialize => {}
                }
            }
        }
        expected
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn tools() -> Vec<String> {
        vec!["check_async_tasks".to_owned()]
    }

    fn answer(id: Key, kind: Kind) -> Expect {
        Expect::Answer { id, kind }
    }

    fn number(n: i64) -> Key {
        Some(RequestId::Number(n))
    }

    #[test]
    fn each_kind_of_line_gets_what_json_rpc_says() {
        let cases: &[(&[u8], Expect)] = &[
            (b"", Expect::Nothing),
            (b" \t\r", Expect::Nothing),
            (b"not json", answer(None, Kind::Any)),
            (br#"{"jsonrpc":"2.0","id":7,"method":"x",}"#, answer(number(7), Kind::Any)),
            (br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#, answer(None, Kind::Any)),
            (b"42", answer(None, Kind::Any)),
            (br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, Expect::Nothing),
            (br#"{"jsonrpc":"2.0","id":1.0,"method":"ping"}"#, answer(number(1), Kind::Ping)),
            (br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, answer(None, Kind::Any)),
            (br#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#, answer(Some(RequestId::String("a".into())), Kind::Any)),
            (br#"{"jsonrpc":"2.0","id":3,"result":{}}"#, Expect::Nothing),
            (br#"{"jsonrpc":"2.0","id":3,"method":"ping","result":{}}"#, Expect::Maybe(number(3))),
            (br#"{"id":3,"result":{}}"#, Expect::Maybe(number(3))),
            (br#"{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}"#, answer(number(2), Kind::Any)),
            (
                br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"f","version":"0"},"protocolVersion":"a"}}"#,
                answer(number(0), Kind::Any),
            ),
            (b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"\\ud83d\"}", Expect::Nothing),
            (b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"\x01\"}", answer(None, Kind::Any)),
            (
                br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"check_async_tasks","arguments":{"x":1}}}"#,
                answer(number(9), Kind::ToolCall("check_async_tasks".to_owned())),
            ),
            (
                br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"nope"}}"#,
                answer(number(9), Kind::Any),
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(&expect(line, &tools()), expected, "{}", line.escape_ascii());
        }
    }

    #[test]
    fn a_cancel_makes_its_request_optional_and_shared_ids_have_no_shape() {
        let lines: Vec<Vec<u8>> = [
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"f","version":"0"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"check_async_tasks"}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"check_async_tasks"}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
        ]
        .iter()
        .map(|line| line.as_bytes().to_vec())
        .collect();
        let expected = Expected::of(&lines, &tools());
        assert_eq!(expected.bounds[&number(2)], (0, 1));
        assert_eq!(expected.bounds[&number(3)], (2, 2));
        assert_eq!(
            expected.tool_results,
            HashMap::from([(number(1), "check_async_tasks".to_owned())])
        );
        assert!(expected.pings.is_empty());
        assert_eq!(expected.asks[3], None);
    }
}
