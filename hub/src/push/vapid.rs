//! RFC 8292 VAPID: the hub's P-256 key pair, kept in `<data>/push/vapid.json` (0600, made on
//! first use), and the `Authorization: vapid t=<JWT>, k=<key>` header that identifies the hub
//! to a push service. The JWT is ES256 over `{aud: the endpoint's origin, exp, sub}`.

use super::ece;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use p256::SecretKey;
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// How long a signed token is valid: RFC 8292 allows at most 24 h; half leaves room for a
/// push service's clock being ahead.
pub const TOKEN_LIFETIME_SECS: u64 = 12 * 3600;

/// The hub's VAPID key pair.
pub struct Keys {
    signing: SigningKey,
    /// The public key, uncompressed, base64url without padding: what browsers take as
    /// `applicationServerKey` and what `k=` carries.
    public: String,
}

/// Why the key pair could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file exists but is not ours to read or not a key.
    #[error("{path}: {reason} (remove the file to make a new key pair; every device then subscribes again)")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A new key pair could not be saved.
    #[error("cannot save the push key pair to {path}: {source}")]
    Save {
        /// The file.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// No randomness.
    #[error(transparent)]
    Random(#[from] ece::EceError),
}

impl Keys {
    /// A key pair over `secret`.
    pub fn from_secret(secret: &SecretKey) -> Keys {
        Keys {
            signing: SigningKey::from(secret),
            public: B64.encode(ece::uncompressed(&secret.public_key())),
        }
    }

    /// The key pair in `file`, made (and saved, 0600, in a 0700 directory) when there is none.
    pub fn load_or_create(file: &Path) -> Result<Keys, KeyError> {
        let unreadable = |reason: String| KeyError::Unreadable { path: file.to_owned(), reason };
        match std::fs::read(file) {
            Ok(bytes) => {
                let v: Value =
                    serde_json::from_slice(&bytes).map_err(|e| unreadable(format!("not JSON: {e}")))?;
                let d = v["privateKey"].as_str().ok_or_else(|| unreadable("no privateKey".into()))?;
                let d = B64.decode(d).map_err(|_| unreadable("privateKey is not base64url".into()))?;
                let secret = SecretKey::from_slice(&d)
                    .map_err(|_| unreadable("privateKey is not a P-256 key".into()))?;
                Ok(Keys::from_secret(&secret))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let secret = ece::random_secret()?;
                let keys = Keys::from_secret(&secret);
                let text = json!({"privateKey": B64.encode(secret.to_bytes()), "publicKey": keys.public});
                let save = |source| KeyError::Save { path: file.to_owned(), source };
                if let Some(dir) = file.parent() {
                    zcode_shared::paths::Paths::ensure_private_dir(dir).map_err(save)?;
                }
                zcode_shared::config::write_private_atomic(file, format!("{text:#}\n").as_bytes())
                    .map_err(save)?;
                tracing::info!(file = %file.display(), "made the hub's Web Push (VAPID) key pair");
                Ok(keys)
            }
            Err(e) => Err(unreadable(e.to_string())),
        }
    }

    /// The public key, base64url (uncompressed point).
    pub fn public(&self) -> &str {
        &self.public
    }

    /// The `Authorization` value for a push to `audience` (the endpoint's origin) at `now`
    /// (epoch seconds), naming `subject` (`mailto:` or `https:`) as the contact.
    pub fn authorization(&self, audience: &str, subject: &str, now: u64) -> String {
        let header = B64.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = json!({"aud": audience, "exp": now + TOKEN_LIFETIME_SECS, "sub": subject});
        let signed = format!("{header}.{}", B64.encode(claims.to_string()));
        // ES256 (RFC 7518 §3.4): the signature is r || s, 64 bytes; RFC 6979 nonces.
        let sig: Signature = self.signing.sign(signed.as_bytes());
        format!("vapid t={signed}.{}, k={}", B64.encode(sig.to_bytes()), self.public)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::VerifyingKey;
    use p256::ecdsa::signature::Verifier;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn made_once_private_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("push/vapid.json");
        let a = Keys::load_or_create(&file).unwrap();
        assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(file.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        let b = Keys::load_or_create(&file).unwrap();
        assert_eq!(a.public(), b.public(), "the same pair after a restart");
        assert_eq!(B64.decode(a.public()).unwrap().len(), 65);

        std::fs::write(&file, "{}").unwrap();
        let e = Keys::load_or_create(&file).err().unwrap().to_string();
        assert!(e.contains("vapid.json") && e.contains("remove the file"), "{e}");
    }

    #[test]
    fn the_token_is_es256_over_aud_exp_sub() {
        let keys = Keys::from_secret(&ece::random_secret().unwrap());
        let auth = keys.authorization("https://push.example.net", "mailto:me@example.com", 1_000);
        let (t, k) = auth.strip_prefix("vapid t=").unwrap().split_once(", k=").unwrap();
        assert_eq!(k, keys.public());
        let (signed, sig) = t.rsplit_once('.').unwrap();
        let vk = VerifyingKey::from_sec1_bytes(&B64.decode(k).unwrap()).unwrap();
        let sig = Signature::from_slice(&B64.decode(sig).unwrap()).unwrap();
        vk.verify(signed.as_bytes(), &sig).unwrap();
        let (head, claims) = signed.split_once('.').unwrap();
        let head: Value = serde_json::from_slice(&B64.decode(head).unwrap()).unwrap();
        let claims: Value = serde_json::from_slice(&B64.decode(claims).unwrap()).unwrap();
        assert_eq!(head["alg"], "ES256");
        assert_eq!(
            claims,
            json!({"aud": "https://push.example.net", "exp": 1_000 + 12 * 3600,
                                  "sub": "mailto:me@example.com"})
        );
    }
}
