"""Headroom control plane: the Django project (settings, URLs) and its apps."""
