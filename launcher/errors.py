"""The error kinds launcher's modules raise, and the exit statuses they map to.

They are defined below launcher/, in topology/errors.py, so that the topology library's own
errors (TopologyError, TopologyInputError) are GantryErrors too; launcher's modules import
them from here.
"""

from __future__ import annotations

from topology.errors import (
    BRIEF_LIMIT,
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    EXIT_OK,
    GantryError,
    UserInputError,
    brief,
    shown,
)

__all__ = [
    "BRIEF_LIMIT",
    "EXIT_BAD_INPUT",
    "EXIT_FAILURE",
    "EXIT_OK",
    "GantryError",
    "UserInputError",
    "brief",
    "shown",
]
