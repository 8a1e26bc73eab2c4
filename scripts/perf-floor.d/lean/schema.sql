-- Every schema-only and ingest candidate together: brin, entity, body.
\ir ../brin/schema.sql
\ir ../entity/schema.sql
\ir ../body/schema.sql
