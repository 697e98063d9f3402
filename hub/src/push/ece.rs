//! RFC 8291 message encryption for Web Push: the `aes128gcm` content coding of RFC 8188 with
//! one record, keyed by ECDH (P-256) between a fresh sender key pair and the subscription's
//! `p256dh` key, mixed with its `auth` secret through HKDF-SHA256. Only the RustCrypto
//! primitives do crypto here; this module just lays the bytes out as the RFCs say.

use aes_gcm::aead::Aead;
use aes_gcm::{Aes128Gcm, KeyInit, Nonce};
use hkdf::Hkdf;
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::{PublicKey, SecretKey};
use sha2::Sha256;

/// The record size announced in the header. One record carries the whole message, so it
/// must exceed the plaintext, its delimiter and the 16-byte tag.
const RECORD_SIZE: u32 = 4096;

/// The largest plaintext one record holds: the record size less the tag and the delimiter.
/// (A push service must accept 4096 bytes of body; the header takes 86 of them, so callers
/// keep payloads well under this.)
pub const MAX_PLAINTEXT: usize = RECORD_SIZE as usize - 16 - 1;

/// Why a message could not be encrypted.
#[derive(Debug, thiserror::Error)]
pub enum EceError {
    /// The payload does not fit one record.
    #[error("push payload too large ({0} bytes)")]
    TooLarge(usize),
    /// The random source failed.
    #[error("no randomness for the push encryption: {0}")]
    Random(getrandom::Error),
    /// A derivation or the cipher refused its input (cannot happen with valid keys).
    #[error("push encryption failed")]
    Crypto,
}

/// A new random P-256 secret key (for the sender's one-time key and the VAPID key).
pub fn random_secret() -> Result<SecretKey, EceError> {
    loop {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(EceError::Random)?;
        // Out of range (zero or ≥ the group order) happens with probability ~2^-32: draw again.
        if let Ok(k) = SecretKey::from_slice(&bytes) {
            return Ok(k);
        }
    }
}

/// The uncompressed SEC1 encoding of `key` (65 bytes, `04 || x || y`).
pub fn uncompressed(key: &PublicKey) -> Vec<u8> {
    key.to_encoded_point(false).as_bytes().to_vec()
}

/// Encrypts `plaintext` for the subscription whose keys are `ua_public` (`p256dh`) and
/// `auth`: the whole `aes128gcm` body (header, then the single record).
pub fn encrypt(plaintext: &[u8], ua_public: &PublicKey, auth: &[u8; 16]) -> Result<Vec<u8>, EceError> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(EceError::Random)?;
    encrypt_with(plaintext, ua_public, auth, &random_secret()?, &salt)
}

/// [`encrypt`] with the sender's key pair and the salt given: what the RFC's worked example
/// (Appendix A) fixes. Never reuse either outside a test.
pub fn encrypt_with(
    plaintext: &[u8],
    ua_public: &PublicKey,
    auth: &[u8; 16],
    as_secret: &SecretKey,
    salt: &[u8; 16],
) -> Result<Vec<u8>, EceError> {
    if plaintext.len() > MAX_PLAINTEXT {
        return Err(EceError::TooLarge(plaintext.len()));
    }
    let as_public = uncompressed(&as_secret.public_key());
    let ua_bytes = uncompressed(ua_public);
    let shared = p256::ecdh::diffie_hellman(as_secret.to_nonzero_scalar(), ua_public.as_affine());

    // RFC 8291 §3.3: IKM = HKDF(auth, ecdh_secret, "WebPush: info" 0x00 ua_public as_public, 32).
    let mut key_info = Vec::with_capacity(14 + 65 + 65);
    key_info.extend_from_slice(b"WebPush: info\0");
    key_info.extend_from_slice(&ua_bytes);
    key_info.extend_from_slice(&as_public);
    let mut ikm = [0u8; 32];
    Hkdf::<Sha256>::new(Some(auth), shared.raw_secret_bytes())
        .expand(&key_info, &mut ikm)
        .map_err(|_| EceError::Crypto)?;

    // RFC 8188 §2.2/2.3: the content-encryption key and the nonce (record 0: no XOR needed).
    let prk = Hkdf::<Sha256>::new(Some(salt), &ikm);
    let mut cek = [0u8; 16];
    let mut nonce = [0u8; 12];
    prk.expand(b"Content-Encoding: aes128gcm\0", &mut cek).map_err(|_| EceError::Crypto)?;
    prk.expand(b"Content-Encoding: nonce\0", &mut nonce).map_err(|_| EceError::Crypto)?;

    // The last (only) record ends with the delimiter 0x02 and no padding.
    let mut record = Vec::with_capacity(plaintext.len() + 1);
    record.extend_from_slice(plaintext);
    record.push(2);
    let cipher = Aes128Gcm::new_from_slice(&cek).map_err(|_| EceError::Crypto)?;
    let sealed =
        cipher.encrypt(Nonce::from_slice(&nonce), record.as_slice()).map_err(|_| EceError::Crypto)?;

    // RFC 8188 §2.1 header: salt (16) || rs (u32) || idlen (1) || keyid (the sender's key).
    let mut body = Vec::with_capacity(16 + 4 + 1 + as_public.len() + sealed.len());
    body.extend_from_slice(salt);
    body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
    body.push(as_public.len() as u8);
    body.extend_from_slice(&as_public);
    body.extend_from_slice(&sealed);
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;

    fn b(s: &str) -> Vec<u8> {
        B64.decode(s).unwrap()
    }

    /// RFC 8291, Appendix A: the same keys, salt and plaintext give the RFC's bytes.
    #[test]
    fn rfc8291_appendix_a() {
        let as_secret = SecretKey::from_slice(&b("yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw")).unwrap();
        assert_eq!(
            B64.encode(uncompressed(&as_secret.public_key())),
            "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
        );
        let ua_public = PublicKey::from_sec1_bytes(&b(
            "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4",
        ))
        .unwrap();
        let auth: [u8; 16] = b("BTBZMqHH6r4Tts7J_aSIgg").try_into().unwrap();
        let salt: [u8; 16] = b("DGv6ra1nlYgDCS1FRnbzlw").try_into().unwrap();
        let body =
            encrypt_with(b"When I grow up, I want to be a watermelon", &ua_public, &auth, &as_secret, &salt)
                .unwrap();
        assert_eq!(
            B64.encode(body),
            "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        );
    }

    #[test]
    fn fresh_keys_and_salt_every_time_and_oversized_payloads_are_refused() {
        let ua = random_secret().unwrap().public_key();
        let auth = [7u8; 16];
        let (a, b) = (encrypt(b"x", &ua, &auth).unwrap(), encrypt(b"x", &ua, &auth).unwrap());
        assert_eq!(a.len(), 16 + 4 + 1 + 65 + 1 + 1 + 16);
        assert_ne!(a[..16], b[..16], "a new salt");
        assert_ne!(a[21..86], b[21..86], "a new sender key");
        assert!(matches!(encrypt(&[0; MAX_PLAINTEXT + 1], &ua, &auth), Err(EceError::TooLarge(_))));
    }
}
