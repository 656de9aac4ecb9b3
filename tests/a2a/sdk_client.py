"""Drive MAESTRO with the official A2A Python SDK (a2a-sdk, pinned by scripts/test), as an
external A2A client would: discover the card, stream a task to completion, read and list it,
cancel a running task, subscribe again after a disconnect, answer a question through
input-required, approve a tool call, receive push notifications on a small server. Prints one line per check; exits non-zero on the first
failure.

With BINDING `JSONRPC-0.3` the client is the SDK's own 0.3 transport (the card's 0.3
interface), which sends the 0.3 method names and shapes.

usage: sdk_client.py BASE_URL TOKEN BINDING   (BINDING: JSONRPC, HTTP+JSON or JSONRPC-0.3)
"""
import asyncio
import json
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory, create_client
from a2a.types import (CancelTaskRequest, DeleteTaskPushNotificationConfigRequest,
                       GetTaskPushNotificationConfigRequest, GetTaskRequest,
                       ListTaskPushNotificationConfigsRequest, ListTasksRequest, Message, Part,
                       Role, SendMessageConfiguration, SendMessageRequest,
                       SubscribeToTaskRequest, TaskPushNotificationConfig, TaskState)
from google.protobuf import struct_pb2


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}", flush=True)


def msg(text, task_id=None, data=None):
    parts = [Part(text=text)] if data is None else [Part(data=data)]
    m = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=parts)
    if task_id:
        m.task_id = task_id
    return m


async def last_task(events):
    """The task as the stream's events leave it: (id, last state)."""
    task_id, state = None, None
    async for ev in events:
        kind = ev.WhichOneof("payload")
        if kind == "task":
            task_id, state = ev.task.id, ev.task.status.state
        elif kind == "status_update":
            state = ev.status_update.status.state
    return task_id, state


def push_receiver():
    """A small HTTP server that keeps every push it gets: (token header, JSON body)."""
    received = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            received.append((self.headers.get("X-A2A-Notification-Token"), json.loads(body)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_port}/push", received


async def pushes(client, blocking):
    """A push config set on a task waiting for an answer; the answer's completion is pushed."""
    url, received = push_receiver()
    waiting, state = await last_task(client.send_message(SendMessageRequest(message=msg("ask me once more"))))
    check(state == TaskState.TASK_STATE_INPUT_REQUIRED, "a task to be pushed about")
    made = await client.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=waiting, id="sdk", url=url, token="tok-sdk"))
    check(made.id == "sdk" and made.url == url, "CreateTaskPushNotificationConfig")
    got = await client.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=waiting, id="sdk"))
    check(got.token == "tok-sdk", "GetTaskPushNotificationConfig")
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=waiting))
    check([c.id for c in listed.configs] == ["sdk"], "ListTaskPushNotificationConfigs")
    await last_task(blocking.send_message(SendMessageRequest(message=msg("Green.", task_id=waiting))))
    for _ in range(200):
        ends = [body for token, body in received
                if token == "tok-sdk" and body.get("task", {}).get("status", {}).get("state") == "TASK_STATE_COMPLETED"]
        if ends:
            break
        await asyncio.sleep(0.1)
    check(ends and ends[0]["task"]["id"] == waiting, "the completion is pushed with the token")
    check(ends[0]["task"]["artifacts"][0]["parts"][0]["text"] == "blue it is", "the push carries the result")
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=waiting, id="sdk"))
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=waiting))
    check(len(listed.configs) == 0, "DeleteTaskPushNotificationConfig")


async def legacy(base, token):
    """The SDK's 0.3 JSON-RPC transport: send, stream, get, answer, cancel, push configs."""
    http = httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {token}"})
    card = await A2ACardResolver(http, base).get_agent_card()
    old = [i for i in card.supported_interfaces if i.protocol_version.startswith("0.3")]
    check([i.protocol_binding for i in old] == ["JSONRPC"], "the card offers JSON-RPC 0.3")
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(old)
    factory = lambda streaming: ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
    client, blocking = factory(True).create(card), factory(False).create(card)
    check(type(client._transport).__module__.startswith("a2a.compat.v0_3"), "a 0.3 transport")
    task_id, state = await last_task(client.send_message(SendMessageRequest(message=msg("finish now"))))
    check(state == TaskState.TASK_STATE_COMPLETED, "0.3: a streamed task completes")
    got = await client.get_task(GetTaskRequest(id=task_id))
    check(got.artifacts[0].parts[0].text == "finished", "0.3: tasks/get reads the result")
    asked, state = await last_task(blocking.send_message(SendMessageRequest(message=msg("ask me, old client"))))
    check(state == TaskState.TASK_STATE_INPUT_REQUIRED, "0.3: a question is input-required")
    _, state = await last_task(blocking.send_message(SendMessageRequest(message=msg("Blue.", task_id=asked))))
    check(state == TaskState.TASK_STATE_COMPLETED, "0.3: the answer completes it")
    slow = None
    async for ev in blocking.send_message(SendMessageRequest(
            message=msg("slow work"), configuration=SendMessageConfiguration(return_immediately=True))):
        slow = ev.task.id
    made = await client.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=slow, id="old", url="https://example.com/hook", token="t"))
    check(made.id == "old", "0.3: tasks/pushNotificationConfig/set")
    listed = await client.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=slow))
    check([c.id for c in listed.configs] == ["old"], "0.3: tasks/pushNotificationConfig/list")
    await client.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=slow, id="old"))
    canceled = await client.cancel_task(CancelTaskRequest(id=slow))
    check(canceled.status.state == TaskState.TASK_STATE_CANCELED, "0.3: tasks/cancel cancels it")
    await http.aclose()


async def main(base, token, binding):
    if binding == "JSONRPC-0.3":
        return await legacy(base, token)
    http = httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {token}"})
    config = lambda streaming: ClientConfig(httpx_client=http, streaming=streaming,
                                            supported_protocol_bindings=[binding])
    client = await create_client(base, client_config=config(True))
    blocking = await create_client(base, client_config=config(False))
    card = await client.get_card() if hasattr(client, "get_card") else None
    check(card is None or card.name == "MAESTRO", "the card is MAESTRO's")

    # Streaming send to completion; the reply's text arrives as artifact chunks.
    kinds, task_id, state = [], None, None
    async for ev in client.send_message(SendMessageRequest(message=msg("finish now"))):
        kind = ev.WhichOneof("payload")
        kinds.append(kind)
        if kind == "task":
            # The task may be over before the stream opens: its snapshot then says so.
            task_id, state = ev.task.id, ev.task.status.state
        if kind == "status_update":
            state = ev.status_update.status.state
    check(kinds[0] == "task", f"a streamed task: {kinds[:4]}...")
    check(state == TaskState.TASK_STATE_COMPLETED, "the stream ends completed")

    got = await client.get_task(GetTaskRequest(id=task_id, history_length=1))
    check(got.status.state == TaskState.TASK_STATE_COMPLETED and len(got.history) == 1,
          "GetTask with historyLength")
    check(got.artifacts[0].parts[0].text == "finished", "the result is an artifact")
    page = await client.list_tasks(ListTasksRequest(page_size=10))
    check(any(t.id == task_id for t in page.tasks), "ListTasks lists it")

    # A running task: sent without waiting, subscribed, disconnected, subscribed again, canceled.
    slow = None
    async for ev in blocking.send_message(SendMessageRequest(
            message=msg("slow work"), configuration=SendMessageConfiguration(return_immediately=True))):
        slow = ev.task.id
    check(slow is not None, "a task sent with returnImmediately")
    first = client.subscribe(SubscribeToTaskRequest(id=slow))
    ev = await first.__anext__()
    check(ev.WhichOneof("payload") == "task", "a subscription opens with the task")
    await first.aclose()  # the client goes away
    again = client.subscribe(SubscribeToTaskRequest(id=slow))
    ev = await again.__anext__()
    check(ev.task.id == slow, "subscribing again after a disconnect")
    async for ev in again:
        if ev.WhichOneof("payload") == "artifact_update":
            break
    check(ev.artifact_update.artifact.parts[0].text != "", "the reply's text streams as artifact chunks")
    canceled = await client.cancel_task(CancelTaskRequest(id=slow))
    check(canceled.status.state == TaskState.TASK_STATE_CANCELED, "CancelTask cancels it")
    state = None
    async for ev in again:
        if ev.WhichOneof("payload") == "status_update":
            state = ev.status_update.status.state
    check(state == TaskState.TASK_STATE_CANCELED, "the subscriber sees the cancel")

    # A question, answered through input-required.
    asked, state = await last_task(client.send_message(SendMessageRequest(message=msg("ask me something"))))
    check(state == TaskState.TASK_STATE_INPUT_REQUIRED, "a question is input-required")
    _, state = await last_task(client.send_message(SendMessageRequest(message=msg("Blue.", task_id=asked))))
    check(state == TaskState.TASK_STATE_COMPLETED, "the answer completes it")

    # A tool call waiting for approval, approved by a data part.
    waiting, state = await last_task(client.send_message(SendMessageRequest(message=msg("write the note"))))
    check(state == TaskState.TASK_STATE_INPUT_REQUIRED, "a tool call waits for approval")
    task = await client.get_task(GetTaskRequest(id=waiting))
    items = task.status.message.parts[1].data.struct_value["requiredActions"]
    rid = items[0]["id"]
    decision = struct_pb2.Value()
    decision.struct_value.update({"decisions": [{"requiredActionId": rid, "decision": "approve"}]})
    _, state = await last_task(client.send_message(SendMessageRequest(message=msg("", task_id=waiting, data=decision))))
    check(state == TaskState.TASK_STATE_COMPLETED, "the approval completes it")
    await pushes(client, blocking)
    await http.aclose()


asyncio.run(main(*sys.argv[1:4]))
