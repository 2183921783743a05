"""TaskStore on DynamoDB: delegated tasks in the sessions table, one partition per workspace.

Items under pk `WS#{ws}#TASKS`:

- `TASK#{task}`: the task (`doc`), its `version` and `active` (1 until its status is terminal);
- `LIST#{newest_first(created_at)}#{task}`: a small pointer (`task_id`, `session_id`, `active`)
  that a Query reads in "newest first" order, filtering on session and activity, before one
  BatchGetItem fetches the documents;
- `ACTIVE` and `ACTIVE#SESSION#{session}`: the workspace's and the session's count of active
  tasks (`active`).

The caps hold under concurrency because the counters move in the same TransactWriteItems as the
task: create puts the task and its pointer (`attribute_not_exists`) and adds 1 to both counters on
the condition that each is below its cap; a save that moves a task to a terminal status writes it
(on its version, and `active = 1`) with the pointer's `active` set to 0 and both counters less 1;
delete_session deletes each task with its pointer and, for an active one, the two decrements. A
task that has ended is never active again (a save back to a live status is refused), so each
task adds to the counters once and takes away once. Two transactions on one counter at once may
cancel one another (TransactionConflict): the cancelled one is sent again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError

from shared import serde
from shared.adapters.aws.dynamodb.retry import RETRIES, Next, cancellation_codes, error_code, until_done
from shared.adapters.aws.dynamodb.table import (
    Item,
    Table,
    dump_doc,
    item_key,
    newest_first,
    number,
    string,
    ts,
    ws_prefix,
)
from shared.clock import utcnow
from shared.errors import SigilError, StaleTask, TaskCapReached
from shared.models.tasks import Task

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

_CHECK_FAILED: Final = "ConditionalCheckFailed"


class DynamoTaskStore(Table):
    def __init__(
        self, table_name: str, *, client: DynamoDBClient | None = None, region: str | None = None
    ) -> None:
        super().__init__(table_name, client, region)

    # ------------------------------------------------------------------ keys

    @staticmethod
    def _pk(workspace_id: str) -> str:
        return f"{ws_prefix(workspace_id)}#TASKS"

    def _task_key(self, workspace_id: str, task_id: str) -> Item:
        return item_key(self._pk(workspace_id), f"TASK#{task_id}")

    def _pointer_key(self, task: Task) -> Item:
        return item_key(self._pk(task.workspace_id), f"LIST#{newest_first(task.created_at)}#{task.id}")

    def _counter_keys(self, workspace_id: str, session_id: str) -> tuple[Item, Item]:
        pk = self._pk(workspace_id)
        return item_key(pk, f"ACTIVE#SESSION#{session_id}"), item_key(pk, "ACTIVE")

    def _task_item(self, task: Task) -> Item:
        return self._task_key(task.workspace_id, task.id) | {
            "doc": dump_doc(task),
            "version": number(task.version),
            "active": number(int(not task.terminal)),
            "session_id": string(task.session_id),
            "created": string(ts(task.created_at)),
        }

    def _counter_update(self, key: Item, delta: int, cap: int | None = None) -> TransactWriteItemTypeDef:
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": key,
            "UpdateExpression": "ADD active :delta",
            "ExpressionAttributeValues": {":delta": number(delta)},
        }
        if cap is not None:
            update["ConditionExpression"] = "attribute_not_exists(active) OR active < :cap"
            update["ExpressionAttributeValues"][":cap"] = number(cap)
        return {"Update": update}  # type: ignore[typeddict-item]

    # ------------------------------------------------------------------ the port

    def create(self, task: Task, *, max_per_session: int, max_per_workspace: int) -> Task:
        active = not task.terminal
        if active and max_per_session <= 0:
            raise TaskCapReached(f"session {task.session_id} may run no tasks (its cap is {max_per_session})")
        if active and max_per_workspace <= 0:
            raise TaskCapReached(
                f"workspace {task.workspace_id} may run no tasks (its cap is {max_per_workspace})"
            )
        session_counter, workspace_counter = self._counter_keys(task.workspace_id, task.session_id)
        pointer = self._pointer_key(task) | {
            "task_id": string(task.id),
            "session_id": string(task.session_id),
            "active": number(int(active)),
        }
        actions: list[TransactWriteItemTypeDef] = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": self._task_item(task),
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            {
                "Put": {
                    "TableName": self.table,
                    "Item": pointer,
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ]
        if active:
            actions.append(self._counter_update(session_counter, 1, max_per_session))
            actions.append(self._counter_update(workspace_counter, 1, max_per_workspace))
        refused: list[SigilError] = []
        existing: list[Task] = []

        def attempt() -> Next:
            try:
                self.client.transact_write_items(TransactItems=actions)
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                codes = cancellation_codes(exc) + ["None"] * 4
                if codes[0] == _CHECK_FAILED:
                    # A retried create (the delegating turn redelivered): the task it made, once.
                    stored = self.get(task.workspace_id, task.id)
                    if stored is None:
                        return Next.BACK_OFF
                    existing.append(stored)
                    return Next.DONE
                if codes[2] == _CHECK_FAILED:
                    refused.append(
                        TaskCapReached(
                            f"session {task.session_id} already runs {max_per_session} tasks "
                            f"(at most {max_per_session})"
                        )
                    )
                    return Next.DONE
                if codes[3] == _CHECK_FAILED:
                    refused.append(
                        TaskCapReached(
                            f"workspace {task.workspace_id} already runs {max_per_workspace} tasks "
                            f"(at most {max_per_workspace})"
                        )
                    )
                    return Next.DONE
                # A conflicting transaction on a counter, or throttling: all of it again.
                return Next.BACK_OFF
            return Next.DONE

        if not until_done(attempt):
            raise SigilError(
                f"DynamoDB did not accept task {task.id} after {RETRIES} attempts", code="store_unavailable"
            )
        if refused:
            raise refused[0]
        return existing[0] if existing else task

    def get(self, workspace_id: str, task_id: str) -> Task | None:
        item = self.client.get_item(
            TableName=self.table, Key=self._task_key(workspace_id, task_id), ConsistentRead=True
        ).get("Item")
        return serde.loads(Task, item["doc"]["S"]) if item else None

    def save(self, task: Task) -> Task:
        stored = task.model_copy(update={"version": task.version + 1, "updated_at": utcnow()}, deep=True)
        put: dict[str, Any] = {
            "TableName": self.table,
            "Item": self._task_item(stored),
            # Its session and creation time are part of the condition: the counters it moves are
            # that session's, and its list pointer is keyed by that time.
            "ConditionExpression": "version = :version AND active = :active AND session_id = :session "
            "AND created = :created",
            "ExpressionAttributeValues": {
                ":version": number(task.version),
                ":active": number(1),
                ":session": string(task.session_id),
                ":created": string(ts(task.created_at)),
            },
        }
        ended = False

        def attempt() -> Next:
            nonlocal ended
            try:
                if stored.terminal:
                    self._end(stored, put)
                else:
                    self.client.put_item(**put)
                return Next.DONE
            except ClientError as exc:
                code = error_code(exc)
                if code == "ConditionalCheckFailedException":
                    ended = True
                    return Next.DONE
                if code != "TransactionCanceledException":
                    raise
                codes = cancellation_codes(exc)
                if codes and codes[0] == _CHECK_FAILED:
                    ended = True
                    return Next.DONE
                return Next.BACK_OFF

        if not until_done(attempt):
            raise SigilError(
                f"DynamoDB did not accept the save of task {task.id} after {RETRIES} attempts",
                code="store_unavailable",
            )
        if ended:
            # The version moved on, or the task had ended already: which one decides.
            self._save_ended(task, stored)
        return stored

    def _end(self, stored: Task, put: dict[str, Any]) -> None:
        """The transaction of a task's last active save: it, its pointer and both counters."""
        session_counter, workspace_counter = self._counter_keys(stored.workspace_id, stored.session_id)
        self.client.transact_write_items(
            TransactItems=[
                {"Put": put},  # type: ignore[typeddict-item]
                {
                    "Update": {
                        "TableName": self.table,
                        "Key": self._pointer_key(stored),
                        "UpdateExpression": "SET active = :zero",
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeValues": {":zero": number(0)},
                    }
                },
                self._counter_update(session_counter, -1),
                self._counter_update(workspace_counter, -1),
            ]
        )

    def _save_ended(self, task: Task, stored: Task) -> None:
        item = self.client.get_item(
            TableName=self.table, Key=self._task_key(task.workspace_id, task.id), ConsistentRead=True
        ).get("Item")
        if item is None:
            raise StaleTask(f"task {task.id} does not exist in workspace {task.workspace_id}")
        current = int(item["version"]["N"])
        if current != task.version:
            raise StaleTask(f"task {task.id} is at version {current}, not {task.version}")
        if item["session_id"]["S"] != task.session_id:
            raise ValueError(
                f"task {task.id} belongs to session {item['session_id']['S']}, not {task.session_id}"
            )
        if item["created"]["S"] != ts(task.created_at):
            raise ValueError(f"task {task.id}: created_at changed since it was created")
        if not stored.terminal:
            raise ValueError(f"task {task.id} has ended; it cannot be {stored.status} again")
        # An ended task saved again (its outcome delivered, say): no counter moves.
        try:
            self.client.put_item(
                TableName=self.table,
                Item=self._task_item(stored),
                ConditionExpression="version = :version AND active = :inactive",
                ExpressionAttributeValues={":version": number(task.version), ":inactive": number(0)},
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            raise StaleTask(f"task {task.id} is no longer at version {task.version}") from exc

    def list_tasks(
        self,
        workspace_id: str,
        *,
        session_id: str | None = None,
        active: bool | None = None,
        limit: int = 100,
    ) -> list[Task]:
        filters: list[str] = []
        values: dict[str, Any] = {":pk": string(self._pk(workspace_id)), ":list": string("LIST#")}
        if session_id is not None:
            filters.append("session_id = :session")
            values[":session"] = string(session_id)
        if active is not None:
            filters.append("active = :active")
            values[":active"] = number(int(active))
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :list)",
            "ExpressionAttributeValues": values,
            "ProjectionExpression": "task_id",
            "ConsistentRead": True,
        }
        if filters:
            params["FilterExpression"] = " AND ".join(filters)
        ids = [item["task_id"]["S"] for item in self.query(limit=max(0, limit), **params)]
        found: dict[str, Task] = {
            item["sk"]["S"]: serde.loads(Task, item["doc"]["S"])
            for item in self.batch_get([self._task_key(workspace_id, i) for i in ids])
        }
        return [found[f"TASK#{i}"] for i in ids if f"TASK#{i}" in found]

    def delete_session(self, workspace_id: str, session_id: str) -> int:
        params: dict[str, Any] = {
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :list)",
            "FilterExpression": "session_id = :session",
            "ExpressionAttributeValues": {
                ":pk": string(self._pk(workspace_id)),
                ":list": string("LIST#"),
                ":session": string(session_id),
            },
            "ConsistentRead": True,
        }
        deleted = sum(self._delete(workspace_id, session_id, p) for p in list(self.query(**params)))
        session_counter, _ = self._counter_keys(workspace_id, session_id)
        self.client.delete_item(TableName=self.table, Key=session_counter)
        return deleted

    def _delete(self, workspace_id: str, session_id: str, pointer: Item) -> bool:
        """One task, its pointer and (while it was active) its place in the counters, together."""
        task_key = self._task_key(workspace_id, pointer["task_id"]["S"])
        pointer_key = item_key(pointer["pk"]["S"], pointer["sk"]["S"])
        session_counter, workspace_counter = self._counter_keys(workspace_id, session_id)
        found = False

        def attempt() -> Next:
            nonlocal found
            item = self.client.get_item(TableName=self.table, Key=task_key, ConsistentRead=True).get("Item")
            if item is None:
                # Its task went already (an erasure cut short): only the pointer is left.
                self.client.delete_item(TableName=self.table, Key=pointer_key)
                return Next.DONE
            found = True
            actions: list[TransactWriteItemTypeDef] = [
                {
                    "Delete": {
                        "TableName": self.table,
                        "Key": task_key,
                        # As read: a save in between (ending the task) sends it round again.
                        "ConditionExpression": "version = :version",
                        "ExpressionAttributeValues": {":version": item["version"]},
                    }
                },
                {"Delete": {"TableName": self.table, "Key": pointer_key}},
            ]
            if item["active"]["N"] == "1":
                actions += [
                    self._counter_update(session_counter, -1),
                    self._counter_update(workspace_counter, -1),
                ]
            try:
                self.client.transact_write_items(TransactItems=actions)
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                return Next.BACK_OFF
            return Next.DONE

        if not until_done(attempt):
            raise SigilError(
                f"DynamoDB did not delete task {pointer['task_id']['S']} after {RETRIES} attempts",
                code="store_unavailable",
            )
        return found
