-- `shadowed` is published like the other final states. On SQLite the
-- publication triggers are TEMP triggers a publishing process creates on its
-- writer connection (`store::publications`), so the new state list lives
-- there; this migration only keeps both dialects' versions in step.
SELECT 1;
