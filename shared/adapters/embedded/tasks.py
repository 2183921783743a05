"""TaskStore on SQLite: one row per delegated task (shared.models.tasks.Task), in sigil.db.

The row carries what the store filters on (session, status, whether the task is still active)
beside the document. The caps are checked inside the create's write transaction (BEGIN
IMMEDIATE): two delegations racing for the last slot of a session queue on the write lock, and
the second counts the first. `save` is optimistic on `version`, like sessions; a task that has
ended is never live again (it freed its slot), as on DynamoDB.
"""

from __future__ import annotations

from shared import serde
from shared.adapters.embedded.db import Database, first, to_us
from shared.clock import utcnow
from shared.errors import StaleTask, TaskCapReached
from shared.models.tasks import TERMINAL, Task

_MIGRATIONS = [
    """
    CREATE TABLE tasks (
        workspace_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        status TEXT NOT NULL,
        active INTEGER NOT NULL,
        version INTEGER NOT NULL,
        created_us INTEGER NOT NULL,
        doc TEXT NOT NULL,
        PRIMARY KEY (workspace_id, task_id)
    ) WITHOUT ROWID;
    CREATE INDEX tasks_by_session ON tasks (workspace_id, session_id, active);
    CREATE INDEX tasks_by_created ON tasks (workspace_id, created_us DESC);
    """,
]


def migrate(db: Database) -> None:
    db.migrate("tasks", _MIGRATIONS)


class SqliteTaskStore:
    def __init__(self, db: Database) -> None:
        self._db = db
        migrate(db)

    def create(self, task: Task, *, max_per_session: int, max_per_workspace: int) -> Task:
        with self._db.transaction() as conn:
            row = first(
                conn,
                "SELECT doc FROM tasks WHERE workspace_id = ? AND task_id = ?",
                (task.workspace_id, task.id),
            )
            if row is not None:
                # A retried create (the delegating turn redelivered): the task it made, once.
                return serde.loads(Task, row[0])
            if not task.terminal:
                in_session = first(
                    conn,
                    "SELECT COUNT(*) FROM tasks WHERE workspace_id = ? AND session_id = ? AND active = 1",
                    (task.workspace_id, task.session_id),
                )
                if in_session and int(in_session[0]) >= max_per_session:
                    raise TaskCapReached(
                        f"session {task.session_id} already runs {in_session[0]} tasks "
                        f"(at most {max_per_session})"
                    )
                in_workspace = first(
                    conn,
                    "SELECT COUNT(*) FROM tasks WHERE workspace_id = ? AND active = 1",
                    (task.workspace_id,),
                )
                if in_workspace and int(in_workspace[0]) >= max_per_workspace:
                    raise TaskCapReached(
                        f"workspace {task.workspace_id} already runs {in_workspace[0]} tasks "
                        f"(at most {max_per_workspace})"
                    )
            conn.execute(
                "INSERT INTO tasks (workspace_id, task_id, session_id, status, active, version, "
                "created_us, doc) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    task.workspace_id,
                    task.id,
                    task.session_id,
                    task.status,
                    int(not task.terminal),
                    task.version,
                    to_us(task.created_at),
                    serde.dumps(task),
                ),
            )
        return task

    def get(self, workspace_id: str, task_id: str) -> Task | None:
        row = self._db.query_one(
            "SELECT doc FROM tasks WHERE workspace_id = ? AND task_id = ?", (workspace_id, task_id)
        )
        return serde.loads(Task, row[0]) if row else None

    def save(self, task: Task) -> Task:
        stored = task.model_copy(update={"version": task.version + 1, "updated_at": utcnow()}, deep=True)
        with self._db.transaction() as conn:
            row = first(
                conn,
                "SELECT version, session_id, active, created_us FROM tasks "
                "WHERE workspace_id = ? AND task_id = ?",
                (task.workspace_id, task.id),
            )
            if row is None:
                raise StaleTask(f"task {task.id} does not exist in workspace {task.workspace_id}")
            if int(row[0]) != task.version:
                raise StaleTask(f"task {task.id} is at version {row[0]}, not {task.version}")
            if row[1] != task.session_id:
                raise ValueError(f"task {task.id} belongs to session {row[1]}, not {task.session_id}")
            if int(row[3]) != to_us(task.created_at):
                # The list's order is by it, on both backends (DynamoDB keys it).
                raise ValueError(f"task {task.id}: created_at changed since it was created")
            if not row[2] and not stored.terminal:
                # It freed its slot when it ended; live again, it would run uncounted.
                raise ValueError(f"task {task.id} has ended; it cannot be {stored.status} again")
            conn.execute(
                "UPDATE tasks SET status = ?, active = ?, version = ?, doc = ? "
                "WHERE workspace_id = ? AND task_id = ?",
                (
                    stored.status,
                    int(stored.status not in TERMINAL),
                    stored.version,
                    serde.dumps(stored),
                    task.workspace_id,
                    task.id,
                ),
            )
        return stored

    def list_tasks(
        self,
        workspace_id: str,
        *,
        session_id: str | None = None,
        active: bool | None = None,
        limit: int = 100,
    ) -> list[Task]:
        where = "workspace_id = ?"
        params: list[object] = [workspace_id]
        if session_id is not None:
            where += " AND session_id = ?"
            params.append(session_id)
        if active is not None:
            where += " AND active = ?"
            params.append(int(active))
        rows = self._db.query(
            f"SELECT doc FROM tasks WHERE {where} ORDER BY created_us DESC, task_id DESC LIMIT ?",
            [*params, max(0, limit)],
        )
        return [serde.loads(Task, r[0]) for r in rows]

    def delete_session(self, workspace_id: str, session_id: str) -> int:
        return self._db.execute(
            "DELETE FROM tasks WHERE workspace_id = ? AND session_id = ?", (workspace_id, session_id)
        )
