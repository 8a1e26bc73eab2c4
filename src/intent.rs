//! The intent: one per (event, channel, recipient), immutable once rendered.
//! Its decision, reason and state are the decision log (DESIGN rule 9).

use serde::Serialize;
use std::fmt;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
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
    }
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
    }
);

string_enum!(
    /// The class of one attempt's result (DESIGN §5).
    OutcomeClass { Accepted = "accepted", Retryable = "retryable", Unknown = "unknown", Permanent = "permanent" }
);

impl State {
    /// States from which nothing more will happen on its own.
    pub fn is_final(self) -> bool {
        matches!(self, State::Sent | State::Dead | State::Suppressed | State::Digested)
    }
}
