//! The fleet's schema in the database: its versions, and the migrations that
//! bring a database to the newest one.

use tokio_postgres::Client;

use crate::FleetError;

/// The schema version this crate reads and writes (the one row of
/// `asynctask_schema`). A database with a higher one was written by a newer
/// asynctask and is refused, untouched. A lower one (or none) is refused at
/// connect too: [`Fleet::migrate`](crate::Fleet::migrate) (`asynctask fleet
/// migrate`, run by the role that owns the schema) brings it here. Fronts,
/// workers and `fleet status` never change the schema.
pub const SCHEMA_VERSION: i32 = 7;

/// The migrations, in order: entry `n` brings version `n` to `n + 1`.
const MIGRATIONS: &[&str] = &[
    // 0 → 1: workspaces with their limit, workers with their leases, tasks.
    // Times are Unix milliseconds; outputs are JSON text.
    "CREATE TABLE asynctask_workspaces (
        name text PRIMARY KEY,
        max_async integer NOT NULL DEFAULT 5
            CHECK (max_async = -1 OR max_async BETWEEN 1 AND 100)
     );
     CREATE TABLE asynctask_workers (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        name text NOT NULL,
        capacity integer NOT NULL CHECK (capacity >= 1),
        subagents text[] NOT NULL,
        lease_ms bigint NOT NULL CHECK (lease_ms > 0),
        registered_at bigint NOT NULL,
        lease_expires_at bigint NOT NULL,
        state text NOT NULL DEFAULT 'live' CHECK (state IN ('live', 'lost'))
     );
     CREATE INDEX asynctask_workers_live ON asynctask_workers (lease_expires_at)
        WHERE state = 'live';
     CREATE SEQUENCE asynctask_fence;
     CREATE TABLE asynctask_tasks (
        id text PRIMARY KEY,
        workspace text NOT NULL REFERENCES asynctask_workspaces (name),
        seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
        subagent_name text NOT NULL,
        goal_prompt text NOT NULL,
        origin text,
        status text NOT NULL
            CHECK (status IN ('queued', 'running', 'completed', 'failed', 'cancelled')),
        worker_id bigint REFERENCES asynctask_workers (id),
        fence bigint,
        launched_at bigint NOT NULL,
        started_at bigint,
        completed_at bigint,
        notified_at bigint,
        output text,
        error text
     );
     CREATE INDEX asynctask_tasks_queue ON asynctask_tasks (seq) WHERE status = 'queued';
     CREATE INDEX asynctask_tasks_running_ws ON asynctask_tasks (workspace)
        WHERE status = 'running';
     CREATE INDEX asynctask_tasks_running_worker ON asynctask_tasks (worker_id)
        WHERE status = 'running';
     CREATE INDEX asynctask_tasks_pending ON asynctask_tasks (workspace, completed_at, seq)
        WHERE notified_at IS NULL AND status IN ('completed', 'failed', 'cancelled');",
    // 1 → 2: each worker's catalog (JSON: name and description of each
    // subagent it serves); fronts with their leases, each task's front (the
    // one its result is kept for while it lives), cancel requests, the last
    // line of progress, and the whole output (bounded) of a task whose result
    // was cut.
    "ALTER TABLE asynctask_workers ADD COLUMN catalog text NOT NULL DEFAULT '[]';
     CREATE TABLE asynctask_fronts (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        workspace text NOT NULL,
        name text NOT NULL,
        lease_ms bigint NOT NULL CHECK (lease_ms > 0),
        registered_at bigint NOT NULL,
        lease_expires_at bigint NOT NULL,
        state text NOT NULL DEFAULT 'live' CHECK (state IN ('live', 'gone'))
     );
     ALTER TABLE asynctask_tasks
        ADD COLUMN front_id bigint REFERENCES asynctask_fronts (id),
        ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false,
        ADD COLUMN progress text,
        ADD COLUMN whole_output text,
        ADD COLUMN whole_output_bytes bigint;
     CREATE INDEX asynctask_tasks_cancel ON asynctask_tasks (worker_id)
        WHERE status = 'running' AND cancel_requested;",
    // 2 → 3: steering messages, numbered per task by the front that sends
    // them, each marked once its worker put it in the subagent's inbox; and
    // questions, numbered per task by the worker whose subagent asks (JSON:
    // text and choices), answered by a front, each answer marked once its
    // worker handed it over.
    "CREATE TABLE asynctask_messages (
        task_id text NOT NULL REFERENCES asynctask_tasks (id) ON DELETE CASCADE,
        n bigint NOT NULL,
        body text NOT NULL,
        sent_at bigint NOT NULL,
        delivered_at bigint,
        PRIMARY KEY (task_id, n)
     );
     CREATE INDEX asynctask_messages_undelivered ON asynctask_messages (task_id, n)
        WHERE delivered_at IS NULL;
     CREATE TABLE asynctask_questions (
        task_id text NOT NULL REFERENCES asynctask_tasks (id) ON DELETE CASCADE,
        number bigint NOT NULL,
        question text NOT NULL,
        asked_at bigint NOT NULL,
        state text NOT NULL DEFAULT 'waiting'
            CHECK (state IN ('waiting', 'answered', 'withdrawn')),
        answer_status text,
        answer text,
        answered_at bigint,
        delivered_at bigint,
        PRIMARY KEY (task_id, number)
     );
     CREATE INDEX asynctask_questions_open ON asynctask_questions (task_id, number)
        WHERE state = 'waiting' OR (state = 'answered' AND delivered_at IS NULL);",
    // 3 → 4: each task's whole launch.
    LAUNCH_REQUESTS,
    // 4 → 5: the claim as one server-side function, one round trip. It
    // takes the time (`now`, or the database's clock when null), locks the
    // worker's row (its lease must hold: else SQLSTATE AT001, nothing
    // claimed), then claims up to `max` tasks within the worker's free
    // slots: each the oldest queued task of a subagent it serves that no
    // other claimer holds (SKIP LOCKED), counted against its workspace's
    // limit under the workspace's row lock (NO KEY: submissions'
    // foreign-key checks pass), given a token from the fence sequence.
    // Only the first workspace lock is waited for: a later one held
    // elsewhere ends the call with a row whose id is null ("more may be
    // queued: call again"), so two claimers never wait on each other's
    // locks in opposite orders.
    "CREATE OR REPLACE FUNCTION asynctask_claim(p_worker bigint, p_now bigint, p_max integer)
     RETURNS TABLE (id text, workspace text, subagent_name text, goal_prompt text, fence bigint,
                    request text)
     LANGUAGE plpgsql VOLATILE AS $$
     DECLARE
        v_now bigint := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
        v_capacity integer;
        v_subagents text[];
        v_free bigint;
        v_full text[] := '{}';
        v_locked text[] := '{}';
        v_task record;
        v_max integer;
        v_running bigint;
     BEGIN
        SELECT w.capacity, w.subagents INTO v_capacity, v_subagents
        FROM asynctask_workers w
        WHERE w.id = p_worker AND w.state = 'live' AND w.lease_expires_at > v_now
        FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'worker % has lost its lease', p_worker USING ERRCODE = 'AT001';
        END IF;
        v_free := least(p_max::bigint, v_capacity - (SELECT count(*) FROM asynctask_tasks t
            WHERE t.worker_id = p_worker AND t.status = 'running'));
        WHILE v_free > 0 LOOP
            SELECT t.id, t.workspace INTO v_task FROM asynctask_tasks t
            WHERE t.status = 'queued' AND t.subagent_name = ANY (v_subagents)
              AND NOT (t.workspace = ANY (v_full))
            ORDER BY t.seq
            FOR UPDATE SKIP LOCKED
            LIMIT 1;
            EXIT WHEN NOT FOUND;
            IF cardinality(v_locked) = 0 OR v_task.workspace = ANY (v_locked) THEN
                SELECT s.max_async INTO v_max FROM asynctask_workspaces s
                WHERE s.name = v_task.workspace FOR NO KEY UPDATE;
            ELSE
                SELECT s.max_async INTO v_max FROM asynctask_workspaces s
                WHERE s.name = v_task.workspace FOR NO KEY UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    id := NULL; workspace := NULL; subagent_name := NULL;
                    goal_prompt := NULL; fence := NULL; request := NULL;
                    RETURN NEXT;
                    RETURN;
                END IF;
            END IF;
            v_locked := v_locked || v_task.workspace;
            SELECT count(*) INTO v_running FROM asynctask_tasks t
            WHERE t.workspace = v_task.workspace AND t.status = 'running';
            IF v_max >= 0 AND v_running >= v_max THEN
                v_full := v_full || v_task.workspace;
                CONTINUE;
            END IF;
            UPDATE asynctask_tasks t
            SET status = 'running', worker_id = p_worker, started_at = v_now,
                fence = nextval('asynctask_fence')
            WHERE t.id = v_task.id
            RETURNING t.id, t.workspace, t.subagent_name, t.goal_prompt, t.fence, t.request
            INTO id, workspace, subagent_name, goal_prompt, fence, request;
            RETURN NEXT;
            v_free := v_free - 1;
        END LOOP;
     END
     $$;",
    // 5 → 6: a front's message as one server-side function, one round
    // trip (no transaction left open between round trips: a front whose
    // link is cut cannot leave its task's row locked). It locks the task's
    // row (queued or running, of the workspace: else 'ended'), stores
    // message `n` unless stored already (a retry), refuses it ('full') when
    // `max` wait undelivered, and notifies the task's worker, if it has
    // one, on `channel`. Each statement sees what committed before it, as
    // the transaction it replaces did.
    SEND_MESSAGE,
    // 6 → 7: each worker's workspaces (it claims only their tasks; a
    // worker registered before serves none until it registers again), and
    // both functions made again with every name qualified by the schema
    // they live in and their `search_path` fixed, so a caller's
    // `search_path` cannot redirect a name they use.
    WORKER_WORKSPACES,
];

/// Migration 6 → 7. `@schema@` stands for the quoted name of the schema
/// the migration runs in (see [`qualified`]).
const WORKER_WORKSPACES: &str = "ALTER TABLE @schema@.asynctask_workers
        ADD COLUMN workspaces text[] NOT NULL DEFAULT '{}';
     DROP FUNCTION @schema@.asynctask_claim(bigint, bigint, integer);
     DROP FUNCTION @schema@.asynctask_send_message(text, text, bigint, text, bigint, bigint, text);
     @claim@
     @send_message@";

/// The claim, as migration 4 → 5 says, limited to the worker's workspaces.
/// Every name is qualified, and `search_path` is fixed to the system
/// catalog: nothing a caller puts on its path is looked up.
const CLAIM: &str = "CREATE FUNCTION @schema@.asynctask_claim(
        p_worker bigint, p_now bigint, p_max integer)
     RETURNS TABLE (id text, workspace text, subagent_name text, goal_prompt text, fence bigint,
                    request text)
     LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
     DECLARE
        v_now bigint := coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000)::bigint);
        v_capacity integer;
        v_subagents text[];
        v_workspaces text[];
        v_free bigint;
        v_full text[] := '{}';
        v_locked text[] := '{}';
        v_task record;
        v_max integer;
        v_running bigint;
     BEGIN
        SELECT w.capacity, w.subagents, w.workspaces INTO v_capacity, v_subagents, v_workspaces
        FROM @schema@.asynctask_workers w
        WHERE w.id = p_worker AND w.state = 'live' AND w.lease_expires_at > v_now
        FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'worker % has lost its lease', p_worker USING ERRCODE = 'AT001';
        END IF;
        v_free := least(p_max::bigint, v_capacity - (SELECT count(*) FROM @schema@.asynctask_tasks t
            WHERE t.worker_id = p_worker AND t.status = 'running'));
        WHILE v_free > 0 LOOP
            SELECT t.id, t.workspace INTO v_task FROM @schema@.asynctask_tasks t
            WHERE t.status = 'queued' AND t.subagent_name = ANY (v_subagents)
              AND t.workspace = ANY (v_workspaces)
              AND NOT (t.workspace = ANY (v_full))
            ORDER BY t.seq
            FOR UPDATE SKIP LOCKED
            LIMIT 1;
            EXIT WHEN NOT FOUND;
            IF cardinality(v_locked) = 0 OR v_task.workspace = ANY (v_locked) THEN
                SELECT s.max_async INTO v_max FROM @schema@.asynctask_workspaces s
                WHERE s.name = v_task.workspace FOR NO KEY UPDATE;
            ELSE
                SELECT s.max_async INTO v_max FROM @schema@.asynctask_workspaces s
                WHERE s.name = v_task.workspace FOR NO KEY UPDATE SKIP LOCKED;
                IF NOT FOUND THEN
                    id := NULL; workspace := NULL; subagent_name := NULL;
                    goal_prompt := NULL; fence := NULL; request := NULL;
                    RETURN NEXT;
                    RETURN;
                END IF;
            END IF;
            v_locked := v_locked || v_task.workspace;
            SELECT count(*) INTO v_running FROM @schema@.asynctask_tasks t
            WHERE t.workspace = v_task.workspace AND t.status = 'running';
            IF v_max >= 0 AND v_running >= v_max THEN
                v_full := v_full || v_task.workspace;
                CONTINUE;
            END IF;
            UPDATE @schema@.asynctask_tasks t
            SET status = 'running', worker_id = p_worker, started_at = v_now,
                fence = nextval('@schema_literal@.asynctask_fence')
            WHERE t.id = v_task.id
            RETURNING t.id, t.workspace, t.subagent_name, t.goal_prompt, t.fence, t.request
            INTO id, workspace, subagent_name, goal_prompt, fence, request;
            RETURN NEXT;
            v_free := v_free - 1;
        END LOOP;
     END
     $$;";

/// A front's message, as migration 5 → 6 says, every name qualified and
/// `search_path` fixed (as [`CLAIM`]).
const SEND_MESSAGE_QUALIFIED: &str = "CREATE FUNCTION @schema@.asynctask_send_message(
        p_task text, p_workspace text, p_n bigint, p_body text, p_now bigint, p_max bigint,
        p_channel text)
     RETURNS text
     LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
     DECLARE
        v_worker bigint;
        v_waiting bigint;
     BEGIN
        SELECT t.worker_id INTO v_worker FROM @schema@.asynctask_tasks t
        WHERE t.id = p_task AND t.workspace = p_workspace
          AND t.status IN ('queued', 'running')
        FOR UPDATE;
        IF NOT FOUND THEN
            RETURN 'ended';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM @schema@.asynctask_messages m
                       WHERE m.task_id = p_task AND m.n = p_n) THEN
            SELECT count(*) INTO v_waiting FROM @schema@.asynctask_messages m
            WHERE m.task_id = p_task AND m.delivered_at IS NULL;
            IF v_waiting >= p_max THEN
                RETURN 'full';
            END IF;
            INSERT INTO @schema@.asynctask_messages (task_id, n, body, sent_at)
            VALUES (p_task, p_n, p_body,
                coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000)::bigint));
        END IF;
        IF v_worker IS NOT NULL THEN
            PERFORM pg_notify(p_channel, v_worker::text);
        END IF;
        RETURN 'stored';
     END
     $$;";

/// A migration's text with the functions it makes put in, and `@schema@`
/// replaced by `schema` quoted as an identifier (`@schema_literal@`: the
/// same inside a string literal).
///
/// # Errors
///
/// [`FleetError::UnusableSchema`] for a schema name with a `$` (it could
/// end a function's body).
fn qualified(migration: &str, schema: &str) -> Result<String, FleetError> {
    if schema.contains('$') {
        return Err(FleetError::UnusableSchema(format!(
            "its name {schema:?} has a '$'"
        )));
    }
    let quoted = format!("\"{}\"", schema.replace('"', "\"\""));
    Ok(migration
        .replace("@claim@", CLAIM)
        .replace("@send_message@", SEND_MESSAGE_QUALIFIED)
        .replace("@schema_literal@", &quoted.replace('\'', "''"))
        .replace("@schema@", &quoted))
}

/// The function that stores a front's message (see migration 5 → 6).
const SEND_MESSAGE: &str = "CREATE OR REPLACE FUNCTION asynctask_send_message(
        p_task text, p_workspace text, p_n bigint, p_body text, p_now bigint, p_max bigint,
        p_channel text)
     RETURNS text
     LANGUAGE plpgsql VOLATILE AS $$
     DECLARE
        v_worker bigint;
        v_waiting bigint;
     BEGIN
        SELECT t.worker_id INTO v_worker FROM asynctask_tasks t
        WHERE t.id = p_task AND t.workspace = p_workspace
          AND t.status IN ('queued', 'running')
        FOR UPDATE;
        IF NOT FOUND THEN
            RETURN 'ended';
        END IF;
        IF NOT EXISTS (SELECT 1 FROM asynctask_messages m
                       WHERE m.task_id = p_task AND m.n = p_n) THEN
            SELECT count(*) INTO v_waiting FROM asynctask_messages m
            WHERE m.task_id = p_task AND m.delivered_at IS NULL;
            IF v_waiting >= p_max THEN
                RETURN 'full';
            END IF;
            INSERT INTO asynctask_messages (task_id, n, body, sent_at)
            VALUES (p_task, p_n, p_body,
                coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000)::bigint));
        END IF;
        IF v_worker IS NOT NULL THEN
            PERFORM pg_notify(p_channel, v_worker::text);
        END IF;
        RETURN 'stored';
     END
     $$;";

/// Each task's whole launch (JSON: the `SubagentRequest` its front built,
/// without its handles): behaviour prompts, tool whitelist, output spec,
/// context, timeout, depth. A task stored before carries none of them: it
/// gets what it ran with then (the default 900 s, depth 1, in the
/// background).
const LAUNCH_REQUESTS: &str = "ALTER TABLE asynctask_tasks ADD COLUMN request text;
     UPDATE asynctask_tasks SET request = json_build_object(
        'task_id', id, 'subagent_name', subagent_name, 'goal_prompt', goal_prompt,
        'behaviour_prompts', json_build_array(), 'tool_whitelist', NULL,
        'output_spec', json_build_array(), 'context', json_build_array(),
        'timeout', json_build_object('secs', 900, 'nanos', 0),
        'run_async', true, 'depth', 1)::text;
     ALTER TABLE asynctask_tasks ALTER COLUMN request SET NOT NULL;";

/// An arbitrary constant: the advisory lock that keeps two processes from
/// migrating one database at once.
const MIGRATION_LOCK: i64 = 0x6173_796e_6374_736b;

/// Brings the database to [`SCHEMA_VERSION`], in one transaction; returns the
/// version found before (0: none). A newer schema is refused untouched. The
/// schema's objects are made in the connection's current schema (the first
/// of its `search_path` that exists), owned by its role: run it as the role
/// that owns the fleet's schema.
pub(crate) async fn migrate(client: &mut Client) -> Result<i32, FleetError> {
    let tx = client
        .transaction()
        .await
        .map_err(FleetError::db("beginning the migration"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(FleetError::db("locking for the migration"))?;
    let schema: Option<String> = tx
        .query_one("SELECT current_schema()", &[])
        .await
        .map_err(FleetError::db("reading the current schema"))?
        .get(0);
    let schema = schema.ok_or_else(|| {
        FleetError::UnusableSchema(
            "no schema of the connection's search_path exists: create one, or set \
             search_path"
                .to_owned(),
        )
    })?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS asynctask_schema (version integer NOT NULL)")
        .await
        .map_err(FleetError::db("creating the schema table"))?;
    let found: i32 = tx
        .query_opt("SELECT version FROM asynctask_schema", &[])
        .await
        .map_err(FleetError::db("reading the schema version"))?
        .map_or(0, |row| row.get(0));
    if found > SCHEMA_VERSION {
        // Dropped unfinished: rolled back, nothing changed.
        return Err(FleetError::NewerSchema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found == SCHEMA_VERSION {
        tx.commit()
            .await
            .map_err(FleetError::db("ending the migration"))?;
        return Ok(found);
    }
    let from = usize::try_from(found).unwrap_or(0);
    for migration in &MIGRATIONS[from..] {
        tx.batch_execute(&qualified(migration, &schema)?)
            .await
            .map_err(FleetError::db("migrating the schema"))?;
    }
    tx.execute("DELETE FROM asynctask_schema", &[])
        .await
        .map_err(FleetError::db("writing the schema version"))?;
    tx.execute(
        "INSERT INTO asynctask_schema (version) VALUES ($1)",
        &[&SCHEMA_VERSION],
    )
    .await
    .map_err(FleetError::db("writing the schema version"))?;
    tx.commit()
        .await
        .map_err(FleetError::db("ending the migration"))?;
    tracing::info!(
        from = found,
        to = SCHEMA_VERSION,
        schema = %schema,
        "the fleet's database was migrated"
    );
    Ok(found)
}

/// Checks, without changing anything, that the database holds the schema
/// of [`SCHEMA_VERSION`]: what every connection but a migration does.
///
/// # Errors
///
/// [`FleetError::NoSchema`] when it holds none, [`FleetError::OlderSchema`]
/// when an older one, [`FleetError::NewerSchema`] when a newer one.
pub(crate) async fn check(client: &Client) -> Result<(), FleetError> {
    // `to_regclass` is null, not an error, when the table is missing
    // (or the role cannot see it).
    let row = client
        .query_one("SELECT to_regclass('asynctask_schema') IS NOT NULL", &[])
        .await
        .map_err(FleetError::db("reading the schema version"))?;
    if !row.get::<_, bool>(0) {
        return Err(FleetError::NoSchema);
    }
    let found = client
        .query_opt("SELECT version FROM asynctask_schema", &[])
        .await
        .map_err(FleetError::db("reading the schema version"))?
        .map_or(0, |row| row.get::<_, i32>(0));
    match found.cmp(&SCHEMA_VERSION) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(FleetError::NewerSchema {
            found,
            supported: SCHEMA_VERSION,
        }),
        std::cmp::Ordering::Less if found == 0 => Err(FleetError::NoSchema),
        std::cmp::Ordering::Less => Err(FleetError::OlderSchema {
            found,
            supported: SCHEMA_VERSION,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_is_one_migration_per_version() {
        assert_eq!(MIGRATIONS.len(), usize::try_from(SCHEMA_VERSION).unwrap());
    }

    #[test]
    fn a_migration_names_its_schema_quoted_everywhere() {
        let text = qualified(WORKER_WORKSPACES, "it's \"odd\"").unwrap();
        assert!(!text.contains('@'), "every placeholder is replaced");
        assert!(text.contains("CREATE FUNCTION \"it's \"\"odd\"\"\".asynctask_claim("));
        assert!(text.contains("nextval('\"it''s \"\"odd\"\"\".asynctask_fence')"));
        assert!(qualified(WORKER_WORKSPACES, "a$b").is_err());
    }
}
