-- The contract (docs/design.md, "Contract changes") each batch's records were checked with, as the
-- session rules are recorded: `contracts` holds every contract a batch of the pipeline used, the
-- newest being the one the stored records follow; each batch names its contract's digest. A
-- compatible change is recorded by the first batch that uses it; an incompatible one is refused
-- before any work.
ALTER TABLE ledger_batches ADD COLUMN contract_digest text;

CREATE TABLE contracts (
    digest      text        PRIMARY KEY,   -- sha256 of the contract's document (pipelines.Contract.digest)
    document    jsonb       NOT NULL,      -- the schema, the roles' pointers, the key rule, the typed columns
    adopted_at  timestamptz NOT NULL DEFAULT clock_timestamp(),  -- when batches began to use it (again)
    change      text        NOT NULL       -- "first batch", or what changed from the one before
);
