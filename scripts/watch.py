#!/usr/bin/env python3
"""Follow a MAESTRO task stream (SSE) and print it readably until the job settles.

usage: watch.py BASE_URL TOKEN TASK_ID [JOB_ID]

With JOB_ID, only that job's stream (a continued or followed-up task's new job).
"""
import json
import sys
import urllib.request

TERMINAL = {"succeeded", "failed", "cancelled", "waiting_human"}


def main() -> int:
    base, token, task = sys.argv[1:4]
    path = f"/api/local/tasks/{task}/stream"
    if len(sys.argv) > 4:
        path = f"/api/local/tasks/{task}/jobs/{sys.argv[4]}/stream"
    request = urllib.request.Request(
        f"{base}{path}",
        headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"},
    )
    event, data, in_text = None, [], False
    with urllib.request.urlopen(request, timeout=120) as stream:
        for raw in stream:
            line = raw.decode("utf-8").rstrip("\r\n")
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif line == "" and event:
                item = json.loads("\n".join(data))
                in_text, done = show(event, item, in_text)
                event, data = None, []
                if done:
                    return 0
    return 1


def show(event: str, item: dict, in_text: bool):
    if event == "delta":
        if item.get("type") == "text":
            if not in_text:
                print("  assistant> ", end="")
            print(item["text"], end="", flush=True)
            return True, False
        return in_text, False
    if in_text:
        print()
    payload = item["payload"]
    seq = item["seq"]
    if event == "job_state":
        extra = payload.get("result") or payload.get("error") or payload.get("worker_id") or ""
        print(f"[{seq:>3}] job {payload['status']} (attempt {payload['attempt']}) {extra}")
        return False, payload["status"] in TERMINAL
    if event == "message":
        text = (payload.get("content") or "").strip().replace("\n", " ")
        print(f"[{seq:>3}] {payload['role']} message: {text[:100]}")
    elif event == "tool_call":
        print(f"[{seq:>3}] tool call {payload['name']}({payload['arguments'][:80]})")
    elif event == "tool_result":
        text = payload["content"].strip().replace("\n", " | ")
        print(f"[{seq:>3}] tool result ({'error' if payload['is_error'] else 'ok'}): {text[:100]}")
    elif event == "movement":
        print(f"[{seq:>3}] movement {payload['name']}" + (f" (piece {payload['piece']})" if payload.get("piece") else ""))
    elif event == "job_continued":
        print(f"[{seq:>3}] continues job {payload['from_job_id']}" + (f" with piece {payload['piece']}" if payload.get("piece") else ""))
    elif event == "replay":
        kept = "kept" if payload["same_piece"] else "dropped (another piece)"
        print(f"[{seq:>3}] replayed {payload['messages']} messages of {payload['threads']} earlier job(s); last job's transitions {kept}")
    return False, False


if __name__ == "__main__":
    sys.exit(main())
