//! Token usage: what bridges record from ACP (`session/prompt` answers' `usage`, and
//! `usage_update` notifications), and the contract's usage payload read back from it.
//!
//! Two kinds of rows in `usage_events`, per session, turn and model:
//! - `prompt`: one per `session/prompt` answer that carries `usage`. Its token counts are the
//!   turn's own (the End-Turn Token Usage draft's strawman; every agent seen reports them per
//!   turn) and are the only tokens ever summed, so nothing is counted twice.
//! - `update`: one per `usage_update` that adds cost. That notification describes the SESSION
//!   (tokens now in the context window, `used`/`size`, and the cumulative `cost`), so `used` is
//!   never added to token totals (the latest is kept per session in `usage_sessions`), and only
//!   the part of `cost` above the highest cumulative cost seen for that session (and currency)
//!   is counted: a repeated, replayed (`session/load`) or out-of-order notification adds
//!   nothing, and writes no row.
//!
//! Days are UTC days. `7d` is today and the six days before it, `30d` likewise; `all` is all.

use super::{Store, StoreError, Writer};
use rusqlite::{OptionalExtension, params};
use serde_json::{Value, json};
use std::collections::BTreeMap;

const DAY_MS: i64 = 86_400_000;

/// The token counts of one finished turn, as the agent reported them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnUsage {
    /// When it was recorded, epoch ms.
    pub at: u64,
    /// The ACP session id.
    pub session: String,
    /// The model that ran the turn (`unknown` when the agent never said).
    pub model: String,
    /// Input tokens.
    pub input: u64,
    /// Output tokens.
    pub output: u64,
    /// Thought (reasoning) tokens.
    pub reasoning: u64,
    /// Tokens read from the prompt cache.
    pub cache_read: u64,
    /// Tokens written to the prompt cache.
    pub cache_write: u64,
    /// The agent's total.
    pub total: u64,
    /// Tool calls the turn made.
    pub tool_calls: u64,
}

/// One `usage_update`: the session's context window and cumulative cost.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ContextUsage {
    /// When it was recorded, epoch ms.
    pub at: u64,
    /// The ACP session id.
    pub session: String,
    /// The model in use then.
    pub model: String,
    /// Whether a turn was running (the update belongs to the next turn then).
    pub running: bool,
    /// Tokens in the context window.
    pub used: Option<u64>,
    /// The context window's size.
    pub size: Option<u64>,
    /// Cumulative session cost and its currency.
    pub cost: Option<(f64, String)>,
}

/// The range a usage report covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsageRange {
    /// Today and the 6 days before (UTC).
    Week,
    /// Today and the 29 days before (UTC).
    Month,
    /// Everything recorded.
    All,
}

impl UsageRange {
    /// Parses `7d`, `30d` or `all`.
    pub fn parse(s: &str) -> Option<UsageRange> {
        match s {
            "7d" => Some(UsageRange::Week),
            "30d" => Some(UsageRange::Month),
            "all" => Some(UsageRange::All),
            _ => None,
        }
    }

    /// Its spelling in the payload.
    pub fn as_str(self) -> &'static str {
        match self {
            UsageRange::Week => "7d",
            UsageRange::Month => "30d",
            UsageRange::All => "all",
        }
    }

    /// The first epoch ms it covers, given `now`.
    fn since(self, now: u64) -> i64 {
        let today = (now as i64).div_euclid(DAY_MS) * DAY_MS;
        match self {
            UsageRange::Week => today - 6 * DAY_MS,
            UsageRange::Month => today - 29 * DAY_MS,
            UsageRange::All => i64::MIN,
        }
    }
}

/// The range named by a request's `range` query value: absent means `7d`; anything else than
/// `7d`, `30d` or `all` is the error text of a 400.
pub fn range_param(value: Option<&str>) -> Result<UsageRange, String> {
    match value {
        None => Ok(UsageRange::Week),
        Some(v) => UsageRange::parse(v).ok_or_else(|| {
            let shown: String = v.chars().take(40).flat_map(char::escape_default).collect();
            format!("invalid range \"{shown}\": expected 7d, 30d or all")
        }),
    }
}

fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Writer<'_> {
    /// Records a finished turn's usage; returns the turn's number in the session's usage.
    pub fn record_turn_usage(&self, u: &TurnUsage) -> Result<i64, StoreError> {
        let turn: i64 = self
            .tx
            .prepare_cached(
                "INSERT INTO usage_sessions (session_id, turns) VALUES (?1, 1)
                 ON CONFLICT(session_id) DO UPDATE SET turns = turns + 1 RETURNING turns",
            )?
            .query_row(params![u.session], |r| r.get(0))?;
        self.tx
            .prepare_cached(
                "INSERT INTO usage_events (at, session_id, turn, model, source, input_tokens,
                    output_tokens, reasoning_tokens, cache_read_tokens, cache_write_tokens,
                    total_tokens, tool_calls)
                 VALUES (?1, ?2, ?3, ?4, 'prompt', ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                int(u.at),
                u.session,
                turn,
                u.model,
                int(u.input),
                int(u.output),
                int(u.reasoning),
                int(u.cache_read),
                int(u.cache_write),
                int(u.total),
                int(u.tool_calls)
            ])?;
        Ok(turn)
    }

    /// Records a `usage_update`; returns the cost it added (the part of the cumulative cost
    /// above the highest seen for the session in that currency; 0 when none). The session's
    /// latest context window is kept in `usage_sessions`; a row of `usage_events` is written
    /// only for an update that adds cost, so a chatty agent does not grow the table.
    pub fn record_context_usage(&self, u: &ContextUsage) -> Result<f64, StoreError> {
        let seen: Option<(i64, Option<f64>, Option<String>)> = self
            .tx
            .prepare_cached("SELECT turns, cost_seen, currency FROM usage_sessions WHERE session_id = ?1")?
            .query_row(params![u.session], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?;
        let (turns, cost_seen, currency) = seen.unwrap_or((0, None, None));
        let mut added = 0.0;
        let mut keep = (cost_seen, currency);
        if let Some((amount, cur)) = u.cost.as_ref().filter(|(a, _)| a.is_finite() && *a >= 0.0) {
            let base = if keep.1.as_deref() == Some(cur.as_str()) { keep.0.unwrap_or(0.0) } else { 0.0 };
            if *amount > base {
                added = amount - base;
            }
            keep = (Some(base.max(*amount)), Some(cur.clone()));
        }
        self.tx
            .prepare_cached(
                "INSERT INTO usage_sessions (session_id, turns, cost_seen, currency, context_used,
                    context_size, context_at)
                 VALUES (?1, 0, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT(session_id) DO UPDATE SET cost_seen = ?2, currency = ?3,
                    context_used = ?4, context_size = ?5, context_at = ?6",
            )?
            .execute(params![u.session, keep.0, keep.1, u.used.map(int), u.size.map(int), int(u.at)])?;
        if added > 0.0 {
            let turn = turns + i64::from(u.running);
            self.tx
                .prepare_cached(
                    "INSERT INTO usage_events (at, session_id, turn, model, source, context_used,
                        context_size, cost, currency)
                     VALUES (?1, ?2, ?3, ?4, 'update', ?5, ?6, ?7, ?8)",
                )?
                .execute(params![
                    int(u.at),
                    u.session,
                    turn,
                    u.model,
                    u.used.map(int),
                    u.size.map(int),
                    added,
                    keep.1
                ])?;
        }
        Ok(added)
    }
}

/// Per-model sums of one range.
#[derive(Default)]
struct ModelSums {
    total: i64,
    input: i64,
    output: i64,
    reasoning: i64,
    cache_read: i64,
    cache_write: i64,
    requests: i64,
    cost: BTreeMap<String, f64>,
}

fn costs(map: &BTreeMap<String, f64>) -> Value {
    let rows: Vec<Value> =
        map.iter().map(|(c, a)| json!({"currency": c, "amount": (a * 1e6).round() / 1e6})).collect();
    Value::Array(rows)
}

impl Store {
    /// Whether any usage was ever recorded on this machine (a turn's counts, or a session's
    /// context window or cost).
    pub fn usage_recorded(&self) -> Result<bool, StoreError> {
        Ok(self.conn().query_row("SELECT EXISTS (SELECT 1 FROM usage_sessions)", [], |r| r.get(0))?)
    }

    /// The contract's usage payload for `range`, as of `now` (epoch ms).
    pub fn usage_report(&self, range: UsageRange, now: u64) -> Result<Value, StoreError> {
        let since = range.since(now);
        let conn = self.conn();
        let mut models: BTreeMap<String, ModelSums> = BTreeMap::new();
        let mut stmt = conn.prepare_cached(
            "SELECT model, SUM(total_tokens), SUM(input_tokens), SUM(output_tokens),
                SUM(reasoning_tokens), SUM(cache_read_tokens), SUM(cache_write_tokens),
                SUM(source = 'prompt'), currency, SUM(cost)
             FROM usage_events WHERE at >= ?1 GROUP BY model, currency",
        )?;
        let rows = stmt.query_map(params![since], |r| {
            Ok((
                r.get::<_, String>(0)?,
                [r.get::<_, i64>(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?],
                r.get::<_, Option<String>>(8)?,
                r.get::<_, Option<f64>>(9)?,
            ))
        })?;
        for row in rows {
            let (model, n, currency, cost) = row?;
            let m = models.entry(model).or_default();
            m.total += n[0];
            m.input += n[1];
            m.output += n[2];
            m.reasoning += n[3];
            m.cache_read += n[4];
            m.cache_write += n[5];
            m.requests += n[6];
            if let (Some(c), Some(a)) = (currency, cost) {
                *m.cost.entry(c).or_default() += a;
            }
        }
        // A model with nothing to show (e.g. context updates before the first turn) is left out.
        models.retain(|_, m| m.total > 0 || m.requests > 0 || !m.cost.is_empty());
        let grand: i64 = models.values().map(|m| m.total).sum();
        let mut sum = ModelSums::default();
        let mut rows: Vec<(&String, &ModelSums)> = models.iter().collect();
        rows.sort_by(|a, b| b.1.total.cmp(&a.1.total).then(a.0.cmp(b.0)));
        let mut list = Vec::new();
        for (id, m) in rows {
            sum.total += m.total;
            sum.input += m.input;
            sum.output += m.output;
            sum.reasoning += m.reasoning;
            sum.cache_read += m.cache_read;
            sum.cache_write += m.cache_write;
            sum.requests += m.requests;
            for (c, a) in &m.cost {
                *sum.cost.entry(c.clone()).or_default() += a;
            }
            let share =
                if grand > 0 { (m.total as f64 / grand as f64 * 10_000.0).round() / 10_000.0 } else { 0.0 };
            list.push(json!({
                "modelId": id, "totalTokens": m.total, "inputTokens": m.input, "outputTokens": m.output,
                "reasoningTokens": m.reasoning, "cacheReadTokens": m.cache_read,
                "cacheWriteTokens": m.cache_write, "requestCount": m.requests, "share": share,
                "cost": costs(&m.cost),
            }));
        }
        let (sessions, turns, tools, days): (i64, i64, i64, i64) = conn.query_row(
            "SELECT COUNT(DISTINCT session_id),
                COUNT(DISTINCT CASE WHEN source = 'prompt' THEN session_id || char(10) || turn END),
                COALESCE(SUM(tool_calls), 0), COUNT(DISTINCT at / 86400000)
             FROM usage_events WHERE at >= ?1 AND (source = 'prompt' OR cost IS NOT NULL)",
            params![since],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        let mut daily: BTreeMap<i64, Vec<Value>> = BTreeMap::new();
        let mut stmt = conn.prepare_cached(
            "SELECT at / 86400000 AS day, model, SUM(total_tokens) FROM usage_events
             WHERE at >= ?1 AND source = 'prompt' GROUP BY day, model ORDER BY day, SUM(total_tokens) DESC, model",
        )?;
        let rows = stmt.query_map(params![since], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?))
        })?;
        for row in rows {
            let (day, model, total) = row?;
            daily.entry(day).or_default().push(json!({"modelId": model, "totalTokens": total}));
        }
        let daily: Vec<Value> = daily
            .into_iter()
            .map(|(day, models)| {
                let date = crate::time::iso8601((day.max(0) * DAY_MS) as u64)[..10].to_owned();
                json!({"date": date, "models": models})
            })
            .collect();
        Ok(json!({
            "available": self.usage_recorded()?,
            "range": range.as_str(),
            "summary": {
                "totalTokens": sum.total, "inputTokens": sum.input, "outputTokens": sum.output,
                "reasoningTokens": sum.reasoning, "cacheReadTokens": sum.cache_read,
                "cacheWriteTokens": sum.cache_write, "requestCount": sum.requests,
                "sessionCount": sessions, "turnCount": turns, "toolCallCount": tools,
                "models": list.len(), "activeDays": days, "cost": costs(&sum.cost),
            },
            "models": list,
            "daily": daily,
        }))
    }
}

/// The payload for a machine without a store: nothing recorded, zeros.
pub fn empty_report(range: UsageRange) -> Value {
    json!({
        "available": false,
        "range": range.as_str(),
        "summary": {
            "totalTokens": 0, "inputTokens": 0, "outputTokens": 0, "reasoningTokens": 0,
            "cacheReadTokens": 0, "cacheWriteTokens": 0, "requestCount": 0, "sessionCount": 0,
            "turnCount": 0, "toolCallCount": 0, "models": 0, "activeDays": 0, "cost": [],
        },
        "models": [],
        "daily": [],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let st = Store::open_in(dir.path()).unwrap();
        (dir, st)
    }

    fn turn(at: u64, session: &str, model: &str, input: u64, output: u64) -> TurnUsage {
        TurnUsage {
            at,
            session: session.into(),
            model: model.into(),
            input,
            output,
            total: input + output,
            ..TurnUsage::default()
        }
    }

    const NOW: u64 = 1_790_000_000_000; // 2026-09-21T12:53:20Z

    #[test]
    fn nothing_recorded_is_unavailable_with_zeros() {
        let (_d, st) = store();
        let r = st.usage_report(UsageRange::All, NOW).unwrap();
        assert_eq!(r, empty_report(UsageRange::All));
    }

    #[test]
    fn sums_shares_days_and_ranges() {
        let (_d, mut st) = store();
        let day = DAY_MS as u64;
        st.write(|w| {
            assert_eq!(w.record_turn_usage(&turn(NOW, "s1", "a", 100, 50))?, 1);
            assert_eq!(w.record_turn_usage(&turn(NOW - day, "s1", "b", 30, 20))?, 2);
            w.record_turn_usage(&turn(NOW - 10 * day, "s2", "a", 1000, 0))?;
            Ok(())
        })
        .unwrap();
        let week = st.usage_report(UsageRange::Week, NOW).unwrap();
        assert_eq!(week["available"], true);
        assert_eq!(week["summary"]["totalTokens"], 200);
        assert_eq!(week["summary"]["requestCount"], 2);
        assert_eq!(week["summary"]["turnCount"], 2);
        assert_eq!(week["summary"]["sessionCount"], 1);
        assert_eq!(week["summary"]["activeDays"], 2);
        assert_eq!(week["models"][0]["modelId"], "a");
        assert_eq!(week["models"][0]["share"], 0.75);
        assert_eq!(week["models"][1]["share"], 0.25);
        assert_eq!(week["daily"][0]["date"], "2026-09-20");
        assert_eq!(week["daily"][1]["date"], "2026-09-21");
        assert_eq!(week["daily"][1]["models"], json!([{"modelId": "a", "totalTokens": 150}]));
        let month = st.usage_report(UsageRange::Month, NOW).unwrap();
        assert_eq!(month["summary"]["totalTokens"], 1200);
        assert_eq!(month["summary"]["sessionCount"], 2);
        assert_eq!(st.usage_report(UsageRange::All, NOW).unwrap()["daily"].as_array().unwrap().len(), 3);
        // Nothing in range, but something was recorded once: available, zeros.
        let later = st.usage_report(UsageRange::Week, NOW + 40 * day).unwrap();
        assert_eq!(later["available"], true);
        assert_eq!(later["summary"]["totalTokens"], 0);
        assert_eq!(later["models"], json!([]));
    }

    #[test]
    fn cumulative_cost_is_counted_once() {
        let (_d, mut st) = store();
        let upd = |amount: f64| ContextUsage {
            at: NOW,
            session: "s".into(),
            model: "a".into(),
            running: true,
            used: Some(5000),
            size: Some(200_000),
            cost: Some((amount, "USD".into())),
        };
        st.write(|w| {
            assert_eq!(w.record_context_usage(&upd(0.5))?, 0.5);
            assert_eq!(w.record_context_usage(&upd(0.5))?, 0.0, "a repeat adds nothing");
            assert_eq!(w.record_context_usage(&upd(0.2))?, 0.0, "a replayed older total adds nothing");
            assert!((w.record_context_usage(&upd(0.75))? - 0.25).abs() < 1e-9);
            Ok(())
        })
        .unwrap();
        let rows: i64 = st.conn().query_row("SELECT count(*) FROM usage_events", [], |r| r.get(0)).unwrap();
        assert_eq!(rows, 2, "only the updates that added cost are rows");
        let r = st.usage_report(UsageRange::All, NOW).unwrap();
        assert_eq!(r["summary"]["cost"], json!([{"currency": "USD", "amount": 0.75}]));
        assert_eq!(r["summary"]["totalTokens"], 0, "context occupancy is never counted as tokens");
        assert_eq!(r["models"][0]["cost"], json!([{"currency": "USD", "amount": 0.75}]));
    }

    #[test]
    fn context_alone_is_recorded_but_counts_nothing() {
        let (_d, mut st) = store();
        let u = ContextUsage {
            at: NOW,
            session: "s".into(),
            model: "a".into(),
            used: Some(9),
            size: Some(10),
            ..ContextUsage::default()
        };
        assert_eq!(st.write(|w| w.record_context_usage(&u)).unwrap(), 0.0);
        let r = st.usage_report(UsageRange::Week, NOW).unwrap();
        assert_eq!(r["available"], true, "something was recorded");
        assert_eq!(r["summary"]["totalTokens"], 0);
        assert_eq!(r["models"], json!([]));
    }

    #[test]
    fn ranges_parse() {
        assert_eq!(range_param(None), Ok(UsageRange::Week));
        assert_eq!(range_param(Some("30d")), Ok(UsageRange::Month));
        assert_eq!(range_param(Some("all")), Ok(UsageRange::All));
        for bad in ["", "7", "1y", "7D", "all "] {
            assert!(range_param(Some(bad)).unwrap_err().contains("expected 7d, 30d or all"), "{bad}");
        }
    }
}
