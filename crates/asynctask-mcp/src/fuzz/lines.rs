//! Generators of lines as a careless or hostile client writes them: requests,
//! notifications and responses with their envelope bent (members missing,
//! twice, reordered; a wrong `jsonrpc`; ids of every JSON type), batches,
//! scalars, arbitrary bytes, strings that are not UTF-8 or hold lone
//! surrogates, numbers out of range, nesting hundreds deep, huge values, lines
//! cut short or with bytes after their end.
//!
//! Everything is raw JSON text (`Vec<u8>`), so that what a JSON library
//! would refuse to write can be written.

use proptest::prelude::*;
use proptest::sample::{Index, select};

use crate::wire::MAX_LINE_BYTES;

/// Raw JSON text (or what is meant to look like it).
pub(super) type Text = Vec<u8>;

/// The methods a client may call, and a few it may not.
const METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "completion/complete",
    "logging/setLevel",
    "server/discover",
    "tasks/get",
    "tasks/list",
    "tasks/cancel",
    "tasks/result",
    "subscriptions/listen",
    "resources/unsubscribe",
    "resources/directory/read",
    "skills/list",
    "skills/get",
    "notifications/initialized",
    "no/such/method",
    "",
    "rpc.discover",
    "Tools/List",
];

/// Notifications a client sends (and some it should not).
const NOTIFICATIONS: &[&str] = &[
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "notifications/asynctask/delivered",
    "notifications/asynctask/oversized",
    "notifications/no-such",
    "ping",
    "tools/call",
];

/// Protocol versions an `initialize` may ask for, known or not.
pub(super) const VERSIONS: &[&str] = &[
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
    "2025-11-25",
    "2026-07-28",
    "1999-01-01",
    "",
];

/// `"text"`, as JSON.
pub(super) fn quoted(text: &str) -> Text {
    serde_json::to_vec(text).unwrap_or_default()
}

/// An object of `members` (keys and values as raw text).
pub(super) fn object(members: &[(Text, Text)]) -> Text {
    let mut out = b"{".to_vec();
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(key);
        out.push(b':');
        out.extend_from_slice(value);
    }
    out.push(b'}');
    out
}

fn array(items: &[Text]) -> Text {
    let mut out = b"[".to_vec();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.push(b']');
    out
}

fn texts(choices: &'static [&'static str]) -> BoxedStrategy<Text> {
    select(choices)
        .prop_map(|text| text.as_bytes().to_vec())
        .boxed()
}

/// Pieces of a JSON string's inside: plain and escaped characters, lone and
/// paired surrogate escapes, bytes that are not UTF-8 (stray, overlong,
/// truncated, an encoded surrogate), control bytes JSON refuses raw.
const STRING_PIECES: &[&[u8]] = &[
    b"a",
    b"task",
    b" ",
    "\u{e9}".as_bytes(),
    "\u{65e5}\u{672c}".as_bytes(),
    "\u{1f980}".as_bytes(),
    "\u{2028}".as_bytes(),
    "\u{202e}".as_bytes(),
    "\u{3000}".as_bytes(),
    b"\\n",
    b"\\\"",
    b"\\\\",
    b"\\/",
    b"\\u00e9",
    b"\\u0000",
    b"\\ud83d",
    b"\\ude00",
    b"\\ud83d\\ude00",
    b"\\\\ud83d",
    b"\\uDBFF\\uDFFF",
    b"\\uD800\\u0041",
    b"\\uZZZZ",
    b"\\x",
    b"\x80",
    b"\xff",
    b"\xc0\xaf",
    b"\xe2\x82",
    b"\xf0\x9f\x98",
    b"\xed\xa0\xbd",
    b"\xef\xbb\xbf",
    b"\x01",
    b"\t",
];

/// A JSON string as raw text, often one a strict parser refuses.
pub(super) fn string() -> BoxedStrategy<Text> {
    prop_oneof![
        3 => "[a-z0-9 _/-]{0,12}".prop_map(|text| quoted(&text)),
        1 => any::<String>().prop_map(|text| quoted(&text)),
        4 => prop::collection::vec(select(STRING_PIECES), 0..6).prop_map(|pieces| {
            let mut out = b"\"".to_vec();
            pieces.iter().for_each(|piece| out.extend_from_slice(piece));
            out.push(b'"');
            out
        }),
    ]
    .boxed()
}

/// A JSON number as raw text: ordinary, at the edges of `i64`, `u64` and
/// `f64`, beyond them, or not quite a number.
pub(super) fn number() -> BoxedStrategy<Text> {
    prop_oneof![
        3 => (-3i64..60).prop_map(|n| n.to_string().into_bytes()),
        2 => any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        1 => any::<f64>().prop_map(|f| serde_json::to_vec(&f).unwrap_or_default()),
        2 => texts(&[
            "9223372036854775807",
            "-9223372036854775808",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775809",
            "1e400",
            "-1e400",
            "1.7976931348623157e308",
            "4.9e-324",
            "1e-400",
            "-0",
            "1.0",
            "1.5",
            "1e3",
            "1E+2",
            "9007199254740993.0",
            "00",
            "+1",
            ".5",
            "1.",
            "NaN",
            "Infinity",
        ]),
    ]
    .boxed()
}

/// A request id as raw text: small integers (so that ids collide), strings,
/// integers written as floats, ids out of range, and ids of every other JSON
/// type.
pub(super) fn id() -> BoxedStrategy<Text> {
    prop_oneof![
        5 => (0i64..8).prop_map(|n| n.to_string().into_bytes()),
        3 => texts(&["\"a\"", "\"\"", "\"7\"", "\"\u{65e5}\u{672c}\"", "\"x\\u0000y\"", "\"\\ud83d\"", "\"\\ud83d\\ude00\""]),
        1 => Just(b"\"\xff\"".to_vec()),
        2 => number(),
        1 => string(),
        2 => texts(&["null", "true", "false", "[]", "[1]", "{}", "{\"id\":1}"]),
    ]
    .boxed()
}

/// Any JSON value as raw text, nested a few levels, with odd strings and
/// numbers and sometimes a key twice.
pub(super) fn json() -> BoxedStrategy<Text> {
    let leaf = prop_oneof![
        3 => string(),
        3 => number(),
        2 => texts(&["true", "false", "null"]),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(|items| array(&items)),
            prop::collection::vec((key(), inner), 0..5).prop_map(|members| object(&members)),
        ]
    })
    .boxed()
}

fn key() -> BoxedStrategy<Text> {
    prop_oneof![
        4 => texts(&[
            "\"name\"", "\"arguments\"", "\"id\"", "\"method\"", "\"task_id\"", "\"_meta\"",
            "\"progressToken\"", "\"x\"", "\"\"",
        ]),
        1 => string(),
    ]
    .boxed()
}

/// An envelope: `members` (each present with some chance), sometimes in
/// another order, sometimes with one of them twice.
fn envelope(members: Vec<(&'static str, u32, BoxedStrategy<Text>)>) -> BoxedStrategy<Text> {
    let present: Vec<BoxedStrategy<Option<(Text, Text)>>> = members
        .into_iter()
        .map(|(key, percent, value)| {
            let key = quoted(key);
            let probability = f64::from(percent) / 100.0;
            prop::option::weighted(probability, value)
                .prop_map(move |value| value.map(|value| (key.clone(), value)))
                .boxed()
        })
        .collect();
    let twice = prop::option::weighted(0.08, (any::<Index>(), id()));
    let order = prop::option::weighted(0.15, any::<u64>());
    (present, twice, order)
        .prop_map(|(present, twice, order)| {
            let mut members: Vec<(Text, Text)> = present.into_iter().flatten().collect();
            if let (Some((at, value)), false) = (twice, members.is_empty()) {
                let key = members[at.index(members.len())].0.clone();
                members.push((key, value));
            }
            if let Some(seed) = order {
                shuffle(&mut members, seed);
            }
            object(&members)
        })
        .boxed()
}

/// A small deterministic shuffle (an LCG drives Fisher–Yates).
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = usize::try_from(seed >> 33).unwrap_or(0) % (i + 1);
        items.swap(i, j);
    }
}

fn jsonrpc() -> BoxedStrategy<Text> {
    prop_oneof![
        20 => Just(b"\"2.0\"".to_vec()),
        1 => texts(&["\"1.0\"", "2.0", "\"2\"", "null", "\"\"", "\"2.0 \""]),
    ]
    .boxed()
}

fn method() -> BoxedStrategy<Text> {
    prop_oneof![
        12 => select(METHODS).prop_map(quoted),
        1 => string(),
        1 => texts(&["5", "null", "[]", "{}", "true"]),
    ]
    .boxed()
}

/// `initialize` parameters, right or not.
pub(super) fn initialize_params() -> BoxedStrategy<Text> {
    let client = prop_oneof![
        4 => Just(b"{\"name\":\"fuzz\",\"version\":\"0\"}".to_vec()),
        1 => json(),
    ];
    let capabilities = prop_oneof![4 => Just(b"{}".to_vec()), 1 => json()];
    envelope(vec![
        (
            "protocolVersion",
            95,
            prop_oneof![6 => select(VERSIONS).prop_map(quoted), 1 => json()].boxed(),
        ),
        ("capabilities", 95, capabilities.boxed()),
        ("clientInfo", 95, client.boxed()),
    ])
}

fn params() -> BoxedStrategy<Text> {
    prop_oneof![
        3 => Just(b"{}".to_vec()),
        4 => json(),
        1 => initialize_params(),
        2 => envelope(vec![
            ("name", 90, prop_oneof![select(&["check_async_tasks", "task", "wait_async_tasks", "end_async_task", "message_async_task", "answer_async_task", "todo_pause"][..]).prop_map(quoted), string()].boxed()),
            ("arguments", 80, json()),
            ("_meta", 20, envelope(vec![("progressToken", 80, id())])),
        ]),
    ]
    .boxed()
}

/// A request, its envelope bent now and then.
pub(super) fn request() -> BoxedStrategy<Text> {
    envelope(vec![
        ("jsonrpc", 95, jsonrpc()),
        ("id", 95, id()),
        ("method", 97, method()),
        ("params", 70, params()),
    ])
}

/// A request as a client writes it: `{"jsonrpc":"2.0","id":…,"method":…}`.
pub(super) fn plain_request(id: &[u8], method: &str, params: Option<&[u8]>) -> Text {
    let mut members = vec![
        (quoted("jsonrpc"), quoted("2.0")),
        (quoted("id"), id.to_vec()),
        (quoted("method"), quoted(method)),
    ];
    if let Some(params) = params {
        members.push((quoted("params"), params.to_vec()));
    }
    object(&members)
}

/// A notification (no `id`), often one the server knows.
pub(super) fn notification() -> BoxedStrategy<Text> {
    let params = prop_oneof![
        3 => envelope(vec![("requestId", 90, id()), ("reason", 50, string())]),
        2 => envelope(vec![("progressToken", 90, id()), ("progress", 90, number()), ("total", 30, number())]),
        1 => envelope(vec![("written", 90, number())]),
        1 => envelope(vec![("id", 90, id()), ("bytes", 90, number())]),
        2 => json(),
    ];
    envelope(vec![
        ("jsonrpc", 95, jsonrpc()),
        (
            "method",
            97,
            prop_oneof![8 => select(NOTIFICATIONS).prop_map(quoted), 1 => method()].boxed(),
        ),
        ("params", 70, params.boxed()),
    ])
}

/// A response or an error, as if the server had asked something.
pub(super) fn response() -> BoxedStrategy<Text> {
    let error = envelope(vec![
        ("code", 95, number()),
        ("message", 90, string()),
        ("data", 30, json()),
    ]);
    envelope(vec![
        ("jsonrpc", 95, jsonrpc()),
        ("id", 95, id()),
        ("result", 60, json()),
        ("error", 45, error),
    ])
}

/// A batch: an array of messages (MCP uses none).
fn batch() -> BoxedStrategy<Text> {
    prop::collection::vec(prop_oneof![request(), notification(), response()], 0..4)
        .prop_map(|items| array(&items))
        .boxed()
}

/// Bytes, any of them but the line break.
fn bytes() -> BoxedStrategy<Text> {
    let byte = prop_oneof![
        2 => any::<u8>(),
        1 => select(&b"{}[]\":,\\u0123456789abcdefnulltrue "[..]),
    ];
    prop::collection::vec(byte, 0..80)
        .prop_map(|mut bytes| {
            bytes
                .iter_mut()
                .filter(|b| **b == b'\n')
                .for_each(|b| *b = b' ');
            bytes
        })
        .boxed()
}

/// How a level of nesting opens.
const OPENERS: &[&[u8]] = &[b"[", b"{\"a\":", b"{\"a\":[{\"b\":"];

/// What a huge string is made of.
const FILLS: &[&[u8]] = &[
    b"x",
    "\u{e9}".as_bytes(),
    b"\\u00e9",
    "\u{1f980}".as_bytes(),
    b"\\\\",
    b"\\ud83d",
];

/// A request nested hundreds deep: in its params, its id, or as the line.
fn deep() -> BoxedStrategy<Text> {
    let depth = prop_oneof![
        4 => 100usize..300,
        2 => 124usize..132,
        1 => select(&[1_000usize, 20_000][..]),
    ];
    let opener = select(OPENERS);
    (depth, opener, 0..3u8, any::<bool>(), id())
        .prop_map(|(depth, opener, place, closed, id)| {
            let mut nested = opener.repeat(depth);
            nested.extend_from_slice(b"1");
            if closed {
                for _ in 0..depth {
                    let open = opener.iter().filter(|b| matches!(b, b'[' | b'{')).rev();
                    for b in open {
                        nested.push(if *b == b'[' { b']' } else { b'}' });
                    }
                }
            }
            match place {
                0 => plain_request(&id, "tools/call", Some(&nested)),
                1 => plain_request(&nested, "ping", None),
                _ => nested,
            }
        })
        .boxed()
}

/// A request holding one huge value — a string, an array, an object of one
/// key many times —; rarely, a line past [`MAX_LINE_BYTES`].
fn huge() -> BoxedStrategy<Text> {
    let fill = select(FILLS);
    let size = prop_oneof![
        20 => Just(4usize << 10),
        15 => Just(64 << 10),
        5 => Just(1 << 20),
        1 => Just(MAX_LINE_BYTES + 1),
    ];
    (fill, size, id(), 0..4u8, any::<bool>())
        .prop_map(|(fill, size, id, shape, notify)| {
            let oversized = size > MAX_LINE_BYTES;
            let value = match shape {
                2 if !oversized => [&b"["[..], &b"1,".repeat(size / 2), b"1]"].concat(),
                3 if !oversized => [&b"{"[..], &b"\"k\":0,".repeat(size / 6), b"\"k\":0}"].concat(),
                _ => [&b"\""[..], &fill.repeat(size / fill.len()), b"\""].concat(),
            };
            let params = match shape {
                0 => object(&[
                    (quoted("name"), quoted("check_async_tasks")),
                    (quoted("arguments"), object(&[(quoted("task_id"), value)])),
                ]),
                _ => object(&[(quoted("x"), value)]),
            };
            if notify {
                object(&[
                    (quoted("jsonrpc"), quoted("2.0")),
                    (quoted("method"), quoted("notifications/progress")),
                    (quoted("params"), params),
                ])
            } else {
                plain_request(&id, "tools/call", Some(&params))
            }
        })
        .boxed()
}

/// A message spoiled: cut short, with bytes after it, a byte-order mark or
/// spaces before it, a `\r` after it, or a byte put in or changed.
fn damaged() -> BoxedStrategy<Text> {
    let message = prop_oneof![3 => request(), 1 => notification(), 1 => response()];
    (message, 0..7u8, any::<Index>(), any::<u8>())
        .prop_map(|(mut line, how, at, byte)| {
            let byte = if byte == b'\n' { b' ' } else { byte };
            let at = at.index(line.len().max(1));
            match how {
                0 => line.truncate(at),
                1 => line.extend_from_slice([&b"x"[..], b"}", b",", b" {}", b"\0", b"]"][at % 6]),
                2 => line = [&b"\xEF\xBB\xBF"[..], &line].concat(),
                3 => line = [&b" \t "[..], &line].concat(),
                4 => line.push(b'\r'),
                5 => line.insert(at.min(line.len()), byte),
                _ => {
                    if let Some(slot) = line.get_mut(at) {
                        *slot = byte;
                    }
                }
            }
            line
        })
        .boxed()
}

/// Any line of the wire.
pub(super) fn line() -> BoxedStrategy<Text> {
    prop_oneof![
        8 => request(),
        4 => notification(),
        2 => response(),
        1 => batch(),
        1 => json(),
        2 => bytes(),
        2 => deep(),
        1 => huge(),
        3 => damaged(),
    ]
    .boxed()
}

/// A line a client sends before `initialize`: a notification, a response, a
/// ping, or anything.
pub(super) fn before_initialize() -> BoxedStrategy<Text> {
    prop_oneof![
        3 => notification(),
        2 => response(),
        2 => id().prop_map(|id| plain_request(&id, "ping", None)),
        1 => request(),
        1 => line(),
    ]
    .boxed()
}
