"""Alembic revisions, one file each, in order."""
