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

/// How a stall is written: a `ping` whose id is `fuzz-stall-<n>-<seconds>s`
/// tells the client to read nothing for that long once it sent it (in the
/// file, so that a replay stalls the same way; the real server just answers a
/// ping).
pub(super) const STALL_PREFIX: &[u8] = br#"{"jsonrpc":"2.0","id":"fuzz-stall-"#;

/// The longest stall, in seconds: a stall delays answers past their bound
/// no more than this.
pub(super) const MAX_STALL_SECONDS: u64 = 10;

/// Many requests in a row: past the transport's window of unwritten answers
/// (64) and, with waits, of requests in progress (256).
#[derive(Debug, Clone)]
pub(super) enum Flood {
    /// `tools/list`: long answers.
    List,
    /// Lines that are not JSON: the transport's own answers.
    Refused,
    /// `wait_async_tasks` for a second: requests that stay in progress.
    Wait,
    /// `ping`.
    Ping,
}

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
    /// A flood, before the body step it names; after a stall of the
    /// client's when `true`.
    flood: Option<(Index, Flood, usize, bool)>,
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
    /// The client stops reading for this many seconds.
    Stall(u64),
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
        let flood_at = self
            .flood
            .as_ref()
            .map(|(at, _, _, _)| at.index(self.body.len() + 1));
        for (n, item) in self.body.iter().enumerate() {
            if flood_at == Some(n) {
                self.push_flood(&mut lines);
            }
            match item {
                Item::Stall(seconds) => lines.push(stall_line(&n.to_string(), *seconds)),
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
        if flood_at == Some(self.body.len()) {
            self.push_flood(&mut lines);
        }
        lines.push(plain_request(&quoted(FINAL_PING_ID), "ping", None));
        lines
    }

    fn push_flood(&self, lines: &mut Vec<Text>) {
        if let Some((_, flood, count, stalled)) = &self.flood {
            if *stalled {
                lines.push(stall_line("flood", MAX_STALL_SECONDS / 2));
            }
            lines.extend((0..*count).map(|i| flooded(flood, i)));
        }
    }
}

/// A stall of `seconds`, told apart by `name`.
fn stall_line(name: &str, seconds: u64) -> Text {
    let mut stall = STALL_PREFIX.to_vec();
    stall.extend_from_slice(format!(r#"{name}-{seconds}s","method":"ping"}}"#).as_bytes());
    stall
}

/// Line `i` of a flood.
fn flooded(flood: &Flood, i: usize) -> Text {
    let id = quoted(&format!("flood-{i}"));
    match flood {
        Flood::List => plain_request(&id, "tools/list", None),
        Flood::Refused => format!("flood {i}").into_bytes(),
        Flood::Wait => plain_request(
            &id,
            "tools/call",
            Some(br#"{"name":"wait_async_tasks","arguments":{"timeout_seconds":1}}"#),
        ),
        Flood::Ping => plain_request(&id, "ping", None),
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
        2 => launch().prop_map(|call| Item::Call(call, CallId::Unique)),
        2 => follow_up(tools).prop_map(|call| Item::Call(call, CallId::Unique)),
        4 => lines::line().prop_map(Item::Line),
        1 => any::<Index>().prop_map(Item::Cancel),
        1 => (1..=MAX_STALL_SECONDS).prop_map(Item::Stall),
    ];
    let flood = prop::option::weighted(
        0.03,
        (
            any::<Index>(),
            prop_oneof![
                Just(Flood::List),
                Just(Flood::Refused),
                Just(Flood::Wait),
                Just(Flood::Ping)
            ],
            // Past 64 unwritten answers, or past 256 requests in progress.
            prop_oneof![70usize..130, 260usize..300],
            any::<bool>(),
        ),
    );
    (
        prop::collection::vec(lines::before_initialize(), 0..3),
        initialize,
        proptest::bool::weighted(0.85),
        prop::collection::vec(item, 0..=body),
        flood,
    )
        .prop_map(|(before, initialize, initialized, body, flood)| Session {
            before,
            initialize,
            initialized,
            body,
            flood,
        })
        .boxed()
}
