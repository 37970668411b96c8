-- tidemark's least-privilege PostgreSQL roles and database. An administrator runs this once per
-- server, as a superuser (e.g. `postgres`), before the first `tidemark db migrate`; running it again
-- is safe and puts privileges back to what is written here.
--
--   psql -v ON_ERROR_STOP=1 -h HOST -U postgres -d postgres -f sql/roles/roles.sql
--
-- It creates (when missing):
--   tidemark_owner     owns database `tidemark`, its `public` schema (from PostgreSQL 15 through
--                      pg_database_owner) and every tidemark table;
--                      migrations run as this role (TIDEMARK_POSTGRES_DSN=<owner DSN> tidemark db migrate)
--   tidemark_pipeline  what the DAGs and Spark jobs connect as: CONNECT, TEMPORARY (the writer stages
--                      rows in temporary tables), USAGE on the schema, and SELECT, INSERT, UPDATE,
--                      DELETE on tidemark's tables. No CREATE anywhere, owns nothing, so no DDL.
--
-- Optional psql variables (-v name=value):
--   owner, pipeline, dbname               other names than tidemark_owner, tidemark_pipeline, tidemark
--   owner_password, pipeline_password     set the roles' passwords. Otherwise set them afterwards
--                                         with psql's \password ROLE (sends only a hash); a role
--                                         without a password cannot log in over password auth.
-- Passwords never belong in this file.
--
-- Tables the owner creates later get the pipeline's privileges automatically (ALTER DEFAULT
-- PRIVILEGES), so new migrations need no grants: run migrations as the owner role, not as a
-- superuser. `tidemark db migrate` takes the write rights on schema_migrations (which it creates
-- after this script ran) back from every other role, so no second run is needed after migrations.
--
-- Needs psql 10 or newer (\if, \gexec); tested with PostgreSQL 15.

\set ON_ERROR_STOP 1
\if :{?owner}
\else
    \set owner tidemark_owner
\endif
\if :{?pipeline}
\else
    \set pipeline tidemark_pipeline
\endif
\if :{?dbname}
\else
    \set dbname tidemark
\endif

-- Roles. Created with PostgreSQL's defaults: NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
-- NOBYPASSRLS. Roles that existed before lose any of those they had.
SELECT format('CREATE ROLE %I LOGIN', :'owner')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'owner') \gexec
SELECT format('CREATE ROLE %I LOGIN', :'pipeline')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'pipeline') \gexec
SELECT format('ALTER ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS', rolname)
FROM pg_roles
WHERE rolname IN (:'owner', :'pipeline')
  AND (NOT rolcanlogin OR rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication OR rolbypassrls) \gexec
-- The pipeline must not inherit the owner's rights (directly or through another role).
SELECT format('REVOKE %I FROM %I', r.rolname, m.rolname)
FROM pg_auth_members am
JOIN pg_roles r ON r.oid = am.roleid
JOIN pg_roles m ON m.oid = am.member
WHERE m.rolname = :'pipeline' \gexec

\if :{?owner_password}
    ALTER ROLE :"owner" PASSWORD :'owner_password';
\endif
\if :{?pipeline_password}
    ALTER ROLE :"pipeline" PASSWORD :'pipeline_password';
\endif

-- The database, owned by the owner role.
SELECT format('CREATE DATABASE %I OWNER %I', :'dbname', :'owner')
WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'dbname') \gexec
SELECT format('ALTER DATABASE %I OWNER TO %I', :'dbname', :'owner')
FROM pg_database
WHERE datname = :'dbname' AND datdba <> (SELECT oid FROM pg_roles WHERE rolname = :'owner') \gexec

\connect :dbname
-- Before PostgreSQL 15 `public` belongs to the bootstrap superuser; from 15 on to
-- pg_database_owner, i.e. already to the owner role.
SELECT format('ALTER SCHEMA public OWNER TO %I', :'owner')
FROM pg_namespace
WHERE nspname = 'public'
  AND nspowner NOT IN (SELECT oid FROM pg_roles WHERE rolname IN (:'owner', 'pg_database_owner')) \gexec

-- Everything inside the database is granted by its owner, in one transaction so that a pipeline
-- running meanwhile never sees its privileges half revoked.
BEGIN;
SET LOCAL ROLE :"owner";

-- Nobody else connects or creates temporary tables (PUBLIC may by default); the pipeline connects
-- and stages rows in temporary tables, but creates no schema.
REVOKE ALL ON DATABASE :"dbname" FROM PUBLIC;
REVOKE ALL ON DATABASE :"dbname" FROM :"pipeline";
GRANT CONNECT, TEMPORARY ON DATABASE :"dbname" TO :"pipeline";

-- The schema: only its owner creates in it (PUBLIC could before PostgreSQL 15).
REVOKE ALL ON SCHEMA public FROM PUBLIC;
REVOKE ALL ON SCHEMA public FROM :"pipeline";
GRANT USAGE ON SCHEMA public TO :"pipeline";

-- Rows only: no TRUNCATE, REFERENCES or TRIGGER. Tables and sequences the owner creates from now
-- on (migrations), in `public` and in each pipeline's schema...
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner"
    REVOKE ALL ON TABLES FROM :"pipeline";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner"
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"pipeline";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner"
    REVOKE ALL ON SEQUENCES FROM :"pipeline";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner"
    GRANT USAGE, SELECT ON SEQUENCES TO :"pipeline";
-- ...and those that exist already.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM :"pipeline";
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO :"pipeline";
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM :"pipeline";
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO :"pipeline";
-- Which migrations ran is the owner's business: the pipeline may only read it.
SELECT format('REVOKE INSERT, UPDATE, DELETE ON public.schema_migrations FROM %I', :'pipeline')
WHERE to_regclass('public.schema_migrations') IS NOT NULL \gexec
-- The same in each pipeline's schema that exists already (`tidemark db migrate` creates them, and
-- grants USAGE on a new one to every role that may use `public`).
SELECT format('GRANT USAGE ON SCHEMA %1$I TO %2$I; '
              'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %1$I TO %2$I; '
              'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %1$I TO %2$I; '
              'REVOKE INSERT, UPDATE, DELETE ON %1$I.schema_migrations FROM %2$I', nspname, :'pipeline')
FROM pg_namespace
WHERE nspowner = (SELECT oid FROM pg_roles WHERE rolname = :'owner')
  AND nspname <> 'public' AND to_regclass(format('%I.schema_migrations', nspname)) IS NOT NULL \gexec
COMMIT;
