//! A session as generated — lines before `initialize`, the `initialize`, a
//! body of wire lines, tool calls and cancels, then a `ping` — and the exact
//! lines it becomes.

use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::Value;

use super::calls::{Call, call, follow_up, launch};
use super::lines::{self, Text, plain_request, quoted};

/// The id of the `ping` that ends every generated session: once it is
/// answered, the session went on past everything before it.
pub(super) const FINAL_PING_ID: &str = "fuzz-final-ping";

/// One generated session.
#[derive(Debug, Clone)]
pub(super) struct Session {
    /// Lines sent before `initialize`.
    before: Vec<Text>,
    /// The `initialize` request.
    initialize: Text,
    /// Whether `notifications/initialized` follows it.
    initialized: bool,
    /// What follows.
    body: Vec<Item>,
}

/// One step of a session's body.
#[derive(Debug, Clone)]
pub(super) enum Item {
    /// A line of the wire.
    Line(Text),
    /// A tool call.
    Call(Call, CallId),
    /// `notifications/cancelled` for one of the calls sent so far.
    Cancel(Index),
}

/// The id a tool call gets.
#[derive(Debug, Clone)]
pub(super) enum CallId {
    /// One no other line of the session has.
    Unique,
    /// One drawn like any id (it may collide, or be unreadable).
    Drawn(Text),
}

impl Session {
    /// The lines to send, in order, each without its line break.
    pub(super) fn lines(&self) -> Vec<Text> {
        let mut lines = self.before.clone();
        lines.push(self.initialize.clone());
        if self.initialized {
            lines.push(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_vec());
        }
        let mut calls: Vec<Text> = Vec::new();
        for item in &self.body {
            match item {
                Item::Line(line) => lines.push(line.clone()),
                Item::Call(call, id) => {
                    let id = match id {
                        CallId::Unique if calls.len().is_multiple_of(2) => {
                            (1_000 + calls.len()).to_string().into_bytes()
                        }
                        CallId::Unique => quoted(&format!("call-{}", calls.len())),
                        CallId::Drawn(id) => id.clone(),
                    };
                    lines.push(call.line(&id));
                    calls.push(id);
                }
                Item::Cancel(which) => {
                    if calls.is_empty() {
                        continue;
                    }
                    let id = &calls[which.index(calls.len())];
                    let mut cancel = br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"#.to_vec();
                    cancel.extend_from_slice(id);
                    cancel.extend_from_slice(br#","reason":"fuzz"}}"#);
                    lines.push(cancel);
                }
            }
        }
        lines.push(plain_request(&quoted(FINAL_PING_ID), "ping", None));
        lines
    }
}

/// Sessions over `tools` (name and input schema of each served tool), with
/// up to `body` steps after `initialize`.
pub(super) fn session(tools: &[(String, Value)], body: usize) -> BoxedStrategy<Session> {
    let initialize = prop_oneof![
        9 => (
            select(&["0", "\"init\"", "1", "-1"][..]),
            select(lines::VERSIONS),
        )
            .prop_map(|(id, version)| {
                let params = format!(
                    r#"{{"protocolVersion":{},"capabilities":{{}},"clientInfo":{{"name":"fuzz","version":"0"}}}}"#,
                    String::from_utf8_lossy(&quoted(version))
                );
                plain_request(id.as_bytes(), "initialize", Some(params.as_bytes()))
            }),
        1 => (lines::id(), lines::initialize_params()).prop_map(|(id, params)| plain_request(&id, "initialize", Some(&params))),
    ];
    let call_id = prop_oneof![6 => Just(CallId::Unique), 1 => lines::id().prop_map(CallId::Drawn)];
    let item = prop_oneof![
        5 => (call(tools), call_id).prop_map(|(call, id)| Item::Call(call, id)),
        1 => launch().prop_map(|call| Item::Call(call, CallId::Unique)),
        1 => follow_up(tools).prop_map(|call| Item::Call(call, CallId::Unique)),
        4 => lines::line().prop_map(Item::Line),
        1 => any::<Index>().prop_map(Item::Cancel),
    ];
    (
        prop::collection::vec(lines::before_initialize(), 0..3),
        initialize,
        proptest::bool::weighted(0.85),
        prop::collection::vec(item, 0..=body),
    )
        .prop_map(|(before, initialize, initialized, body)| Session {
            before,
            initialize,
            initialized,
            body,
        })
        .boxed()
}
