"""The data layer: the only package that talks to PostgreSQL (psycopg, psycopg_pool).

``connection`` opens the pool and maps every database failure to a typed one-line error;
``work`` is the worker's hot path, ``operations`` what producers, operators, the watcher and
the CLI run, ``console`` the console's reads, ``grants`` least-privilege grants, ``dsn`` DSN
parsing, ``sql/`` every statement, ``embedded/`` the zero-setup local server. Methods return
models or plain rows, never sentences. (Nothing is imported here, so that importing one
module does not import them all.)
"""
