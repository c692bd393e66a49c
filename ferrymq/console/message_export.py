"""A result set as a file: JSON lines (one message per line, as the API shows it) or CSV
(one row per message, the body as text or, when it is not UTF-8, base64)."""

from __future__ import annotations

import csv
import datetime
import io
import json

FORMATS = {"jsonl": "application/x-ndjson", "csv": "text/csv"}

CSV_COLUMNS = ["topic", "queueId", "queueOffset", "msgId", "offsetMsgId", "tags", "keys", "storeTime", "bornTime",
               "reconsumeTimes", "bodySize", "bodyEncoding", "body", "properties"]


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")


def header(fmt: str) -> str:
    return _csv_line(CSV_COLUMNS) if fmt == "csv" else ""


def line(fmt: str, message: dict) -> str:
    if fmt == "jsonl":
        return json.dumps(message, ensure_ascii=False, sort_keys=True) + "\n"
    body = message["body"] if message["bodyEncoding"] == "utf-8" else message["bodyBase64"]
    return _csv_line([message["topic"], message["queueId"], message["queueOffset"], message["msgId"],
                      message["offsetMsgId"], message["tags"] or "", " ".join(message["keys"]),
                      _iso(message["storeTimestamp"]), _iso(message["bornTimestamp"]), message["reconsumeTimes"],
                      message["bodySize"], "utf-8" if message["bodyEncoding"] == "utf-8" else "base64", body,
                      json.dumps(message["properties"], ensure_ascii=False, sort_keys=True)])


def _csv_line(cells: list) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(cells)
    return out.getvalue()
