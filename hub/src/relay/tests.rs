//! The relay thread between real WebSocket peers (tokio-tungstenite) over loopback TCP.

use super::*;
use frame::Op;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream as Tcp;
use tokio::sync::oneshot;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::{Bytes, Message};

type Peer = WebSocketStream<Tcp>;

/// A connected pair: the peer's end (tokio) and the hub's end (std, non-blocking).
async fn socket_pair() -> (Tcp, std::net::TcpStream) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let peer = Tcp::connect(listener.local_addr().unwrap()).await.unwrap();
    let (hub_end, _) = listener.accept().unwrap();
    hub_end.set_nonblocking(true).unwrap();
    (peer, hub_end)
}

/// Starts a relay between the hub ends; its end is reported on the receiver.
fn open(
    relays: &Relays,
    client: (std::net::TcpStream, Vec<u8>),
    bridge: (std::net::TcpStream, Vec<u8>),
) -> oneshot::Receiver<End> {
    let (tx, rx) = oneshot::channel();
    relays.open(Open {
        id: 0,
        client: client.0,
        client_early: client.1,
        bridge: bridge.0,
        bridge_early: bridge.1,
        on_end: Box::new(move |end| {
            let _ = tx.send(end);
        }),
        whose: std::sync::Arc::new(tracing::Span::none),
    });
    rx
}

/// A client peer, a bridge peer, the relay thread and the relay's end.
async fn setup(ping: Duration) -> (Peer, Peer, Relays, oneshot::Receiver<End>) {
    let relays = Relays::start(ping).unwrap();
    let (client_end, hub_c) = socket_pair().await;
    let (bridge_end, hub_b) = socket_pair().await;
    let client = WebSocketStream::from_raw_socket(client_end, Role::Client, None).await;
    let bridge = WebSocketStream::from_raw_socket(bridge_end, Role::Server, None).await;
    let end = open(&relays, (hub_c, Vec::new()), (hub_b, Vec::new()));
    (client, bridge, relays, end)
}

async fn close_code(peer: &mut Peer) -> Option<u16> {
    loop {
        match peer.next().await {
            Some(Ok(Message::Close(f))) => return f.map(|f| u16::from(f.code)),
            Some(Ok(_)) => {}
            _ => return None,
        }
    }
}

#[tokio::test]
async fn frames_keep_their_opcode_both_ways_and_the_bridge_close_code_reaches_the_client() {
    let (client, mut bridge, _relays, relay) = setup(Duration::from_secs(30)).await;
    let big = "x".repeat(1 << 20);
    let sent = big.clone();
    // Sent while the bridge reads: the relay buffers 16 KiB, not a whole message.
    let sender = tokio::spawn(async move {
        let mut client = client;
        client.send(Message::text("{\"a\":1}")).await.unwrap();
        client.send(Message::binary(vec![1u8, 2, 3])).await.unwrap();
        client.send(Message::text(sent)).await.unwrap();
        client
    });
    assert_eq!(bridge.next().await.unwrap().unwrap(), Message::text("{\"a\":1}"));
    assert_eq!(bridge.next().await.unwrap().unwrap(), Message::binary(vec![1u8, 2, 3]));
    assert_eq!(bridge.next().await.unwrap().unwrap(), Message::text(big));
    let mut client = sender.await.unwrap();
    bridge.send(Message::text("back")).await.unwrap();
    assert_eq!(client.next().await.unwrap().unwrap(), Message::text("back"));
    let code = CloseCode::from(4001);
    bridge.close(Some(CloseFrame { code, reason: "bye".into() })).await.unwrap();
    assert_eq!(close_code(&mut client).await, Some(4001));
    // The client's close answer goes back through; the relay ends with the handshake.
    let _ = client.next().await;
    assert_eq!(relay.await.unwrap(), End::Closed(Side::Bridge, Some(4001)));
    assert_eq!(close_code(&mut bridge).await, Some(4001), "the client's answer reached the bridge");
}

#[tokio::test]
async fn a_bridge_that_vanishes_closes_the_client_with_1011() {
    let (mut client, bridge, _relays, relay) = setup(Duration::from_secs(30)).await;
    drop(bridge);
    assert_eq!(close_code(&mut client).await, Some(1011));
    assert_eq!(relay.await.unwrap(), End::Gone(Side::Bridge));
    // Really closed: no copy of the client's socket is left open anywhere in the process.
    assert!(client.next().await.is_none_or(|r| r.is_err()), "the client's connection stayed open");
}

#[tokio::test]
async fn the_relay_thread_keeps_no_copy_of_what_the_hub_had_open() {
    // A connection the hub holds while the relay thread starts.
    let (mut peer, hub_end) = socket_pair().await;
    let relays = Relays::start(Duration::from_secs(30)).unwrap();
    drop(hub_end);
    let mut buf = [0u8; 8];
    let n = tokio::time::timeout(Duration::from_secs(10), peer.read(&mut buf)).await;
    assert!(matches!(n, Ok(Ok(0))), "the hub closed its end but the peer saw {n:?}");
    drop(relays);
}

#[tokio::test]
async fn pings_go_both_ways_their_pongs_stay_in_the_hub_and_a_silent_leg_is_closed() {
    let (mut client, mut bridge, _relays, relay) = setup(Duration::from_millis(100)).await;
    // The bridge reads (so answers pings) all along and reports what it saw.
    let bridge_saw = tokio::spawn(async move {
        let (mut pings, mut pongs, mut texts) = (0, 0, Vec::new());
        loop {
            match bridge.next().await {
                Some(Ok(Message::Ping(p))) => {
                    assert_eq!(p, Bytes::from_static(b"zcode-hub"));
                    pings += 1;
                }
                Some(Ok(Message::Pong(_))) => pongs += 1,
                Some(Ok(Message::Text(t))) => texts.push(t.to_string()),
                Some(Ok(Message::Close(f))) => return (pings, pongs, texts, f.map(|f| u16::from(f.code))),
                _ => return (pings, pongs, texts, None),
            }
        }
    });
    // The client answers three pings, says something, then stops reading (and answering).
    let mut pings = 0;
    while pings < 3 {
        match client.next().await.unwrap().unwrap() {
            Message::Ping(p) => {
                assert_eq!(p, Bytes::from_static(b"zcode-hub"));
                pings += 1;
            }
            other => panic!("the client got {other:?}"),
        }
    }
    client.send(Message::text("still here")).await.unwrap();
    assert_eq!(relay.await.unwrap(), End::Silent(Side::Client));
    let (pings, pongs, texts, code) = bridge_saw.await.unwrap();
    assert!(pings >= 3, "{pings}");
    assert_eq!(pongs, 0, "the client's pongs to the hub were forwarded");
    assert_eq!(texts, ["still here"]);
    assert_eq!(code, Some(1001));
    drop(client);
}

#[tokio::test]
async fn shutdown_closes_both_legs_with_1001() {
    let (mut client, mut bridge, relays, relay) = setup(Duration::from_secs(30)).await;
    relays.shutdown();
    assert_eq!(close_code(&mut client).await, Some(1001));
    assert_eq!(close_code(&mut bridge).await, Some(1001));
    assert_eq!(relay.await.unwrap(), End::Shutdown);
    // A relay opened after the shutdown is closed at once.
    let (mut late_client, hub_c) = socket_pair().await;
    let (_late_bridge, hub_b) = socket_pair().await;
    let late = open(&relays, (hub_c, Vec::new()), (hub_b, Vec::new()));
    assert_eq!(late.await.unwrap(), End::Shutdown);
    let mut answer = vec![0u8; 64];
    let n = late_client.read(&mut answer).await.unwrap();
    let h = frame::parse(&answer[..n]).unwrap().unwrap();
    assert_eq!((h.op, frame::close_code(&answer[h.size..n])), (Op::Close, Some(1001)));
}

#[tokio::test]
async fn a_message_over_32_mib_closes_its_sender_with_1009_before_a_byte_is_forwarded() {
    let relays = Relays::start(Duration::from_secs(30)).unwrap();
    let (mut raw_client, hub_c) = socket_pair().await;
    let (bridge_end, hub_b) = socket_pair().await;
    let mut bridge = WebSocketStream::from_raw_socket(bridge_end, Role::Server, None).await;
    let relay = open(&relays, (hub_c, Vec::new()), (hub_b, Vec::new()));
    let mut header = vec![0x81, 0xff];
    header.extend_from_slice(&((MAX_MESSAGE as u64) + 1).to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    raw_client.write_all(&header).await.unwrap();
    let mut answer = vec![0u8; 64];
    let n = raw_client.read(&mut answer).await.unwrap();
    let h = frame::parse(&answer[..n]).unwrap().unwrap();
    assert_eq!((h.op, frame::close_code(&answer[h.size..n])), (Op::Close, Some(1009)));
    assert_eq!(close_code(&mut bridge).await, Some(1001), "the bridge saw only the close");
    assert_eq!(relay.await.unwrap(), End::TooBig(Side::Client));
}

#[tokio::test]
async fn bytes_sent_with_the_handshake_are_relayed_first() {
    let relays = Relays::start(Duration::from_secs(30)).unwrap();
    let (client_end, hub_c) = socket_pair().await;
    let (bridge_end, hub_b) = socket_pair().await;
    let mut client = WebSocketStream::from_raw_socket(client_end, Role::Client, None).await;
    let mut bridge = WebSocketStream::from_raw_socket(bridge_end, Role::Server, None).await;
    let early = frame::control(Op::Ping, b"early", Some([5, 6, 7, 8]));
    let relay = open(&relays, (hub_c, early), (hub_b, Vec::new()));
    assert_eq!(bridge.next().await.unwrap().unwrap(), Message::Ping(Bytes::from_static(b"early")));
    // The bridge's pong (not the hub's) goes back to the client.
    bridge.flush().await.unwrap();
    assert_eq!(client.next().await.unwrap().unwrap(), Message::Pong(Bytes::from_static(b"early")));
    drop(bridge);
    assert_eq!(relay.await.unwrap(), End::Gone(Side::Bridge));
}

#[tokio::test]
async fn a_client_whose_close_the_bridge_never_answers_still_gets_a_close_back() {
    let (mut client, bridge, _relays, relay) = setup(Duration::from_secs(30)).await;
    client
        .send(Message::Close(Some(CloseFrame { code: CloseCode::Normal, reason: "bye".into() })))
        .await
        .unwrap();
    // The bridge dies before answering: the client's handshake is completed by the hub.
    drop(bridge);
    assert_eq!(close_code(&mut client).await, Some(1011));
    assert_eq!(relay.await.unwrap(), End::Gone(Side::Bridge));
    // Really closed: no copy of the client's socket is left open anywhere in the process.
    assert!(client.next().await.is_none_or(|r| r.is_err()), "the client's connection stayed open");
}

#[tokio::test]
async fn a_close_the_other_side_never_answers_ends_the_relay_after_the_grace() {
    let (mut client, bridge, _relays, relay) = setup(Duration::from_secs(30)).await;
    client
        .send(Message::Close(Some(CloseFrame { code: CloseCode::Normal, reason: "bye".into() })))
        .await
        .unwrap();
    // The bridge sees the close but never answers it (a raw read: tungstenite would answer).
    let mut raw = bridge.into_inner();
    let mut buf = [0u8; 64];
    let n = raw.read(&mut buf).await.unwrap();
    let h = frame::parse(&buf[..n]).unwrap().unwrap();
    assert_eq!(h.op, Op::Close);
    // The relay waits for the answer for CLOSE_GRACE, then closes both connections.
    assert_eq!(relay.await.unwrap(), End::Closed(Side::Client, Some(1000)));
    assert!(matches!(raw.read(&mut buf).await, Ok(0) | Err(_)), "the bridge leg stayed open");
    assert!(client.next().await.is_none_or(|r| r.is_err()), "the client leg stayed open");
}

#[tokio::test]
async fn a_slow_reader_and_the_bridge_held_back_by_it_stay_relayed() {
    // Pings every 100 ms; the client reads 8 MiB at about 3 MB/s, so its pongs come long
    // after the data queued ahead of them, and the bridge waits behind data the hub is not
    // reading (backpressure) for most of the transfer. Neither is silent. (A period of 20 ms
    // left a loaded machine's scheduler, not the relay, to decide: the bridge task, once
    // unblocked, missed two periods.)
    let (mut client, mut bridge, _relays, mut relay) = setup(Duration::from_millis(100)).await;
    const N: usize = 128;
    const SIZE: usize = 64 * 1024;
    let bridge_side = tokio::spawn(async move {
        for i in 0..N {
            bridge.send(Message::binary(vec![i as u8; SIZE])).await.unwrap();
        }
        // Reads (and answers pings) until the client's word comes.
        loop {
            match bridge.next().await {
                Some(Ok(Message::Text(t))) => return (bridge, t.to_string()),
                Some(Ok(_)) => {}
                other => panic!("the bridge leg ended: {other:?}"),
            }
        }
    });
    let mut got = 0;
    while got < N {
        match client.next().await {
            Some(Ok(Message::Binary(b))) => {
                assert_eq!((b.len(), b[0]), (SIZE, got as u8));
                got += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Some(Ok(_)) => {}
            other => panic!("the client was dropped after {got} of {N} messages: {other:?}"),
        }
    }
    assert!(relay.try_recv().is_err(), "the relay ended: {:?}", relay.try_recv());
    client.send(Message::text("all here")).await.unwrap();
    let (mut bridge, word) = bridge_side.await.unwrap();
    assert_eq!(word, "all here");
    bridge.close(None).await.unwrap();
    assert_eq!(close_code(&mut client).await, None, "a close without a code");
}

#[tokio::test]
async fn a_restart_closes_both_legs_with_1012() {
    let (mut client, mut bridge, relays, relay) = setup(Duration::from_secs(30)).await;
    relays.restart();
    assert_eq!(close_code(&mut client).await, Some(1012));
    assert_eq!(close_code(&mut bridge).await, Some(1012));
    assert_eq!(relay.await.unwrap(), End::Restart);
}
