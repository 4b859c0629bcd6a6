"""The kit every app shares."""
