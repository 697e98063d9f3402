//! The hub's paired devices and its audit trail. A device is kept with the SHA-256 of its
//! credential, never the credential, or with the public key it signs challenges with (then its
//! "credential" hash is of random bytes nobody was given); the push endpoints a device registered are kept beside it
//! so that revoking it also silences them. The audit trail keeps the newest [`AUDIT_ROWS`] rows.

use super::{Store, StoreError, Writer};
use rusqlite::{OptionalExtension, params};

/// Audit rows kept at most: older ones are dropped as new ones come.
pub const AUDIT_ROWS: i64 = 10_000;

/// One paired device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceRow {
    /// Its id (random, URL-safe).
    pub id: String,
    /// The name a person gave it.
    pub name: String,
    /// `full` or `watch`.
    pub scope: String,
    /// SHA-256 of its credential.
    pub token_sha256: [u8; 32],
    /// When it was paired, epoch ms.
    pub created_at: i64,
    /// When it was last seen (a request with its credential), epoch ms.
    pub last_seen_at: Option<i64>,
    /// The P-256 public key (65 bytes, uncompressed) it signs challenges with, if it has one.
    pub public_key: Option<Vec<u8>>,
}

/// One audit record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRow {
    /// Its number (grows with time).
    pub id: i64,
    /// When, epoch ms.
    pub at: i64,
    /// Who: a device id, or `machine` for the machine's token.
    pub device_id: String,
    /// The device's name then.
    pub device_name: String,
    /// What: `pair`, `revoke`, `settings.write`, …
    pub action: String,
    /// On what (a path, a session, a device).
    pub target: String,
    /// The HTTP status it was answered with, when it was a request.
    pub status: Option<i64>,
}

impl Store {
    /// Every paired device, oldest first.
    pub fn devices(&self) -> Result<Vec<DeviceRow>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT id, name, scope, token_sha256, created_at, last_seen_at, public_key FROM devices
                 ORDER BY created_at, id",
            )?
            .query_map([], |r| {
                let hash: Vec<u8> = r.get(3)?;
                Ok(DeviceRow {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    scope: r.get(2)?,
                    token_sha256: hash.try_into().unwrap_or([0; 32]),
                    created_at: r.get(4)?,
                    last_seen_at: r.get(5)?,
                    public_key: r.get(6)?,
                })
            })?
            .collect::<Result<_, _>>()?)
    }

    /// The push endpoints device `id` registered.
    pub fn device_push_endpoints(&self, id: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached("SELECT endpoint FROM device_push WHERE device_id = ?1")?
            .query_map(params![id], |r| r.get(0))?
            .collect::<Result<_, _>>()?)
    }

    /// The newest `limit` audit rows, newest first, older than `before` (a row id) when given.
    pub fn audit(&self, limit: i64, before: Option<i64>) -> Result<Vec<AuditRow>, StoreError> {
        Ok(self
            .conn()
            .prepare_cached(
                "SELECT id, at, device_id, device_name, action, target, status FROM audit
                 WHERE id < ?2 ORDER BY id DESC LIMIT ?1",
            )?
            .query_map(params![limit, before.unwrap_or(i64::MAX)], |r| {
                Ok(AuditRow {
                    id: r.get(0)?,
                    at: r.get(1)?,
                    device_id: r.get(2)?,
                    device_name: r.get(3)?,
                    action: r.get(4)?,
                    target: r.get(5)?,
                    status: r.get(6)?,
                })
            })?
            .collect::<Result<_, _>>()?)
    }
}

impl Writer<'_> {
    /// Adds a paired device.
    pub fn device_add(&self, d: &DeviceRow) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "INSERT INTO devices (id, name, scope, token_sha256, created_at, last_seen_at, public_key)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                d.id,
                d.name,
                d.scope,
                &d.token_sha256[..],
                d.created_at,
                d.last_seen_at,
                d.public_key
            ])?;
        Ok(())
    }

    /// Gives device `id` the public key it signs with from now on, and replaces its credential's
    /// hash with `unusable` (the hash of bytes nobody holds): its old credential stops working.
    /// Whether it exists.
    pub fn device_set_key(&self, id: &str, key: &[u8], unusable: &[u8; 32]) -> Result<bool, StoreError> {
        let n = self
            .tx
            .prepare_cached("UPDATE devices SET public_key = ?2, token_sha256 = ?3 WHERE id = ?1")?
            .execute(params![id, key, &unusable[..]])?;
        Ok(n > 0)
    }

    /// Removes device `id` and its push endpoints (returned, for the caller to unsubscribe);
    /// `None` when no such device.
    pub fn device_remove(&self, id: &str) -> Result<Option<Vec<String>>, StoreError> {
        let n = self.tx.prepare_cached("DELETE FROM devices WHERE id = ?1")?.execute(params![id])?;
        if n == 0 {
            return Ok(None);
        }
        let endpoints: Vec<String> = self
            .tx
            .prepare_cached("DELETE FROM device_push WHERE device_id = ?1 RETURNING endpoint")?
            .query_map(params![id], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        Ok(Some(endpoints))
    }

    /// Renames device `id`; whether it exists.
    pub fn device_rename(&self, id: &str, name: &str) -> Result<bool, StoreError> {
        let n = self
            .tx
            .prepare_cached("UPDATE devices SET name = ?2 WHERE id = ?1")?
            .execute(params![id, name])?;
        Ok(n > 0)
    }

    /// Notes when device `id` was last seen.
    pub fn device_seen(&self, id: &str, at: i64) -> Result<(), StoreError> {
        self.tx
            .prepare_cached("UPDATE devices SET last_seen_at = ?2 WHERE id = ?1")?
            .execute(params![id, at])?;
        Ok(())
    }

    /// Records that device `id` registered push `endpoint` (a later owner replaces it).
    pub fn device_push(&self, id: &str, endpoint: &str) -> Result<(), StoreError> {
        let owner: Option<String> = self
            .tx
            .prepare_cached("SELECT device_id FROM device_push WHERE endpoint = ?1")?
            .query_row(params![endpoint], |r| r.get(0))
            .optional()?;
        if owner.as_deref() != Some(id) {
            self.tx
                .prepare_cached("INSERT OR REPLACE INTO device_push (endpoint, device_id) VALUES (?1, ?2)")?
                .execute(params![endpoint, id])?;
        }
        Ok(())
    }

    /// Records what a bridge saw a client do (`device_id` as the hub told it, or `machine` /
    /// `editor`): the device's name is its current one in `devices`, else `fallback_name`.
    pub fn audit_add_seen(&self, a: &AuditRow, fallback_name: &str) -> Result<(), StoreError> {
        let name: Option<String> = self
            .tx
            .prepare_cached("SELECT name FROM devices WHERE id = ?1")?
            .query_row(params![a.device_id], |r| r.get(0))
            .optional()?;
        let row = AuditRow { device_name: name.unwrap_or_else(|| fallback_name.to_owned()), ..a.clone() };
        self.audit_add(&row)
    }

    /// Appends an audit row (its `id` is ignored) and drops those beyond [`AUDIT_ROWS`].
    pub fn audit_add(&self, a: &AuditRow) -> Result<(), StoreError> {
        self.tx
            .prepare_cached(
                "INSERT INTO audit (at, device_id, device_name, action, target, status)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![a.at, a.device_id, a.device_name, a.action, a.target, a.status])?;
        let newest = self.tx.last_insert_rowid();
        self.tx.prepare_cached("DELETE FROM audit WHERE id <= ?1")?.execute(params![newest - AUDIT_ROWS])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(at: i64) -> AuditRow {
        AuditRow {
            id: 0,
            at,
            device_id: "d".into(),
            device_name: "phone".into(),
            action: "settings.write".into(),
            target: "/x".into(),
            status: Some(200),
        }
    }

    #[test]
    fn devices_are_added_renamed_and_removed_with_their_push_endpoints() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open_in(dir.path()).unwrap();
        let d = DeviceRow {
            id: "a".into(),
            name: "phone".into(),
            scope: "watch".into(),
            token_sha256: [7; 32],
            created_at: 1,
            last_seen_at: None,
            public_key: None,
        };
        s.write(|w| {
            w.device_add(&d)?;
            w.device_push("a", "https://push.example/1")?;
            w.device_seen("a", 5)?;
            w.device_rename("a", "tablet")
        })
        .unwrap();
        let got = s.read(|s| s.devices()).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].name.as_str(), got[0].last_seen_at, got[0].token_sha256),
            ("tablet", Some(5), [7; 32])
        );
        assert!(s.write(|w| w.device_set_key("a", &[4; 65], &[8; 32])).unwrap());
        let got = s.read(|s| s.devices()).unwrap();
        assert_eq!((got[0].public_key.as_deref(), got[0].token_sha256), (Some(&[4u8; 65][..]), [8; 32]));
        assert_eq!(
            s.write(|w| w.device_remove("a")).unwrap(),
            Some(vec!["https://push.example/1".to_owned()])
        );
        assert_eq!(s.write(|w| w.device_remove("a")).unwrap(), None);
        assert!(s.read(|s| s.devices()).unwrap().is_empty());
    }

    #[test]
    fn the_audit_trail_is_bounded_and_read_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open_in(dir.path()).unwrap();
        s.write(|w| {
            for at in 0..(AUDIT_ROWS + 5) {
                w.audit_add(&row(at))?;
            }
            Ok(())
        })
        .unwrap();
        let all = s.read(|s| s.audit(AUDIT_ROWS * 2, None)).unwrap();
        assert_eq!(all.len() as i64, AUDIT_ROWS);
        assert_eq!(all[0].at, AUDIT_ROWS + 4, "newest first");
        let page = s.read(|s| s.audit(2, Some(all[0].id))).unwrap();
        assert_eq!(page.iter().map(|r| r.at).collect::<Vec<_>>(), [AUDIT_ROWS + 3, AUDIT_ROWS + 2]);
    }
}
