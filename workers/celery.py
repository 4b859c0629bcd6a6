"""The entry point worker and beat processes start from: ``celery -A workers worker`` and
``celery -A workers beat`` find the app here. The app and its configuration are the control
plane's (``controlplane/celery.py``); the tasks live next to their services in each app."""

from __future__ import annotations

from controlplane.celery import app, ping

__all__ = ["app", "ping"]
