"""Fixtures of the Python tests: the anyio backend, and the protocol era a client uses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The tests import their shared helpers as a plain module.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    """The SDK's `Client(mode=...)`: the legacy initialize handshake, or discover-first."""
    return request.param
