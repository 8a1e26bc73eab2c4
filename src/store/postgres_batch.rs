//! Postgres's statements of a set-wise ingest batch ([`super::batch`]): each
//! column an array parameter, read by `UNNEST`.

use super::batch::{Answer, Job, Payload, Statements};
use super::*;
use sqlx::{Postgres, Transaction};

/// Where the listeners of new jobs are told: the channel, and the payload that
/// names the store that sent it.
pub struct PgStatements<'a> {
    pub channel: &'a str,
    pub token: &'a str,
}

impl Statements for PgStatements<'_> {
    type Db = Postgres;

    async fn seen(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        batch: &[Ingest],
    ) -> StoreResult<Option<Vec<(String, String)>>> {
        Ok(Some(
            sqlx::query_as(
                "SELECT r.tenant, r.identity FROM requests r
             JOIN UNNEST($1::text[], $2::text[]) AS u(t, i) ON r.tenant = u.t AND r.identity = u.i",
            )
            .bind(batch.iter().map(|r| r.tenant.as_str()).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.identity.as_str()).collect::<Vec<_>>())
            .fetch_all(&mut **tx)
            .await?,
        ))
    }

    async fn insert_events(&self, tx: &mut Transaction<'_, Postgres>, events: &[&Ingest]) -> StoreResult<Vec<String>> {
        let col = |f: fn(&Ingest) -> &str| events.iter().map(|r| f(r)).collect::<Vec<&str>>();
        Ok(sqlx::query_scalar(
            "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[])
             ON CONFLICT (event_key) DO NOTHING
             RETURNING event_key",
        )
        .bind(col(|r| &r.event_key))
        .bind(col(|r| &r.tenant))
        .bind(col(|r| &r.event_type))
        .bind(col(|r| &r.entity_type))
        .bind(col(|r| &r.entity_id))
        .bind(col(|r| &r.occurred_at))
        .bind(col(|r| &r.content_digest))
        .bind(events.iter().map(|r| r.now_us).collect::<Vec<_>>())
        .fetch_all(&mut **tx)
        .await?)
    }

    async fn touch_events(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        keys: &[&str],
        now_us: i64,
    ) -> StoreResult<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "UPDATE events SET created_at = GREATEST(created_at, $2) WHERE event_key = ANY($1)
             RETURNING event_key, content_digest",
        )
        .bind(keys)
        .bind(now_us)
        .fetch_all(&mut **tx)
        .await?)
    }

    async fn put_payloads(&self, tx: &mut Transaction<'_, Postgres>, payloads: &[Payload<'_>]) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO payloads (digest, body, created_at)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[])
             ON CONFLICT (digest) DO UPDATE SET created_at = excluded.created_at
             WHERE payloads.created_at < excluded.created_at",
        )
        .bind(payloads.iter().map(|p| p.digest).collect::<Vec<_>>())
        .bind(payloads.iter().map(|p| p.body).collect::<Vec<_>>())
        .bind(payloads.iter().map(|p| p.at).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn insert_intents(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        rows: &[(&Ingest, &NewIntent)],
    ) -> StoreResult<Vec<String>> {
        let text = |f: for<'a> fn(&'a Ingest, &'a NewIntent) -> &'a str| {
            rows.iter().map(|(r, i)| f(r, i)).collect::<Vec<&str>>()
        };
        let opt = |f: for<'a> fn(&'a Ingest, &'a NewIntent) -> Option<&'a str>| {
            rows.iter().map(|(r, i)| f(r, i)).collect::<Vec<Option<&str>>>()
        };
        Ok(sqlx::query_scalar(
            "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version, occurred_at,
                 channel, recipient_id, destination, locale, template_id, template_revision, event_digest,
                 payload_digest, decision, reason, detail, state, attempts, created_at, updated_at,
                 preferences_version, link_key, mode, traceparent)
             SELECT k, t, et, ent, eid, ev, oa, ch, rid, dst, loc, tid, trev, edg, pdg, dec, rsn, det, st, 0, ca, ca, pv, NULL, md, tp
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::text[],
                         $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[],
                         $16::text[], $17::text[], $18::text[], $19::text[], $20::bigint[], $21::bigint[], $22::text[],
                         $23::text[])
                  AS u(k, t, et, ent, eid, ev, oa, ch, rid, dst, loc, tid, trev, edg, pdg, dec, rsn, det, st, ca, pv, md, tp)
             ON CONFLICT (key) DO NOTHING
             RETURNING key",
        )
        .bind(text(|_, i| &i.key))
        .bind(text(|r, _| &r.tenant))
        .bind(text(|r, _| &r.event_type))
        .bind(text(|r, _| &r.entity_type))
        .bind(text(|r, _| &r.entity_id))
        .bind(rows.iter().map(|(r, _)| r.entity_version).collect::<Vec<_>>())
        .bind(text(|r, _| &r.occurred_at))
        .bind(text(|_, i| i.channel.as_str()))
        .bind(text(|_, i| &i.recipient_id))
        .bind(opt(|_, i| i.destination.as_deref()))
        .bind(opt(|_, i| i.locale.as_deref()))
        .bind(text(|_, i| &i.template_id))
        .bind(opt(|_, i| i.template_revision.as_deref()))
        .bind(text(|r, _| &r.fingerprint))
        .bind(opt(|_, i| i.payload.as_ref().map(|(d, _)| d.as_str())))
        .bind(text(|_, i| i.decision.as_str()))
        .bind(opt(|_, i| i.reason.map(crate::intent::Reason::as_str)))
        .bind(opt(|_, i| i.detail.as_deref()))
        .bind(text(|_, i| i.state.as_str()))
        .bind(rows.iter().map(|(r, _)| r.now_us).collect::<Vec<_>>())
        .bind(rows.iter().map(|(_, i)| i.preferences_version).collect::<Vec<_>>())
        .bind(text(|_, i| i.mode.as_str()))
        .bind(opt(|r, _| r.traceparent.as_deref()))
        .fetch_all(&mut **tx)
        .await?)
    }

    async fn intents_status(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        keys: &[&str],
    ) -> StoreResult<Vec<IntentStatus>> {
        Ok(sqlx::query_as("SELECT key, decision, reason, state, mode FROM intents WHERE key = ANY($1)")
            .bind(keys)
            .fetch_all(&mut **tx)
            .await?)
    }

    /// The jobs, and in the same statement the notification of listeners
    /// (delivered when the transaction commits).
    async fn queue_jobs(&self, tx: &mut Transaction<'_, Postgres>, jobs: &[Job<'_>]) -> StoreResult<()> {
        sqlx::query(
            "WITH queued AS (
                 INSERT INTO jobs (intent_key, tenant, run_at, traceparent)
                 SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[]))
             SELECT pg_notify($5, $6)",
        )
        .bind(jobs.iter().map(|j| j.key).collect::<Vec<_>>())
        .bind(jobs.iter().map(|j| j.tenant).collect::<Vec<_>>())
        .bind(jobs.iter().map(|j| j.run_at).collect::<Vec<_>>())
        .bind(jobs.iter().map(|j| j.traceparent).collect::<Vec<_>>())
        .bind(self.channel)
        .bind(self.token)
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    async fn record_requests(&self, tx: &mut Transaction<'_, Postgres>, answers: &[Answer<'_>]) -> StoreResult<u64> {
        Ok(sqlx::query(
            "INSERT INTO requests (tenant, identity, fingerprint, created_at, status, response)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[])
             ON CONFLICT (tenant, identity) DO NOTHING",
        )
        .bind(answers.iter().map(|a| a.request.tenant.as_str()).collect::<Vec<_>>())
        .bind(answers.iter().map(|a| a.request.identity.as_str()).collect::<Vec<_>>())
        .bind(answers.iter().map(|a| a.request.fingerprint.as_str()).collect::<Vec<_>>())
        .bind(answers.iter().map(|a| a.request.now_us).collect::<Vec<_>>())
        .bind(answers.iter().map(|a| a.status).collect::<Vec<_>>())
        .bind(answers.iter().map(|a| a.response.as_str()).collect::<Vec<_>>())
        .execute(&mut **tx)
        .await?
        .rows_affected())
    }
}
