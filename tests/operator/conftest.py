"""The operator package lives in operator/ferrymq_operator (not installed by pip: the image
copies it); make it importable for these tests."""

import sys
from pathlib import Path

OPERATOR_DIR = Path(__file__).resolve().parents[2] / "operator"
if str(OPERATOR_DIR) not in sys.path:
    sys.path.insert(0, str(OPERATOR_DIR))
