"""Inputs the fuzzer (fuzz/, `make fuzz`) found to break a decoder's contract, replayed
through the same target functions, plus a short coverage-guided run of every target.

Each case failed before its fix; the comment says what the user would have seen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]

# Three pull bodies as the fuzzer left them (a flag byte for the CRC check, then records).
# COMPRESSED set but the body is not zlib: zlib.error escaped the client's filter and
# failed the whole pull (every later message of the queue stuck).
_CORRUPT_COMPRESSED = b'\x00\x00\x00\x00z\xda\xa3 \xa70\xceoT\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x7f\x00\x00\x01\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x7f\x00\x00\x01\x00\x00*\x9f\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0cx/\xab\xa8\xa0=\x00\x00@\x1b.\xe1\x06orders\x00\rTAGS\x01a\x02KEYS\x01k'
# Properties that are not UTF-8: the recovery walk kept the record, the reader raised
# UnicodeDecodeError (Java decodes with replacement characters).
_NON_UTF8_PROPERTIES = b'\x00\x00\x00\x00z\xda\xa3 \xa70\xceoT\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x7f\x00\x00\x01\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x7f\x00\x00\x01\x00\x00*\x9f\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0cx\x9c\xab\xa8\xa0=\x00\x00@\x1b.\xe1\x06orders\x00\rTAGS\x01a\x02KEY\xa9\xa9\xa9\xa9\xa9\xa9\xa9\xa9\xa9\xa9\xa9\xa9\xa9\xa9\xa9\xa9S\x01k'
# A negative CommitLog offset and a corrupt body: logging the message's id raised.
_NEGATIVE_OFFSET = b'\x00\x00\x00\x00z\xda\xa3 \xa70\xceoT\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xfb\xff\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x7f\x00\x00\x01\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x7f\x00\x00\x01\x00\x00*\x9f\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0cx\x9c\xab\xa8\xa0=\x00\x00\xe1@\x1b.\x06orders\x00\rTAGS\x01a\x02KEYS\x01k'

CASES = [
    pytest.param("records", _CORRUPT_COMPRESSED, id="records-corrupt-compressed-body"),
    pytest.param("records", _NON_UTF8_PROPERTIES, id="records-non-utf8-properties"),
    pytest.param("records", _NEGATIVE_OFFSET, id="records-negative-offset"),
    # An offset msgId naming a negative offset decoded "fine" and then failed when shown.
    pytest.param("message_ids", b"7F00000A010000A9F000000000001000", id="msgid-negative-offset"),
    # Whitespace inside a 56-character id: bytes.fromhex skipped it and read an IPv4 id (CI's short fuzz).
    pytest.param("message_ids", b"7F00000100002A9F" + b"\n" * 24 + b"0000000000001000", id="msgid-inner-whitespace"),
    # fastjson object keys holding objects: TypeError while sorting / hashing the key.
    pytest.param("json_bodies", b'{"t":{{"b":"x",{"b":"y","q":0}:5,"t":"T"}:5}}', id="json-key-with-object-key"),
    pytest.param("json_bodies", b'{"t":{{"b":"x","q":{"z":0}}:0}}', id="json-key-with-object-value"),
    # Nesting past the interpreter's recursion limit: RecursionError instead of a decode error.
    pytest.param("json_bodies", b"{0:" * 3000, id="json-deep-fastjson-form"),
    pytest.param("json_bodies", b"[" * 100_000, id="json-deep-standard-form"),
    # Numbers the round trip changed: NaN (never equal to itself), a float key written back as a
    # string key, a number beyond a double (written as Infinity, which is not JSON), an int past
    # Python's digit limit (ValueError, not a decode error). The last CI run's short fuzz found one.
    pytest.param("json_bodies", b"NaN", id="json-nan"),
    pytest.param("json_bodies", b"{1.5:1}", id="json-float-key"),
    pytest.param("json_bodies", b"{1e400:1}", id="json-infinite-key"),
    pytest.param("json_bodies", b"[1e400]", id="json-infinite-value"),
    pytest.param("json_bodies", b"{1:" + b"9" * 5000 + b"}", id="json-int-past-digit-limit"),
    pytest.param("json_header", b"[" * 100_000, id="json-header-deep"),
    pytest.param("json_header", b'{"code":1e400}', id="json-header-infinite-code"),
    # A raw control character in a key: the compiled decoder took the header the Python one refuses.
    pytest.param("json_header", b'{"code":0,"flag":1,"language":"PYTHON","opaq\x1ae":0,"remark":"ok"}',
                 id="json-header-control-character-in-key"),
    # A heartbeat body that is JSON but not an object: TypeError instead of a bad-request answer.
    pytest.param("heartbeats", b"1", id="heartbeat-not-an-object"),
    pytest.param("heartbeats", b'{"consumerDataSet":5}', id="heartbeat-wrong-shape"),
]


@pytest.mark.parametrize("target,data", CASES)
def test_found_input_keeps_the_contract(target, data):
    TARGETS[target].run(data)


@pytest.mark.slow  # 25 s or more (make test-slow)
def test_every_target_survives_a_short_fuzzing_run(tmp_path):
    """20 000 coverage-guided inputs per target (`make fuzz` runs a million)."""
    pytest.importorskip("atheris") if os.environ.get("CI") != "true" else None
    proc = subprocess.run([sys.executable, "-m", "fuzz.run", "--runs", "20000", "--work-dir", str(tmp_path), "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    outcomes = json.loads(proc.stdout) if proc.stdout.strip().startswith("[") else []
    failed = [o for o in outcomes if not o["ok"]]
    assert proc.returncode == 0 and len(outcomes) == len(TARGETS) and not failed, (
        failed or proc.stdout[-3000:] + proc.stderr[-3000:])
    assert all(o["inputs"] >= 20000 and o["coverage"] > 0 for o in outcomes), outcomes
