//! Replay equals the live stream, byte for byte where nothing was merged and member by member
//! where it was (docs/ARCHITECTURE.md, "Replay equals the live stream"): generated updates of
//! every kind, with big integers, number spellings, escapes and unknown members, go through a
//! real journal; a model of the merge rules says what each replayed update must be, as text.

use super::*;
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc as std_mpsc;

/// Members of one update as raw text: (key, value), in order.
type Members = Vec<(String, String)>;

fn render(m: &Members) -> String {
    let inner: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("{{{}}}", inner.join(","))
}

fn set(m: &mut Members, key: &str, value: String) {
    match m.iter_mut().find(|(k, _)| k == key) {
        Some(member) => member.1 = value,
        None => m.push((key.to_owned(), value)),
    }
}

fn quoted(s: &str) -> String {
    format!("\"{s}\"")
}

/// JSON text the way agents spell it, including what a re-encoder would change.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("123456789012345678901234567890".to_owned()),
        Just("-98765432109876543210987654321".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("1.50".to_owned()),
        Just("2e3".to_owned()),
        Just("-0.0".to_owned()),
        Just("1E+2".to_owned()),
        Just("0.1000000000000000055511151231257827".to_owned()),
        Just("7".to_owned()),
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just(r#""\u00e9t\u00E9""#.to_owned()),
        Just(r#""\ud83d\ude00 \/ \"q\"""#.to_owned()),
        Just(r#""plain""#.to_owned()),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            (proptest::collection::vec(inner.clone(), 0..4), any::<bool>())
                .prop_map(|(items, spaced)| format!("[{}]", items.join(if spaced { ", " } else { "," }))),
            proptest::collection::vec((0usize..4, inner), 0..4).prop_map(|members| {
                let keys = ["\"a\"", "\"\\u0062\"", "\"_meta\"", "\"x y\""];
                let m: Vec<String> = members.iter().map(|(k, v)| format!("{}: {v}", keys[*k])).collect();
                format!("{{{}}}", m.join(", "))
            }),
        ]
    })
}

/// Unknown members (distinct keys) an update may carry.
fn extras() -> impl Strategy<Value = Members> {
    let keys = ["\"_meta\"", "\"zUnknown\"", "\"\\u0078Esc\"", "\"value\""];
    proptest::collection::vec((0usize..4, json_text()), 0..3).prop_map(move |v| {
        let mut m: Members = vec![];
        for (k, value) in v {
            if !m.iter().any(|(key, _)| key == keys[k]) {
                m.push((keys[k].to_owned(), value));
            }
        }
        m
    })
}

/// Extras that consecutive chunks often share (so they merge), or random ones.
fn chunk_extras() -> impl Strategy<Value = Members> {
    prop_oneof![
        2 => Just(vec![]),
        2 => Just(vec![("\"_meta\"".to_owned(), r#"{"x":[1.50,2e3]}"#.to_owned())]),
        1 => extras(),
    ]
}

fn text_inner() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("a"),
        Just("Zz "),
        Just(r"\u00e9"),
        Just(r"\ud83d\ude00"),
        Just(r"\n"),
        Just(r#"\""#),
        Just(r"\/"),
    ];
    proptest::collection::vec(piece, 1..4).prop_map(|p| p.concat())
}

#[derive(Clone, Debug)]
enum Content {
    Text { inner: String, extras: Members },
    Other(String),
}

#[derive(Clone, Debug)]
enum Gen {
    Chunk { kind: usize, id: Option<u8>, extras: Members, content: Content },
    Tool { id: u8, extras: Members },
    ToolUpdate { id: u8, extras: Members },
    Plan { entries: String, extras: Members },
    State { kind: usize, extras: Members },
    Unknown { name: &'static str, extras: Members },
}

const CHUNKS: [&str; 3] = ["user_message_chunk", "agent_message_chunk", "agent_thought_chunk"];

fn update() -> impl Strategy<Value = Gen> {
    let content = prop_oneof![
        4 => (text_inner(), prop_oneof![Just(vec![]), Just(vec![("\"_meta\"".to_owned(), "{\"n\":-0.0}".to_owned())])])
            .prop_map(|(inner, extras)| Content::Text { inner, extras }),
        1 => json_text().prop_map(|m| Content::Other(format!(r#"{{"type":"image","data":"aGk=","_meta":{m}}}"#))),
    ];
    prop_oneof![
        8 => (0usize..3, proptest::option::of(0u8..2), chunk_extras(), content)
            .prop_map(|(kind, id, extras, content)| Gen::Chunk { kind, id, extras, content }),
        2 => (0u8..3, extras()).prop_map(|(id, extras)| Gen::Tool { id, extras }),
        2 => (0u8..4, extras()).prop_map(|(id, extras)| Gen::ToolUpdate { id, extras }),
        1 => (json_text(), extras()).prop_map(|(entries, extras)| Gen::Plan { entries, extras }),
        1 => (0usize..5, extras()).prop_map(|(kind, extras)| Gen::State { kind, extras }),
        1 => (prop_oneof![Just("zz_future_kind"), Just("x_new")], extras())
            .prop_map(|(name, extras)| Gen::Unknown { name, extras }),
    ]
}

fn content_members(inner: &str, extras: &Members) -> Members {
    let mut c = vec![("\"type\"".to_owned(), "\"text\"".to_owned()), ("\"text\"".to_owned(), quoted(inner))];
    c.extend(extras.iter().cloned());
    c
}

fn kind(m: &mut Members, k: &str) {
    m.push(("\"sessionUpdate\"".to_owned(), quoted(k)));
}

/// The update's members, as sent.
fn members(g: &Gen) -> Members {
    let mut m: Members = vec![];
    let extras = match g {
        Gen::Chunk { kind: k, id, extras, content } => {
            kind(&mut m, CHUNKS[*k]);
            if let Some(id) = id {
                m.push(("\"messageId\"".to_owned(), format!("\"m{id}\"")));
            }
            let c = match content {
                Content::Text { inner, extras } => render(&content_members(inner, extras)),
                Content::Other(raw) => raw.clone(),
            };
            m.push(("\"content\"".to_owned(), c));
            extras
        }
        Gen::Tool { id, extras } => {
            kind(&mut m, "tool_call");
            m.push(("\"toolCallId\"".to_owned(), format!("\"c{id}\"")));
            m.push(("\"title\"".to_owned(), "\"t\\u00e9\"".to_owned()));
            extras
        }
        Gen::ToolUpdate { id, extras } => {
            kind(&mut m, "tool_call_update");
            m.push(("\"toolCallId\"".to_owned(), format!("\"c{id}\"")));
            m.push(("\"status\"".to_owned(), "\"completed\"".to_owned()));
            extras
        }
        Gen::Plan { entries, extras } => {
            kind(&mut m, "plan");
            m.push(("\"entries\"".to_owned(), entries.clone()));
            extras
        }
        Gen::State { kind: k, extras } => {
            kind(&mut m, merge::STATE_KINDS[*k]);
            extras
        }
        Gen::Unknown { name, extras } => {
            kind(&mut m, name);
            extras
        }
    };
    m.extend(extras.iter().cloned());
    m
}

/// An expected replayed update: its members, and whether the journal adds a `messageId`.
struct Expect {
    members: Members,
    gets_id: bool,
}

struct RunModel {
    msg: usize,
    kind: usize,
    id: Option<u8>,
    extras: Members,
    content_extras: Members,
    text: String,
}

/// What the replay must be, per the merge rules in ARCHITECTURE.md: messages, then the latest
/// state of each state kind (ordered by kind).
fn model(gens: &[Gen]) -> (Vec<Expect>, Vec<String>) {
    let mut msgs: Vec<Expect> = vec![];
    let mut states: BTreeMap<&str, String> = BTreeMap::new();
    let mut run: Option<RunModel> = None;
    let mut tools: HashMap<u8, usize> = HashMap::new();
    let mut plan: Option<usize> = None;
    for g in gens {
        let m = members(g);
        match g {
            Gen::State { kind, .. } => {
                states.insert(merge::STATE_KINDS[*kind], render(&m));
            }
            Gen::Chunk { kind, id, extras, content } => {
                if let (Some(r), Content::Text { inner, extras: cx }) = (&mut run, content) {
                    if r.kind == *kind && r.id == *id && r.extras == *extras && r.content_extras == *cx {
                        r.text.push_str(inner);
                        let body = &mut msgs[r.msg].members;
                        set(body, "\"content\"", render(&content_members(&r.text, cx)));
                        continue;
                    }
                }
                if *kind == 0 {
                    plan = None;
                }
                msgs.push(Expect { members: m, gets_id: id.is_none() });
                run = match content {
                    Content::Text { inner, extras: cx } => Some(RunModel {
                        msg: msgs.len() - 1,
                        kind: *kind,
                        id: *id,
                        extras: extras.clone(),
                        content_extras: cx.clone(),
                        text: inner.clone(),
                    }),
                    Content::Other(_) => None,
                };
            }
            Gen::Tool { id, .. } => {
                run = None;
                msgs.push(Expect { members: m, gets_id: false });
                tools.insert(*id, msgs.len() - 1);
            }
            Gen::ToolUpdate { id, .. } => match tools.get(id) {
                Some(&i) => {
                    for (k, v) in m.into_iter().filter(|(k, _)| k != "\"sessionUpdate\"") {
                        set(&mut msgs[i].members, &k, v);
                    }
                }
                None => {
                    let mut m = m;
                    set(&mut m, "\"sessionUpdate\"", "\"tool_call\"".into());
                    run = None;
                    msgs.push(Expect { members: m, gets_id: false });
                    tools.insert(*id, msgs.len() - 1);
                }
            },
            Gen::Plan { .. } => match plan {
                Some(i) => msgs[i].members = m,
                None => {
                    run = None;
                    msgs.push(Expect { members: m, gets_id: false });
                    plan = Some(msgs.len() - 1);
                }
            },
            Gen::Unknown { .. } => {
                run = None;
                msgs.push(Expect { members: m, gets_id: false });
            }
        }
    }
    (msgs, states.into_values().collect())
}

fn matches(got: &str, want: &Expect) -> bool {
    let body = render(&want.members);
    if !want.gets_id {
        return got == body;
    }
    // The journal names a chunk that came without an id: the one member it adds, at the end.
    let prefix = format!("{},\"messageId\":\"", &body[..body.len() - 1]);
    got.strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix("\"}"))
        .is_some_and(|id| !id.is_empty() && !id.contains('"'))
}

/// The `update` of each replayed line, as the text it was sent as.
fn replayed(slice: &Slice) -> Vec<String> {
    #[derive(Deserialize)]
    struct Line<'a> {
        #[serde(borrow)]
        params: Params<'a>,
    }
    #[derive(Deserialize)]
    struct Params<'a> {
        #[serde(borrow)]
        update: &'a RawValue,
    }
    slice
        .lines
        .iter()
        .map(|l| {
            serde_json::from_slice::<Line<'_>>(l).expect("a session/update").params.update.get().to_owned()
        })
        .collect()
}

fn live_line(update: &str) -> Bytes {
    let params = format!(r#"{{"sessionId":"s","update":{update}}}"#);
    Bytes::from(zcode_shared::jsonrpc::notification_line("session/update", &params))
}

fn load(j: &Journal) -> Slice {
    let (tx, rx) = std_mpsc::channel();
    j.read("s", ReadMode::Load { limit: None }, Box::new(move |r| tx.send(r).unwrap()));
    rx.recv().unwrap().unwrap()
}

#[test]
fn the_issues_update_comes_back_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let j = Journal::open(dir.path(), Retention { max_messages: 1000 }).unwrap();
    let sent = r#"{"sessionUpdate":"zz_future_kind","_meta":{"x":[1.50,2e3]},"value":123456789012345678901234567890}"#;
    j.update("s", live_line(sent), false);
    let state = r#"{"sessionUpdate":"usage_update","used":1.50,"cost":{"amount":2e3,"_meta":{"n":-0.0}}}"#;
    j.update("s", live_line(state), false);
    assert_eq!(replayed(&load(&j)), [sent, state]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Every update kind, known or not: the replay is the live stream under the merge rules,
    /// every value it did not produce itself byte for byte as sent.
    #[test]
    fn replay_equals_the_live_stream(gens in proptest::collection::vec(update(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), Retention { max_messages: 100_000 }).unwrap();
        let sent: Vec<String> = gens.iter().map(|g| render(&members(g))).collect();
        for update in &sent {
            j.update("s", live_line(update), false);
        }
        let got = replayed(&load(&j));
        let (msgs, states) = model(&gens);
        prop_assert_eq!(got.len(), msgs.len() + states.len(), "sent {:#?}\ngot {:#?}", sent, got);
        for (g, want) in got.iter().zip(&msgs) {
            prop_assert!(matches(g, want), "got  {}\nwant {}\nsent {:#?}", g, render(&want.members), sent);
        }
        prop_assert_eq!(&got[msgs.len()..], &states[..]);
    }
}
