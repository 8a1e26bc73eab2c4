//! The ingest decision, made in one place: what becomes of a request, given
//! what the database holds for its request identity and its event key.
//!
//! Every write path asks it — the read before planning, the set-wise batch,
//! the savepoint path, a request whose record another transaction wrote
//! first — so they cannot answer one request two ways. What differs between
//! the paths is only how they learn the facts: one reads them first, another
//! learns them from what an insert found.
//!
//! The order of the rules is the contract's (DESIGN §4): the identity decides
//! before the event, so a reused `Idempotency-Key` with another body is a
//! mismatch (422) even when its event is also in conflict (409).

/// What the database holds for a request's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// No record: the identity is new (or was not read: an insert of the
    /// record will find out).
    Absent,
    /// A record, taken for the request with this fingerprint; `answered` is
    /// false while the request that took it has not stored its response.
    Taken { fingerprint: &'a str, answered: bool },
}

/// What the database holds for a request's event key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// Not read: the record decides alone, and a request it lets through
    /// is decided again when its event's record is written.
    Unread,
    /// No content record: this request's content becomes the event's.
    New,
    /// Accepted before, with this content digest.
    Accepted { content_digest: &'a str },
    /// An insert found a record, and it was gone when read (retention
    /// pruned it in between).
    Vanished,
}

/// What a request is answered, or what is done with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The same request again: the stored answer, its intents as they are now.
    Replay,
    /// Another request used this identity (422).
    Mismatch,
    /// The event key was accepted with other content (409); nothing is written.
    Conflict,
    /// Write its rows: a new event, or the same event under another identity
    /// (its intents exist already and are answered as they stand).
    Write,
    /// Not decidable on these facts; read them again.
    Again,
}

/// The request's own side of the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// Of the whole request (identity, body): a reused identity is a replay
    /// only when this matches.
    pub fingerprint: &'a str,
    /// Of the event's content alone.
    pub content_digest: &'a str,
}

impl<'a> Request<'a> {
    pub fn of(ingest: &'a super::Ingest) -> Request<'a> {
        Request { fingerprint: &ingest.fingerprint, content_digest: &ingest.content_digest }
    }
}

/// The one decision.
pub fn decide(request: Request<'_>, record: Record<'_>, event: Event<'_>) -> Verdict {
    match record {
        Record::Taken { fingerprint, .. } if fingerprint != request.fingerprint => return Verdict::Mismatch,
        Record::Taken { answered: true, .. } => return Verdict::Replay,
        // Taken by this same request, not yet answered: its writer is still
        // at work. Decided as new here; the record's insert will meet the
        // other's and the request is decided again on what that one stored.
        Record::Taken { answered: false, .. } | Record::Absent => {}
    }
    match event {
        Event::Unread | Event::New => Verdict::Write,
        Event::Accepted { content_digest } if content_digest == request.content_digest => Verdict::Write,
        Event::Accepted { .. } => Verdict::Conflict,
        Event::Vanished => Verdict::Again,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const R: Request<'static> = Request { fingerprint: "f1", content_digest: "c1" };

    #[test]
    fn the_identity_decides_before_the_event() {
        let other = Record::Taken { fingerprint: "f2", answered: true };
        let conflict = Event::Accepted { content_digest: "c2" };
        assert_eq!(decide(R, other, conflict), Verdict::Mismatch);
        let same = Record::Taken { fingerprint: "f1", answered: true };
        assert_eq!(decide(R, same, conflict), Verdict::Replay);
    }

    #[test]
    fn an_unanswered_record_of_the_same_request_is_decided_by_the_event() {
        let pending = Record::Taken { fingerprint: "f1", answered: false };
        assert_eq!(decide(R, pending, Event::New), Verdict::Write);
        assert_eq!(decide(R, pending, Event::Accepted { content_digest: "c2" }), Verdict::Conflict);
        let theirs = Record::Taken { fingerprint: "f2", answered: false };
        assert_eq!(decide(R, theirs, Event::New), Verdict::Mismatch);
    }

    #[test]
    fn the_same_content_under_another_identity_is_written_and_other_content_conflicts() {
        assert_eq!(decide(R, Record::Absent, Event::New), Verdict::Write);
        assert_eq!(decide(R, Record::Absent, Event::Accepted { content_digest: "c1" }), Verdict::Write);
        assert_eq!(decide(R, Record::Absent, Event::Accepted { content_digest: "c2" }), Verdict::Conflict);
        assert_eq!(decide(R, Record::Absent, Event::Vanished), Verdict::Again);
    }

    #[test]
    fn a_record_read_alone_decides_replays_and_mismatches_and_lets_the_rest_through() {
        assert_eq!(decide(R, Record::Absent, Event::Unread), Verdict::Write);
        assert_eq!(decide(R, Record::Taken { fingerprint: "f1", answered: true }, Event::Unread), Verdict::Replay);
        assert_eq!(decide(R, Record::Taken { fingerprint: "f2", answered: true }, Event::Unread), Verdict::Mismatch);
    }
}
