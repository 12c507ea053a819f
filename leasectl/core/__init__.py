"""The core: models, errors, configuration, the rule for untrusted text (no psycopg or Rich)."""
