//! Photos in a prompt (issue 33, point 7): a phone's prompt with four images of the web
//! client's largest size (1 MB each) goes through the hub's relay and the bridge to an agent
//! that takes images (the demo agent with `--images`, which says what arrived), reaches the
//! editor sharing the session byte for byte, and comes back in another client's replay.

use base64::Engine;
use serde_json::{Value, json};
use zcode_tests::hub::{Hub, listed, wait_instances};
use zcode_tests::{Bridge, Home, demo_agent, initialize, new_session};

/// The web client's bounds: at most this many images of at most this many bytes.
const IMAGES: usize = 4;
const IMAGE_BYTES: usize = 1_000_000;

/// The image blocks of `msgs`' echoed or replayed prompts, as (mimeType, data).
fn image_blocks(msgs: &[Value]) -> Vec<(String, String)> {
    msgs.iter()
        .map(|m| &m["params"]["update"])
        .filter(|u| u["sessionUpdate"] == "user_message_chunk" && u["content"]["type"] == "image")
        .map(|u| {
            (
                u["content"]["mimeType"].as_str().unwrap_or("").to_owned(),
                u["content"]["data"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[test]
fn four_one_megabyte_images_go_through_the_relay_to_the_agent_the_editor_and_a_replay() {
    let home = Home::new();
    let hub = Hub::start(&home, &[]);
    let mut agent = demo_agent(0);
    agent.push("--images".to_owned());
    let mut b = Bridge::start_env(&home, &agent, &[("ZCODE_ACP_HEARTBEAT_MS", "200")]);
    let id = b.id();
    wait_instances(hub.port, "the bridge to register", |l| listed(l, &id));
    initialize(&mut b.editor, json!({}));
    let sid = new_session(&mut b.editor, home.path());

    let mut phone = hub.connect(&id).expect("the relay accepts");
    let init = initialize(&mut phone, json!({}));
    assert_eq!(init["agentCapabilities"]["promptCapabilities"]["image"], true, "{init}");
    let (r, _) = phone.call("session/load", json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []}));
    assert!(r["result"].is_object(), "{r}");

    let images: Vec<(String, String)> = (0..IMAGES)
        .map(|i| {
            let bytes: Vec<u8> = (0..IMAGE_BYTES).map(|k| (k * 31 + i * 7) as u8).collect();
            let mime = if i % 2 == 0 { "image/jpeg" } else { "image/png" };
            (mime.to_owned(), base64::engine::general_purpose::STANDARD.encode(bytes))
        })
        .collect();
    let mut blocks = vec![json!({"type": "text", "text": "four photos"})];
    blocks.extend(images.iter().map(|(m, d)| json!({"type": "image", "mimeType": m, "data": d})));
    let (r, seen) = phone.call("session/prompt", json!({"sessionId": sid, "prompt": blocks}));
    assert_eq!(r["result"]["stopReason"], "end_turn", "{r}");
    let said = zcode_tests::agent_text(&seen);
    let want = images.iter().map(|(m, _)| format!("{m} {IMAGE_BYTES} bytes")).collect::<Vec<_>>().join(", ");
    assert!(said.contains(&format!("Received {IMAGES} image(s): {want}")), "{said}");

    // The editor sharing the session sees the phone's prompt, images and all.
    let mut echoed = Vec::new();
    while echoed.len() < IMAGES {
        let (m, _) = b.editor.until("the phone's images echoed to the editor", |m| {
            m["params"]["update"]["content"]["type"] == "image"
        });
        echoed.extend(image_blocks(&[m]));
    }
    assert_eq!(echoed, images);

    // Another client attaching later gets them in the replay.
    let mut later = hub.connect(&id).expect("the relay accepts");
    initialize(&mut later, json!({}));
    let (r, replay) =
        later.call("session/load", json!({"sessionId": sid, "cwd": home.path(), "mcpServers": []}));
    assert!(r["result"].is_object(), "{r}");
    assert_eq!(image_blocks(&replay), images);
}
