"""The data layer: the only package that talks to PostgreSQL."""
