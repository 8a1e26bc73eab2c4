//! Whether a database holds the schema this binary expects. Commands that only
//! read (`herald why`, `herald dlq`) never create or migrate a database: they
//! open what is there and say plainly when it is not Herald's, or not yet
//! migrated to this version.

use sqlx::migrate::Migrator;

/// How a database's applied migrations compare with this binary's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaState {
    /// Every migration this binary knows is applied, and no other.
    Current,
    /// No migration table: not a Herald database, or never migrated.
    Missing,
    /// Applied, but not all: `herald migrate` would bring it up to date.
    Behind { applied: usize, known: usize },
    /// A migration this binary does not know: a newer Herald migrated it.
    Ahead { version: i64 },
    /// A migration that started and did not finish.
    Failed { version: i64 },
}

impl SchemaState {
    /// Compares `applied` (version, finished successfully) with the migrator's.
    pub fn compare(migrator: &Migrator, applied: &[(i64, bool)]) -> SchemaState {
        let known: Vec<i64> =
            migrator.iter().filter(|m| m.migration_type.is_up_migration()).map(|m| m.version).collect();
        if let Some((version, _)) = applied.iter().find(|(_, ok)| !ok) {
            return SchemaState::Failed { version: *version };
        }
        if let Some((version, _)) = applied.iter().find(|(v, _)| !known.contains(v)) {
            return SchemaState::Ahead { version: *version };
        }
        if applied.len() < known.len() {
            return SchemaState::Behind { applied: applied.len(), known: known.len() };
        }
        SchemaState::Current
    }

    /// Why a database in this state cannot be used as it is; None when it can.
    pub fn problem(&self) -> Option<String> {
        let database = "the database";
        let fix = "run `herald migrate` with the same configuration";
        match self {
            SchemaState::Current => None,
            SchemaState::Missing => Some(format!("{database} has no Herald schema (it was never migrated); {fix}")),
            SchemaState::Behind { applied, known } => Some(format!(
                "{database} is behind this herald: {applied} of its {known} migrations are applied; {fix}"
            )),
            SchemaState::Ahead { version } => Some(format!(
                "{database} was migrated by a newer herald (migration {version} is unknown to this one); use that version"
            )),
            SchemaState::Failed { version } => {
                Some(format!("{database}: migration {version} started and did not finish; repair it, then {fix}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static MIGRATOR: Migrator = sqlx::migrate!("migrations/sqlite");

    fn all() -> Vec<(i64, bool)> {
        MIGRATOR.iter().map(|m| (m.version, true)).collect()
    }

    #[test]
    fn every_known_migration_applied_is_current() {
        assert_eq!(SchemaState::compare(&MIGRATOR, &all()), SchemaState::Current);
    }

    #[test]
    fn a_missing_migration_is_behind_and_an_unknown_one_is_ahead() {
        let mut applied = all();
        applied.pop();
        let known = all().len();
        assert_eq!(SchemaState::compare(&MIGRATOR, &applied), SchemaState::Behind { applied: known - 1, known });
        let mut applied = all();
        applied.push((99_999, true));
        assert_eq!(SchemaState::compare(&MIGRATOR, &applied), SchemaState::Ahead { version: 99_999 });
        let mut applied = all();
        applied[0].1 = false;
        assert!(matches!(SchemaState::compare(&MIGRATOR, &applied), SchemaState::Failed { .. }));
    }
}
