//! The intent: one per (event, channel, recipient), immutable once rendered.
//! Its decision, reason and state are the decision log (DESIGN rule 9).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Stored as its text in both databases, converted here and nowhere else: a
/// row whose text is none of the values does not decode. For a type with
/// `as_str` and `parse`.
macro_rules! text_column {
    ($name:ident) => {
        impl<DB: sqlx::Database> sqlx::Type<DB> for $name
        where
            String: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <String as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <String as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $name
        where
            &'r str: sqlx::Decode<'r, DB>,
        {
            fn decode(value: <DB as sqlx::Database>::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&'r str as sqlx::Decode<'r, DB>>::decode(value)?;
                $name::parse(text).ok_or_else(|| format!("{text:?} is not a {}", stringify!($name)).into())
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $name
        where
            &'q str: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer<'q>,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&'q str as sqlx::Encode<'q, DB>>::encode(self.as_str(), buf)
            }
        }

        /// Read by SQLite's writer directly (`store::sqlite::direct`).
        impl rusqlite::types::FromSql for $name {
            fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                let text = value.as_str()?;
                $name::parse(text).ok_or_else(|| {
                    rusqlite::types::FromSqlError::Other(format!("{text:?} is not a {}", stringify!($name)).into())
                })
            }
        }
    };
}
pub(crate) use text_column;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name { $(#[serde(rename = $text)] $variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(s: &str) -> Option<$name> {
                match s { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        text_column!($name);
    };
}

string_enum!(
    /// What the planner decided for one intent.
    Decision { Send = "send", Hold = "hold", Digest = "digest", Suppress = "suppress" }
);

string_enum!(
    /// Where an intent is now.
    State {
        Queued = "queued",
        Held = "held",
        Sending = "sending",
        Sent = "sent",
        Unknown = "unknown",
        Dead = "dead",
        Suppressed = "suppressed",
        Digested = "digested",
        // Planned in shadow mode and would have been sent now: no provider
        // was called (the system Herald runs beside sent it).
        Shadowed = "shadowed",
    }
);

string_enum!(
    /// Whether an intent is delivered (`live`) or only observed (`shadow`):
    /// decided when it is planned and stored with it, so a later change of
    /// configuration only affects what is planned afterwards.
    Mode { Live = "live", Shadow = "shadow" }
);

string_enum!(
    /// Why an intent was not sent, or why an attempt failed. A bounded set, so it
    /// can label metrics.
    Reason {
        OptedOut = "opted_out",
        ChannelDisabled = "channel_disabled",
        NoDestination = "no_destination",
        InvalidDestination = "invalid_destination",
        QuietHours = "quiet_hours",
        Superseded = "superseded",
        TemplateError = "template_error",
        SmsTooLong = "sms_too_long",
        HardBounce = "hard_bounce",
        Rejected = "rejected",
        Provider4xx = "provider_4xx",
        Provider5xx = "provider_5xx",
        Throttled = "throttled",
        Timeout = "timeout",
        Unreachable = "unreachable",
        ConnectionLost = "connection_lost",
        LeaseExpired = "lease_expired",
        RetriesExhausted = "retries_exhausted",
        // A webhook whose host is (or resolves to) a loopback, private or
        // otherwise non-public address.
        ForbiddenDestination = "forbidden_destination",
        // A delivery receipt said the message did not arrive (not an address
        // problem: a handset off, a carrier's filter).
        Undelivered = "undelivered",
        // The destination is on the tenant's suppression list.
        AddressBounced = "address_bounced",
        AddressComplained = "address_complained",
        // The recipient has been sent as many messages on the channel as its
        // frequency cap allows in the period (`[caps]`).
        FrequencyCap = "frequency_cap",
    }
);

string_enum!(
    /// The class of one attempt's result (DESIGN §5).
    OutcomeClass { Accepted = "accepted", Retryable = "retryable", Unknown = "unknown", Permanent = "permanent" }
);

#[cfg(test)]
mod text_tests {
    use super::*;

    #[test]
    fn each_value_reads_back_as_written_and_other_text_is_refused() {
        for s in State::ALL {
            assert_eq!(State::parse(s.as_str()), Some(*s));
            assert_eq!(serde_json::from_value::<State>(serde_json::json!(s.as_str())).unwrap(), *s);
        }
        for o in OutcomeClass::ALL {
            assert_eq!(OutcomeClass::parse(o.as_str()), Some(*o));
        }
        assert!(serde_json::from_str::<State>("\"lost\"").is_err());
        assert_eq!((Decision::parse("Send"), State::parse("")), (None, None));
        assert!(State::Sent == "sent" && State::Sent != "dead");
    }

    #[test]
    fn a_channel_reads_back_as_written_in_json_and_other_text_is_refused() {
        use crate::event::Channel;
        for c in Channel::ALL {
            assert_eq!(Channel::parse(c.as_str()), Some(c));
            let text = serde_json::to_value(c).unwrap();
            assert_eq!(text, serde_json::json!(c.as_str()));
            assert_eq!(serde_json::from_value::<Channel>(text).unwrap(), c);
        }
        assert_eq!((Channel::parse("SMS"), Channel::parse("inapp")), (None, None));
        assert!(serde_json::from_str::<Channel>("\"push\"").is_err());
    }

    #[tokio::test]
    async fn a_column_decodes_to_its_value_and_other_text_fails_to_decode() {
        use crate::event::Channel;
        use sqlx::Connection;
        let mut db = sqlx::SqliteConnection::connect("sqlite::memory:").await.unwrap();
        let read = |sql: &'static str| sqlx::query_scalar::<_, Channel>(sql);
        assert_eq!(read("SELECT 'in_app'").fetch_one(&mut db).await.unwrap(), Channel::InApp);
        let e = read("SELECT 'pigeon'").fetch_one(&mut db).await.unwrap_err();
        assert!(e.to_string().contains("\"pigeon\" is not a Channel"), "{e}");
        let stored: (State, Option<Reason>) = sqlx::query_as("SELECT $1, $2")
            .bind(State::Dead)
            .bind(Reason::TemplateError)
            .fetch_one(&mut db)
            .await
            .unwrap();
        assert_eq!(stored, (State::Dead, Some(Reason::TemplateError)));
    }
}
