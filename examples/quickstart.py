"""README's first example: a job enqueued inside your transaction, its handler, a worker."""

import sys

import psycopg

from leasectl import JobContext, enqueue


def welcome(ctx: JobContext) -> None:  # returning completes the job; raising retries it
    print(f"job {ctx.job.id}: welcome mail to {ctx.payload['email']}", flush=True)


if __name__ == "__main__":  # python -m examples.quickstart DSN
    with psycopg.connect(sys.argv[1]) as conn, conn.transaction():
        conn.execute("CREATE TABLE IF NOT EXISTS users (email text)")
        conn.execute("INSERT INTO users VALUES (%s)", ["ada@example.com"])
        enqueue(conn, queue="emails", payload={"email": "ada@example.com"})
