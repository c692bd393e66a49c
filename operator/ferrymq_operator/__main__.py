"""``python -m ferrymq_operator``: run the operator (what the image's entrypoint does).

FERRYMQ_WATCH_NAMESPACES: comma-separated namespaces to watch (default: all namespaces).
FERRYMQ_LIVENESS_PORT: serve kopf's liveness endpoint /healthz on this port (default: off).
Other settings: see ``ferrymq_operator.settings``.
"""

from __future__ import annotations

import os
import sys


def kopf_args(env: dict[str, str]) -> list[str]:
    namespaces = [n.strip() for n in env.get("FERRYMQ_WATCH_NAMESPACES", "").split(",") if n.strip()]
    scope = [f"--namespace={n}" for n in namespaces] or ["--all-namespaces"]
    # FERRYMQ_LIVENESS_PORT: kopf's own /healthz (the chart's liveness probe).
    port = env.get("FERRYMQ_LIVENESS_PORT", "").strip()
    liveness = [f"--liveness=http://0.0.0.0:{port}/healthz"] if port else []
    # --standalone: no kopf peering (not a lock, and its CRDs would be needed): with several
    # replicas only the Lease holder runs handlers (leadership.py).
    return ["run", "--standalone", *scope, *liveness, "-m", "ferrymq_operator.handlers"]


def main() -> int:
    from kopf.cli import main as kopf_main
    sys.argv = ["kopf", *kopf_args(os.environ)]
    return kopf_main()


if __name__ == "__main__":
    sys.exit(main())
