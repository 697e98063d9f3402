//! A session's prompts wait, in order, behind its running turn, in a bounded queue: at most
//! 32 prompts and 16 MiB of them (the first waiting prompt is taken whatever its size). A
//! prompt past either bound is answered at once with an error saying the queue is full and
//! what to do; the prompts already waiting stay, and other sessions are not affected.

use serde_json::{Value, json};
use zcode_tests::{Bridge, Home, demo_agent, initialize, new_session, prompt};

/// The prompt-queue error of `answer`, or a panic showing what came instead.
fn queue_full(answer: &Value) -> String {
    let message = answer["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        answer["error"]["code"] == -32600 && message.contains("the prompt queue is full"),
        "a prompt past the queue's bound is refused, saying so: {answer}"
    );
    message
}

#[test]
fn a_full_prompt_queue_refuses_the_next_prompt_clearly_and_other_sessions_go_on() {
    let home = Home::new();
    let mut bridge = Bridge::start(&home, &demo_agent(0));
    let editor = &mut bridge.editor;
    initialize(editor, json!({}));

    // 32 prompts wait behind a turn that holds until cancelled; the 33rd is refused.
    let busy = new_session(editor, home.path());
    let held = editor.request("session/prompt", prompt(&busy, "hold"));
    let waiting: Vec<Value> =
        (0..32).map(|i| editor.request("session/prompt", prompt(&busy, &format!("queued {i}")))).collect();
    let (refused, before) = editor.call("session/prompt", prompt(&busy, "one too many"));
    let message = queue_full(&refused);
    assert!(
        message.contains("32 prompts are already waiting (at most 32)") && message.contains(&busy),
        "{message}"
    );
    assert!(message.contains("wait for the running turn to end"), "it says what to do: {message}");
    let answered: Vec<&Value> = before.iter().filter(|m| m["method"].is_null()).collect();
    assert!(answered.is_empty(), "no waiting prompt was answered meanwhile: {answered:?}");

    // Another session is not affected: its turn runs and ends.
    let other = new_session(editor, home.path());
    let (done, _) = editor.call("session/prompt", prompt(&other, "hello"));
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");

    // Bytes: a 9 MiB prompt may wait (the first waiting one always may); a second one would
    // make 18 MiB waiting, past 16 MiB.
    let big = new_session(editor, home.path());
    let _held_big = editor.request("session/prompt", prompt(&big, "hold"));
    let nine_mib = "x".repeat(9 * 1024 * 1024);
    let first_big = editor.request("session/prompt", prompt(&big, &nine_mib));
    let (refused, _) = editor.call("session/prompt", prompt(&big, &nine_mib));
    let message = queue_full(&refused);
    assert!(message.contains("at most 16384 KiB together"), "{message}");
    // A small one still fits beside the big one.
    let small = editor.request("session/prompt", prompt(&big, "small"));

    // The busy session's queue goes on in order once its turn ends: the held turn is
    // cancelled, then the first waiting prompt runs.
    editor.notify("session/cancel", json!({"sessionId": busy}));
    let (r, _) = editor.response_to(&held);
    assert_eq!(r["result"]["stopReason"], "cancelled", "{r}");
    let (r, _) = editor.response_to(&waiting[0]);
    assert!(r["result"]["stopReason"].is_string(), "the first waiting prompt ran: {r}");
    let _ = (first_big, small);
}
