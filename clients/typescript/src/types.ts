// Names for the generated types the client takes and returns. Every one is
// read from src/generated/openapi.ts, so a change in Herald's API shows up here
// as a type error when the file is regenerated.
import type { components, operations } from "./generated/openapi.js";

type Schemas = components["schemas"];
type Query<Op extends keyof operations> = NonNullable<operations[Op]["parameters"]["query"]>;

/** The body of `POST /v1/events`. */
export type HeraldEvent = Schemas["EventRequest"];
export type EventAccepted = Schemas["EventAccepted"];
export type EventDryRun = Schemas["EventDryRun"];
export type IntentSummary = Schemas["IntentSummary"];
export type Intent = Schemas["Intent"];
export type IntentDetail = Schemas["IntentDetail"];
export type IntentPage = Schemas["IntentPage"];
export type Attempt = Schemas["Attempt"];
export type Receipt = Schemas["Receipt"];
export type Replay = Schemas["Replay"];
export type DeadLetter = Schemas["DeadLetter"];
export type DeadLetterPage = Schemas["DeadLetterPage"];
export type DeadLetterSummary = Schemas["DeadLetterSummary"];
export type ReplayResult = Schemas["ReplayResult"];
export type Suppression = Schemas["Suppression"];
export type SuppressionPage = Schemas["SuppressionPage"];
export type SuppressionRemoved = Schemas["SuppressionRemoved"];
export type ShadowReport = Schemas["ShadowReport"];
export type ChannelName = Schemas["ChannelName"];
export type DecisionName = Schemas["DecisionName"];
export type StateName = Schemas["StateName"];
export type ReasonName = Schemas["ReasonName"];

/** An entity as the list filters take it: `TYPE:ID`, or its two parts. */
export type EntityFilter = string | { type: string; id: string };

/** A time for `since` / `until`: RFC 3339 with an offset, or a Date (sent in UTC). */
export type Instant = string | Date;

type Paging = { cursor?: string; limit?: number };

export type ListIntentsQuery = Omit<Query<"list_intents">, "entity"> & { entity?: EntityFilter };

type DeadLetterScope = {
  /** Another tenant's (needs the `admin` scope). */
  tenant?: string;
  /** Every tenant's (needs the `admin` scope). */
  allTenants?: boolean;
};

export type ListDeadLettersQuery = Omit<Query<"list_dead_letters">, "since" | "tenant" | "all_tenants"> &
  DeadLetterScope & { since?: Instant };
export type DeadLetterSummaryQuery = Omit<Query<"dead_letter_summary">, "since" | "tenant" | "all_tenants"> &
  DeadLetterScope & { since?: Instant };
export type ShadowReportQuery = Omit<Query<"shadow_report">, "since" | "until" | "tenant" | "all_tenants"> &
  DeadLetterScope & { since?: Instant; until?: Instant };
export type ListSuppressionsQuery = Query<"list_suppressions"> & Paging;

/** What to replay: these ids, or every dead letter of a reason (optionally since a time). */
export type ReplaySelection = { ids: string[] } | { reason: string; since?: Instant };
