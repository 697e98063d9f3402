//! WebSocket frame headers (RFC 6455 §5.2): as much as a relay needs to find frame boundaries,
//! check the framing rules, and build its own control frames. Payloads are never decoded here.

/// A frame's opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A continuation of a fragmented message.
    Continue,
    /// The first frame of a text message.
    Text,
    /// The first frame of a binary message.
    Binary,
    /// Close.
    Close,
    /// Ping.
    Ping,
    /// Pong.
    Pong,
}

impl Op {
    /// Close, ping and pong.
    pub fn is_control(self) -> bool {
        matches!(self, Op::Close | Op::Ping | Op::Pong)
    }

    fn code(self) -> u8 {
        match self {
            Op::Continue => 0,
            Op::Text => 1,
            Op::Binary => 2,
            Op::Close => 8,
            Op::Ping => 9,
            Op::Pong => 10,
        }
    }
}

/// A parsed frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The last frame of its message.
    pub fin: bool,
    /// The opcode.
    pub op: Op,
    /// The masking key, when the payload is masked (every frame a client sends).
    pub mask: Option<[u8; 4]>,
    /// The payload length.
    pub len: u64,
    /// The header's own length in bytes.
    pub size: usize,
}

/// A header that breaks the framing rules (the peer gets close 1002).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// RSV bits set, but no extension was negotiated.
    Reserved,
    /// An opcode RFC 6455 does not define.
    Opcode(u8),
    /// A fragmented control frame, or one with a payload over 125 bytes.
    Control,
    /// A 64-bit length with its top bit set.
    Length,
}

/// Parses the header at the start of `b`; `Ok(None)` when `b` does not hold all of it yet.
pub fn parse(b: &[u8]) -> Result<Option<Header>, Malformed> {
    let [b0, b1, ..] = *b else { return Ok(None) };
    if b0 & 0x70 != 0 {
        return Err(Malformed::Reserved);
    }
    let op = match b0 & 0x0f {
        0 => Op::Continue,
        1 => Op::Text,
        2 => Op::Binary,
        8 => Op::Close,
        9 => Op::Ping,
        10 => Op::Pong,
        other => return Err(Malformed::Opcode(other)),
    };
    let fin = b0 & 0x80 != 0;
    let (len, mut size) = match b1 & 0x7f {
        126 => match b.get(2..4) {
            Some(l) => (u64::from(u16::from_be_bytes([l[0], l[1]])), 4),
            None => return Ok(None),
        },
        127 => match b.get(2..10) {
            Some(l) => {
                let mut n = [0u8; 8];
                n.copy_from_slice(l);
                let len = u64::from_be_bytes(n);
                if len >> 63 != 0 {
                    return Err(Malformed::Length);
                }
                (len, 10)
            }
            None => return Ok(None),
        },
        short => (u64::from(short), 2),
    };
    let mask = if b1 & 0x80 != 0 {
        let Some(m) = b.get(size..size + 4) else { return Ok(None) };
        size += 4;
        Some([m[0], m[1], m[2], m[3]])
    } else {
        None
    };
    if op.is_control() && (!fin || len > 125) {
        return Err(Malformed::Control);
    }
    Ok(Some(Header { fin, op, mask, len, size }))
}

/// XORs `payload` with `mask` (masking and unmasking are the same operation).
pub fn apply_mask(payload: &mut [u8], mask: [u8; 4]) {
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i & 3];
    }
}

/// A complete control frame with `payload` (at most 125 bytes), masked when `mask` is given
/// (frames the hub sends to a bridge: it is that connection's client).
pub fn control(op: Op, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let len = payload.len().min(125);
    let mut f = Vec::with_capacity(6 + len);
    f.push(0x80 | op.code());
    f.push(if mask.is_some() { 0x80 } else { 0 } | len as u8);
    let body = f.len() + if mask.is_some() { 4 } else { 0 };
    if let Some(m) = mask {
        f.extend_from_slice(&m);
    }
    f.extend_from_slice(&payload[..len]);
    if let Some(m) = mask {
        apply_mask(&mut f[body..], m);
    }
    f
}

/// A close frame's payload: the code, then the reason.
pub fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    p.extend_from_slice(&reason.as_bytes()[..reason.len().min(120)]);
    p
}

/// The code in a close frame's (unmasked) payload, if it has one.
pub fn close_code(payload: &[u8]) -> Option<u16> {
    payload.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]]))
}

/// A fresh masking key.
pub fn mask_key() -> [u8; 4] {
    let mut k = [0u8; 4];
    // The OS random source does not fail on Linux; a constant key would still be valid framing.
    let _ = getrandom::fill(&mut k);
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_every_length_form_parse_and_need_all_their_bytes() {
        let short = [0x81, 0x05];
        assert_eq!(parse(&short), Ok(Some(Header { fin: true, op: Op::Text, mask: None, len: 5, size: 2 })));
        let medium = [0x02, 0xfe, 0x01, 0x00, 1, 2, 3, 4];
        let h = parse(&medium).unwrap().unwrap();
        assert_eq!((h.fin, h.op, h.len, h.size, h.mask), (false, Op::Binary, 256, 8, Some([1, 2, 3, 4])));
        let long = [0x80, 0x7f, 0, 0, 0, 0, 0x02, 0, 0, 0];
        assert_eq!(parse(&long).unwrap().unwrap().len, 32 << 20);
        for whole in [&short[..], &medium[..], &long[..]] {
            for cut in 0..whole.len() {
                assert_eq!(parse(&whole[..cut]), Ok(None), "{whole:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn framing_violations_are_refused() {
        assert_eq!(parse(&[0xc1, 0x00]), Err(Malformed::Reserved));
        assert_eq!(parse(&[0x83, 0x00]), Err(Malformed::Opcode(3)));
        assert_eq!(parse(&[0x09, 0x00]), Err(Malformed::Control), "a fragmented ping");
        assert_eq!(parse(&[0x89, 0x7e, 0x00, 0x7e]), Err(Malformed::Control), "a 126-byte ping");
        assert_eq!(parse(&[0x82, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 0]), Err(Malformed::Length));
    }

    #[test]
    fn control_frames_round_trip_masked_and_not() {
        let payload = close_payload(1011, "bridge went away");
        let plain = control(Op::Close, &payload, None);
        let h = parse(&plain).unwrap().unwrap();
        assert_eq!((h.op, h.mask, h.len as usize), (Op::Close, None, payload.len()));
        assert_eq!(close_code(&plain[h.size..]), Some(1011));
        let masked = control(Op::Ping, b"zcode", Some([9, 8, 7, 6]));
        let h = parse(&masked).unwrap().unwrap();
        let mut body = masked[h.size..].to_vec();
        assert_ne!(body, b"zcode");
        apply_mask(&mut body, h.mask.unwrap());
        assert_eq!(body, b"zcode");
    }
}
