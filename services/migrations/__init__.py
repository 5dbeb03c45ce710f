"""Alembic migrations of the service database (``privatize admin migrate`` or startup)."""
