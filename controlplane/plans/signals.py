"""What the plans app announces to the apps after it.

``plan_activated`` is sent with ``plan=`` inside the transaction that makes the plan active,
so a receiver's writes (emission's outbox rows) commit or roll back with the activation. The
plans app does not know who listens: ``controlplane.pipeline`` connects the next link.
"""

from __future__ import annotations

from django.dispatch import Signal

plan_activated = Signal()
