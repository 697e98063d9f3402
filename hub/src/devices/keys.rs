//! Devices that hold a key instead of a credential: the web client keeps a non-extractable
//! WebCrypto ECDSA P-256 key and registers its public half (at pairing, or in exchange for its
//! old stored token). It then proves itself per page: it asks for a challenge (random, works
//! once, for [`CHALLENGE_LIFE`]), signs it, and gets an access token that works for
//! [`ACCESS_LIFE`], kept only in the hub's memory (as its SHA-256) and the page's. Such a device
//! has no credential in the store that works: its row's hash is of bytes nobody was given.
//!
//! A failed signature, an unknown device or a used, expired or unknown challenge is charged to
//! the caller's address like a wrong token, and an address over its limit is refused before
//! anything is checked. Access tokens are [`Credential::Device`]s: a revocation cuts their
//! connections with the device's, and drops them.

use super::{Device, Devices, digest, random_bytes, same};
use crate::Hub;
use crate::auth::Refusal;
use base64::Engine;
use p256::ecdsa::signature::Verifier;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long a challenge works.
pub const CHALLENGE_LIFE: Duration = Duration::from_secs(60);
/// How long an access token works.
pub const ACCESS_LIFE: Duration = Duration::from_secs(15 * 60);
/// Challenges waiting at once, at most (the oldest go first).
const MAX_CHALLENGES: usize = 256;
/// Live access tokens per device, at most (the oldest go first: one per open page is plenty).
const ACCESS_PER_DEVICE: usize = 8;
/// What a device signs: this prefix, then the challenge (so a signature means nothing elsewhere).
pub const SIGNED_PREFIX: &str = "zcode-acp device token:";

/// A waiting challenge (its digest: the challenge itself is the caller's to keep).
pub(super) struct Challenge {
    digest: [u8; 32],
    expires: Instant,
}

/// A live access token.
pub(super) struct Access {
    digest: [u8; 32],
    device: String,
    expires: Instant,
}

/// A new access token.
pub struct Minted {
    /// The token (given once, never kept).
    pub token: String,
    /// When it stops working, epoch ms.
    pub expires_at: u64,
}

/// Why no access token was given.
#[derive(Debug, PartialEq, Eq)]
pub enum MintError {
    /// Over the address's limit (429, retry after this many seconds).
    Limited(u64),
    /// The challenge is unknown, used or expired (401).
    Challenge,
    /// No device with a key has that id, or the signature is not its key's (401).
    Signature,
    /// The store failed (503).
    Store(String),
}

/// Why a key could not be registered.
#[derive(Debug, PartialEq, Eq)]
pub enum KeyError {
    /// Not a paired device's own credential, or it has a key already (409, in words).
    Refused(&'static str),
    /// The store failed (503).
    Store(String),
}

/// How long a challenge works: [`CHALLENGE_LIFE`], or in a debug build
/// `ZCODE_ACP_TEST_DEVICE_CHALLENGE_MS` (the expiry test's).
fn challenge_life() -> Duration {
    static LIFE: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *LIFE.get_or_init(|| {
        let knob = zcode_shared::env::test_knob(
            &zcode_shared::env::ProcessEnv,
            "ZCODE_ACP_TEST_DEVICE_CHALLENGE_MS",
        );
        knob.and_then(|v| v.trim().parse().ok()).map_or(CHALLENGE_LIFE, Duration::from_millis)
    })
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

/// A public key as a client sends it: the base64url of an uncompressed P-256 point (what
/// WebCrypto's `exportKey('raw', publicKey)` gives), checked to be on the curve. The error is
/// the 400's text.
pub fn parse_public_key(text: &str) -> Result<Vec<u8>, &'static str> {
    let bytes = b64()
        .decode(text.trim().trim_end_matches('='))
        .map_err(|_| "publicKey must be base64url (WebCrypto's raw P-256 public key)")?;
    if bytes.len() != 65 || bytes[0] != 4 {
        return Err("publicKey must be an uncompressed P-256 point (65 bytes, exportKey('raw'))");
    }
    p256::ecdsa::VerifyingKey::from_sec1_bytes(&bytes).map_err(|_| "publicKey is not a point on P-256")?;
    Ok(bytes)
}

/// Whether `signature` (raw r‖s, 64 bytes, as WebCrypto's ECDSA gives it) is `key`'s over
/// [`SIGNED_PREFIX`] and `challenge` (SHA-256).
fn signed_by(key: &[u8], challenge: &str, signature: &[u8]) -> bool {
    let Ok(vk) = p256::ecdsa::VerifyingKey::from_sec1_bytes(key) else { return false };
    let Ok(sig) = p256::ecdsa::Signature::from_slice(signature) else { return false };
    let message = format!("{SIGNED_PREFIX}{challenge}");
    vk.verify(message.as_bytes(), &sig).is_ok()
}

impl Devices {
    /// A new challenge: the text to sign (after [`SIGNED_PREFIX`]) and when it stops working
    /// (epoch ms). Asking is charged nothing; at most [`MAX_CHALLENGES`] wait (the oldest go).
    pub fn challenge(&self) -> (String, u64) {
        let now = Instant::now();
        let text = b64().encode(random_bytes::<32>());
        let mut state = self.state();
        state.challenges.retain(|c| c.expires > now);
        if state.challenges.len() >= MAX_CHALLENGES {
            state.challenges.remove(0);
        }
        state.challenges.push(Challenge { digest: digest(&text), expires: now + challenge_life() });
        (text, zcode_shared::time::now_ms() + challenge_life().as_millis() as u64)
    }

    /// Takes `challenge` (once, whatever follows): whether it was waiting and not expired.
    fn take_challenge(&self, challenge: &str) -> bool {
        let now = Instant::now();
        let d = digest(challenge);
        let mut state = self.state();
        state.challenges.retain(|c| c.expires > now);
        let mut found = None;
        for (i, c) in state.challenges.iter().enumerate() {
            if same(&c.digest, &d) {
                found = Some(i);
            }
        }
        found.map(|i| state.challenges.swap_remove(i)).is_some()
    }

    /// Drops the access tokens of device `id` (it was revoked).
    pub(super) fn drop_access(&self, id: &str) {
        self.state().access.retain(|a| a.device != id);
    }
}

/// The device an access token `d` (a digest) was given to, if the token is live and the device
/// still paired: its index in `devices`. Expired tokens are dropped on the way.
pub(super) fn access_of(devices: &[Device], access: &mut Vec<Access>, d: &[u8; 32]) -> Option<usize> {
    let now = Instant::now();
    access.retain(|a| a.expires > now);
    let mut found = None;
    for a in access.iter() {
        if same(&a.digest, d) {
            found = Some(a.device.clone());
        }
    }
    let id = found?;
    devices.iter().position(|dev| dev.row.id == id)
}

/// An access token for device `device_id`, which signed `challenge` with its key (`signature`,
/// base64url of r‖s). Refused before anything is checked when `addr` is over its limit; every
/// refusal is charged to it.
pub async fn mint(
    hub: &Hub,
    device_id: &str,
    challenge: &str,
    signature: &str,
    addr: IpAddr,
) -> Result<Minted, MintError> {
    let limited = |r: Refusal| match r {
        Refusal::Limited(s) => MintError::Limited(s),
        Refusal::Unauthorized => MintError::Signature,
    };
    hub.auth.may_try(addr).map_err(limited)?;
    hub.devices.load(&hub.store).await.map_err(MintError::Store)?;
    // The challenge is used up by this attempt, whatever becomes of it.
    if !hub.devices.take_challenge(challenge) {
        return Err(match hub.auth.fail(addr) {
            Refusal::Limited(s) => MintError::Limited(s),
            Refusal::Unauthorized => MintError::Challenge,
        });
    }
    let signature = b64().decode(signature.trim().trim_end_matches('=')).unwrap_or_default();
    let key = {
        let state = hub.devices.state();
        state.devices.iter().find(|d| d.row.id == device_id).and_then(|d| d.row.public_key.clone())
    };
    // Checked without the lock held (it is arithmetic, not I/O, but others authenticate meanwhile).
    // A revocation in between leaves a token for no device, which `access_of` never accepts.
    if !key.is_some_and(|k| signed_by(&k, challenge, &signature)) {
        return Err(limited(hub.auth.fail(addr)));
    }
    let token = b64().encode(random_bytes::<32>());
    let now = Instant::now();
    let mut state = hub.devices.state();
    state.access.retain(|a| a.expires > now);
    let mine = state.access.iter().filter(|a| a.device == device_id).count();
    if mine >= ACCESS_PER_DEVICE {
        if let Some(i) = state.access.iter().position(|a| a.device == device_id) {
            state.access.remove(i);
        }
    }
    state.access.push(Access {
        digest: digest(&token),
        device: device_id.to_owned(),
        expires: now + ACCESS_LIFE,
    });
    Ok(Minted { token, expires_at: zcode_shared::time::now_ms() + ACCESS_LIFE.as_millis() as u64 })
}

/// Gives the device `id` (which presented its stored credential) the public `key`: from now on
/// it signs challenges, and its stored credential no longer works.
pub async fn register(hub: &Hub, id: &str, key: Vec<u8>) -> Result<(), KeyError> {
    hub.devices.load(&hub.store).await.map_err(KeyError::Store)?;
    let has_key =
        hub.devices.state().devices.iter().find(|d| d.row.id == id).map(|d| d.row.public_key.is_some());
    match has_key {
        None => return Err(KeyError::Refused("this device is no longer paired")),
        Some(true) => return Err(KeyError::Refused("this device has a key already")),
        Some(false) => {}
    }
    let unusable = digest(&b64().encode(random_bytes::<32>()));
    let (i, k) = (id.to_owned(), key.clone());
    let found = hub
        .store
        .run(move |st| st.write(|w| w.device_set_key(&i, &k, &unusable)))
        .await
        .and_then(|r| r.map_err(|e| e.to_string()))
        .map_err(KeyError::Store)?;
    if !found {
        return Err(KeyError::Refused("this device is no longer paired"));
    }
    if let Some(d) = hub.devices.state().devices.iter_mut().find(|d| d.row.id == id) {
        d.row.public_key = Some(key);
        d.row.token_sha256 = unusable;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Signer;

    fn key() -> (p256::ecdsa::SigningKey, Vec<u8>) {
        let sk = p256::ecdsa::SigningKey::from_slice(&[5u8; 32]).unwrap();
        let pk = sk.verifying_key().to_encoded_point(false).as_bytes().to_vec();
        (sk, pk)
    }

    #[test]
    fn a_signature_counts_only_over_the_prefixed_challenge_by_that_key() {
        let (sk, pk) = key();
        let sig: p256::ecdsa::Signature = sk.sign(format!("{SIGNED_PREFIX}abc").as_bytes());
        let raw = sig.to_bytes();
        assert!(signed_by(&pk, "abc", &raw));
        assert!(!signed_by(&pk, "abd", &raw), "another challenge");
        let bare: p256::ecdsa::Signature = sk.sign(b"abc");
        assert!(!signed_by(&pk, "abc", &bare.to_bytes()), "the bare challenge, unprefixed");
        let other = p256::ecdsa::SigningKey::from_slice(&[6u8; 32]).unwrap();
        let theirs: p256::ecdsa::Signature = other.sign(format!("{SIGNED_PREFIX}abc").as_bytes());
        assert!(!signed_by(&pk, "abc", &theirs.to_bytes()), "another key");
        assert!(!signed_by(&pk, "abc", &raw[..63]), "cut short");
    }

    #[test]
    fn public_keys_are_checked_points() {
        let (_, pk) = key();
        assert_eq!(parse_public_key(&b64().encode(&pk)).unwrap(), pk);
        assert!(parse_public_key("!!").is_err());
        assert!(parse_public_key(&b64().encode(&pk[..33])).is_err(), "compressed or short");
        let mut off = pk.clone();
        off[64] ^= 1;
        assert!(parse_public_key(&b64().encode(off)).is_err(), "not on the curve");
    }

    #[test]
    fn a_challenge_works_once_and_an_expired_access_token_is_nobodys() {
        let d = Devices::default();
        let (c, _) = d.challenge();
        assert!(d.take_challenge(&c));
        assert!(!d.take_challenge(&c), "used");
        assert!(!d.take_challenge("never-given"));
        let gone = Instant::now().checked_sub(Duration::from_secs(1)).unwrap();
        let mut access = vec![Access { digest: digest("t"), device: "x".into(), expires: gone }];
        assert_eq!(access_of(&[], &mut access, &digest("t")), None);
        assert!(access.is_empty(), "dropped once expired");
    }
}
