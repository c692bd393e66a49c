"""One fuzz target under atheris (libFuzzer): ``python -m fuzz.engine <target> [libFuzzer flags]``.

Run by ``fuzz.run``, one process per target. FerryMQ's modules are imported with atheris'
coverage instrumentation; the address space is capped so that an input making a decoder
allocate without bound fails as MemoryError (a finding) instead of swapping the machine.
"""

from __future__ import annotations

import logging
import os
import resource
import sys

import atheris

with atheris.instrument_imports(include=["ferrymq", "fuzz"]):
    from fuzz.targets import TARGETS

# Headroom over what the interpreter and the instrumented modules already map.
ALLOCATION_HEADROOM = int(os.environ.get("FERRYMQ_FUZZ_HEADROOM_MB", "1024")) * 1024 * 1024


def _cap_address_space() -> None:
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * resource.getpagesize()
    limit = mapped + ALLOCATION_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: python -m fuzz.engine <{'|'.join(TARGETS)}> [libFuzzer flags]")
    target = TARGETS[sys.argv.pop(1)]
    logging.disable(logging.CRITICAL)  # decoders log what they skip; a million times is noise
    _cap_address_space()
    atheris.Setup(sys.argv, target.run)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
