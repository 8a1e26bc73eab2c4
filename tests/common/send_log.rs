//! An old notifier's send log, as the shadow comparison reads it.

use serde_json::json;

/// A send log written as CSV with the default columns (`time, channel,
/// recipient_id, destination, entity_type, entity_id, event_type`), as JSON
/// Lines: a row names its recipient by id when it has one, else by
/// destination.
pub fn csv_to_jsonl(csv: &str) -> String {
    (csv.lines().skip(1))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let mut row =
                json!({"time": f[0], "channel": f[1], "entity_type": f[4], "entity_id": f[5], "event_type": f[6]});
            match f[2] {
                "" => row["destination"] = json!(f[3]),
                id => row["recipient_id"] = json!(id),
            }
            format!("{row}\n")
        })
        .collect()
}
