"""Shared paths for the ingest tests (fixtures live in tests/fixtures/, never in ../shared)."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CORPUS = FIXTURES / "corpus"
ERA_LOGS = FIXTURES / "logs"
