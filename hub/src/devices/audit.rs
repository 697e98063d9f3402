//! The audit trail: what a device did, when, to what, kept in the store (the newest 10 000
//! rows) and read at `GET /api/audit`. The hub records what it sees at the HTTP level:
//! pairing, revocations and renames, session create/resume/close/rename/delete, project
//! deletes, settings writes, backend restarts, upgrades and token rotations, permissions
//! answered over HTTP (a notification's Allow or Deny), each with the answer's status (a
//! refusal is recorded too). Prompts and permission answers sent on a session's WebSocket
//! travel inside the byte-level relay, which the hub does not parse: the bridge records those.

use crate::Hub;
use crate::auth::Principal;
use hyper::Method;
use zcode_shared::store::devices::AuditRow;

/// The action and target a request is recorded under, if it is one the trail keeps.
pub fn action_of(method: &Method, path: &str) -> Option<(&'static str, String)> {
    let reading = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    if reading {
        return None;
    }
    match (method, path) {
        (&Method::POST, "/api/instances") => return Some(("session.create", String::new())),
        (&Method::POST, "/api/projects/delete") => return Some(("project.delete", String::new())),
        (&Method::POST, "/api/upgrade") => return Some(("hub.upgrade", String::new())),
        (&Method::POST, "/api/pairing") => return Some(("pairing.code", String::new())),
        (&Method::POST, "/api/pair/key") => return Some(("device.key", String::new())),
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/api/settings/") {
        return Some(("settings.write", format!("/settings/{rest}")));
    }
    if let Some(id) = path.strip_prefix("/api/devices/") {
        let action = if *method == Method::DELETE { "device.revoke" } else { "device.rename" };
        return Some((action, format!("device {id}")));
    }
    let (instance, rest) = path.strip_prefix("/api/instances/")?.split_once('/')?;
    if rest == "backend/restart" {
        return Some(("backend.restart", format!("instance {instance}")));
    }
    if rest.starts_with("settings/") {
        return Some(("settings.write", format!("instance {instance}: /{rest}")));
    }
    let in_session = rest.strip_prefix("sessions/")?;
    if let Some((session, request)) =
        in_session.split_once('/').and_then(|(s, r)| Some((s, r.strip_prefix("permissions/")?)))
    {
        let target = format!("instance {instance} session {session} request {request}");
        return Some(("permission.answer", target));
    }
    let (session, verb) = in_session.rsplit_once('/')?;
    let action = match verb {
        "close" => "session.close",
        "rename" => "session.rename",
        "delete" => "session.delete",
        _ => return None,
    };
    Some((action, format!("instance {instance} session {session}")))
}

/// Records that `who` did `action` on `target`, answered `status` (none: not a request).
pub async fn record(hub: &Hub, who: &Principal, action: &str, target: String, status: Option<u16>) {
    let row = AuditRow {
        id: 0,
        at: zcode_shared::time::now_ms() as i64,
        device_id: who.device_id().to_owned(),
        device_name: who.name.clone(),
        action: action.to_owned(),
        target,
        status: status.map(i64::from),
    };
    let stored = hub.store.run(move |st| st.write(|w| w.audit_add(&row))).await;
    if let Err(e) = stored.and_then(|r| r.map_err(|e| e.to_string())) {
        tracing::warn!(action, "cannot write the audit trail: {e}");
    }
}

/// The newest `limit` rows (older than row `before` when given), as `GET /api/audit` answers.
pub async fn read(hub: &Hub, limit: i64, before: Option<i64>) -> Result<serde_json::Value, String> {
    let rows =
        hub.store.run(move |st| st.read(|s| s.audit(limit, before))).await?.map_err(|e| e.to_string())?;
    let entries: Vec<_> = rows
        .into_iter()
        .map(|r| {
            serde_json::json!({
                "id": r.id,
                "at": r.at,
                "deviceId": r.device_id,
                "deviceName": r.device_name,
                "action": r.action,
                "target": r.target,
                "status": r.status,
            })
        })
        .collect();
    Ok(serde_json::json!({ "entries": entries }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trail_keeps_changes_and_leaves_reads_out() {
        let post = Method::POST;
        assert_eq!(action_of(&Method::GET, "/api/instances"), None);
        assert_eq!(action_of(&post, "/api/instances").unwrap().0, "session.create");
        assert_eq!(
            action_of(&post, "/api/instances/42/sessions/s1/rename"),
            Some(("session.rename", "instance 42 session s1".to_owned()))
        );
        assert_eq!(action_of(&Method::PUT, "/api/settings/mcp/x").unwrap().0, "settings.write");
        assert_eq!(action_of(&post, "/api/instances/42/backend/restart").unwrap().0, "backend.restart");
        assert_eq!(action_of(&Method::DELETE, "/api/devices/abc").unwrap().0, "device.revoke");
        assert_eq!(action_of(&post, "/api/push/subscriptions"), None);
        assert_eq!(
            action_of(&post, "/api/instances/42/sessions/s1/permissions/7"),
            Some(("permission.answer", "instance 42 session s1 request 7".to_owned()))
        );
    }
}
