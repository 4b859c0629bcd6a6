"""Binding sentences: what holds a plan where it is, in words an operator can act on."""

from __future__ import annotations

from planner.placement.model import Instance, Plan


def binding_sentences(instance: Instance, plan: Plan) -> list[str]:
    """Sentences naming the constraints that bind in ``plan``."""
    return []
